"""``clusterplan report FILE -o review.md | review.html``: a design-review attachment.

Exit codes: 0 the report was written, including for an infeasible requirement (the report explains
the conflict and the least relaxations); 2 bad input (the requirement, a catalog, or ``-o``).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer

from clusterplan.commands.options import CatalogOption
from clusterplan.commands.solve import ObjectiveChoice
from clusterplan.commands.sweep import JobsOption, TimeLimitOption, progress
from clusterplan.outputs import FORCE_HELP
from clusterplan.stdin import FILE_HELP


class WhatIfChoice(StrEnum):
    auto = "auto"
    demand = "demand"
    budget = "budget"
    deadline = "deadline"
    none = "none"


def register(app: typer.Typer) -> None:
    @app.command()
    def report(
        file: Path = typer.Argument(..., help=FILE_HELP),
        output: Path = typer.Option(
            ..., "--output", "-o", help="review.md (images in review_files/ beside it) or review.html."
        ),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
        top: int = typer.Option(5, "--top", "-k", min=1, max=20, help="Designs in the alternatives table."),
        objective: ObjectiveChoice = typer.Option(
            ObjectiveChoice.min_cost, "--objective", help="min_cost, or max_throughput / min_latency within budget."
        ),
        what_if: WhatIfChoice = typer.Option(
            WhatIfChoice.auto,
            "--what-if",
            help="The what-if plot: demand (serving), deadline (training), budget, none; auto picks.",
        ),
        jobs: int | None = JobsOption,
        time_limit: float = TimeLimitOption,
        catalog: list[Path] | None = CatalogOption,
    ) -> None:
        """Write a design-review attachment: summary, designs, memory, what binds, what if, rent vs buy, sources."""
        from clusterplan.console import guarded, out_console
        from clusterplan.render.review_files import write_report
        from clusterplan.review import check_report_paths
        from clusterplan.stdin import is_stdin, read_stdin

        def run() -> None:
            check_report_paths(output, force)  # a bad suffix or path is refused before any planning
            from clusterplan.planner.solve import SolverSettings  # the solver's imports take half a second
            from clusterplan.review.assemble import WhatIfRun, assemble
            from clusterplan.review.records import WHATIF_FACTORS
            from clusterplan.whatif.sweep import default_jobs

            text = read_stdin() if is_stdin(file) else None
            with progress(len(WHATIF_FACTORS), "what if") as on_done:
                data = assemble(
                    file,
                    catalog or [],
                    text=text,
                    top=top,
                    objective=objective.value,
                    settings=SolverSettings(time_limit_s=time_limit),
                    whatif=WhatIfRun(what_if.value, jobs=jobs or default_jobs(), on_done=on_done),
                )
            written = write_report(data, output, force=force)
            out_console.print(f"wrote {', '.join(str(p) for p in written)} ({data.status})", markup=False)

        guarded(run)
