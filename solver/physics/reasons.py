"""Why a configuration cannot run, as data: a code, its parameters, and the category layers decide on.

Physics (:mod:`clusterplan.physics.rules`, :mod:`~clusterplan.physics.serving`,
:mod:`~clusterplan.physics.training`) and the candidate table return these records; nothing
decides on a sentence. Each record is a frozen dataclass whose ``code`` is a :class:`ReasonCode`;
its :attr:`Reason.category` follows from the code (:data:`CATEGORY`), never from text. The words
are written in one place, :func:`clusterplan.wording.reasons.render_reason`.

GPU and model names are parameters as the producer shows them (physics: the GPU's short name,
candidates: the catalog name); quantities carry their units in their names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Literal


class ReasonCode(StrEnum):
    """Every reason a candidate can be ruled out for. A new code needs a record, a category and wording."""

    TP_NEEDS_NVLINK = "tp_needs_nvlink"
    TP_EXCEEDS_SCALE_UP_DOMAIN = "tp_exceeds_scale_up_domain"
    TP_EXCEEDS_NVLINK_DOMAIN = "tp_exceeds_nvlink_domain"
    TP_CROSSES_NODES = "tp_crosses_nodes"
    TP_SPLITS_ATTENTION_HEADS = "tp_splits_attention_heads"
    TP_SPLITS_KV_HEADS = "tp_splits_kv_heads"
    PP_EXCEEDS_LAYERS = "pp_exceeds_layers"
    CP_SPLITS_SEQUENCE = "cp_splits_sequence"
    VIRTUAL_STAGES_SPLIT_LAYERS = "virtual_stages_split_layers"
    EP_SPLITS_EXPERTS = "ep_splits_experts"
    FP8_UNSUPPORTED = "fp8_unsupported"
    BF16_UNSUPPORTED = "bf16_unsupported"
    QLORA_UNSUPPORTED = "qlora_unsupported"
    ZERO_STAGE_UNKNOWN = "zero_stage_unknown"
    GLOBAL_BATCH_TOO_SMALL = "global_batch_too_small"
    NO_TENSOR_THROUGHPUT = "no_tensor_throughput"
    WEIGHTS_DO_NOT_FIT = "weights_do_not_fit"
    KV_CACHE_DOES_NOT_FIT = "kv_cache_does_not_fit"
    TRAINING_DOES_NOT_FIT = "training_does_not_fit"
    MODEL_DOES_NOT_FIT = "model_does_not_fit"
    NO_LAYOUT_FITS = "no_layout_fits"
    MISSES_LATENCY_TARGETS = "misses_latency_targets"
    NOT_OBTAINABLE = "not_obtainable"
    TIER_NOT_ALLOWED = "tier_not_allowed"
    NO_FABRIC = "no_fabric"
    KV_STREAM_OVER_LINK = "kv_stream_over_link"
    EP_NEEDS_FABRIC = "ep_needs_fabric"
    CONSUMER_LICENCE = "consumer_licence"
    FRAMEWORK_CANNOT_RUN = "framework_cannot_run"
    FRAMEWORK_LACKS = "framework_lacks"
    STATED = "stated"


class ReasonCategory(StrEnum):
    """What kind of fact a reason is; layers decide on this (and on the code), not on wording.

    LINK: tensor parallelism wider than the GPU's scale-up link. Physics still estimates it (over
    PCIe or the network); whether it may be used is the ``tp_nvlink`` constraint family's call.
    """

    LINK = "link"
    MEMORY = "memory"
    PRECISION = "precision"
    LAYOUT = "layout"
    HARDWARE = "hardware"
    LATENCY = "latency"
    AVAILABILITY = "availability"
    PROVIDER_TIER = "provider_tier"
    FABRIC = "fabric"
    LICENCE = "licence"


CATEGORY: dict[ReasonCode, ReasonCategory] = {
    ReasonCode.TP_NEEDS_NVLINK: ReasonCategory.LINK,
    ReasonCode.TP_EXCEEDS_SCALE_UP_DOMAIN: ReasonCategory.LINK,
    ReasonCode.TP_EXCEEDS_NVLINK_DOMAIN: ReasonCategory.LINK,
    ReasonCode.TP_CROSSES_NODES: ReasonCategory.LAYOUT,
    ReasonCode.TP_SPLITS_ATTENTION_HEADS: ReasonCategory.LAYOUT,
    ReasonCode.TP_SPLITS_KV_HEADS: ReasonCategory.LAYOUT,
    ReasonCode.PP_EXCEEDS_LAYERS: ReasonCategory.LAYOUT,
    ReasonCode.CP_SPLITS_SEQUENCE: ReasonCategory.LAYOUT,
    ReasonCode.EP_SPLITS_EXPERTS: ReasonCategory.LAYOUT,
    ReasonCode.VIRTUAL_STAGES_SPLIT_LAYERS: ReasonCategory.LAYOUT,
    ReasonCode.FP8_UNSUPPORTED: ReasonCategory.PRECISION,
    ReasonCode.BF16_UNSUPPORTED: ReasonCategory.PRECISION,
    ReasonCode.QLORA_UNSUPPORTED: ReasonCategory.PRECISION,
    ReasonCode.ZERO_STAGE_UNKNOWN: ReasonCategory.LAYOUT,
    ReasonCode.GLOBAL_BATCH_TOO_SMALL: ReasonCategory.LAYOUT,
    ReasonCode.NO_TENSOR_THROUGHPUT: ReasonCategory.HARDWARE,
    ReasonCode.WEIGHTS_DO_NOT_FIT: ReasonCategory.MEMORY,
    ReasonCode.KV_CACHE_DOES_NOT_FIT: ReasonCategory.MEMORY,
    ReasonCode.TRAINING_DOES_NOT_FIT: ReasonCategory.MEMORY,
    ReasonCode.MODEL_DOES_NOT_FIT: ReasonCategory.MEMORY,
    ReasonCode.NO_LAYOUT_FITS: ReasonCategory.MEMORY,
    ReasonCode.MISSES_LATENCY_TARGETS: ReasonCategory.LATENCY,
    ReasonCode.NOT_OBTAINABLE: ReasonCategory.AVAILABILITY,
    ReasonCode.TIER_NOT_ALLOWED: ReasonCategory.PROVIDER_TIER,
    ReasonCode.NO_FABRIC: ReasonCategory.FABRIC,
    ReasonCode.KV_STREAM_OVER_LINK: ReasonCategory.FABRIC,
    ReasonCode.EP_NEEDS_FABRIC: ReasonCategory.FABRIC,
    ReasonCode.CONSUMER_LICENCE: ReasonCategory.LICENCE,
    ReasonCode.FRAMEWORK_CANNOT_RUN: ReasonCategory.LAYOUT,
    ReasonCode.FRAMEWORK_LACKS: ReasonCategory.LAYOUT,
    ReasonCode.STATED: ReasonCategory.HARDWARE,  # a record overrides it with its own (see Stated)
}


@dataclass(frozen=True, slots=True)
class Reason:
    """Base of every reason record: a code (a class constant) and the category it implies."""

    code: ClassVar[ReasonCode]

    @property
    def category(self) -> ReasonCategory:
        return CATEGORY[self.code]


# ------------------------------------------------------------------------------------------------
# Layout and link rules (clusterplan.physics.rules)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TpNeedsNvlink(Reason):
    """Tensor parallelism over a GPU that has PCIe only."""

    code: ClassVar[ReasonCode] = ReasonCode.TP_NEEDS_NVLINK
    gpu: str
    tp: int


@dataclass(frozen=True, slots=True)
class TpExceedsScaleUpDomain(Reason):
    """Tensor parallelism wider than the GPU's scale-up (NVLink or Infinity Fabric) domain."""

    code: ClassVar[ReasonCode] = ReasonCode.TP_EXCEEDS_SCALE_UP_DOMAIN
    gpu: str
    tp: int
    link: Literal["nvlink", "infinity_fabric"]
    domain_gpus: int


