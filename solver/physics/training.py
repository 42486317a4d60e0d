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
* Step: ``(m + p - 1)`` micro-batch slots of the most loaded stage (1F1B pipeline; bubble
  ``(p-1)/(m+p-1)``, Narayanan et al. 2021 §2.2), each at ``training_mfu x dense peak x clock fraction``,
  plus exposed tensor-parallel all-reduces (4 per layer per micro-batch, 6 with full recompute), pipeline
  sends, data-parallel gradient reduction (ring, partly overlapped) and the optimizer update (memory-bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.physics import memory, optimizer_memory, params
from clusterplan.physics.comm import link_for_group, nccl_allreduce_s, p2p_s, ring_allgather_s, ring_allreduce_s
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.optimizer_memory import PLAIN, MemoryPlan
from clusterplan.physics.reasons import GlobalBatchTooSmall, NoTensorThroughput, Reason, TrainingDoesNotFit
from clusterplan.physics.rules import short_name, training_rule_reasons
from clusterplan.physics.serving import attention_width, peak_tflops
from clusterplan.physics.types import Bound, MemoryBreakdown, TrainingEstimate
from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from clusterplan.units import BYTES_PER_GB

ACTIVATION_BYTES = 2.0
# The LM head's output kept for backward at 16 bits; cross-entropy runs fused or in chunks, so no full fp32 copy
# (torchtune CEWithChunkedOutputLoss, Megatron-LM fused vocab-parallel cross-entropy, Liger fused linear CE).
TRAINING_LOGIT_BYTES = 2.0
GRAD_BYTES = 4.0  # fp32 main gradients are what gets reduced (Megatron-LM default for bf16)
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
    mlp = arch.moe_experts * matrices * rank * (h + arch.ffn_size)
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


def model_flops_per_token(
    arch: ModelArchitecture, seq_len: float, *, method: str = "full", lora_rank: int = 16
) -> float:
    """Useful training FLOPs per token, no recompute: ``6·N + 12·l·s·d_attn`` (LoRA: ``4·N + 6·N_a + ...``).

    ``N`` = active non-embedding parameters plus the LM head. Source: Narayanan et al. 2021 §5.1; PaLM App. B.
    """
    n = params.non_embedding_params(arch, active=True) + lm_head_params(arch)
    attention = 12.0 * arch.layers * seq_len * attention_width(arch)
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
) -> float:
    """FLOPs the GPUs execute per token: model FLOPs plus recomputation.

    Full recompute repeats the forward (``+2·N + 4·l·s·d_attn``; Korthikanti et al. 2022 §5: 8N vs 6N);
    selective recompute repeats the attention core (``+4·l·s·d_attn``), which FlashAttention already
    does inside its backward, so it adds nothing when ``flash_attention`` is on.
    """
    base = model_flops_per_token(arch, seq_len, method=method, lora_rank=lora_rank)
    n = params.non_embedding_params(arch, active=True) + lm_head_params(arch)
    forward_attention = 4.0 * arch.layers * seq_len * attention_width(arch)
    if recompute == "full":
        return base + 2.0 * n + forward_attention
    if recompute == "selective" and not flash_attention:
        return base + forward_attention
    return base


