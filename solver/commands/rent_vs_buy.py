"""``clusterplan rent-vs-buy FILE``: a design's hardware rented and bought, the break-even month and the curve.
A thin typer layer over :mod:`clusterplan.design.breakeven`; rendering is :mod:`clusterplan.render.rent_buy_view`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clusterplan.commands.options import Catalogs, options_command
from clusterplan.errors import NoDesign
from clusterplan.outputs import FORCE_HELP
from clusterplan.stdin import FILE_HELP

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.plan import Design
    from clusterplan.requirement.load import ResolvedRequirement


@dataclass(frozen=True)
class RentVsBuyOptions:
    """``clusterplan rent-vs-buy``'s arguments and options, in the order ``--help`` lists them."""

    file: Annotated[Path, typer.Argument(help=FILE_HELP)]
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="Price this GPU type instead of design 1 (with --count).")
    ] = None
    count: Annotated[
        int | None,
        typer.Option("--count", min=1, max=1_000_000, help="With --gpu: GPUs in total."),
    ] = None
    tp: Annotated[int, typer.Option("--tp", min=1, help="With --gpu: GPUs per tensor-parallel group.")] = 1
    months: Annotated[
        int | None,
        typer.Option("--months", min=1, max=240, help="Months the curve runs to (default: 60 or the horizon)."),
    ] = None
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON for tools.")] = False
    plot: Annotated[Path | None, typer.Option("--plot", help="Plot the cumulative costs (.png).")] = None
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False
    catalog: Catalogs = None


def rent_vs_buy(o: RentVsBuyOptions) -> None:
    """Rent or buy: the cumulative cost of a design's hardware both ways, month by month, and the break-even."""
    from clusterplan.catalog.load import load_catalog
    from clusterplan.console import guarded, out_console
    from clusterplan.design import breakeven, selfhost
    from clusterplan.errors import FieldProblem, InputError, Location
    from clusterplan.evaluation import pricing
    from clusterplan.outputs import check_outputs, write_bytes
    from clusterplan.render import rent_buy_view
    from clusterplan.stdin import load_requirement_arg

    def run() -> None:
        where = Location("command line")
        if (o.gpu is None) != (o.count is None):
            flag = "--count" if o.gpu is not None else "--gpu"
            raise InputError([FieldProblem(where, flag, "--gpu and --count go together")])
        if o.plot is not None and o.plot.suffix.lower() != ".png":
            raise InputError([FieldProblem(where, "--plot", f"{o.plot.name}: the file name must end in .png")])
        check_outputs([("--plot", o.plot)], o.force)  # before planning
        cat = load_catalog(o.catalog or [])
        resolved = load_requirement_arg(o.file, cat)
        req = resolved.requirement
        design: Design | None = None
        tokens_per_s = 0.0
        if o.gpu is not None and o.count is not None:
            spec = cat.gpu(o.gpu)
            needs = breakeven.needs_of_gpus(spec, o.count, o.tp)
            source = f"{o.count} x {spec.name} in TP groups of {o.tp}, around the clock"
        else:
            design = plan_design_1(resolved, cat)
            needs = breakeven.needs_of_design(design, frozenset(w.name for w in req.workloads if w.interruptible))
            tokens_per_s = design_tokens_per_s(design)
            source = f"design 1 ({design.summary})"
        offerings = breakeven.offerings_for(cat, req, [n.gpu_id for n in needs])
        result = breakeven.rent_vs_buy(
            needs, offerings, requirement=req.name, source=source,
            terms=breakeven.Terms(req.budget.horizon, pricing.Operations.of(req.owned_costs(cat.owned))),
            design=design, output_tokens_per_s=tokens_per_s, months=o.months,
        )  # fmt: skip
        result = selfhost.for_rent_vs_buy(cat, req, result)
        if o.as_json:
            typer.echo(json.dumps(result.model_dump(mode="json"), indent=2, allow_nan=False))
        else:
            for line in rent_buy_view.lines(result):
                out_console.print(line, markup=False)
            out_console.print(rent_buy_view.table(result))
            for note in result.notes:
                out_console.print(f"  - {note}", markup=False)
        if o.plot is not None:
            write_bytes(o.plot, rent_buy_view.figure(result), force=o.force, flag="--plot")

    guarded(run)


def register(app: typer.Typer) -> None:
    app.command(name="rent-vs-buy")(options_command(RentVsBuyOptions, rent_vs_buy))


def plan_design_1(resolved: ResolvedRequirement, catalog: Catalog) -> Design:
    """Design 1 of the requirement's plan, planned as ``solve`` plans it (no explanation); NoDesign if none."""
    from clusterplan.pipeline import PlanOptions, plan_requirement

    plan = plan_requirement(resolved, catalog, PlanOptions(top=1, explain=False))
    if not plan.designs:
        raise NoDesign(
            f"the requirement has no feasible design ({plan.status}): nothing to rent or buy",
            fix="run clusterplan solve FILE to see why, or give --gpu and --count",
        )
    return plan.designs[0]


def design_tokens_per_s(design: Design) -> float:
    """Average output tokens/s the design's serving workloads are planned for (solve's $/M tokens basis)."""
    from clusterplan.plan import ServingPlan

    return sum((w.output_tokens_per_s for w in design.workloads if isinstance(w, ServingPlan)), 0.0)
