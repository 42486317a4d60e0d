"""``clusterplan rent-vs-buy``: one design's hardware rented and bought, month by month, and the break-even month.

The hardware is a plan's design (the command plans the requirement and passes design 1) or a GPU type and count
given on the command line. Each side is priced by :mod:`clusterplan.evaluation.pricing` on the planner's offerings
(:func:`clusterplan.candidates.offerings.build_offerings`), as ``solve`` prices a design:

* the side the design itself uses is the design's own hardware lines (so its total at the requirement's horizon
  is ``solve``'s total, to the cent);
* the other side hosts the same replica groups (serving: ``replicas x pp`` TP groups of each group's ``tp``;
  training: ``pp x dp`` groups of ``tp``) on the cheapest offering of that kind
  (:func:`clusterplan.evaluation.pricing.cheapest_hosting`; a cloud training run:
  :func:`clusterplan.evaluation.pricing.cheapest_training_cloud`, billed once in whole hours).

Cumulative cost after ``m`` months is :func:`clusterplan.evaluation.pricing.costs` with ``horizon_months=m``
(capital + one-off + m x monthly); the break-even month is
:func:`clusterplan.physics.cost.rent_vs_buy_breakeven` on the difference of the fixed costs.

Every pool (a replica group or a training layout) is also answered alone (:func:`pool_break_even`): its
break-even month, or a reason code where there is none. Where no cloud sells the exact packaging (a TP group
larger than any instance's NVLink domain; several instances without a fabric between them for training), the
pool is rented on the nearest packaging (the cheapest instance type of that GPU holding as many GPUs, priced
alike) and marked so; the design's rent side uses those lines too, so the curve and the break-even exist.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from clusterplan.design.estimate import Result
from clusterplan.design.selfhost import SelfHostVsApi
from clusterplan.errors import ClusterplanError
from clusterplan.evaluation import pricing
from clusterplan.physics import cost
from clusterplan.plan import Costs, Design, HardwareLine, ServingPlan

if TYPE_CHECKING:
    from clusterplan.candidates.table import Offering
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import GpuSpec
    from clusterplan.requirement.schema import Requirement


@dataclass(frozen=True, slots=True)
class Terms:
    """What both sides are priced over: the requirement's horizon and the operations of each GPU type and serving
    pool (catalog owned.yaml; :class:`clusterplan.evaluation.pricing.Operations`)."""

    horizon_months: float
    operations: pricing.Operations


DEFAULT_CURVE_MONTHS = 60  # the curve runs to the horizon or this, whichever is longer, and past the break-even
MAX_CURVE_MONTHS = 240  # the longest horizon a requirement may state


@dataclass(frozen=True, slots=True)
class Need:
    """TP groups of one GPU type that one workload runs on (one replica group, or one training layout)."""

    gpu_id: str
    gpu_name: str
    tp: int
    groups: int
    workload: str
    training_s: float | None = None  # a training run's modelled time: rented once, billed in whole hours
    role: str = "aggregated"  # serving: aggregated, prefill or decode; training: training
    interruptible: bool = False  # the workload may run on spot (requirement ``interruptible``)


class Side(Result):
    """The hardware rented, or bought, and its costs over the requirement's horizon."""

    kind: Literal["rent", "buy"]
    hardware: list[HardwareLine]
    costs: Costs | None = Field(description="over the requirement's horizon (pricing.costs); None: not possible")
    missing: list[str] = Field(default_factory=list, description="GPU types no offering of this kind hosts")
    from_design: bool = Field(description="the design's own hardware lines, as solve priced them")
    nearest: list[str] = Field(
        default_factory=list, description="GPU types rented on the nearest packaging: the exact one is not sold"
    )


# Why a pool's rent line is not the exact packaging the layout needs (codes; words in render/rent_buy_view.py).
NearestGap = Literal["tp_exceeds_instance_domain", "no_fabric"]
# Why a pool has no break-even month.
NoBreakEven = Literal["no_cloud_offer", "no_purchase_price", "no_owned_packaging", "never_catches_up"]


class PoolBreakEven(Result):
    """One pool (a serving replica group or a training layout) rented and bought alone."""

    workload: str
    role: str = Field(description="aggregated, prefill, decode or training")
    gpu: str
    gpu_name: str
    tp: int
    gpus: int
    rent: HardwareLine | None = Field(description="the cheapest cloud line hosting the pool; None: no cloud offer")
    rent_one_off_usd: float = Field(description="a training run rented once, billed in whole hours, USD")
    rent_gap: NearestGap | None = Field(description="set: the rent line is the nearest packaging, and why")
    buy: HardwareLine | None = Field(description="the cheapest owned line hosting the pool; None: cannot be bought")
    break_even_month: float | None = Field(description="months after which buying this pool costs less")
    reason: NoBreakEven | None = Field(description="why there is no break-even month (None: there is one)")


