"""The candidate table's records: GPU types, offerings, serving rows, training rows, exclusions, limits."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from clusterplan.physics import cost
from clusterplan.physics.reasons import (
    Reason,
    ReasonCategory,
    Stated,
    without,
)
from clusterplan.units import HOURS_PER_MONTH

if TYPE_CHECKING:
    from clusterplan.catalog.schema import QualityDelta


OfferingKind = Literal["cloud", "owned"]


WorkloadKind = Literal["serving", "training", "finetune"]


# Family ids a row or an offering may be forbidden by (see clusterplan.planner.families).
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


PROVIDER_TIER = "provider_tier"


FABRIC = "fabric"


LICENCE = "licence"


# The exclusion category of a reason's category (link, precision, layout and hardware facts: HARDWARE).
_EXCLUSION_FAMILY = {
    ReasonCategory.MEMORY: MEMORY,
    ReasonCategory.LATENCY: LATENCY,
    ReasonCategory.AVAILABILITY: AVAILABILITY,
    ReasonCategory.PROVIDER_TIER: PROVIDER_TIER,
    ReasonCategory.FABRIC: FABRIC,
    ReasonCategory.LICENCE: LICENCE,
}


_CATEGORY_OF_FAMILY = {f: c for c, f in _EXCLUSION_FAMILY.items()}


TP_DEGREES = (1, 2, 4, 8)
# Tensor-parallel degrees beyond one 8-GPU board, tried only where one NVLink domain spans them (NVL72 racks).
RACK_TP_DEGREES = (16, 32, 64)


PP_DEGREES = (1, 2, 4)


SERVING_QUANTS = ("bf16", "fp8", "int8", "fp4", "int4")  # 'bf16' stands for the GPU's 16-bit (fp16 where no bf16)


# Disaggregated serving (physics/disagg.py): a row is an aggregated replica ("both"), or one replica of a
# prefill pool or of a decode pool. Demand is met on each side: aggregated + prefill capacity, and
# aggregated + decode capacity, each >= the demand.
Role = Literal["both", "prefill", "decode"]
Side = Literal["prefill", "decode"]
SIDES: tuple[Side, ...] = ("prefill", "decode")
Disaggregation = Literal["auto", "off", "required"]


def half_equivalent(quant: str) -> str:
    """bf16 and fp16 are the same choice (the GPU's 16-bit format) for allowed-quantization checks."""
    return "bf16" if quant in ("bf16", "fp16") else quant


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
    domain inside the instance or server, 1 when its GPUs talk over PCIe only. ``domain_gpus`` is the
    GPUs one NVLink domain of the unit spans when that is not a power of two (72 in an NVL72 rack, whose
    tp_domain is 64); 0: ``tp_domain``.
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
    colocation_usd_per_month: float = 0.0  # owned: IT kW x colocation $/kW-month
    support_usd_per_month: float = 0.0  # owned: capital x support fraction per year / 12
    operations_usd_per_month: float = 0.0  # owned: the catalog's operations figure per server (none shipped)
    inventory_units: int = 0  # owned: servers of this size already owned (free)
    purchasable: bool = True  # owned: can more be bought (the GPU has a price)
    provider: str = ""
    region: str = ""
    instance_id: str = ""
    tier: str = ""  # cloud: hyperscaler, gpu_cloud or marketplace (catalog providers.yaml)
    fabric: bool = False  # cloud: several instances can train together (InfiniBand, RoCE or EFA)
    # cloud with a fabric: the instance's network per GPU, GB/s (instances.yaml network_gbit_per_s / 8 / GPUs:
    # 50 on p5 and ND H100 v5, 15.6 on a3-highgpu-8g, 6.25 on p4d); 0: none (owned servers buy their fabric)
    network_gb_per_s_per_gpu: float = 0.0
    forbidden_by: tuple[tuple[str, str], ...] = ()
    domain_gpus: int = 0
    term: str = "on_demand"  # cloud: on_demand, 1y, 3y (a commitment owed for whole terms) or spot
    term_months: int = 0  # cloud: the commitment's length (0: on demand or spot)
    serves: bool = True  # cloud: may host serving replicas (False: spot kept only for interruptible training)

    @property
    def label(self) -> str:
        if self.kind == "cloud":
            name = f"{self.provider}:{self.instance_id}" if self.provider else self.key
            return name if self.term == "on_demand" else f"{name} ({self.term})"
        return f"{self.gpu_id} server, {self.gpus_per_unit} GPU{'s' if self.gpus_per_unit > 1 else ''}"

    def paid_months(self, horizon_months: float) -> float:
        """Months this offering bills over the horizon: the horizon, or whole commitment terms (physics/cost.py)."""
        return cost.paid_months(horizon_months, self.term_months)

    @property
    def running_usd_per_month(self) -> float:
        """Owned: one server's month, energy + colocation + support + operations (the model's monthly cost)."""
        return cost.owned_running_usd_per_month(
            self.energy_usd_per_month,
            self.colocation_usd_per_month,
            self.support_usd_per_month,
            self.operations_usd_per_month,
        )

    def horizon_usd(self, horizon_months: float, *, capital: bool = True) -> float:
        """One unit over the horizon as the model's total counts it: instance-hours (cloud; a commitment for whole
        terms), or capital plus its running cost (owned; ``capital=False``: a server already owned, its running cost
        only)."""
        if self.kind == "cloud":
            return self.usd_per_hour * HOURS_PER_MONTH * self.paid_months(horizon_months)
        return (self.capital_usd if capital else 0.0) + self.running_usd_per_month * horizon_months

    def tp_capacity(self, t: int) -> int:
        """GPUs of one unit usable by tensor-parallel groups of size >= t (0 if t > tp_domain).

        Each NVLink domain of ``span`` GPUs holds ``floor(span / t)`` groups of a power-of-two ``t``: all 72
        GPUs of an NVL72 rack for TP 8, 64 of them for TP 16 to 64.
        """
        if t > self.tp_domain:
            return 0
        if t <= 1:
            return self.gpus_per_unit
        span = self.domain_gpus or self.tp_domain
        return (self.gpus_per_unit // span) * (span // t) * t


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
    # p95s at the utilisation ceiling (rate_nolat_rps): targets at least these admit the ceiling rate
    # (inf: not known; the trade search then brackets its targets by probing)
    ceiling_p95_e2e_s: float = math.inf
    ceiling_p95_ttft_s: float = math.inf
    ceiling_p95_tpot_s: float = math.inf
    # at its planned load, beside the p95s (benchmarks report means); None: not modelled (a pool's rows)
    mean_e2e_s: float | None = None
    mean_ttft_s: float | None = None
    mean_tpot_s: float | None = None
    ttft_s: float = 0.0  # unloaded
    tpot_s: float = 0.0
    output_tokens_per_s: float = 0.0  # saturated
    memory_gib: float = 0.0  # most loaded GPU
    capacity_gib: float = 0.0
    bound: str = ""
    forbidden_by: tuple[tuple[str, str], ...] = ()  # (family id, reason)
    ep: int = 1  # expert-parallel degree per stage (MoE; physics/moe.py)
    attention_dp: bool = False  # attention data-parallel over the stage's GPUs
    # GPUs of one stage that must share one NVLink domain (Layout.nvlink_group; 0: tp): a wide-EP stage over
    # several servers (EP 32 on 8-GPU servers) holds 8 per server, joined by the all-to-all over their fabric
    nvlink_gpus: int = 0
    # a wide-EP replica: the network per GPU its all-to-all was rated at (Assumptions.inter_node_bandwidth_gb_per_s);
    # it runs only on instances whose fabric gives at least that per GPU (structure 4d). 0: it crosses no servers
    network_gb_per_s: float = 0.0
    # A replica of an aggregated design ("both": prefill and decode), or of one pool of a disaggregated design.
    role: Role = "both"
    # The largest load per replica at which the scheduler simulation meets every p95 target, where a design's
    # replica of this row missed one simulated (the latency family allows no more; None: not found to miss).
    held_rps: float | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def nvlink_group(self) -> int:
        """GPUs placed together on one NVLink domain: the TP group, or one server's share of a wide-EP stage."""
        return self.nvlink_gpus or self.tp

    @property
    def spans_servers(self) -> bool:
        """A wide-EP replica: its stage spans servers, so its instances need a fabric between them."""
        return self.nvlink_group < self.tp

    @property
    def shape(self) -> tuple[object, ...]:
        """(GPU, TP, PP, quant), and the pool for a pool replica: a design's signature is made of these."""
        if self.role != "both":
            return (self.gpu_id, self.tp, self.pp, self.quant, self.role)
        return (self.gpu_id, self.tp, self.pp, self.quant)

    def serves(self, side: Side) -> bool:
        """Whether this row's replicas carry ``side`` of a request (an aggregated replica carries both)."""
        return self.role in ("both", side)

    @property
    def forbidding_families(self) -> frozenset[str]:
        return frozenset(f for f, _ in self.forbidden_by)


@dataclass(frozen=True, slots=True)
class TrainingRow:
    """One training or fine-tuning layout (tp x cp x pp x dp GPUs of one type) with its physics."""

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
    cp: int = 1  # context-parallel degree
    virtual_stages: int = 1  # interleaved pipeline chunks per stage
    recompute_layers: int = 0  # layers of each stage fully recomputed
    memory_options: tuple[str, ...] = ()  # physics/optimizer_memory.py options the layout runs with
    ep: int = 1  # expert-parallel degree, carved out of the dp x cp ranks (MoE models)

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def shape(self) -> tuple[str, int, int, str]:
        zero = f"zero{self.zero_stage}" + (f" ep{self.ep}" if self.ep > 1 else "")
        return (self.gpu_id, self.tp, self.pp, zero if self.cp == 1 else f"cp{self.cp} {zero}")

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
    # requests/s in each hour of a daily (24) or weekly (168) demand profile; (): flat demand at the peak
    profile_rps: tuple[float, ...] = ()
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    targets: ServingTargets = field(default_factory=ServingTargets)
    redundancy: int = 0
    allow_mixed: bool = False
    disaggregation: Disaggregation = "off"  # the requirement's switch (hand-built tables: off)
    # training / fine-tuning
    deadline_s: float | None = None
    tokens: float = 0.0
    considered: int = 0  # candidates evaluated before pruning
    framework: str = ""  # the training framework the layouts are those of (catalog/frameworks.yaml id)
    # The decimal exponent of the model's integer rates (planner/scaling.py); None: from the workload's own
    # demand and rates. A trade's probe sets its plan's, so a probe cut down to fewer rows rounds as its plan does.
    rate_exponent: int | None = None

    @property
    def is_serving(self) -> bool:
        return self.kind == "serving"

    def serving_rows(self) -> tuple[ServingRow, ...]:
        assert self.kind == "serving"
        return self.rows  # type: ignore[return-value]

    def training_rows(self) -> tuple[TrainingRow, ...]:
        assert self.kind != "serving"
        return self.rows  # type: ignore[return-value]

    @property
    def has_pools(self) -> bool:
        """Whether any row is a prefill or decode pool replica (a disaggregated design is possible)."""
        return self.is_serving and any(r.role != "both" for r in self.serving_rows())

    def sides(self) -> tuple[Side, ...]:
        """The sides demand is counted on: both for a workload with pool rows, one (either) otherwise."""
        return SIDES if self.has_pools else SIDES[:1]


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
    max_loss: str | None = None  # the requirement's quality gate class (None: a hand-built table)
    inventory: tuple[tuple[str, int], ...] = ()  # (gpu id, count)
    max_gpu_types: int | None = None  # distinct GPU types across the fleet (fleet.max_gpu_types)
    # operations a month of each distinct GPU type held and of each serving pool, USD (catalog owned.yaml;
    # 0 in a hand-built table): charged through indicator variables (planner/families/structure.py, (6c))
    operations_usd_per_gpu_type_month: float = 0.0
    operations_usd_per_pool_month: float = 0.0

    @property
    def horizon_hours(self) -> float:
        return self.horizon_months * HOURS_PER_MONTH

    def inventory_of(self, gpu_id: str) -> int:
        return sum(c for g, c in self.inventory if g == gpu_id)


@dataclass(frozen=True, slots=True)
class PrecisionGate:
    """Which weight precisions one serving workload may use, and the published deltas behind them."""

    workload: str
    model: str  # catalog model id ('' for a model given inline)
    max_loss: str  # quality.max_loss class
    from_requirement: bool  # False: the default class
    allowed: tuple[str, ...]
    evidence: tuple[QualityDelta, ...] = ()  # catalog quality rows for the allowed quantized precisions


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
    offer_exclusions: tuple[Exclusion, ...] = ()  # cloud offers ruled out before the model (provider tier)
    precision_gates: tuple[PrecisionGate, ...] = ()

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
            if o.kind == "cloud" and not o.serves:
                continue
            if o.kind == "cloud" and not o.term_months:
                c = o.usd_per_hour / o.gpus_per_unit
            elif o.kind == "cloud":
                c = o.horizon_usd(self.limits.horizon_months) / o.gpus_per_unit / hours
            elif o.purchasable or o.inventory_units:
                c = o.horizon_usd(self.limits.horizon_months, capital=not o.inventory_units) / o.gpus_per_unit / hours
            else:
                continue
            best = c if best is None else min(best, c)
        return best


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


def hard_reasons(reasons: Sequence[Reason]) -> list[Reason]:
    """Reasons no constraint family can waive: all but the link ones (``tp_nvlink`` decides those)."""
    return without(reasons, ReasonCategory.LINK)
