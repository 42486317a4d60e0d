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
from dataclasses import dataclass

from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.physics import kernels, memory, moe, optimizer_memory, params, rules, training_comm
from clusterplan.physics.factors import Assumptions
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
from clusterplan.physics.types import Bound, MemoryBreakdown, TrainingEstimate
from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from clusterplan.units import BYTES_PER_GB

# The LM head's output kept for backward at 16 bits; cross-entropy runs fused or in chunks, so no full fp32 copy
# (torchtune CEWithChunkedOutputLoss, Megatron-LM fused vocab-parallel cross-entropy, Liger fused linear CE).
TRAINING_LOGIT_BYTES = 2.0
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


def model_flops_per_token(
    arch: ModelArchitecture, seq_len: float, *, method: str = "full", lora_rank: int = 16
) -> float:
    """Useful training FLOPs per token, no recompute: ``6·N + 12·l·s·d_attn`` (LoRA: ``4·N + 6·N_a + ...``).

    ``N`` = active non-embedding parameters plus the LM head. Source: Narayanan et al. 2021 §5.1; PaLM App. B.
    A local-attention layer attends over ``min(s, window)`` keys; MLA trains in the multi-head form
    (:func:`attention_width`).
    """
    n = params.non_embedding_params(arch, active=True) + lm_head_params(arch)
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
    does inside its backward, so it adds nothing when ``flash_attention`` is on.
    """
    base = model_flops_per_token(arch, seq_len, method=method, lora_rank=lora_rank)
    n = params.non_embedding_params(arch, active=True) + lm_head_params(arch)
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
    :func:`clusterplan.physics.moe.training_ep_problem` (EP carved out of the ``dp x cp`` ranks).
    """
    out: list[Reason] = []
    ep_reason = expert_parallel_reason(arch, ep, dp * cp)
    if ep_reason is not None:
        out.append(ep_reason)
    if cp > 1 and sequence_length % (2 * cp):
        out.append(CpSplitsSequence(cp=cp, sequence_tokens=round(sequence_length)))
    stage_layers = memory.layers_per_stage(arch.layers, pp)
    if virtual_stages > 1 and (pp <= 1 or stage_layers % virtual_stages):
        out.append(VirtualStagesSplitLayers(virtual_stages=virtual_stages, pp=pp, stage_layers=stage_layers))
    return out


def _compute_precision(gpu: GpuSpec, precision: str) -> str:
    if precision == "fp8" and "fp8" in gpu.native_precisions:
        return "fp8"
    if precision == "fp32":
        return "fp32"
    return precision if precision in ("bf16", "fp16") else "bf16"


@dataclass
class TrainingFit:
    """What :func:`estimate_training` computes up to and including the memory check (:func:`training_fit`)."""

    why_not: list[Reason]
    notes: list[str]
    method: str
    rank: int
    gpus: int
    node: int
    seq: float
    micro_batch: int
    micro_batches: int
    tokens_per_step: float
    layers: int
    layer_p: float
    trainable: float
    w_b: float
    g_b: float
    o_b: float
    gathered_bytes: float
    sp: bool
    mem: MemoryBreakdown
    cp: int = 1
    virtual_stages: int = 1
    recompute_layers: int = 0  # layers of the most loaded stage fully recomputed
    recompute_saving_bytes: float = 0.0  # what recomputing one more layer frees, per micro-batch held
    in_flight: float = 1.0  # micro-batches of activations the most loaded stage holds
    # Memory options (physics/optimizer_memory.py): the plan as it applies to this layout, and what crosses PCIe.
    plan: MemoryPlan = PLAIN
    paged_spill_bytes: float = 0.0
    offloaded_params: float = 0.0
    offloaded_activation_bytes: float = 0.0
    # Expert parallelism (physics/moe.py training section): the degree, the routed-expert parameters of this GPU's
    # trainable ones (their gradients reduce over the dp x cp / ep expert-data-parallel ranks), the MoE layers of
    # the stage and the busiest EP rank's routed-token imbalance.
    ep: int = 1
    expert_trainable: float = 0.0
    moe_layers: int = 0
    imbalance: float = 1.0
    expert_dp: int = 1  # dp x cp / ep (Megatron-LM's expert-data-parallel group)