class CurvePoint(Result):
    month: float
    rent_usd: float | None = Field(description="cumulative: capital + one-off + months x monthly, USD")
    buy_usd: float | None


class RentVsBuy(Result):
    requirement: str
    source: str = Field(description="which hardware: design 1 of the plan, or the command line's GPU and count")
    gpus: dict[str, int]
    horizon_months: float
    rent: Side
    buy: Side
    break_even_month: float | None = Field(
        description="months of use after which buying costs less than renting (0: from the start; None: never)"
    )
    first_cheaper_month: int | None = Field(description="first whole month at which buying costs no more")
    cheaper_at_horizon: Literal["rent", "buy"] | None
    pools: list[PoolBreakEven] = Field(
        default_factory=list, description="each pool rented and bought alone: its break-even month or why none"
    )
    curve: list[CurvePoint]
    notes: list[str] = Field(default_factory=list)
    self_host_vs_api: SelfHostVsApi | None = Field(
        None, description="each side beside hosted API prices for the requirement's serving model (design/selfhost.py)"
    )


# ------------------------------------------------------------------------------------------------
# What the hardware must host
# ------------------------------------------------------------------------------------------------


def needs_of_design(design: Design, interruptible: frozenset[str] = frozenset()) -> list[Need]:
    """Each serving replica group and each training layout of a design, as TP groups to host (``interruptible``:
    the workloads that may run on spot)."""
    out: list[Need] = []
    for w in design.workloads:
        spot = w.workload in interruptible
        if isinstance(w, ServingPlan):
            out += [
                # a demand profile's burst replicas are rented by the hour on either side (side_costs): not held
                Need(
                    g.gpu,
                    g.gpu_name,
                    g.tp,
                    (g.replicas - g.burst_replicas) * g.pp,
                    w.workload,
                    role=g.role,
                    interruptible=spot,
                )
                for g in w.groups
            ]
        else:
            gpus = w.cp * w.pp * w.dp
            out.append(Need(w.gpu, w.gpu_name, w.tp, gpus, w.workload, w.time_to_train_s, "training", spot))
    return out


