"""A design-review attachment as data: everything the Markdown and HTML writers print, computed here.

:func:`assemble` plans the requirement (with the full explanation), then adds what a review needs
around the plan: a one-paragraph summary, the per-GPU memory breakdown of each replica group and
training layout (:func:`clusterplan.design.estimate.estimate_requirement` on the design's own layout: the
same evaluation and pricing, :mod:`clusterplan.design`, the candidates and the plan came from), what relaxing each binding constraint would save, a small
what-if sweep (:mod:`clusterplan.whatif.sweep`), rent against buy for the recommended layout
(:func:`clusterplan.physics.cost.rent_vs_buy_breakeven`), every efficiency factor with where it came
from, the catalog rows used with their sources and dates, and what is needed to reproduce it
(clusterplan version, catalog fingerprint, sha256 of the requirement and of each user catalog).

Nothing here is time-dependent: the same inputs give the same report, byte for byte.
Strings from the requirement or a user catalog are kept as given; the writers escape them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from clusterplan import __version__
from clusterplan.catalog.load import Catalog
from clusterplan.errors import ClusterplanError
from clusterplan.plan import Design, Plan, ServingPlan, TrainingPlan
from clusterplan.planner.solve import SolverSettings
from clusterplan.render.fmt import usd
from clusterplan.requirement.load import ResolvedRequirement
from clusterplan.whatif.sweep import (
    Axis,
    Base,
    SweepResult,
    first_workload,
    format_value,
    parse_value,
    resolve_field,
    run_sweep,
)

WhatIf = Literal["auto", "demand", "budget", "deadline", "none"]
WHATIF_FACTORS = (0.5, 0.75, 1.0, 1.5, 2.0)  # a handful of points around the requirement, so a report stays quick


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MemoryBar(Out):
    """What fills the most loaded GPU of one replica group or training layout, GiB."""

    label: str = Field(description="workload: GPU, layout")
    workload: str
    gpu: str
    weights_gib: float
    kv_cache_gib: float
    activations_gib: float
    gradients_gib: float
    optimizer_gib: float
    runtime_overhead_gib: float
    headroom_gib: float
    total_gib: float
    capacity_gib: float


class BindingRow(Out):
    family: str
    title: str
    detail: str
    relaxed_total_usd: float | None = Field(description="the optimum with this constraint switched off, USD")
    saving_usd: float | None = Field(description="recommended total minus relaxed total, USD")
    relaxed_design: str | None


class RentBuyRow(Out):
    """One workload's layout priced both ways, alone (shared servers are not split)."""

    workload: str
    kind: Literal["serving", "training"]
    layout: str
    gpus: int
    chosen: str = Field(description="what the plan chose: cloud, owned or cloud+owned")
    period: str = Field(description="what the totals cover: 'over 36 months' or 'for the run (9 h)'")
    rent_offer: str | None = Field(description="provider:instance x count")
    rent_usd_per_hour: float | None
    rent_total_usd: float | None
    buy_servers: str | None = Field(description="owned servers x GPUs each")
    buy_capital_usd: float | None
    buy_running_usd_per_month: float | None = Field(description="electricity at full power x PUE, USD/month")
    buy_total_usd: float | None = Field(description="capital + running over the period, USD")
    breakeven_months: float | None = Field(description="months of full use after which buying is cheaper")
    cheaper: Literal["rent", "buy"] | None


class FactorRow(Out):
    name: str
    value: str
    set_in_requirement: bool
    description: str


class SourceRow(Out):
    what: str
    value: str
    source: str = Field(description="the catalog's source key or URL")
    title: str
    url: str | None
    as_of: str
    provisional: bool


class UserCatalog(Out):
    path: str
    sha256: str


class Reproduce(Out):
    clusterplan_version: str
    catalog_fingerprint: str
    requirement_file: str
    requirement_sha256: str
    user_catalogs: list[UserCatalog]
    command: str
    objective: str
    random_seed: int
    num_workers: int


class ReviewReport(Out):
    title: str = Field(description="the requirement's name")
    status: str
    summary: str = Field(description="what to buy or rent, what it costs, what bounds it; one paragraph")
    requirement_text: str = Field(description="the requirement file as given")
    plan: Plan
    memory: list[MemoryBar]
    binding: list[BindingRow]
    whatif: SweepResult | None
    whatif_note: str
    rent_buy: list[RentBuyRow]
    rent_buy_note: str
    factors: list[FactorRow]
    planner_notes: list[str]
    sources: list[SourceRow]
    reproduce: Reproduce
    warnings: list[str] = Field(default_factory=list, description="parts that could not be computed, and why")


