"""``clusterplan sweep FILE --vary FIELD=SPEC`` and ``clusterplan frontier FILE``.

Exit codes: 0 at least one point has a design; 1 no point has one (every point infeasible, or the
frontier has no design at any cost); 2 bad input (an unknown field, a value that does not parse).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from clusterplan.commands.options import Catalogs, options_command
from clusterplan.commands.solve import Objective, ObjectiveChoice
from clusterplan.errors import SweepError
from clusterplan.outputs import FORCE_HELP
from clusterplan.stdin import FILE_HELP

EXIT_NO_DESIGN = 1

Jobs = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        help="Points planned in parallel (default: the CPUs this process may use, its CPU quota included).",
    ),
]
TimeLimit = Annotated[
    float,
    typer.Option(
        "--time-limit",
        min=0.01,
        help="Seconds per planned point (one budget per point, counted in CP-SAT deterministic time; "
        "docs/guarantees.md).",
    ),
]
Force = Annotated[bool, typer.Option("--force", help=FORCE_HELP)]
Backend = Annotated[
    str,
    typer.Option(
        "--backend", help="Where points are planned: local (--jobs processes) or ray (pip install 'clusterplan[ray]')."
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray-address", help="The Ray cluster for --backend ray (auto, ray://HOST:10001); default: a local Ray."
    ),
]
File = Annotated[Path, typer.Argument(help=FILE_HELP)]


class BindingChoice(StrEnum):
    changes = "changes"
    all = "all"


class Against(StrEnum):
    latency = "latency"
    throughput = "throughput"


@contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr when it is a terminal, with the points done and the time left (no refresh thread:
    worker processes fork cleanly); nothing when stderr is piped or redirected."""
    from clusterplan.console import err_console

    if not err_console.is_terminal or total < 2:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        auto_refresh=False,
    ) as bar:
        task = bar.add_task(what, total=total)

        def done(n: int) -> None:
            bar.update(task, completed=n)
            bar.refresh()

        yield done


def _plot_format(path: Path | None) -> str | None:
    from clusterplan.render.plots import format_of

    if path is None:
        return None
    fmt = format_of(path.suffix)
    if fmt is None:
        raise SweepError(f"--plot {path}: the file name must end in .png or .svg")
    return fmt


@dataclass(frozen=True)
class SweepOptions:
    """``clusterplan sweep``'s arguments and options, in the order ``--help`` lists them."""

    file: File
    vary: Annotated[
        list[str],
        typer.Option(
            "--vary",
            "-v",
            help="FIELD=SPEC, e.g. budget=200k..2M, p95_latency=1s,2s,5s, gpu_price.h100-sxm=20k..35k "
            "(commas separate values: write 1.2M, not 1,200,000; give --vary twice for a grid). Fields: budget, demand, p95_latency, input_tokens, output_tokens, "
            "deadline, electricity_price, gpu_price.<gpu>, or a numeric path like workloads[0].peak_to_average.",
        ),
    ]
    steps: Annotated[int, typer.Option("--steps", "-n", min=1, max=500, help="Points in each A..B range.")] = 10
    log: Annotated[bool, typer.Option("--log", help="Log-spaced steps in A..B ranges.")] = False
    objective: Objective = ObjectiveChoice.min_cost
    jobs: Jobs = None
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write the rows as CSV to this file.")] = None
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the sweep as JSON to this file.")] = None
    md_out: Annotated[
        Path | None,
        typer.Option("--markdown", help="Write the sweep (rows, switch points, notes) as Markdown to this file."),
    ] = None
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Plot the objective against the field (.png or .svg)."),
    ] = None
    switch_tolerance: Annotated[
        float,
        typer.Option(
            "--switch-tolerance",
            min=0.0,
            max=0.5,
            help="Bisect each design switch between two points to this fraction of the value (0.01: 1%); "
            "0: report switches at the sample points only.",
        ),
    ] = 0.01
    binding: Annotated[
        BindingChoice,
        typer.Option(
            "--binding",
            help="Rows whose binding constraints (the conflict where there is no design) are worked out: changes "
            "(the first row and every row whose outcome differs from its neighbour's; the others show none) or all "
            "(several solves more a point).",
        ),
    ] = BindingChoice.changes
    force: Force = False
    time_limit: TimeLimit = 10.0
    catalog: Catalogs = None
    backend: Backend = "local"
    ray_address: RayAddress = None


