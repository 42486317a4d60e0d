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
from dataclasses import dataclass

from clusterplan.catalog.schema import GpuSpec, MemoryPolicy, ModelArchitecture
from clusterplan.physics import linear_attention, optimizer_memory, params
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.rules import fp4_format
from clusterplan.physics.types import MemoryBreakdown
from clusterplan.units import bytes_to_gib

BYTES_PER_VALUE: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
EMBEDDING_BYTES_PER_PARAM = 2.0  # embeddings and LM head stay 16-bit under GPTQ/AWQ/FP8 (vLLM, AutoAWQ)
NF4_BYTES_PER_PARAM = 0.5 + 0.127 / 8  # QLoRA NF4 with double quantisation: 4.127 bits (Dettmers et al. 2023 §3)
LOGIT_BYTES = 4.0  # fp32 logits for sampling / cross-entropy
# FP4 block formats: 4-bit E2M1 values plus one 8-bit scale per block. NVFP4: an E4M3 scale per 16 values,
# 4.5 bits (NVIDIA, "Introducing NVFP4 for efficient and accurate low-precision inference", 2025-06-24; the
# per-tensor FP32 second-level scale is negligible); MXFP4: an E8M0 scale per 32, 4.25 bits (OCP Microscaling
# Formats v1.0, 2023-09, Table 1; gpt-oss's MoE weights, OpenAI gpt-oss model card 2025-08).
FP4_BYTES_PER_PARAM: dict[str, float] = {"nvfp4": (4 + 8 / 16) / 8, "mxfp4": (4 + 8 / 32) / 8}


# ------------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------------


def weight_bytes_per_param(precision: str, *, int4_group_size: int = 128, fp4_format: str = "nvfp4") -> float:
    """Stored bytes per weight. int4: ``0.5 + (2 B fp16 scale + 0.5 B packed zero) / group_size``;
    fp4: ``(4 + 8 / block) / 8`` with the format's block (NVFP4 16, MXFP4 32; :data:`FP4_BYTES_PER_PARAM`).

    Source: GPTQ/AWQ group quantisation (Frantar et al. 2022, arXiv:2210.17323; AutoAWQ qzeros/scales layout).
    """
    if precision == "int4":
        return 0.5 + 2.5 / int4_group_size
    if precision == "fp4":
        return FP4_BYTES_PER_PARAM[fp4_format]
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
    """One layer's attention weights on one TP rank.

    Standard/GQA: ``h·d·(2a/t + 2·max(ceil(k_v/t), 1))`` (K/V replicate). MLA: the down-projections
    ``h·q_r + h·(kv_r + d_rope)`` are replicated on every rank and the head-split up- and output projections
    divide by TP (SGLang ``DeepseekV2AttentionMLA``: ``fused_qkv_a_proj_with_mqa`` is a ``ReplicatedLinear``,
    ``q_b_proj``/``kv_b_proj`` column- and ``o_proj`` row-parallel). Attention data-parallelism is ``tp = 1``.
    """
    if arch.kv_lora_rank is not None:
        h, rope = arch.hidden_size, arch.qk_rope_head_dim or 0
        replicated = h * (arch.kv_lora_rank + rope) + (0 if arch.q_lora_rank is None else h * arch.q_lora_rank)
        return replicated + (params.attention_params_per_layer(arch) - replicated) / tp
    full = (
        arch.hidden_size
        * arch.head_dim_eff
        * (
            (3 if arch.attention_output_gate else 2) * arch.attention_heads / tp
            + 2 * kv_heads_per_gpu(arch.kv_heads, tp)
        )
    )
    if not arch.linear_layer_count:
        return full
    linear = arch.linear_layer_count  # a hybrid's mean layer, as params.attention_params_per_layer
    return ((arch.layers - linear) * full + linear * params.linear_attention_params(arch) / tp) / arch.layers


def moe_layer_params_per_gpu(arch: ModelArchitecture, tp: int) -> float:
    """An MoE layer's parameters on one TP rank: attention, every expert (routed and shared) / TP, the router."""
    experts = arch.moe_experts * params.mlp_params_per_expert(arch) + params.shared_expert_params(arch)
    return attention_params_per_gpu(arch, tp) + experts / tp + params.router_params_per_layer(arch)


def dense_layer_params_per_gpu(arch: ModelArchitecture, tp: int) -> float:
    """A dense layer's parameters on one TP rank: attention and its MLP / TP."""
    return attention_params_per_gpu(arch, tp) + params.dense_mlp_params(arch) / tp


