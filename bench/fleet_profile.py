"""Where a fleet's ``solve`` spends its time (issue 33): the first 1, 2, 4 and 8 workloads of
``bench/data/fleet-8.yaml``, planned in-process one after another.

    python bench/fleet_profile.py            # 1, 2, 4 and 8 workloads
    python bench/fleet_profile.py --sizes 8  # the whole fleet only

For each size: CPU seconds (user + system of this process, every thread) of the candidate tables and of the
plan, the number of CP-SAT solves, their CPU seconds and deterministic units (the time budget's currency: the
default ``--time-limit`` of 10 s is 2 units), and whether the explanation finished within the budget; then the
solves grouped by the step that made them (ranking, tie-breaks, layouts, binding checks, lost GPU types,
conflicts, trades). CPU seconds, not wall time: on a shared machine they move less.
"""

from __future__ import annotations

import argparse
import collections
import resource
import sys
import threading
import time
import traceback
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
FLEET = ROOT / "bench" / "data" / "fleet-8.yaml"
# The functions a solve's call stack is grouped by, innermost first (the first one found names the step).
STEPS = (
    "_layout_variants",
    "minimal_conflict",
    "core",
    "find_conflict",
    "least_target_factors",
    "_target_trade",
    "_why_lost",
    "mixes",
    "_checks",
    "comparison",
    "_more_designs",
    "_next_design",
)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def profile(path: Path) -> None:
    from clusterplan.catalog.load import load_catalog
    from clusterplan.pipeline import PlanOptions, Timings, plan_requirement
    from clusterplan.planner import solve
    from clusterplan.requirement.load import load_requirement

    log: list[tuple[str, float, float]] = []
    lock = threading.Lock()
    charged = solve.Planner._charged

    def logged(self: solve.Planner, solver: object, m: object) -> object:
        t0 = time.thread_time()  # CP-SAT solves on the calling thread (one worker)
        out = charged(self, solver, m)  # type: ignore[arg-type]
        names = [f.name for f in reversed(traceback.extract_stack())]
        step = next((n for n in names if n in STEPS), "other (on a thread)")
        with lock:
            log.append((step, time.thread_time() - t0, solver.response_proto.deterministic_time))  # type: ignore[attr-defined]
        return out

    solve.Planner._charged = logged  # type: ignore[assignment,method-assign]
    try:
        catalog = load_catalog()
        resolved = load_requirement(path, catalog)
        timings = Timings()
        cpu0 = _cpu_s()
        plan = plan_requirement(resolved, catalog, PlanOptions(), timings=timings)
        cpu = _cpu_s() - cpu0
    finally:
        solve.Planner._charged = charged  # type: ignore[method-assign]
    complete = plan.explanation.complete if plan.explanation is not None else None
    print(
        f"{len(resolved.requirement.workloads)} workload(s): plan {cpu:.2f} CPU s, {len(log)} CP-SAT solves "
        f"{sum(c for _, c, _ in log):.2f} CPU s {sum(u for _, _, u in log):.3f} units, {len(plan.designs)} designs, "
        f"explanation complete: {complete}"
    )
    steps: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for step, c, u in log:
        steps[step][0] += 1
        steps[step][1] += c
        steps[step][2] += u
    for step, (n, c, u) in sorted(steps.items(), key=lambda kv: -kv[1][1]):
        print(f"    {step:<22} {int(n):4d} solves {c:7.2f} CPU s {u:7.3f} units")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8], help="workloads (the fleet's first N)")
    opts = ap.parse_args(argv)
    doc = yaml.safe_load(FLEET.read_text())
    import tempfile

    with tempfile.TemporaryDirectory(prefix="clusterplan-fleet-") as tmp:
        for n in opts.sizes:
            part = dict(doc, workloads=doc["workloads"][:n], name=f"{doc['name']} (first {n})")
            path = Path(tmp) / f"fleet-{n}.yaml"
            path.write_text(yaml.safe_dump(part, sort_keys=False))
            profile(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