def needs_of_gpus(spec: GpuSpec, count: int, tp: int) -> list[Need]:
    """``count`` GPUs in TP groups of ``tp``, run around the clock."""
    if tp < 1 or count < 1 or count % tp:
        raise ClusterplanError(
            f"--count {count} is not a positive multiple of --tp {tp}",
            fix="give a count that is a multiple of the tensor-parallel degree",
        )
    return [Need(spec.id, spec.name, tp, count // tp, "command line")]


def offerings_for(catalog: Catalog, req: Requirement, gpu_ids: Sequence[str]) -> list[Offering]:
    """The planner's offerings of these GPU types, both deployments (the requirement's ``deployment`` is what
    this command weighs, so it does not filter); any other rule that forbids an offering still does."""
    from clusterplan.candidates.offerings import build_offerings, gpu_type_of, limits_of
    from clusterplan.candidates.table import DEPLOYMENT

    types = {g: gpu_type_of(catalog.gpus[g]) for g in sorted(set(gpu_ids))}
    offerings, _ = build_offerings(catalog, req, types, limits_of(req, catalog))
    return [o for o in offerings if all(family == DEPLOYMENT for family, _ in o.forbidden_by)]


# ------------------------------------------------------------------------------------------------
# Pricing both sides
# ------------------------------------------------------------------------------------------------


def rent_need(
    n: Need, offerings: Sequence[Offering], horizon_months: float, *, nearest: bool = False
) -> tuple[HardwareLine, float, NearestGap | None] | None:
    """The cheapest cloud line for one need, its one-off (training) cost, and, when ``nearest`` is allowed and
    the exact packaging is not sold, why the line is only the nearest; None: no cloud offer of the GPU at all."""
    gpus = n.tp * n.groups
    if n.training_s is not None:
        o, units, run_usd, tp_fits = pricing.cheapest_training_cloud(
            offerings, n.gpu_id, n.tp, gpus, n.training_s, interruptible=n.interruptible
        )
        gap: NearestGap | None = None if tp_fits else "tp_exceeds_instance_domain"
        if o is None and nearest:  # every offer of the GPU lacks a fabric between instances
            gap = "no_fabric"
            # ceil(GPUs / GPUs per instance) instances; of equal cost, the fewest (the largest instances).
            priced = [
                (pricing.training_run_usd(x, -(-gpus // x.gpus_per_unit), n.training_s), -x.gpus_per_unit, x.key, x)
                for x in offerings
                if x.kind == "cloud"
                and x.gpu_id == n.gpu_id
                and not x.term_months
                and (x.term != "spot" or n.interruptible)
            ]
            if priced:
                run_usd, _, _, o = min(priced)
                units = -(-gpus // o.gpus_per_unit)
        if o is None or (gap is not None and not nearest):
            return None
        line = pricing.training_cloud_line(o, units, gpu_name=n.gpu_name, workload=n.workload, seconds=n.training_s)
        return line, run_usd, gap
    found = pricing.cheapest_hosting(
        offerings, gpu_id=n.gpu_id, kind="cloud", tp=n.tp, groups=n.groups, horizon_months=horizon_months
    )
    if found is not None:
        return pricing.cloud_line(found[0], found[1], gpu_name=n.gpu_name), 0.0, None
    if not nearest:
        return None
    # No instance's NVLink domain holds the TP group: the same GPUs on the cheapest instance type of that GPU.
    # ceil(GPUs / GPUs per instance) instances a month; of equal cost, the fewest (the largest instances).
    priced_units = [
        (-(-gpus // x.gpus_per_unit) * x.horizon_usd(horizon_months), -x.gpus_per_unit, x.key, x)
        for x in offerings
        if x.kind == "cloud" and x.gpu_id == n.gpu_id and x.serves
    ]
    if not priced_units:
        return None
    _, _, _, o = min(priced_units)
    return pricing.cloud_line(o, -(-gpus // o.gpus_per_unit), gpu_name=n.gpu_name), 0.0, "tp_exceeds_instance_domain"


def rent_lines(
    needs: Sequence[Need], offerings: Sequence[Offering], horizon_months: float
) -> tuple[list[HardwareLine], float, list[str], list[str]]:
    """Cloud lines for every need, the one-off training cost, the GPU types no instance hosts, and those rented
    on the nearest packaging (:func:`rent_need`)."""
    lines: list[HardwareLine] = []
    one_off = 0.0
    missing: list[str] = []
    nearest: list[str] = []
    for n in needs:
        found = rent_need(n, offerings, horizon_months, nearest=True)
        if found is None:
            missing.append(n.gpu_name)
            continue
        line, run_usd, gap = found
        lines.append(line)
        one_off += run_usd
        if gap is not None:
            nearest.append(n.gpu_name)
    return lines, one_off, missing, nearest


def buy_lines(
    needs: Sequence[Need], offerings: Sequence[Offering], horizon_months: float
) -> tuple[list[HardwareLine], list[str]]:
    """Owned lines for every need (inventory servers first, as the planner counts them), and the GPU types that
    cannot be owned (no purchase price and too little inventory)."""
    lines: list[HardwareLine] = []
    missing: list[str] = []
    for n in needs:
        found = pricing.cheapest_hosting(
            offerings, gpu_id=n.gpu_id, kind="owned", tp=n.tp, groups=n.groups, horizon_months=horizon_months
        )
        if found is None:
            missing.append(n.gpu_name)
            continue
        o, bought, inventory = found
        lines.append(pricing.owned_line(o, bought=bought, from_inventory=inventory, gpu_name=n.gpu_name))
    return lines, missing


def pools_of(needs: Sequence[Need], kind: Literal["cloud", "owned"]) -> set[pricing.PoolKey]:
    """The serving pools of ``needs`` run on one side (:func:`clusterplan.evaluation.pricing.serving_pools`'s keys;
    a training run is no pool)."""
    return {(n.workload, n.role, n.gpu_id, kind) for n in needs if n.training_s is None}


def side_costs(
    lines: Sequence[HardwareLine], one_off_usd: float, months: float, ops: pricing.Operations,
    pools: set[pricing.PoolKey], output_tokens_per_s: float = 0.0, burst_usd_per_month: float = 0.0,
) -> Costs:  # fmt: skip
    """One side over ``months``: :func:`clusterplan.evaluation.pricing.costs`, its pools' and GPU types' operations in
    (and a demand profile's burst tier, rented on demand whichever side holds the base)."""
    return pricing.costs(
        lines, horizon_months=months, one_off_usd=one_off_usd, output_tokens_per_s=output_tokens_per_s,
        operations=ops, pools=pools, burst_usd_per_month=burst_usd_per_month,
    )  # fmt: skip


def break_even_month(rent: Costs, buy: Costs) -> float | None:
    """Months after which buying costs less: :func:`clusterplan.physics.cost.rent_vs_buy_breakeven` with the
    difference of the fixed costs (capital + one-off) as the capital and each side's monthly cost as an hourly
    rate (/ 730 h). 0 when buying costs no more from the start and per month; None when it never catches up."""
    fixed = (buy.capital_usd + buy.one_off_usd) - (rent.capital_usd + rent.one_off_usd)
    hours = cost.serving_hours_per_month()
    if fixed <= 0:
        return 0.0 if buy.monthly_usd <= rent.monthly_usd else None
    be = cost.rent_vs_buy_breakeven(
        capital_usd=fixed, cloud_usd_per_hour=rent.monthly_usd / hours,
        owned_running_usd_per_hour=buy.monthly_usd / hours,
    )  # fmt: skip
    return be.months_at_full_use if math.isfinite(be.months_at_full_use) else None


def pool_break_even(n: Need, offerings: Sequence[Offering], terms: Terms) -> PoolBreakEven:
    """One pool rented (exact packaging, else the nearest) and bought alone, its break-even month or the reason
    there is none: no cloud offer of the GPU, no purchase price (and too little inventory), no owned server whose
    NVLink domain holds the TP group, or buying never catches up (a training run rented once, or a rent cheaper
    than owning's month)."""
    horizon_months, ops = terms.horizon_months, terms.operations
    rented = rent_need(n, offerings, horizon_months, nearest=True)
    owned = buy_lines([n], offerings, horizon_months)[0]
    buy = owned[0] if owned else None
    be: float | None = None
    reason: NoBreakEven | None = None
    if rented is None:
        reason = "no_cloud_offer"
    elif buy is None:
        sold = any(o.kind == "owned" and o.gpu_id == n.gpu_id and o.purchasable for o in offerings)
        reason = "no_owned_packaging" if sold else "no_purchase_price"  # sold, but no server holds its TP group
    else:
        rent_c = side_costs([rented[0]], rented[1], horizon_months, ops, pools_of([n], "cloud"))
        buy_c = side_costs([buy], 0.0, horizon_months, ops, pools_of([n], "owned"))
        be = break_even_month(rent_c, buy_c)
        reason = "never_catches_up" if be is None else None
    return PoolBreakEven(
        workload=n.workload, role=n.role, gpu=n.gpu_id, gpu_name=n.gpu_name, tp=n.tp, gpus=n.tp * n.groups,
        rent=rented[0] if rented else None, rent_one_off_usd=rented[1] if rented else 0.0,
        rent_gap=rented[2] if rented else None, buy=buy, break_even_month=be, reason=reason,
    )  # fmt: skip


def first_cheaper_month(
    break_even: float, rent_usd: Callable[[float], float], buy_usd: Callable[[float], float]
) -> int:
    """The first whole month at which buying has cost no more than renting: the break-even rounded up, checked
    against the cumulative costs (a break-even a rounding error past a whole month lands on that month)."""
    m = math.ceil(break_even)
    while m > 0 and buy_usd(m - 1) <= rent_usd(m - 1):
        m -= 1
    while buy_usd(m) > rent_usd(m) and m < MAX_CURVE_MONTHS:
        m += 1
    return m


def curve_months(horizon_months: float, break_even: float | None, months: int | None) -> list[float]:
    """0, 1, ... up to ``months`` if given, else the longer of the horizon and ``DEFAULT_CURVE_MONTHS`` and one past
    the break-even (at most ``MAX_CURVE_MONTHS``); the horizon itself is always a point."""
    if months is None:
        months = max(math.ceil(horizon_months), DEFAULT_CURVE_MONTHS)
        if break_even is not None:
            months = max(months, math.floor(break_even) + 1)
        months = min(months, MAX_CURVE_MONTHS)
    points = {float(m) for m in range(months + 1)}
    points.add(float(horizon_months))
    return sorted(points)


def rent_vs_buy(
    needs: Sequence[Need],
    offerings: Sequence[Offering],
    *,
    requirement: str,
    terms: Terms,
    source: str,
    design: Design | None = None,
    output_tokens_per_s: float = 0.0,
    months: int | None = None,
) -> RentVsBuy:
    """Both sides, the break-even month and the curve. A design all on one kind keeps its own lines for that side.
    Each side pays the operations of its GPU types and of the design's serving pools on that side."""
    horizon_months, ops = terms.horizon_months, terms.operations
    r_pools, b_pools = pools_of(needs, "cloud"), pools_of(needs, "owned")
    notes: list[str] = []
    r_lines, r_one_off, r_missing, r_nearest = rent_lines(needs, offerings, horizon_months)
    b_lines, b_missing = buy_lines(needs, offerings, horizon_months)
    b_one_off = 0.0
    rent_own = buy_own = False
    burst = pricing.plan_burst_usd_per_month(design.workloads) if design is not None else 0.0
    if design is not None:
        kinds = {x.kind for x in design.hardware}
        if kinds == {"cloud"}:
            r_lines, r_one_off, r_missing, rent_own = list(design.hardware), design.costs.one_off_usd, [], True
            r_nearest = []
        elif kinds == {"owned"}:
            b_lines, b_missing, buy_own = list(design.hardware), [], True
            b_one_off = design.costs.one_off_usd
        else:
            notes.append("the design rents some GPUs and owns others: both sides are priced from its replica groups")
        if buy_own and len({n.workload for n in needs}) > 1:
            notes.append(
                "renting prices each workload's GPUs separately (training once, serving monthly); the design's "
                "owned servers may be shared between workloads (schedule: sequential)"
            )

    def side(
        kind: Literal["rent", "buy"], lines: list[HardwareLine], one_off: float, missing: list[str], own: bool,
        nearest: Sequence[str] = (),
    ) -> Side:  # fmt: skip
        c = None
        if not missing:
            c = side_costs(
                lines, one_off, horizon_months, ops, r_pools if kind == "rent" else b_pools, output_tokens_per_s, burst
            )
        return Side(
            kind=kind, hardware=lines, costs=c, missing=sorted(set(missing)), from_design=own,
            nearest=sorted(set(nearest)),
        )  # fmt: skip

    rent = side("rent", r_lines, r_one_off, r_missing, rent_own, r_nearest)
    buy = side("buy", b_lines, b_one_off, b_missing, buy_own)
    if rent.nearest:
        notes.append(
            f"no cloud sells {', '.join(rent.nearest)} in the packaging this layout needs: the rent side is priced "
            "on the nearest one (the same GPUs on the cheapest instance type of that GPU; see each pool)"
        )
    if rent.missing:
        notes.append(f"no cloud instance in the catalog hosts {', '.join(rent.missing)} in this layout: no rent side")
    if buy.missing:
        notes.append(
            f"{', '.join(buy.missing)}: no purchase price in the catalog and too little inventory: no buy side"
        )
    be = break_even_month(rent.costs, buy.costs) if rent.costs is not None and buy.costs is not None else None
    curve = [
        CurvePoint(
            month=m,
            rent_usd=side_costs(r_lines, r_one_off, m, ops, r_pools, 0.0, burst).total_usd
            if rent.costs is not None
            else None,
            buy_usd=side_costs(b_lines, b_one_off, m, ops, b_pools, 0.0, burst).total_usd
            if buy.costs is not None
            else None,
        )
        for m in curve_months(horizon_months, be, months)
    ]
    first = None
    if be is not None:
        first = first_cheaper_month(
            be,
            lambda m: side_costs(r_lines, r_one_off, m, ops, r_pools, 0.0, burst).total_usd,
            lambda m: side_costs(b_lines, b_one_off, m, ops, b_pools, 0.0, burst).total_usd,
        )
    cheaper: Literal["rent", "buy"] | None = None
    if rent.costs is not None and buy.costs is not None:
        cheaper = "buy" if buy.costs.total_usd <= rent.costs.total_usd else "rent"
    gpus: dict[str, int] = {}
    for n in needs:
        gpus[n.gpu_id] = gpus.get(n.gpu_id, 0) + n.tp * n.groups
    if design is not None:
        gpus = dict(design.gpus_by_type)
    return RentVsBuy(
        requirement=requirement, source=source, gpus=gpus, horizon_months=horizon_months, rent=rent, buy=buy,
        break_even_month=be, first_cheaper_month=first, cheaper_at_horizon=cheaper, curve=curve, notes=notes,
        pools=[pool_break_even(n, offerings, terms) for n in needs],
    )  # fmt: skip
