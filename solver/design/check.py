"""The independent checker: the executable specification of a valid plan. It never uses CP-SAT.

It reads a returned :class:`clusterplan.plan.Design` (the *output*, not the model's variables) and
confirms every stated constraint from first principles:

* :func:`check_plan` re-evaluates each replica group and training layout with the physics functions
  (memory fit, the full-precision ``max_rate_for_targets``, p95 at the load each replica actually
  receives), re-prices every instance and server from the catalog, packs every tensor-parallel group
  into a concrete NVLink domain (first-fit decreasing), and checks budgets, GPU count, power,
  inventory, allowed GPUs and precisions, clouds and deployment.
* :func:`check_design_on_table` does the same arithmetic against a candidate table's rows, for
  synthetic tables that have no physics behind them (the model's tests and the brute-force
  cross-check).

Both return a list of readable violations; an empty list means the design is valid.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from clusterplan.evaluation import pricing
from clusterplan.physics.layout import Layout, Recompute
from clusterplan.physics.optimizer_memory import MemoryPlan
from clusterplan.physics.reasons import KvStreamOverLink, ReasonCategory, without
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.plan import Design, HardwareLine, ReplicaGroup, ServingPlan, TrainingPlan
from clusterplan.units import HOURS_PER_MONTH
from clusterplan.wording.reasons import render_reason

if TYPE_CHECKING:
    from clusterplan.candidates.table import CandidateTable
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import CloudInstance, GpuSpec, ModelArchitecture, OwnedCosts
    from clusterplan.evaluation.uncertainty import Derate
    from clusterplan.physics.factors import Assumptions
    from clusterplan.physics.types import ServingEstimate
    from clusterplan.requirement.load import ResolvedRequirement
    from clusterplan.requirement.schema import FinetuneWorkload, Requirement, ServingWorkload, TrainingWorkload

USD_TOLERANCE = 0.05  # costs are recomputed in floats; the model works in whole cents
REL_TOLERANCE = 1e-6


# ------------------------------------------------------------------------------------------------
# Packing: place every tensor-parallel group inside one NVLink domain
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """A cloud instance or an owned server: ``gpus`` slots split into NVLink domains of ``domain``."""

    gpus: int
    domain: int

    def bins(self) -> list[int]:
        """Each whole domain as the powers of two that sum to it (an NVL72 rack: 64 + 8, which holds exactly
        ``floor(72 / t)`` groups of a power-of-two ``t``, as ``Offering.tp_capacity`` counts); leftovers as 1s."""
        span = max(1, min(self.domain, self.gpus)) if self.gpus >= 1 else 1
        full = self.gpus // span
        parts = [1 << i for i in range(span.bit_length()) if span >> i & 1]
        return parts * full + [1] * (self.gpus - full * span)


def pack(groups: Iterable[int], units: Iterable[Unit]) -> bool:
    """First-fit decreasing of TP groups (powers of two) into NVLink domains; exact for powers of two.

    Domains are powers of two; when every group is too, a domain's free room stays a multiple of
    the group being placed, so one domain with room is as good as another and first fit reduces to
    counting free room by size: O(groups x sizes) instead of O(groups x domains), which took minutes
    for 17,000 replicas on 67,000 GPUs.
    """
    items = sorted(groups, reverse=True)
    bins = [b for u in units for b in u.bins()]
    if all(g >= 1 and g & (g - 1) == 0 for g in items):
        rooms = Counter(bins)
        for size in items:
            room = min((r for r, n in rooms.items() if n and r >= size), default=None)
            if room is None:
                return False
            rooms[room] -= 1
            rooms[room - size] += 1
        return True
    free = sorted(bins, reverse=True)
    for size in items:
        for i, room in enumerate(free):
            if room >= size:
                free[i] = room - size
                break
        else:
            return False
    return True


def _ok_le(value: float, limit: float) -> bool:
    return value <= limit + max(USD_TOLERANCE, abs(limit) * REL_TOLERANCE)


def _close(a: float, b: float, tol: float = USD_TOLERANCE) -> bool:
    return abs(a - b) <= max(tol, max(abs(a), abs(b)) * REL_TOLERANCE)


# ------------------------------------------------------------------------------------------------
# Checks common to both checkers (given unit descriptions and prices)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Priced:
    """One hardware line as the checker prices it."""

    line: HardwareLine
    unit: Unit
    capital_usd: float
    monthly_usd: float
    power_w: float


def _stage_groups(g: ReplicaGroup, domain: int) -> tuple[int, int]:
    """(GPUs on one NVLink domain, such groups per stage) of a replica group: its TP group, or a wide-EP stage's
    share of each server (Layout.nvlink_group)."""
    from clusterplan.evaluation import evaluate

    layout = evaluate.replica_layout(g)
    return layout.nvlink_group(domain), layout.servers(domain)


def _placement(design: Design, priced: list[Priced], sequential: bool, problems: list[str]) -> None:
    """Every TP group of every workload fits the units of its GPU type and deployment."""
    cloud_pool: dict[str, list[Unit]] = defaultdict(list)
    owned_pool: dict[str, list[Unit]] = defaultdict(list)
    train_units: dict[str, list[Unit]] = defaultdict(list)
    for p in priced:
        x = p.line
        if x.kind == "cloud" and x.trains is not None:
            train_units[x.trains] += [p.unit] * x.units
        elif x.kind == "cloud":
            cloud_pool[x.gpu] += [p.unit] * x.units
        else:
            owned_pool[x.gpu] += [p.unit] * x.units
    cloud_items: dict[str, list[int]] = defaultdict(list)
    owned_items: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for w in design.workloads:
        if isinstance(w, ServingPlan):
            for g in w.groups:
                domain = max((u.domain for u in cloud_pool[g.gpu] + owned_pool[g.gpu]), default=g.tp)
                group, servers = _stage_groups(g, domain)
                cloud_items[g.gpu] += [group] * (g.cloud_replicas * g.pp * servers)
                owned_items[g.gpu][w.workload] += [group] * (g.owned_replicas * g.pp * servers)
        else:
            groups = [w.tp] * (w.cp * w.pp * w.dp)
            if w.deployment == "owned":
                owned_items[w.gpu][w.workload] += groups
            elif not pack(groups, train_units.get(w.workload, [])):
                problems.append(f"{w.workload}: {w.gpus} GPUs in TP{w.tp} groups do not fit its cloud instances")
    for gpu, items in cloud_items.items():
        if items and not pack(items, cloud_pool.get(gpu, [])):
            problems.append(f"cloud {gpu}: serving TP groups {sorted(items, reverse=True)} do not fit the instances")
    for gpu, by_w in owned_items.items():
        units = owned_pool.get(gpu, [])
        if sequential:
            for wname, items in by_w.items():
                if items and not pack(items, units):
                    problems.append(f"owned {gpu}: {wname}'s TP groups do not fit the servers")
        else:
            items = [i for v in by_w.values() for i in v]
            if items and not pack(items, units):
                problems.append(f"owned {gpu}: TP groups {sorted(items, reverse=True)} do not fit the servers")


def _pools_on_a_fabric(design: Design, catalog: Catalog, problems: list[str]) -> None:
    """A disaggregated workload's cloud pools of a datacenter GPU fit on instances with a fabric between them (the
    KV stream crosses over RDMA: evaluation/pools.kv_link; the planner's structure (4d))."""
    from clusterplan.candidates.offerings import has_fabric

    def pooled(g: ReplicaGroup, spec: GpuSpec) -> bool:
        wide = _stage_groups(g, min(spec.scale_up_domain, spec.max_gpus_per_node))[1] > 1
        return (g.role != "aggregated" or wide) and spec.gpu_class == "datacenter"

    for gpu, n, cap in _cloud_gpus_short(design, catalog, pooled, lambda i: has_fabric(catalog, i)):
        problems.append(
            f"cloud {gpu}: {n} GPUs of prefill and decode pools, {cap} on instances with a fabric between them "
            "(their KV stream crosses over RDMA)"
        )


