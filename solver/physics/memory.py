"""Memory on one GPU: weights, KV cache, activations, training state. Bytes unless the name says GiB.

Sources, per function: weights ``params x bytes / TP`` (NIM memory guide; aiconfigurator
``base_backend.py``); KV cache ``2 x layers x kv_heads x head_dim x bytes x tokens`` with
``max(kv_heads/TP, 1)`` heads per GPU (llm-analysis ``get_memory_kv_cache_per_layer``); serving activations
``2 x tokens x h x c[TP]`` (aiconfigurator ``_get_memory_usage``); training state 18 B/param and ZeRO
sharding (Megatron-LM ``theoretical_memory_usage.py``; Rajbhandari et al. 2020, arXiv:1910.02054 §5);
training activations per layer (Korthikanti et al. 2022, arXiv:2205.05198 §4, Table 2).
"""

from __future__ import annotations

import math

from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.physics import optimizer_memory, params
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.types import MemoryBreakdown
from clusterplan.units import bytes_to_gib

BYTES_PER_VALUE: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
EMBEDDING_BYTES_PER_PARAM = 2.0  # embeddings and LM head stay 16-bit under GPTQ/AWQ/FP8 (vLLM, AutoAWQ)
NF4_BYTES_PER_PARAM = 0.5 + 0.127 / 8  # QLoRA NF4 with double quantisation: 4.127 bits (Dettmers et al. 2023 §3)
LOGIT_BYTES = 4.0  # fp32 logits for sampling / cross-entropy


# ------------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------------


def weight_bytes_per_param(precision: str, *, int4_group_size: int = 128) -> float:
    """Stored bytes per weight. int4: ``0.5 + (2 B fp16 scale + 0.5 B packed zero) / group_size``.

    Source: GPTQ/AWQ group quantisation (Frantar et al. 2022, arXiv:2210.17323; AutoAWQ qzeros/scales layout).
    """
    if precision == "int4":
        return 0.5 + 2.5 / int4_group_size
    return BYTES_PER_VALUE[precision]


def weights_bytes(n_params: float, bytes_per_param: float) -> float:
    """``params x bytes_per_param`` bytes (seeds 002: 70B x 2 B = 140 GB)."""
    return n_params * bytes_per_param


def layers_per_stage(layers: int, pp: int) -> int:
    """Layers on the most loaded pipeline stage: ``ceil(layers / pp)``."""
    return math.ceil(layers / max(pp, 1))


def kv_heads_per_gpu(kv_heads: int, tp: int) -> int:
    """KV heads one GPU holds: ``max(ceil(kv_heads / tp), 1)`` (replicated when tp > kv_heads; vLLM, llm-analysis)."""
    return max(math.ceil(kv_heads / tp), 1)


def attention_params_per_gpu(arch: ModelArchitecture, tp: int) -> float:
    """One layer's attention weights on one TP rank: ``h·d·(2a/t + 2·max(ceil(k_v/t), 1))`` (K/V replicate)."""
    return (
        arch.hidden_size * arch.head_dim_eff * (2 * arch.attention_heads / tp + 2 * kv_heads_per_gpu(arch.kv_heads, tp))
    )


def layer_params_per_gpu(arch: ModelArchitecture, tp: int) -> float:
    """One transformer layer's parameters on one TP rank; K/V projections replicate when tp > kv_heads."""
    attention = attention_params_per_gpu(arch, tp)
    mlp = arch.moe_experts * params.mlp_params_per_expert(arch) / tp
    return attention + mlp + params.router_params_per_layer(arch)


def embedding_params_per_gpu(arch: ModelArchitecture, tp: int, pp: int) -> float:
    """Embedding and LM head on the most loaded GPU, vocab-parallel over TP.

    One stage (pp = 1) holds both (once if tied); with pp > 1 the first stage holds the input embedding and
    the last the head (a tied model keeps a copy on each, as Megatron-LM does), so the most loaded holds one.
    """
    if pp <= 1:
        return params.embedding_params(arch) / tp
    return arch.vocab_size * arch.hidden_size / tp


def serving_weight_bytes_per_gpu(
    arch: ModelArchitecture, *, tp: int, pp: int, quant: str, int4_group_size: int = 128
) -> float:
    """Weights on the most loaded GPU: layers of one stage at the weight precision plus 16-bit embeddings."""
    layers = layers_per_stage(arch.layers, pp)
    bpp = weight_bytes_per_param(quant, int4_group_size=int4_group_size)
    return (
        layers * layer_params_per_gpu(arch, tp) * bpp
        + embedding_params_per_gpu(arch, tp, pp) * EMBEDDING_BYTES_PER_PARAM
    )


