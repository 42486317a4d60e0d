"""Prepare, then model: the candidate table the CP-SAT model reads, and how it is built.

Everything the planner may choose is costed and estimated here, *before* any solver runs (the
SkyPilot habit): one row per replica shape (serving) or per parallel layout (training/fine-tuning),
each with the physics' numbers, and one :class:`Offering` per way of obtaining a GPU (a cloud
instance type or an owned server size). Every candidate ruled out records its reason
(:class:`Exclusion`, a :mod:`clusterplan.physics.reasons` record: decided on by code and category,
worded only when shown); those reasons answer "why did the cheaper GPUs lose".

Rows the *user's* constraints forbid (a GPU not in ``allowed_gpus``, a quantization not allowed,
tensor parallelism over PCIe, a training layout that misses the deadline) are kept in the table and
marked ``forbidden_by`` their constraint family: the model forbids them behind that family's
enforcement literal, so an infeasible requirement can be explained, and relaxed, in family names.
Rows physics rules out (weights do not fit, a precision the GPU cannot run) are dropped.

The table types are plain frozen dataclasses so tests can build synthetic tables directly; the
builder :func:`build_candidates` fills them from a resolved requirement, the catalog and the physics.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from clusterplan.physics.reasons import (
    MissesLatencyTargets,
    ModelDoesNotFit,
    NoLayoutFits,
    NotObtainable,
    Reason,
    ReasonCategory,
    Stated,
    of_category,
    without,
)
from clusterplan.units import HOURS_PER_MONTH

if TYPE_CHECKING:
    from clusterplan.catalog import Catalog
    from clusterplan.catalog_schema import GpuSpec, ModelArchitecture
    from clusterplan.physics.factors import Assumptions
    from clusterplan.requirement import FinetuneWorkload, Requirement, ServingWorkload, TrainingWorkload
    from clusterplan.requirement_loader import ResolvedRequirement

OfferingKind = Literal["cloud", "owned"]
WorkloadKind = Literal["serving", "training", "finetune"]

# Family ids a row or an offering may be forbidden by (see clusterplan.planner.constraints).
TP_NVLINK = "tp_nvlink"
ALLOWED_GPUS = "allowed_gpus"
ALLOWED_QUANT = "allowed_quant"
DEADLINE = "deadline"
DEPLOYMENT = "deployment"
# Exclusion-only categories: physics facts, not user constraints, never relaxed.
MEMORY = "memory"
HARDWARE = "hardware"
AVAILABILITY = "availability"
LATENCY = "latency"
# The exclusion category of a reason's category (link, precision, layout and hardware facts: HARDWARE).
_EXCLUSION_FAMILY = {
    ReasonCategory.MEMORY: MEMORY,
    ReasonCategory.LATENCY: LATENCY,
    ReasonCategory.AVAILABILITY: AVAILABILITY,
}
_CATEGORY_OF_FAMILY = {f: c for c, f in _EXCLUSION_FAMILY.items()}

TP_DEGREES = (1, 2, 4, 8)
PP_DEGREES = (1, 2, 4)
SERVING_QUANTS = ("bf16", "fp8", "int8", "int4")  # 'bf16' stands for the GPU's 16-bit (fp16 where no bf16)


def half_equivalent(quant: str) -> str:
    """bf16 and fp16 are the same choice (the GPU's 16-bit format) for allowed-quantization checks."""
    return "bf16" if quant in ("bf16", "fp16") else quant


# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuType:
    """What the model needs to know about one GPU type."""

    id: str
    name: str
    gpu_class: str = "datacenter"
    tdp_w: float = 700.0
    memory_gib: float = 80.0
    nvlink_domain: int = 8  # GPUs in one NVLink/IF domain; 1 for PCIe-only GPUs
    max_gpus_per_node: int = 8
    price_usd: float | None = None  # purchase price per GPU; None: cannot be bought


@dataclass(frozen=True, slots=True)
class Offering:
    """One way to obtain GPUs of one type: a cloud instance type or an owned server size.

    ``tp_domain`` is the largest tensor-parallel group one unit hosts (a power of two): the NVLink
    domain inside the instance or server, 1 when its GPUs talk over PCIe only.
    """

    key: str
    kind: OfferingKind
    gpu_id: str
    gpus_per_unit: int
    tp_domain: int
    usd_per_hour: float = 0.0  # cloud: whole instance
    capital_usd: float = 0.0  # owned: one server (GPUs + chassis + network)
    power_w: float = 0.0  # owned: one server at TDP, including non-GPU overhead, W
    energy_usd_per_month: float = 0.0  # owned: power x PUE x electricity price x 730 h
    inventory_units: int = 0  # owned: servers of this size already owned (free)
    purchasable: bool = True  # owned: can more be bought (the GPU has a price)
    provider: str = ""
    region: str = ""
    instance_id: str = ""
    forbidden_by: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        if self.kind == "cloud":
            return f"{self.provider}:{self.instance_id}" if self.provider else self.key
        return f"{self.gpu_id} server, {self.gpus_per_unit} GPU{'s' if self.gpus_per_unit > 1 else ''}"

    def tp_capacity(self, t: int) -> int:
        """GPUs of one unit usable by tensor-parallel groups of size >= t (0 if t > tp_domain)."""
        if t > self.tp_domain:
            return 0
        if t <= 1:
            return self.gpus_per_unit
        return (self.gpus_per_unit // self.tp_domain) * self.tp_domain


@dataclass(frozen=True, slots=True)
class ServingRow:
    """One replica shape of one serving workload at one batch (concurrency), with its physics."""

    gpu_id: str
    tp: int
    pp: int
    quant: str
    batch: int
    rate_rps: float  # requests/s one replica sustains meeting the latency targets (0: it cannot)
    rate_nolat_rps: float  # requests/s one replica sustains at the utilisation ceiling, no targets
    kv_precision: str = "bf16"
    p95_e2e_s: float = 0.0  # at its planned load
    p95_ttft_s: float = 0.0
    p95_tpot_s: float = 0.0
    ttft_s: float = 0.0  # unloaded
    tpot_s: float = 0.0
    output_tokens_per_s: float = 0.0  # saturated
    memory_gib: float = 0.0  # most loaded GPU
    capacity_gib: float = 0.0
    bound: str = ""
    forbidden_by: tuple[tuple[str, str], ...] = ()  # (family id, reason)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def shape(self) -> tuple[str, int, int, str]:
        return (self.gpu_id, self.tp, self.pp, self.quant)

    @property
    def forbidding_families(self) -> frozenset[str]:
        return frozenset(f for f, _ in self.forbidden_by)


@dataclass(frozen=True, slots=True)
class TrainingRow:
    """One training or fine-tuning layout (tp x pp x dp GPUs of one type) with its physics."""

    gpu_id: str
    tp: int
    pp: int
    dp: int
    zero_stage: int
    recompute: str
    micro_batch: int
    time_to_train_s: float
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    memory_gib: float = 0.0
    capacity_gib: float = 0.0
    bound: str = ""
    forbidden_by: tuple[tuple[str, str], ...] = ()
    cloud_offering: str | None = None  # key of the cheapest cloud instance type that hosts it
    cloud_instances: int = 0  # instances of that type
    cloud_cost_usd: float = 0.0  # instances x price x billed hours

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def shape(self) -> tuple[str, int, int, str]:
        return (self.gpu_id, self.tp, self.pp, f"zero{self.zero_stage}")

    @property
    def forbidding_families(self) -> frozenset[str]:
        return frozenset(f for f, _ in self.forbidden_by)


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A candidate ruled out before the model, with its reason record (:func:`excluded` files it by category).

    A reason given as a sentence (hand-built tables) is kept as a :class:`Stated` record of ``family``.
    """

    gpu_id: str
    family: str
    reason: Reason

    def __post_init__(self) -> None:
        if isinstance(self.reason, str):
            category = _CATEGORY_OF_FAMILY.get(self.family, ReasonCategory.HARDWARE)
            object.__setattr__(self, "reason", Stated(self.reason, category))


def exclusion_family(reason: Reason) -> str:
    """The exclusion category a reason files under, from its code's category (never its wording)."""
    return _EXCLUSION_FAMILY.get(reason.category, HARDWARE)


def excluded(gpu_id: str, reason: Reason) -> Exclusion:
    """A candidate of ``gpu_id`` ruled out for ``reason``, filed under the category its code implies."""
    return Exclusion(gpu_id, exclusion_family(reason), reason)


@dataclass(frozen=True, slots=True)
class ServingTargets:
    p95_latency_s: float | None = None
    p95_ttft_s: float | None = None
    p95_tpot_s: float | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.p95_latency_s, self.p95_ttft_s, self.p95_tpot_s))