def _wide_ep_network(design: Design, catalog: Catalog, per_gpu_gb_per_s: float, problems: list[str]) -> None:
    """A wide-EP replica on cloud sits on instances whose fabric gives at least the network per GPU its all-to-all
    was rated at (the requirement's inter_node_bandwidth_gb_per_s; the planner's structure (4d))."""
    from clusterplan.candidates.offerings import network_per_gpu

    def wide(g: ReplicaGroup, spec: GpuSpec) -> bool:
        return _stage_groups(g, min(spec.scale_up_domain, spec.max_gpus_per_node))[1] > 1

    def fast(i: CloudInstance) -> bool:
        return network_per_gpu(catalog, i) >= per_gpu_gb_per_s

    for gpu, n, cap in _cloud_gpus_short(design, catalog, wide, fast):
        problems.append(
            f"cloud {gpu}: {n} GPUs of wide-EP replicas, {cap} on instances whose fabric gives "
            f"{per_gpu_gb_per_s:g} GB/s per GPU (their all-to-all crosses servers at that rate)"
        )


def _cloud_gpus_short(
    design: Design,
    catalog: Catalog,
    needs: Callable[[ReplicaGroup, GpuSpec], bool],
    fits: Callable[[CloudInstance], bool],
) -> list[tuple[str, int, int]]:
    """(GPU, GPUs needed, GPUs placed) per GPU type where the cloud serving replicas that ``needs`` an instance
    ``fits`` (a fabric, a fast enough one) outnumber the serving GPUs the design rents on such instances."""
    need: dict[str, int] = defaultdict(int)
    for w in design.workloads:
        if isinstance(w, ServingPlan):
            for g in w.groups:
                if needs(g, catalog.gpus[g.gpu]):
                    need[g.gpu] += g.cloud_replicas * g.tp * g.pp
    short = []
    for gpu, n in sorted(need.items()):
        cap = sum(
            x.gpus
            for x in design.hardware
            if x.kind == "cloud" and x.trains is None and x.gpu == gpu and fits(catalog.instances[x.instance_key])
        )
        if n > cap:
            short.append((gpu, n, cap))
    return short


def _gpus_in_use(priced: list[Priced], sequential: bool) -> int:
    owned = sum(p.line.gpus for p in priced if p.line.kind == "owned")
    serving = sum(p.line.gpus for p in priced if p.line.kind == "cloud" and p.line.trains is None)
    training = [p.line.gpus for p in priced if p.line.kind == "cloud" and p.line.trains is not None]
    return owned + (max([serving, *training]) if sequential else serving + sum(training))


