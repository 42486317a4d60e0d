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

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from clusterplan.catalog.schema import GpuSpec, GroupedGemmFit, ModelArchitecture, MoeDispatch, UnbalancedRouting
from clusterplan.physics import memory, params, rules
from clusterplan.physics.comm import NO_LINK, Link, all_to_all_terms, link_for_group
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.memo import HeldMemo
from clusterplan.physics.types import MemoryBreakdown

RACK_SCALE_DOMAIN = 8  # GPUs of one NVLink board; larger scale-up domains are rack-scale (MNNVL: NVL72)
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
    arch: ModelArchitecture,
    layout: MoeLayout,
    context_tokens: float,
    *,
    pp: int,
    kv_precision: str,
    local_tokens: float | None = None,
) -> float:
    """KV bytes one sequence of ``context_tokens`` a GPU holds takes on that GPU (local layers capped at their window).

    Attention TP: its share of the KV heads, MLA's latent replicated
    (:func:`clusterplan.physics.memory.kv_bytes_per_sequence_per_gpu`). Attention DP: the whole sequence (every
    head) — but a GPU holds only its own ``1/tp`` of the sequences (:func:`sequences_per_gpu`). ``local_tokens``:
    a local layer's tokens (default ``min(context, window)``).
    """
    return memory.kv_bytes_per_sequence_per_gpu(
        arch, context_tokens, tp=layout.attention_tp, pp=pp, kv_precision=kv_precision,
        attention_dp=layout.attention_dp, local_tokens=local_tokens,
    )  # fmt: skip


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


def dispatch_bytes_per_token(arch: ModelArchitecture, ep: int, method: MoeDispatch = "all_to_all") -> float:
    """Bytes one token moves across GPUs in one dispatch (the combine as many), one MoE layer, per GPU's token.

    all_to_all: ``hidden x bytes x (ranks the token reaches) x (ep - 1)/ep`` (the share of those ranks that are
    remote). allgather: every other rank receives the token whatever its experts, and the reduce-scatter returns
    as many, ``hidden x bytes x (ep - 1)`` (TensorRT-LLM ``fused_moe/communication/allgather_reducescatter.py``,
    the fallback when no all-to-all is available: ``enable_alltoall`` needs multi-node NVLink, MNNVL).
    """
    if ep <= 1:
        return 0.0
    if method == "allgather":
        return arch.hidden_size * DISPATCH_BYTES * (ep - 1)
    remote = expected_ranks_per_token(experts_per_token(arch), ep) * (ep - 1) / ep
    return arch.hidden_size * DISPATCH_BYTES * remote


def dispatch_method(gpu: GpuSpec, dispatch: MoeDispatch, rack_dispatch: MoeDispatch | None) -> MoeDispatch:
    """An engine's MoE dispatch on a GPU: its rack-scale choice inside an NVLink domain above 8 GPUs (NVL72)."""
    rack = gpu.scale_up != "pcie" and gpu.scale_up_domain > RACK_SCALE_DOMAIN
    return rack_dispatch if (rack and rack_dispatch is not None) else dispatch


def experts_touched(moe_experts: int, experts_per_token: int, tokens: float) -> float:
    """Expected distinct experts a layer reads for ``tokens`` tokens routed uniformly: ``E·(1 - (1 - k/E)^n)``.

    A dense MLP is one expert that is always read.
    """
    if moe_experts <= 1:
        return 1.0
    n = max(tokens, 1.0)
    return moe_experts * (1.0 - (1.0 - experts_per_token / moe_experts) ** n)


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