@dataclass(frozen=True, slots=True)
class WorkloadCandidates:
    """The candidate rows of one workload and what it asks for."""

    index: int
    name: str
    kind: WorkloadKind
    rows: tuple[ServingRow, ...] | tuple[TrainingRow, ...]
    exclusions: tuple[Exclusion, ...] = ()
    model_name: str = ""
    # serving
    demand_rps: float = 0.0  # average x peak_to_average, requests/s
    average_rps: float = 0.0
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    targets: ServingTargets = field(default_factory=ServingTargets)
    redundancy: int = 0
    allow_mixed: bool = False
    # training / fine-tuning
    deadline_s: float | None = None
    tokens: float = 0.0
    considered: int = 0  # candidates evaluated before pruning

    @property
    def is_serving(self) -> bool:
        return self.kind == "serving"

    def serving_rows(self) -> tuple[ServingRow, ...]:
        assert self.kind == "serving"
        return self.rows  # type: ignore[return-value]

    def training_rows(self) -> tuple[TrainingRow, ...]:
        assert self.kind != "serving"
        return self.rows  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Limits:
    """The requirement's global constraints, in base units (USD, W, months)."""

    horizon_months: float = 36.0
    budget_capital_usd: float | None = None
    budget_monthly_usd: float | None = None
    budget_total_usd: float | None = None
    max_gpus: int | None = None
    max_power_w: float | None = None
    deployment: Literal["cloud", "owned", "either"] = "either"
    schedule: Literal["sequential", "concurrent"] = "concurrent"
    allowed_gpus: frozenset[str] | None = None  # after excluded_gpus; None: all
    quantizations: frozenset[str] | None = None
    inventory: tuple[tuple[str, int], ...] = ()  # (gpu id, count)

    @property
    def horizon_hours(self) -> float:
        return self.horizon_months * HOURS_PER_MONTH

    def inventory_of(self, gpu_id: str) -> int:
        return sum(c for g, c in self.inventory if g == gpu_id)