def _totals(
    design: Design,
    priced: list[Priced],
    one_off: float,
    horizon: float,
    tokens_per_s: float,
    operations: pricing.Operations,
    problems: list[str],
) -> None:
    """The design's costs against its hardware as this checker priced it, totalled by
    :func:`clusterplan.evaluation.pricing.costs` (the planner's and estimate's arithmetic), with the operations of
    the GPU types and serving pools the design's own lines and groups show."""

    for p in priced:  # every line re-derived from catalog rows: none below zero, each as stated
        x = p.line
        for label, figure in (
            ("price per hour", x.usd_per_hour),
            ("capital", p.capital_usd),
            ("monthly", p.monthly_usd),
            ("power", p.power_w),
        ):
            if not math.isfinite(figure) or figure < 0:
                problems.append(f"{x.offering}: {label} is {figure:,.2f}; a cost line is never negative")
        for label, line_stated, line_recomputed in (
            ("capital", x.capital_usd, p.capital_usd),
            ("monthly", x.monthly_usd, p.monthly_usd),
        ):
            if not _close(line_stated, line_recomputed):
                problems.append(f"{x.offering}: {label} stated ${line_stated:,.2f}, recomputed ${line_recomputed:,.2f}")
    c = design.costs
    for label, stated_cost in (
        ("capital", c.capital_usd),
        ("monthly", c.monthly_usd),
        ("one-off", c.one_off_usd),
        ("total", c.total_usd),
    ):
        if not math.isfinite(stated_cost) or stated_cost < 0:
            problems.append(f"{label} cost is {stated_cost:,.2f}; a plan's cost is never negative")
    lines = [p.line.model_copy(update={"capital_usd": p.capital_usd, "monthly_usd": p.monthly_usd}) for p in priced]
    mine = pricing.costs(
        lines,
        horizon_months=horizon,
        one_off_usd=one_off,
        output_tokens_per_s=tokens_per_s,
        operations=operations,
        pools=pricing.serving_pools(design.workloads),
        burst_usd_per_month=pricing.plan_burst_usd_per_month(design.workloads),
    )
    for label, got, stated in (
        ("GPU types' operations", mine.gpu_type_operations_usd_per_month, c.gpu_type_operations_usd_per_month),
        ("pools' operations", mine.pool_operations_usd_per_month, c.pool_operations_usd_per_month),
        ("capital", mine.capital_usd, c.capital_usd),
        ("monthly", mine.monthly_usd, c.monthly_usd),
        ("one-off", mine.one_off_usd, c.one_off_usd),
        ("total", mine.total_usd, c.total_usd),
        ("per million output tokens", mine.usd_per_million_output_tokens, c.usd_per_million_output_tokens),
    ):
        if got is None or stated is None:
            if got != stated:
                problems.append(f"{label} cost stated {stated}, recomputed {got}")
        elif not _close(got, stated, USD_TOLERANCE * max(1, len(priced))):
            problems.append(f"{label} cost stated ${stated:,.2f}, recomputed ${got:,.2f}")


@dataclass(frozen=True)
class LimitsView:
    horizon_months: float
    budget_capital_usd: float | None
    budget_monthly_usd: float | None
    budget_total_usd: float | None
    max_gpus: int | None
    max_power_w: float | None
    deployment: str
    sequential: bool
    allowed_gpus: frozenset[str] | None
    quantizations: frozenset[str] | None
    inventory: dict[str, int]
    max_gpu_types: int | None = None


def _limits(design: Design, priced: list[Priced], lim: LimitsView, problems: list[str]) -> None:
    c = design.costs
    if lim.budget_capital_usd is not None and not _ok_le(c.capital_usd, lim.budget_capital_usd):
        problems.append(f"capital ${c.capital_usd:,.0f} exceeds budget ${lim.budget_capital_usd:,.0f}")
    if lim.budget_monthly_usd is not None and not _ok_le(c.monthly_usd, lim.budget_monthly_usd):
        problems.append(f"monthly ${c.monthly_usd:,.0f} exceeds budget ${lim.budget_monthly_usd:,.0f}")
    if lim.budget_total_usd is not None and not _ok_le(c.total_usd, lim.budget_total_usd):
        problems.append(f"total ${c.total_usd:,.0f} exceeds budget ${lim.budget_total_usd:,.0f}")
    used = _gpus_in_use(priced, lim.sequential)
    if used != design.gpus_total:
        problems.append(f"GPUs in use stated {design.gpus_total}, counted {used}")
    if lim.max_gpus is not None and used > lim.max_gpus:
        problems.append(f"{used} GPUs exceed max_gpus {lim.max_gpus}")
    types = {p.line.gpu for p in priced} | {
        g for w in design.workloads for g in ([x.gpu for x in w.groups] if isinstance(w, ServingPlan) else [w.gpu])
    }
    if lim.max_gpu_types is not None and len(types) > lim.max_gpu_types:
        problems.append(f"{len(types)} GPU types ({', '.join(sorted(types))}) exceed max_gpu_types {lim.max_gpu_types}")
    power = sum(p.power_w for p in priced)
    if lim.max_power_w is not None and power > lim.max_power_w * (1 + REL_TOLERANCE):
        problems.append(f"owned power {power:,.0f} W exceeds max_power {lim.max_power_w:,.0f} W")
    if lim.deployment == "cloud" and any(p.line.kind == "owned" for p in priced):
        problems.append("deployment is cloud but owned servers are used")
    if lim.deployment == "owned" and any(p.line.kind == "cloud" for p in priced):
        problems.append("deployment is owned but cloud instances are used")
    inv_used: dict[str, int] = defaultdict(int)
    for p in priced:
        if p.line.kind == "owned":
            inv_used[p.line.gpu] += p.line.from_inventory * p.line.gpus_per_unit
            if p.line.bought + p.line.from_inventory != p.line.units:
                problems.append(f"{p.line.offering}: bought + inventory != servers")
    for gpu, n in inv_used.items():
        if n > lim.inventory.get(gpu, 0):
            problems.append(f"{n} {gpu} GPUs taken from an inventory of {lim.inventory.get(gpu, 0)}")
    for w in design.workloads:
        gpus = [g.gpu for g in w.groups] if isinstance(w, ServingPlan) else [w.gpu]
        if lim.allowed_gpus is not None:
            for g in gpus:
                if g not in lim.allowed_gpus:
                    problems.append(f"{w.workload}: {g} is not an allowed GPU")
        if isinstance(w, ServingPlan) and lim.quantizations is not None:
            for grp in w.groups:
                q = "bf16" if grp.quant in ("bf16", "fp16") else grp.quant
                if q not in lim.quantizations:
                    problems.append(f"{w.workload}: {grp.quant} is not an allowed quantization")