def pipeline_bubble_fraction(pp: int, micro_batches: int) -> float:
    """Idle share of a 1F1B pipeline: ``(p - 1) / (m + p - 1)`` (Narayanan et al. 2021 §2.2.1)."""
    return (pp - 1) / (micro_batches + pp - 1)


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
    # Memory options (physics/optimizer_memory.py): the plan as it applies to this layout, and what crosses PCIe.
    plan: MemoryPlan = PLAIN
    paged_spill_bytes: float = 0.0
    offloaded_params: float = 0.0
    offloaded_activation_bytes: float = 0.0


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
    memory_plan: MemoryPlan = PLAIN,
) -> TrainingFit:
    a = assumptions
    method = workload.method if isinstance(workload, FinetuneWorkload) else "full"
    rank = workload.lora_rank if isinstance(workload, FinetuneWorkload) else 0
    precision = workload.precision
    reasons = training_rule_reasons(
        arch, gpu, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, precision=precision, method=method
    )
    notes: list[str] = []
    gpus = tp * pp * dp
    node = max(1, min(nodes_gpus_per_node, gpu.max_gpus_per_node))
    seq = float(workload.sequence_length)
    micro_batch = max(int(micro_batch), 1)

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
    layer_p = memory.layer_params_per_gpu(arch, tp)
    emb_p = memory.embedding_params_per_gpu(arch, tp, pp)
    model_p = layers * layer_p + emb_p
    plan = memory_plan
    if plan.has("optimizer_in_backward") and (micro_batches > 1 or pp > 1):
        plan = plan.without("optimizer_in_backward")  # torchtune: needs one micro-batch per step, no pipeline
    if plan.has("optimizer_offload"):
        plan = plan.without("paged_optimizer")  # the state is on the host already
    if method == "full":
        w_b, g_b, o_b = memory.model_state_bytes_per_param(precision, workload.optimizer, plan)
        w, g, o = memory.zero_sharded_bytes_per_param(w_b, g_b, o_b, stage=zero_stage, dp=dp)
        trainable = model_p
        weights, grads, opt = model_p * w, model_p * g, model_p * o
        gathered_bytes = model_p * w_b  # what ZeRO-3 gathers per pass
    else:
        base_bpp = memory.NF4_BYTES_PER_PARAM if method == "qlora" else 2.0
        base = layers * layer_p * base_bpp + emb_p * memory.EMBEDDING_BYTES_PER_PARAM
        gathered_bytes = base
        if zero_stage >= 3:
            base /= dp
        trainable = layers * lora_params_per_layer(arch, rank) / tp
        w_b, g_b, o_b = optimizer_memory.adapter_state_bytes_per_param(workload.optimizer, plan)
        w, g, o = memory.zero_sharded_bytes_per_param(w_b, g_b, o_b, stage=zero_stage, dp=dp)
        weights, grads, opt = base + trainable * w, trainable * g, trainable * o
        notes.append(
            f"{method}: base frozen at {'NF4' if method == 'qlora' else 'bf16'}; "
            f"{trainable * tp * pp / 1e6:,.1f}M adapter parameters (rank {rank}, all linear layers)"
        )
    if zero_stage >= 3 and dp > 1:
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
        offloaded_params = trainable / (dp if zero_stage >= 1 else 1)
        opt = 0.0

    # Activations.
    sp = tp > 1
    per_layer = memory.training_activation_bytes_per_layer(
        seq_len=seq, micro_batch=micro_batch, hidden_size=arch.hidden_size,
        attention_heads=arch.attention_heads, ffn_size=arch.ffn_size * arch.experts_per_token,
        gated_mlp=arch.gated_mlp, tp=tp, sequence_parallel=sp, recompute=recompute,
        flash_attention=a.flash_attention,
    )  # fmt: skip
    in_flight = min(pp, micro_batches) if pp > 1 else 1
    logits = TRAINING_LOGIT_BYTES * seq * micro_batch * arch.vocab_size / tp
    # Backward with full recompute rebuilds one layer at a time: its full activations are live on top of the stored
    # inputs. QLoRA dequantises one NF4 matrix to bf16 inside each linear, one at a time.
    layer_work = 0.0
    if recompute == "full":
        layer_work += memory.training_activation_bytes_per_layer(
            seq_len=seq, micro_batch=micro_batch, hidden_size=arch.hidden_size,
            attention_heads=arch.attention_heads, ffn_size=arch.ffn_size * arch.experts_per_token,
            gated_mlp=arch.gated_mlp, tp=tp, sequence_parallel=sp, recompute="none",
            flash_attention=a.flash_attention,
        )  # fmt: skip
    if method == "qlora":
        layer_work += largest_matrix_params(arch, tp) * 2.0
    # The logits are consumed by the loss and LM-head backward before the first layer's backward starts (autograd
    # frees a node's saved tensors once it has run; torchtune recipes ``del logits`` before ``loss.backward()``
    # because they "peak backward memory"), so the peak is the stored inputs plus the larger of the two, not both.
    stored = layers * per_layer
    offloaded_activations = 0.0
    if plan.has("activation_offload"):
        offloaded_activations = stored
        stored = optimizer_memory.offloaded_activation_bytes(per_layer, layers)
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
        plan=plan, paged_spill_bytes=spilled, offloaded_params=offloaded_params,
        offloaded_activation_bytes=offloaded_activations,
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
    memory_plan: MemoryPlan = PLAIN,
) -> TrainingFit:
    """The part of :func:`estimate_training` before timing anything: rules, batch and memory.

    Its ``why_not`` is a prefix of ``estimate_training(...).why_not`` (reasons found later, such as a
    GPU without tensor throughput for the precision, come after). Cheaper when only the fit matters;
    pass it to :func:`estimate_training` (same arguments) to finish the estimate without redoing it.
    """
    return _memory_phase(
        arch, gpu, workload=workload, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, recompute=recompute,
        micro_batch=micro_batch, nodes_gpus_per_node=nodes_gpus_per_node, assumptions=assumptions,
        memory_plan=memory_plan,
    )  # fmt: skip


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
    fit: TrainingFit | None = None,
    memory_plan: MemoryPlan = PLAIN,
) -> TrainingEstimate:
    """Memory, step time, throughput and time to train of ``tp x pp x dp`` GPUs of one type.

    ``nodes_gpus_per_node`` is the server size: collectives among more GPUs than that cross the network.
    Infeasible configurations come back with ``feasible=False`` and reason records in ``why_not``, numbers filled in.
    ``fit``: :func:`training_fit` of the same arguments, already computed. ``memory_plan``: the memory
    options it runs with (:mod:`clusterplan.physics.optimizer_memory`); their PCIe time is in the step.
    """
    a = assumptions
    cls = gpu.gpu_class
    ph = fit or _memory_phase(
        arch, gpu, workload=workload, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, recompute=recompute,
        micro_batch=micro_batch, nodes_gpus_per_node=nodes_gpus_per_node, assumptions=assumptions,
        memory_plan=memory_plan,
    )  # fmt: skip
    reasons, notes, mem = list(ph.why_not), list(ph.notes), ph.mem
    method, rank, precision = ph.method, ph.rank, workload.precision
    gpus, node, seq, micro_batch = ph.gpus, ph.node, ph.seq, ph.micro_batch
    micro_batches, tokens_per_step = ph.micro_batches, ph.tokens_per_step
    layers, layer_p, trainable, gathered_bytes, sp = ph.layers, ph.layer_p, ph.trainable, ph.gathered_bytes, ph.sp
    w_b, g_b, o_b = ph.w_b, ph.g_b, ph.o_b

    # Compute.
    cprec = _compute_precision(gpu, precision)
    peak = peak_tflops(gpu, cprec)
    clock = a.sustained_clock_fraction.of(cls)
    rate = peak * 1e12 * a.training_mfu.of(cls) * clock * a.compute_fraction(gpu.architecture, cprec)
    if rate <= 0:
        reasons.append(NoTensorThroughput(gpu=short_name(gpu), precision=cprec))
        rate = 1e9
    if clock < 1.0:
        notes.append(f"{cls} GPU: compute derated to {clock:.0%} for sustained clocks")
    hw_flops = hardware_flops_per_token(
        arch, seq, recompute=recompute, method=method, lora_rank=rank or 16, flash_attention=a.flash_attention
    )
    useful_flops = model_flops_per_token(arch, seq, method=method, lora_rank=rank or 16)
    stage_fraction = layers / arch.layers
    bw = gpu.bandwidth_gb_per_s * BYTES_PER_GB * a.memory_bandwidth_efficiency.of(cls)
    t_micro = hw_flops * micro_batch * seq * stage_fraction / tp / rate
    if method == "qlora":
        passes = 3 if recompute == "full" else 2
        t_micro += passes * layers * layer_p * DEQUANT_BYTES_PER_PARAM / bw
    slots = micro_batches + pp - 1
    compute_time = slots * t_micro
    bubble = pipeline_bubble_fraction(pp, micro_batches)

    # Communication.
    eff = a.link_efficiency
    tp_link = link_for_group(gpu, group_size=tp, spans_nodes=tp > node, assumptions=a)
    replica = tp * pp
    pp_link = link_for_group(gpu, group_size=replica if pp > 1 else 1, spans_nodes=replica > node, assumptions=a)
    # A data-parallel group is every tp-th GPU of a tp x dp block (Megatron rank order tp, dp, pp): it leaves
    # the node only when tp x dp does, and then has min(dp, node / tp) members on each node (one NIC each).
    dp_members_per_node = max(1, min(dp, node // tp)) if tp <= node else 1
    dp_link = link_for_group(
        gpu, group_size=dp, spans_nodes=tp * dp > node, assumptions=a, members_per_node=dp_members_per_node
    )
    act_msg = micro_batch * seq * arch.hidden_size * ACTIVATION_BYTES
    tp_per_layer = 6 if recompute == "full" else 4
    # TP stays inside a node: NCCL's protocol latencies apply (comm.nccl_allreduce_s), as in serving.
    tp_micro = layers * tp_per_layer * nccl_allreduce_s(act_msg, tp, tp_link, eff) * (1.0 - a.tp_comm_overlap)
    pp_comm = 2 * slots * p2p_s(act_msg / tp, pp_link, eff) if pp > 1 else 0.0
    grad_bytes = trainable * GRAD_BYTES
    if dp <= 1:
        dp_comm = 0.0
    elif zero_stage == 0:
        dp_comm = ring_allreduce_s(grad_bytes, dp, dp_link, eff)
    elif zero_stage == 1:
        dp_comm = ring_allgather_s(grad_bytes, dp, dp_link, eff) + ring_allgather_s(trainable * w_b, dp, dp_link, eff)
    elif zero_stage == 2:
        dp_comm = micro_batches * ring_allgather_s(grad_bytes, dp, dp_link, eff)
        dp_comm += ring_allgather_s(trainable * w_b, dp, dp_link, eff)
    else:
        gathers = 3 if recompute == "full" else 2
        dp_comm = micro_batches * (
            gathers * ring_allgather_s(gathered_bytes, dp, dp_link, eff)
            + ring_allgather_s(grad_bytes, dp, dp_link, eff)
        )
    dp_exposed = dp_comm * (1.0 - a.dp_comm_overlap)
    exposed_comm = slots * tp_micro + pp_comm + dp_exposed

    # Optimizer update streams its shard of state once (read and write), memory-bound.
    shard = trainable / (dp if zero_stage >= 1 else 1)
    optimizer_s = shard * (2 * o_b + g_b + 2 * w_b) / bw

    # Memory options' PCIe traffic (physics/optimizer_memory.py): exposed host transfers per step.
    pcie = optimizer_memory.pcie_one_way_bytes_per_s(gpu.pcie_bandwidth_gb_per_s, eff)
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
        notes.append(f"pipeline bubble {bubble:.0%} with {micro_batches} micro-batches over {pp} stages")
    if sp:
        notes.append("sequence parallelism assumed with tensor parallelism")
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
        micro_batch=micro_batch,
        gpus=gpus,
        memory=mem,
        flops_per_token=hw_flops,
        step_time_s=step,
        compute_time_s=compute_time,
        exposed_comm_time_s=exposed_comm,
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
