"""The what-if benchmark (issue 17): one ``solve`` and the what-if commands, in one run, as ratios.

    python bench/whatif.py                 # median of 3 runs of each command
    python bench/whatif.py --repeats 1     # one run each (about a minute)

Each command runs as a subprocess (``python -m`` the CLI: Python start-up, imports, catalog loading and
rendering included, as a user sees it) on the 70B example, after one untimed ``validate`` and one untimed
``solve`` that warm the catalog cache, Python's bytecode cache and the OS file cache. The subprocesses may
write bytecode even where ``PYTHONDONTWRITEBYTECODE`` is set (an installed package ships its ``.pyc``
files; compiling clusterplan's modules from source costs ~0.2 s a start). Wall times are medians; the
what-if commands are printed as ratios against ``solve`` measured in the same run, so a slow or busy
machine moves them less than the absolute figures. The CPU column (user + system seconds of the command
and its children, median) is what a quiet machine's wall time follows for the single-process commands:
on a shared machine it moves less than the wall time. Targets (2 cores, issue 17): ``solve`` <= 1.5 s, ``validate`` <= 0.5 s, the 20-point
budget sweep (``--jobs 1``) <= 3x ``solve``, a 20-point p95 sweep <= 6x, ``report`` <= 4 s and
``frontier`` <= 5 s.
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


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    max_s: float | None = None  # target wall time, s
    max_ratio: float | None = None  # target wall time as a multiple of solve's


def cases(jobs: int | None, out_dir: Path) -> list[Case]:
    """The commands timed, ``solve`` first (the others are ratios against it)."""
    file = str(EXAMPLE)
    par = ("--jobs", str(jobs)) if jobs else ()
    return [
        Case("solve", ("solve", file), max_s=1.5),
        Case("validate", ("validate", file), max_s=0.5),
        Case(
            "sweep budget x20", ("sweep", file, "--vary", "budget=150k..2M", "--steps", "20", "--jobs", "1"), None, 3.0
        ),
        Case("sweep p95 x20", ("sweep", file, "--vary", "p95_latency=1s..8s", "--steps", "20", *par), None, 6.0),
        Case("frontier", ("frontier", file, *par), max_s=5.0),
        Case("report", ("report", file, "-o", str(out_dir / "review.md"), "--force", *par), max_s=4.0),
    ]


def _child_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wall_s(args: tuple[str, ...]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``clusterplan ARGS`` in a fresh interpreter; a failure (exit 2 or 3) stops the benchmark."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cpu0 = _child_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", "from clusterplan.cli import entry; entry()", *args],
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each command (the median is shown)")
    ap.add_argument(
        "--jobs", type=int, default=None, help="--jobs of the p95 sweep, frontier and report (default: theirs)"
    )
    opts = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="clusterplan-bench-") as tmp:
        todo = cases(opts.jobs, Path(tmp))
        wall_s(("validate", str(EXAMPLE)))  # warm-up: writes the catalog cache if missing
        wall_s(("solve", str(EXAMPLE)))  # warm-up: the solver's modules in the bytecode cache
        medians: dict[str, float] = {}
        cpus: dict[str, float] = {}
        for case in todo:
            runs = [wall_s(case.args) for _ in range(max(1, opts.repeats))]
            medians[case.name] = statistics.median(w for w, _ in runs)
            cpus[case.name] = statistics.median(c for _, c in runs)
            shown = ", ".join(f"{w:.2f} ({c:.2f} CPU)" for w, c in runs)
            print(f"  {case.name}: {shown} s", file=sys.stderr, flush=True)
    solve = medians["solve"]
    print(f"what-if benchmark: {EXAMPLE.relative_to(ROOT)}, median of {max(1, opts.repeats)} run(s), wall time")
    print(f"{'command':<18} {'seconds':>8} {'CPU s':>8} {'x solve':>8}  target")
    for case in todo:
        s = medians[case.name]
        ratio = s / solve
        target = verdict(ratio, case.max_ratio) if case.max_ratio is not None else verdict(s, case.max_s)
        print(f"{case.name:<18} {s:8.2f} {cpus[case.name]:8.2f} {ratio:8.2f}  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
