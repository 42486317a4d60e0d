"""Parameter counts from a transformer's shape.

Source: standard decoder-only transformer accounting (Kaplan et al. 2020, arXiv:2001.08361 §2.1;
Narayanan et al. 2021, arXiv:2104.04473 §3 for the 12·l·h² dense core), extended for GQA, gated MLPs,
multi-head latent attention (DeepSeek-V2 §2.1, arXiv:2405.04434; Hugging Face ``DeepseekV3Attention``),
shared experts and dense-first layers (DeepSeek-V3 §2.1, arXiv:2412.19437; ``DeepseekV3MoE``) and
multi-token-prediction modules (DeepSeek-V3 §2.2). Norm weights and biases are ignored (< 0.1% of
parameters for every catalog model).
"""

from __future__ import annotations

import math

from clusterplan.catalog.schema import ModelArchitecture


def _matrices(arch: ModelArchitecture) -> int:
    return 3 if arch.gated_mlp else 2


def attention_params_per_layer(arch: ModelArchitecture) -> int:
    """One layer's attention weights. Parameters.

    Standard/GQA: Q and O (h x heads·d) plus K and V (h x kv_heads·d). MLA (DeepSeek-V2 eq. 9-14):
    query ``h·q_r + q_r·a·(d_nope + d_rope)`` (or ``h·a·(d_nope + d_rope)`` without a query LoRA), the
    shared down-projection ``h·(kv_r + d_rope)``, the up-projection ``kv_r·a·(d_nope + d_v)`` and the output
    ``a·d_v·h``.
    """
    h, a = arch.hidden_size, arch.attention_heads
    if arch.kv_lora_rank is not None:
        nope, rope, v = arch.qk_nope_head_dim or 0, arch.qk_rope_head_dim or 0, arch.v_head_dim or 0
        q_lora = arch.q_lora_rank
        q = h * a * (nope + rope) if q_lora is None else h * q_lora + q_lora * a * (nope + rope)
        return q + h * (arch.kv_lora_rank + rope) + arch.kv_lora_rank * a * (nope + v) + a * v * h
    if arch.linear_layer_count:  # a hybrid's mean layer: PP stages hold a share of each kind (every n-th full)
        return attention_params_total(arch) // arch.layers
    return full_attention_params(arch)


def full_attention_params(arch: ModelArchitecture) -> int:
    """One softmax-attention layer's weights: Q and O (h x a·d), K and V (h x kv·d); with ``attn_output_gate`` a
    second query-width projection for the gate (Qwen3-Next ``q_proj`` of width ``2·a·d``, vLLM qwen3_next.py)."""
    h, a, d = arch.hidden_size, arch.attention_heads, arch.head_dim_eff
    gate = h * a * d if arch.attention_output_gate else 0
    return h * d * (2 * a + 2 * arch.kv_heads) + gate


def linear_attention_params(arch: ModelArchitecture) -> int:
    """One Gated DeltaNet layer's weights (vLLM ``Qwen3NextGatedDeltaNet``): ``in_proj_qkvz`` h x (2·k + 2·v),
    ``in_proj_ba`` h x 2·n_v, the depthwise ``conv1d`` (2·k + v) x kernel and ``out_proj`` v x h, with
    ``k = n_k·d_k`` and ``v = n_v·d_v``; 0 for a model without linear layers."""
    if not arch.linear_layer_count:
        return 0
    h = arch.hidden_size
    nv = arch.linear_value_heads or 0
    k = (arch.linear_key_heads or 0) * (arch.linear_key_head_dim or 0)
    v = nv * (arch.linear_value_head_dim or 0)
    return h * (2 * k + 2 * v + 2 * nv) + (2 * k + v) * (arch.linear_conv_kernel or 0) + v * h


def attention_params_total(arch: ModelArchitecture) -> int:
    """Every layer's attention (token-mixer) weights: softmax layers plus linear-attention layers."""
    if not arch.linear_layer_count:
        return arch.layers * attention_params_per_layer(arch)
    linear = arch.linear_layer_count
    return (arch.layers - linear) * full_attention_params(arch) + linear * linear_attention_params(arch)


def mlp_params_per_expert(arch: ModelArchitecture) -> int:
    """One routed expert (an MoE model) or the MLP (a dense model): 3·h·f gated, 2·h·f plain. Parameters."""
    width = arch.expert_ffn_size if arch.moe_experts > 1 else arch.ffn_size
    return _matrices(arch) * arch.hidden_size * width


def dense_mlp_params(arch: ModelArchitecture) -> int:
    """The MLP of a dense layer (every layer of a dense model; DeepSeek-V3's first three). Parameters."""
    return _matrices(arch) * arch.hidden_size * arch.ffn_size


def shared_expert_params(arch: ModelArchitecture) -> int:
    """An MoE layer's always-active shared experts (DeepSeek-V3 1 of width 2,048; Llama 4 1 of 8,192)."""
    if arch.shared_experts == 0:
        return 0
    return arch.shared_experts * _matrices(arch) * arch.hidden_size * arch.shared_ffn_size


