"""Parameter counts from a transformer's shape.

Source: standard decoder-only transformer accounting (Kaplan et al. 2020, arXiv:2001.08361 §2.1;
Narayanan et al. 2021, arXiv:2104.04473 §3 for the 12·l·h² dense core), extended for GQA and gated MLPs.
Norm weights and biases are ignored (< 0.1% of parameters for every catalog model).
"""

from __future__ import annotations

from clusterplan.catalog.schema import ModelArchitecture


def attention_params_per_layer(arch: ModelArchitecture) -> int:
    """Q and O projections (h x heads·d) plus K and V (h x kv_heads·d). Parameters."""
    d = arch.head_dim_eff
    return arch.hidden_size * d * (2 * arch.attention_heads + 2 * arch.kv_heads)


def mlp_params_per_expert(arch: ModelArchitecture) -> int:
    """Gated MLP (SwiGLU): 3·h·ffn; plain MLP (GELU): 2·h·ffn. Parameters."""
    matrices = 3 if arch.gated_mlp else 2
    return matrices * arch.hidden_size * arch.ffn_size


def router_params_per_layer(arch: ModelArchitecture) -> int:
    return arch.hidden_size * arch.moe_experts if arch.moe_experts > 1 else 0


def embedding_params(arch: ModelArchitecture) -> int:
    """Input embedding plus output head (once if tied). Parameters."""
    return arch.vocab_size * arch.hidden_size * (1 if arch.tied_embeddings else 2)


def total_params(arch: ModelArchitecture) -> int:
    """Every parameter held in memory (all experts of an MoE model)."""
    per_layer = (
        attention_params_per_layer(arch)
        + arch.moe_experts * mlp_params_per_expert(arch)
        + router_params_per_layer(arch)
    )
    return arch.layers * per_layer + embedding_params(arch)


def active_params(arch: ModelArchitecture) -> int:
    """Parameters touched per token (only experts_per_token experts of an MoE layer)."""
    per_layer = (
        attention_params_per_layer(arch)
        + arch.experts_per_token * mlp_params_per_expert(arch)
        + router_params_per_layer(arch)
    )
    return arch.layers * per_layer + embedding_params(arch)


def non_embedding_params(arch: ModelArchitecture, *, active: bool = False) -> int:
    """Parameters excluding embeddings and head; the matmul weights FLOP counts use."""
    return (active_params(arch) if active else total_params(arch)) - embedding_params(arch)