def row_tile_padding(tokens: float, k: int, experts: int, ep: int, tile_max: int) -> float:
    """Padded over real rows of an MoE kernel that pads every expert's rows to a tile chosen from the gathered
    rows (>= 1; 1 when ``tile_max`` is 0: not modelled).

    Triton's ``matmul_ogs`` (``triton_kernels`` ``opt_flags.make_default_opt_flags_nvidia``: ``block_m = max(16,
    min(next_power_of_2(tokens_per_expt), 128))``, ``tokens_per_expt = max(1, M // n_expts_tot)``; TensorRT-LLM
    runs gpt-oss's MXFP4 experts through it on Hopper, ``_torch/modules/fused_moe/fused_moe_triton.py``) sizes its
    row tile from ``M`` = every gathered token's ``k`` routed slots over the rank's ``experts/ep`` local experts
    (``TritonEPRouter`` prunes the other ranks' slots but keeps them in ``M``; ``routing_from_bitmatrix`` sets no
    ``expected_tokens_per_expt``), while each expert the batch touches really gets ``tokens·k/touched`` rows
    (balanced), padded up to a multiple of the tile. Under EP the tile is ``ep`` times too tall: 1,632 tokens at EP
    4 over 128 experts give 51 rows an expert in a 128-row tile (2.5x the FLOPs).
    """
    if tile_max <= 0 or experts <= 0:
        return 1.0
    slots = max(tokens, 1.0) * k
    rows = slots / max(experts_touched(experts, k, tokens), 1.0)
    per_local = max(1, int(slots) // max(experts // max(ep, 1), 1))
    tile = max(16, min(1 << (per_local - 1).bit_length(), tile_max))  # next power of two, clamped
    return math.ceil(rows / tile) * tile / rows


def routing_effect(routing: UnbalancedRouting, ep: int) -> tuple[float, tuple[tuple[float, float], ...]]:
    """(static skew, routing curve) unbalanced (power-law) routing gives a layout of ``ep`` EP ranks: the one reader
    of either form of :class:`clusterplan.catalog.schema.UnbalancedRouting`.

    Measured ratios (TensorRT-LLM's tables, catalog/engines.yaml ``unbalanced``): no static skew, the curve of the
    largest tabulated EP degree not above ``ep`` (:func:`routing_ratio` joins its points). The law (catalog/
    kernels.yaml ``unbalanced_routing``): the busiest EP rank's load over the mean, ``1 + skew_per_doubling·log2(ep)``
    (1 without EP), the static part of :func:`load_imbalance` for a deployment without balanced expert placement (no
    EPLB), and no curve.
    """
    if routing.skew_per_doubling is not None:
        return (1.0 if ep <= 1 else 1.0 + routing.skew_per_doubling * math.log2(ep)), ()
    degree = max(d for d in routing.by_ep if d <= max(ep, 1))  # by_ep includes 1 (schema)
    return 1.0, tuple(zip((float(t) for t in routing.tokens), routing.by_ep[degree], strict=True))


def routing_ratio(curve: Sequence[tuple[float, float]], tokens: float) -> float:
    """The MoE layer's time under power-law routing over its time under balanced routing at ``tokens`` tokens the
    layer receives: ``curve``'s ``(tokens, ratio)`` points joined linearly in log tokens, its end values beyond
    them; 1 without a curve.

    TensorRT-LLM's curves (catalog/engines.yaml ``unbalanced``; ``bench/moe_kernel_fit.py --routing``) are the
    aiconfigurator-core 0.12.0 MoE tables' power-law over balanced latencies: at EP 1 the kernel alone slows as hot
    experts pile rows on a few GEMMs (Hopper FP8 1.09 at 1,024 tokens, Triton's MXFP4 kernel 1.52), and under EP the
    busiest rank adds its excess (EP 8: 1.23, 1.41).
    """
    if not curve:
        return 1.0
    if tokens <= curve[0][0]:
        return curve[0][1]
    for (t0, r0), (t1, r1) in itertools.pairwise(curve):
        if tokens <= t1:
            f = math.log(tokens / t0) / math.log(t1 / t0)
            return r0 + f * (r1 - r0)
    return curve[-1][1]


def serving_routing(
    a: Assumptions, gpu: GpuSpec, weight_precision: str, ep: int
) -> tuple[float, tuple[tuple[float, float], ...]]:
    """(static skew, routing curve) of a serving replica's MoE (:func:`load_imbalance`, :func:`routing_ratio`).

    Power-law routing (Assumptions ``moe_routing``): the engine's measured table where it has one, else the GPU
    architecture's law (catalog/kernels.yaml), both read by :func:`routing_effect`; balanced routing: neither.
    ``moe_expert_load_skew`` on top.
    """
    if a.moe_routing == "balanced":
        return a.moe_expert_load_skew, ()
    table = a.moe_unbalanced_routing(gpu.architecture, weight_precision)
    if table is None:
        table = rules.architecture_kernels(gpu).unbalanced_routing
    skew, curve = routing_effect(table, ep)
    return a.moe_expert_load_skew * skew, curve  # measured: skew 1.0, exact


# ------------------------------------------------------------------------------------------------
# Memory of a stage under a layout
# ------------------------------------------------------------------------------------------------


def kv_reserved_arch(arch: ModelArchitecture, assumptions: Assumptions) -> ModelArchitecture:
    """The model as its engine's KV pool sizes it: windowed layers at the full context unless the engine keeps
    only their window (``kv_window_pools``; TensorRT-LLM's ``KVCacheManager`` sets ``max_attention_window_vec =
    [max_seq_len]`` when ``kv_cache_config.max_attention_window`` is not given). Attention still reads the window."""
    if arch.attention_window is None or assumptions.engine_spec.kv_window_pools:
        return arch
    return arch.model_copy(update={"attention_window": None})


def stage_layout(layout: Layout) -> MoeLayout:
    """How ``layout``'s stage of ``tp`` GPUs splits its experts and attention."""
    return MoeLayout(tp=layout.tp, ep=layout.ep, attention_dp=layout.attention_dp)


def serving_memory(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    layout: Layout,
    *,
    batch: int,
    context_tokens: float,
    assumptions: Assumptions,
) -> MemoryBreakdown:
    """Memory of the most loaded GPU of a stage holding ``batch`` sequences under ``layout``.

    :func:`clusterplan.physics.memory.serving_memory` (the engine's memory policy) with the layout's weights
    (:func:`serving_weight_bytes_per_gpu`) and KV for the sequences the GPU holds (:func:`sequences_per_gpu`).
    """
    stage = stage_layout(layout)
    return memory.serving_memory(
        kv_reserved_arch(arch, assumptions), gpu, layout, batch=math.ceil(sequences_per_gpu(batch, stage)),
        context_tokens=context_tokens, assumptions=assumptions,
        weights_bytes=_weights(arch, gpu, stage, layout.pp, layout.quant, assumptions),
    )  # fmt: skip


# max_batch_by_memory per (model, GPU row, layout, context, assumptions): a serving layout asks for it when its batch is
# chosen and again when it is estimated at that batch.
_MAX_BATCHES: HeldMemo[int] = HeldMemo()
# _weights per (model, stage layout, stages, precision, int4 group, FP4 format): a layout's max batch, memory and
# estimate each read it.
_WEIGHTS: HeldMemo[float] = HeldMemo()


def max_batch_by_memory(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    layout: Layout,
    *,
    context_tokens: float,
    assumptions: Assumptions,
) -> int:
    """Largest number of sequences a stage holds under ``layout`` (0 if not one fits).

    Per GPU as :func:`clusterplan.physics.memory.max_batch_by_memory` (the engine's KV pool over KV per
    sequence); under attention DP every GPU holds that many of its own, so the stage holds ``tp`` times as many.
    """
    key = (id(arch), id(gpu), layout, context_tokens, id(assumptions))
    return _MAX_BATCHES.get_or_make(
        key, (arch, gpu, assumptions), _max_batch_by_memory, arch, gpu, layout, context_tokens, assumptions
    )


def _max_batch_by_memory(
    arch: ModelArchitecture, gpu: GpuSpec, layout: Layout, context_tokens: float, assumptions: Assumptions
) -> int:
    """:func:`max_batch_by_memory`, computed."""
    stage = stage_layout(layout)
    per_gpu = memory.max_batch_by_memory(
        kv_reserved_arch(arch, assumptions), gpu, layout, context_tokens=context_tokens, assumptions=assumptions,
        weights_bytes=_weights(arch, gpu, stage, layout.pp, layout.quant, assumptions),
    )  # fmt: skip
    return replica_batch(per_gpu, stage)


def _weights(
    arch: ModelArchitecture, gpu: GpuSpec, layout: MoeLayout, pp: int, quant: str, assumptions: Assumptions
) -> float:
    """:func:`serving_weight_bytes_per_gpu` at the assumptions' int4 group and the GPU's FP4 format (the dense
    layout's is :func:`clusterplan.physics.memory.serving_weight_bytes_per_gpu` itself)."""
    group, fp4 = assumptions.int4_group_size, rules.fp4_format(gpu)
    return _WEIGHTS.get_or_make(
        (id(arch), layout, pp, quant, group, fp4), (arch,), _weight_bytes, arch, layout, pp, quant, group, fp4
    )


def _weight_bytes(arch: ModelArchitecture, layout: MoeLayout, pp: int, quant: str, group: int, fp4: str) -> float:
    """:func:`_weights`, computed."""
    return serving_weight_bytes_per_gpu(arch, layout, pp=pp, quant=quant, int4_group_size=group, fp4_format=fp4)


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


def server_groups(layout: Layout, gpu: GpuSpec) -> tuple[int, int]:
    """``(GPUs that must share one NVLink domain, such groups per stage)`` of a serving stage.

    A stage with a tensor-parallel collective is one group of ``tp``. An expert-parallel-only stage
    (:attr:`Layout.expert_parallel_only`) wider than one server's NVLink domain splits into ``gcd(tp, d)``-GPU
    groups, one per server, joined only by the all-to-all over the network (:func:`all_to_all_link_terms`):
    EP 32 over four 8-GPU servers is four groups of 8.
    """
    domain = 1 if gpu.scale_up == "pcie" else max(1, min(gpu.scale_up_domain, gpu.max_gpus_per_node))
    return layout.nvlink_group(domain), layout.servers(domain)


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


# ------------------------------------------------------------------------------------------------
# Training: expert parallelism carved out of the data x context parallel ranks
# ------------------------------------------------------------------------------------------------
#
# Megatron-Core MoE (``megatron/core/transformer/moe/README.md``): ``--expert-model-parallel-size`` EP ranks split
# the routed experts; ``--expert-tensor-parallel-size`` defaults to the TP size, so each expert is tensor-parallel
# like the dense MLP; the EP group is folded out of the DP x CP ranks ("MoE parallel folding": ETP x EP x EDP =
# TP x CP x DP), the expert weights' gradients reduce over the remaining expert-data-parallel (EDP) ranks, and
# shared experts "follow the settings of the dense part" (replicated over EP). Rank order ``tp-ep-dp-pp`` for the
# experts (``parallel_state.initialize_model_parallel``): an EP group's members are ``tp`` ranks apart, so it spans
# ``tp x ep`` consecutive GPUs. torchtitan borrows EP from the FSDP-shard x CP mesh the same way
# (``ParallelDims``; ``models/llama4/infra/parallelize.py`` ``apply_moe_ep_tp``).


def training_ep_problem(arch: ModelArchitecture, ep: int, dp_cp: int) -> str | None:
    """Why ``ep`` cannot be a training layout's expert-parallel degree with ``dp_cp`` data x context ranks (a code).

    EP needs routed experts (a dense model trains at ep 1 only), splits them evenly (Megatron-LM asserts
    ``num_moe_experts % expert_model_parallel_size == 0``) and is carved out of the DP x CP ranks.
    """
    if ep <= 1:
        return None
    if not is_moe(arch):
        return "ep_without_experts"
    if routed_experts(arch) % ep:
        return "ep_not_dividing_experts"
    if dp_cp % ep:
        return "ep_not_dividing_dp"
    return None


@dataclass(frozen=True, slots=True)
class TrainingStageParams:
    """One GPU's share of the heaviest pipeline stage's parameters under ``tp`` and ``ep`` (embeddings excluded).

    ``experts``: the routed experts it holds (each MoE layer's ``E/ep`` experts, ``1/tp`` of each); ``dense``:
    everything else (attention, dense-first MLPs, shared experts, routers), as without EP.
    """

    dense: float
    experts: float
    moe_layers: int

    @property
    def total(self) -> float:
        return self.dense + self.experts


# A layout search asks for the same (model, tp, pp, ep) thousands of times: the answer is kept per model object.
_STAGE_CACHE: HeldMemo[TrainingStageParams] = HeldMemo()


def training_stage_params(arch: ModelArchitecture, *, tp: int, pp: int, ep: int = 1) -> TrainingStageParams:
    """:class:`TrainingStageParams` of the heaviest stage (:func:`clusterplan.physics.memory.stage_params_per_gpu`);
    memoised."""
    return _STAGE_CACHE.get_or_make((id(arch), tp, pp, ep), (arch,), _training_stage_params, arch, tp, pp, ep)


def _training_stage_params(arch: ModelArchitecture, tp: int, pp: int, ep: int) -> TrainingStageParams:
    """:func:`training_stage_params`, computed."""
    stage = memory.stage_params_per_gpu(arch, tp=tp, pp=pp)
    if not is_moe(arch):
        out = TrainingStageParams(stage.total, 0.0, 0)
    else:
        routed_all = stage.per_expert * routed_experts(arch)  # per_expert: one expert of each MoE layer, / tp
        out = TrainingStageParams(
            stage.total - routed_all, stage.per_expert * experts_per_gpu(arch, ep), stage.moe_layers
        )
    return out


def routed_active_params(arch: ModelArchitecture) -> float:
    """Routed-expert parameters one token multiplies through (top-k of each MoE layer): the matmul work that runs
    as grouped GEMMs on the EP ranks. 0 for a dense model."""
    if not is_moe(arch):
        return 0.0
    return float(moe_layers(arch) * experts_per_token(arch)) * expert_params(arch)


def routed_activation_width(arch: ModelArchitecture, imbalance: float = 1.0) -> float:
    """The MLP width a token's training activations span in an MoE layer (:func:`params.active_ffn_width`), its
    routed part scaled by the busiest EP rank's ``imbalance`` (that rank holds the most routed tokens)."""
    width = float(params.active_ffn_width(arch))
    if not is_moe(arch):
        return width
    return width + experts_per_token(arch) * arch.expert_ffn_size * (imbalance - 1.0)


def grouped_gemm_efficiency(tokens_per_expert: float, fit: GroupedGemmFit) -> float:
    """Expert GEMMs' throughput relative to dense training GEMMs: ``min(1, (peak/dense)·t/(t + half))``
    (catalog/kernels.yaml ``grouped_gemm``; the shipped H100 fit: ``(0.98/0.78)·t/(t + 360)``).

    Few tokens per expert (fine-grained experts, small EP groups) leave the grouped GEMM memory-bound: DeepSeek-V3
    at 4k tokens per GPU and EP 1 gives each of its 256 experts 128 tokens (0.33); EP 8 gives 1,024 (0.93).
    """
    t = max(tokens_per_expert, 1.0)
    return min(1.0, fit.peak_share / fit.dense_peak_share * t / (t + fit.half_tokens))


def training_tokens_per_expert(arch: ModelArchitecture, tokens_per_rank: float, ep: int) -> float:
    """Routed tokens one expert receives per micro-batch: the EP group's ``ep x tokens_per_rank`` tokens times
    ``k / E`` (dropless routing, Megatron-LM's default; ``tokens_per_rank``: one TP group's tokens)."""
    return max(ep, 1) * tokens_per_rank * experts_per_token(arch) / routed_experts(arch)


def training_expert_time_factor(
    arch: ModelArchitecture,
    tokens_per_rank: float,
    ep: int,
    *,
    routed_share: float,
    grouped: GroupedGemmFit,
    skew: float = 1.0,
) -> tuple[float, float, float]:
    """``(factor, imbalance, grouped-GEMM efficiency)``: a micro-batch's compute time is multiplied by
    ``1 + share·(imbalance / g - 1)``, ``share`` the routed experts' part of the FLOPs executed.

    The busiest EP rank sets the pace (:func:`load_imbalance` over the EP group's tokens; 1 without EP, where one
    GPU runs every expert); ``g`` per :func:`grouped_gemm_efficiency` with the GPU's ``grouped`` fit. 1 for a
    dense model.
    """
    if not is_moe(arch):
        return 1.0, 1.0, 1.0
    imbalance = training_imbalance(arch, tokens_per_rank, ep, skew)
    g = grouped_gemm_efficiency(training_tokens_per_expert(arch, tokens_per_rank, ep), grouped)
    return 1.0 + routed_share * (imbalance / g - 1.0), imbalance, g


def training_imbalance(arch: ModelArchitecture, tokens_per_rank: float, ep: int, skew: float = 1.0) -> float:
    """Busiest over mean routed tokens of an EP rank in one micro-batch (:func:`load_imbalance` over the EP
    group's ``ep x tokens_per_rank`` tokens); 1 without EP or experts."""
    if not is_moe(arch) or ep <= 1:
        return 1.0
    return load_imbalance(ep * tokens_per_rank, experts_per_token(arch), ep, skew)


def training_all_to_all_s(
    gpu: GpuSpec, *, ep: int, tp: int, node_gpus: int, bytes_sent_per_gpu: float, assumptions: Assumptions
) -> tuple[float, Link]:
    """One dispatch (or combine) all-to-all of a training EP group, seconds, and the link it rides.

    The group's ``ep`` members sit ``tp`` ranks apart (Megatron-LM expert rank order ``tp-ep-dp-pp``), spanning
    ``tp x ep`` GPUs: inside one server (``node_gpus``) it rides NVLink (PCIe on a PCIe-only server); otherwise each GPU's
    share bound for other domains, ``(ep - d)/(ep - 1)`` with ``d`` members per domain, crosses its own network rail
    and bounds the time (as :func:`all_to_all_link_terms`). ``(0, NO_LINK)`` at ``ep = 1``.
    """
    if ep <= 1 or bytes_sent_per_gpu <= 0:
        return 0.0, NO_LINK
    eff = assumptions.moe_all_to_all_efficiency
    span = tp * ep
    if span <= node_gpus:  # one server: NVLink inside the scale-up domain, else PCIe (link_for_group decides)
        link = link_for_group(gpu, group_size=span, spans_nodes=False, assumptions=assumptions)
        latency, per_byte = all_to_all_terms(ep, link, eff)
        return latency + bytes_sent_per_gpu * per_byte, link
    link = link_for_group(gpu, group_size=span, spans_nodes=True, assumptions=assumptions)
    domain = gpu.scale_up_domain if gpu.scale_up != "pcie" else 1
    d = max(1, min(min(domain, node_gpus) // max(tp, 1), ep))
    share = (ep - d) / (ep - 1)
    latency, per_byte = all_to_all_terms(ep, link, eff)
    return latency + bytes_sent_per_gpu * per_byte * share, link