@dataclass(frozen=True, slots=True)
class CandidateTable:
    """Everything the CP-SAT model reads. The builder never looks anywhere else."""

    workloads: tuple[WorkloadCandidates, ...]
    gpus: dict[str, GpuType]
    offerings: tuple[Offering, ...]
    limits: Limits = field(default_factory=Limits)
    name: str = "requirement"
    assumptions_used: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def offerings_of(self, gpu_id: str, kind: OfferingKind | None = None) -> list[Offering]:
        return [o for o in self.offerings if o.gpu_id == gpu_id and (kind is None or o.kind == kind)]

    def offering(self, key: str) -> Offering:
        for o in self.offerings:
            if o.key == key:
                return o
        raise KeyError(key)

    def gpu_unit_cost_usd_per_hour(self, gpu_id: str) -> float | None:
        """Cheapest cost of one GPU-hour of this type over the horizon, on any usable offering.

        Cloud: instance price / GPUs per instance. Owned: (server capital / GPUs + energy over the
        horizon / GPUs) / horizon hours. Used only to say which GPU types are "cheaper" in explanations.
        """
        best: float | None = None
        hours = self.limits.horizon_hours
        for o in self.offerings_of(gpu_id):
            if o.forbidden_by:
                continue
            if o.kind == "cloud":
                c = o.usd_per_hour / o.gpus_per_unit
            elif o.purchasable or o.inventory_units:
                capital = 0.0 if o.inventory_units else o.capital_usd
                c = (capital + o.energy_usd_per_month * self.limits.horizon_months) / o.gpus_per_unit / hours
            else:
                continue
            best = c if best is None else min(best, c)
        return best


# ------------------------------------------------------------------------------------------------
# Pruning (pure, deterministic)
# ------------------------------------------------------------------------------------------------


def _serving_key(r: ServingRow) -> tuple[object, ...]:
    return (r.gpu_id, r.tp, r.pp, r.quant, r.batch)


def _dominates(a: ServingRow, b: ServingRow, *, keep_latency: bool = False) -> bool:
    """``a`` (in ``gpus_b // gpus_a`` copies) is at least as good as ``b`` for every purpose of the model.

    Same GPU type; TP groups no wider (so the copies pack wherever ``b`` does: sizes are powers of
    two); forbidden by no family ``b`` is not; the copies together reach at least ``b``'s rate with
    and without latency targets (and, for the min-latency objective, no higher p95). Replacing
    every ``b`` replica by the copies keeps a solution feasible at no more GPUs, hence no more cost.
    """
    if a.gpu_id != b.gpu_id or a.gpus > b.gpus or a.tp > b.tp:
        return False
    copies = b.gpus // a.gpus
    return (
        a.forbidding_families <= b.forbidding_families
        and copies * a.rate_rps >= b.rate_rps
        and copies * a.rate_nolat_rps >= b.rate_nolat_rps
        and (not keep_latency or a.p95_e2e_s <= b.p95_e2e_s)
    )


def prune_serving_rows(
    rows: Sequence[ServingRow], *, cross_shape: bool, keep_latency: bool = False
) -> list[ServingRow]:
    """Drop dominated rows: within a shape (GPU, TP, PP, quant) always; across shapes of one GPU type
    when ``cross_shape`` (valid when a workload uses one shape, or has no redundancy: with mixed shapes
    and N+k, swapping replicas can change which replica is the largest).

    Deterministic: rows are visited in a fixed order and of two equal rows the first one is kept.
    """
    ordered = sorted(
        rows,
        key=lambda r: (r.gpu_id, r.gpus, r.tp, r.pp, r.quant, -r.rate_rps, -r.rate_nolat_rps, r.p95_e2e_s, r.batch),
    )
    by_gpu: dict[str, list[ServingRow]] = defaultdict(list)
    for r in ordered:
        by_gpu[r.gpu_id].append(r)
    kept: list[ServingRow] = []
    for gpu_id in sorted(by_gpu):
        survivors: list[ServingRow] = []
        for r in by_gpu[gpu_id]:
            if any(
                (cross_shape or s.shape == r.shape) and _dominates(s, r, keep_latency=keep_latency) for s in survivors
            ):
                continue
            survivors = [
                s
                for s in survivors
                if not ((cross_shape or s.shape == r.shape) and _dominates(r, s, keep_latency=keep_latency))
            ]
            survivors.append(r)
        kept.extend(survivors)
    return sorted(kept, key=_serving_key)