def _side_sum(w: ServingPlan, rates: list[tuple[int, float, float]], pick: int) -> float:
    """Requests/s a design serves: the smaller of its prefill and decode sides (aggregated groups count on both)."""
    sides = [("aggregated", "prefill"), ("aggregated", "decode")] if w.disaggregated else [("aggregated",)]
    return min(
        sum(n * (r if pick == 1 else r0) for (n, r, r0), g in zip(rates, w.groups, strict=False) if g.role in side)
        for side in sides
    )


def _serving_capacity(
    w: ServingPlan, rates: list[tuple[int, float, float]], k: int, has_targets: bool, problems: list[str]
) -> None:
    """rates: (replicas, rate with targets, rate at the ceiling) per group (a pool's counts on its side)."""
    demand = w.demand_rps
    if len(rates) != len(w.groups):  # a group that is not a candidate: count every group on one side
        w = w.model_copy(
            update={"disaggregated": False, "groups": [g.model_copy(update={"role": "aggregated"}) for g in w.groups]}
        )
    cap_nolat = _side_sum(w, rates, 0)
    if cap_nolat < demand * (1 - 1e-9):
        problems.append(f"{w.workload}: {cap_nolat:,.3f} req/s at the utilisation ceiling < {demand:,.3f} demanded")
    if has_targets:
        cap = _side_sum(w, rates, 1)
        if cap < demand * (1 - 1e-9):
            problems.append(f"{w.workload}: {cap:,.3f} req/s within the p95 targets < {demand:,.3f} demanded")
    if k > 0:
        rho = [(n, r if has_targets else r0) for n, r, r0 in rates]
        biggest = max((x for n, x in rho if n > 0), default=0.0)
        if sum(n * x for n, x in rho) - k * biggest < demand * (1 - 1e-9):
            problems.append(f"{w.workload}: losing {k} replica(s) leaves less than the demand")


# ------------------------------------------------------------------------------------------------
# Against the physics and the catalog
# ------------------------------------------------------------------------------------------------


def _term_price(x: HardwareLine, inst: CloudInstance, req: Requirement, problems: list[str]) -> float | None:
    """The catalog's hourly rate of a cloud line's term, and whether the requirement allows that term there: a
    commitment only under ``pricing: auto`` and never for a training run; spot only for interruptible workloads
    (serving: every serving workload)."""
    pricing = req.constraints.pricing
    if x.term == "spot":
        workloads = [w for w in req.workloads if (w.name == x.trains if x.trains else w.kind == "serving")]
        if pricing == "on_demand" or not workloads or not all(w.interruptible for w in workloads):
            problems.append(f"{x.offering}: on spot, but its workloads do not all say interruptible: true")
        return inst.spot_usd_per_hour
    if pricing == "spot":
        problems.append(f"{x.offering}: {x.term}, but constraints.pricing is spot")
    if x.term == "on_demand":
        return inst.on_demand_usd_per_hour
    if pricing != "auto" or x.trains is not None:
        problems.append(f"{x.offering}: a {x.term} commitment where the requirement allows none")
    c = inst.commitment(x.term_months)
    return c.usd_per_hour if c is not None else None


def _catalog_units(
    design: Design, catalog: Catalog, req: Requirement, owned: OwnedCosts
) -> tuple[list[Priced], list[str]]:
    """Each hardware line re-priced from the catalog (owned servers by
    :func:`clusterplan.evaluation.pricing.owned_server` on ``owned``, the catalog's figures with the requirement's
    owned block, as the planner's offerings are)."""
    from clusterplan.evaluation.pricing import owned_server

    problems: list[str] = []
    priced: list[Priced] = []
    for x in design.hardware:
        gpu = catalog.gpus.get(x.gpu)
        if gpu is None:
            problems.append(f"{x.offering}: unknown GPU {x.gpu}")
            continue
        nvlink = gpu.scale_up_domain  # 1 for a PCIe-only GPU (the catalog schema holds it)
        if x.kind == "cloud":
            inst = catalog.instances.get(x.instance_key)
            if inst is None:
                problems.append(f"{x.offering}: not in the catalog")
                continue
            price = _term_price(x, inst, req, problems)
            if price is None or not _close(price, x.usd_per_hour, 1e-9):
                problems.append(f"{x.offering}: priced ${x.usd_per_hour}/h, catalog says {price}")
                price = x.usd_per_hour
            if x.gpus_per_unit != inst.gpus_per_instance:
                problems.append(
                    f"{x.offering}: {x.gpus_per_unit} GPUs per instance, catalog says {inst.gpus_per_instance}"
                )
            domain = 1 if inst.gpu_link == "pcie" else min(nvlink, inst.gpus_per_instance)
            monthly = x.units * price * HOURS_PER_MONTH if x.trains is None else 0.0
            priced.append(Priced(x, Unit(inst.gpus_per_instance, domain), 0.0, monthly, 0.0))
        else:
            s = x.gpus_per_unit
            gpu_price = gpu.price.usd if gpu.price is not None else None
            if x.bought and gpu_price is None:
                problems.append(f"{x.offering}: bought, but the catalog has no price for {x.gpu}")
            server = owned_server(owned, gpu.gpu_class, gpu.tdp_w, gpu_price, s)
            priced.append(
                Priced(
                    x,
                    Unit(s, min(s, nvlink)),
                    x.bought * server.capital_usd,
                    x.units * server.running_usd_per_month,
                    x.units * server.power_w,
                )
            )
    return priced, problems