# ------------------------------------------------------------------------------------------------
# Pieces
# ------------------------------------------------------------------------------------------------


def _layout(w: ServingPlan | TrainingPlan, i: int = 0) -> str:
    if isinstance(w, ServingPlan):
        g = w.groups[i]
        return f"{g.replicas}x {g.gpu} TP{g.tp} PP{g.pp} {g.quant}"
    return f"{w.gpus}x {w.gpu} TP{w.tp} PP{w.pp} DP{w.dp} ZeRO-{w.zero_stage}"


def _estimates(resolved: ResolvedRequirement, catalog: Catalog, design: Design) -> list[tuple[str, Any, str]]:
    """(label, EstimateResult, kind) for each replica group and training layout of the design, priced both
    ways (the requirement's deployment is set to 'either' so the estimate gives cloud and owned)."""
    from clusterplan.design.estimate import estimate_requirement
    from clusterplan.requirement.schema import PinnedConfig

    req = resolved.requirement.model_copy(update={"deployment": "either"})
    models = list(resolved.models)
    names = [w.name for w in req.workloads]
    out: list[tuple[str, Any, str]] = []
    for w in design.workloads:
        index = names.index(w.workload)
        if isinstance(w, ServingPlan):
            for k, g in enumerate(w.groups):
                cfg = PinnedConfig(
                    workload=index, gpu=g.gpu, tp=g.tp, pp=g.pp, quant=g.quant, kv_quant=g.kv_cache,  # type: ignore[arg-type]
                    batch=g.batch, dp=g.replicas,
                )  # fmt: skip
                out.append(
                    (f"{w.workload}: {_layout(w, k)}", estimate_requirement(req, models, catalog, cfg), "serving")
                )
        else:
            cfg = PinnedConfig(
                workload=index, gpu=w.gpu, tp=w.tp, pp=w.pp, dp=w.dp, zero=w.zero_stage,  # type: ignore[arg-type]
                recompute=w.recompute, batch=w.micro_batch,  # type: ignore[arg-type]
            )  # fmt: skip
            out.append((f"{w.workload}: {_layout(w)}", estimate_requirement(req, models, catalog, cfg), "training"))
    return out


def memory_bars(estimates: Sequence[tuple[str, Any, str]]) -> list[MemoryBar]:
    bars: list[MemoryBar] = []
    for label, est, _kind in estimates:
        phys = est.serving if est.serving is not None else est.training
        m = phys.memory
        bars.append(
            MemoryBar(
                label=label,
                workload=est.config.workload,
                gpu=est.config.gpu_id,
                weights_gib=m.weights_gib,
                kv_cache_gib=m.kv_cache_gib,
                activations_gib=m.activations_gib,
                gradients_gib=m.gradients_gib,
                optimizer_gib=m.optimizer_gib,
                runtime_overhead_gib=m.runtime_overhead_gib,
                headroom_gib=m.headroom_gib,
                total_gib=m.total_gib,
                capacity_gib=m.capacity_gib,
            )
        )
    return bars


def _chosen(design: Design, gpu: str) -> str:
    kinds = sorted({h.kind for h in design.hardware if h.gpu == gpu})
    return "+".join(kinds) or "-"


