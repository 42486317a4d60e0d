"""``clusterplan solve FILE``: the ranked designs and why, or the conflict when nothing fits.

Exit codes: 0 a design was found (optimal, or feasible when the time limit stopped the proof);
1 infeasible (the output says which constraints conflict and what would restore feasibility);
4 unknown (the time limit passed before either a design or a proof of infeasibility; raise
``--time-limit``); 2 bad input.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clusterplan.commands.options import Catalogs
from clusterplan.errors import NeedsBudget
from clusterplan.stdin import FILE_HELP

if TYPE_CHECKING:
    from clusterplan.plan import Plan

EXIT_INFEASIBLE = 1
EXIT_UNKNOWN = 4


class ObjectiveChoice(StrEnum):
    min_cost = "min_cost"
    max_throughput = "max_throughput"
    min_latency = "min_latency"


Objective = Annotated[
    ObjectiveChoice, typer.Option("--objective", help="min_cost, or max_throughput / min_latency within budget.")
]


def time_limit_note(plan: Plan) -> str | None:
    """The plain sentence for a design found but not proven optimal (status feasible); None otherwise."""
    s = plan.solver
    if s.status != "feasible":
        return None
    gap = f" (gap {s.gap:.1%} to the best bound)" if s.gap is not None else ""
    return (
        f"Stopped at the time limit ({s.time_limit_s:g} s for the whole command); not proven optimal{gap}. "
        "A cheaper design may exist: raise --time-limit to close the gap."
    )


def register(app: typer.Typer) -> None:
    @app.command()
    def solve(
        file: Path = typer.Argument(..., help=FILE_HELP),
        top: int = typer.Option(5, "--top", "-k", min=1, max=50, help="How many distinct designs to return."),
        json_out: bool = typer.Option(False, "--json", help="Print the plan as JSON (specs/plan.md)."),
        markdown: bool = typer.Option(False, "--markdown", help="Print the plan as Markdown."),
        objective: Objective = ObjectiveChoice.min_cost,
        time_limit: float = typer.Option(
            10.0,
            "--time-limit",
            min=0.01,
            help="Seconds for the whole command: one budget shared by ranking, explanation and conflict analysis, "
            "counted in CP-SAT deterministic time so the same file gives the same plan on any machine "
            "(docs/guarantees.md).",
        ),
        explain: bool = typer.Option(True, "--explain/--no-explain", help="Compute 'why this one'."),
        catalog: Catalogs = None,
    ) -> None:
        """Plan: the cheapest feasible GPU cluster designs for a requirement, and why."""
        from clusterplan.catalog.load import load_catalog
        from clusterplan.console import guarded, out_console
        from clusterplan.pipeline import PlanOptions, Timings, plan_requirement
        from clusterplan.planner.solve import SolverSettings
        from clusterplan.stdin import load_requirement_arg

        if json_out and markdown:
            raise typer.BadParameter("choose one of --json and --markdown")

        def run() -> int:
            cat = load_catalog(catalog or [])
            resolved = load_requirement_arg(file, cat)
            b = resolved.requirement.budget
            if (
                objective is not ObjectiveChoice.min_cost
                and b.capital is None
                and b.monthly is None
                and b.total is None
            ):
                raise NeedsBudget(
                    f"--objective {objective.value} needs a budget to stay within",
                    fix="add budget.total, budget.monthly or budget.capital to the requirement",
                    hint="without one, more money always buys more throughput or lower latency",
                )
            opts = PlanOptions(
                top=top, objective=objective.value, explain=explain, settings=SolverSettings(time_limit_s=time_limit)
            )
            tm = Timings()
            plan = plan_requirement(resolved, cat, opts, timings=tm)
            # Only the writer asked for is imported (the terminal table's imports rich's tables).
            if json_out:
                from clusterplan.render import jsonout

                typer.echo(jsonout.render(plan), nl=False)
            elif markdown:
                from clusterplan.render import plan_markdown

                typer.echo(plan_markdown.render(plan), nl=False)
            else:
                from clusterplan.render import table

                table.render(plan, out_console)
                note = time_limit_note(plan)
                if note:
                    out_console.print(note, markup=False)
                out_console.print(
                    f"planned in {tm.total_s:.2f} s: candidates {tm.candidates_s:.2f} s, model {tm.build_s:.2f} s, "
                    f"CP-SAT {tm.solver_s:.2f} s over {tm.solves} solves",
                    style="dim",
                    markup=False,
                )
            if plan.status == "infeasible":
                return EXIT_INFEASIBLE
            if plan.status == "unknown":
                return EXIT_UNKNOWN
            return 0

        code = guarded(run)
        if code:
            raise typer.Exit(code)