def _training_dominates(a: TrainingRow, b: TrainingRow) -> bool:
    return (
        a.gpu_id == b.gpu_id
        and a.gpus <= b.gpus
        and a.tp <= b.tp
        and a.forbidding_families <= b.forbidding_families
        and a.time_to_train_s <= b.time_to_train_s
        and a.cloud_cost_usd <= b.cloud_cost_usd
        and (a.cloud_offering is not None or b.cloud_offering is None)
    )


def prune_training_rows(rows: Sequence[TrainingRow]) -> list[TrainingRow]:
    """Drop layouts another layout of the same GPU beats on GPUs, TP width, time and cloud cost."""
    ordered = sorted(
        rows,
        key=lambda r: (
            r.gpu_id,
            r.gpus,
            r.tp,
            r.time_to_train_s,
            r.cloud_cost_usd,
            r.pp,
            r.zero_stage,
            r.recompute,
            r.micro_batch,
        ),
    )
    kept: list[TrainingRow] = []
    for r in ordered:
        if any(_training_dominates(s, r) for s in kept):
            continue
        kept = [s for s in kept if not _training_dominates(r, s)]
        kept.append(r)
    return sorted(kept, key=lambda r: (r.gpu_id, r.tp, r.pp, r.dp, r.zero_stage, r.recompute, r.micro_batch))


def most_common_reason(exclusions: Iterable[Exclusion], gpu_id: str) -> Exclusion | None:
    """The reason that best says why one GPU type's candidates were ruled out.

    Memory first when memory ruled out any of them (its last reason: candidates are generated from
    the least to the most aggressive layout, so the last is the closest to fitting); otherwise the
    most common category, again its last reason.
    """
    mine = [e for e in exclusions if e.gpu_id == gpu_id]
    if not mine:
        return None
    counts = Counter(e.family for e in mine)
    fam = MEMORY if MEMORY in counts else max(sorted(counts), key=lambda f: counts[f])
    return [e for e in mine if e.family == fam][-1]


# ------------------------------------------------------------------------------------------------
# Building the table from a requirement, the catalog and the physics
# ------------------------------------------------------------------------------------------------


def limits_of(req: Requirement, catalog: Catalog) -> Limits:
    c = req.constraints
    allowed: frozenset[str] | None = None
    if c.allowed_gpus is not None or c.excluded_gpus:
        ids = {catalog.gpu(n).id for n in c.allowed_gpus} if c.allowed_gpus is not None else set(catalog.gpus)
        ids -= {catalog.gpu(n).id for n in c.excluded_gpus}
        allowed = frozenset(ids)
    quants = frozenset(half_equivalent(q) for q in c.quantizations) if c.quantizations is not None else None
    inventory: dict[str, int] = defaultdict(int)
    for item in c.inventory:
        inventory[catalog.gpu(item.gpu).id] += item.count
    return Limits(
        horizon_months=req.budget.horizon,
        budget_capital_usd=req.budget.capital,
        budget_monthly_usd=req.budget.monthly,
        budget_total_usd=req.budget.total,
        max_gpus=c.max_gpus,
        max_power_w=c.max_power,
        deployment=req.deployment,
        schedule=req.schedule,
        allowed_gpus=allowed,
        quantizations=quants,
        inventory=tuple(sorted(inventory.items())),
    )


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def gpu_type_of(spec: GpuSpec) -> GpuType:
    domain = 1 if spec.scale_up == "pcie" else _pow2_floor(min(spec.scale_up_domain, spec.max_gpus_per_node))
    return GpuType(
        id=spec.id,
        name=spec.name,
        gpu_class=spec.gpu_class,
        tdp_w=spec.tdp_w,
        memory_gib=spec.memory_gib,
        nvlink_domain=domain,
        max_gpus_per_node=spec.max_gpus_per_node,
        price_usd=spec.price.usd if spec.price is not None else None,
    )


def inventory_servers(count: int, max_per_node: int, sizes: Sequence[int]) -> Counter[int]:
    """Servers an inventory of ``count`` GPUs is assumed to sit in: as many of the largest size the GPU
    ships in as fit, the remainder in smaller power-of-two sizes (binary decomposition)."""
    usable = sorted((s for s in sizes if s <= max_per_node), reverse=True)
    out: Counter[int] = Counter()
    left = count
    for s in usable:
        if s <= 0:
            continue
        out[s] += left // s
        left %= s
    return Counter({s: n for s, n in out.items() if n})


