"""The scheduler simulation's CPU (issues 31 and 33): what a 70B ``solve`` spends simulating, memo on and off, and a
fixed set of runs, as ratios to a bare CP-SAT import measured in the same run.

    python bench/sim_bench.py                    # median of 3 rounds
    python bench/sim_bench.py --repeats 5 examples/requirements/mixtral-serving.yaml

Each round, interleaved so a machine whose load drifts moves the baseline with what it is compared to:

* the baseline: ``python -c "from ortools.sat.python import cp_model"`` in a child (user + system CPU);
* ``solve FILE --json`` in this process twice, with :data:`clusterplan.evaluation.simulated.RUN_MEMO` off (size 0)
  and on (emptied first): the CPU inside ``schedule_sim.simulate`` and the number of runs it made. The two must print
  the same JSON (checked: the memo gives back exactly the run a fresh simulation makes);
* the fixed runs: the first replica that solve simulated, closed-loop at 64 clients and
  Poisson at two loads (``estimate --arrival closed:64`` and the planner's check), 5,000 requests each, simulated
  directly.

Figures are CPU seconds (``time.process_time`` in this process), each the median over the rounds; ``x base``
divides by the baseline's median.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from clusterplan.cli import run as run_command
from clusterplan.evaluation import simulated
from clusterplan.physics import schedule_sim as sim

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "requirements" / "70b-serving.yaml"
FIXED_REQUESTS = 5000


def _child_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def baseline_cpu_s() -> float:
    """CPU seconds of a bare CP-SAT import in a fresh interpreter."""
    cpu0 = _child_cpu_s()
    subprocess.run([sys.executable, "-c", "from ortools.sat.python import cp_model"], check=True, cwd=ROOT)
    return _child_cpu_s() - cpu0


@contextlib.contextmanager
def counted(into: list[float], replicas: list[sim.SimReplica]) -> Iterator[None]:
    """``schedule_sim.simulate`` timed while the block runs: each call's CPU seconds appended to ``into``, each
    replica to ``replicas``."""
    original: Callable[..., sim.SimResult] = sim.simulate

    def timed(replica: sim.SimReplica, *args: object) -> sim.SimResult:
        t0 = time.process_time()
        out = original(replica, *args)
        into.append(time.process_time() - t0)
        replicas.append(replica)
        return out

    sim.simulate = timed
    try:
        yield
    finally:
        sim.simulate = original


def solve(file: Path, memo_runs: int) -> tuple[float, int, float, str, list[sim.SimReplica]]:
    """(simulate CPU s, simulate calls, command CPU s, its JSON, the replicas simulated) of ``solve file --json``."""
    simulated.RUN_MEMO.clear()
    simulated.RUN_MEMO.runs = memo_runs
    calls: list[float] = []
    replicas: list[sim.SimReplica] = []
    out = io.StringIO()
    t0 = time.process_time()
    with counted(calls, replicas), contextlib.redirect_stdout(out):
        code = run_command(["solve", str(file), "--json"])
    total = time.process_time() - t0
    simulated.RUN_MEMO.runs = simulated.RUN_MEMO_RUNS
    if code not in (0, 1):
        raise SystemExit(f"solve {file} exited {code}")
    return sum(calls), len(calls), total, out.getvalue(), replicas


def fixed_runs_cpu_s(replica: sim.SimReplica) -> float:
    """CPU seconds of the fixed runs of ``replica`` (lengths uniform within +-50%): closed-loop at 64 clients,
    Poisson at 4 and 16 requests/s."""
    lengths = sim.Lengths(2000, 200, 0.5)
    arrivals = (
        sim.Arrival("closed", concurrency=64),
        sim.Arrival("poisson", rate_per_s=4.0),
        sim.Arrival("poisson", rate_per_s=16.0),
    )
    t0 = time.process_time()
    for arrival in arrivals:
        sim.simulate(replica, sim.draw_requests(arrival, lengths, FIXED_REQUESTS, 0), arrival)
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", type=Path, default=EXAMPLE, help="requirement file (default: the 70B example)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (the median is shown)")
    opts = ap.parse_args(argv)
    baseline_cpu_s()  # warm-up: bytecode and the OS file cache
    rows: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for _ in range(max(1, opts.repeats)):
        rows.setdefault("bare CP-SAT import (child)", []).append(baseline_cpu_s())
        texts: dict[str, str] = {}
        for label, size in (("memo off", 0), ("memo on", simulated.RUN_MEMO_RUNS)):
            sim_s, n, total, texts[label], replicas = solve(opts.file.resolve(), size)
            rows.setdefault(f"solve: simulate, {label}", []).append(sim_s)
            rows.setdefault(f"solve: whole command, {label}", []).append(total)
            counts[f"solve: simulate, {label}"] = n
        if texts["memo on"] != texts["memo off"]:
            raise SystemExit("the memo changed solve's output")
        rows.setdefault("fixed runs (3 x 5,000 requests)", []).append(fixed_runs_cpu_s(replicas[0]))
    base = statistics.median(rows["bare CP-SAT import (child)"])
    print(f"simulation benchmark ({opts.file.name}): median of {max(1, opts.repeats)} round(s), CPU seconds")
    print(f"{'figure':<36} {'CPU s':>7} {'x base':>7} {'runs':>5}")
    for name, values in rows.items():
        median = statistics.median(values)
        print(f"{name:<36} {median:7.3f} {median / base:7.2f} {counts.get(name, ''):>5}")
    off, on = (statistics.median(rows[f"solve: simulate, memo {x}"]) for x in ("off", "on"))
    print(f"simulate CPU with the memo / without: {on / off:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