# ------------------------------------------------------------------------------------------------
# KV cache
# ------------------------------------------------------------------------------------------------


def kv_cache_bytes(layers: int, kv_heads: float, head_dim: int, bytes_per_value: float, tokens: float) -> float:
    """``layers x 2 (K and V) x kv_heads x head_dim x bytes x tokens`` bytes.

    Seeds 002: Llama-2-70B (80 layers, 8 KV heads of 128) at fp16, 8,192 tokens x 32 sequences = 85.9 GB.
    Source: llm-analysis ``analysis.py::get_memory_kv_cache_per_layer``.
    """
    return layers * 2 * kv_heads * head_dim * bytes_per_value * tokens


def kv_bytes_per_token_per_gpu(arch: ModelArchitecture, *, tp: int, pp: int, kv_precision: str) -> float:
    """KV bytes one token adds on the most loaded GPU (its stage's layers, its share of KV heads)."""
    return kv_cache_bytes(
        layers_per_stage(arch.layers, pp),
        kv_heads_per_gpu(arch.kv_heads, tp),
        arch.head_dim_eff,
        BYTES_PER_VALUE[kv_precision],
        1.0,
    )


# ------------------------------------------------------------------------------------------------
# Serving activations
# ------------------------------------------------------------------------------------------------

_ACTIVATION_COEFF_BY_TP = {1: 10.0, 2: 6.0, 4: 5.0, 8: 5.0}


def serving_activation_bytes(hidden_size: int, tp: int, tokens: float) -> float:
    """Peak forward activations of one engine step: ``2 B x tokens x h x c[TP]``, ``c = {1:10, 2:6, 4:5, 8:5}``.

    Source: aiconfigurator ``base_backend.py::_get_memory_usage`` (c = 5 for TP beyond 8).
    """
    coeff = _ACTIVATION_COEFF_BY_TP.get(tp, 10.0 if tp < 1 else 5.0)
    return 2.0 * tokens * hidden_size * coeff


def logits_bytes(sequences: float, vocab_size: int) -> float:
    """fp32 logits of one decode step: ``sequences x vocab x 4`` bytes (vLLM sampler)."""
    return sequences * vocab_size * LOGIT_BYTES


def serving_memory(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    tp: int,
    pp: int,
    quant: str,
    kv_precision: str,
    batch: int,
    context_tokens: float,
    assumptions: Assumptions,
) -> MemoryBreakdown:
    """Memory of the most loaded GPU of a serving replica holding ``batch`` sequences of ``context_tokens``."""
    weights = serving_weight_bytes_per_gpu(arch, tp=tp, pp=pp, quant=quant, int4_group_size=assumptions.int4_group_size)
    kv = batch * context_tokens * kv_bytes_per_token_per_gpu(arch, tp=tp, pp=pp, kv_precision=kv_precision)
    act = serving_activation_bytes(arch.hidden_size, tp, assumptions.prefill_chunk_tokens) + logits_bytes(
        batch, arch.vocab_size
    )
    return _breakdown(gpu, assumptions, weights=weights, kv=kv, activations=act)


def max_batch_by_memory(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    tp: int,
    pp: int,
    quant: str,
    kv_precision: str,
    context_tokens: float,
    assumptions: Assumptions,
) -> int:
    """Largest number of concurrent sequences whose KV cache (at ``context_tokens`` each) fits; 0 if none.

    ``floor((capacity - headroom - overhead - weights - activations) / (KV per sequence + logits per sequence))``.
    """
    empty = serving_memory(
        arch, gpu, tp=tp, pp=pp, quant=quant, kv_precision=kv_precision, batch=0,
        context_tokens=context_tokens, assumptions=assumptions,
    )  # fmt: skip
    free_bytes = (empty.capacity_gib - empty.total_gib) * 2**30
    per_sequence = context_tokens * kv_bytes_per_token_per_gpu(
        arch, tp=tp, pp=pp, kv_precision=kv_precision
    ) + logits_bytes(1, arch.vocab_size)
    if free_bytes <= 0 or per_sequence <= 0:
        return 0
    return max(0, math.floor(free_bytes / per_sequence))


# ------------------------------------------------------------------------------------------------
# Training state
# ------------------------------------------------------------------------------------------------