def build_offerings(
    catalog: Catalog, req: Requirement, gpus: dict[str, GpuType], limits: Limits
) -> tuple[list[Offering], list[str]]:
    """Cloud instance types (cheapest per GPU type, size and TP domain) and owned server sizes."""
    notes: list[str] = []
    c = req.constraints
    providers = [p.lower() for p in c.clouds] if c.clouds else None
    cheapest: dict[tuple[str, int, int], Offering] = {}
    for key in sorted(catalog.instances):
        inst = catalog.instances[key]
        if inst.gpu_id not in gpus:
            continue
        if providers is not None and inst.provider.lower() not in providers:
            continue
        if c.regions and inst.region not in c.regions:
            continue
        price = inst.on_demand_usd_per_hour
        if c.pricing == "spot":
            if inst.spot_usd_per_hour is None:
                continue
            price = inst.spot_usd_per_hour
        g = gpus[inst.gpu_id]
        domain = 1 if inst.gpu_link == "pcie" else _pow2_floor(min(inst.gpus_per_instance, g.nvlink_domain))
        forbidden = (
            ((DEPLOYMENT, "deployment: owned excludes cloud instances"),) if limits.deployment == "owned" else ()
        )
        off = Offering(
            key=f"cloud:{inst.key}",
            kind="cloud",
            gpu_id=inst.gpu_id,
            gpus_per_unit=inst.gpus_per_instance,
            tp_domain=domain,
            usd_per_hour=price,
            provider=inst.provider,
            region=inst.region,
            instance_id=inst.id,
            forbidden_by=forbidden,
        )
        k = (inst.gpu_id, inst.gpus_per_instance, domain)
        if k not in cheapest or price < cheapest[k].usd_per_hour:
            cheapest[k] = off
    offerings = [cheapest[k] for k in sorted(cheapest)]

    from clusterplan.design.pricing import owned_server

    owned = catalog.owned
    for gid in sorted(gpus):
        g = gpus[gid]
        inv = limits.inventory_of(gid)
        if g.price_usd is None and not inv:
            continue
        spec = catalog.gpus.get(gid)
        all_sizes = [s for s in sorted(owned.node_sizes) if s <= g.max_gpus_per_node] or [1]
        # Sizes it can be bought in (HGX B200 comes on 8-GPU boards only); inventory may sit in any size.
        buy_sizes = owned.sizes_for(spec) if spec is not None else all_sizes
        inv_nodes = inventory_servers(inv, g.max_gpus_per_node, all_sizes)
        sizes = sorted(set(buy_sizes) | set(inv_nodes))
        cls = g.gpu_class
        for s in sizes:
            # The catalog's rule: a node of s GPU slots carries s / reference of a full node's
            # chassis, network and overhead figures (OwnedCosts.node_fraction).
            server = owned_server(owned, cls, g.tdp_w, g.price_usd, s)
            forbidden = (
                ((DEPLOYMENT, "deployment: cloud excludes owned servers"),) if limits.deployment == "cloud" else ()
            )
            offerings.append(
                Offering(
                    key=f"owned:{gid}:{s}",
                    kind="owned",
                    gpu_id=gid,
                    gpus_per_unit=s,
                    tp_domain=min(_pow2_floor(s), g.nvlink_domain),
                    capital_usd=server.capital_usd,
                    power_w=server.power_w,
                    energy_usd_per_month=server.energy_usd_per_month,
                    inventory_units=inv_nodes.get(s, 0),
                    purchasable=g.price_usd is not None and s in buy_sizes,
                    forbidden_by=forbidden,
                )
            )
    notes.append(
        "owned servers cost their purchase price (GPUs, plus chassis and network in proportion to the "
        "node's GPU slots, catalog OwnedCosts.node_fraction) and electricity at full power x PUE over the "
        "horizon; support contracts and colocation are not included"
    )
    if limits.inventory:
        notes.append(
            "inventory GPUs are assumed to sit in servers of the largest size the GPU ships in "
            "(the remainder in smaller power-of-two servers); they cost power, not capital"
        )
    return offerings, notes


def _kv_default(quant: str, w: ServingWorkload, half: str) -> str:
    if w.kv_cache_precision is not None:
        return w.kv_cache_precision
    return "fp8" if quant == "fp8" else half


