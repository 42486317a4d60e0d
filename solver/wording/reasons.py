"""The words for a reason record (:mod:`clusterplan.physics.reasons`): the one place a reason becomes a sentence.

Every place that shows why something cannot run (``estimate``'s output, the infeasibility text, the
plan's lost-GPU notes) calls :func:`render_reason` at the boundary; layers below decide on codes.
A sentence is ``"<subject>: <predicate>"`` when the reason is about one GPU or model, else the
predicate alone; :func:`render_predicate` gives the predicate where the subject is already said.
"""

from __future__ import annotations

from collections.abc import Iterable

from clusterplan.physics.reasons import (
    Bf16Unsupported,
    ConsumerLicence,
    CpSplitsSequence,
    EpNeedsFabric,
    EpSplitsExperts,
    Fp8Unsupported,
    FrameworkCannotRun,
    FrameworkLacks,
    GlobalBatchTooSmall,
    KvCacheDoesNotFit,
    KvStreamOverLink,
    MissesLatencyTargets,
    ModelDoesNotFit,
    NoFabric,
    NoLayoutFits,
    NoTensorThroughput,
    NotObtainable,
    PpExceedsLayers,
    QloraUnsupported,
    Reason,
    Stated,
    TierNotAllowed,
    TpCrossesNodes,
    TpExceedsNvlinkDomain,
    TpExceedsScaleUpDomain,
    TpNeedsNvlink,
    TpSplitsAttentionHeads,
    TpSplitsKvHeads,
    TrainingDoesNotFit,
    VirtualStagesSplitLayers,
    WeightsDoNotFit,
    ZeroStageUnknown,
)
from clusterplan.plan import INVENTORY_IGNORED, ConstraintCheck, LostCause, RequirementWarning
from clusterplan.wording.fmt import usd

_LINK_NAME = {"nvlink": "NVLink", "infinity_fabric": "Infinity Fabric"}
_FP8_NEED = {
    "weights": "fp8 weights need native FP8 tensor cores",
    "kv_cache": "an fp8 KV cache needs native FP8",
    "training": "fp8 training needs native FP8 tensor cores",
}
_BF16_NEED = {
    "weights": "bf16 needs compute capability 8.0 or later; use fp16",
    "kv_cache": "a bf16 KV cache needs compute capability 8.0 or later; use fp16",
    "training": "bf16 needs compute capability 8.0 or later; train in fp16 with loss scaling",
}

_LEFT_OUT_FEATURE = {
    "tensor": "tensor parallel",
    "pipeline": "pipeline parallel",
    "interleaving": "interleaved pipeline of",
    "context": "context parallel",
    "expert": "expert parallel",
    "zero": "ZeRO stage",
    "recompute": "activation recompute",
}

_FRAMEWORK_FEATURE = {
    "pipeline": "pipeline parallel",
    "tensor": "tensor parallel",
    "context": "context parallel",
    "expert": "expert parallel",
    "nodes": "spread over",
    "memory_option": "memory option",
    "optimizer": "optimizer",
    "model": "model",
    "precision": "precision",
    "launcher": "launcher",
    "zero": "ZeRO stage",
    "method": "method",
}


def _beyond_domain(tp: int, link: str, gpu: str, domain_gpus: int) -> str:
    # The article stays as each producer wrote it ("a Infinity Fabric", "an NVLink"): outputs are byte-identical.
    return f"tensor parallel {tp} needs {link} domain of {tp} GPUs; {gpu} links at most {domain_gpus}"


