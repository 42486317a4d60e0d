"""The review's risk section: what could make design 1 miss its targets or stop being the best choice.

* single points of failure: serving workloads with one replica or no spare (N+0), and what is left of the
  capacity when the largest replica fails;
* prices that decide the choice: each catalog price design 1 (or design 2) depends on, and how far it must
  move before design 2 costs less (linear in the price: the totals are); the purchase price closest to
  switching is re-solved at that figure with the what-if machinery (two solves) to confirm;
* the targets design 1 meets only inside the model's error, and its chance of meeting each
  (:mod:`clusterplan.evaluation.uncertainty`);
* the model's measured accuracy for the kinds of figure the plan's workloads depend on.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from clusterplan.errors import ClusterplanError
from clusterplan.evaluation.uncertainty import INTERVAL, ErrorKind, error_quantile, model_error
from clusterplan.physics.cost import TERM_MONTHS, paid_months
from clusterplan.plan import Design, Plan, ServingPlan
from clusterplan.review.records import AccuracyRow, PriceRisk, Risk, SinglePoint
from clusterplan.units import HOURS_PER_MONTH

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import CloudInstance, Provenance
    from clusterplan.planner.solve import SolverSettings
    from clusterplan.whatif.points import Base, PointCache
    from clusterplan.whatif.sweep import SweepRow
    from clusterplan.whatif.vary import Axis

SWITCH_OVERSHOOT = 1.01  # re-solve 1% past the estimated switch figure, so a tie does not hide the change


def single_points(d: Design) -> list[SinglePoint]:
    out: list[SinglePoint] = []
    for w in d.workloads:
        if not isinstance(w, ServingPlan) or not w.groups:
            continue
        replicas = sum(g.replicas for g in w.groups)
        if replicas > 1 and w.redundancy > 0:
            continue
        per = [(g.rate_rps if w.capacity_rps > 0 else g.rate_no_targets_rps) for g in w.groups]
        # Each side of a request (a disaggregated design: its prefill pool and its decode pool, aggregated replicas
        # on both) loses its largest replica; what is left is the smaller side.
        sides = [("aggregated", "prefill"), ("aggregated", "decode")] if w.disaggregated else [("aggregated",)]
        left = min(
            sum(g.replicas * r for g, r in zip(w.groups, per, strict=True) if g.role in side)
            - max((r for g, r in zip(w.groups, per, strict=True) if g.role in side), default=0.0)
            for side in sides
        )
        pct = 100.0 * left / w.demand_rps if w.demand_rps > 0 else 0.0
        out.append(
            SinglePoint(workload=w.workload, replicas=replicas, spares=w.redundancy, capacity_after_loss_pct=pct)
        )
    return out


def _exposure(d: Design, horizon_months: float) -> dict[tuple[str, str], float]:
    """(kind, key) -> how much the design's total grows per USD of that price: GPUs bought (purchase price),
    instance-hours over the horizon (a serving instance's $/h)."""
    out: dict[tuple[str, str], float] = {}
    for h in d.hardware:
        if h.kind == "owned" and h.bought:
            key = ("purchase", h.gpu)
            out[key] = out.get(key, 0.0) + h.bought * h.gpus_per_unit
        elif h.kind == "cloud" and h.trains is None:  # a commitment is paid for whole terms
            key = ("instance", h.offering.removeprefix("cloud:"))
            out[key] = out.get(key, 0.0) + h.units * HOURS_PER_MONTH * paid_months(horizon_months, h.term_months)
    return out


def _instance_and_term(catalog: Catalog, key: str) -> tuple[CloudInstance, str]:
    """A cloud offering's key (``provider:id`` or ``provider:id:term``) as its catalog row and term."""
    provider, _, rest = key.partition(":")
    inst_id, _, term = rest.partition(":")
    return catalog.instance(f"{provider}:{inst_id}"), term or "on_demand"


def _provisional(row: Provenance, field: str) -> bool:
    """The row marks ``field`` recalled or derived (all its fields, or this one by name)."""
    return row.provisional and (not row.provisional_fields or field in row.provisional_fields)


def price_risks(plan: Plan, catalog: Catalog) -> tuple[list[PriceRisk], float | None]:
    """Each price whose move would make design 2 the cheaper one, nearest first (linear estimate)."""
    if len(plan.designs) < 2:
        return [], None
    d1, d2 = plan.designs[0], plan.designs[1]
    horizon = d1.costs.horizon_months
    gap = d2.costs.total_usd - d1.costs.total_usd
    e1, e2 = _exposure(d1, horizon), _exposure(d2, horizon)
    out: list[PriceRisk] = []
    for kind, key in sorted(set(e1) | set(e2)):
        net = e1.get((kind, key), 0.0) - e2.get((kind, key), 0.0)
        if net == 0:
            continue
        if kind == "purchase":
            g = catalog.gpu(key)
            if g.price is None:
                continue
            value, unit, prov, as_of, gpu = (
                g.price.usd,
                "USD per GPU",
                _provisional(g.price, "usd"),
                g.price.as_of,
                g.id,
            )
            what = f"purchase price {g.name}"
        else:
            inst, term = _instance_and_term(catalog, key)
            committed = inst.commitment(TERM_MONTHS[term]) if TERM_MONTHS[term] else None
            if committed is not None:
                value, prov, as_of = committed.usd_per_hour, committed.provisional, committed.as_of
            elif term == "spot" and inst.spot_usd_per_hour is not None:
                value, prov, as_of = inst.spot_usd_per_hour, _provisional(inst, "spot_usd_per_hour"), inst.as_of
            else:
                value, prov, as_of = inst.on_demand_usd_per_hour, inst.provisional, inst.as_of
            unit, gpu = "USD/h", inst.gpu_id
            what = f"instance {inst.key}" + ("" if term == "on_demand" else f" ({term})")
        switch = value + gap / net  # totals are linear in each price: d1 + net x change = d2
        if switch <= 0:
            continue
        out.append(
            PriceRisk(
                what=what, gpu=gpu, value_usd=value, unit=unit, provisional=prov, as_of=str(as_of),
                switch_usd=switch, change_pct=(switch / value - 1.0) * 100.0, resolved=False,
            )
        )  # fmt: skip
    out.sort(key=lambda r: abs(r.change_pct))
    return out, gap


def confirm_axis(risk: PriceRisk, base: Base) -> Axis:
    """The purchase price ``gpu_price.<gpu>`` at the catalog figure and just past the switch figure: two points."""
    from clusterplan.whatif.vary import make_axis

    past = risk.value_usd + (risk.switch_usd - risk.value_usd) * SWITCH_OVERSHOOT
    return make_axis(
        f"gpu_price.{risk.gpu}={risk.value_usd:.2f},{past:.2f}", base.data, base.catalog, steps=2, log=False
    )


def confirmed(risk: PriceRisk, rows: Sequence[SweepRow]) -> PriceRisk:
    """``risk`` marked re-solved, with the design past the switch figure and whether it changed (``rows``: the
    sweep along :func:`confirm_axis`; anything but two rows leaves the linear estimate)."""
    if len(rows) != 2:
        return risk
    before, after = rows
    return risk.model_copy(
        update={
            "resolved": True,
            "design_after": after.design,
            "changed": (after.shape, after.design) != (before.shape, before.design),
        }
    )


def confirm(
    risk: PriceRisk,
    base: Base,
    settings: SolverSettings,
    *,
    planned: Design | None = None,
    jobs: int = 1,
    meanwhile: Callable[[], None] | None = None,
    cache: PointCache | None = None,
) -> PriceRisk:
    """Re-solve at the catalog price and just past the switch figure (``gpu_price.<gpu>``, two solves: side by side
    in a process pool when ``jobs`` > 1, ``meanwhile`` called while they run). ``planned``: the plan's design 1 where
    it is the first point's (the plan's objective min_cost, proven optimal, at a catalog price the point keeps to the
    cent), which is then not planned again. ``cache``: what the points start from (the plan's rows and physics). A
    point that cannot be planned leaves the linear estimate, marked not re-solved."""
    from clusterplan.whatif.points import PointOutcome, StartedTasks, start_tasks
    from clusterplan.whatif.sweep import assemble, sweep_tasks

    try:
        axis = confirm_axis(risk, base)
        tasks = sweep_tasks(base, [axis], objective="min_cost", solver=settings)
    except ClusterplanError:
        return risk
    first: list[PointOutcome] = []
    if planned is not None and len(tasks) == 2 and axis.values[0] == risk.value_usd:
        first = [PointOutcome(index=0, values=list(tasks[0].values), status="optimal", design=planned)]
        tasks = tasks[1:]
    planning = (
        start_tasks(tasks, jobs=jobs, cache=cache)
        if jobs > 1
        else contextlib.nullcontext(StartedTasks(tasks, cache=cache))
    )
    with planning as started:
        if meanwhile is not None:
            meanwhile()
        try:
            rows = assemble(base, [axis], first + started.outcomes(), objective="min_cost").rows
        except ClusterplanError:
            return risk
    return confirmed(risk, rows)


ACCURACY_KINDS: dict[str, tuple[ErrorKind, ...]] = {
    "serving": ("serving_throughput", "latency", "memory"),
    "training": ("training_throughput", "memory"),
    "finetune": ("training_throughput", "memory"),
}


def accuracy_rows(plan: Plan) -> list[AccuracyRow]:
    e = model_error()
    kinds: list[ErrorKind] = []
    for w in plan.designs[0].workloads if plan.designs else []:
        for k in ACCURACY_KINDS[w.kind]:
            if k not in kinds and k in e.kinds:
                kinds.append(k)
    out: list[AccuracyRow] = []
    for k in kinds:
        ke = e.kinds[k]
        lo, hi = (math.exp(error_quantile(ke, q)) - 1.0 for q in INTERVAL)
        out.append(
            AccuracyRow(
                kind=k.replace("_", " "), cases=ke.cases, median_abs_error=ke.median_abs_error,
                bias_pct=(math.exp(ke.bias) - 1.0) * 100.0, range_pct=(lo * 100.0, hi * 100.0),
            )
        )  # fmt: skip
    return out


def risk_section(
    plan: Plan,
    catalog: Catalog,
    base: Base | None,
    settings: SolverSettings,
    *,
    jobs: int = 1,
    meanwhile: Callable[[], None] | None = None,
    cache: PointCache | None = None,
) -> Risk | None:
    """The risk section of a plan with a design (None without one). ``jobs`` and ``meanwhile``: the
    re-solves' (:func:`confirm`)."""
    if not plan.designs:
        return None
    d = plan.designs[0]
    prices, gap = price_risks(plan, catalog)
    first = next((i for i, r in enumerate(prices) if r.unit == "USD per GPU"), None)
    if first is not None and base is not None:
        # design 1 is the first point's where the plan minimised cost and proved it (what the point would plan again)
        planned = d if plan.status == "optimal" and plan.solver.objective == "min_cost" else None
        prices[first] = confirm(
            prices[first], base, settings, planned=planned, jobs=jobs, meanwhile=meanwhile, cache=cache
        )
    return Risk(
        single_points=single_points(d),
        prices=prices,
        price_gap_usd=gap,
        within_error=[o for o in d.odds if o.within_error],
        odds=list(d.odds),
        accuracy=accuracy_rows(plan),
        accuracy_as_of=model_error().as_of,
        confidence=plan.confidence,
    )
