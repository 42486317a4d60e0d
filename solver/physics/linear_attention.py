"""Gated DeltaNet linear-attention layers of a hybrid model (Qwen3-Next, Qwen3.5): a fixed-size state per sequence.

Source: Yang et al. 2024, "Gated Delta Networks" (arXiv:2412.06464) eq. 10, ``S_t = S_{t-1}·a_t(I - b_t·k_t·k_tᵀ)
+ b_t·v_t·k_tᵀ``, ``o_t = S_t·q_t``; vLLM ``model_executor/models/qwen3_next.py`` (``Qwen3NextGatedDeltaNet``,
``get_state_shape``: a ``(n_v / tp) x d_k x d_v`` recurrent state and a ``(conv_dim / tp) x (kernel - 1)`` conv
state per sequence, ``conv_dim = 2·n_k·d_k + n_v·d_v``). A linear layer holds no KV cache growing with the context.
"""

from __future__ import annotations

import math

from clusterplan.catalog.schema import ModelArchitecture

CONV_STATE_BYTES = 2  # the conv state is kept in the model's 16-bit dtype (vLLM mamba_cache_dtype "auto")
# FLOPs per (value head, d_k x d_v state entry) per token of the recurrence: S·k, the rank-1 update, the decay
# and S·q (2 + 2 + 1 + 2, rounded up for the gates), Yang et al. 2024 eq. 10.
STATE_FLOPS_PER_ENTRY = 8.0
PREFILL_CHUNK_TOKENS = 64  # the chunked algorithm's block (fla ``chunk_gated_delta_rule``, vLLM's kernel)


def conv_dim(arch: ModelArchitecture) -> int:
    """Channels of the short convolution: ``2·n_k·d_k + n_v·d_v`` (queries, keys, values)."""
    keys = (arch.linear_key_heads or 0) * (arch.linear_key_head_dim or 0)
    return 2 * keys + (arch.linear_value_heads or 0) * (arch.linear_value_head_dim or 0)


def state_bytes_per_layer(arch: ModelArchitecture, tp: int) -> float:
    """One sequence's state in one linear layer on one TP rank: recurrent ``ceil(n_v / tp)·d_k·d_v`` values at
    ``linear_state_bytes`` plus the conv state ``conv_dim / tp x (kernel - 1)`` at 16 bits. Bytes."""
    if not arch.linear_layer_count:
        return 0.0
    heads = max(math.ceil((arch.linear_value_heads or 0) / max(tp, 1)), 1)
    recurrent = heads * (arch.linear_key_head_dim or 0) * (arch.linear_value_head_dim or 0) * arch.linear_state_bytes
    conv = conv_dim(arch) / max(tp, 1) * ((arch.linear_conv_kernel or 1) - 1) * CONV_STATE_BYTES
    return float(recurrent + conv)


def flops_per_token(arch: ModelArchitecture, layers: int, *, prefill: bool) -> float:
    """Recurrence FLOPs of one token through ``layers`` linear layers, constant in the context: the state update
    and read, ``8·n_v·d_k·d_v``; a prefill adds the chunked form's intra-chunk attention, half a
    :data:`PREFILL_CHUNK_TOKENS` block of ``2·(d_k + d_v)`` per head."""
    if not arch.linear_layer_count or layers <= 0:
        return 0.0
    nv, dk, dv = arch.linear_value_heads or 0, arch.linear_key_head_dim or 0, arch.linear_value_head_dim or 0
    per_head = STATE_FLOPS_PER_ENTRY * dk * dv
    if prefill:
        per_head += PREFILL_CHUNK_TOKENS / 2 * 2.0 * (dk + dv)
    return float(layers * nv * per_head)
