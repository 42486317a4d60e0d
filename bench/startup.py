"""The start-up benchmark (issue 33): the CLI's import and one ``solve`` per example, as ratios to a bare CP-SAT import.

    python bench/startup.py                      # median of 3 runs, every shipped example
    python bench/startup.py --repeats 5 examples/requirements/70b-serving.yaml

Each command runs in a fresh interpreter, as a user starts it: the baseline is ``python -c "from
ortools.sat.python import cp_model"`` (Python's start, numpy, pandas and OR-Tools: the floor any CP-SAT
planner pays), then what a solve imports before it plans (:data:`SOLVE_IMPORTS`: the CLI, pydantic, typer, the schemas, the
physics and CP-SAT without pandas) and ``clusterplan solve FILE --json`` per example (the console script, so its
fast exit is what is timed). The runs are interleaved (one of each per round), so a machine whose load drifts
moves the baseline with the commands it is compared to. Each figure is the median over the rounds of wall and
CPU (user + system of the child, CP-SAT's threads included) seconds; the ratios divide by the baseline's
median of the same run. Bytecode is written for the children even where ``PYTHONDONTWRITEBYTECODE`` is set:
compiling clusterplan's modules from source would be timed otherwise. Target (issue 33, a quiet two-core
machine): the 70B ``solve`` within 2.5x the baseline's wall time. A shared machine's wall times are noisy; its
CPU ratios move less.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "requirements").glob("*.yaml"))
# What a solve imports before it plans: the CLI and the modules its body takes (the command's own, the pipeline and
# through it the schemas, the physics and CP-SAT without pandas, the JSON writer).
SOLVE_IMPORTS = (
    "from clusterplan.cli import entry; import clusterplan.commands.solve, clusterplan.catalog.load, "
    "clusterplan.pipeline, clusterplan.planner.solve, clusterplan.render.jsonout, clusterplan.stdin"
)
TARGET = ("70b-serving", 2.5)  # the example and its wall-time ratio to the bare CP-SAT import (issue 33)


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]


def _clusterplan() -> tuple[str, ...]:
    """The console script beside this interpreter (its fast exit included), else the CLI through ``-c``."""
    script = Path(sys.executable).parent / "clusterplan"
    if script.exists():
        return (str(script),)
    return (sys.executable, "-c", "import sys; sys.argv[0] = 'clusterplan'; from clusterplan.cli import entry; entry()")


def cases(files: list[Path]) -> list[Case]:
    """The baseline first (the ratios divide by it), then the CLI's import, then one solve per file."""
    solve = [Case(f"solve {f.stem}", (*_clusterplan(), "solve", str(f), "--json")) for f in files]
    return [
        Case("bare CP-SAT import", (sys.executable, "-c", "from ortools.sat.python import cp_model")),
        Case("solve's imports", (sys.executable, "-c", SOLVE_IMPORTS)),
        *solve,
    ]


def _child_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: tuple[str, ...]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``argv``; a failure (exit 2 or 3) stops the benchmark."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cpu0 = _child_cpu_s()
    t0 = perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    elapsed = perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1: no design, still a timing
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return elapsed, _child_cpu_s() - cpu0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="requirement files (default: every shipped example)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (the median is shown)")
    opts = ap.parse_args(argv)
    files = [f.resolve() for f in opts.files] or EXAMPLES
    todo = cases(files)
    for case in todo[:3]:  # warm-up: bytecode, the catalog cache and the OS file cache
        timed(case.argv)
    runs: dict[str, list[tuple[float, float]]] = {case.name: [] for case in todo}
    for _ in range(max(1, opts.repeats)):
        for case in todo:
            runs[case.name].append(timed(case.argv))
            print(f"  {case.name}: {runs[case.name][-1][0]:.2f} s ({runs[case.name][-1][1]:.2f} CPU)", file=sys.stderr)
    wall = {name: statistics.median(w for w, _ in r) for name, r in runs.items()}
    cpu = {name: statistics.median(c for _, c in r) for name, r in runs.items()}
    base = todo[0].name
    print(f"start-up benchmark: median of {max(1, opts.repeats)} round(s), ratios to the bare CP-SAT import")
    print(f"{'command':<32} {'wall s':>7} {'CPU s':>7} {'x wall':>7} {'x CPU':>7}  target")
    for case in todo:
        target = ""
        if case.name == f"solve {TARGET[0]}":
            met = wall[case.name] / wall[base] <= TARGET[1]
            target = f"wall <= {TARGET[1]:g}x: {'met' if met else 'MISSED'}"
        print(
            f"{case.name:<32} {wall[case.name]:7.2f} {cpu[case.name]:7.2f} "
            f"{wall[case.name] / wall[base]:7.2f} {cpu[case.name] / cpu[base]:7.2f}  {target}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
