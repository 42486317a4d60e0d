"""The what-if benchmark (issue 17): one ``solve`` and the what-if commands, in one run, as ratios.

    python bench/whatif.py                 # median of 3 runs of each command
    python bench/whatif.py --repeats 1     # one run each (about a minute)

Each command runs as a subprocess (the ``clusterplan`` console script: Python start-up, imports, catalog
loading, rendering and the command's fast exit included, as a user sees it) on the 70B example, after one
untimed ``validate`` and one untimed ``solve`` that warm the catalog cache, Python's bytecode cache and the OS
file cache. The subprocesses may
write bytecode even where ``PYTHONDONTWRITEBYTECODE`` is set (an installed package ships its ``.pyc``
files; compiling clusterplan's modules from source costs ~0.2 s a start). Wall times are medians; the
what-if commands are printed as ratios against ``solve`` measured in the same run, so a slow or busy
machine moves them less than the absolute figures. The CPU column (user + system seconds of the command
and its children, median) is what a quiet machine's wall time follows for the single-process commands:
on a shared machine it moves less than the wall time. Targets (2 cores, issue 17): ``solve`` <= 1.5 s, ``validate`` <= 0.5 s, a
20-point p95 sweep <= 6x ``solve``, ``report`` <= 4 s and ``frontier`` <= 5 s.

Issue 33's four ratios, each measured in the same run and printed with PASS or MISS: the 1,024-point
budget x H200 price grid <= 25x ``solve``; the eight-workload fleet (``bench/data/fleet-8.yaml``) <= 3x
``solve``; ``solve`` <= 2.5x the bare CP-SAT import (``python -c "from ortools.sat.python import cp_model"``,
Python start-up included); the 20-point budget sweep (``--jobs 1``) <= 2x ``solve``.

The fleet's CP-SAT search stops when its budget of deterministic units is spent (its first design's proven optimum
and tie-break take most of it), so its time follows ``--time-limit`` rather than the code around the solves: the
case ``fleet 8, 5 s limit`` (half the default budget, no target) shows by how much.

    python bench/whatif.py --only grid,fleet   # solve and the CP-SAT import always run
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "requirements" / "70b-serving.yaml"
FLEET = ROOT / "bench" / "data" / "fleet-8.yaml"
CP_SAT_IMPORT = ("-c", "from ortools.sat.python import cp_model")  # a bare interpreter's argv, not the CLI's


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    max_s: float | None = None  # target wall time, s
    max_ratio: float | None = None  # target wall time as a multiple of solve's
    key: str = ""  # what --only selects it by
    python: bool = False  # args are a bare interpreter's (python ARGS), not clusterplan's


@dataclass(frozen=True)
class Ratio:
    """One of issue 33's targets: ``numerator`` / ``denominator`` (case names) at most ``limit``."""

    label: str
    numerator: str
    denominator: str
    limit: float


RATIOS = (
    Ratio("1,024-point grid / solve", "grid 32x32", "solve", 25.0),
    Ratio("8-workload fleet / solve", "fleet 8", "solve", 3.0),
    Ratio("solve / CP-SAT import", "solve", "cp-sat import", 2.5),
    Ratio("20-point budget sweep / solve", "sweep budget x20", "solve", 2.0),
)


def cases(jobs: int | None, out_dir: Path) -> list[Case]:
    """The commands timed, ``solve`` first (the others are ratios against it)."""
    file = str(EXAMPLE)
    par = ("--jobs", str(jobs)) if jobs else ()
    grid = ("--vary", "budget=150k..2M", "--vary", "gpu_price.h200=20k..45k", "--steps", "32")
    return [
        Case("solve", ("solve", file), max_s=1.5, key="solve"),
        Case("cp-sat import", CP_SAT_IMPORT, key="solve", python=True),
        Case("validate", ("validate", file), max_s=0.5, key="validate"),
        Case(
            "sweep budget x20",
            ("sweep", file, "--vary", "budget=150k..2M", "--steps", "20", "--jobs", "1"),
            key="sweep",
        ),
        Case("sweep p95 x20", ("sweep", file, "--vary", "p95_latency=1s..8s", "--steps", "20", *par), None, 6.0, "p95"),
        Case("frontier", ("frontier", file, *par), max_s=5.0, key="frontier"),
        Case("report", ("report", file, "-o", str(out_dir / "review.md"), "--force", *par), max_s=4.0, key="report"),
        Case("grid 32x32", ("sweep", file, *grid, *par), key="grid"),
        Case("fleet 8", ("solve", str(FLEET)), key="fleet"),
        Case("fleet 8, 5 s limit", ("solve", str(FLEET), "--time-limit", "5"), key="fleet"),
    ]