@dataclass(frozen=True, slots=True)
class TpExceedsNvlinkDomain(Reason):
    """The candidate table's rule (:func:`clusterplan.candidates.offerings.forbidden_for`): tensor parallelism
    wider than the GPU type's TP domain (``GpuType.nvlink_domain``, whatever its vendor calls the link), which
    the ``tp_nvlink`` family forbids. ``gpu`` is the catalog name."""

    code: ClassVar[ReasonCode] = ReasonCode.TP_EXCEEDS_NVLINK_DOMAIN
    gpu: str
    tp: int
    domain_gpus: int


@dataclass(frozen=True, slots=True)
class TpCrossesNodes(Reason):
    code: ClassVar[ReasonCode] = ReasonCode.TP_CROSSES_NODES
    gpu: str
    tp: int
    gpus_per_node: int


@dataclass(frozen=True, slots=True)
class TpSplitsAttentionHeads(Reason):
    code: ClassVar[ReasonCode] = ReasonCode.TP_SPLITS_ATTENTION_HEADS
    model: str
    tp: int
    attention_heads: int


@dataclass(frozen=True, slots=True)
class TpSplitsKvHeads(Reason):
    """TP neither divides the KV heads nor is a multiple of them (no even split, no even replication)."""

    code: ClassVar[ReasonCode] = ReasonCode.TP_SPLITS_KV_HEADS
    model: str
    tp: int
    kv_heads: int