def layer_params_per_gpu(arch: ModelArchitecture, tp: int) -> float:
    """The largest transformer layer's parameters on one TP rank; K/V projections replicate when tp > kv_heads.

    An MoE model's MoE layer (heavier than its dense first layers); a dense model's every layer.
    """
    if arch.moe_experts > 1:
        return moe_layer_params_per_gpu(arch, tp)
    return (
        attention_params_per_gpu(arch, tp) + params.dense_mlp_params(arch) / tp + params.router_params_per_layer(arch)
    )


@dataclass(frozen=True)
class StageParams:
    """The parameters of the heaviest pipeline stage on one TP rank, split by how a decode step reads them.

    ``always`` is read every step (attention, dense MLPs, shared experts, routers); ``per_expert`` is one routed
    expert in each of the stage's MoE layers, read once per distinct expert the step's tokens touch;
    ``active`` is what one token multiplies through (attention, dense MLPs, shared and top-k routed experts).
    """

    layers: int
    moe_layers: int
    always: float
    per_expert: float
    active: float
    total: float


def stage_params_per_gpu(arch: ModelArchitecture, *, tp: int, pp: int) -> StageParams:
    """:class:`StageParams` of the heaviest stage (:func:`params.heaviest_stage`); TP splits heads and MLP widths."""
    attention = attention_params_per_gpu(arch, tp)
    expert = params.mlp_params_per_expert(arch) / tp
    if arch.moe_experts <= 1:  # dense: one "expert" (the MLP) read every step, as the decode step model reads it
        n = layers_per_stage(arch.layers, pp)
        layer = attention + expert + params.router_params_per_layer(arch)
        return StageParams(n, n, n * attention, n * expert, n * (attention + expert), n * layer)
    stage = params.heaviest_stage(arch, pp)
    moe = len(stage) if arch.uniform_layers else sum(map(arch.is_moe_layer, stage))
    dense = len(stage) - moe
    router = params.router_params_per_layer(arch)
    shared = params.shared_expert_params(arch) / tp
    dense_layer = attention + params.dense_mlp_params(arch) / tp
    always = moe * (attention + router + shared) + dense * dense_layer
    active = moe * (attention + arch.experts_per_token * expert + shared) + dense * dense_layer
    total = moe * moe_layer_params_per_gpu(arch, tp) + dense * dense_layer_params_per_gpu(arch, tp)
    return StageParams(len(stage), moe, always, moe * expert, active, total)


def embedding_params_per_gpu(arch: ModelArchitecture, tp: int, pp: int) -> float:
    """Embedding and LM head on the most loaded GPU, vocab-parallel over TP.

    One stage (pp = 1) holds both (once if tied); with pp > 1 the first stage holds the input embedding and
    the last the head (a tied model keeps a copy on each, as Megatron-LM does), so the most loaded holds one.
    """
    if pp <= 1:
        return params.embedding_params(arch) / tp
    return arch.vocab_size * arch.hidden_size / tp