def model_state_bytes_per_param(
    precision: str, optimizer: str, plan: optimizer_memory.MemoryPlan = optimizer_memory.PLAIN
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per trained parameter, mixed precision unless ``plan`` says otherwise.

    bf16/fp16/fp8 compute: 16-bit weights 2 + fp32 gradients 4 + fp32 master weights 4 + Adam moments 8
    = 18 B/param (Megatron-LM ``theoretical_memory_usage.py``; seeds 002: 7B x 18 B = 126 GB).
    SGD with momentum keeps master + momentum (8); Adafactor keeps the master copy and factored moments
    (~4). fp32 training has no separate master copy: 4 + 4 + moments. The memory options (no master copy,
    8-bit AdamW) are :func:`clusterplan.physics.optimizer_memory.state_bytes_per_param`.
    """
    return optimizer_memory.state_bytes_per_param(precision, optimizer, plan)


def zero_sharded_bytes_per_param(
    weights: float, grads: float, optimizer: float, *, stage: int, dp: int
) -> tuple[float, float, float]:
    """Per-GPU (weights, gradients, optimizer) bytes per parameter under ZeRO stage 0-3 over ``dp`` ranks.

    Stage 1 shards the optimizer, 2 also gradients, 3 also weights (Rajbhandari et al. 2020,
    arXiv:1910.02054 §5.1; DeepSpeed ``estimate_zero3_model_states_mem_needs``: 18P/N at stage 3).
    """
    n = max(dp, 1)
    if stage <= 0:
        return weights, grads, optimizer
    if stage == 1:
        return weights, grads, optimizer / n
    if stage == 2:
        return weights, grads / n, optimizer / n
    return weights / n, grads / n, optimizer / n


def training_activation_bytes_per_layer(
    *,
    seq_len: float,
    micro_batch: float,
    hidden_size: int,
    attention_heads: int,
    ffn_size: int,
    gated_mlp: bool,
    tp: int,
    sequence_parallel: bool,
    recompute: str,
    flash_attention: bool,
) -> float:
    """Activations one transformer layer keeps for backward, bytes (16-bit activations).

    Korthikanti et al. 2022 (arXiv:2205.05198) Table 2: ``s·b·h·(34 + 5·a·s/h)`` without parallelism, with
    34 = 10 (layer norms, dropout masks, block inputs: replicated across TP without sequence parallelism)
    + 24 (tensors split by TP: 8 attention + 16 MLP for a 4h GELU MLP). Generalised: the MLP keeps two
    ffn-wide tensors (4·ffn/h) for GELU and three (6·ffn/h) for a gated MLP; Megatron-LM's
    ``theoretical_memory_usage.py`` writes the same 18 + 4·ffn/h. The score term 5·a·s/h is dropped with
    FlashAttention or selective recompute; full recompute keeps only the layer input, 2·s·b·h.
    With TP and sequence parallelism everything divides by TP; without SP the 10 stays replicated.
    """
    sbh = seq_len * micro_batch * hidden_size
    if recompute == "full":
        return 2.0 * sbh / (tp if sequence_parallel else 1)
    split = 8.0 + (6.0 if gated_mlp else 4.0) * ffn_size / hidden_size
    replicated = 10.0
    coeff = (replicated + split) / tp if sequence_parallel else replicated + split / tp
    if recompute == "none" and not flash_attention:
        coeff += 5.0 * attention_heads * seq_len / hidden_size / tp
    return sbh * coeff


def _breakdown(
    gpu: GpuSpec,
    assumptions: Assumptions,
    *,
    weights: float,
    kv: float = 0.0,
    activations: float = 0.0,
    gradients: float = 0.0,
    optimizer: float = 0.0,
) -> MemoryBreakdown:
    capacity = gpu.memory_gib
    headroom = assumptions.memory_headroom_fraction * capacity
    parts = {
        "weights_gib": bytes_to_gib(weights),
        "kv_cache_gib": bytes_to_gib(kv),
        "activations_gib": bytes_to_gib(activations),
        "gradients_gib": bytes_to_gib(gradients),
        "optimizer_gib": bytes_to_gib(optimizer),
        "runtime_overhead_gib": assumptions.runtime_overhead_gib,
        "headroom_gib": headroom,
    }
    return MemoryBreakdown(**parts, total_gib=sum(parts.values()), capacity_gib=capacity)


def training_breakdown(
    gpu: GpuSpec,
    assumptions: Assumptions,
    *,
    weights: float,
    gradients: float,
    optimizer: float,
    activations: float,
) -> MemoryBreakdown:
    """A training GPU's memory (bytes in, GiB out) with runtime overhead and fragmentation headroom."""
    return _breakdown(
        gpu, assumptions, weights=weights, gradients=gradients, optimizer=optimizer, activations=activations
    )