def rent_buy_rows(estimates: Sequence[tuple[str, Any, str]], design: Design, horizon_months: float) -> list[RentBuyRow]:
    """Each layout rented (cheapest catalog instance holding a replica) and bought (owned servers)."""
    from clusterplan.physics import cost

    rows: list[RentBuyRow] = []
    for label, est, kind in estimates:
        cloud, owned = est.cloud, est.owned
        cfg = est.config
        capital = owned.capital_usd if owned is not None else None
        running = owned.power_usd_per_month if owned is not None else None
        if kind == "serving":
            # The estimate's costs over the requirement's horizon: the figures solve reports.
            period = f"over {horizon_months:g} months"
            rent_total = cloud.costs.total_usd if cloud is not None else None
            buy_total = owned.costs.total_usd if owned is not None else None
        else:
            hours = float(cost.billed_hours(est.training.time_to_train_s))
            period = f"for the run ({hours:,.0f} h)"
            rent_total = cloud.costs.one_off_usd if cloud is not None else None
            buy_total = None
            if capital is not None and running is not None:
                buy_total = capital + running * hours / cost.serving_hours_per_month()
        breakeven = None
        if cloud is not None and capital is not None and running is not None:
            be = cost.rent_vs_buy_breakeven(
                capital_usd=capital,
                cloud_usd_per_hour=cloud.usd_per_hour,
                owned_running_usd_per_hour=running / cost.serving_hours_per_month(),
                horizon_months=horizon_months,
            )
            breakeven = be.months_at_full_use if math.isfinite(be.months_at_full_use) else None
        cheaper: Literal["rent", "buy"] | None = None
        if rent_total is not None and buy_total is not None:
            cheaper = "rent" if rent_total < buy_total else "buy"
        rows.append(
            RentBuyRow(
                workload=cfg.workload,
                kind="serving" if kind == "serving" else "training",
                layout=label.partition(": ")[2],
                gpus=cfg.count,
                chosen=_chosen(design, cfg.gpu_id),
                period=period,
                rent_offer=f"{cloud.instance} x {cloud.instances}" if cloud is not None else None,
                rent_usd_per_hour=cloud.usd_per_hour if cloud is not None else None,
                rent_total_usd=rent_total,
                buy_servers=f"{owned.nodes} x {owned.gpus_per_node}-GPU server" if owned is not None else None,
                buy_capital_usd=capital,
                buy_running_usd_per_month=running,
                buy_total_usd=buy_total,
                breakeven_months=breakeven,
                cheaper=cheaper,
            )
        )
    return rows


def binding_rows(design: Design) -> list[BindingRow]:
    out: list[BindingRow] = []
    for c in design.constraints:
        if c.status != "binding":
            continue
        saving = design.costs.total_usd - c.relaxed_total_usd if c.relaxed_total_usd is not None else None
        out.append(
            BindingRow(
                family=c.family,
                title=c.title,
                detail=c.detail,
                relaxed_total_usd=c.relaxed_total_usd,
                saving_usd=saving,
                relaxed_design=c.relaxed_design,
            )
        )
    return out


def _per_class(value: Any, classes: Sequence[str]) -> str:
    vals = {c: value.of(c) for c in classes}
    if len(set(vals.values())) == 1:
        return f"{next(iter(vals.values())):g}"
    return ", ".join(f"{c} {v:g}" for c, v in vals.items())


def factor_rows(resolved: ResolvedRequirement, classes: Sequence[str]) -> list[FactorRow]:
    """Every efficiency factor and default in the requirement's Assumptions, for the GPU classes used."""
    a = resolved.requirement.assumptions
    overridden = set(a.overridden())
    rows: list[FactorRow] = []
    for name, info in type(a).model_fields.items():
        value = getattr(a, name)
        if hasattr(value, "of"):
            text = _per_class(value, classes)
        elif isinstance(value, dict):
            text = ", ".join(f"{k} {v:g}" if isinstance(v, int | float) else f"{k} {v}" for k, v in value.items())
        elif isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, float):
            text = f"{value:g}"
        else:
            text = str(value)
        rows.append(
            FactorRow(name=name, value=text, set_in_requirement=name in overridden, description=info.description or "")
        )
    return rows


def _source(catalog: Catalog, what: str, value: str, row: Any) -> SourceRow:
    ref = str(row.source)
    found = catalog.source(ref)
    return SourceRow(
        what=what,
        value=value,
        source=ref,
        title=found.title if found is not None else ref,
        url=found.url if found is not None else None,
        as_of=str(row.as_of),
        provisional=bool(getattr(row, "provisional", False)),
    )