@dataclass(frozen=True, slots=True)
class PpExceedsLayers(Reason):
    code: ClassVar[ReasonCode] = ReasonCode.PP_EXCEEDS_LAYERS
    model: str
    pp: int
    layers: int


@dataclass(frozen=True, slots=True)
class CpSplitsSequence(Reason):
    """Context parallelism cuts each sequence into 2·cp chunks (load-balanced causal attention): they must be whole."""

    code: ClassVar[ReasonCode] = ReasonCode.CP_SPLITS_SEQUENCE
    cp: int
    sequence_tokens: int


@dataclass(frozen=True, slots=True)
class EpSplitsExperts(Reason):
    """Training expert parallelism needs routed experts, divides them evenly and is carved out of the DP x CP
    ranks (``problem``: :func:`clusterplan.physics.moe.training_ep_problem`'s code)."""

    code: ClassVar[ReasonCode] = ReasonCode.EP_SPLITS_EXPERTS
    ep: int
    experts: int
    dp_cp: int
    problem: Literal["ep_without_experts", "ep_not_dividing_experts", "ep_not_dividing_dp"]


@dataclass(frozen=True, slots=True)
class VirtualStagesSplitLayers(Reason):
    """Interleaved pipeline chunks need pipeline stages and a whole number of layers per chunk."""

    code: ClassVar[ReasonCode] = ReasonCode.VIRTUAL_STAGES_SPLIT_LAYERS
    virtual_stages: int
    pp: int
    stage_layers: int


# What a precision is needed for: serving weights, a serving KV cache, or training compute.
PrecisionUse = Literal["weights", "kv_cache", "training"]


@dataclass(frozen=True, slots=True)
class Fp8Unsupported(Reason):
    """fp8 on a GPU without native FP8 tensor cores."""

    code: ClassVar[ReasonCode] = ReasonCode.FP8_UNSUPPORTED
    gpu: str
    gpu_architecture: str
    use: PrecisionUse


@dataclass(frozen=True, slots=True)
class Bf16Unsupported(Reason):
    """bf16 on an NVIDIA GPU below compute capability 8.0."""

    code: ClassVar[ReasonCode] = ReasonCode.BF16_UNSUPPORTED
    gpu: str
    use: PrecisionUse


@dataclass(frozen=True, slots=True)
class QloraUnsupported(Reason):
    """QLoRA's bitsandbytes 4-bit kernels need compute capability 7.5."""

    code: ClassVar[ReasonCode] = ReasonCode.QLORA_UNSUPPORTED
    gpu: str
    min_compute_capability: float = 7.5


@dataclass(frozen=True, slots=True)
class ZeroStageUnknown(Reason):
    code: ClassVar[ReasonCode] = ReasonCode.ZERO_STAGE_UNKNOWN
    zero_stage: int