def active_ffn_width(arch: ModelArchitecture) -> int:
    """The MLP width one token runs through in an MoE layer (top-k routed plus shared experts), else ``ffn_size``.

    Training keeps these intermediate activations (Korthikanti et al. 2022's MLP term, ``f`` per token).
    """
    if arch.moe_experts <= 1:
        return arch.ffn_size
    return arch.experts_per_token * arch.expert_ffn_size + arch.shared_experts * arch.shared_ffn_size


def router_params_per_layer(arch: ModelArchitecture) -> int:
    """An MoE layer's gate, ``h x experts``; 0 for a dense model."""
    return arch.hidden_size * arch.moe_experts if arch.moe_experts > 1 else 0


def moe_layer_mlp_params(arch: ModelArchitecture, *, active: bool) -> int:
    """An MoE layer's MLP side: routed experts (all, or the top-k a token uses), shared experts, router."""
    routed = arch.experts_per_token if active else arch.moe_experts
    return routed * mlp_params_per_expert(arch) + shared_expert_params(arch) + router_params_per_layer(arch)


def layer_params(arch: ModelArchitecture, index: int, *, active: bool = False) -> int:
    """Layer ``index``'s parameters (attention plus its dense MLP or its MoE block)."""
    if arch.is_moe_layer(index):
        return attention_params_per_layer(arch) + moe_layer_mlp_params(arch, active=active)
    return attention_params_per_layer(arch) + dense_mlp_params(arch)


def embedding_params(arch: ModelArchitecture) -> int:
    """Input embedding plus output head (once if tied). Parameters."""
    return arch.vocab_size * arch.hidden_size * (1 if arch.tied_embeddings else 2)


def _layer_sum(arch: ModelArchitecture, *, active: bool) -> int:
    attention = attention_params_total(arch)
    if arch.moe_experts <= 1:
        return attention + arch.layers * dense_mlp_params(arch)
    moe = arch.moe_layer_count
    dense = arch.layers - moe
    return attention + dense * dense_mlp_params(arch) + moe * moe_layer_mlp_params(arch, active=active)


def total_params(arch: ModelArchitecture) -> int:
    """Every parameter of the main model held in memory (all experts; MTP modules excluded: :func:`mtp_params`)."""
    return _layer_sum(arch, active=False) + embedding_params(arch)


def active_params(arch: ModelArchitecture) -> int:
    """Parameters touched per token (only experts_per_token routed experts of an MoE layer, all shared ones)."""
    return _layer_sum(arch, active=True) + embedding_params(arch)


def mtp_params(arch: ModelArchitecture) -> int:
    """Multi-token-prediction modules (DeepSeek-V3 §2.2): each one transformer layer shaped like the model's last
    plus its projection ``2h x h``; the embedding and output head are shared with the main model. Parameters."""
    if arch.mtp_layers == 0:
        return 0
    last = layer_params(arch, arch.layers - 1)
    if arch.linear_layer_count:  # Qwen3-Next's MTP layer is a full-attention layer (vLLM qwen3_next_mtp.py)
        last += full_attention_params(arch) - attention_params_per_layer(arch)
    return arch.mtp_layers * (last + 2 * arch.hidden_size * arch.hidden_size)


def non_embedding_params(arch: ModelArchitecture, *, active: bool = False) -> int:
    """Parameters excluding embeddings and head; the matmul weights FLOP counts use."""
    return (active_params(arch) if active else total_params(arch)) - embedding_params(arch)


def stage_layers(layers: int, pp: int) -> list[range]:
    """The layers of each pipeline stage: contiguous runs of ``ceil(layers / pp)`` (the last may be shorter)."""
    per = math.ceil(layers / max(pp, 1))
    return [range(start, min(start + per, layers)) for start in range(0, layers, per)]


def heaviest_stage(arch: ModelArchitecture, pp: int) -> range:
    """The pipeline stage holding the most parameters (the first of equals)."""
    if arch.uniform_layers:  # every layer alike: the first, longest stage
        return range(min(math.ceil(arch.layers / max(pp, 1)), arch.layers))
    moe_layer = attention_params_per_layer(arch) + moe_layer_mlp_params(arch, active=False)
    dense_layer = attention_params_per_layer(arch) + dense_mlp_params(arch)

    def weight(stage: range) -> int:
        moe = sum(map(arch.is_moe_layer, stage))
        return moe * moe_layer + (len(stage) - moe) * dense_layer

    return max(stage_layers(arch.layers, pp), key=weight)


def stage_attention_layers(arch: ModelArchitecture, pp: int) -> list[tuple[int, int]]:
    """(global, local) attention layers of each pipeline stage."""
    out = []
    for stage in stage_layers(arch.layers, pp):
        local = sum(map(arch.is_local_layer, stage))
        linear = sum(map(arch.is_linear_layer, stage))
        out.append((len(stage) - local - linear, local))
    return out


def stage_layer_kinds(arch: ModelArchitecture, pp: int) -> list[tuple[int, int, int]]:
    """(global, local, linear-attention) layers of each pipeline stage."""
    linear = [sum(map(arch.is_linear_layer, stage)) for stage in stage_layers(arch.layers, pp)]
    return [(full, local, n) for (full, local), n in zip(stage_attention_layers(arch, pp), linear, strict=True)]
