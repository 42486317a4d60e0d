"""``clusterplan report FILE -o review.md | review.html``: a design-review attachment.

Exit codes: 0 the report was written, including for an infeasible requirement (the report explains
the conflict and the least relaxations); 2 bad input (the requirement, a catalog, or ``-o``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from clusterplan.commands.options import Catalogs, options_command
from clusterplan.commands.solve import Objective, ObjectiveChoice
from clusterplan.commands.sweep import File, Force, Jobs, TimeLimit, progress


class WhatIfChoice(StrEnum):
    auto = "auto"
    demand = "demand"
    budget = "budget"
    deadline = "deadline"
    none = "none"


@dataclass(frozen=True)
class ReportOptions:
    """``clusterplan report``'s arguments and options, in the order ``--help`` lists them."""

    file: File
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="review.md (images in review_files/ beside it) or review.html."),
    ]
    force: Force = False
    top: Annotated[int, typer.Option("--top", "-k", min=1, max=20, help="Designs in the alternatives table.")] = 5
    objective: Objective = ObjectiveChoice.min_cost
    what_if: Annotated[
        WhatIfChoice,
        typer.Option(
            "--what-if", help="The what-if plot: demand (serving), deadline (training), budget, none; auto picks."
        ),
    ] = WhatIfChoice.auto
    jobs: Jobs = None
    time_limit: TimeLimit = 10.0
    catalog: Catalogs = None


def report(o: ReportOptions) -> None:
    """Write a design-review attachment: summary, designs, memory, what binds, what if, rent vs buy, sources."""
    from clusterplan.console import guarded, out_console
    from clusterplan.render import plots
    from clusterplan.render.review_files import write_report
    from clusterplan.review import check_report_paths
    from clusterplan.stdin import is_stdin, read_stdin

    def run() -> None:
        check_report_paths(o.output, o.force)  # a bad suffix or path is refused before any planning
        from clusterplan.planner.solve import SolverSettings  # the solver's imports take half a second
        from clusterplan.review.assemble import WhatIfRun, assemble
        from clusterplan.review.records import WHATIF_FACTORS
        from clusterplan.whatif.sweep import default_jobs

        text = read_stdin() if is_stdin(o.file) else None
        with progress(len(WHATIF_FACTORS), "what if") as on_done:
            data = assemble(
                o.file,
                o.catalog or [],
                text=text,
                top=o.top,
                objective=o.objective.value,
                settings=SolverSettings(time_limit_s=o.time_limit),
                whatif=WhatIfRun(
                    o.what_if.value, jobs=o.jobs or default_jobs(), on_done=on_done, meanwhile=plots.load_matplotlib
                ),
            )
        written = write_report(data, o.output, force=o.force)
        out_console.print(f"wrote {', '.join(str(p) for p in written)} ({data.status})", markup=False)

    guarded(run)


def register(app: typer.Typer) -> None:
    app.command()(options_command(ReportOptions, report))