def check_plan(design: Design, resolved: ResolvedRequirement, catalog: Catalog) -> list[str]:
    """Every violation of the requirement by ``design``, re-evaluated with the physics and the catalog.

    In order: each hardware line re-priced (:func:`_catalog_units`), its cloud and region; each serving
    workload's groups, capacity and p95 at load (:func:`_check_serving`); each training layout and its
    cloud cost (:func:`_check_training`); the packing of every TP group; the costs; the limits.
    """
    from clusterplan.evaluation.uncertainty import derate_for
    from clusterplan.requirement.schema import ServingWorkload

    req = resolved.requirement
    c = req.constraints
    problems: list[str] = []
    priced, more = _catalog_units(design, catalog, req, req.owned_costs(catalog.owned))
    problems += more
    _clouds_and_regions(priced, c.clouds, c.regions, problems)
    by_name = {w.name: (i, w) for i, w in enumerate(req.workloads)}
    derate = derate_for(req.confidence)  # a plan at a confidence meets the derated figures (uncertainty.py)
    one_off = 0.0
    for wp in design.workloads:
        i, w = by_name[wp.workload]
        ctx = _Against(resolved.model_for(i), catalog, req.assumptions, derate)
        if isinstance(wp, ServingPlan):
            assert w.kind == "serving"
            _unmixed(wp, w.allow_mixed if w.allow_mixed is not None else c.allow_mixed, problems)
            _check_serving(wp, w, ctx, problems)
        else:
            assert isinstance(wp, TrainingPlan) and w.kind != "serving"
            one_off += _check_training(wp, w, ctx, priced, problems)
    _placement(design, priced, req.schedule == "sequential", problems)
    _pools_on_a_fabric(design, catalog, problems)
    _wide_ep_network(design, catalog, req.assumptions.inter_node_bandwidth_gb_per_s, problems)
    tokens = sum(w.requests_per_s * w.output_tokens for w in req.workloads if isinstance(w, ServingWorkload))
    ops = pricing.Operations.of(req.owned_costs(catalog.owned))
    _totals(design, priced, one_off, req.budget.horizon, tokens, ops, problems)
    _limits(design, priced, _limits_view(resolved, catalog), problems)
    return problems


@dataclass(frozen=True)
class _Against:
    """What one workload's plan is re-evaluated against: its model, the catalog, the requirement's
    assumptions and the derating of its confidence."""

    arch: ModelArchitecture
    catalog: Catalog
    assumptions: Assumptions
    derate: Derate


Rates = list[tuple[int, float, float]]  # (replicas, rate with targets, rate at the ceiling) per group


def _clouds_and_regions(
    priced: list[Priced], clouds: Sequence[str] | None, regions: Sequence[str] | None, problems: list[str]
) -> None:
    """Every cloud line is from an allowed cloud and region (when the requirement lists them)."""
    if clouds:
        allowed_clouds = {p.lower() for p in clouds}
        for p in priced:
            if p.line.kind == "cloud" and p.line.offering.split(":")[1] not in allowed_clouds:
                problems.append(f"{p.line.offering}: cloud not in constraints.clouds")
    if regions:
        for p in priced:
            if p.line.kind == "cloud" and p.line.region not in regions:
                problems.append(f"{p.line.offering}: region {p.line.region} not allowed")


def _unmixed(wp: ServingPlan, allow_mixed: bool, problems: list[str]) -> None:
    """Without ``allow_mixed``: one shape per role (aggregated, or one prefill and one decode pool), one GPU type."""
    if allow_mixed:
        return
    if max(Counter(g.role for g in wp.groups).values(), default=0) > 1:
        problems.append(f"{wp.workload}: several replica shapes but mixing is not allowed")
    if len({g.gpu for g in wp.groups}) > 1:
        problems.append(f"{wp.workload}: several GPU types but mixing is not allowed")


def _check_serving(wp: ServingPlan, w: ServingWorkload, ctx: _Against, problems: list[str]) -> None:
    """A serving workload: its demand as stated, each group's physics, its capacity, and its p95 at load."""
    if not math.isclose(wp.demand_rps, w.requests_per_s * w.peak_to_average, rel_tol=1e-9):
        problems.append(f"{wp.workload}: demand {wp.demand_rps} is not average x peak_to_average")
    rates: Rates = []
    ests: list[tuple[ReplicaGroup, ServingEstimate]] = []
    for g in wp.groups:
        rate, est = _group_rates(wp, g, w, ctx, problems)
        rates.append(rate)
        if est is not None:
            ests.append((g, est))
    has_targets = any(t is not None for t in (w.p95_latency, w.p95_ttft, w.p95_tpot))
    _serving_capacity(wp, rates, w.redundancy, has_targets, problems)
    _autoscaler(wp, w, rates, has_targets, problems)
    _p95_at_load(wp, w, ctx, rates, ests, has_targets, problems)


def _autoscaler(wp: ServingPlan, w: ServingWorkload, rates: Rates, has_targets: bool, problems: list[str]) -> None:
    """A demand profile: the autoscaler's min is the replicas held, its max every replica at peak, and each hour's
    replicas take that hour's demand at the rate recomputed here (N+k spares kept; one shape: its rate)."""
    a = wp.autoscaler
    if w.profile is None or a is None:
        if (w.profile is None) != (a is None):
            problems.append(f"{wp.workload}: an autoscaler is stated exactly when the workload has a demand profile")
        return
    held = sum(g.replicas - g.burst_replicas for g in wp.groups if g.role == "aggregated")
    peak = sum(g.replicas for g in wp.groups if g.role == "aggregated")
    if (a.min_replicas, a.max_replicas) != (held, peak) or max(a.replicas_by_hour, default=0) != peak:
        problems.append(
            f"{wp.workload}: autoscaler {a.min_replicas}-{a.max_replicas} replicas, held {held}, peak {peak}"
        )
    if len(wp.groups) != 1 or wp.groups[0].role != "aggregated":
        return
    rate = rates[0][1] if has_targets else rates[0][2]
    for h, (n, d) in enumerate(zip(a.replicas_by_hour, w.profile.requests_per_s_by_hour, strict=True)):
        if n < pricing.replicas_needed(d, rate, w.redundancy) or n < a.min_replicas:
            problems.append(f"{wp.workload}: hour {h} runs {n} replicas for {d:g} req/s at {rate:.3g} req/s each")