def reason_parts(r: Reason) -> tuple[str | None, str]:
    """(subject, predicate) of a reason: the GPU or model it is about (None if neither), and what is wrong."""
    match r:
        case TpNeedsNvlink():
            return r.gpu, f"tensor parallel {r.tp} needs NVLink; {r.gpu} has PCIe only"
        case TpExceedsScaleUpDomain():
            return r.gpu, _beyond_domain(r.tp, f"a {_LINK_NAME[r.link]}", r.gpu, r.domain_gpus)
        case TpExceedsNvlinkDomain():
            return r.gpu, _beyond_domain(r.tp, "an NVLink", r.gpu, r.domain_gpus)
        case TpCrossesNodes():
            return r.gpu, f"tensor parallel {r.tp} would cross nodes (at most {r.gpus_per_node} GPUs per node)"
        case TpSplitsAttentionHeads():
            return r.model, f"tensor parallel {r.tp} does not divide its {r.attention_heads} attention heads"
        case TpSplitsKvHeads():
            return r.model, f"tensor parallel {r.tp} neither divides nor is a multiple of its {r.kv_heads} KV heads"
        case PpExceedsLayers():
            return r.model, f"pipeline parallel {r.pp} exceeds its {r.layers} layers"
        case CpSplitsSequence():
            return None, (
                f"context parallel {r.cp} needs sequences of a multiple of {2 * r.cp} tokens "
                f"(2 x cp chunks); {r.sequence_tokens:,} is not"
            )
        case EpSplitsExperts():
            if r.problem == "ep_without_experts":
                return None, f"expert parallel {r.ep} needs a mixture-of-experts model (a dense model trains at ep 1)"
            if r.problem == "ep_not_dividing_experts":
                return None, f"expert parallel {r.ep} does not divide the {r.experts} routed experts"
            return None, (
                f"expert parallel {r.ep} is carved out of the data x context parallel ranks; {r.dp_cp} of them "
                "are not a multiple of it"
            )
        case VirtualStagesSplitLayers():
            if r.pp <= 1:
                return None, f"{r.virtual_stages} virtual pipeline stages need pipeline parallelism (pp > 1)"
            return None, (
                f"{r.virtual_stages} virtual pipeline stages do not divide the {r.stage_layers} layers of each of "
                f"the {r.pp} pipeline stages"
            )
        case Fp8Unsupported():
            return r.gpu, f"{_FP8_NEED[r.use]} ({r.gpu_architecture} has none)"
        case Bf16Unsupported():
            return r.gpu, _BF16_NEED[r.use]
        case QloraUnsupported():
            return r.gpu, f"QLoRA (bitsandbytes 4-bit) needs compute capability {r.min_compute_capability:g} or later"
        case ZeroStageUnknown():
            return None, f"ZeRO stage {r.zero_stage} does not exist (0-3)"
        case GlobalBatchTooSmall():
            return None, (
                f"global batch of {r.global_batch_tokens:,.0f} tokens is {r.sequences_per_step} sequences of "
                f"{r.sequence_tokens:,.0f}; dp={r.dp} x micro-batch {r.micro_batch} needs at least {r.sequences_needed}"
            )
        case NoTensorThroughput():
            return r.gpu, f"no tensor throughput listed for {r.precision}"
        case WeightsDoNotFit():
            return None, (
                f"does not fit in memory: {r.model} at {r.quant} with tp={r.tp}, pp={r.pp} needs "
                f"{r.weights_gib:,.1f} GiB of weights per GPU ({r.fixed_gib:,.1f} GiB with runtime, activations "
                f"and {r.headroom_fraction:.0%} headroom); {r.gpu} has {r.capacity_gib:,.1f} GiB and no room for "
                f"even one {r.context_tokens:,.0f}-token sequence"
            )
        case KvCacheDoesNotFit():
            return None, (
                f"does not fit in memory: batch {r.batch} at {r.context_tokens:,.0f} tokens needs "
                f"{r.kv_cache_gib:,.1f} GiB of KV cache per GPU; {r.gpu} has room for at most {r.max_batch} sequences"
            )
        case TrainingDoesNotFit():
            return None, (
                f"does not fit in memory: needs {r.needed_gib:,.1f} GiB per GPU (weights {r.weights_gib:,.1f}, "
                f"gradients {r.gradients_gib:,.1f}, optimizer {r.optimizer_gib:,.1f}, activations "
                f"{r.activations_gib:,.1f}, runtime {r.runtime_gib:,.1f}, headroom {r.headroom_gib:,.1f}); "
                f"{r.gpu} has {r.capacity_gib:,.1f} GiB"
            )
        case ModelDoesNotFit():
            return r.gpu, f"{r.model} does not fit at {r.quant}, TP {r.tp}, PP {r.pp}"
        case NoLayoutFits():
            return r.gpu, "no layout fits"
        case MissesLatencyTargets():
            return r.gpu, (
                f"even a lightly loaded replica misses the p95 targets (best: TTFT {r.best_ttft_s:.2f} s, "
                f"TPOT {r.best_tpot_s * 1000:.0f} ms at TP {r.best_tp}, {r.best_quant})"
            )
        case NotObtainable():
            return r.gpu, "no cloud instance in the allowed clouds and regions, and no purchase price in the catalog"
        case ConsumerLicence():
            return r.gpu, (
                "a consumer (GeForce) card: NVIDIA's GeForce driver licence excludes datacenter deployment "
                "(section 2.1.3); set constraints.allow_consumer_gpus: true, or name it in allowed_gpus, to plan it"
            )
        case TierNotAllowed():
            return r.offer, f"a {r.tier} offer; add {r.tier} to constraints.provider_tiers to plan it"
        case NoFabric():
            return r.offer, (
                f"no fabric (InfiniBand, RoCE or EFA) between instances: not used for training across {r.instances} "
                "or more of them"
            )
        case EpNeedsFabric():
            return r.gpu, (
                f"expert parallelism {r.ep} spans several instances (NVLink groups of {r.gpus_per_domain} GPUs) and no "
                "offer has a fabric (InfiniBand, RoCE or EFA) between them for its all-to-all"
            )
        case FrameworkCannotRun() if r.feature == "launcher":
            return r.framework, f"clusterplan writes no launch for it yet (export writes {r.value})"
        case FrameworkCannotRun():
            return r.framework, f"cannot run the plan's {_FRAMEWORK_FEATURE[r.feature]} {r.value}"
        case FrameworkLacks():
            return r.framework, f"runs no {_LEFT_OUT_FEATURE[r.feature]} {r.values}; those layouts were not planned"
        case KvStreamOverLink():
            link = {"rdma": "RDMA fabric", "tcp": "Ethernet (TCP)", "nvlink": "NVLink"}.get(r.link, r.link)
            return r.gpu, (
                f"disaggregated: the prefill replica's KV stream, {r.stream_gb_per_s:,.1f} GB/s at its rated rate, "
                f"is more than the {link} between the pools carries ({r.link_gb_per_s:,.1f} GB/s); the pool pair is "
                "ruled out"
            )
        case Stated():
            return None, r.text
    raise TypeError(f"no wording for reason {r.code.value} ({type(r).__name__})")