def source_rows(catalog: Catalog, resolved: ResolvedRequirement, design: Design | None) -> list[SourceRow]:
    """The catalog rows the recommendation rests on, each with its source and date."""
    rows: list[SourceRow] = []
    req = resolved.requirement
    seen: set[str] = set()
    for i in range(len(req.workloads)):
        ref = req.model_of(i)
        if isinstance(ref, str):
            m = catalog.model(ref)
            if m.id not in seen:
                seen.add(m.id)
                params = f"{m.published_params / 1e9:,.1f}B parameters" if m.published_params else f"{m.layers} layers"
                rows.append(_source(catalog, f"model {m.name}", params, m))
    if design is None:
        return rows
    owned_classes: list[str] = []
    for gid in design.gpus_by_type:
        g = catalog.gpu(gid)
        bf16 = g.tflops("bf16")
        spec = f"{g.memory_gib:,.1f} GiB, {g.bandwidth_gb_per_s:,.0f} GB/s" + (
            f", bf16 {bf16:,.0f} TFLOPS" if bf16 else ""
        )
        rows.append(_source(catalog, f"GPU {g.name}", spec + f", {g.tdp_w:,.0f} W", g))
        if any(h.kind == "owned" and h.gpu == gid for h in design.hardware):
            if g.gpu_class not in owned_classes:
                owned_classes.append(g.gpu_class)
            if g.price is not None:
                rows.append(
                    _source(
                        catalog, f"purchase price {g.name}", f"{usd(g.price.usd)} per GPU ({g.price.kind})", g.price
                    )
                )
    for h in design.hardware:
        if h.kind == "cloud":
            key = h.offering.removeprefix("cloud:")
            inst = catalog.instance(key)
            rows.append(
                _source(
                    catalog,
                    f"instance {inst.key}",
                    f"{usd(inst.on_demand_usd_per_hour)}/h on demand, {inst.gpus_per_instance} GPUs, {inst.region}",
                    inst,
                )
            )
    o = catalog.owned
    for cls in owned_classes:
        server = o.server_usd_per_node.get(cls)  # type: ignore[call-overload]
        if server is not None:
            rows.append(_source(catalog, f"owned server ({cls})", f"{usd(server.value)} {server.unit}", server))
        net = o.network_usd_for(cls)  # type: ignore[arg-type]
        rows.append(_source(catalog, f"owned network ({cls})", f"{usd(net.value)} {net.unit}", net))
        pw = o.power_overhead_w_for(cls)  # type: ignore[arg-type]
        rows.append(_source(catalog, f"node power overhead ({cls})", f"{pw.value:,.0f} {pw.unit}", pw))
    if owned_classes:
        rows.append(_source(catalog, "PUE", f"{o.pue.value:g}", o.pue))
        e = o.electricity_usd_per_kwh
        rows.append(_source(catalog, "electricity", f"${e.value:g} {e.unit}", e))
    return rows


def _plain(x: float) -> str:
    return f"{x:.6g}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------------
# The summary paragraph
# ------------------------------------------------------------------------------------------------


def _actions(design: Design) -> list[str]:
    out: list[str] = []
    for h in design.hardware:
        if h.kind == "owned":
            servers = f"{h.gpus_per_unit}-GPU {h.gpu} server"
            buy = f"buy {h.bought} {servers}{'s' if h.bought != 1 else ''}" if h.bought else ""
            inv = f"use {h.from_inventory} {servers}{'s' if h.from_inventory != 1 else ''} from inventory"
            inv = inv if h.from_inventory else ""
            out.extend(x for x in (buy, inv) if x)
        else:
            out.append(f"rent {h.units} x {h.label} ({h.gpus} {h.gpu} GPUs in all) at {usd(h.usd_per_hour)}/h each")
    return out