def forbidden_for(gpu: GpuType, limits: Limits, *, tp: int, quant: str | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if limits.allowed_gpus is not None and gpu.id not in limits.allowed_gpus:
        out.append((ALLOWED_GPUS, f"{gpu.name}: not in constraints.allowed_gpus (or excluded)"))
    if quant is not None and limits.quantizations is not None and half_equivalent(quant) not in limits.quantizations:
        out.append((ALLOWED_QUANT, f"{quant}: not in constraints.quantizations"))
    if tp > gpu.nvlink_domain:
        if gpu.nvlink_domain == 1:
            out.append((TP_NVLINK, f"{gpu.name}: tensor parallel {tp} needs NVLink; {gpu.name} has PCIe only"))
        else:
            out.append(
                (
                    TP_NVLINK,
                    f"{gpu.name}: tensor parallel {tp} needs an NVLink domain of {tp} GPUs; "
                    f"{gpu.name} links at most {gpu.nvlink_domain}",
                )
            )
    return out


def _batch_ladder(max_batch: int) -> list[int]:
    out = []
    b = 1
    while b < max_batch:
        out.append(b)
        b *= 2
    out.append(max_batch)
    return sorted(set(out))


def hard_reasons(reasons: Sequence[Reason]) -> list[Reason]:
    """Reasons no constraint family can waive: all but the link ones (``tp_nvlink`` decides those)."""
    return without(reasons, ReasonCategory.LINK)


def serving_shapes(g: GpuType) -> list[tuple[int, int]]:
    """(TP, PP) pairs tried for one GPU type.

    TP 1, 2, 4, 8 (wider than the NVLink domain: kept, forbidden by ``tp_nvlink``); pipeline
    parallelism 2 and 4 only on top of the widest NVLink TP group (for PCIe-only GPUs, TP 1): PP
    inside one NVLink domain never beats TP there, and PP is how a replica spans domains or nodes.
    """
    widest = min(g.nvlink_domain, max(TP_DEGREES))
    shapes = [(tp, 1) for tp in TP_DEGREES]
    shapes += [(widest, pp) for pp in PP_DEGREES if pp > 1]
    return shapes


def serving_candidates(
    index: int,
    w: ServingWorkload,
    arch: ModelArchitecture,
    catalog: Catalog,
    gpus: dict[str, GpuType],
    limits: Limits,
    assumptions: Assumptions,
    allow_mixed: bool,
    keep_latency: bool = False,
) -> WorkloadCandidates:
    """Every replica shape of one serving workload on every GPU type, with its rates and reasons.

    Shapes: GPU x (TP, PP) from :func:`serving_shapes` x weight precision (16-bit, fp8, int8, int4).
    Per shape one operating point becomes a row: the largest batch (concurrency cap) whose KV cache
    fits, with the rate meeting the p95 targets and the rate at the utilisation ceiling. Anything
    physics rules out becomes an :class:`Exclusion`.
    """
    from clusterplan.design import evaluate
    from clusterplan.physics import rules

    targets = ServingTargets(w.p95_latency, w.p95_ttft, w.p95_tpot)
    rows: list[ServingRow] = []
    excl: list[Exclusion] = []
    considered = 0
    # Rows another row of the same GPU type dominates are dropped (prune_serving_rows). Shapes are
    # visited from the fewest GPUs up, so a shape whose best possible rate (its rate without
    # targets) is already beaten by copies of a smaller shape is skipped before its latency-target
    # rate (the expensive queueing search) is computed: the outcome is the same table, faster.
    cross = (not allow_mixed) or w.redundancy == 0
    skip_dominated = cross and not keep_latency
    quant_order = {q: i for i, q in enumerate(SERVING_QUANTS)}
    for gid in sorted(gpus):
        spec = catalog.gpus[gid]
        g = gpus[gid]
        half = rules.half_precision(spec)
        combos = sorted(
            ((quant_choice, tp, pp) for quant_choice in SERVING_QUANTS for tp, pp in serving_shapes(g)),
            key=lambda c: (c[1] * c[2], c[1], quant_order[c[0]]),
        )
        mine: list[ServingRow] = []
        for quant_choice, tp, pp in combos:
            quant = half if quant_choice == "bf16" else quant_choice
            kv = _kv_default(quant, w, half)
            considered += 1
            hard = hard_reasons(rules.serving_rule_reasons(arch, spec, tp, pp, quant, kv))
            if hard:
                excl.append(excluded(gid, hard[0]))
                continue
            point = {"tp": tp, "pp": pp, "quant": quant, "kv_precision": kv, "assumptions": assumptions}
            max_batch = evaluate.max_batch(arch, spec, w, **point)  # type: ignore[arg-type]
            if max_batch < 1:
                est = evaluate.serving_estimate(arch, spec, w, batch=1, **point)  # type: ignore[arg-type]
                reasons = hard_reasons(est.why_not)
                fallback = ModelDoesNotFit(gpu=g.name, model=arch.name, quant=quant, tp=tp, pp=pp)
                excl.append(excluded(gid, reasons[0] if reasons else fallback))
                continue
            forbidden = tuple(forbidden_for(g, limits, tp=tp, quant=quant))
            # The largest batch that fits is the operating point: a larger concurrency cap never
            # lowers the rate a replica takes within its targets (the running batch follows the
            # load; the cap only adds room), so it dominates smaller batches for cost. The
            # min-latency objective also gets batch 1.
            top = evaluate.serving_batch(max_batch)
            for batch in sorted({top, 1} if keep_latency else {top}, reverse=True):
                est = evaluate.serving_estimate(arch, spec, w, batch=batch, **point)  # type: ignore[arg-type]
                if of_category(est.why_not, ReasonCategory.LINK):
                    # Estimated over PCIe; the tp_nvlink family decides whether it may be used.
                    est = est.model_copy(update={"feasible": True, "why_not": []})
                if not est.feasible:
                    excl.append(excluded(gid, est.why_not[0]))  # infeasible: at least one reason
                    continue
                rate_nolat = evaluate.rate_at_ceiling(est, assumptions)
                fams = frozenset(f for f, _ in forbidden)
                if skip_dominated and any(
                    a.tp <= tp
                    and a.gpus <= tp * pp
                    and a.forbidding_families <= fams
                    and (tp * pp // a.gpus) * min(a.rate_rps, a.rate_nolat_rps) >= rate_nolat
                    for a in mine
                ):
                    continue
                rated = evaluate.serving_rates(est, w, assumptions)
                rate, lat = rated.rate_rps, rated.rated
                rows.append(
                    ServingRow(
                        gpu_id=gid,
                        tp=tp,
                        pp=pp,
                        quant=quant,
                        batch=est.batch,
                        rate_rps=rate,
                        rate_nolat_rps=rate_nolat,
                        kv_precision=kv,
                        p95_e2e_s=lat.p95_e2e_s,
                        p95_ttft_s=lat.p95_ttft_s,
                        p95_tpot_s=lat.p95_tpot_s,
                        ttft_s=est.ttft_s,
                        tpot_s=est.tpot_s,
                        output_tokens_per_s=est.output_tokens_per_s,
                        memory_gib=est.memory.total_gib,
                        capacity_gib=est.memory.capacity_gib,
                        bound=est.bound,
                        forbidden_by=forbidden,
                    )
                )
                mine.append(rows[-1])
    if targets.any:
        for gid in sorted(gpus):
            mine = [r for r in rows if r.gpu_id == gid]
            if mine and all(r.rate_rps <= 0 for r in mine):
                best = min(mine, key=lambda r: r.p95_ttft_s)
                excl.append(
                    excluded(
                        gid,
                        MissesLatencyTargets(
                            gpu=gpus[gid].name, best_ttft_s=best.ttft_s, best_tpot_s=best.tpot_s, best_tp=best.tp,
                            best_quant=best.quant, p95_ttft_target_s=targets.p95_ttft_s,
                            p95_tpot_target_s=targets.p95_tpot_s,
                        ),
                    )
                )  # fmt: skip
    pruned = prune_serving_rows(rows, cross_shape=cross, keep_latency=keep_latency)
    return WorkloadCandidates(
        index=index,
        name=w.name,
        kind="serving",
        rows=tuple(pruned),
        exclusions=tuple(excl),
        model_name=arch.name,
        demand_rps=w.requests_per_s * w.peak_to_average,
        average_rps=w.requests_per_s,
        input_tokens=w.input_tokens,
        output_tokens=w.output_tokens,
        targets=targets,
        redundancy=w.redundancy,
        allow_mixed=allow_mixed,
        considered=considered,
    )


def _dp_ladder(max_dp: int) -> list[int]:
    out = []
    d = 1
    while d <= max_dp:
        out.append(d)
        d *= 2
    return out


MAX_TRAINING_GPUS = 4096
# Doubling DP past the first layout that meets the deadline buys speed nobody asked for with more
# GPUs (owned: more capital; cloud: the same GPU-hours or more). Two more doublings are kept, for
# instance-size rounding and for what-if sweeps that tighten the deadline; larger ones are not tried.
EXTRA_DP_AFTER_DEADLINE = 2
TRAINING_PP = (1, 2, 4, 8)


def training_candidates(
    index: int,
    w: TrainingWorkload | FinetuneWorkload,
    arch: ModelArchitecture,
    catalog: Catalog,
    gpus: dict[str, GpuType],
    offerings: Sequence[Offering],
    limits: Limits,
    assumptions: Assumptions,
) -> WorkloadCandidates:
    """Every parallel layout of one training/fine-tuning workload on every GPU type.

    Layouts: GPU x TP in {1,2,4,8} x PP in {1,2,4,8} x DP in powers of two (up to the sequences per
    optimizer step and 4,096 GPUs, and two doublings past the first DP that meets the deadline); per layout the fastest ZeRO stage, recompute policy and micro-batch
    that fit (:func:`clusterplan.design.evaluate.fastest_training_layout`). LoRA/QLoRA train few parameters: ZeRO 0 only. Layouts that miss
    the deadline are kept, forbidden by ``deadline``; TP wider than NVLink, forbidden by ``tp_nvlink``.
    """
    from clusterplan.design import evaluate, pricing
    from clusterplan.physics import rules

    rows: list[TrainingRow] = []
    excl: list[Exclusion] = []
    considered = 0
    method = getattr(w, "method", "full")
    recomputes = evaluate.recomputes_for(w)
    seqs_per_step = evaluate.sequences_per_step(w)
    for gid in sorted(gpus):
        spec = catalog.gpus[gid]
        g = gpus[gid]
        for tp in TP_DEGREES:
            for pp in TRAINING_PP:
                zero_stages = evaluate.zero_stages_for(pp, method)
                hard = hard_reasons(
                    rules.training_rule_reasons(
                        arch, spec, tp=tp, pp=pp, dp=1, zero_stage=0, precision=w.precision, method=method
                    )
                )
                considered += 1
                if hard:
                    excl.append(excluded(gid, hard[0]))
                    continue
                forbidden = forbidden_for(g, limits, tp=tp, quant=None)
                max_dp = max(1, min(MAX_TRAINING_GPUS // (tp * pp), seqs_per_step))
                beyond_deadline = 0  # layouts evaluated after the first that meets the deadline
                for dp in _dp_ladder(max_dp):
                    if beyond_deadline > EXTRA_DP_AFTER_DEADLINE:
                        break
                    considered += 1
                    est, last_reason = evaluate.fastest_training_layout(
                        arch,
                        spec,
                        w,
                        tp=tp,
                        pp=pp,
                        dp=dp,
                        zero_stages=zero_stages,
                        recomputes=recomputes,
                        assumptions=assumptions,
                    )
                    if est is None:
                        excl.append(excluded(gid, last_reason or NoLayoutFits(gpu=g.name)))
                        continue
                    n = tp * pp * dp
                    cloud, n_inst, cost, within = pricing.cheapest_training_cloud(
                        offerings, gid, tp, n, est.time_to_train_s
                    )
                    fb = list(forbidden)
                    if not within and not any(f == TP_NVLINK for f, _ in fb):
                        fb.append((TP_NVLINK, f"{g.name}: no cloud instance links {tp} GPUs with NVLink"))
                    if beyond_deadline or est.time_to_train_s <= w.deadline:
                        beyond_deadline += 1
                    if est.time_to_train_s > w.deadline:
                        fb.append(
                            (
                                DEADLINE,
                                f"{g.name} x{n} (TP {tp}, PP {pp}, DP {dp}) takes "
                                f"{est.time_to_train_s / 86400:.1f} d; deadline {w.deadline / 86400:.1f} d",
                            )
                        )
                    rows.append(
                        TrainingRow(
                            gpu_id=gid,
                            tp=tp,
                            pp=pp,
                            dp=dp,
                            zero_stage=est.zero_stage,
                            recompute=est.recompute,
                            micro_batch=est.micro_batch,
                            time_to_train_s=est.time_to_train_s,
                            tokens_per_s=est.tokens_per_s,
                            mfu=est.mfu,
                            memory_gib=est.memory.total_gib,
                            capacity_gib=est.memory.capacity_gib,
                            bound=est.bound,
                            forbidden_by=tuple(fb),
                            cloud_offering=cloud.key if cloud is not None else None,
                            cloud_instances=n_inst,
                            cloud_cost_usd=cost,
                        )
                    )
    pruned = prune_training_rows(rows)
    return WorkloadCandidates(
        index=index,
        name=w.name,
        kind=w.kind,
        rows=tuple(pruned),
        exclusions=tuple(excl),
        model_name=arch.name,
        deadline_s=w.deadline,
        tokens=w.tokens,
        considered=considered,
    )


def build_candidates(resolved: ResolvedRequirement, catalog: Catalog, *, keep_latency: bool = False) -> CandidateTable:
    """The candidate table of a requirement: every row costed and estimated before any solver runs."""
    req = resolved.requirement
    limits = limits_of(req, catalog)
    gpus = {gid: gpu_type_of(spec) for gid, spec in sorted(catalog.gpus.items())}
    offerings, notes = build_offerings(catalog, req, gpus, limits)
    workloads: list[WorkloadCandidates] = []
    for i, w in enumerate(req.workloads):
        arch = resolved.model_for(i)
        if w.kind == "serving":
            mixed = w.allow_mixed if w.allow_mixed is not None else req.constraints.allow_mixed
            workloads.append(
                serving_candidates(i, w, arch, catalog, gpus, limits, req.assumptions, mixed, keep_latency=keep_latency)
            )
        else:
            workloads.append(training_candidates(i, w, arch, catalog, gpus, offerings, limits, req.assumptions))
    # GPUs with no way to obtain them cannot be placed: drop their rows, say why.
    placeable = {o.gpu_id for o in offerings}
    final: list[WorkloadCandidates] = []
    for wc in workloads:
        rows = [r for r in wc.rows if r.gpu_id in placeable]
        extra = tuple(
            excluded(gid, NotObtainable(gpu=gpus[gid].name)) for gid in sorted({r.gpu_id for r in wc.rows} - placeable)
        )
        final.append(replace(wc, rows=tuple(rows), exclusions=wc.exclusions + extra))  # type: ignore[arg-type]
    return CandidateTable(
        workloads=tuple(final),
        gpus=gpus,
        offerings=tuple(offerings),
        limits=limits,
        name=req.name,
        assumptions_used=tuple(assumption_lines(req.assumptions)),
        notes=tuple(notes),
    )


def assumption_lines(assumptions: Assumptions) -> list[str]:
    """Every efficiency factor and default the physics used, one line each (listed in explanations)."""
    out: list[str] = []
    for name, f in type(assumptions).model_fields.items():
        value = getattr(assumptions, name)
        text = value.model_dump() if hasattr(value, "model_dump") else value
        default = f.get_default(call_default_factory=True)
        default_text = default.model_dump() if hasattr(default, "model_dump") else default
        tag = "" if text == default_text else " (overridden)"
        out.append(f"{name} = {text}{tag}")
    return out