# ------------------------------------------------------------------------------------------------
# Estimates (clusterplan.physics.serving, clusterplan.physics.training)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GlobalBatchTooSmall(Reason):
    """One round of micro-batches over the data-parallel ranks is more than the global batch."""

    code: ClassVar[ReasonCode] = ReasonCode.GLOBAL_BATCH_TOO_SMALL
    global_batch_tokens: float
    sequences_per_step: int
    sequence_tokens: float
    dp: int
    micro_batch: int

    @property
    def sequences_needed(self) -> int:
        return self.dp * self.micro_batch


@dataclass(frozen=True, slots=True)
class NoTensorThroughput(Reason):
    """The catalog lists no tensor throughput for the precision the matmuls would run at."""

    code: ClassVar[ReasonCode] = ReasonCode.NO_TENSOR_THROUGHPUT
    gpu: str
    precision: str


@dataclass(frozen=True, slots=True)
class WeightsDoNotFit(Reason):
    """Serving: the fixed memory (weights, runtime, activations, headroom) leaves no room for one sequence."""

    code: ClassVar[ReasonCode] = ReasonCode.WEIGHTS_DO_NOT_FIT
    gpu: str
    model: str
    quant: str
    tp: int
    pp: int
    weights_gib: float
    fixed_gib: float  # weights + runtime + activations + headroom, per GPU
    headroom_fraction: float
    capacity_gib: float
    context_tokens: float

    @property
    def shortfall_gib(self) -> float:
        """Memory missing before the first sequence's KV cache (<= 0: the fixed part fits, one sequence not)."""
        return self.fixed_gib - self.capacity_gib


@dataclass(frozen=True, slots=True)
class KvCacheDoesNotFit(Reason):
    """Serving: the batch's KV cache is more than the memory left after the fixed part."""

    code: ClassVar[ReasonCode] = ReasonCode.KV_CACHE_DOES_NOT_FIT
    gpu: str
    batch: int
    context_tokens: float
    kv_cache_gib: float
    max_batch: int


@dataclass(frozen=True, slots=True)
class TrainingDoesNotFit(Reason):
    """Training: the most loaded GPU's memory breakdown is more than its capacity."""

    code: ClassVar[ReasonCode] = ReasonCode.TRAINING_DOES_NOT_FIT
    gpu: str
    needed_gib: float
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    runtime_gib: float
    headroom_gib: float
    capacity_gib: float

    @property
    def shortfall_gib(self) -> float:
        return self.needed_gib - self.capacity_gib


# ------------------------------------------------------------------------------------------------
# The candidate table (clusterplan.candidates)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelDoesNotFit(Reason):
    """A serving shape whose weights and one sequence do not fit, when physics gave no finer reason."""

    code: ClassVar[ReasonCode] = ReasonCode.MODEL_DOES_NOT_FIT
    gpu: str
    model: str
    quant: str
    tp: int
    pp: int


@dataclass(frozen=True, slots=True)
class NoLayoutFits(Reason):
    """A training layout none of whose settings fit, when physics gave no finer reason."""

    code: ClassVar[ReasonCode] = ReasonCode.NO_LAYOUT_FITS
    gpu: str


@dataclass(frozen=True, slots=True)
class MissesLatencyTargets(Reason):
    """Every replica shape of a GPU misses the p95 targets even lightly loaded; the fastest one's latencies."""

    code: ClassVar[ReasonCode] = ReasonCode.MISSES_LATENCY_TARGETS
    gpu: str
    best_ttft_s: float
    best_tpot_s: float
    best_tp: int
    best_quant: str
    p95_ttft_target_s: float | None = None
    p95_tpot_target_s: float | None = None

    @property
    def ttft_over_target_s(self) -> float | None:
        return None if self.p95_ttft_target_s is None else self.best_ttft_s - self.p95_ttft_target_s

    @property
    def tpot_over_target_s(self) -> float | None:
        return None if self.p95_tpot_target_s is None else self.best_tpot_s - self.p95_tpot_target_s


@dataclass(frozen=True, slots=True)
class NotObtainable(Reason):
    """Physics admits the GPU, but no cloud instance offers it where allowed and it has no purchase price."""

    code: ClassVar[ReasonCode] = ReasonCode.NOT_OBTAINABLE
    gpu: str