def summary_text(plan: Plan, binding: Sequence[BindingRow]) -> str:
    """One paragraph: what to buy or rent, what it costs, what bounds it (or, if nothing fits, why)."""
    name = plan.requirement.name
    if not plan.designs:
        inf = plan.infeasibility
        if inf is None:
            return f"No design for {name} was found or ruled out within the time limit; raise --time-limit."
        if inf.unplaceable:
            return f"No design meets {name}: " + "; ".join(inf.unplaceable) + "."
        if not inf.conflict:
            return f"No design meets {name}: {inf.text}."
        titles = ", ".join(f.title for f in inf.conflict)
        fixes = [r.change for r in inf.relaxations if r.restores_feasibility]
        text = f"No design meets {name}: these requirements cannot all hold: {titles}."
        if fixes:
            text += " Any one of these changes restores feasibility: " + "; ".join(fixes) + "."
        else:
            text += " No single relaxation restores feasibility on its own; relax several of them."
        return text
    d = plan.designs[0]
    c = d.costs
    parts = [f"For {name}, " + "; ".join(_actions(d)) + "."]
    money = f"It costs {usd(c.capital_usd)} up front and {usd(c.monthly_usd)} a month"
    if c.one_off_usd:
        money += f", plus {usd(c.one_off_usd)} of one-off cloud training"
    money += f": {usd(c.total_usd)} over {c.horizon_months:g} months"
    if c.usd_per_million_output_tokens is not None:
        money += f" ({usd(c.usd_per_million_output_tokens)} per million output tokens)"
    parts.append(money + ".")
    for w in d.workloads:
        if isinstance(w, ServingPlan):
            parts.append(
                f"{w.workload} gets {w.capacity_rps:,.2f} req/s within its targets for {w.demand_rps:,.2f} req/s at "
                f"peak ({w.headroom_pct:+.0f}% headroom)."
            )
        else:
            due = f" against a {format_value(w.deadline_s, 'duration')} deadline" if w.deadline_s else ""
            parts.append(f"{w.workload} trains in {format_value(w.time_to_train_s, 'duration')}{due}.")
    if binding:
        bounds = []
        for b in binding:
            save = (
                f" would save {usd(b.saving_usd)}" if b.saving_usd is not None and b.saving_usd > 0.5 else " would help"
            )
            bounds.append(f"relaxing {b.title}{save}")
        parts.append("It is bounded by " + ", ".join(b.title for b in binding) + ": " + "; ".join(bounds) + ".")
    else:
        parts.append("No stated constraint binds: this is the least-cost way to run the workloads as given.")
    if plan.status == "feasible" and plan.solver.gap is not None:
        parts.append(f"The solver's time limit stopped the proof of optimality (gap {plan.solver.gap:.2%}).")
    return " ".join(parts)


# ------------------------------------------------------------------------------------------------
# What if
# ------------------------------------------------------------------------------------------------


BUDGET_FAMILIES = {
    "budget_total": "budget.total",
    "budget_monthly": "budget.monthly",
    "budget_capital": "budget.capital",
}
INFEASIBLE_DEMAND_FACTORS = (0.125, 0.25, 0.5, 0.75, 1.0)


def _spread(lo: float, hi: float, n: int = len(WHATIF_FACTORS)) -> list[float]:
    return [float(f"{lo + (hi - lo) * i / (n - 1):.4g}") for i in range(n)]


def _whatif_axis(base: Base, plan: Plan, choice: WhatIf) -> tuple[Axis, str] | None:
    """The axis and objective of the report's what-if sweep, or None when there is none to make.

    auto: demand for serving, the deadline for training; when the requirement is infeasible, the budget
    in the conflict from the value given to past its least relaxation (so the plot shows where it becomes
    feasible), or else demand below the value given.
    """
    data = base.data
    serving = first_workload(data, ("serving",)) is not None
    training = first_workload(data, ("training", "finetune")) is not None
    inf = plan.infeasibility
    if choice == "auto" and inf is not None:
        for r in inf.relaxations:
            if r.family in BUDGET_FAMILIES and r.value is not None and r.restores_feasibility:
                target = resolve_field(BUDGET_FAMILIES[r.family], data, base.catalog)
                given = _value_at(data, target.keys, target.quantity, target.field) or 0.0
                return Axis(target=target, values=_spread(given, r.value * 1.5)), "min_cost"
        if serving:
            target = resolve_field("demand", data, base.catalog)
            given = _value_at(data, target.keys, target.quantity, "demand") or 0.0
            return Axis(
                target=target, values=[float(f"{given * f:.4g}") for f in INFEASIBLE_DEMAND_FACTORS]
            ), "min_cost"
    if choice == "auto":
        choice = "demand" if serving else ("deadline" if training else "none")
    if choice == "none":
        return None
    if choice == "budget":
        target = resolve_field("budget", data, base.catalog)
        ref = _value_at(data, target.keys, "money", "budget")
        if ref is None and plan.designs:
            ref = plan.designs[0].costs.total_usd
        if ref is None:
            return None
        values = [round(ref * f, -2) for f in WHATIF_FACTORS]
        return Axis(target=target, values=values), ("max_throughput" if serving else "min_cost")
    target = resolve_field(choice, data, base.catalog)
    ref = _value_at(data, target.keys, target.quantity, choice)
    if ref is None:
        return None
    return Axis(target=target, values=[float(f"{ref * f:.4g}") for f in WHATIF_FACTORS]), "min_cost"