def sweep(o: SweepOptions) -> None:
    """What if: re-plan across values of one or two fields; show where the optimal design switches."""
    import time

    from clusterplan.console import guarded, out_console
    from clusterplan.outputs import check_outputs, write_bytes, write_text
    from clusterplan.planner.solve import SolverSettings
    from clusterplan.render import plots, sweep_view
    from clusterplan.whatif.points import default_jobs, load_base
    from clusterplan.whatif.ray_backend import points_backend
    from clusterplan.whatif.sweep import run_sweep
    from clusterplan.whatif.vary import make_axis

    def run() -> int:
        if len(o.vary) > 2:
            raise SweepError("at most two --vary (a grid)", fix="sweep the third field in separate runs")
        fmt = _plot_format(o.plot)
        outputs = [("--csv", o.csv_out), ("--json", o.json_out), ("--markdown", o.md_out), ("--plot", o.plot)]
        check_outputs(outputs, o.force)  # before planning
        base, _ = load_base(o.file, o.catalog or [])
        axes = [make_axis(v, base.data, base.catalog, steps=o.steps, log=o.log) for v in o.vary]
        if len({a.target.path for a in axes}) < len(axes):
            raise SweepError("the two --vary set the same field")
        total = 1
        for a in axes:
            total *= len(a.values)
        n_jobs = o.jobs or default_jobs()
        t0 = time.perf_counter()
        with points_backend(o.backend, o.ray_address), progress(total, "planning") as on_done:
            result = run_sweep(
                base,
                axes,
                objective=o.objective.value,
                solver=SolverSettings(time_limit_s=o.time_limit),
                jobs=n_jobs,
                on_done=on_done,
                switch_tolerance=o.switch_tolerance or None,
                binding=o.binding.value,
            )
        elapsed = time.perf_counter() - t0
        sweep_view.sweep_table(result, out_console)
        if o.csv_out is not None:
            write_text(o.csv_out, sweep_view.sweep_csv(result), force=o.force, flag="--csv")
        if o.json_out is not None:
            write_text(o.json_out, sweep_view.sweep_json(result), force=o.force, flag="--json")
        if o.md_out is not None:
            write_text(o.md_out, sweep_view.sweep_markdown(result), force=o.force, flag="--markdown")
        if o.plot is not None and fmt is not None:
            write_bytes(o.plot, plots.sweep_figure(result, fmt), force=o.force, flag="--plot")  # type: ignore[arg-type]
        out_console.print(
            f"{len(result.rows)} points in {elapsed:.2f} s with {min(n_jobs, len(result.rows))} job(s)",
            style="dim",
            markup=False,
        )
        return 0 if any(r.shape is not None for r in result.rows) else EXIT_NO_DESIGN

    code = guarded(run)
    if code:
        raise typer.Exit(code)


@dataclass(frozen=True)
class FrontierOptions:
    """``clusterplan frontier``'s arguments and options, in the order ``--help`` lists them."""

    file: File
    against: Annotated[Against, typer.Option("--against", help="latency or throughput.")] = Against.latency
    points: Annotated[
        int,
        typer.Option("--points", "-n", min=2, max=100, help="Points to plan beyond the cheapest."),
    ] = 8
    jobs: Jobs = None
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write every point as CSV to this file.")] = None
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the frontier as JSON to this file.")] = None
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Plot cost against latency/throughput (.png or .svg)."),
    ] = None
    force: Force = False
    time_limit: TimeLimit = 10.0
    catalog: Catalogs = None
    backend: Backend = "local"
    ray_address: RayAddress = None


def frontier(o: FrontierOptions) -> None:
    """The Pareto frontier of total cost against p95 latency (or throughput); dominated designs removed."""
    from clusterplan.console import guarded, out_console
    from clusterplan.outputs import check_outputs, write_bytes, write_text
    from clusterplan.planner.solve import SolverSettings
    from clusterplan.render import plots, sweep_view
    from clusterplan.whatif.frontier import run_frontier
    from clusterplan.whatif.points import default_jobs, load_base
    from clusterplan.whatif.ray_backend import points_backend

    def run() -> int:
        fmt = _plot_format(o.plot)
        check_outputs([("--csv", o.csv_out), ("--json", o.json_out), ("--plot", o.plot)], o.force)  # before planning
        base, _ = load_base(o.file, o.catalog or [])
        with points_backend(o.backend, o.ray_address), progress(o.points, "planning") as on_done:
            result = run_frontier(
                base,
                against=o.against.value,
                points=o.points,
                solver=SolverSettings(time_limit_s=o.time_limit),
                jobs=o.jobs or default_jobs(),
                on_done=on_done,
            )
        sweep_view.frontier_table(result, out_console)
        if o.csv_out is not None:
            write_text(o.csv_out, sweep_view.frontier_csv(result), force=o.force, flag="--csv")
        if o.json_out is not None:
            write_text(o.json_out, sweep_view.frontier_json(result), force=o.force, flag="--json")
        if o.plot is not None and fmt is not None:
            write_bytes(o.plot, plots.frontier_figure(result, fmt), force=o.force, flag="--plot")  # type: ignore[arg-type]
        return 0 if result.frontier else EXIT_NO_DESIGN

    code = guarded(run)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command()(options_command(SweepOptions, sweep))
    app.command()(options_command(FrontierOptions, frontier))