def render_reason(r: Reason) -> str:
    """The sentence for a reason, e.g. ``"L40S: tensor parallel 4 needs NVLink; L40S has PCIe only"``."""
    subject, predicate = reason_parts(r)
    return f"{subject}: {predicate}" if subject is not None else predicate


def render_predicate(r: Reason) -> str:
    """The sentence without its subject, for a line that already names the GPU or model."""
    return reason_parts(r)[1]


def render_reasons(reasons: Iterable[Reason]) -> list[str]:
    return [render_reason(r) for r in reasons]


def render_lost(c: LostCause) -> str:
    """Why a cheaper GPU type lost (``LostGpu.reason``), from its cause record."""
    if c.kind == "no_candidate":
        return (
            render_reason(c.excluded) if c.excluded is not None else f"{c.gpu_name}: no candidate could run {c.model}"
        )
    if c.kind == "dearer":
        return f"{c.gpu_name}: feasible but ${c.extra_usd:,.0f} dearer over the horizon ({c.design})"
    text = "; ".join(c.conflicts or (f"{c.gpu_name}: cannot be placed",))
    return text + (f" (other layouts: {render_reason(c.excluded)})" if c.excluded is not None else "")


def render_warning(w: RequirementWarning) -> str:
    """A requirement warning in words (one sentence per code)."""
    if w.code == INVENTORY_IGNORED:
        return (
            f"deployment: cloud ignores constraints.inventory ({', '.join(w.gpus)}): owned GPUs are never used; "
            "set deployment: either (or owned) to plan with them, or drop the inventory"
        )
    return f"{w.code} ({', '.join(w.fields)})"


def render_relaxed(c: ConstraintCheck) -> str:
    """A binding family's "to what": its least move, what it saves and the design it buys (else the
    optimum with the family switched off, else '-')."""
    t = c.trade
    if t is not None:
        head = t.change if t.least else f"{t.change} (the constraint switched off)"
        return f"{head}: saves {usd(t.saving_usd)}, {usd(t.total_usd)} ({t.design})"
    if c.relaxed_total_usd is not None:
        return f"{usd(c.relaxed_total_usd)} ({c.relaxed_design})"
    return "-"