@dataclass(frozen=True, slots=True)
class ConsumerLicence(Reason):
    """A consumer (GeForce) card: its driver licence excludes datacenter deployment (catalog source GEFORCE-EULA),
    so it is planned only where the requirement opts in (constraints.allow_consumer_gpus) or names it."""

    code: ClassVar[ReasonCode] = ReasonCode.CONSUMER_LICENCE
    gpu: str


@dataclass(frozen=True, slots=True)
class TierNotAllowed(Reason):
    """A cloud offer of a provider tier the requirement does not allow (constraints.provider_tiers)."""

    code: ClassVar[ReasonCode] = ReasonCode.TIER_NOT_ALLOWED
    gpu: str
    offer: str  # provider:instance
    tier: str


@dataclass(frozen=True, slots=True)
class NoFabric(Reason):
    """A training layout needs several instances of an offer whose provider sells no fabric between them."""

    code: ClassVar[ReasonCode] = ReasonCode.NO_FABRIC
    gpu: str
    offer: str  # provider:instance
    instances: int  # the fewest instances a multi-instance layout needed


@dataclass(frozen=True, slots=True)
class EpNeedsFabric(Reason):
    """A serving stage's expert parallelism spans servers and no offer of its GPU has a fabric between them."""

    code: ClassVar[ReasonCode] = ReasonCode.EP_NEEDS_FABRIC
    gpu: str
    ep: int
    gpus_per_domain: int  # GPUs of the stage one NVLink domain holds (one group per server or domain)


# ------------------------------------------------------------------------------------------------
# Export (clusterplan.design.export_training): a layout the target framework cannot run as planned
# ------------------------------------------------------------------------------------------------

FrameworkFeature = Literal[
    "pipeline",
    "tensor",
    "context",
    "expert",
    "nodes",
    "memory_option",
    "optimizer",
    "model",
    "precision",
    "launcher",
    "zero",
    "method",
]


@dataclass(frozen=True, slots=True)
class FrameworkCannotRun(Reason):
    """The framework an export targets has no form of this part of the planned layout (torchtune's LoRA recipes:
    no pipeline or tensor parallelism; Megatron-LM: no 8-bit or paged optimizer); ``value`` is the plan's."""

    code: ClassVar[ReasonCode] = ReasonCode.FRAMEWORK_CANNOT_RUN
    framework: str
    feature: FrameworkFeature
    value: str


LeftOutFeature = Literal["tensor", "pipeline", "interleaving", "context", "expert", "zero", "recompute"]


@dataclass(frozen=True, slots=True)
class FrameworkLacks(Reason):
    """Planning: the workload's framework (catalog/frameworks.yaml) has no form of this part of a layout, so the
    layouts with any of ``values`` were not generated (torchtune: no pipeline parallel 2, 4, 8, 16)."""

    code: ClassVar[ReasonCode] = ReasonCode.FRAMEWORK_LACKS
    framework: str
    feature: LeftOutFeature
    values: str


@dataclass(frozen=True, slots=True)
class KvStreamOverLink(Reason):
    """A disaggregated prefill replica's KV stream at its rated rate (prompts/s x each prompt's KV cache) is more
    than the link between the pools carries (physics/disagg.py ``kv_link_gb_per_s``): the pool pair is ruled out."""

    code: ClassVar[ReasonCode] = ReasonCode.KV_STREAM_OVER_LINK
    gpu: str
    link: str  # rdma | tcp | nvlink
    stream_gb_per_s: float
    link_gb_per_s: float


@dataclass(frozen=True, slots=True)
class Stated(Reason):
    """A reason given as a sentence (hand-built tables in tests): shown as is, in the category it was filed under."""

    code: ClassVar[ReasonCode] = ReasonCode.STATED
    text: str
    stated_category: ReasonCategory = ReasonCategory.HARDWARE

    @property
    def category(self) -> ReasonCategory:
        return self.stated_category


def of_category(reasons: Sequence[Reason], category: ReasonCategory) -> bool:
    """Whether there are reasons and every one is of ``category``."""
    return bool(reasons) and all(r.category is category for r in reasons)


def without(reasons: Sequence[Reason], category: ReasonCategory) -> list[Reason]:
    """The reasons not of ``category`` (e.g. the hard reasons: not the link ones)."""
    return [r for r in reasons if r.category is not category]