def _value_at(data: dict[str, Any], keys: Sequence[str | int], quantity: Any, field: str) -> float | None:
    node: Any = data
    for k in keys:
        if isinstance(k, int):
            node = node[k] if isinstance(node, list) and k < len(node) else None
        else:
            node = node.get(k) if isinstance(node, dict) else None
        if node is None:
            return None
    return parse_value(str(node), quantity, field=field)


# ------------------------------------------------------------------------------------------------
# Assembly
# ------------------------------------------------------------------------------------------------


def assemble(
    path: Path,
    catalog_paths: Sequence[Path] = (),
    *,
    top: int = 5,
    objective: str = "min_cost",
    settings: SolverSettings | None = None,
    whatif: WhatIf = "auto",
    jobs: int = 1,
    on_done: Callable[[int], None] | None = None,
) -> ReviewReport:
    """Plan ``path`` and gather everything the review shows. Raises ClusterplanError on bad input only:
    an infeasible requirement gives a report that explains the conflict."""
    from clusterplan.pipeline import PlanOptions, plan_requirement
    from clusterplan.whatif.sweep import load_base

    solver = settings or SolverSettings()
    base, resolved = load_base(path, catalog_paths)
    catalog = base.catalog
    plan = plan_requirement(resolved, catalog, PlanOptions(top=top, objective=objective, explain=True, settings=solver))
    design = plan.designs[0] if plan.designs else None
    warnings: list[str] = []
    estimates: list[tuple[str, Any, str]] = []
    if design is not None:
        try:
            estimates = _estimates(resolved, catalog, design)
        except ClusterplanError as exc:
            warnings.append(f"memory breakdown and rent-versus-buy left out: {exc.message}")
    binding = binding_rows(design) if design is not None else []
    sweep: SweepResult | None = None
    whatif_note = ""
    axis = _whatif_axis(base, plan, whatif)
    if axis is not None:
        ax, sweep_objective = axis
        sweep = run_sweep(base, [ax], objective=sweep_objective, solver=solver, jobs=jobs, on_done=on_done)
        spec = f"{_plain(ax.values[0])}..{_plain(ax.values[-1])}"
        whatif_note = (
            f"{ax.target.field}"
            + (f" ({ax.target.path})" if ax.target.path != ax.target.field else "")
            + f" at {len(ax.values)} values around the requirement's, "
            f"objective {sweep_objective}; for more points: clusterplan sweep {path} --vary "
            f"'{ax.target.field}={spec}' --steps 10"
            + (f" --objective {sweep_objective}" if sweep_objective != "min_cost" else "")
        )
    horizon = resolved.requirement.budget.horizon
    classes = sorted({catalog.gpu(g).gpu_class for g in design.gpus_by_type}) if design is not None else []
    catalogs = [UserCatalog(path=str(p), sha256=_sha256(p)) for p in catalog_paths]
    command = f"clusterplan report {path}" + "".join(f" --catalog {p}" for p in catalog_paths) + " -o REVIEW.md"
    return ReviewReport(
        title=resolved.requirement.name,
        status=plan.status,
        summary=summary_text(plan, binding),
        requirement_text=path.read_text(encoding="utf-8"),
        plan=plan,
        memory=memory_bars(estimates),
        binding=binding,
        whatif=sweep,
        whatif_note=whatif_note,
        rent_buy=rent_buy_rows(estimates, design, horizon) if design is not None else [],
        rent_buy_note=(
            "each workload's layout priced alone, both ways, as the planner prices it: rented on the cheapest "
            "instance type that holds its tensor-parallel groups, bought as the server size that costs least over "
            "the horizon (the largest at equal cost), electricity at full power x PUE; serving runs around the "
            "clock over the horizon, training for its billed hours"
        ),
        factors=factor_rows(resolved, classes or ["datacenter", "workstation", "consumer"]),
        planner_notes=list(plan.explanation.notes) if plan.explanation is not None else [],
        sources=source_rows(catalog, resolved, design),
        reproduce=Reproduce(
            clusterplan_version=__version__,
            catalog_fingerprint=catalog.fingerprint(),
            requirement_file=str(path),
            requirement_sha256=_sha256(path),
            user_catalogs=catalogs,
            command=command,
            objective=objective,
            random_seed=solver.random_seed,
            num_workers=solver.num_workers,
        ),
        warnings=warnings,
    )
