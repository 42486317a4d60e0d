"""How a mixture-of-experts model is laid out over a serving stage and what that costs per step.

A stage of ``tp`` GPUs runs one copy of its layers. Its experts are split over ``ep`` expert-parallel groups
(``ep`` divides ``tp``): each group holds ``E/ep`` whole experts, each expert tensor-parallel over ``tp/ep`` GPUs
(TensorRT-LLM's ``moe_tp_size x moe_ep_size = tp``; SGLang ``--ep-size`` = ``--tp-size``; vLLM
``--enable-expert-parallel`` puts EP over all ``tp x dp`` GPUs). Attention is either tensor-parallel over the
``tp`` GPUs (weights split, KV split by heads) or data-parallel (``attention_dp``: SGLang
``--enable-dp-attention``, vLLM ``--data-parallel-size`` with EP): every GPU holds all attention weights and
runs attention for its own ``1/tp`` of the sequences, so the KV cache is split by sequences.

With ``ep > 1`` every MoE layer sends each token's hidden state to the GPUs holding its experts (dispatch) and
back (combine), an all-to-all over the EP group (DeepEP; SGLang's large-scale EP write-up, lmsys.org
2025-05-05). Experts see uneven token counts: the step waits for the busiest GPU.

Architecture accessors (``routed_experts`` ... ``moe_layers``) are the ONE place this module reads the model's
MoE fields, so a richer schema (shared experts, dense-first layers, separate expert FFN width) rewires here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.physics import memory, params, rules
from clusterplan.physics.comm import NO_LINK, Link, all_to_all_terms, link_for_group
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.types import MemoryBreakdown

DISPATCH_BYTES = 2.0  # 16-bit hidden states dispatched and combined (vLLM's all2all backends; DeepEP combines bf16)


# ------------------------------------------------------------------------------------------------
# Architecture accessors: the only readers of the model's MoE fields in this module
# ------------------------------------------------------------------------------------------------


def routed_experts(arch: ModelArchitecture) -> int:
    """Routed experts per MoE layer (1 for a dense model)."""
    return max(arch.moe_experts, 1)


def experts_per_token(arch: ModelArchitecture) -> int:
    """Routed experts each token activates per MoE layer (1 for a dense model)."""
    return max(arch.experts_per_token, 1) if arch.moe_experts > 1 else 1


def is_moe(arch: ModelArchitecture) -> bool:
    return arch.moe_experts > 1


def expert_params(arch: ModelArchitecture) -> float:
    """Parameters of one routed expert (gated: 3·h·ffn); the dense MLP for a dense model."""
    return float(params.mlp_params_per_expert(arch))


def shared_expert_params(arch: ModelArchitecture) -> float:
    """Parameters of the always-active shared expert(s) of one MoE layer (DeepSeek-V3: one of width 2,048)."""
    return float(params.shared_expert_params(arch)) if is_moe(arch) else 0.0


def moe_layers(arch: ModelArchitecture) -> int:
    """Layers whose MLP is an MoE layer (dense-first layers and the MoE frequency counted out; 0 if dense)."""
    return arch.moe_layer_count if is_moe(arch) else 0


def dense_mlp_params_per_layer(arch: ModelArchitecture) -> float:
    """MLP parameters of one dense (non-MoE) layer of an MoE model (DeepSeek-V3's first three: width ffn_size)."""
    return float(params.dense_mlp_params(arch)) if is_moe(arch) else 0.0


def dense_mlp_layers(arch: ModelArchitecture) -> int:
    """Layers of an MoE model whose MLP is dense (DeepSeek's first_k_dense_replace, interleaved dense layers)."""
    return arch.layers - arch.moe_layer_count if is_moe(arch) else 0


# ------------------------------------------------------------------------------------------------
# The layout
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MoeLayout:
    """How one stage of ``tp`` GPUs splits experts (``ep`` groups) and attention (TP or data-parallel)."""

    tp: int = 1
    ep: int = 1
    attention_dp: bool = False

    @property
    def expert_tp(self) -> int:
        """GPUs one expert is tensor-parallel over: ``tp / ep``."""
        return max(self.tp // max(self.ep, 1), 1)

    @property
    def attention_tp(self) -> int:
        """GPUs one layer's attention is tensor-parallel over: 1 under attention DP, else ``tp``."""
        return 1 if self.attention_dp else self.tp

    @property
    def dense_mlp_tp(self) -> int:
        """GPUs a non-routed MLP (dense layers, shared experts) is tensor-parallel over: 1 under attention DP.

        Under attention DP the dense MLPs and shared experts run data-parallel with the attention, whole on every
        GPU for its own tokens (TensorRT-LLM ``modeling_deepseekv3.py``: ``_compute_mlp_tp_size`` and
        ``_compute_shared_expert_tp_size`` return 1 when ``enable_attention_dp``).
        """
        return 1 if self.attention_dp else self.tp


DENSE = MoeLayout()


def layout_problem(arch: ModelArchitecture, tp: int, ep: int, attention_dp: bool) -> str | None:
    """Why ``ep`` / ``attention_dp`` cannot describe a stage of ``tp`` GPUs (a code-like phrase), or None."""
    if ep < 1 or tp % ep:
        return "ep_not_divisor"
    if ep > 1 and not is_moe(arch):
        return "ep_without_experts"
    if ep > routed_experts(arch):
        return "ep_exceeds_experts"
    return None


def experts_per_gpu(arch: ModelArchitecture, ep: int) -> int:
    """Routed experts an EP rank holds: ``ceil(E / ep)`` (uneven splits put one more on some ranks)."""
    return math.ceil(routed_experts(arch) / max(ep, 1))


def expert_params_per_gpu_per_layer(arch: ModelArchitecture, layout: MoeLayout) -> float:
    """One MoE layer's expert weights on one GPU: its ``ceil(E/ep)`` experts split ``tp/ep`` ways plus the
    shared expert split ``tp`` ways (whole under attention DP: :attr:`MoeLayout.dense_mlp_tp`). Parameters.
    (``ep = 1``: all experts split ``tp`` ways, as today.)"""
    routed = experts_per_gpu(arch, layout.ep) * expert_params(arch) / layout.expert_tp
    return routed + shared_expert_params(arch) / layout.dense_mlp_tp


def attention_params_per_gpu(arch: ModelArchitecture, layout: MoeLayout) -> float:
    """One layer's attention weights on one GPU: split over TP, replicated whole under attention DP."""
    return memory.attention_params_per_gpu(arch, layout.attention_tp)


def serving_weight_bytes_per_gpu(
    arch: ModelArchitecture,
    layout: MoeLayout,
    *,
    pp: int,
    quant: str,
    int4_group_size: int = 128,
    fp4_format: str = "nvfp4",
) -> float:
    """Weights on the most loaded GPU of a stage under ``layout``, bytes.

    Attention per :func:`attention_params_per_gpu`, experts per :func:`expert_params_per_gpu_per_layer`,
    router replicated, embeddings vocab-parallel over TP (16-bit). Equals
    :func:`clusterplan.physics.memory.serving_weight_bytes_per_gpu` for the dense layout.
    """
    if layout == MoeLayout(tp=layout.tp):
        return memory.serving_weight_bytes_per_gpu(
            arch, tp=layout.tp, pp=pp, quant=quant, int4_group_size=int4_group_size, fp4_format=fp4_format
        )
    layers, moe_count = stage_layers(arch, pp)
    bpp = memory.weight_bytes_per_param(quant, int4_group_size=int4_group_size, fp4_format=fp4_format)
    if is_moe(arch):
        mlp = moe_count * expert_params_per_gpu_per_layer(arch, layout)
        mlp += (layers - moe_count) * dense_mlp_params_per_layer(arch) / layout.dense_mlp_tp  # dense-first layers
    else:
        mlp = layers * expert_params(arch) / layout.tp
    attention = layers * attention_params_per_gpu(arch, layout) + moe_count * params.router_params_per_layer(arch)
    embeddings = memory.embedding_params_per_gpu(arch, layout.tp, pp)
    return (attention + mlp) * bpp + embeddings * memory.EMBEDDING_BYTES_PER_PARAM


def kv_bytes_per_sequence_held(
    arch: ModelArchitecture, layout: MoeLayout, context_tokens: float, *, pp: int, kv_precision: str
) -> float:
    """KV bytes one sequence of ``context_tokens`` a GPU holds takes on that GPU (local layers capped at their window).

    Attention TP: its share of the KV heads, MLA's latent replicated
    (:func:`clusterplan.physics.memory.kv_bytes_per_sequence_per_gpu`). Attention DP: the whole sequence (every
    head) — but a GPU holds only its own ``1/tp`` of the sequences (:func:`sequences_per_gpu`).
    """
    return memory.kv_bytes_per_sequence_per_gpu(
        arch, context_tokens, tp=layout.attention_tp, pp=pp, kv_precision=kv_precision, attention_dp=layout.attention_dp
    )


def sequences_per_gpu(batch: float, layout: MoeLayout) -> float:
    """Sequences whose KV cache one GPU holds: all of them under attention TP, ``ceil(batch / tp)`` under DP."""
    if not layout.attention_dp:
        return batch
    return float(math.ceil(batch / max(layout.tp, 1)))


def replica_batch(per_gpu: int, layout: MoeLayout) -> int:
    """Sequences a stage holds when each GPU holds ``per_gpu``: ``tp x per_gpu`` under attention DP."""
    return per_gpu * layout.tp if layout.attention_dp else per_gpu


# ------------------------------------------------------------------------------------------------
# Per-step costs
# ------------------------------------------------------------------------------------------------


def expected_ranks_per_token(k: int, ep: int) -> float:
    """Distinct EP ranks one token's ``k`` experts land on, routed uniformly: ``ep·(1 - (1 - 1/ep)^k)``.

    DeepEP dispatches a token once per destination rank (``get_dispatch_layout``: ``is_token_in_rank``), not once
    per expert.
    """
    if ep <= 1:
        return 1.0
    return ep * (1.0 - (1.0 - 1.0 / ep) ** k)


def dispatch_bytes_per_token(arch: ModelArchitecture, ep: int) -> float:
    """Bytes one token sends off its GPU in one dispatch (the combine returns as many), one MoE layer.

    ``hidden x bytes x (ranks the token reaches) x (ep - 1)/ep`` (the share of those ranks that are remote).
    """
    if ep <= 1:
        return 0.0
    remote = expected_ranks_per_token(experts_per_token(arch), ep) * (ep - 1) / ep
    return arch.hidden_size * DISPATCH_BYTES * remote


def load_imbalance(tokens: float, k: int, ep: int, skew: float = 1.0) -> float:
    """Max over mean routed tokens per EP rank at one step: ``skew x (1 + sqrt(2 ln(ep) / m))``, ``m = tokens·k/ep``.

    The statistical part is the maximum load of ``m·ep`` balls in ``ep`` bins (Raab & Steger 1998,
    "Balls into Bins — A Simple and Tight Analysis": ``m + sqrt(2 m ln ep)`` for ``m >> ln ep``), so small
    batches are the most uneven; ``skew`` is the static popularity of experts that placement does not
    balance (1: an EPLB-balanced placement; DeepSeek's EPLB replicates heavy experts to even the load).
    Capped at ``ep`` (everything on one rank). 1 without EP.
    """
    if ep <= 1:
        return 1.0
    mean = max(tokens, 1.0) * k / ep
    return min(float(ep), skew * (1.0 + math.sqrt(2.0 * math.log(ep) / mean)))


# Expert-load skew of unbalanced routing per EP degree: latency under power-law (alpha 1.01) expert popularity over
# latency under balanced routing, median over 1,024-4,096 tokens, every shape with moe_tp 1 (aiconfigurator-core
# 0.12.0, systems/data/h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet, CUTLASS kernels): EP 2 1.19, 4 1.28,
# 8 1.36, 16 1.44, 32 1.51, 64 1.69, 128 1.74, 256 1.79 (1.0 below 512 tokens, where the weights bind).
ROUTING_SKEW_PER_DOUBLING = 0.12


def routing_skew(ep: int) -> float:
    """Busiest EP rank's routed load over the mean under unbalanced (power-law) routing: ``1 + 0.12·log2(ep)``.

    The static part of :func:`load_imbalance` for a deployment without balanced expert placement (no EPLB):
    fitted to the aiconfigurator-core 0.12.0 H200 TensorRT-LLM MoE tables (within 6% of their medians for EP 2-128).
    1 without EP.
    """
    if ep <= 1:
        return 1.0
    return 1.0 + ROUTING_SKEW_PER_DOUBLING * math.log2(ep)


# ------------------------------------------------------------------------------------------------
# Memory of a stage under a layout
# ------------------------------------------------------------------------------------------------


def serving_memory(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    layout: MoeLayout,
    *,
    pp: int,
    quant: str,
    kv_precision: str,
    batch: int,
    context_tokens: float,
    assumptions: Assumptions,
) -> MemoryBreakdown:
    """Memory of the most loaded GPU of a stage holding ``batch`` sequences under ``layout``.

    :func:`clusterplan.physics.memory.serving_memory` (the engine's memory policy) with the layout's weights
    (:func:`serving_weight_bytes_per_gpu`) and KV for the sequences the GPU holds (:func:`sequences_per_gpu`).
    """
    return memory.serving_memory(
        arch, gpu, tp=layout.tp, pp=pp, quant=quant, kv_precision=kv_precision,
        batch=math.ceil(sequences_per_gpu(batch, layout)), context_tokens=context_tokens, assumptions=assumptions,
        weights_bytes=_weights(arch, gpu, layout, pp, quant, assumptions), kv_tp=layout.attention_tp,
        attention_dp=layout.attention_dp,
    )  # fmt: skip


def max_batch_by_memory(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    layout: MoeLayout,
    *,
    pp: int,
    quant: str,
    kv_precision: str,
    context_tokens: float,
    assumptions: Assumptions,
) -> int:
    """Largest number of sequences a stage holds under ``layout`` (0 if not one fits).

    Per GPU as :func:`clusterplan.physics.memory.max_batch_by_memory` (the engine's KV pool over KV per
    sequence); under attention DP every GPU holds that many of its own, so the stage holds ``tp`` times as many.
    """
    per_gpu = memory.max_batch_by_memory(
        arch, gpu, tp=layout.tp, pp=pp, quant=quant, kv_precision=kv_precision, context_tokens=context_tokens,
        assumptions=assumptions, weights_bytes=_weights(arch, gpu, layout, pp, quant, assumptions),
        kv_tp=layout.attention_tp, attention_dp=layout.attention_dp,
    )  # fmt: skip
    return replica_batch(per_gpu, layout)


def _weights(
    arch: ModelArchitecture, gpu: GpuSpec, layout: MoeLayout, pp: int, quant: str, assumptions: Assumptions
) -> float:
    """:func:`serving_weight_bytes_per_gpu` at the assumptions' int4 group and the GPU's FP4 format (the dense
    layout's is :func:`clusterplan.physics.memory.serving_weight_bytes_per_gpu` itself)."""
    return serving_weight_bytes_per_gpu(
        arch, layout, pp=pp, quant=quant, int4_group_size=assumptions.int4_group_size, fp4_format=rules.fp4_format(gpu)
    )


# ------------------------------------------------------------------------------------------------
# Links and counts
# ------------------------------------------------------------------------------------------------


def all_to_all_link_terms(gpu: GpuSpec, ep: int, assumptions: Assumptions) -> tuple[float, float, Link]:
    """``(latency_s, seconds per byte a GPU sends, link)`` of one dispatch or combine over ``ep`` GPUs.

    Inside the scale-up domain (NVLink, an NVL72 rack's 72 GPUs): the scale-up link. Across it, the share of a
    GPU's remote bytes bound for other domains, ``(ep - d)/(ep - 1)`` with ``d`` group members per domain,
    crosses the GPU's own network rail (DeepEP forwards over NVLink to the rail of the destination, then RDMA)
    and bounds the time: ``α + share·M / (B_net · eff)``.
    """
    eff = assumptions.moe_all_to_all_efficiency
    if ep <= 1:
        return 0.0, 0.0, NO_LINK
    domain = gpu.scale_up_domain if gpu.scale_up != "pcie" else 1
    inside = ep <= domain and ep <= gpu.max_gpus_per_node
    if inside:
        link = link_for_group(gpu, group_size=ep, spans_nodes=False, assumptions=assumptions)
        latency, per_byte = all_to_all_terms(ep, link, eff)
        return latency, per_byte, link
    link = link_for_group(gpu, group_size=ep, spans_nodes=True, assumptions=assumptions)
    d = max(1, min(domain, gpu.max_gpus_per_node, ep))
    share = (ep - d) / (ep - 1)
    latency, per_byte = all_to_all_terms(ep, link, eff)
    return latency, per_byte * share, link


def allreduces(arch: ModelArchitecture, layout: MoeLayout, layers: int) -> int:
    """TP all-reduces per forward over ``layers`` layers (Megatron: after attention and after the MLP).

    Attention: one per layer under attention TP (``tp > 1``), none under attention DP. MLP: a dense model's
    one per layer at ``tp > 1``; an MoE layer's when its experts are tensor-parallel (``tp / ep > 1``; SGLang's
    DP attention gathers and scatters the same bytes); dense-first layers of an MoE model when their MLP is
    tensor-parallel (:attr:`MoeLayout.dense_mlp_tp` > 1: not under attention DP).
    """
    attention = layers if layout.attention_tp > 1 else 0
    if not is_moe(arch):
        return attention + (layers if layout.tp > 1 else 0)
    dense = min(dense_mlp_layers(arch), layers)
    moe = max(layers - dense, 0)
    return attention + (moe if layout.expert_tp > 1 else 0) + (dense if layout.dense_mlp_tp > 1 else 0)


def stage_layers(arch: ModelArchitecture, pp: int) -> tuple[int, int]:
    """(layers, MoE layers) of the heaviest pipeline stage (:func:`clusterplan.physics.params.heaviest_stage`)."""
    stage = memory.stage_params_per_gpu(arch, tp=1, pp=pp)
    return stage.layers, (stage.moe_layers if is_moe(arch) else 0)