def _group_rates(
    wp: ServingPlan, g: ReplicaGroup, w: ServingWorkload, ctx: _Against, problems: list[str]
) -> tuple[tuple[int, float, float], ServingEstimate | None]:
    """One replica group re-evaluated: NVLink domain, batch the engine runs, physics reasons, memory fit;
    then its (replicas, rate within the targets, rate at the ceiling) and its estimate (None, and rates 0,
    when the physics rules it out)."""
    from clusterplan.evaluation import evaluate

    arch, a = ctx.arch, ctx.assumptions
    spec = ctx.catalog.gpus[g.gpu]
    domain = spec.scale_up_domain  # 1 for a PCIe-only GPU (the catalog schema holds it)
    layout = evaluate.replica_layout(g)
    if layout.nvlink_group(min(domain, spec.max_gpus_per_node)) > domain:  # wide EP: each server's share
        problems.append(f"{wp.workload}: TP{g.tp} on {g.gpu} exceeds its NVLink domain of {domain}")
    est = evaluate.serving_estimate(arch, spec, w, layout, batch=g.batch, assumptions=a)
    runs = evaluate.group_batch(arch, spec, w, g, a)  # at the group's own layout, EP and attention DP included
    if g.batch > max(runs, 1):
        engine = evaluate.serving_assumptions(a, w).engine
        problems.append(f"{wp.workload}: {g.gpu} batch {g.batch} exceeds the {runs} the {engine} engine runs")
    hard = without(est.why_not, ReasonCategory.LINK)  # the NVLink domain is checked above
    if hard:
        problems.append(f"{wp.workload}: {g.gpu} TP{g.tp} PP{g.pp} {g.quant}: {render_reason(hard[0])}")
    if not est.memory.fits:
        problems.append(f"{wp.workload}: {g.gpu} needs {est.memory.total_gib:.1f} GiB per GPU")
    if hard:
        return (g.replicas, 0.0, 0.0), None
    est = est.model_copy(update={"feasible": True, "why_not": []})
    if g.role != "aggregated":  # a pool replica: its share of the targets (evaluation/pools.py)
        from clusterplan.evaluation import pools

        pr = pools.prefill_rates(est, arch, spec, w, a) if g.role == "prefill" else pools.decode_rates(est, w, a)
        if not pr.kv_stream_fits:
            reason = KvStreamOverLink(spec.name, pools.kv_link(spec), pr.kv_stream_gb_per_s, pr.kv_link_gb_per_s)
            problems.append(f"{wp.workload}: {render_reason(reason)}")
        return (g.replicas, pr.rate_rps, pr.rate_no_targets_rps), est
    r, r0 = _replica_rates(est, w, ctx)
    return (g.replicas, r, r0), est


def _replica_rates(est: ServingEstimate, w: ServingWorkload, ctx: _Against) -> tuple[float, float]:
    """An aggregated replica's request rate within the derated p95 targets and at the utilisation ceiling,
    each times the confidence's rate factor."""
    from clusterplan.evaluation import evaluate
    from clusterplan.physics import queueing

    derate, a = ctx.derate, ctx.assumptions
    r, r0 = (
        queueing.max_rate_for_targets(est, t, input_tokens=w.input_tokens, output_tokens=w.output_tokens, assumptions=a)
        for t in (evaluate.derated_targets(w, derate), queueing.NO_TARGETS)
    )
    return r * derate.rate_factor, r0 * derate.rate_factor  # the derated replica serves rate_factor of the model's


def _p95_at_load(
    wp: ServingPlan,
    w: ServingWorkload,
    ctx: _Against,
    rates: Rates,
    ests: list[tuple[ReplicaGroup, ServingEstimate]],
    has_targets: bool,
    problems: list[str],
) -> None:
    """The p95 each replica shows at the share of peak demand it actually receives; a disaggregated
    workload's pools' p95s add (prefill TTFT with the KV transfer, then decode)."""
    total = sum(n * (r if has_targets else r0) for n, r, r0 in rates)
    pool_p95 = {"prefill": 0.0, "decode": 0.0}
    for g, est in ests:
        rr = next(r if has_targets else r0 for (n, r, r0), gg in zip(rates, wp.groups, strict=True) if gg is g)
        if g.role != "aggregated":
            side = sum(
                n * (r if has_targets else r0)
                for (n, r, r0), gg in zip(rates, wp.groups, strict=True)
                if gg.role == g.role
            )
            load = wp.demand_rps * rr / side if side > 0 else math.inf  # the pool's share of peak demand
            pool_p95[g.role] = max(pool_p95[g.role], _pool_p95_at_load(wp, g, est, w, ctx, load, problems))
            continue
        load = wp.demand_rps * rr / total if total > 0 else math.inf  # the replica's share of peak demand
        _replica_p95_at_load(wp, g, est, w, ctx, load, problems)
    if wp.disaggregated:  # the pools' p95s add: prefill TTFT (with the KV transfer), then decode
        for label, got, target in (
            ("p95 TTFT", pool_p95["prefill"], w.p95_ttft),
            ("p95 latency", pool_p95["prefill"] + pool_p95["decode"], w.p95_latency),
        ):
            if target is not None and got > target * (1 + 1e-6):
                problems.append(f"{wp.workload}: prefill and decode pools' {label} {got:.3f} s > target {target:g} s")


