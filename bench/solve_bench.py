"""Time ``clusterplan solve``: every shipped example, and a synthetic scale series.

    python bench/solve_bench.py            # examples + the full series (a few minutes)
    python bench/solve_bench.py --quick    # examples + the small end of the series

Examples: median over ``--repeats`` runs of the candidate preparation, the first CP-SAT solve (the
optimum), all CP-SAT solves (top K, tie-breaks, explanation), the whole plan in-process, and the
whole command as a subprocess (Python start-up included). Targets (issue #4, 2 cores): each example
OPTIMAL in < 0.5 s of solver time, the whole command < 2 s.

Scale series: synthetic candidate tables (:mod:`clusterplan.planner.synthetic`) with the catalog's
GPU-type count x1, x4, x16 (24, 96, 384 types), 1, 4 and 16 serving workloads, mixed GPU types off
and on: model build and the first solve (to optimality or ``--time-limit``), and the ratio of the
brute-force enumerator's time (``tests/test_planner_bruteforce.py``) where it applies (one
workload, no mixing) and finishes within ``--brute-timeout``. Target: x16 with 16 workloads < 10 s.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

CATALOG_GPU_TYPES = 24


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def bench_examples(repeats: int) -> list[dict[str, object]]:
    from clusterplan.catalog.load import load_catalog
    from clusterplan.pipeline import PlanOptions, Timings, plan_requirement
    from clusterplan.planner.solve import Planner
    from clusterplan.requirement.load import load_requirement

    catalog = load_catalog()
    rows = []
    for path in sorted((ROOT / "examples" / "requirements").glob("*.yaml")):
        resolved = load_requirement(path, catalog)
        cand, first, solver, total, solves = [], [], [], [], 0
        status = ""
        for _ in range(repeats):
            firsts: list[float] = []
            original = Planner.solve

            def timed(self: Planner, *args, _orig=original, _firsts=firsts, **kwargs):  # type: ignore[no-untyped-def]
                out = _orig(self, *args, **kwargs)
                if not _firsts:
                    _firsts.append(out.wall_s)  # the first solve: the optimum (LP steps included)
                return out

            Planner.solve = timed  # type: ignore[method-assign]
            try:
                tm = Timings()
                plan = plan_requirement(resolved, catalog, PlanOptions(), timings=tm)
            finally:
                Planner.solve = original  # type: ignore[method-assign]
            status = plan.status
            cand.append(tm.candidates_s)
            first.append(firsts[0] if firsts else 0.0)
            solver.append(tm.solver_s)
            total.append(tm.total_s)
            solves = tm.solves
        walls = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; from clusterplan.cli import entry; sys.argv[0] = 'clusterplan'; entry()",
                    "solve",
                    str(path),
                ],
                cwd=ROOT,
                capture_output=True,
                check=False,
            )
            walls.append(time.perf_counter() - t0)
        rows.append(
            {
                "example": path.stem,
                "status": status,
                "candidates_s": _median(cand),
                "first_solve_s": _median(first),
                "cpsat_total_s": _median(solver),
                "solves": solves,
                "plan_s": _median(total),
                "command_s": _median(walls),
            }
        )
    return rows


def _brute(table, queue) -> None:  # type: ignore[no-untyped-def]
    from test_planner_bruteforce import brute_force

    t0 = time.perf_counter()
    result = brute_force(table)
    queue.put((time.perf_counter() - t0, result.feasible, result.total_usd))


def brute_time(table, timeout: float) -> float | None:  # type: ignore[no-untyped-def]
    queue: mp.Queue = mp.Queue()
    proc = mp.Process(target=_brute, args=(table, queue))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.terminate()
        proc.join()
        return None
    elapsed, _, _ = queue.get()
    return float(elapsed)


def bench_series(
    multipliers: list[int], workloads: list[int], repeats: int, time_limit: float, brute_timeout: float
) -> list[dict[str, object]]:
    from clusterplan.planner.solve import Planner, SolverSettings
    from clusterplan.planner.synthetic import synthetic_table

    rows = []
    for mult in multipliers:
        for n in workloads:
            for mixed in (False, True):
                gpu_types = CATALOG_GPU_TYPES * mult
                table = synthetic_table(gpu_types=gpu_types, serving=n, seed=7, mixed=mixed)
                builds, solves, status, gap = [], [], "", 0.0
                for _ in range(repeats):
                    p = Planner(table, settings=SolverSettings(time_limit_s=time_limit))
                    out = p.solve()
                    builds.append(p.build_s)
                    solves.append(p.solve_s)
                    status = out.status.value
                    if out.objective is not None and out.bound is not None:
                        gap = abs(out.objective - out.bound) / max(1.0, abs(out.objective))
                ratio = None
                if n == 1 and not mixed:
                    bt = brute_time(table, brute_timeout)
                    if bt is not None:
                        ratio = bt / max(_median(solves), 1e-9)
                rows.append(
                    {
                        "catalog": f"x{mult}",
                        "gpu_types": gpu_types,
                        "workloads": n,
                        "mixed": mixed,
                        "rows": sum(len(w.rows) for w in table.workloads),
                        "status": status,
                        "gap": gap,
                        "build_s": _median(builds),
                        "solve_s": _median(solves),
                        "brute_over_cpsat": ratio,
                    }
                )
                print(_fmt_series(rows[-1]), flush=True)
    return rows


def _fmt_series(r: dict[str, object]) -> str:
    ratio = r["brute_over_cpsat"]
    ratio_s = f"{ratio:8.1f}x" if isinstance(ratio, float) else "       -"
    return (
        f"{r['catalog']:>4} {r['gpu_types']:>4} types {r['workloads']:>3} workloads mixed={r['mixed']!s:<5} "
        f"rows {r['rows']:>6}  {r['status']:<8} gap {r['gap']:6.2%}  build {r['build_s']:6.2f} s  "
        f"solve {r['solve_s']:6.2f} s  brute/cp-sat {ratio_s}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="examples and the small end of the series")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per CP-SAT call in the series")
    ap.add_argument("--brute-timeout", type=float, default=60.0)
    ap.add_argument("--no-examples", action="store_true")
    args = ap.parse_args()

    if not args.no_examples:
        print("examples (median of", args.repeats, "runs)")
        print(
            f"{'example':<24} {'status':<9} {'cands':>7} {'1st solve':>10} {'CP-SAT':>8} {'solves':>6} "
            f"{'plan':>7} {'command':>8}"
        )
        for r in bench_examples(args.repeats):
            print(
                f"{r['example']:<24} {r['status']:<9} {r['candidates_s']:6.2f}s {r['first_solve_s']:9.3f}s "
                f"{r['cpsat_total_s']:7.2f}s {r['solves']:>6} {r['plan_s']:6.2f}s {r['command_s']:7.2f}s",
                flush=True,
            )
    print("\nsynthetic scale series (first solve: the optimum, or the time limit)")
    mults = [1, 4] if args.quick else [1, 4, 16]
    wls = [1, 4] if args.quick else [1, 4, 16]
    bench_series(mults, wls, 1 if not args.quick else args.repeats, args.time_limit, args.brute_timeout)


if __name__ == "__main__":
    main()