def _memory_phase(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    workload: TrainingWorkload | FinetuneWorkload,
    tp: int,
    pp: int,
    dp: int,
    zero_stage: int,
    recompute: str,
    micro_batch: int,
    nodes_gpus_per_node: int,
    assumptions: Assumptions,
    cp: int = 1,
    virtual_stages: int = 1,
    recompute_layers: int | None = None,
    memory_plan: MemoryPlan = PLAIN,
    ep: int = 1,
) -> TrainingFit:
    a = assumptions
    method = workload.method if isinstance(workload, FinetuneWorkload) else "full"
    rank = workload.lora_rank if isinstance(workload, FinetuneWorkload) else 0
    precision = workload.precision
    reasons = training_rule_reasons(
        arch, gpu, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, precision=precision, method=method
    )
    cp, vpp, ep = max(int(cp), 1), max(int(virtual_stages), 1), max(int(ep), 1)
    reasons += layout_reasons(
        arch, pp=pp, cp=cp, virtual_stages=vpp, sequence_length=workload.sequence_length, ep=ep, dp=dp
    )
    notes: list[str] = []
    gpus = tp * cp * pp * dp
    node = max(1, min(nodes_gpus_per_node, gpu.max_gpus_per_node))
    seq = float(workload.sequence_length)
    micro_batch = max(int(micro_batch), 1)
    # ZeRO / the distributed optimizer shard over data x context parallel ranks: CP ranks hold the same weights
    # and reduce gradients together (Megatron-LM ``get_data_parallel_group(with_context_parallel=True)``).
    shard_dp = dp * cp
    # Expert weights shard over the expert-data-parallel ranks left once EP is carved out (Megatron-LM
    # ``expert_data_parallel`` group, the distributed optimizer's expert buffers).
    expert_dp = max(1, shard_dp // ep)

    # Micro-batches per optimizer step.
    sequences_per_step = max(1, math.ceil(workload.global_batch_tokens / seq))
    per_round = micro_batch * dp
    micro_batches = max(1, math.ceil(sequences_per_step / per_round))
    tokens_per_step = micro_batches * per_round * seq
    if sequences_per_step < per_round:
        reasons.append(
            GlobalBatchTooSmall(
                global_batch_tokens=workload.global_batch_tokens, sequences_per_step=sequences_per_step,
                sequence_tokens=seq, dp=dp, micro_batch=micro_batch,
            )
        )  # fmt: skip
    elif tokens_per_step > workload.global_batch_tokens * 1.001:
        notes.append(f"global batch rounded up to {tokens_per_step:,.0f} tokens ({micro_batches} micro-batches)")

    # Parameters on the most loaded GPU (one TP rank of the most loaded stage).
    layers = memory.layers_per_stage(arch.layers, pp)
    if recompute != "full":
        recomputed = 0
    else:
        recomputed = layers if recompute_layers is None else max(0, min(int(recompute_layers), layers))
    layer_p = memory.layer_params_per_gpu(arch, tp)
    emb_p = memory.embedding_params_per_gpu(arch, tp, pp)
    stage = moe.training_stage_params(arch, tp=tp, pp=pp, ep=ep) if moe.is_moe(arch) else None
    # Routed experts held under EP (each rank E/ep of them); without EP they shard with the rest.
    expert_p = stage.experts if stage is not None and ep > 1 else 0.0
    moe_layers = stage.moe_layers if stage is not None else 0
    if stage is not None:
        layers_p = stage.total  # dense-first layers and the MoE layer frequency counted (physics/params.py)
        layer_p -= (moe.routed_experts(arch) - moe.experts_per_gpu(arch, ep)) * moe.expert_params(arch) / tp
    else:
        layers_p = layers * layer_p
    model_p = layers_p + emb_p
    plan = memory_plan
    if plan.has("optimizer_in_backward") and (micro_batches > 1 or pp > 1):
        plan = plan.without("optimizer_in_backward")  # torchtune: needs one micro-batch per step, no pipeline
    if plan.has("optimizer_offload"):
        plan = plan.without("paged_optimizer")  # the state is on the host already
    if method == "full":
        w_b, g_b, o_b = memory.model_state_bytes_per_param(precision, workload.optimizer, plan)
        w, g, o = memory.zero_sharded_bytes_per_param(w_b, g_b, o_b, stage=zero_stage, dp=shard_dp)
        we, ge, oe = memory.zero_sharded_bytes_per_param(w_b, g_b, o_b, stage=zero_stage, dp=expert_dp)
        trainable = model_p
        dense_p = model_p - expert_p
        weights, grads, opt = dense_p * w + expert_p * we, dense_p * g + expert_p * ge, dense_p * o + expert_p * oe
        expert_trainable = expert_p
        gathered_bytes = model_p * w_b  # what ZeRO-3 gathers per pass
    else:
        base_bpp = memory.NF4_BYTES_PER_PARAM if method == "qlora" else 2.0
        base = layers_p * base_bpp + emb_p * memory.EMBEDDING_BYTES_PER_PARAM
        gathered_bytes = base
        if zero_stage >= 3:
            base /= shard_dp
        adapters = layers * lora_params_per_layer(arch, rank) / tp
        # Adapters of the experts this rank does not hold (EP): each routed expert's matrices carry r·(d_in + d_out).
        expert_trainable = 0.0
        if ep > 1:
            per_expert = (3 if arch.gated_mlp else 2) * rank * (arch.hidden_size + arch.expert_ffn_size) / tp
            held = moe_layers * moe.experts_per_gpu(arch, ep) * per_expert
            adapters -= moe_layers * moe.routed_experts(arch) * per_expert - held
            expert_trainable = held
        trainable = adapters
        w_b, g_b, o_b = optimizer_memory.adapter_state_bytes_per_param(workload.optimizer, plan)
        w, g, o = memory.zero_sharded_bytes_per_param(w_b, g_b, o_b, stage=zero_stage, dp=shard_dp)
        weights, grads, opt = base + trainable * w, trainable * g, trainable * o
        notes.append(
            f"{method}: base frozen at {'NF4' if method == 'qlora' else 'bf16'}; "
            f"{layers * lora_params_per_layer(arch, rank) * pp / 1e6:,.1f}M adapter parameters (rank {rank}, "
            "all linear layers)"
        )
    if zero_stage >= 3 and shard_dp > 1:
        # Current and prefetched layer, gathered at the bytes they are stored in: 16-bit, or NF4 for QLoRA's base.
        gathered_bpp = memory.NF4_BYTES_PER_PARAM if method == "qlora" else 2.0
        weights += 2 * layer_p * gathered_bpp

    # Memory options: gradients freed as they are used, optimizer state on the host.
    # The largest tensor whose gradient can be live alone: the (vocab-parallel) embedding or LM head, or the
    # largest matrix; for adapters, one layer's worth.
    vocab_p = arch.vocab_size * arch.hidden_size / tp
    largest_p = max(largest_matrix_params(arch, tp), vocab_p) if method == "full" else trainable / max(layers, 1)
    if plan.has("optimizer_in_backward"):
        grads = min(grads, optimizer_memory.in_backward_gradient_bytes(largest_p, g))
    offloaded_params = 0.0
    if plan.has("optimizer_offload"):
        offloaded_params = optimizer_shard_params(trainable, expert_trainable, zero_stage, shard_dp, expert_dp)
        opt = 0.0

    # Activations: each CP rank holds seq / cp tokens of every sequence (Megatron-LM context parallelism).
    sp = tp > 1
    local_seq = seq / cp
    # Under EP the busiest rank holds the most routed tokens' MLP activations (dropless routing).
    imbalance = moe.training_imbalance(arch, micro_batch * local_seq, ep, a.moe_expert_load_skew)
    ffn_width = params.active_ffn_width(arch) if ep <= 1 else moe.routed_activation_width(arch, imbalance)
    act_kw = dict(
        seq_len=local_seq, micro_batch=micro_batch, hidden_size=arch.hidden_size,
        attention_heads=arch.attention_heads, ffn_size=ffn_width,
        gated_mlp=arch.gated_mlp, tp=tp, sequence_parallel=sp, flash_attention=a.flash_attention,
    )  # fmt: skip
    kept = memory.training_activation_bytes_per_layer(**act_kw, recompute="none" if recompute == "full" else recompute)  # type: ignore[arg-type]
    layer_input = memory.training_activation_bytes_per_layer(**act_kw, recompute="full")  # type: ignore[arg-type]
    in_flight = memory.pipeline_micro_batches_in_flight(pp, vpp, micro_batches)
    logits = TRAINING_LOGIT_BYTES * local_seq * micro_batch * arch.vocab_size / tp
    # Backward of a recomputed layer rebuilds it: its full activations are live on top of the stored inputs.
    # QLoRA dequantises one NF4 matrix to bf16 inside each linear, one at a time.
    layer_work = 0.0
    if recomputed:
        layer_work += memory.training_activation_bytes_per_layer(**act_kw, recompute="none")  # type: ignore[arg-type]
    if method == "qlora":
        layer_work += largest_matrix_params(arch, tp) * 2.0
    # The logits are consumed by the loss and LM-head backward before the first layer's backward starts (autograd
    # frees a node's saved tensors once it has run; torchtune recipes ``del logits`` before ``loss.backward()``
    # because they "peak backward memory"), so the peak is the stored inputs plus the larger of the two, not both.
    stored = memory.stage_activation_bytes(
        stored_per_layer=kept, input_per_layer=layer_input, layers=layers, recompute_layers=recomputed
    )
    offloaded_activations = 0.0
    if plan.has("activation_offload"):
        offloaded_activations = stored
        stored = optimizer_memory.offloaded_activation_bytes(stored / max(layers, 1), layers)
    last_stage = stored + max(logits, layer_work)
    activations = max(stored * in_flight + layer_work, last_stage) if pp > 1 else last_stage
    mem = memory.training_breakdown(gpu, a, weights=weights, gradients=grads, optimizer=opt, activations=activations)
    spilled = 0.0
    if plan.has("paged_optimizer"):
        # Only the moments page (adapters train without a master copy); what fits the free memory stays.
        pageable = opt * (optimizer_memory.pageable_fraction(precision, plan, o_b) if method == "full" else 1.0)
        free = (mem.capacity_gib - mem.total_gib) * 2**30 + pageable
        resident, spilled = optimizer_memory.paged_split(pageable, free)
        opt = opt - pageable + resident
        mem = memory.training_breakdown(
            gpu, a, weights=weights, gradients=grads, optimizer=opt, activations=activations
        )
    if not mem.fits:
        reasons.append(
            TrainingDoesNotFit(
                gpu=short_name(gpu), needed_gib=mem.total_gib, weights_gib=mem.weights_gib,
                gradients_gib=mem.gradients_gib, optimizer_gib=mem.optimizer_gib, activations_gib=mem.activations_gib,
                runtime_gib=mem.runtime_overhead_gib, headroom_gib=mem.headroom_gib, capacity_gib=mem.capacity_gib,
            )
        )  # fmt: skip

    return TrainingFit(
        why_not=reasons, notes=notes, method=method, rank=rank, gpus=gpus, node=node, seq=seq,
        micro_batch=micro_batch, micro_batches=micro_batches,
        tokens_per_step=tokens_per_step, layers=layers, layer_p=layer_p, trainable=trainable,
        w_b=w_b, g_b=g_b, o_b=o_b, gathered_bytes=gathered_bytes, sp=sp, mem=mem,
        cp=cp, virtual_stages=vpp, recompute_layers=recomputed, recompute_saving_bytes=max(kept - layer_input, 0.0),
        in_flight=in_flight, plan=plan, paged_spill_bytes=spilled, offloaded_params=offloaded_params,
        offloaded_activation_bytes=offloaded_activations, ep=ep, expert_trainable=expert_trainable,
        moe_layers=moe_layers, imbalance=imbalance, expert_dp=expert_dp,
    )  # fmt: skip


def training_fit(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    workload: TrainingWorkload | FinetuneWorkload,
    tp: int,
    pp: int,
    dp: int,
    zero_stage: int,
    recompute: str,
    micro_batch: int,
    nodes_gpus_per_node: int,
    assumptions: Assumptions,
    cp: int = 1,
    virtual_stages: int = 1,
    recompute_layers: int | None = None,
    memory_plan: MemoryPlan = PLAIN,
    ep: int = 1,
) -> TrainingFit:
    """The part of :func:`estimate_training` before timing anything: rules, batch and memory.

    Its ``why_not`` is a prefix of ``estimate_training(...).why_not`` (reasons found later, such as a
    GPU without tensor throughput for the precision, come after). Cheaper when only the fit matters;
    pass it to :func:`estimate_training` (same arguments) to finish the estimate without redoing it.
    """
    return _memory_phase(
        arch, gpu, workload=workload, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, recompute=recompute,
        micro_batch=micro_batch, nodes_gpus_per_node=nodes_gpus_per_node, assumptions=assumptions,
        cp=cp, virtual_stages=virtual_stages, recompute_layers=recompute_layers, memory_plan=memory_plan, ep=ep,
    )  # fmt: skip


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


def _compute_split(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    a: Assumptions,
    *,
    seq: float,
    tokens: float,
    tp: int,
    hw_flops: float,
    rate: float,
    recompute: str,
    recompute_fraction: float,
    bytes_per_s: float,
) -> ComputeSplit:
    """GEMMs at ``rate`` (the plateau: ``training_mfu``) times their shape's share (:mod:`kernels`), and the
    attention core at its own kernel's rate, on the FLOPs it executes; ``tokens`` = rows of each GEMM."""
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


def estimate_training(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    workload: TrainingWorkload | FinetuneWorkload,
    tp: int,
    pp: int,
    dp: int,
    zero_stage: int,
    recompute: str,
    micro_batch: int,
    nodes_gpus_per_node: int,
    assumptions: Assumptions,
    cp: int = 1,
    virtual_stages: int = 1,
    recompute_layers: int | None = None,
    fit: TrainingFit | None = None,
    memory_plan: MemoryPlan = PLAIN,
    ep: int = 1,
) -> TrainingEstimate:
    """Memory, step time, throughput and time to train of ``tp x pp x dp`` GPUs of one type.

    ``nodes_gpus_per_node`` is the server size: collectives among more GPUs than that cross the network.
    Infeasible configurations come back with ``feasible=False`` and reason records in ``why_not``, numbers filled in.
    ``fit``: :func:`training_fit` of the same arguments, already computed. ``ep``: expert-parallel degree, carved
    out of the ``dp x cp`` ranks (physics/moe.py, training section).
    """
    a = assumptions
    cls = gpu.gpu_class
    ph = fit or _memory_phase(
        arch, gpu, workload=workload, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, recompute=recompute,
        micro_batch=micro_batch, nodes_gpus_per_node=nodes_gpus_per_node, assumptions=assumptions,
        cp=cp, virtual_stages=virtual_stages, recompute_layers=recompute_layers, memory_plan=memory_plan, ep=ep,
    )  # fmt: skip
    reasons, notes, mem = list(ph.why_not), list(ph.notes), ph.mem
    method, rank, precision = ph.method, ph.rank, workload.precision
    gpus, node, seq, micro_batch = ph.gpus, ph.node, ph.seq, ph.micro_batch
    micro_batches, tokens_per_step = ph.micro_batches, ph.tokens_per_step
    layers, layer_p, trainable, gathered_bytes, sp = ph.layers, ph.layer_p, ph.trainable, ph.gathered_bytes, ph.sp
    w_b, g_b, o_b = ph.w_b, ph.g_b, ph.o_b
    cp, vpp, recomputed, ep = ph.cp, ph.virtual_stages, ph.recompute_layers, ph.ep

    # Compute.
    cprec = _compute_precision(gpu, precision)
    peak = peak_tflops(gpu, cprec)
    clock = a.sustained_clock_fraction.of(cls)
    rate = peak * 1e12 * a.training_mfu.of(cls) * clock * a.training_compute_fraction(gpu.architecture, cprec)
    if rate <= 0:
        reasons.append(NoTensorThroughput(gpu=short_name(gpu), precision=cprec))
        rate = 1e9
    if clock < 1.0:
        notes.append(f"{cls} GPU: compute derated to {clock:.0%} for sustained clocks")
    recompute_fraction = recomputed / layers if layers else 0.0
    hw_flops = hardware_flops_per_token(
        arch, seq, recompute=recompute, method=method, lora_rank=rank or 16, flash_attention=a.flash_attention,
        recompute_fraction=recompute_fraction,
    )  # fmt: skip
    useful_flops = model_flops_per_token(arch, seq, method=method, lora_rank=rank or 16)
    stage_fraction = layers / arch.layers
    bw = gpu.bandwidth_gb_per_s * BYTES_PER_GB * a.memory_bandwidth_efficiency.of(cls)
    local_seq = seq / cp  # tokens of each sequence on one CP rank
    compute = _compute_split(
        arch, gpu, a, seq=seq, tokens=micro_batch * local_seq, tp=tp, hw_flops=hw_flops, rate=rate,
        recompute=recompute, recompute_fraction=recompute_fraction, bytes_per_s=bw,
    )  # fmt: skip
    t_micro = (compute.gemm_s + compute.attention_s) * micro_batch * local_seq * stage_fraction / tp
    # Routed experts run as grouped GEMMs at the busiest EP rank's pace (physics/moe.py training section).
    routed_share = moe.routed_active_params(arch) * (
        (6.0 if method == "full" else 4.0) + (2.0 * recompute_fraction if recompute == "full" else 0.0)
    ) / hw_flops  # fmt: skip
    expert_factor, _, grouped_eff = moe.training_expert_time_factor(
        arch, micro_batch * local_seq, ep, routed_share=min(routed_share, 1.0),
        grouped=rules.architecture_kernels(gpu).grouped_gemm, skew=a.moe_expert_load_skew,
    )  # fmt: skip
    t_micro *= expert_factor
    if method == "qlora":
        t_micro += (2.0 + recompute_fraction) * layers * layer_p * DEQUANT_BYTES_PER_PARAM / bw
    slots = pipeline_slots(pp, micro_batches, vpp)
    compute_time = slots * t_micro
    bubble = pipeline_bubble_fraction(pp, micro_batches, vpp)
    # Shares of a micro-batch's compute: the forward (2N + 4·l·s·d_attn of the executed FLOPs), and the GEMMs
    # (everything but the attention core, by time), what the communication below can hide behind.
    n_matmul = params.non_embedding_params(arch, active=True) + lm_head_params(arch)
    attn_fwd = 4.0 * arch.layers * seq * attention_width(arch)
    fwd_share = min(1.0, (2.0 * n_matmul + attn_fwd) / hw_flops)
    gemm_share = compute.gemm_s / (compute.gemm_s + compute.attention_s)

    # Communication, each kind exposed as the frameworks overlap it.
    eff = a.link_efficiency
    exposed = training_comm.exposed_comm(
        arch, gpu, a, tp=tp, cp=cp, pp=pp, dp=dp, vpp=vpp, node=node, zero_stage=zero_stage, layers=layers,
        recomputed=recomputed, micro_batch=micro_batch, micro_batches=micro_batches, local_seq=local_seq,
        slots=slots, t_micro=t_micro, rate=compute.attention_flops_per_s, fwd_share=fwd_share, gemm_share=gemm_share,
        trainable=trainable, gathered_bytes=gathered_bytes, w_b=w_b, recompute=recompute, eff=eff,
        ep=ep, expert_trainable=ph.expert_trainable, expert_dp=ph.expert_dp, moe_layers=ph.moe_layers,
        moe_recomputed=round(ph.moe_layers * recompute_fraction),
        shared_window_s=(3.0 + recompute_fraction) * ph.moe_layers * 2.0 * moe.shared_expert_params(arch)
        * micro_batch * local_seq / tp / rate,
        grad_bytes_per_param=training_comm.reduced_grad_bytes(precision),
    )  # fmt: skip
    if exposed.tp_overlapped:
        notes.append("tensor-parallel collectives overlapped with GEMMs (userbuffers, Megatron --tp-comm-overlap)")
    if cp > 1 and exposed.cp_link.kind == "network":
        notes.append(f"TP x CP = {tp * cp} crosses the NVLink domain: ring-attention KV exchanges ride the network")
    if ep > 1:
        notes.append(
            f"expert parallel {ep}: {moe.experts_per_gpu(arch, ep)} of {arch.moe_experts} experts per GPU, "
            f"all-to-all over {exposed.ep_link.kind}, busiest rank {ph.imbalance:.2f}x the mean routed tokens"
        )
    if moe.is_moe(arch):
        notes.append(f"expert grouped GEMMs at {grouped_eff:.0%} of dense GEMM throughput")
    exposed_comm = exposed.tp_s + exposed.cp_s + exposed.pp_s + exposed.dp_s + exposed.ep_s

    # Optimizer update streams its shard of state once (read and write), memory-bound.
    shard = optimizer_shard_params(trainable, ph.expert_trainable, zero_stage, dp * cp, ph.expert_dp)
    optimizer_s = shard * (2 * o_b + g_b + 2 * w_b) / bw

    # Memory options' PCIe traffic (physics/optimizer_memory.py): exposed host transfers per step.
    pcie = optimizer_memory.pcie_one_way_bytes_per_s(gpu.pcie_bandwidth_gb_per_s, a.link_efficiency)
    overlapped = compute_time if ph.plan.has("optimizer_in_backward") else None
    offload_s = optimizer_memory.paging_s(ph.paged_spill_bytes, pcie, step_compute_s=overlapped)
    if ph.offloaded_params > 0:
        backward_s = compute_time * 2.0 / 3.0
        offload_s += optimizer_memory.optimizer_offload_s(ph.offloaded_params, backward_s, pcie)
        optimizer_s = 0.0  # the update runs on the CPU (its time is not modelled)
    if ph.offloaded_activation_bytes > 0:
        offload_s += slots * optimizer_memory.activation_offload_s(ph.offloaded_activation_bytes, t_micro, pcie)
    if ph.plan.has("optimizer_in_backward"):
        notes.append("optimizer step fused into backward: no full gradient buffer")
    if offload_s > 0:
        notes.append(f"host transfers over PCIe add {offload_s:.2f} s per step")

    step = compute_time + exposed_comm + optimizer_s + offload_s
    tokens_per_s = tokens_per_step / step
    mfu = useful_flops * tokens_per_s / (gpus * peak * 1e12) if peak > 0 else 0.0
    time_to_train = workload.tokens / tokens_per_s
    bound: Bound = "communication" if exposed_comm > compute_time else "compute"
    if not mem.fits:
        bound = "memory_capacity"
    if pp > 1:
        chunks = f" ({vpp} interleaved chunks per stage)" if vpp > 1 else ""
        notes.append(f"pipeline bubble {bubble:.1%} with {micro_batches} micro-batches over {pp} stages{chunks}")
    if sp:
        notes.append("sequence parallelism assumed with tensor parallelism")
    if recompute == "full" and recomputed < layers:
        notes.append(f"full recompute of {recomputed} of the {layers} layers of each pipeline stage")
    if time_to_train > workload.deadline:
        notes.append(f"takes {time_to_train / 86400:,.1f} days; the deadline is {workload.deadline / 86400:,.1f} days")

    return TrainingEstimate(
        feasible=not reasons,
        why_not=reasons,
        gpu_id=gpu.id,
        tp=tp,
        pp=pp,
        dp=dp,
        zero_stage=zero_stage,
        recompute=recompute,
        cp=cp,
        ep=ep,
        virtual_stages=vpp,
        recompute_layers=recomputed,
        micro_batch=micro_batch,
        gpus=gpus,
        memory=mem,
        flops_per_token=hw_flops,
        step_time_s=step,
        compute_time_s=compute_time,
        exposed_comm_time_s=exposed_comm,
        exposed_tp_s=exposed.tp_s,
        exposed_cp_s=exposed.cp_s,
        exposed_pp_s=exposed.pp_s,
        exposed_dp_s=exposed.dp_s,
        exposed_ep_s=exposed.ep_s,
        bubble_fraction=bubble,
        tokens_per_s=tokens_per_s,
        mfu=mfu,
        time_to_train_s=time_to_train,
        bound=bound,
        power_w=gpu.tdp_w * gpus,
        notes=notes,
        memory_options=ph.plan.codes,
        offload_time_s=offload_s,
    )