def _pool_p95_at_load(
    wp: ServingPlan,
    g: ReplicaGroup,
    est: ServingEstimate,
    w: ServingWorkload,
    ctx: _Against,
    load_rps: float,
    problems: list[str],
) -> float:
    """A prefill or decode pool replica at ``load_rps``: its utilisation and (decode) TPOT against the
    targets; returns its p95 end to end, which the pools add."""
    from clusterplan.evaluation import pools

    a = ctx.assumptions
    at = pools.pool_at_load(est, ctx.arch, ctx.catalog.gpus[g.gpu], w, g.role, load_rps, a)
    if at.utilisation > a.utilisation_ceiling * (1 + 1e-6):
        problems.append(f"{wp.workload}: {g.gpu} {g.role} replicas run at {at.utilisation:.0%} utilisation")
    if g.role == "decode" and w.p95_tpot is not None and at.p95_tpot_s > w.p95_tpot * (1 + 1e-6):
        problems.append(f"{wp.workload}: {g.gpu} decode p95 TPOT {at.p95_tpot_s:.3f} s > target {w.p95_tpot:g} s")
    return at.p95_e2e_s


def _replica_p95_at_load(
    wp: ServingPlan,
    g: ReplicaGroup,
    est: ServingEstimate,
    w: ServingWorkload,
    ctx: _Against,
    load_rps: float,
    problems: list[str],
) -> None:
    """An aggregated replica at ``load_rps``: its derated utilisation, p95 latency, TTFT and TPOT against the targets."""
    from clusterplan.physics import queueing

    a, derate = ctx.assumptions, ctx.derate
    # The derated replica takes rate_factor of the model's rate: its load is the model's at load / factor.
    lat = derate.latency(
        queueing.latency_at_load(
            est,
            load_rps / derate.rate_factor,
            input_tokens=w.input_tokens,
            output_tokens=w.output_tokens,
            assumptions=a,
        )
    )
    if lat.utilisation > a.utilisation_ceiling * (1 + 1e-6):
        problems.append(f"{wp.workload}: {g.gpu} replicas run at {lat.utilisation:.0%} utilisation")
    for label, got, target in (
        ("p95 latency", lat.p95_e2e_s, w.p95_latency),
        ("p95 TTFT", lat.p95_ttft_s, w.p95_ttft),
        ("p95 TPOT", lat.p95_tpot_s, w.p95_tpot),
    ):
        if target is not None and got > target * (1 + 1e-6):
            problems.append(f"{wp.workload}: {g.gpu} {label} {got:.3f} s > target {target:g} s")


def _check_training(
    wp: TrainingPlan, w: TrainingWorkload | FinetuneWorkload, ctx: _Against, priced: list[Priced], problems: list[str]
) -> float:
    """A training layout: NVLink domain, GPU count, physics, deadline, stated time; returns its cloud cost
    (0 when owned), which :func:`_totals` adds to the one-off cost."""
    from clusterplan.evaluation import evaluate

    spec = ctx.catalog.gpus[wp.gpu]
    domain = spec.scale_up_domain  # 1 for a PCIe-only GPU (the catalog schema holds it)
    if wp.tp > domain:
        problems.append(f"{wp.workload}: TP{wp.tp} exceeds the NVLink domain of {wp.gpu}")
    if wp.gpus != wp.tp * wp.cp * wp.pp * wp.dp:
        problems.append(f"{wp.workload}: {wp.gpus} GPUs is not TP x CP x PP x DP")
    layout = Layout(
        tp=wp.tp, pp=wp.pp, cp=wp.cp, ep=wp.ep, virtual_stages=wp.virtual_stages,
        recompute=cast(Recompute, wp.recompute),
        recompute_layers=wp.recompute_layers if wp.recompute == "full" else None,
    )  # fmt: skip
    settings = TrainingSettings(
        dp=wp.dp, zero_stage=wp.zero_stage, micro_batch=wp.micro_batch, memory_plan=MemoryPlan.of(wp.memory_options),
    )  # fmt: skip
    train_est = evaluate.training_point(
        ctx.arch, spec, w, layout=layout, settings=settings, assumptions=ctx.assumptions,
        derate=ctx.derate,  # the time the plan states: derated at a confidence
    )  # fmt: skip
    hard = without(train_est.why_not, ReasonCategory.LINK)  # the NVLink domain is checked above
    if hard:
        problems.append(f"{wp.workload}: {render_reason(hard[0])}")
    if train_est.time_to_train_s > w.deadline * (1 + 1e-9):
        problems.append(
            f"{wp.workload}: {train_est.time_to_train_s / 86400:.1f} d misses the {w.deadline / 86400:.1f} d deadline"
        )
    if not math.isclose(train_est.time_to_train_s, wp.time_to_train_s, rel_tol=1e-6):
        problems.append(
            f"{wp.workload}: time to train stated {wp.time_to_train_s:.0f} s, "
            f"physics says {train_est.time_to_train_s:.0f} s"
        )
    if wp.deployment != "cloud":
        return 0.0
    return _training_cloud_cost(wp, train_est.time_to_train_s, priced, problems)


def _training_cloud_cost(wp: TrainingPlan, time_to_train_s: float, priced: list[Priced], problems: list[str]) -> float:
    """A cloud training run's one instance line holds its GPUs; its cost re-derived from the line's price
    and the physics' time to train, against the stated one (0 when the line is missing)."""
    from clusterplan.physics import cost as physics_cost

    lines = [p for p in priced if p.line.kind == "cloud" and p.line.trains == wp.workload]
    if len(lines) != 1:
        problems.append(f"{wp.workload}: expected one cloud instance line, found {len(lines)}")
        return 0.0
    p = lines[0]
    if p.line.units * p.line.gpus_per_unit < wp.gpus:
        problems.append(f"{wp.workload}: {p.line.gpus} cloud GPUs for {wp.gpus} needed")
    cost = physics_cost.training_cloud_cost_usd(p.line.usd_per_hour, p.line.units, time_to_train_s)
    if not _close(cost, wp.cloud_cost_usd):
        problems.append(f"{wp.workload}: cloud cost stated ${wp.cloud_cost_usd:,.2f}, recomputed ${cost:,.2f}")
    return cost


