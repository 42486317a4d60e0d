"""Serving speed of one replica (tp x pp GPUs): FLOP counts, prefill, and the replica's step table.

Bytes at ``bandwidth x mem_eff`` and FLOPs at ``peak x compute_eff x clock_fraction``. :func:`estimate_serving` reads
the catalog once and tabulates a decode step's costs (:class:`clusterplan.physics.types.DecodeStepModel`), which
:mod:`clusterplan.physics.step` evaluates at any batch: a roofline per kind of kernel (LLM-Viewer
``roofline_model.py``; llm-analysis) plus exposed communication, the TP all-reduces timed by NCCL's own cost model
(:func:`clusterplan.physics.comm.nccl_allreduce_s`). A prompt's pass adds its weight stream and FLOPs (Calculon's
``no_overlap`` mode, which the prefill measurements need); prefill runs ``2·N·s + 2·l·s²·d_attn`` FLOPs (causal
attention) and streams the weights once per chunk. Continuous batching with chunked prefill (vLLM, Sarathi-Serve
arXiv:2403.02310): at saturation the replica spends a share of its time on prefill, which stretches the decode steps
of the running sequences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.physics import linear_attention, memory, moe, params
from clusterplan.physics.comm import Link, link_for_group, nccl_allreduce_s, nccl_allreduce_terms, p2p_s
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.memo import HeldMemo
from clusterplan.physics.memory import max_batch_by_memory
from clusterplan.physics.reasons import KvCacheDoesNotFit, NoTensorThroughput, Reason, WeightsDoNotFit
from clusterplan.physics.rules import (
    compute_precision_for_weights,
    fp4_format,
    half_precision,
    serving_notes,
    serving_rule_reasons,
    short_name,
    supports_precision,
)
from clusterplan.physics.step import (
    all_to_all_s,
    decode_bound,
    decode_step_s,
    prefill_compute_s,
    saturated_rates,
    speculative_step_model,
)
from clusterplan.physics.types import Bound, DecodeStepModel, MemoryBreakdown, ServingEstimate
from clusterplan.units import BYTES_PER_GB

ACTIVATION_BYTES = 2.0  # 16-bit hidden states on the wire (TP all-reduce, PP send)

__all__ = ["RequestShape", "estimate_serving", "max_batch_by_memory"]


# ------------------------------------------------------------------------------------------------
# FLOP counts
# ------------------------------------------------------------------------------------------------


def attention_width(arch: ModelArchitecture) -> float:
    """``d_attn``: ``4·d_attn`` FLOPs per (query, key) pair per layer in the multi-head form.

    ``heads x head_dim`` (the query width; = hidden size for most models). MLA computed as multi-head attention
    (training, and prefill: SGLang ``models/deepseek_v2.py`` runs a prefill without cached prefix as
    ``AttnForwardMethod.MHA``; DeepSeek-V2 §2.1.2): ``heads x (d_qk + d_v) / 2`` with
    ``d_qk = qk_nope_head_dim + qk_rope_head_dim``, since QK^T is ``2·d_qk`` and AV ``2·d_v`` FLOPs per head and pair.
    """
    if arch.kv_lora_rank is not None:
        qk = (arch.qk_nope_head_dim or 0) + (arch.qk_rope_head_dim or 0)
        return arch.attention_heads * (qk + (arch.v_head_dim or 0)) / 2
    return arch.attention_heads * arch.head_dim_eff


def decode_attention_width(arch: ModelArchitecture) -> float:
    """``d_attn`` of a decode step: ``4·d_attn`` FLOPs per cached token per layer.

    MLA decodes in the absorbed form (DeepSeek-V2 §2.1.2 "absorb W^UK into W^Q and W^UV into W^O"; SGLang
    ``models/deepseek_v2.py::forward_absorb_core``, FlashMLA): every head scores against the whole latent
    ``kv_lora_rank + qk_rope_head_dim`` and sums values of width ``kv_lora_rank``, so
    ``4·d_attn = 2·heads·(2·kv_lora_rank + qk_rope_head_dim)`` (DeepSeek-V3: 278,528 FLOPs per token per layer).
    The absorbed projections are the up-projection's weights applied per token, counted in ``2·N``.
    """
    if arch.kv_lora_rank is not None:
        return arch.attention_heads * (2 * arch.kv_lora_rank + (arch.qk_rope_head_dim or 0)) / 2
    return attention_width(arch)


def causal_pairs(tokens: float, window: float | None, kind: str = "sliding") -> float:
    """(query, key) pairs of causal attention over ``tokens``: ``s²/2``; a sliding window ``w`` caps each query's
    keys at ``w`` (``w²/2 + (s - w)·w`` past it); chunked attention attends within ``w``-token chunks
    (``n·w²/2 + r²/2``; Llama 4 ``attention_chunk_size``)."""
    if window is None or tokens <= window:
        return tokens * tokens / 2
    if kind == "chunked":
        chunks = math.floor(tokens / window)
        rest = tokens - chunks * window
        return chunks * window * window / 2 + rest * rest / 2
    return window * window / 2 + (tokens - window) * window


def prefill_attention_flops(arch: ModelArchitecture, tokens: float, *, cached_tokens: float = 0.0) -> float:
    """The causal attention part of :func:`prefill_flops`: ``4·d_attn`` per (query, key) pair of the new tokens."""
    local = arch.local_layer_count
    full = arch.softmax_layer_count - local
    end = cached_tokens + tokens
    pairs = full * (causal_pairs(end, None) - causal_pairs(cached_tokens, None))
    if local:
        window, kind = arch.attention_window, arch.attention_window_kind
        pairs += local * (causal_pairs(end, window, kind) - causal_pairs(cached_tokens, window, kind))
    # Gated DeltaNet layers: linear in the new tokens, whatever the cache (physics/linear_attention.py)
    recurrent = tokens * linear_attention.flops_per_token(arch, arch.linear_layer_count, prefill=True)
    return 4.0 * pairs * attention_width(arch) + recurrent


def attention_precision(gpu: GpuSpec, kv_precision: str) -> str:
    """Precision the attention kernels multiply in: the KV cache's FP8 where FP8 runs natively, else 16-bit.

    FP4 quantises the linear layers only (ModelOpt NVFP4 checkpoints list ``kv_cache_quant_algo: FP8`` beside
    them); TensorRT-LLM's FMHA/XQA kernels read an FP8 cache with FP8 MMA, a 16-bit one with 16-bit MMA.
    """
    return "fp8" if kv_precision == "fp8" and supports_precision(gpu, "fp8") else half_precision(gpu)


def prefill_flops(arch: ModelArchitecture, tokens: float, *, cached_tokens: float = 0.0) -> float:
    """Forward FLOPs of ``s`` prompt tokens after ``p`` cached ones: ``2·N_active·s + 4·d_attn·pairs + 2·V·h``.

    Matmuls ``2·N`` per token (Kaplan et al. 2020, arXiv:2001.08361 §2.1) over non-embedding active
    parameters; causal attention ``QK^T`` and ``AV`` at ``4·d_attn`` FLOPs per (query, key) pair, counting the
    pairs whose query is a new token: ``pairs(p + s) - pairs(p)`` per layer (``s²/2 + s·p`` on a full layer;
    local layers: :func:`causal_pairs` within their window; MLA in the multi-head form, :func:`attention_width`);
    the LM head only for the last token (vLLM computes logits for sampled tokens). ``p``: a prefix-cache hit.
    """
    n = params.non_embedding_params(arch, active=True)
    attention = prefill_attention_flops(arch, tokens, cached_tokens=cached_tokens)
    return 2.0 * n * tokens + attention + 2.0 * arch.vocab_size * arch.hidden_size


def decode_local_tokens(arch: ModelArchitecture, input_tokens: float, output_tokens: float) -> float | None:
    """Mean keys a local layer attends over while a request decodes positions ``[input, input + output)``: the
    span's (query, key) pairs over its queries, ``(pairs(input + output) - pairs(input)) / output``
    (:func:`causal_pairs`). A sliding window attends ``min(p, w)``; a chunked layer only its own chunk so far,
    ``p mod w`` (Llama 4 ``attention_chunk_size``): decoding positions 8,192-9,216 with 8,192-token chunks attends
    512 keys on average, not 8,192. None for a model without local layers."""
    if arch.attention_window is None:
        return None
    w, kind, out = float(arch.attention_window), arch.attention_window_kind, max(output_tokens, 1.0)
    return (causal_pairs(input_tokens + out, w, kind) - causal_pairs(input_tokens, w, kind)) / out


def decode_attention_flops(
    arch: ModelArchitecture, context_tokens: float, *, pp: int = 1, local_tokens: float | None = None
) -> float:
    """Attention FLOPs of one decoded token over ``c`` cached tokens on the heaviest stage: ``4·l·c·d_attn``.

    Local layers attend over at most their window (``local_tokens``: a decode span's mean,
    :func:`decode_local_tokens`); MLA at :func:`decode_attention_width`.
    """
    width = decode_attention_width(arch)
    if arch.linear_layer_count:  # full layers attend over the context, linear ones update a fixed state
        return max(
            4.0 * full * context_tokens * width + linear_attention.flops_per_token(arch, n, prefill=False)
            for full, _, n in params.stage_layer_kinds(arch, pp)
        )
    if arch.attention_window is None:
        return 4.0 * memory.layers_per_stage(arch.layers, pp) * context_tokens * width
    kept = min(context_tokens, float(arch.attention_window)) if local_tokens is None else local_tokens
    keys = max(full * context_tokens + local * kept for full, local in params.stage_attention_layers(arch, pp))
    return 4.0 * keys * width


def mla_absorbed_flops_per_token(arch: ModelArchitecture, layers: int) -> float:
    """FLOPs of MLA's absorbed up-projections for one decoded token over ``layers``: ``2·a·r·(d_nope + d_v)`` each.

    The decode step multiplies every head's query by its W_UK slice (``d_nope x r``) and its latent output by
    W_UV (``r x d_v``), one small GEMM per head (TensorRT-LLM's ``mla_gen_pre`` / ``mla_gen_post`` batched GEMMs;
    DeepSeek-V2 §2.1.2). They are ``kv_b_proj``'s weights, already inside ``2·N``; 0 without MLA.
    """
    if arch.kv_lora_rank is None:
        return 0.0
    width = (arch.qk_nope_head_dim or 0) + (arch.v_head_dim or 0)
    return 2.0 * layers * arch.attention_heads * arch.kv_lora_rank * width


def decode_flops_per_token(arch: ModelArchitecture, context_tokens: float) -> float:
    """FLOPs of one decoded token attending over ``c`` tokens: ``2·N_active + 4·l·c·d_attn + 2·V·h``."""
    n = params.non_embedding_params(arch, active=True)
    return 2.0 * n + decode_attention_flops(arch, context_tokens) + 2.0 * arch.vocab_size * arch.hidden_size


def peak_tflops(gpu: GpuSpec, precision: str) -> float:
    """Dense tensor throughput at ``precision`` (TFLOPS); falls back to the other 16-bit format, then fp32.

    A GPU without an FP4 (or FP8) figure is never credited it: ``fp4`` falls back to its 16-bit rate.
    """
    for p in (precision, "fp16" if precision == "bf16" else "bf16", "fp32"):
        value = gpu.tflops(p)  # type: ignore[arg-type]
        if value:
            return value
    return 0.0


# ------------------------------------------------------------------------------------------------
# The estimate
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestShape:
    """One request as a replica sees it: prompt and output tokens, and the context its KV cache reserves.

    ``context_tokens`` sizes the KV cache reserved per sequence (the workload's max context); decode attends over
    the mean context ``input + output/2``.
    """

    input_tokens: float
    output_tokens: float
    context_tokens: float


@dataclass(frozen=True, slots=True)
class _MemoryFit:
    """The most loaded GPU's memory at the batch, the largest batch that fits, and why it does not (or None)."""

    memory: MemoryBreakdown
    max_batch: int
    reason: Reason | None


@dataclass(frozen=True, slots=True)
class _Rates:
    """Achieved rates of one GPU: bytes/s of its memory, FLOP/s of each kind of kernel."""

    bandwidth_bytes_per_s: float
    compute_precision: str  # the linear layers' matmul precision
    linear_flops_per_s: float
    prefill_attention_flops_per_s: float
    decode_attention_flops_per_s: float
    head_flops_per_s: float
    expert_flops_per_s: float
    # the GPU has no tensor rate at the compute precision (the rates are then finite stand-ins)
    no_tensor: Reason | None


@dataclass(frozen=True, slots=True)
class _MoeKernels:
    """An MoE model's expert kernels on this GPU and engine: their efficiencies, routing and dispatch terms."""

    is_moe: bool
    experts_per_token: int
    gemm_efficiency: float
    weight_efficiency: float
    load_skew: float
    routing_curve: tuple[tuple[float, float], ...]
    routed_token_s: float  # per MoE layer and token of the batch, on the average rank
    gathered_token_s: float  # per MoE layer and token the rank's MoE receives
    layer_s: float  # each MoE layer's kernels, once a forward
    row_tile_max: int
    dispatch_bytes_per_token: float
    all_to_all_latency_s: float
    all_to_all_s_per_byte: float
    all_to_all_link: Link


@dataclass(frozen=True, slots=True)
class _Stage:
    """Per-GPU bytes and FLOPs of the most loaded stage (per sequence: the stage's average GPU)."""

    layers: int
    moe_layers: int
    dense_bytes: float
    expert_bytes: float
    head_bytes: float
    dense_flops_per_seq: float
    expert_flops_per_seq: float
    head_flops_per_seq: float
    attention_flops_per_seq: float
    slow_bmm_s: float  # MLA's absorbed projections at their own batched kernel's rate, per sequence
    kv_bytes_per_seq: float
    mean_context_tokens: float


@dataclass(frozen=True, slots=True)
class _Links:
    """The links a replica's collectives cross: its TP group's, its pipeline hops', and their NCCL terms."""

    tp: Link
    pp: Link
    efficiency: float
    hidden_bytes: float  # one token's hidden state on the wire
    allreduce_terms: list[tuple[float, float]]  # (latency s, s per byte) per NCCL protocol


@dataclass(frozen=True, slots=True)
class _Parts:
    """What a replica's decode step and a prompt's pass are priced from."""

    rates: _Rates
    kernels: _MoeKernels
    stage: _Stage
    links: _Links


@dataclass(frozen=True, slots=True)
class _Prefill:
    """One prompt's pass: its unloaded time, the replica time it takes beside running steps and alone, its chunks."""

    prefill_s: float
    busy_s: float
    alone_busy_s: float
    chunks: int


def _memory_fit(
    arch: ModelArchitecture, gpu: GpuSpec, layout: Layout, context_tokens: float, batch: int, a: Assumptions
) -> _MemoryFit:
    """Memory at ``batch`` and the largest batch that fits (:mod:`clusterplan.physics.moe`), with the reason
    record when the weights or the batch's KV cache do not fit."""
    mem = moe.serving_memory(arch, gpu, layout, batch=batch, context_tokens=context_tokens, assumptions=a)
    max_batch = moe.max_batch_by_memory(arch, gpu, layout, context_tokens=context_tokens, assumptions=a)
    reason: Reason | None = None
    if max_batch == 0:
        fixed = mem.weights_gib + mem.runtime_overhead_gib + mem.headroom_gib + mem.activations_gib
        reason = WeightsDoNotFit(
            gpu=short_name(gpu), model=arch.name, quant=layout.quant, tp=layout.tp, pp=layout.pp,
            weights_gib=mem.weights_gib, fixed_gib=fixed, headroom_fraction=a.serving_headroom_fraction,
            capacity_gib=gpu.memory_gib, context_tokens=context_tokens,
        )  # fmt: skip
    elif batch > max_batch:
        reason = KvCacheDoesNotFit(
            gpu=short_name(gpu), batch=batch, context_tokens=context_tokens, kv_cache_gib=mem.kv_cache_gib,
            max_batch=max_batch,
        )  # fmt: skip
    return _MemoryFit(mem, max_batch, reason)


def _rate_at(gpu: GpuSpec, precision: str, a: Assumptions) -> float:
    """Achieved FLOP/s at ``precision``: dense peak x the class's compute efficiency x clocks x the architecture's share."""
    cls = gpu.gpu_class
    return (
        peak_tflops(gpu, precision)
        * 1e12
        * a.engine_factor("compute_efficiency", gpu)
        * a.sustained_clock_fraction.of(cls)
        * a.compute_fraction(gpu.architecture, precision)
    )


# _rates per (MLA or not, GPU row, weight and KV precision, assumptions): every TP and PP degree of a precision on one
# GPU type reads the same rates, and a layout's reasons read them again.
_RATES: HeldMemo[_Rates] = HeldMemo()


def _rates(arch: ModelArchitecture, gpu: GpuSpec, layout: Layout, a: Assumptions) -> _Rates:
    """Rates of this GPU class: bytes at ``bandwidth x mem_eff``, FLOPs at ``peak x compute_eff x clock_fraction``
    at each kernel kind's precision (of the model, only whether its attention is MLA matters)."""
    key = (arch.is_mla, id(gpu), layout.quant, layout.kv_precision, id(a))
    return _RATES.get_or_make(key, (gpu, a), _rates_of, arch.is_mla, gpu, layout.quant, layout.kv_precision, a)


def _rates_of(is_mla: bool, gpu: GpuSpec, quant: str, kv_precision: str, a: Assumptions) -> _Rates:
    """:func:`_rates`, computed."""
    bw = gpu.bandwidth_gb_per_s * BYTES_PER_GB * a.engine_factor("memory_bandwidth_efficiency", gpu)
    cprec = compute_precision_for_weights(gpu, quant, a.fp4_activations)
    flops_rate = _rate_at(gpu, cprec, a)
    no_tensor: Reason | None = None
    if flops_rate <= 0:
        no_tensor = NoTensorThroughput(gpu=short_name(gpu), precision=cprec)
        flops_rate = 1e9  # keep the numbers finite; the estimate is infeasible anyway
    aprec = attention_precision(gpu, kv_precision)

    def attention_rate_at(precision: str) -> float:
        rate = _rate_at(gpu, precision, a)
        # never above the linear layers' rate: a weight-only int4/int8 model keeps the 16-bit rate it had
        return min(rate, flops_rate) if rate > 0 else flops_rate

    attention_rate = decode_attention_rate = attention_rate_at(aprec)
    if is_mla:  # MLA's kernels multiply at their own precision on some architectures
        prefill_p, decode_p = (a.mla_precision(gpu.architecture, phase, aprec) for phase in ("prefill", "decode"))
        attention_rate = attention_rate if prefill_p == aprec else attention_rate_at(prefill_p)
        decode_attention_rate = decode_attention_rate if decode_p == aprec else attention_rate_at(decode_p)
    return _Rates(
        bandwidth_bytes_per_s=bw,
        compute_precision=cprec,
        linear_flops_per_s=flops_rate,
        prefill_attention_flops_per_s=attention_rate,
        decode_attention_flops_per_s=decode_attention_rate,
        # the LM head stays 16-bit (EMBEDDING_BYTES_PER_PARAM) and multiplies at the 16-bit rate, never above the
        # linear layers': ModelOpt's FP8 and NVFP4 configs leave it unquantised (modelopt/torch/quantization/config.py
        # ``_default_disabled_quantizer_cfg``: ``"*lm_head*": {"enable": False}``)
        head_flops_per_s=attention_rate_at("bf16"),
        # FP8 block scales cost the expert GEMMs compute, not weight bytes, on Hopper (moe_block_scale_compute_fraction)
        expert_flops_per_s=flops_rate * a.moe_compute_fraction(gpu.architecture, quant),
        no_tensor=no_tensor,
    )


def _rate_notes(arch: ModelArchitecture, gpu: GpuSpec, layout: Layout, a: Assumptions) -> list[str]:
    """The derates and replications the rates and the layout apply (sustained clocks, KV heads replicated)."""
    notes = []
    clock = a.sustained_clock_fraction.of(gpu.gpu_class)
    if clock < 1.0:
        notes.append(f"{gpu.gpu_class} GPU: compute derated to {clock:.0%} for sustained clocks")
    if moe.stage_layout(layout).attention_tp > arch.kv_heads:
        notes.append(f"tp={layout.tp} exceeds {arch.kv_heads} KV heads: KV cache and K/V projections are replicated")
    return notes


def _moe_kernels(arch: ModelArchitecture, gpu: GpuSpec, layout: Layout, a: Assumptions) -> _MoeKernels:
    """An MoE model's expert-kernel terms (all neutral for a dense model): GEMM and weight-stream efficiency,
    routing imbalance, the kernels' per-token and per-layer times, and the EP dispatch's all-to-all terms."""
    quant, tp, ep, attention_dp = layout.quant, layout.tp, layout.ep, layout.attention_dp
    cls = gpu.gpu_class
    is_moe = moe.is_moe(arch)
    # grouped-GEMM share of the dense roofline: the engine's (Hopper-fitted) times the architecture's at the weights'
    # precision (aiconfigurator-core 0.12.0 moe_perf tables; factors.py)
    gemm_eff = a.moe_gemm_efficiency.of(cls) * a.moe_gemm_fraction(gpu.architecture, quant) if is_moe else 1.0
    # ... and of the weight stream, where the kernel's differs (a dequantising MXFP4 kernel on Hopper)
    weight_eff = a.moe_gemm_efficiency.of(cls) * a.moe_weight_fraction(gpu.architecture, quant) if is_moe else 1.0
    # unbalanced routing: the engine's kernel ratio by tokens, else a static skew across EP ranks (physics/moe.py)
    expert_skew, routing_curve = moe.serving_routing(a, gpu, quant, ep) if is_moe else (1.0, ())
    k = moe.experts_per_token(arch)
    a2a_latency, a2a_per_byte, a2a_link = moe.all_to_all_link_terms(gpu, ep, a)
    spec = a.engine_spec
    dispatch = moe.dispatch_method(gpu, spec.moe_dispatch, spec.moe_dispatch_rack) if attention_dp else "all_to_all"
    # the MoE kernel's time per routed token beside its FLOPs (engines.yaml moe_routed_token_s): on the tokens routed
    # to the rank, and routing every token its MoE receives: all of the step's under attention TP or an allgather
    # dispatch, its own 1/tp under an all-to-all
    rank_token_s, batch_token_s = a.moe_token_costs(gpu.architecture, quant) if is_moe else (0.0, 0.0)
    layer_s = a.moe_layer_s(gpu.architecture, quant) if is_moe else 0.0  # each MoE layer's kernels, once a forward
    received_share = 1.0 / tp if attention_dp and dispatch == "all_to_all" else 1.0
    return _MoeKernels(
        is_moe=is_moe,
        experts_per_token=k,
        gemm_efficiency=gemm_eff,
        weight_efficiency=weight_eff,
        load_skew=expert_skew,
        routing_curve=routing_curve,
        routed_token_s=k * rank_token_s / max(ep, 1),  # per MoE layer and token of the batch, on the average rank
        gathered_token_s=k * batch_token_s * received_share,
        layer_s=layer_s,
        row_tile_max=a.moe_row_tile_max(gpu.architecture, quant) if is_moe else 0,
        dispatch_bytes_per_token=moe.dispatch_bytes_per_token(arch, ep, dispatch),
        all_to_all_latency_s=a2a_latency,
        all_to_all_s_per_byte=a2a_per_byte,
        all_to_all_link=a2a_link,
    )


def _stage(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    layout: Layout,
    shape: RequestShape,
    a: Assumptions,
    rates: _Rates,
    kernels: _MoeKernels,
) -> _Stage:
    """Per-GPU weights, FLOPs and KV bytes of the most loaded stage (per sequence: the stage's average GPU)."""
    tp, pp, quant, attention_dp = layout.tp, layout.pp, layout.quant, layout.attention_dp
    split = moe.stage_layout(layout)
    is_moe, k = kernels.is_moe, kernels.experts_per_token
    # MLA's absorbed per-head projections under FP8 block scales (mla_block_scale_bmm_fraction): off the FP8 rate
    bmm_fraction = a.mla_bmm_fraction(gpu.architecture, quant)
    stage = memory.stage_params_per_gpu(arch, tp=tp, pp=pp)  # dense layers, shared experts, MLA (params.py)
    layers, moe_layers = stage.layers, (stage.moe_layers if is_moe else 0)
    bpp = memory.weight_bytes_per_param(quant, int4_group_size=a.int4_group_size, fp4_format=fp4_format(gpu))
    head_params = arch.vocab_size * arch.hidden_size / tp
    mean_context = shape.input_tokens + shape.output_tokens / 2.0
    if is_moe:
        # Per layer on one GPU: attention split over TP, or whole under attention DP (each GPU its own sequences).
        attention_params = moe.attention_params_per_gpu(arch, split)
        attention_params_seq = memory.attention_params_per_gpu(arch, 1) / tp if attention_dp else attention_params
        # Dense-layer MLPs and shared experts: streamed whole on every GPU under attention DP (moe.dense_mlp_tp),
        # computed for the GPU's own 1/tp of the sequences either way.
        mlp_params = (layers - moe_layers) * moe.dense_mlp_params_per_layer(arch)
        mlp_params += moe_layers * moe.shared_expert_params(arch)
        router_params = moe_layers * params.router_params_per_layer(arch)
        expert_params = moe.expert_params(arch) / split.expert_tp  # one routed expert's share on one GPU
        dense_bytes = (layers * attention_params + router_params + mlp_params / split.dense_mlp_tp) * bpp
        expert_bytes = moe_layers * expert_params * bpp
        dense_flops_seq = 2.0 * (layers * attention_params_seq + mlp_params / tp)
        expert_flops_seq = 2.0 * moe_layers * k * moe.expert_params(arch) / tp
    else:  # a dense MLP shares the attention projections' intensity: one kind of GEMM with them (matmuls_s)
        dense_bytes = (stage.always + stage.per_expert) * bpp
        expert_bytes = 0.0
        dense_flops_seq = 2.0 * stage.active
        expert_flops_seq = 0.0
    # MLA's absorbed projections at their own batched kernel's rate, beside the latent attention they wrap (per GPU:
    # heads or sequences / tp), when that kernel is slower than the dense GEMMs'
    slow_bmm_s = 0.0
    if bmm_fraction < 1.0:
        absorbed_flops_seq = mla_absorbed_flops_per_token(arch, layers) / tp
        dense_flops_seq -= absorbed_flops_seq
        slow_bmm_s = absorbed_flops_seq / (rates.linear_flops_per_s * bmm_fraction)
    local_read = decode_local_tokens(arch, shape.input_tokens, shape.output_tokens)  # a local layer's mean keys
    kv_seq_bytes = moe.kv_bytes_per_sequence_held(
        arch, split, mean_context, pp=pp, kv_precision=layout.kv_precision, local_tokens=local_read
    )
    kv_seq_bytes /= tp if attention_dp else 1  # the average GPU holds 1/tp of the sequences under attention DP
    if not a.gqa_shared_kv_reads and not arch.is_mla:  # every query head streams its KV head (TensorRT-LLM <= 0.6)
        kv_seq_bytes *= (arch.attention_heads / split.attention_tp) / memory.kv_heads_per_gpu(
            arch.kv_heads, split.attention_tp
        )
    return _Stage(
        layers=layers,
        moe_layers=moe_layers,
        dense_bytes=dense_bytes,
        expert_bytes=expert_bytes,
        head_bytes=head_params * memory.EMBEDDING_BYTES_PER_PARAM,
        dense_flops_per_seq=dense_flops_seq,
        expert_flops_per_seq=expert_flops_seq,
        head_flops_per_seq=2.0 * head_params,
        attention_flops_per_seq=decode_attention_flops(arch, mean_context, pp=pp, local_tokens=local_read) / tp,
        slow_bmm_s=slow_bmm_s,
        kv_bytes_per_seq=kv_seq_bytes,
        mean_context_tokens=mean_context,
    )


def _links(arch: ModelArchitecture, gpu: GpuSpec, layout: Layout, a: Assumptions) -> _Links:
    """The TP group's link (inside the node) and the pipeline hops' (across nodes when the replica spans them)."""
    tp, pp = layout.tp, layout.pp
    replica_gpus = tp * pp
    spans_nodes = replica_gpus > gpu.max_gpus_per_node
    tp_link = link_for_group(gpu, group_size=tp, spans_nodes=False, assumptions=a)
    pp_link = link_for_group(gpu, group_size=replica_gpus if pp > 1 else 1, spans_nodes=spans_nodes, assumptions=a)
    eff = a.link_efficiency
    return _Links(
        tp=tp_link,
        pp=pp_link,
        efficiency=eff,
        hidden_bytes=arch.hidden_size * ACTIVATION_BYTES,
        allreduce_terms=nccl_allreduce_terms(tp, tp_link, eff),  # (latency s, s per byte) per NCCL protocol
    )


def _step_model(
    arch: ModelArchitecture, gpu: GpuSpec, layout: Layout, a: Assumptions, parts: _Parts
) -> DecodeStepModel:
    """The replica's decode step tabulated (:class:`clusterplan.physics.types.DecodeStepModel`): weight, KV and
    FLOP times of the stage, its collectives, the engine's fixed and host costs, and the MoE kernels' terms."""
    tp, pp, ep, attention_dp = layout.tp, layout.pp, layout.ep, layout.attention_dp
    r, kern, s, links = parts.rates, parts.kernels, parts.stage, parts.links
    bw = r.bandwidth_bytes_per_s
    hidden_bytes = links.hidden_bytes
    return DecodeStepModel(
        pp=pp,
        dense_weights_s=s.dense_bytes / bw,
        expert_weights_s=s.expert_bytes / bw,
        moe_experts=arch.moe_experts,
        experts_per_token=arch.experts_per_token,
        kv_per_seq_s=s.kv_bytes_per_seq / bw,
        compute_per_seq_s=s.dense_flops_per_seq / r.linear_flops_per_s,
        head_weights_s=s.head_bytes / bw,
        # a decode GEMM multiplies the sequences of one GPU: all under attention TP, its 1/tp under attention DP
        linear_knee_seqs=tuple(
            m0 * (tp if attention_dp else 1) for m0 in a.decode_gemm_knees(gpu.architecture, r.compute_precision)
        ),
        head_compute_per_seq_s=s.head_flops_per_seq / r.head_flops_per_s,
        attention_compute_per_seq_s=s.attention_flops_per_seq / r.decode_attention_flops_per_s + s.slow_bmm_s,
        tp_allreduces=moe.allreduces(arch, moe.stage_layout(layout), s.layers) if tp > 1 else 0,
        tp_allreduce_latency_s=[lat for lat, _ in links.allreduce_terms],
        tp_allreduce_per_seq_s=[hidden_bytes * per_byte for _, per_byte in links.allreduce_terms],
        pp_hop_fixed_s=links.pp.latency_s if pp > 1 else 0.0,
        pp_hop_per_seq_s=(p2p_s(hidden_bytes, links.pp, links.efficiency) - links.pp.latency_s) if pp > 1 else 0.0,
        overhead_s=a.engine_factor("decode_step_overhead_s", gpu),
        host_per_seq_s=a.host_per_sequence_layer_s(gpu.host_cpu) * s.layers,  # per decoder layer the rank runs
        host_rank_share=1.0 / tp if attention_dp else 1.0,
        expert_parallel=max(ep, 1),
        expert_compute_per_seq_s=s.expert_flops_per_seq / r.expert_flops_per_s,
        moe_gemm_efficiency=kern.gemm_efficiency,
        moe_weight_efficiency=kern.weight_efficiency if kern.weight_efficiency != kern.gemm_efficiency else None,
        expert_routed_per_seq_s=s.moe_layers * kern.routed_token_s,
        expert_gathered_per_seq_s=s.moe_layers * kern.gathered_token_s,
        expert_layers_s=s.moe_layers * kern.layer_s,
        expert_row_tile_max=kern.row_tile_max,
        expert_load_skew=kern.load_skew,
        expert_routing_curve=kern.routing_curve,
        all_to_alls=2 * s.moe_layers if ep > 1 else 0,  # dispatch and combine per MoE layer
        all_to_all_latency_s=kern.all_to_all_latency_s,
        # each GPU sends its 1/tp of the tokens
        all_to_all_per_seq_s=kern.dispatch_bytes_per_token / tp * kern.all_to_all_s_per_byte,
    )


def _bound(step_model: DecodeStepModel, batch: int, max_batch: int) -> Bound:
    """The resource bounding the decode step (:func:`clusterplan.physics.step.decode_bound`), memory capacity when
    the batch is the most the KV pool holds while bandwidth binds, or more than it holds."""
    bound: Bound = decode_bound(step_model, batch)
    if bound == "memory_bandwidth" and batch >= max_batch > 0:
        bound = "memory_capacity"
    if max_batch == 0 or batch > max_batch:
        bound = "memory_capacity"
    return bound


@dataclass(frozen=True, slots=True)
class _PrefillWork:
    """A prompt's computed tokens, the engine steps they take and their compute and weight-stream times."""

    computed_tokens: float
    chunks: int
    compute_s: float  # alone: attention on its attention-TP group, experts over all tp GPUs
    split_s: float  # riding a running step: everything over the stage's tp GPUs
    weights_s: float


def _prefill_work(
    arch: ModelArchitecture, layout: Layout, input_tokens: float, a: Assumptions, parts: _Parts
) -> _PrefillWork:
    """Prefill of one request: sequential through the stages; within a stage attention on its attention-TP
    group (one GPU under attention DP), experts over all tp GPUs. A prefix-cache hit skips its share of the
    prompt (vLLM automatic prefix caching, SGLang RadixAttention): only the rest is computed."""
    tp, pp, ep = layout.tp, layout.pp, layout.ep
    r, kern, s = parts.rates, parts.kernels, parts.stage
    k = kern.experts_per_token
    cached = input_tokens * a.prefix_cache_hit_rate
    computed = max(input_tokens - cached, 1.0)
    chunks = max(1, math.ceil(computed / a.chunk_tokens))
    total_flops = prefill_flops(arch, computed, cached_tokens=cached)
    attention_flops = prefill_attention_flops(arch, computed, cached_tokens=cached)  # at the attention's rate
    all_moe_layers = moe.moe_layers(arch)  # a prompt passes every stage's
    expert_flops = 2.0 * all_moe_layers * k * moe.expert_params(arch) * computed if kern.is_moe else 0.0
    # the busiest EP rank's share, at the tokens one forward of the prompt routes (a chunk)
    imbalance = moe.load_imbalance(computed, k, ep, kern.load_skew) * moe.routing_ratio(
        kern.routing_curve, computed / chunks
    )
    dense_s = (total_flops - expert_flops - attention_flops) / r.linear_flops_per_s + (
        attention_flops / r.prefill_attention_flops_per_s
    )
    # the prompt's routed tokens in every MoE layer: the busiest rank's and the routing of all it receives
    prompt_tokens_s = computed * all_moe_layers * (kern.routed_token_s * imbalance + kern.gathered_token_s)
    experts_s = expert_flops * imbalance / (kern.gemm_efficiency * tp * r.expert_flops_per_s) + prompt_tokens_s
    # a prompt alone pays the MoE kernels' fixed time per layer in each chunk's forward; riding a running step, not
    prompt_layers_s = chunks * all_moe_layers * kern.layer_s
    prefill_compute = dense_s / moe.stage_layout(layout).attention_tp + experts_s + prompt_layers_s
    prefill_split = dense_s / tp + experts_s
    if a.speculative is not None and a.speculative.method == "draft":
        prefill_compute *= 1.0 + a.speculative.cost  # the draft model prefills the prompt too
        prefill_split *= 1.0 + a.speculative.cost
    touched_prefill = moe.experts_touched(arch.moe_experts, arch.experts_per_token, computed) / max(ep, 1)
    streamed = s.dense_bytes + s.head_bytes + s.expert_bytes * touched_prefill / kern.weight_efficiency
    return _PrefillWork(
        computed, chunks, prefill_compute, prefill_split, pp * chunks * streamed / r.bandwidth_bytes_per_s
    )


@dataclass(frozen=True, slots=True)
class _PrefillComm:
    """A prompt's collectives: alone (latency and bytes) and riding a running step (its bytes only)."""

    tp_s: float
    all_to_all_s: float
    pp_s: float
    tp_ride_s: float
    all_to_all_bytes_busy_s: float
    all_to_all_busy_s: float


def _prefill_comm(
    arch: ModelArchitecture, layout: Layout, batch: int, work: _PrefillWork, parts: _Parts
) -> _PrefillComm:
    """A prompt's TP all-reduces, EP all-to-alls and pipeline sends, per chunk, alone and riding a running step."""
    tp, pp, ep = layout.tp, layout.pp, layout.ep
    split = moe.stage_layout(layout)
    attention_tp = split.attention_tp
    kern, links = parts.kernels, parts.links
    hidden_bytes, eff = links.hidden_bytes, links.efficiency
    computed, chunks = work.computed_tokens, work.chunks
    a2a_latency, a2a_per_byte = kern.all_to_all_latency_s, kern.all_to_all_s_per_byte
    chunk_msg = computed / chunks * hidden_bytes  # each chunk all-reduces its own hidden states
    prefill_allreduce = nccl_allreduce_s(chunk_msg, tp, links.tp, eff)
    prefill_allreduces = chunks * moe.allreduces(arch, split, arch.layers)  # every layer's, once per chunk
    chunk_tokens = computed / chunks
    a2a_count = 2 * moe.moe_layers(arch) if ep > 1 else 0
    sent = kern.dispatch_bytes_per_token * chunk_tokens / attention_tp  # one request's chunk leaves its attention GPUs
    prefill_a2a = chunks * a2a_count * (a2a_latency + sent * a2a_per_byte) if a2a_count else 0.0
    # At saturation a prompt's tokens ride the running step's collectives: one forward takes every scheduled
    # token, context and generation (TensorRT-LLM ``_torch/pyexecutor/model_engine.py`` ``_prepare_tp_inputs``
    # flattens both into one ``input_ids``; vLLM's mixed batches likewise), so a request adds its bytes to the
    # step's all-reduces and dispatches, not their latency, which the decode step already pays.
    prefill_a2a_bytes_busy = chunks * a2a_count * sent / tp * attention_tp * a2a_per_byte
    step_msg = batch * attention_tp / tp * hidden_bytes  # the running step's all-reduce: its group's sequences
    ride = nccl_allreduce_s(step_msg + chunk_msg, tp, links.tp, eff) - nccl_allreduce_s(step_msg, tp, links.tp, eff)
    return _PrefillComm(
        tp_s=prefill_allreduces * prefill_allreduce,
        all_to_all_s=prefill_a2a,
        pp_s=(pp - 1) * p2p_s(computed * hidden_bytes, links.pp, eff),
        tp_ride_s=prefill_allreduces * ride,
        all_to_all_bytes_busy_s=prefill_a2a_bytes_busy,
        all_to_all_busy_s=chunks * a2a_count * a2a_latency + prefill_a2a_bytes_busy if a2a_count else 0.0,
    )


def _prefill(
    arch: ModelArchitecture,
    layout: Layout,
    shape: RequestShape,
    batch: int,
    a: Assumptions,
    parts: _Parts,
    overhead_s: float,
) -> _Prefill:
    """One prompt's pass (Calculon's ``no_overlap`` mode: its weight stream and FLOPs add), and the replica time it
    takes at saturation beside the running steps (its collectives' bytes only) and alone."""
    work = _prefill_work(arch, layout, shape.input_tokens, a, parts)
    comm = _prefill_comm(arch, layout, batch, work, parts)
    prefill = prefill_compute_s(work.weights_s, work.compute_s) + comm.tp_s + comm.all_to_all_s + comm.pp_s + overhead_s
    overlap = 1.0 - a.tp_comm_overlap
    pp = layout.pp
    busy = (work.split_s + (comm.tp_ride_s + comm.all_to_all_bytes_busy_s) * overlap) / pp
    alone_busy = (work.split_s + (comm.tp_s + comm.all_to_all_busy_s) * overlap) / pp
    return _Prefill(prefill, busy, alone_busy, work.chunks)


def _reasons(arch: ModelArchitecture, gpu: GpuSpec, layout: Layout, fit: _MemoryFit, rates: _Rates) -> list[Reason]:
    """Why a replica cannot run, in order: the hardware rules, then the memory fit, then a missing tensor rate."""
    reasons: list[Reason] = serving_rule_reasons(
        arch, gpu, layout.tp, layout.pp, layout.quant, layout.kv_precision, layout.expert_parallel_only
    )
    return reasons + [r for r in (fit.reason, rates.no_tensor) if r is not None]


def serving_reasons(
    arch: ModelArchitecture, gpu: GpuSpec, layout: Layout, shape: RequestShape, *, batch: int, assumptions: Assumptions
) -> list[Reason]:
    """:func:`estimate_serving`'s ``why_not`` at ``batch`` without the rest of the estimate (its speed, prefill and
    rates): for a layout ruled out before any of those is read (a replica that holds not one sequence)."""
    batch = max(int(batch), 1)
    fit = _memory_fit(arch, gpu, layout, shape.context_tokens, batch, assumptions)
    return _reasons(arch, gpu, layout, fit, _rates(arch, gpu, layout, assumptions))


def estimate_serving(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    layout: Layout,
    shape: RequestShape,
    *,
    batch: int,
    assumptions: Assumptions,
) -> ServingEstimate:
    """Memory, speed and the bounding resource of one replica of ``layout`` at ``batch`` concurrent sequences.

    ``shape.context_tokens`` sizes the KV cache reserved per sequence (the workload's max context);
    decode attends over the mean context ``input + output/2``. Infeasible configurations (a broken
    hardware rule, weights or KV cache that do not fit) come back with ``feasible=False``, reason
    records in ``why_not`` and every number still filled in. ``layout.ep`` and ``layout.attention_dp``: how each
    stage of ``tp`` GPUs lays out an MoE model's experts and attention (:mod:`clusterplan.physics.moe`).
    """
    a = assumptions
    tp, pp, ep, attention_dp = layout.tp, layout.pp, layout.ep, layout.attention_dp
    notes = serving_notes(gpu, layout.quant)
    batch = max(int(batch), 1)
    fit = _memory_fit(arch, gpu, layout, shape.context_tokens, batch, a)
    rates = _rates(arch, gpu, layout, a)
    reasons = _reasons(arch, gpu, layout, fit, rates)
    notes += _rate_notes(arch, gpu, layout, a)
    kernels = _moe_kernels(arch, gpu, layout, a)
    parts = _Parts(rates, kernels, _stage(arch, gpu, layout, shape, a, rates, kernels), _links(arch, gpu, layout, a))
    step_model = _step_model(arch, gpu, layout, a, parts)
    if ep > 1:
        link = kernels.all_to_all_link.describe()
        notes.append(f"experts over {ep} GPUs (EP{ep}): dispatch and combine all-to-alls over {link}")
    if attention_dp:
        notes.append(f"attention data-parallel over {tp} GPUs: attention weights replicated, KV split by sequence")
    if a.speculative is not None:
        own = a.speculative.model_copy(update={"cost_fraction": a.speculative.cost_for(arch)})  # its MTP modules
        step_model = speculative_step_model(step_model, own)
        notes.append(
            f"speculative decoding ({a.speculative.method}): {a.speculative.draft_tokens} draft tokens, "
            f"{a.speculative.acceptance_length:g} kept per step"
        )
    step = decode_step_s(step_model, batch)
    prefill = _prefill(arch, layout, shape, batch, a, parts, step_model.overhead_s)
    rps, tokens_per_s, tpot = saturated_rates(step, batch, prefill.busy_s, shape.output_tokens)
    share = rps * prefill.busy_s
    notes.append(f"chunked prefill takes {share:.0%} of the replica's time at saturation")
    return ServingEstimate(
        feasible=not reasons,
        why_not=reasons,
        gpu_id=gpu.id,
        tp=tp,
        pp=pp,
        quant=layout.quant,
        kv_precision=layout.kv_precision,
        batch=batch,
        gpus_per_replica=tp * pp,
        memory=fit.memory,
        max_batch_by_memory=fit.max_batch,
        prefill_s=prefill.prefill_s,
        decode_step_s=step,
        ttft_s=prefill.prefill_s,
        tpot_s=tpot,
        e2e_s=prefill.prefill_s + max(shape.output_tokens - 1.0, 0.0) * tpot,
        output_tokens_per_s=tokens_per_s,
        requests_per_s=rps,
        bound=_bound(step_model, batch, fit.max_batch),
        power_w=gpu.tdp_w * (tp * pp),
        notes=notes,
        compute_precision=rates.compute_precision,
        decode_context_tokens=parts.stage.mean_context_tokens,
        prefill_busy_s=prefill.busy_s,
        prefill_alone_busy_s=prefill.alone_busy_s,
        step_model=step_model,
        ep=max(ep, 1),
        attention_dp=attention_dp,
        all_to_all_s=step_model.pp * all_to_all_s(step_model, batch / min(float(pp), float(batch))),
        prefill_chunks=prefill.chunks,
    )


def single_stream_tokens_per_s(weight_bytes: float, bandwidth_gb_per_s: float, efficiency: float = 1.0) -> float:
    """Batch-1 decode upper bound: ``bandwidth x efficiency / model bytes`` tokens/s.

    Seeds 002: 7B fp16 (14 GB) on H100 SXM at 3.35 TB/s = 239 tokens/s; at 70 % efficiency on an RTX 4090
    (1 TB/s), 50 tokens/s.
    """
    return bandwidth_gb_per_s * BYTES_PER_GB * efficiency / weight_bytes
