"""Training and fine-tuning of one configuration: memory per GPU, step time, throughput, time to train.

* Memory: mixed-precision state 18 B/param sharded by ZeRO stage (:mod:`clusterplan.physics.memory`);
  LoRA/QLoRA freeze the base at bf16 or NF4 and train adapters on every linear layer (Hu et al. 2021,
  arXiv:2106.09685; Dettmers et al. 2023, arXiv:2305.14314 §4 "all linear layers"); activations per
  Korthikanti et al. 2022 (arXiv:2205.05198) with sequence parallelism whenever tp > 1; full recompute adds
  the one layer being recomputed and QLoRA one matrix dequantised to 16 bits, both live in backward only after
  the 16-bit logits are freed, so the peak holds the larger of the two.
* FLOPs per token: ``6·N + 12·l·s·d_attn`` (Narayanan et al. 2021, arXiv:2104.04473 §5.1; PaLM
  arXiv:2204.02311 App. B, the convention MFU figures use); full recompute repeats the forward
  (``8·N + 16·l·s·d_attn``); LoRA skips weight gradients of the frozen base (``4·N + 6·N_adapter + 12·l·s·d_attn``).
* Layout ``tp x cp x pp x dp`` with ``v`` interleaved chunks per stage (Megatron-LM ``--context-parallel-size``,
  ``--num-layers-per-virtual-pipeline-stage``): CP ranks hold ``s/cp`` tokens of each sequence and shard ZeRO
  state with the DP ranks; full recompute of ``N`` of each stage's layers (``--recompute-num-layers``).
* Step: ``m + (p - 1)/v`` micro-batch slots of the most loaded stage (bubble ``(p-1)/(v·m)`` of the ideal time,
  Narayanan et al. 2021 §2.2), each with its GEMMs at ``training_mfu x dense peak x clock fraction`` times the share
  their shapes reach and the attention core at its own kernel's rate (:func:`_compute_split`,
  :mod:`clusterplan.physics.kernels`), plus the communication no compute hides, per kind
  (:mod:`clusterplan.physics.training_comm`: TP overlapped with GEMMs on Hopper+, CP ring exchanges beside attention,
  PP sends, DP/ZeRO collectives beside backward/forward, EP all-to-alls), and the optimizer update (memory-bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.physics import kernels, memory, moe, optimizer_memory, params, rules, training_comm
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.memo import HeldMemo
from clusterplan.physics.optimizer_memory import PLAIN, MemoryPlan
from clusterplan.physics.reasons import (
    CpSplitsSequence,
    EpSplitsExperts,
    GlobalBatchTooSmall,
    NoTensorThroughput,
    Reason,
    TrainingDoesNotFit,
    VirtualStagesSplitLayers,
)
from clusterplan.physics.rules import short_name, training_rule_reasons
from clusterplan.physics.serving import attention_width, peak_tflops
from clusterplan.physics.training_job import TrainingJob, TrainingSettings
from clusterplan.physics.types import Bound, MemoryBreakdown, TrainingEstimate
from clusterplan.units import BYTES_PER_GB

# The LM head's output kept for backward at 16 bits; cross-entropy runs fused or in chunks, so no full fp32 copy
# (torchtune CEWithChunkedOutputLoss, Megatron-LM fused vocab-parallel cross-entropy, Liger fused linear CE).
TRAINING_LOGIT_BYTES = 2.0
EMBEDDING_INPUT_BYTES = 8.0  # int64 token ids the embedding keeps for backward, per token
DEQUANT_BYTES_PER_PARAM = memory.NF4_BYTES_PER_PARAM + 2.0 + 2.0  # read NF4, write and re-read bf16


def lora_params_per_layer(arch: ModelArchitecture, rank: int) -> int:
    """LoRA adapter parameters of one layer, every linear layer targeted: ``Σ r·(d_in + d_out)``.

    q, k, v, o projections plus each MLP matrix of each expert (Hu et al. 2021; QLoRA §4).
    """
    h, d = arch.hidden_size, arch.head_dim_eff
    q = rank * (h + arch.attention_heads * d)
    kv = 2 * rank * (h + arch.kv_heads * d)
    o = rank * (arch.attention_heads * d + h)
    matrices = 3 if arch.gated_mlp else 2
    mlp = arch.moe_experts * matrices * rank * (h + (arch.expert_ffn_size if arch.moe_experts > 1 else arch.ffn_size))
    return q + kv + o + mlp


def largest_matrix_params(arch: ModelArchitecture, tp: int) -> float:
    """The largest single weight matrix on one TP rank: an MLP matrix ``h x f / t`` or the Q projection.

    QLoRA dequantises each NF4 weight to 16 bits inside its own linear layer's forward and backward
    (bitsandbytes ``Linear4bit``, torchao ``NF4Tensor``), so one matrix at a time is live at 16 bits.
    """
    return max(arch.hidden_size * arch.ffn_size, arch.hidden_size * arch.attention_heads * arch.head_dim_eff) / tp


def lm_head_params(arch: ModelArchitecture) -> int:
    """The output projection ``V x h`` (a matmul every token; the input embedding is a lookup)."""
    return arch.vocab_size * arch.hidden_size


_MATMUL: HeldMemo[int] = HeldMemo()  # matmul_params per model


def matmul_params(arch: ModelArchitecture) -> int:
    """``N`` of the FLOP counts: the active non-embedding parameters plus the LM head (:func:`lm_head_params`), the
    weights every token multiplies; memoised per model."""
    return _MATMUL.get_or_make(id(arch), (arch,), _matmul_params, arch)


def _matmul_params(arch: ModelArchitecture) -> int:
    """:func:`matmul_params`, counted."""
    return params.non_embedding_params(arch, active=True) + lm_head_params(arch)


# Attention-core FLOPs per (token, key) pair and attention-width unit: a training step's forward and backward
# (Narayanan et al. 2021 §5.1: 12·l·s·h), and one more forward pass of it (recomputation).
ATTENTION_TRAIN_FLOPS = 12.0
ATTENTION_FORWARD_FLOPS = 4.0


def attention_repeats(recompute: str, recompute_fraction: float, flash_attention: bool) -> float:
    """Extra forward passes of the attention core per step: full recompute repeats it in the recomputed share of
    layers; selective recompute repeats it unless FlashAttention already does inside its backward."""
    if recompute == "full":
        return min(max(recompute_fraction, 0.0), 1.0)
    if recompute == "selective" and not flash_attention:
        return 1.0
    return 0.0


# FLOPs per token per (model, sequence length, method, rank, recompute): a search asks for a few dozen thousands of times.
_FLOPS: HeldMemo[float] = HeldMemo()


def model_flops_per_token(
    arch: ModelArchitecture, seq_len: float, *, method: str = "full", lora_rank: int = 16
) -> float:
    """Useful training FLOPs per token, no recompute: ``6·N + 12·l·s·d_attn`` (LoRA: ``4·N + 6·N_a + ...``).

    ``N`` = active non-embedding parameters plus the LM head. Source: Narayanan et al. 2021 §5.1; PaLM App. B.
    A local-attention layer attends over ``min(s, window)`` keys; MLA trains in the multi-head form
    (:func:`attention_width`). Memoised.
    """
    key = ("model", id(arch), seq_len, method, lora_rank)
    return _FLOPS.get_or_make(key, (arch,), _model_flops_per_token, arch, seq_len, method, lora_rank)


def _model_flops_per_token(arch: ModelArchitecture, seq_len: float, method: str, lora_rank: int) -> float:
    """:func:`model_flops_per_token`, computed."""
    n = matmul_params(arch)
    attention = ATTENTION_TRAIN_FLOPS * kernels.attention_span_tokens(arch, seq_len) * attention_width(arch)
    if method == "full":
        return 6.0 * n + attention
    adapters = arch.layers * lora_params_per_layer(arch, lora_rank)
    return 4.0 * n + 6.0 * adapters + attention


def hardware_flops_per_token(
    arch: ModelArchitecture,
    seq_len: float,
    *,
    recompute: str,
    method: str = "full",
    lora_rank: int = 16,
    flash_attention: bool = True,
    recompute_fraction: float = 1.0,
) -> float:
    """FLOPs the GPUs execute per token: model FLOPs plus recomputation.

    Full recompute repeats the forward (``+2·N + 4·l·s·d_attn``; Korthikanti et al. 2022 §5: 8N vs 6N) of the
    ``recompute_fraction`` of layers recomputed (Megatron-LM ``--recompute-num-layers`` of each stage's layers);
    selective recompute repeats the attention core (``+4·l·s·d_attn``), which FlashAttention already
    does inside its backward, so it adds nothing when ``flash_attention`` is on. Memoised.
    """
    key = ("hardware", id(arch), seq_len, recompute, method, lora_rank, flash_attention, recompute_fraction)
    return _FLOPS.get_or_make(
        key, (arch,), _hardware_flops_per_token, arch, seq_len, recompute, method, lora_rank, flash_attention,
        recompute_fraction,
    )  # fmt: skip


def _hardware_flops_per_token(
    arch: ModelArchitecture, seq_len: float, recompute: str, method: str, lora_rank: int, flash_attention: bool,
    recompute_fraction: float,
) -> float:  # fmt: skip
    """:func:`hardware_flops_per_token`, computed."""
    base = model_flops_per_token(arch, seq_len, method=method, lora_rank=lora_rank)
    n = matmul_params(arch)
    forward_attention = ATTENTION_FORWARD_FLOPS * kernels.attention_span_tokens(arch, seq_len) * attention_width(arch)
    dense = 2.0 * n if recompute == "full" else 0.0
    return base + (dense + forward_attention) * attention_repeats(recompute, recompute_fraction, flash_attention)


def pipeline_slots(pp: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """A pipeline step in micro-batch times of one stage: ``m + (p - 1)/v``.

    The bubble is ``(p - 1)/(v·m)`` of the ideal time (Narayanan et al. 2021 §2.2.1, 1F1B ``v = 1``; §2.2.2 for
    ``v`` interleaved chunks per stage).
    """
    return micro_batches + (pp - 1) / max(virtual_stages, 1)


def pipeline_bubble_fraction(pp: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """Idle share of a pipeline step: ``((p - 1)/v) / (m + (p - 1)/v)``, i.e. a bubble of ``(p - 1)/(v·m)`` of
    the ideal time (Narayanan et al. 2021 §2.2)."""
    return (pp - 1) / max(virtual_stages, 1) / pipeline_slots(pp, micro_batches, virtual_stages)


def expert_parallel_reason(arch: ModelArchitecture, ep: int, dp_cp: int) -> EpSplitsExperts | None:
    """Why ``ep`` cannot be a training layout's EP degree with ``dp_cp`` data x context ranks
    (:func:`clusterplan.physics.moe.training_ep_problem`), as a reason record; None when it can."""
    problem = moe.training_ep_problem(arch, ep, dp_cp)
    if problem is None:
        return None
    return EpSplitsExperts(ep=ep, experts=arch.moe_experts, dp_cp=dp_cp, problem=problem)  # type: ignore[arg-type]


def layout_reasons(
    arch: ModelArchitecture,
    *,
    pp: int,
    cp: int,
    virtual_stages: int,
    sequence_length: float,
    ep: int = 1,
    dp: int = 1,
) -> list[Reason]:
    """Why a context-parallel degree or a virtual-stage count cannot split this model and sequence.

    CP cuts each sequence into ``2·cp`` chunks, rank ``i`` taking chunks ``i`` and ``2cp-1-i`` to balance causal
    attention (Megatron-LM ``get_batch_on_this_cp_rank``); interleaving needs ``pp > 1`` and a whole number of
    layers per chunk (Megatron-LM ``num_layers_per_virtual_pipeline_stage``); expert parallelism per
    :func:`clusterplan.physics.moe.training_ep_problem` (EP carved out of the ``dp x cp`` ranks). Memoised (a fresh
    list each call).
    """
    key = (id(arch), pp, cp, virtual_stages, sequence_length, ep, dp)
    found = _LAYOUT_REASONS.get_or_make(
        key, (arch,), _layout_reasons, arch, pp, cp, virtual_stages, sequence_length, ep, dp
    )
    return list(found)


_LAYOUT_REASONS: HeldMemo[tuple[Reason, ...]] = HeldMemo()  # layout_reasons per model and layout


def _layout_reasons(
    arch: ModelArchitecture, pp: int, cp: int, virtual_stages: int, sequence_length: float, ep: int, dp: int
) -> tuple[Reason, ...]:
    """:func:`layout_reasons`, computed."""
    out: list[Reason] = []
    ep_reason = expert_parallel_reason(arch, ep, dp * cp)
    if ep_reason is not None:
        out.append(ep_reason)
    if cp > 1 and sequence_length % (2 * cp):
        out.append(CpSplitsSequence(cp=cp, sequence_tokens=round(sequence_length)))
    stage_layers = memory.layers_per_stage(arch.layers, pp)
    if virtual_stages > 1 and (pp <= 1 or stage_layers % virtual_stages):
        out.append(VirtualStagesSplitLayers(virtual_stages=virtual_stages, pp=pp, stage_layers=stage_layers))
    return tuple(out)


def _compute_precision(gpu: GpuSpec, precision: str) -> str:
    if precision == "fp8" and "fp8" in gpu.native_precisions:
        return "fp8"
    if precision == "fp32":
        return "fp32"
    return precision if precision in ("bf16", "fp16") else "bf16"


# FIT_RECORD: the records one fit builds are plain (slotted) dataclasses, not frozen ones: a frozen dataclass's
# __init__ sets each field through object.__setattr__, about 7x slower, and a 16k-GPU layout search builds some 26,000
# fits (bench/training_prep.py). Nothing changes them once built.
@dataclass(slots=True)  # a per-fit record (FIT_RECORD)
class StepBatch:
    """How one optimizer step's global batch splits: ``micro_batches`` rounds of ``dp x micro_batch`` sequences,
    ``tokens_per_step`` tokens in all; the reason it cannot, or a note that it was rounded up."""

    micro_batches: int
    tokens_per_step: float
    reason: Reason | None = None
    note: str | None = None


def step_batch(job: TrainingJob, settings: TrainingSettings) -> StepBatch:
    """Micro-batches per optimizer step: ``ceil(ceil(B / s) / (dp x b))`` of the global batch's ``B / s``
    sequences, at least one; a global batch smaller than one round of ``dp x b`` sequences cannot be run. Memoised
    (the types of the values its reason record keeps as given are in the key)."""
    gbt, dp, mb = job.global_batch_tokens, settings.dp, settings.micro_batch
    key = (job.sequence_length, gbt, dp, mb, type(gbt), type(dp), type(mb))
    return _BATCHES.get_or_make(key, (), _step_batch, job, settings)


_BATCHES: HeldMemo[StepBatch] = HeldMemo()  # step_batch per (sequence, global batch, dp, micro-batch)


def _step_batch(job: TrainingJob, settings: TrainingSettings) -> StepBatch:
    """:func:`step_batch`, computed."""
    seq = float(job.sequence_length)
    sequences_per_step = max(1, math.ceil(job.global_batch_tokens / seq))
    per_round = settings.micro_batch * settings.dp
    micro_batches = max(1, math.ceil(sequences_per_step / per_round))
    tokens_per_step = micro_batches * per_round * seq  # whole rounds: the global batch rounded up
    if sequences_per_step < per_round:
        reason = GlobalBatchTooSmall(
            global_batch_tokens=job.global_batch_tokens, sequences_per_step=sequences_per_step,
            sequence_tokens=seq, dp=settings.dp, micro_batch=settings.micro_batch,
        )  # fmt: skip
        return StepBatch(micro_batches, tokens_per_step, reason=reason)
    if tokens_per_step > job.global_batch_tokens * 1.001:
        note = f"global batch rounded up to {tokens_per_step:,.0f} tokens ({micro_batches} micro-batches)"
        return StepBatch(micro_batches, tokens_per_step, note=note)
    return StepBatch(micro_batches, tokens_per_step)


@dataclass(slots=True)  # a per-fit record (FIT_RECORD)
class StageParams:
    """Parameters on the most loaded GPU: one TP rank of the most loaded pipeline stage."""

    layers: int  # layers of the stage
    recomputed: int  # of them fully recomputed (Megatron-LM --recompute-num-layers)
    layer_p: float  # one layer on this GPU (under EP only the routed experts it holds)
    emb_p: float  # the embedding and LM head's share on this GPU
    layers_p: float  # every layer of the stage on this GPU
    expert_p: float = 0.0  # routed experts held under EP (without EP they shard with the rest)
    moe_layers: int = 0  # MoE layers of the stage

    @property
    def model_p(self) -> float:
        """The stage's layers plus its embedding share: ``layers_p + emb_p``."""
        return self.layers_p + self.emb_p


# stage_params per architecture (by identity: catalog rows are frozen, and the architecture is kept beside its
# entry so its id cannot be reused) and the layout fields it reads. A training search asks for a few hundred distinct
# stages some 17,000 times (13B example); each answer is a FIT_RECORD nothing changes once built.
_STAGES: HeldMemo[StageParams] = HeldMemo()  # stage_params per model and layout


def stage_params(arch: ModelArchitecture, layout: Layout) -> StageParams:
    """:class:`StageParams` of a layout: ``l / p`` layers of ``layer_p`` each (MoE models: the dense-first layers
    and the MoE layer frequency counted, :func:`clusterplan.physics.moe.training_stage_params`), the first
    ``recompute_layers`` of them recomputed under full recompute (all when None); memoised."""
    key = (id(arch), layout.tp, layout.pp, layout.ep, layout.recompute, layout.recompute_layers)
    return _STAGES.get_or_make(key, (arch,), _stage_params, arch, layout)


def _stage_params(arch: ModelArchitecture, layout: Layout) -> StageParams:
    """:func:`stage_params`, computed."""
    tp, pp, ep = layout.tp, layout.pp, layout.ep
    layers = memory.layers_per_stage(arch.layers, pp)
    if layout.recompute != "full":
        recomputed = 0
    else:
        asked = layout.recompute_layers
        recomputed = layers if asked is None else max(0, min(int(asked), layers))
    layer_p = memory.layer_params_per_gpu(arch, tp)
    emb_p = memory.embedding_params_per_gpu(arch, tp, pp)
    if not moe.is_moe(arch):
        return StageParams(layers, recomputed, layer_p, emb_p, layers_p=layers * layer_p)  # l/p layers alike
    stage = moe.training_stage_params(arch, tp=tp, pp=pp, ep=ep)
    expert_p = stage.experts if ep > 1 else 0.0  # each EP rank holds E/ep routed experts
    # the routed experts an EP rank does not hold leave its layer: (E - E/ep) x expert params / t
    layer_p -= (moe.routed_experts(arch) - moe.experts_per_gpu(arch, ep)) * moe.expert_params(arch) / tp
    return StageParams(layers, recomputed, layer_p, emb_p, stage.total, expert_p, stage.moe_layers)


def data_ranks(layout: Layout, settings: TrainingSettings) -> tuple[int, int]:
    """``(dp x cp, max(1, dp x cp / ep))``: the ranks ZeRO shards dense state over (CP ranks hold the same weights
    and reduce gradients together: Megatron-LM ``get_data_parallel_group(with_context_parallel=True)``) and those
    the routed experts' state shards over once EP is carved out (Megatron-LM ``expert_data_parallel`` group)."""
    shard_dp = settings.dp * layout.cp
    return shard_dp, max(1, shard_dp // layout.ep)


def effective_plan(plan: MemoryPlan, micro_batches: int, pp: int) -> MemoryPlan:
    """The memory plan as it applies to this layout: the optimizer step in backward needs one micro-batch per step
    and no pipeline (torchtune); a paged optimizer has nothing to page once the state is offloaded to the host."""
    if plan.has("optimizer_in_backward") and (micro_batches > 1 or pp > 1):
        plan = plan.without("optimizer_in_backward")
    if plan.has("optimizer_offload"):
        plan = plan.without("paged_optimizer")
    return plan


@dataclass(slots=True)  # a per-fit record (FIT_RECORD)
class ModelState:
    """Model state on one GPU: weights, gradients and optimizer state, bytes; what they are made of."""

    weights: float
    grads: float
    opt: float
    w_b: float  # bytes per trainable parameter, unsharded: weight, gradient, optimizer state
    g_b: float
    o_b: float
    g_shard: float  # gradient bytes per trainable parameter on this GPU (ZeRO-sharded)
    trainable: float  # trainable parameters on this GPU
    expert_trainable: float  # of them routed experts' (their gradients reduce over the expert-DP ranks)
    gathered_bytes: float  # what ZeRO-3 gathers per pass


def full_state(
    job: TrainingJob, settings: TrainingSettings, stage: StageParams, plan: MemoryPlan, ranks: tuple[int, int]
) -> ModelState:
    """Every weight trains: mixed-precision state (18 B/param with AdamW) sharded by ZeRO stage over the
    ``dp x cp`` ranks, the routed experts' over the expert-data-parallel ranks (``ranks``, :func:`data_ranks`)."""
    shard_dp, expert_dp = ranks
    zero_stage = settings.zero_stage
    w_b, g_b, o_b = memory.model_state_bytes_per_param(job.precision, job.optimizer, plan)
    w, g, o = memory.zero_sharded_bytes_per_param(w_b, g_b, o_b, stage=zero_stage, dp=shard_dp)
    we, ge, oe = memory.zero_sharded_bytes_per_param(w_b, g_b, o_b, stage=zero_stage, dp=expert_dp)
    model_p, expert_p = stage.model_p, stage.expert_p
    dense_p = model_p - expert_p
    return ModelState(
        weights=dense_p * w + expert_p * we, grads=dense_p * g + expert_p * ge, opt=dense_p * o + expert_p * oe,
        w_b=w_b, g_b=g_b, o_b=o_b, g_shard=g, trainable=model_p, expert_trainable=expert_p,
        gathered_bytes=model_p * w_b,  # what ZeRO-3 gathers per pass
    )  # fmt: skip


def adapter_state(
    arch: ModelArchitecture, job: TrainingJob, layout: Layout, settings: TrainingSettings, stage: StageParams,
    plan: MemoryPlan, shard_dp: int,
) -> ModelState:  # fmt: skip
    """LoRA / QLoRA: the frozen base at 16 bits or NF4 (sharded only at ZeRO 3), adapters of rank ``r`` on every
    linear layer with their own optimizer state; under EP the adapters of the experts this rank does not hold
    leave it (each routed expert's matrices carry ``r·(d_in + d_out)``)."""
    tp, ep, rank = layout.tp, layout.ep, job.lora_rank
    base_bpp = memory.NF4_BYTES_PER_PARAM if job.method == "qlora" else 2.0
    base = stage.layers_p * base_bpp + stage.emb_p * memory.EMBEDDING_BYTES_PER_PARAM
    gathered_bytes = base
    if settings.zero_stage >= 3:
        base /= shard_dp
    adapters = stage.layers * lora_params_per_layer(arch, rank) / tp
    expert_trainable = 0.0
    if ep > 1:
        per_expert = (3 if arch.gated_mlp else 2) * rank * (arch.hidden_size + arch.expert_ffn_size) / tp
        held = stage.moe_layers * moe.experts_per_gpu(arch, ep) * per_expert
        adapters -= stage.moe_layers * moe.routed_experts(arch) * per_expert - held
        expert_trainable = held
    w_b, g_b, o_b = optimizer_memory.adapter_state_bytes_per_param(job.optimizer, plan)
    w, g, o = memory.zero_sharded_bytes_per_param(w_b, g_b, o_b, stage=settings.zero_stage, dp=shard_dp)
    return ModelState(
        weights=base + adapters * w, grads=adapters * g, opt=adapters * o, w_b=w_b, g_b=g_b, o_b=o_b, g_shard=g,
        trainable=adapters, expert_trainable=expert_trainable, gathered_bytes=gathered_bytes,
    )  # fmt: skip


def adapter_note(arch: ModelArchitecture, job: TrainingJob, stage: StageParams, pp: int) -> str:
    """The sentence naming a LoRA / QLoRA run's frozen base and its adapters (``l·Σ r·(d_in + d_out)``)."""
    method, rank = job.method, job.lora_rank
    return (
        f"{method}: base frozen at {'NF4' if method == 'qlora' else 'bf16'}; "
        f"{stage.layers * lora_params_per_layer(arch, rank) * pp / 1e6:,.1f}M adapter parameters (rank {rank}, "
        "all linear layers)"
    )


def with_memory_options(
    arch: ModelArchitecture, job: TrainingJob, layout: Layout, settings: TrainingSettings, stage: StageParams,
    state: ModelState, plan: MemoryPlan,
) -> tuple[ModelState, float]:  # fmt: skip
    """The state with ZeRO-3's gathered layers on top, gradients freed as they are used (optimizer step in
    backward) and optimizer state on the host (offload); and the parameters whose update the host runs."""
    tp, zero_stage = layout.tp, settings.zero_stage
    shard_dp, expert_dp = data_ranks(layout, settings)
    weights, grads, opt = state.weights, state.grads, state.opt
    if zero_stage >= 3 and shard_dp > 1:
        # Current and prefetched layer, gathered at the bytes they are stored in: 16-bit, or NF4 for QLoRA's base.
        gathered_bpp = memory.NF4_BYTES_PER_PARAM if job.method == "qlora" else 2.0
        weights += 2 * stage.layer_p * gathered_bpp
        # The running layer's gradient is whole until its reduce-scatter (FSDP2 reduces each unit's gradients
        # after its backward, in the reduce dtype: fp32 under Megatron-FSDP and torchtitan's mixed precision).
        layer_trainable = stage.layer_p if job.method == "full" else state.trainable / max(stage.layers, 1)
        grads += layer_trainable * state.g_b
    # The largest tensor whose gradient can be live alone: the (vocab-parallel) embedding or LM head, or the
    # largest matrix; for adapters, one layer's worth.
    vocab_p = arch.vocab_size * arch.hidden_size / tp
    if job.method == "full":
        largest_p = max(largest_matrix_params(arch, tp), vocab_p)
    else:
        largest_p = state.trainable / max(stage.layers, 1)
    if plan.has("optimizer_in_backward"):
        grads = min(grads, optimizer_memory.in_backward_gradient_bytes(largest_p, state.g_shard))
    offloaded_params = 0.0
    if plan.has("optimizer_offload"):
        offloaded_params = optimizer_shard_params(
            state.trainable, state.expert_trainable, zero_stage, shard_dp, expert_dp
        )
        opt = 0.0
    if (weights, grads, opt) == (state.weights, state.grads, state.opt):
        return state, offloaded_params  # no option applies
    return replace(state, weights=weights, grads=grads, opt=opt), offloaded_params


# model_state per model and the values it reads: a training search asks some 17,000 times for about 2,000 (13B
# example); the data-parallel degree enters through the ranks only.
_STATES: HeldMemo[tuple[ModelState, float]] = HeldMemo()


def model_state(
    arch: ModelArchitecture, job: TrainingJob, layout: Layout, settings: TrainingSettings, stage: StageParams,
    plan: MemoryPlan, ranks: tuple[int, int],
) -> tuple[ModelState, float]:  # fmt: skip
    """The model state on the most loaded GPU (:func:`full_state`, or :func:`adapter_state` for LoRA / QLoRA) with
    the memory options on top (:func:`with_memory_options`), and the parameters whose update the host runs;
    ``ranks``: :func:`data_ranks`. Memoised on what they read."""
    key = (
        id(arch), job.method, job.precision, job.optimizer, job.lora_rank, layout.tp, layout.ep, settings.zero_stage,
        plan, ranks, stage.layers, stage.layer_p, stage.emb_p, stage.layers_p, stage.expert_p, stage.moe_layers,
    )  # fmt: skip
    return _STATES.get_or_make(key, (arch,), _model_state, arch, job, layout, settings, stage, plan, ranks)


def _model_state(
    arch: ModelArchitecture, job: TrainingJob, layout: Layout, settings: TrainingSettings, stage: StageParams,
    plan: MemoryPlan, ranks: tuple[int, int],
) -> tuple[ModelState, float]:  # fmt: skip
    """:func:`model_state`, computed."""
    if job.method == "full":
        state = full_state(job, settings, stage, plan, ranks)
    else:
        state = adapter_state(arch, job, layout, settings, stage, plan, ranks[0])
    return with_memory_options(arch, job, layout, settings, stage, state, plan)


@dataclass(slots=True)  # a per-fit record (FIT_RECORD)
class StageActivations:
    """Activations the most loaded GPU holds at its peak, bytes, and what they are made of."""

    total: float  # at the peak
    kept: float  # one layer's stored activations, per micro-batch
    layer_input: float  # one fully recomputed layer's stored input, per micro-batch
    in_flight: float  # micro-batches of the stage's activations held (memory.pipeline_micro_batches_in_flight)
    offloaded: float  # what activation offloading moves to the host, per micro-batch
    imbalance: float  # the busiest EP rank's routed tokens over the mean


# stage_activations per (model, assumptions) and the values it reads: a training search asks for a few hundred
# distinct ones some 17,000 times (13B example); the data-parallel degree and ZeRO stage do not enter.
_ACTIVATIONS: HeldMemo[StageActivations] = HeldMemo()


def stage_activations(
    arch: ModelArchitecture, a: Assumptions, job: TrainingJob, layout: Layout, settings: TrainingSettings,
    stage: StageParams, micro_batches: int, plan: MemoryPlan,
) -> StageActivations:  # fmt: skip
    """Peak activations of the most loaded stage: each CP rank holds ``s / cp`` tokens of every sequence
    (Megatron-LM context parallelism), each layer per :func:`memory.training_activation_bytes_per_layer` (under EP
    the busiest rank holds the most routed tokens' MLP activations, dropless routing), over the micro-batches in
    flight; backward of a recomputed layer rebuilds it on top of the stored inputs, and QLoRA dequantises one NF4
    matrix to bf16 inside each linear, one at a time. Memoised: ``micro_batches`` enters through the micro-batches
    in flight only."""
    in_flight = memory.pipeline_micro_batches_in_flight(layout.pp, layout.virtual_stages, micro_batches)
    key = (
        id(arch), id(a), job.sequence_length, job.method, layout.tp, layout.pp, layout.cp, layout.ep,
        layout.virtual_stages, layout.recompute, settings.micro_batch, stage.layers, stage.recomputed, in_flight, plan,
    )  # fmt: skip
    return _ACTIVATIONS.get_or_make(
        key, (arch, a), _stage_activations, arch, a, job, layout, settings, stage, in_flight, plan
    )


def _stage_activations(
    arch: ModelArchitecture, a: Assumptions, job: TrainingJob, layout: Layout, settings: TrainingSettings,
    stage: StageParams, in_flight: float, plan: MemoryPlan,
) -> StageActivations:  # fmt: skip
    """:func:`stage_activations`, computed, at ``in_flight`` micro-batches of the stage held."""
    tp, pp, ep, recompute = layout.tp, layout.pp, layout.ep, layout.recompute
    micro_batch, layers = settings.micro_batch, stage.layers
    local_seq = float(job.sequence_length) / layout.cp
    imbalance = moe.training_imbalance(arch, micro_batch * local_seq, ep, a.moe_expert_load_skew)
    ffn_width = params.active_ffn_width(arch) if ep <= 1 else moe.routed_activation_width(arch, imbalance)
    shape = memory.LayerShape(arch.hidden_size, arch.attention_heads, ffn_width, arch.gated_mlp)

    def per_layer(kind: str) -> float:
        return memory.training_activation_bytes_per_layer(
            shape, seq_len=local_seq, micro_batch=micro_batch, tp=tp, sequence_parallel=tp > 1, recompute=kind,
            flash_attention=a.flash_attention,
        )  # fmt: skip

    kept = per_layer("none" if recompute == "full" else recompute)
    layer_input = per_layer("full")
    logits = TRAINING_LOGIT_BYTES * local_seq * micro_batch * arch.vocab_size / tp  # b·s/cp·V 16-bit logits
    layer_work = 0.0
    if stage.recomputed:
        layer_work += per_layer("none")
    if job.method == "qlora":
        layer_work += largest_matrix_params(arch, tp) * 2.0
    # The logits are consumed by the loss and LM-head backward before the first layer's backward starts (autograd
    # frees a node's saved tensors once it has run; torchtune recipes ``del logits`` before ``loss.backward()``
    # because they "peak backward memory"), so the peak is the stored inputs plus the larger of the two, not both.
    stored = memory.stage_activation_bytes(
        stored_per_layer=kept, input_per_layer=layer_input, layers=layers, recompute_layers=stage.recomputed
    )
    offloaded = 0.0
    if plan.has("activation_offload"):
        offloaded = stored
        stored = optimizer_memory.offloaded_activation_bytes(stored / max(layers, 1), layers)
    # The first stage also keeps, per micro-batch, the embedding's input ids (8 B a token) and its dropout mask (1 B
    # a value, sequence-parallel over TP): Megatron-LM theoretical_memory_usage.py compute_activation_memory.
    embedding = (EMBEDDING_INPUT_BYTES + arch.hidden_size) * local_seq * micro_batch / tp
    last_stage = stored + max(logits, layer_work) + (embedding if pp == 1 else 0.0)
    total = max((stored + embedding) * in_flight + layer_work, last_stage) if pp > 1 else last_stage
    return StageActivations(total, kept, layer_input, in_flight, offloaded, imbalance)


def paged_breakdown(
    gpu: GpuSpec, a: Assumptions, job: TrainingJob, state: ModelState, activations: float, plan: MemoryPlan
) -> tuple[MemoryBreakdown, float]:
    """The GPU's memory, and the optimizer bytes a paged optimizer spills to the host: only the moments page
    (adapters train without a master copy); what fits the free memory stays."""
    weights, grads, opt = state.weights, state.grads, state.opt
    mem = memory.training_breakdown(gpu, a, weights=weights, gradients=grads, optimizer=opt, activations=activations)
    if not plan.has("paged_optimizer"):
        return mem, 0.0
    fraction = optimizer_memory.pageable_fraction(job.precision, plan, state.o_b) if job.method == "full" else 1.0
    pageable = opt * fraction
    free = (mem.capacity_gib - mem.total_gib) * 2**30 + pageable
    resident, spilled = optimizer_memory.paged_split(pageable, free)
    opt = opt - pageable + resident
    mem = memory.training_breakdown(gpu, a, weights=weights, gradients=grads, optimizer=opt, activations=activations)
    return mem, spilled


@dataclass(slots=True)  # a per-fit record (FIT_RECORD)
class TrainingFit:
    """What :func:`estimate_training` computes up to and including the memory check (:func:`training_fit`).

    ``layout`` and ``settings`` as estimated (degrees and micro-batch at least 1); ``stage``, ``state`` and
    ``activations``: the most loaded GPU's parameters, model state and activations.
    """

    why_not: list[Reason]
    notes: list[str]
    job: TrainingJob
    layout: Layout
    settings: TrainingSettings
    gpus: int
    node: int
    batch: StepBatch
    stage: StageParams
    state: ModelState
    activations: StageActivations
    mem: MemoryBreakdown
    # Memory options (physics/optimizer_memory.py): the plan as it applies to this layout, and what crosses PCIe.
    plan: MemoryPlan = PLAIN
    paged_spill_bytes: float = 0.0
    offloaded_params: float = 0.0

    @property
    def recompute_layers(self) -> int:
        """Layers of the most loaded stage fully recomputed."""
        return self.stage.recomputed

    @property
    def recompute_saving_bytes(self) -> float:
        """What recomputing one more layer frees, per micro-batch held: ``max(kept - layer input, 0)``."""
        return max(self.activations.kept - self.activations.layer_input, 0.0)

    @property
    def in_flight(self) -> float:
        """Micro-batches of activations the most loaded stage holds."""
        return self.activations.in_flight

    @property
    def expert_trainable(self) -> float:
        """The routed-expert parameters of this GPU's trainable ones."""
        return self.state.expert_trainable

    @property
    def expert_dp(self) -> int:
        """``dp x cp / ep``: Megatron-LM's expert-data-parallel group."""
        return data_ranks(self.layout, self.settings)[1]


def _at_least_one(layout: Layout) -> Layout:
    """The layout with whole CP, virtual-stage and EP degrees of at least 1 (itself when they are)."""
    cp, vpp, ep = layout.cp, layout.virtual_stages, layout.ep
    if type(cp) is int and type(vpp) is int and type(ep) is int and cp >= 1 and vpp >= 1 and ep >= 1:
        return layout
    return replace(
        layout, cp=max(int(layout.cp), 1), virtual_stages=max(int(layout.virtual_stages), 1), ep=max(int(layout.ep), 1)
    )


def _memory_phase(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    job: TrainingJob,
    layout: Layout,
    settings: TrainingSettings,
    node_gpus: int,
    a: Assumptions,
) -> TrainingFit:
    """Rules, batch and memory of one layout (:func:`training_fit`), its reasons in the estimate's order."""
    reasons = training_rule_reasons(
        arch, gpu, tp=layout.tp, pp=layout.pp, dp=settings.dp, zero_stage=settings.zero_stage,
        precision=job.precision, method=job.method,
    )  # fmt: skip
    layout = _at_least_one(layout)
    reasons += layout_reasons(
        arch, pp=layout.pp, cp=layout.cp, virtual_stages=layout.virtual_stages, sequence_length=job.sequence_length,
        ep=layout.ep, dp=settings.dp,
    )  # fmt: skip
    if type(settings.micro_batch) is not int or settings.micro_batch < 1:
        settings = replace(settings, micro_batch=max(int(settings.micro_batch), 1))
    notes: list[str] = []
    batch = step_batch(job, settings)
    if batch.reason is not None:
        reasons.append(batch.reason)
    if batch.note is not None:
        notes.append(batch.note)
    stage = stage_params(arch, layout)
    plan = effective_plan(settings.memory_plan, batch.micro_batches, layout.pp)
    ranks = data_ranks(layout, settings)
    if job.method != "full":
        notes.append(adapter_note(arch, job, stage, layout.pp))
    state, offloaded_params = model_state(arch, job, layout, settings, stage, plan, ranks)
    activations = stage_activations(arch, a, job, layout, settings, stage, batch.micro_batches, plan)
    mem, spilled = paged_breakdown(gpu, a, job, state, activations.total, plan)
    if not mem.fits:
        reasons.append(
            TrainingDoesNotFit(
                gpu=short_name(gpu), needed_gib=mem.total_gib, weights_gib=mem.weights_gib,
                gradients_gib=mem.gradients_gib, optimizer_gib=mem.optimizer_gib, activations_gib=mem.activations_gib,
                runtime_gib=mem.runtime_overhead_gib, headroom_gib=mem.headroom_gib, capacity_gib=mem.capacity_gib,
            )
        )  # fmt: skip
    return TrainingFit(
        why_not=reasons, notes=notes, job=job, layout=layout, settings=settings,
        gpus=layout.tp * layout.cp * layout.pp * settings.dp, node=max(1, min(node_gpus, gpu.max_gpus_per_node)),
        batch=batch, stage=stage, state=state, activations=activations, mem=mem, plan=plan,
        paged_spill_bytes=spilled, offloaded_params=offloaded_params,
    )  # fmt: skip


def training_fit(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    job: TrainingJob,
    layout: Layout,
    settings: TrainingSettings,
    nodes_gpus_per_node: int,
    assumptions: Assumptions,
) -> TrainingFit:
    """The part of :func:`estimate_training` before timing anything: rules, batch and memory.

    Its ``why_not`` is a prefix of ``estimate_training(...).why_not`` (reasons found later, such as a
    GPU without tensor throughput for the precision, come after). Cheaper when only the fit matters;
    pass it to :func:`estimate_training` (same arguments) to finish the estimate without redoing it.
    """
    return _memory_phase(arch, gpu, job, layout, settings, nodes_gpus_per_node, assumptions)


def optimizer_shard_params(
    trainable: float, expert_trainable: float, zero_stage: int, shard_dp: int, expert_dp: int
) -> float:
    """Trainable parameters whose optimizer state this GPU updates: ZeRO 1+ shards the dense ones over the
    ``dp x cp`` ranks and the routed experts' over the expert-data-parallel ranks (Megatron-LM distributed
    optimizer: one buffer per group); ZeRO 0 keeps all."""
    if zero_stage < 1:
        return trainable
    return (trainable - expert_trainable) / max(shard_dp, 1) + expert_trainable / max(expert_dp, 1)


@dataclass(frozen=True)
class ComputeSplit:
    """Compute seconds per token on one GPU holding the whole model (divide by TP, scale by the stage's share)."""

    gemm_s: float  # every matmul but the attention core, at the training GEMM rate for its shapes
    attention_s: float  # the attention core (:func:`clusterplan.physics.kernels.attention_core_s_per_token`)
    gemm_fraction: float  # share of the large-GEMM plateau the model's GEMMs reach at this shape
    attention_flops_per_s: float  # the fused attention kernel's rate


class _SplitInputs(NamedTuple):
    """What :func:`_compute_split` reads of a fit and its rates, beside the model, the GPU and the assumptions."""

    seq: float  # tokens of a sequence
    tp: int
    recompute: str
    tokens: float  # rows of each GEMM: a micro-batch's b·s/cp
    recompute_fraction: float
    hw_flops: float
    rate: float
    bytes_per_s: float


# _compute_split per (model, GPU, assumptions) and the values it reads: a few hundred distinct in a search's 4,000.
_SPLITS: HeldMemo[ComputeSplit] = HeldMemo()


def _compute_split(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    a: Assumptions,
    fit: TrainingFit,
    *,
    hw_flops: float,
    rate: float,
    bytes_per_s: float,
) -> ComputeSplit:
    """GEMMs at ``rate`` (the plateau: ``training_mfu``) times their shape's share (:mod:`kernels`), and the
    attention core at its own kernel's rate, on the FLOPs it executes; a micro-batch's ``b·s/cp`` tokens are the
    rows of each GEMM. Memoised on what it reads of the fit."""
    seq = float(fit.job.sequence_length)
    got = _SplitInputs(
        seq, fit.layout.tp, fit.layout.recompute, fit.settings.micro_batch * (seq / fit.layout.cp),
        _recompute_fraction(fit), hw_flops, rate, bytes_per_s,
    )  # fmt: skip
    return _SPLITS.get_or_make((id(arch), id(gpu), id(a), got), (arch, gpu, a), _computed_split, arch, gpu, a, got)


def _computed_split(arch: ModelArchitecture, gpu: GpuSpec, a: Assumptions, inputs: _SplitInputs) -> ComputeSplit:
    """:func:`_compute_split`, computed from the values it is memoised on."""
    seq, tp, recompute, tokens, recompute_fraction, hw_flops, rate, bytes_per_s = inputs
    width = attention_width(arch)
    span = kernels.attention_span_tokens(arch, seq)
    flash = a.flash_attention
    repeats = attention_repeats(recompute, recompute_fraction, flash)
    core_flops = span * width * (ATTENTION_TRAIN_FLOPS + ATTENTION_FORWARD_FLOPS * repeats)  # hardware_flops' core
    fraction = kernels.model_gemm_fraction(arch, tokens, tp, kernels.gemm_curve(gpu))
    gemm_rate = rate * fraction
    attention_rate = (
        peak_tflops(gpu, "bf16") * 1e12 * a.attention_fraction(gpu.architecture)
        * a.sustained_clock_fraction.of(gpu.gpu_class)
    )  # fmt: skip
    if attention_rate <= 0:
        attention_rate = rate
    attention = kernels.attention_core_s_per_token(
        arch, seq, forward_repeats=repeats, flash=flash, attention_flops_per_s=attention_rate,
        gemm_flops_per_s=rate, bytes_per_s=bytes_per_s,
    )  # fmt: skip
    gemm = max(hw_flops - core_flops, 0.0) / gemm_rate
    return ComputeSplit(
        gemm_s=gemm, attention_s=attention, gemm_fraction=fraction, attention_flops_per_s=attention_rate
    )


def _recompute_fraction(fit: TrainingFit) -> float:
    """Share of the stage's layers fully recomputed: ``N / (l / p)``."""
    layers = fit.stage.layers
    return fit.stage.recomputed / layers if layers else 0.0


@dataclass(frozen=True)
class ComputeRate:
    """The GEMM rate a training step runs at: ``training_mfu x dense peak x clock fraction x the compute
    precision's fraction`` (FLOP/s; 0 or less when the GPU lists no tensor throughput for it)."""

    precision: str  # the compute precision (fp8 only where native)
    peak_tflops: float  # dense peak at that precision
    clock: float  # sustained clock fraction of the GPU's class
    flops_per_s: float


_RATES: HeldMemo[ComputeRate] = HeldMemo()  # compute_rate per (GPU, assumptions, precision)


def compute_rate(gpu: GpuSpec, a: Assumptions, precision: str) -> ComputeRate:
    """:class:`ComputeRate` of a GPU training at ``precision``; memoised."""
    return _RATES.get_or_make((id(gpu), id(a), precision), (gpu, a), _compute_rate, gpu, a, precision)


def _compute_rate(gpu: GpuSpec, a: Assumptions, precision: str) -> ComputeRate:
    """:func:`compute_rate`, computed."""
    cls = gpu.gpu_class
    cprec = _compute_precision(gpu, precision)
    peak = peak_tflops(gpu, cprec)
    clock = a.sustained_clock_fraction.of(cls)
    rate = peak * 1e12 * a.training_mfu_on(gpu) * clock * a.training_compute_fraction(gpu.architecture, cprec)
    return ComputeRate(cprec, peak, clock, rate)


def micro_batch_s(
    arch: ModelArchitecture, gpu: GpuSpec, a: Assumptions, fit: TrainingFit, *, hw_flops: float, rate: float,
    bytes_per_s: float,
) -> tuple[float, ComputeSplit, float]:  # fmt: skip
    """One micro-batch's compute on the most loaded stage, seconds: ``(GEMMs + attention core) x b·s/cp x
    (l/p)/l / t`` over the framework's ``achieved_rate``, routed experts as grouped GEMMs at the busiest EP rank's pace (physics/moe.py training section),
    plus QLoRA's dequantisation of each NF4 matrix (forward, backward and the recomputed share); the split and the
    grouped GEMMs' efficiency with it."""
    layout, method, layers = fit.layout, fit.job.method, fit.stage.layers
    tp, micro_batch = layout.tp, fit.settings.micro_batch
    local_seq = float(fit.job.sequence_length) / layout.cp  # tokens of each sequence on one CP rank
    recompute_fraction = _recompute_fraction(fit)
    compute = _compute_split(arch, gpu, a, fit, hw_flops=hw_flops, rate=rate, bytes_per_s=bytes_per_s)
    # The framework's overhead: the share of the reference framework's achieved rate it reaches (FrameworkRates).
    rate_share = fit.job.framework.achieved_rate
    t_micro = (
        (compute.gemm_s + compute.attention_s) * micro_batch * local_seq * (layers / arch.layers) / tp / rate_share
    )
    routed_share = moe.routed_active_params(arch) * (
        (6.0 if method == "full" else 4.0) + (2.0 * recompute_fraction if layout.recompute == "full" else 0.0)
    ) / hw_flops  # fmt: skip
    expert_factor, _, grouped_eff = moe.training_expert_time_factor(
        arch, micro_batch * local_seq, layout.ep, routed_share=min(routed_share, 1.0),
        grouped=rules.architecture_kernels(gpu).grouped_gemm, skew=a.moe_expert_load_skew,
    )  # fmt: skip
    t_micro *= expert_factor
    if method == "qlora":
        t_micro += (2.0 + recompute_fraction) * layers * fit.stage.layer_p * DEQUANT_BYTES_PER_PARAM / bytes_per_s
    return t_micro, compute, grouped_eff


def step_exposed_comm(
    arch: ModelArchitecture, gpu: GpuSpec, a: Assumptions, fit: TrainingFit, timing: training_comm.StepTiming
) -> training_comm.ExposedComm:
    """Each kind of communication the step leaves exposed (:func:`clusterplan.physics.training_comm.exposed_comm`)
    for the fit's stage: its layers, trainable state and the tokens of one CP rank."""
    stage, state = fit.stage, fit.state
    recompute_fraction = _recompute_fraction(fit)
    traffic = training_comm.StageTraffic(
        layers=stage.layers, recomputed=stage.recomputed, local_seq=float(fit.job.sequence_length) / fit.layout.cp,
        trainable=state.trainable, gathered_bytes=state.gathered_bytes, w_b=state.w_b,
        grad_bytes_per_param=training_comm.reduced_grad_bytes(fit.job.precision),
        expert_trainable=state.expert_trainable, expert_dp=fit.expert_dp, moe_layers=stage.moe_layers,
        moe_recomputed=round(stage.moe_layers * recompute_fraction),
        tp_overlap=fit.job.framework.tp_comm_overlap, dp_overlap=fit.job.framework.dp_comm_overlap,
    )  # fmt: skip
    return training_comm.exposed_comm(
        arch, gpu, a, layout=fit.layout, settings=fit.settings, node=fit.node, traffic=traffic, timing=timing
    )


def comm_notes(arch: ModelArchitecture, fit: TrainingFit, exposed: training_comm.ExposedComm) -> list[str]:
    """What the step's communication does that a reader should know: TP overlapped with GEMMs, CP's ring over the
    network, the EP all-to-all's link and imbalance."""
    tp, cp, ep = fit.layout.tp, fit.layout.cp, fit.layout.ep
    notes: list[str] = []
    if exposed.tp_overlapped:
        notes.append("tensor-parallel collectives overlapped with GEMMs (userbuffers, Megatron --tp-comm-overlap)")
    if cp > 1 and exposed.cp_link.kind == "network":
        notes.append(f"TP x CP = {tp * cp} crosses the NVLink domain: ring-attention KV exchanges ride the network")
    if ep > 1:
        notes.append(
            f"expert parallel {ep}: {moe.experts_per_gpu(arch, ep)} of {arch.moe_experts} experts per GPU, "
            f"all-to-all over {exposed.ep_link.kind}, busiest rank {fit.activations.imbalance:.2f}x the mean routed "
            "tokens"
        )
    return notes


def update_s(
    gpu: GpuSpec, a: Assumptions, fit: TrainingFit, *, compute_time: float, t_micro: float, slots: float,
    bytes_per_s: float,
) -> tuple[float, float]:  # fmt: skip
    """``(optimizer update, exposed host transfers)`` per step, seconds: the update streams its shard of state
    once (read and write), memory-bound; the memory options' PCIe traffic (physics/optimizer_memory.py) pages the
    spilled optimizer state, runs an offloaded update beside the backward and moves offloaded activations."""
    state, layout, plan = fit.state, fit.layout, fit.plan
    shard = optimizer_shard_params(
        state.trainable, state.expert_trainable, fit.settings.zero_stage, fit.settings.dp * layout.cp, fit.expert_dp
    )
    optimizer_s = shard * (2 * state.o_b + state.g_b + 2 * state.w_b) / bytes_per_s  # read and write state once
    pcie = optimizer_memory.pcie_one_way_bytes_per_s(gpu.pcie_bandwidth_gb_per_s, a.link_efficiency)
    overlapped = compute_time if plan.has("optimizer_in_backward") else None
    offload_s = optimizer_memory.paging_s(fit.paged_spill_bytes, pcie, step_compute_s=overlapped)
    if fit.offloaded_params > 0:
        backward_s = compute_time * 2.0 / 3.0
        offload_s += optimizer_memory.optimizer_offload_s(fit.offloaded_params, backward_s, pcie)
        optimizer_s = 0.0  # the update runs on the CPU (its time is not modelled)
    if fit.activations.offloaded > 0:
        offload_s += slots * optimizer_memory.activation_offload_s(fit.activations.offloaded, t_micro, pcie)
    return optimizer_s, offload_s


def step_notes(fit: TrainingFit, *, bubble: float, time_to_train_s: float) -> list[str]:
    """The closing notes of an estimate: the pipeline bubble, sequence parallelism, partial recompute and a missed
    deadline."""
    layout, notes = fit.layout, []
    pp, vpp, layers, recomputed = layout.pp, layout.virtual_stages, fit.stage.layers, fit.stage.recomputed
    if pp > 1:
        chunks = f" ({vpp} interleaved chunks per stage)" if vpp > 1 else ""
        notes.append(
            f"pipeline bubble {bubble:.1%} with {fit.batch.micro_batches} micro-batches over {pp} stages{chunks}"
        )
    if layout.tp > 1:
        notes.append("sequence parallelism assumed with tensor parallelism")
    if layout.recompute == "full" and recomputed < layers:
        notes.append(f"full recompute of {recomputed} of the {layers} layers of each pipeline stage")
    deadline = fit.job.deadline_s
    if time_to_train_s > deadline:
        notes.append(f"takes {time_to_train_s / 86400:,.1f} days; the deadline is {deadline / 86400:,.1f} days")
    return notes


def estimate_training(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    job: TrainingJob,
    layout: Layout,
    settings: TrainingSettings,
    nodes_gpus_per_node: int,
    assumptions: Assumptions,
    fit: TrainingFit | None = None,
) -> TrainingEstimate:
    """Memory, step time, throughput and time to train of ``tp x cp x pp x dp`` GPUs of one type.

    ``nodes_gpus_per_node`` is the server size: collectives among more GPUs than that cross the network.
    Infeasible configurations come back with ``feasible=False`` and reason records in ``why_not``, numbers filled in.
    ``fit``: :func:`training_fit` of the same arguments, already computed. ``layout.ep``: expert-parallel degree,
    carved out of the ``dp x cp`` ranks (physics/moe.py, training section).
    """
    ph = fit or _memory_phase(arch, gpu, job, layout, settings, nodes_gpus_per_node, assumptions)
    return _timed(arch, gpu, assumptions, ph)


def _timed(arch: ModelArchitecture, gpu: GpuSpec, a: Assumptions, ph: TrainingFit) -> TrainingEstimate:
    """The rest of :func:`estimate_training` once the fit is known: compute, communication, the optimizer update
    and host transfers, the step and the time to train."""
    reasons, notes, mem = list(ph.why_not), list(ph.notes), ph.mem
    job, layout, settings = ph.job, ph.layout, ph.settings
    method, rank, seq = job.method, job.lora_rank, float(job.sequence_length)
    micro_batches, layers, recomputed = ph.batch.micro_batches, ph.stage.layers, ph.stage.recomputed
    pp, vpp = layout.pp, layout.virtual_stages

    # Compute.
    speed = compute_rate(gpu, a, job.precision)
    rate, peak = speed.flops_per_s, speed.peak_tflops
    if rate <= 0:
        reasons.append(NoTensorThroughput(gpu=short_name(gpu), precision=speed.precision))
        rate = 1e9
    if speed.clock < 1.0:
        notes.append(f"{gpu.gpu_class} GPU: compute derated to {speed.clock:.0%} for sustained clocks")
    recompute_fraction = recomputed / layers if layers else 0.0
    hw_flops = hardware_flops_per_token(
        arch, seq, recompute=layout.recompute, method=method, lora_rank=rank or 16, flash_attention=a.flash_attention,
        recompute_fraction=recompute_fraction,
    )  # fmt: skip
    useful_flops = model_flops_per_token(arch, seq, method=method, lora_rank=rank or 16)
    bw = gpu.bandwidth_gb_per_s * BYTES_PER_GB * a.memory_bandwidth_efficiency.of(gpu.gpu_class)
    t_micro, compute, grouped_eff = micro_batch_s(arch, gpu, a, ph, hw_flops=hw_flops, rate=rate, bytes_per_s=bw)
    slots = pipeline_slots(pp, micro_batches, vpp)
    compute_time = slots * t_micro
    bubble = pipeline_bubble_fraction(pp, micro_batches, vpp)
    # Shares of a micro-batch's compute: the forward (2N + 4·l·s·d_attn of the executed FLOPs), and the GEMMs
    # (everything but the attention core, by time), what the communication below can hide behind.
    n_matmul = matmul_params(arch)
    attn_fwd = 4.0 * arch.layers * seq * attention_width(arch)
    fwd_share = min(1.0, (2.0 * n_matmul + attn_fwd) / hw_flops)
    gemm_share = compute.gemm_s / (compute.gemm_s + compute.attention_s)

    # Communication, each kind exposed as the frameworks overlap it.
    local_seq = seq / layout.cp
    timing = training_comm.StepTiming(
        micro_batches=micro_batches, slots=slots, t_micro=t_micro, attention_flops_per_s=compute.attention_flops_per_s,
        fwd_share=fwd_share, gemm_share=gemm_share,
        # the shared experts' MLP beside the all-to-alls: 2·N_shared FLOPs a token, forward, backward (x2) and
        # the recomputed share, at the GEMM rate
        shared_window_s=(3.0 + recompute_fraction) * ph.stage.moe_layers * 2.0 * moe.shared_expert_params(arch)
        * settings.micro_batch * local_seq / layout.tp / rate,
    )  # fmt: skip
    exposed = step_exposed_comm(arch, gpu, a, ph, timing)
    notes += comm_notes(arch, ph, exposed)
    if moe.is_moe(arch):
        notes.append(f"expert grouped GEMMs at {grouped_eff:.0%} of dense GEMM throughput")
    exposed_comm = exposed.tp_s + exposed.cp_s + exposed.pp_s + exposed.dp_s + exposed.ep_s

    # The optimizer update and the memory options' host transfers.
    optimizer_s, offload_s = update_s(
        gpu, a, ph, compute_time=compute_time, t_micro=t_micro, slots=slots, bytes_per_s=bw
    )
    if ph.plan.has("optimizer_in_backward"):
        notes.append("optimizer step fused into backward: no full gradient buffer")
    if offload_s > 0:
        notes.append(f"host transfers over PCIe add {offload_s:.2f} s per step")

    step = compute_time + exposed_comm + optimizer_s + offload_s
    tokens_per_s = ph.batch.tokens_per_step / step
    mfu = useful_flops * tokens_per_s / (ph.gpus * peak * 1e12) if peak > 0 else 0.0  # model FLOPs over dense peak
    time_to_train = job.tokens / tokens_per_s
    bound: Bound = "communication" if exposed_comm > compute_time else "compute"
    if not mem.fits:
        bound = "memory_capacity"
    notes += step_notes(ph, bubble=bubble, time_to_train_s=time_to_train)

    return TrainingEstimate(
        feasible=not reasons, why_not=reasons, gpu_id=gpu.id, tp=layout.tp, pp=pp, dp=settings.dp,
        zero_stage=settings.zero_stage, recompute=layout.recompute, cp=layout.cp, ep=layout.ep, virtual_stages=vpp,
        recompute_layers=recomputed, micro_batch=settings.micro_batch, gpus=ph.gpus, memory=mem,
        flops_per_token=hw_flops, step_time_s=step, compute_time_s=compute_time, exposed_comm_time_s=exposed_comm,
        exposed_tp_s=exposed.tp_s, exposed_cp_s=exposed.cp_s, exposed_pp_s=exposed.pp_s, exposed_dp_s=exposed.dp_s,
        exposed_ep_s=exposed.ep_s, bubble_fraction=bubble, tokens_per_s=tokens_per_s, mfu=mfu,
        time_to_train_s=time_to_train, bound=bound, power_w=gpu.tdp_w * ph.gpus, notes=notes,
        memory_options=ph.plan.codes, offload_time_s=offload_s,
    )  # fmt: skip
