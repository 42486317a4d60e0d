"""CPU seconds of candidate preparation inside one ``solve`` (issues 31 and 33), against another checkout if given.

    python bench/candidate_prep.py                          # 70B example, 3 runs
    python bench/candidate_prep.py --repeats 5 examples/requirements/13b-train-then-serve.yaml
    python bench/candidate_prep.py --against DIR            # DIR holds another tree's ``clusterplan`` package

Each run is a fresh Python process that runs ``clusterplan solve FILE`` in-process with every ``build_candidates``
call timed on its own thread's CPU clock: the requirement's own build (the first call) and the rebuilds of the
target trade's probes and verification (``pipeline.retargeter``, the others). It prints the medians of those two,
of the whole command's CPU seconds (user + sys of the process, CP-SAT's threads included) and the number of
rebuilds. With ``--against`` the runs of the two trees alternate, so a busy machine slows both alike; compare CPU
seconds, not wall time, on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "requirements" / "70b-serving.yaml"


def child(file: str) -> None:
    """One timed ``solve``: prints a JSON line of CPU seconds (the CLI's own output goes to /dev/null)."""
    import resource
    import time

    import clusterplan.pipeline as pipeline

    builds: list[float] = []
    inner = pipeline.build_candidates

    def timed(*args: object, **kwargs: object) -> object:
        t0 = time.thread_time()
        try:
            return inner(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            builds.append(time.thread_time() - t0)

    pipeline.build_candidates = timed  # type: ignore[assignment]
    from clusterplan.cli import main

    sys.argv = ["clusterplan", "solve", file, "--json"]
    real_stdout = sys.stdout
    with open(os.devnull, "w") as sink:
        sys.stdout = sink
        try:
            main()
        except SystemExit:
            pass
        finally:
            sys.stdout = real_stdout
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "module": pipeline.__file__,
                "initial_s": builds[0] if builds else 0.0,
                "rebuilds_s": sum(builds[1:]),
                "rebuilds": len(builds) - 1,
                "solve_cpu_s": usage.ru_utime + usage.ru_stime,
            }
        )
    )


def run_once(file: str, pythonpath: str | None) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, __file__, "--child", file], check=True, capture_output=True, text=True, env=env, cwd=ROOT
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default=str(EXAMPLE))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--against", help="a directory holding another tree's clusterplan package, run alternately")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.file)
        return
    trees: dict[str, str | None] = {"this tree": None}
    if args.against:
        trees = {"against": args.against, "this tree": None}
    run_once(args.file, None)  # warm-up: bytecode, catalog cache and the OS file cache
    if args.against:
        run_once(args.file, args.against)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, path in trees.items():
            runs[name].append(run_once(args.file, path))
    print(f"{Path(args.file).name}, median of {args.repeats} runs (CPU seconds)")
    print(f"{'tree':<10} {'build (req)':>11} {'rebuilds':>9} {'n':>3} {'solve CPU':>10}")
    for name, rs in runs.items():

        def med(k: str, rs: list[dict[str, float]] = rs) -> float:
            return statistics.median(r[k] for r in rs)

        print(
            f"{name:<10} {med('initial_s'):>11.3f} {med('rebuilds_s'):>9.3f} {int(med('rebuilds')):>3} "
            f"{med('solve_cpu_s'):>10.3f}"
        )


if __name__ == "__main__":
    main()