def serving_weight_bytes_per_gpu(
    arch: ModelArchitecture, *, tp: int, pp: int, quant: str, int4_group_size: int = 128, fp4_format: str = "nvfp4"
) -> float:
    """Weights on the most loaded GPU: layers of one stage at the weight precision plus 16-bit embeddings.

    Multi-token-prediction modules are not counted here: SGLang and vLLM load DeepSeek-V3's MTP layer only as a
    draft model for ``--speculative-algorithm EAGLE``/``NEXTN``; :func:`_serving_fixed` adds them under ``mtp``.
    """
    bpp = weight_bytes_per_param(quant, int4_group_size=int4_group_size, fp4_format=fp4_format)
    return (
        stage_params_per_gpu(arch, tp=tp, pp=pp).total * bpp
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


def kv_values_per_token_per_layer(arch: ModelArchitecture, *, tp: int, attention_dp: bool = False) -> float:
    """Cached values one token adds to one layer on one GPU.

    MLA: the latent ``kv_lora_rank + qk_rope_head_dim`` (576 for DeepSeek-V3), one copy shared by every head,
    so it is REPLICATED on each GPU of an attention-TP group (SGLang ``mem_cache/memory_pool.py::MLATokenToKVPool``:
    one head of ``kv_lora_rank + qk_rope_head_dim``; vLLM ``MLAAttentionSpec``); under attention data-parallelism a GPU
    holds only its own sequences, at the same figure per token. Otherwise ``2 x kv_heads x head_dim`` split
    over TP by heads (:func:`kv_heads_per_gpu`), all heads on each GPU under attention DP.
    """
    if arch.kv_lora_rank is not None:
        return float(arch.kv_lora_rank + (arch.qk_rope_head_dim or 0))
    heads = arch.kv_heads if attention_dp else kv_heads_per_gpu(arch.kv_heads, tp)
    return 2.0 * heads * arch.head_dim_eff


def kv_bytes_per_token_per_gpu(
    arch: ModelArchitecture, *, tp: int, pp: int, kv_precision: str, attention_dp: bool = False
) -> float:
    """KV bytes one token adds on the most loaded GPU (its stage's layers, its share of KV heads).

    Every layer counted: a token within every local layer's window. Past a window use
    :func:`kv_bytes_per_sequence_per_gpu`. DeepSeek-V3 (MLA, 61 layers): ``576 x 61 x bytes``.
    """
    if arch.linear_layer_count:  # only the full-attention layers cache keys and values
        kv_layers = max(full + local for full, local in params.stage_attention_layers(arch, pp))
        heads = arch.kv_heads if attention_dp else kv_heads_per_gpu(arch.kv_heads, tp)
        return kv_cache_bytes(kv_layers, heads, arch.head_dim_eff, BYTES_PER_VALUE[kv_precision], 1.0)
    if arch.kv_lora_rank is None and not attention_dp:
        return kv_cache_bytes(
            layers_per_stage(arch.layers, pp),
            kv_heads_per_gpu(arch.kv_heads, tp),
            arch.head_dim_eff,
            BYTES_PER_VALUE[kv_precision],
            1.0,
        )
    values = kv_values_per_token_per_layer(arch, tp=tp, attention_dp=attention_dp)
    return layers_per_stage(arch.layers, pp) * values * BYTES_PER_VALUE[kv_precision]


def kv_bytes_per_sequence_per_gpu(
    arch: ModelArchitecture,
    context_tokens: float,
    *,
    tp: int,
    pp: int,
    kv_precision: str,
    attention_dp: bool = False,
    local_tokens: float | None = None,
) -> float:
    """KV bytes one sequence of ``context_tokens`` holds on the most loaded GPU; local layers cap at their window.

    Sliding windows keep the last ``w`` tokens (vLLM ``SlidingWindowSpec``); chunked attention keeps the current
    chunk, at most ``w`` (vLLM ``ChunkedLocalAttentionSpec``): the reserve for the worst position is ``min(c, w)``.
    ``local_tokens``: what a local layer holds instead (a decode span's mean, :func:`clusterplan.physics.serving.
    decode_local_tokens`). The stage holding the most cached tokens sets the figure.
    """
    if arch.linear_layer_count:  # linear layers: a fixed state per sequence, whatever the context (no window here)
        heads = arch.kv_heads if attention_dp else kv_heads_per_gpu(arch.kv_heads, tp)
        per_layer = kv_cache_bytes(1, heads, arch.head_dim_eff, BYTES_PER_VALUE[kv_precision], 1.0)
        state = linear_attention.state_bytes_per_layer(arch, 1 if attention_dp else tp)
        return max(full * context_tokens * per_layer + n * state for full, _, n in params.stage_layer_kinds(arch, pp))
    per_token = kv_bytes_per_token_per_gpu(arch, tp=tp, pp=pp, kv_precision=kv_precision, attention_dp=attention_dp)
    if arch.attention_window is None:
        return context_tokens * per_token
    per_layer = per_token / layers_per_stage(arch.layers, pp)
    kept = min(context_tokens, float(arch.attention_window)) if local_tokens is None else local_tokens
    return per_layer * max(
        full * context_tokens + local * kept for full, local in params.stage_attention_layers(arch, pp)
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


def kv_pool_bytes(
    capacity_bytes: float,
    *,
    weights_bytes: float,
    activation_bytes: float,
    reserve_bytes: float,
    policy: MemoryPolicy,
    fraction: float,
    headroom_fraction: float,
) -> float:
    """Bytes the engine gives its KV cache on one GPU (negative: not even the weights fit).

    The user's ``headroom`` comes off first: ``M = capacity x (1 - headroom)``. Then the engine's policy:

    * ``total`` (vLLM ``gpu_memory_utilization``, ``vllm/v1/worker/gpu_worker.py::determine_available_memory``):
      ``f·M - weights - profiled activations - runtime reserve``;
    * ``static`` (SGLang ``mem_fraction_static``, ``model_runner.py::profile_max_num_token``): ``f·M - weights``,
      activations and CUDA graphs taking the rest; less when the rest cannot hold them;
    * ``free`` (TensorRT-LLM ``kv_cache_free_gpu_mem_fraction``, ``docs/source/reference/memory.md``):
      ``f·(M - weights - activations - runtime reserve)``.
    """
    usable = capacity_bytes * (1.0 - headroom_fraction)
    left = usable - weights_bytes - activation_bytes - reserve_bytes
    if policy == "total":
        return fraction * usable - weights_bytes - activation_bytes - reserve_bytes
    if policy == "static":
        return min(fraction * usable - weights_bytes, left)
    return fraction * left if left > 0 else left


def _serving_fixed(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    layout: Layout,
    assumptions: Assumptions,
    weights_bytes: float | None = None,
) -> tuple[float, float, float, float]:
    """(weights, step activations, runtime reserve, KV pool) bytes of the most loaded GPU of a replica.

    Weights (``weights_bytes`` where an MoE layout gives them, else the TP-split model's) include a speculative
    proposer's (``cost_fraction`` of the model's, or the model's own MTP modules, stored at the same precision).
    """
    tp = layout.tp
    weights = weights_bytes
    if weights is None:
        weights = serving_weight_bytes_per_gpu(
            arch, tp=tp, pp=layout.pp, quant=layout.quant, int4_group_size=assumptions.int4_group_size,
            fp4_format=fp4_format(gpu),
        )  # fmt: skip
    if assumptions.speculative is not None:
        weights *= 1.0 + assumptions.speculative.held_fraction(arch)
    act = serving_activation_bytes(arch.hidden_size, tp, assumptions.chunk_tokens)
    policy, fraction, reserve_gib = assumptions.memory_policy(tp)
    reserve = reserve_gib * 2**30
    pool = kv_pool_bytes(
        gpu.memory_gib * 2**30, weights_bytes=weights, activation_bytes=act, reserve_bytes=reserve, policy=policy,
        fraction=fraction, headroom_fraction=assumptions.serving_headroom_fraction,
    )  # fmt: skip
    return weights, act, reserve, pool


def kv_bytes_per_sequence(
    arch: ModelArchitecture,
    *,
    tp: int,
    pp: int,
    kv_precision: str,
    context_tokens: float,
    assumptions: Assumptions,
    attention_dp: bool = False,
) -> float:
    """KV bytes one sequence holds at ``context_tokens`` (whole blocks of the engine's KV block size; local layers
    capped at their window, :func:`kv_bytes_per_sequence_per_gpu`), plus its fp32 logits; a speculative proposer
    keeps its own KV (``cost_fraction`` of the model's)."""
    block = assumptions.engine_spec.kv_block_tokens
    tokens = math.ceil(context_tokens / block) * block
    kv = kv_bytes_per_sequence_per_gpu(arch, tokens, tp=tp, pp=pp, kv_precision=kv_precision, attention_dp=attention_dp)
    if assumptions.speculative is not None:
        kv *= 1.0 + assumptions.speculative.kv_fraction(arch)
    return kv + logits_bytes(1, arch.vocab_size)


def _kv_bytes_per_sequence_of(arch: ModelArchitecture, layout: Layout, context_tokens: float, a: Assumptions) -> float:
    """:func:`kv_bytes_per_sequence` under ``layout``: the KV heads split over the attention's TP group (one GPU,
    every head, under attention DP)."""
    return kv_bytes_per_sequence(
        arch, tp=1 if layout.attention_dp else layout.tp, pp=layout.pp, kv_precision=layout.kv_precision,
        context_tokens=context_tokens, assumptions=a, attention_dp=layout.attention_dp,
    )  # fmt: skip


def serving_memory(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    layout: Layout,
    *,
    batch: int,
    context_tokens: float,
    assumptions: Assumptions,
    weights_bytes: float | None = None,
) -> MemoryBreakdown:
    """Memory of the most loaded GPU of a serving replica holding ``batch`` sequences of ``context_tokens``.

    ``headroom_gib`` is what the engine's policy and the user's headroom leave unused: capacity minus weights,
    activations, runtime reserve and the KV pool (:func:`kv_pool_bytes`). So the batch fits exactly when
    ``total_gib <= capacity_gib``. ``weights_bytes``: an MoE layout's weights (:mod:`clusterplan.physics.moe`);
    under ``layout.attention_dp`` every GPU holds whole sequences and ``batch`` is the sequences this GPU holds.
    """
    weights, act, reserve, pool = _serving_fixed(arch, gpu, layout, assumptions, weights_bytes)
    per_sequence = _kv_bytes_per_sequence_of(arch, layout, context_tokens, assumptions)
    logits = logits_bytes(batch, arch.vocab_size)
    kv = batch * per_sequence - logits
    capacity = gpu.memory_gib * 2**30
    unused = max(capacity - weights - act - reserve - max(pool, 0.0), 0.0)
    parts = {
        "weights_gib": bytes_to_gib(weights),
        "kv_cache_gib": bytes_to_gib(kv),
        "activations_gib": bytes_to_gib(act + logits),
        "runtime_overhead_gib": bytes_to_gib(reserve),
        "headroom_gib": bytes_to_gib(unused),
    }
    return MemoryBreakdown(**parts, total_gib=sum(parts.values()), capacity_gib=gpu.memory_gib)


def max_batch_by_memory(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    layout: Layout,
    *,
    context_tokens: float,
    assumptions: Assumptions,
    weights_bytes: float | None = None,
) -> int:
    """Largest number of concurrent sequences whose KV cache (at ``context_tokens`` each) the engine's pool holds.

    ``floor(KV pool / (KV per sequence + logits per sequence))``, 0 if none (:func:`kv_pool_bytes`).
    """
    *_, pool = _serving_fixed(arch, gpu, layout, assumptions, weights_bytes)
    per_sequence = _kv_bytes_per_sequence_of(arch, layout, context_tokens, assumptions)
    if pool <= 0 or per_sequence <= 0:
        return 0
    return max(0, math.floor(pool / per_sequence))


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


@dataclass(frozen=True)
class LayerShape:
    """The widths a transformer layer's training activations span: ``hidden_size``, ``attention_heads``, the MLP's
    ``ffn_size`` (an MoE layer's active width) and whether the MLP is gated (SwiGLU: three matrices)."""

    hidden_size: int
    attention_heads: int
    ffn_size: float
    gated_mlp: bool


def training_activation_bytes_per_layer(
    shape: LayerShape,
    *,
    seq_len: float,
    micro_batch: float,
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
    hidden_size, attention_heads, ffn_size = shape.hidden_size, shape.attention_heads, shape.ffn_size
    sbh = seq_len * micro_batch * hidden_size
    if recompute == "full":
        return 2.0 * sbh / (tp if sequence_parallel else 1)
    split = 8.0 + (6.0 if shape.gated_mlp else 4.0) * ffn_size / hidden_size
    replicated = 10.0
    coeff = (replicated + split) / tp if sequence_parallel else replicated + split / tp
    if recompute == "none" and not flash_attention:
        coeff += 5.0 * attention_heads * seq_len / hidden_size / tp
    return sbh * coeff


def stage_activation_bytes(
    *, stored_per_layer: float, input_per_layer: float, layers: int, recompute_layers: int
) -> float:
    """Activations one micro-batch leaves on a pipeline stage of ``layers`` layers, ``recompute_layers`` of them
    fully recomputed: those keep only their input, the others everything they store.

    Megatron-LM ``--recompute-granularity full --recompute-method block --recompute-num-layers N``
    (``transformer_block.py::_checkpointed_forward``): the first N layers of each stage (of each virtual chunk)
    are checkpointed, the rest keep their activations, so memory falls linearly with N.
    """
    r = max(0, min(recompute_layers, layers))
    return r * input_per_layer + (layers - r) * stored_per_layer


def pipeline_micro_batches_in_flight(pp: int, virtual_stages: int, micro_batches: int) -> float:
    """Micro-batches whose activations the first (most loaded) pipeline stage holds at its peak, in units of
    one micro-batch of the whole stage.

    1F1B: ``min(p, m)`` (Narayanan et al. 2021 §2.2.1). Interleaved with ``v`` chunks per stage: the first stage
    warms up ``(p - 1)·2 + (v - 1)·p`` chunks before its first backward (Megatron-LM ``schedules.py``,
    ``forward_backward_pipelining_with_interleaving``), i.e. ``p + (p - 1)/v`` stages' worth: the
    ``1 + (p - 1)/(p·v)`` factor of Korthikanti et al. 2022 §4.2.3.
    """
    if pp <= 1:
        return 1.0
    if virtual_stages <= 1:
        return float(min(pp, micro_batches))
    return min(pp + (pp - 1) / virtual_stages, float(micro_batches))


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