def _limits_view(resolved: ResolvedRequirement, catalog: Catalog) -> LimitsView:
    """The requirement's limits as :func:`_limits` reads them: GPU names resolved to catalog ids (allowed
    less excluded), inventory summed per GPU type, fp16 counted as bf16."""
    req = resolved.requirement
    c = req.constraints
    allowed = None
    if c.allowed_gpus is not None or c.excluded_gpus:
        ids = {catalog.gpu(n).id for n in c.allowed_gpus} if c.allowed_gpus is not None else set(catalog.gpus)
        allowed = frozenset(ids - {catalog.gpu(n).id for n in c.excluded_gpus})
    inventory: dict[str, int] = defaultdict(int)
    for item in c.inventory:
        inventory[catalog.gpu(item.gpu).id] += item.count
    quants = frozenset("bf16" if q in ("bf16", "fp16") else q for q in c.quantizations) if c.quantizations else None
    return LimitsView(
        req.budget.horizon,
        req.budget.capital,
        req.budget.monthly,
        req.budget.total,
        c.max_gpus,
        c.max_power,
        req.deployment,
        req.schedule == "sequential",
        allowed,
        quants,
        dict(inventory),
        req.fleet.max_gpu_types,
    )


# ------------------------------------------------------------------------------------------------
# Against a candidate table (synthetic tables have no physics behind them)
# ------------------------------------------------------------------------------------------------


def check_design_on_table(design: Design, table: CandidateTable) -> list[str]:
    """Every violation of ``design`` against the rows, offerings and limits of a candidate table."""
    problems: list[str] = []
    lim = table.limits
    priced: list[Priced] = []
    for x in design.hardware:
        try:
            o = table.offering(x.offering)
        except KeyError:
            problems.append(f"{x.offering}: not an offering of the table")
            continue
        if o.forbidden_by:
            problems.append(f"{x.offering}: forbidden ({o.forbidden_by[0][1]})")
        if o.kind == "cloud":
            monthly = x.units * o.usd_per_hour * HOURS_PER_MONTH if x.trains is None else 0.0
            priced.append(Priced(x, Unit(o.gpus_per_unit, o.domain_gpus or o.tp_domain), 0.0, monthly, 0.0))
        else:
            if x.bought and not o.purchasable:
                problems.append(f"{x.offering}: cannot be bought")
            if x.from_inventory > o.inventory_units:
                problems.append(f"{x.offering}: {x.from_inventory} servers from an inventory of {o.inventory_units}")
            priced.append(
                Priced(
                    x,
                    Unit(o.gpus_per_unit, o.domain_gpus or o.tp_domain),
                    x.bought * o.capital_usd,
                    x.units * o.running_usd_per_month,
                    x.units * o.power_w,
                )
            )
    one_off = 0.0
    by_name = {wc.name: wc for wc in table.workloads}
    for wp in design.workloads:
        wc = by_name[wp.workload]
        if isinstance(wp, ServingPlan):
            rates = []
            for g in wp.groups:
                role = "both" if g.role == "aggregated" else g.role
                rows = [
                    r
                    for r in wc.serving_rows()
                    if (r.gpu_id, r.tp, r.pp, r.quant, r.batch, r.role) == (g.gpu, g.tp, g.pp, g.quant, g.batch, role)
                ]
                if not rows:
                    problems.append(f"{wp.workload}: {g.gpu} TP{g.tp} PP{g.pp} {g.quant} is not a candidate")
                    continue
                r = rows[0]
                if r.forbidden_by:
                    problems.append(f"{wp.workload}: {r.forbidden_by[0][1]}")
                rates.append((g.replicas, r.rate_rps, r.rate_nolat_rps))
            _unmixed(wp, wc.allow_mixed, problems)
            _serving_capacity(wp, rates, wc.redundancy, wc.targets.any, problems)
        else:
            trows = [
                t
                for t in wc.training_rows()
                if (t.gpu_id, t.tp, t.pp, t.dp, t.zero_stage) == (wp.gpu, wp.tp, wp.pp, wp.dp, wp.zero_stage)
            ]
            if not trows:
                problems.append(f"{wp.workload}: layout is not a candidate")
                continue
            tr = trows[0]
            if tr.forbidden_by:
                problems.append(f"{wp.workload}: {tr.forbidden_by[0][1]}")
            if wc.deadline_s is not None and tr.time_to_train_s > wc.deadline_s:
                problems.append(f"{wp.workload}: misses its deadline")
            if wp.deployment == "cloud":
                one_off += tr.cloud_cost_usd
                if tr.cloud_offering is not None and any(f for f, _ in table.offering(tr.cloud_offering).forbidden_by):
                    problems.append(f"{wp.workload}: runs on a forbidden cloud offering")
    _placement(design, priced, lim.schedule == "sequential", problems)
    tokens = sum(wc.average_rps * wc.output_tokens for wc in table.workloads if wc.is_serving)
    ops = pricing.Operations(lim.operations_usd_per_gpu_type_month, lim.operations_usd_per_pool_month)
    _totals(design, priced, one_off, lim.horizon_months, tokens, ops, problems)
    view = LimitsView(
        lim.horizon_months,
        lim.budget_capital_usd,
        lim.budget_monthly_usd,
        lim.budget_total_usd,
        lim.max_gpus,
        lim.max_power_w,
        lim.deployment,
        lim.schedule == "sequential",
        lim.allowed_gpus,
        lim.quantizations,
        dict(lim.inventory),
        lim.max_gpu_types,
    )
    _limits(design, priced, view, problems)
    return problems