def _child_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _clusterplan() -> tuple[str, ...]:
    """The ``clusterplan`` command as a user runs it: the console script beside this interpreter, whose fast exit and
    collector settings (``cli.entry``) are part of every command's time, as ``bench/startup.py`` times it; else the
    CLI through ``-c``, taking the same path."""
    script = Path(sys.executable).parent / "clusterplan"
    if script.exists():
        return (str(script),)
    return (sys.executable, "-c", "import sys; sys.argv[0] = 'clusterplan'; from clusterplan.cli import entry; entry()")


def wall_s(args: tuple[str, ...], *, python: bool = False) -> tuple[float, float]:
    """(wall, CPU) seconds of ``clusterplan ARGS`` (``python``: of ``python ARGS``) in a fresh interpreter; a
    failure (exit 2 or 3) stops the benchmark."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cpu0 = _child_cpu_s()
    t0 = time.perf_counter()
    cli = (sys.executable,) if python else _clusterplan()
    proc = subprocess.run(
        [*cli, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    cpu = _child_cpu_s() - cpu0
    if proc.returncode not in (0, 1):  # 1: no design at some point, still a timing
        raise SystemExit(f"clusterplan {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return elapsed, cpu


def verdict(value: float, limit: float | None) -> str:
    if limit is None:
        return ""
    return f"target <= {limit:g}: {'met' if value <= limit else 'MISSED'}"


def ratio_lines(medians: dict[str, float], cpus: dict[str, float]) -> list[str]:
    """Issue 33's ratios among the cases that ran, wall and CPU, each with its target and PASS or MISS (on wall)."""
    lines = []
    for r in RATIOS:
        if r.numerator not in medians or r.denominator not in medians:
            continue
        wall = medians[r.numerator] / medians[r.denominator]
        cpu = cpus[r.numerator] / cpus[r.denominator] if cpus[r.denominator] > 0 else float("nan")
        mark = "PASS" if wall <= r.limit else "MISS"
        lines.append(f"{r.label:<32} {wall:7.2f}x wall {cpu:7.2f}x CPU  target <= {r.limit:g}x  {mark}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each command (the median is shown)")
    ap.add_argument(
        "--jobs", type=int, default=None, help="--jobs of the p95 sweep, frontier and report (default: theirs)"
    )
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated cases beside solve and the CP-SAT import: validate, sweep, p95, frontier, report, "
        "grid, fleet (default: all)",
    )
    opts = ap.parse_args(argv)
    only = None if opts.only is None else {k.strip() for k in opts.only.split(",")} | {"solve"}
    with tempfile.TemporaryDirectory(prefix="clusterplan-bench-") as tmp:
        todo = [c for c in cases(opts.jobs, Path(tmp)) if only is None or c.key in only]
        wall_s(("validate", str(EXAMPLE)))  # warm-up: writes the catalog cache if missing
        wall_s(("solve", str(EXAMPLE)))  # warm-up: the solver's modules in the bytecode cache
        medians: dict[str, float] = {}
        cpus: dict[str, float] = {}
        for case in todo:
            runs = [wall_s(case.args, python=case.python) for _ in range(max(1, opts.repeats))]
            medians[case.name] = statistics.median(w for w, _ in runs)
            cpus[case.name] = statistics.median(c for _, c in runs)
            shown = ", ".join(f"{w:.2f} ({c:.2f} CPU)" for w, c in runs)
            print(f"  {case.name}: {shown} s", file=sys.stderr, flush=True)
    solve = medians["solve"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"what-if benchmark: {EXAMPLE.relative_to(ROOT)}, median of {max(1, opts.repeats)} run(s), wall time; "
        f"{os.cpu_count()} CPUs, load average {load} at the end"
    )
    print(f"{'command':<18} {'seconds':>8} {'CPU s':>8} {'x solve':>8}  target")
    for case in todo:
        s = medians[case.name]
        ratio = s / solve
        target = verdict(ratio, case.max_ratio) if case.max_ratio is not None else verdict(s, case.max_s)
        print(f"{case.name:<18} {s:8.2f} {cpus[case.name]:8.2f} {ratio:8.2f}  {target}")
    lines = ratio_lines(medians, cpus)
    if lines:
        print("issue 33 targets (PASS/MISS on the wall-time ratio; the CPU ratio beside it):")
        for line in lines:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
