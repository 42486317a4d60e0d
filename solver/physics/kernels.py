"""Achieved fraction of peak of the kernels a training step runs: GEMMs by shape, and the attention core.

* **GEMMs by shape.** A GEMM ``(M x K) @ (K x N)`` reaches ``plateau / (1 + a/M + a/N + b/K)`` of peak: a fixed
  cost per output row and column (tiles and waves of tiles that do not fill the SMs) and per reduction step
  (prologue and epilogue of each tile). ``a``, ``b`` per architecture family are catalog rows (catalog/kernels.yaml
  ``gemm_shape``: fitted on the measured BF16 cuBLAS GEMM tables of NVIDIA aiconfigurator-core 0.12.0, with their
  source); the GPU's row is :func:`clusterplan.physics.rules.architecture_kernels`. The plateau is the class factor
  ``training_mfu``: the fraction a large GEMM reaches in training.
* **Attention core.** FlashAttention runs ``QK^T``, softmax and ``AV`` fused; its achieved share of dense peak
  is its own per architecture (:class:`clusterplan.physics.factors.Assumptions` ``attention_kernel_efficiency``),
  applied to the FLOPs the kernel executes: causal masking skips the upper triangle (half the pairs) and the
  backward recomputes the scores (FlashAttention's count, forward ``4·s²·d`` per head, backward ``2.5x``: Dao
  2023, arXiv:2307.08691 §4.1 benchmark). Without FlashAttention (Megatron-LM 2021) the scores are materialised:
  batched GEMMs over every (query, key) pair (the mask applied after) plus softmax and dropout passes over the
  ``a x s x s`` score tensor in memory (Korthikanti et al. 2022, arXiv:2205.05198 §4.1: ``5·a·s²`` bytes stored
  per layer).
"""

from __future__ import annotations

from clusterplan.catalog.schema import GemmShapeCurve, GpuSpec, ModelArchitecture
from clusterplan.physics.memo import HeldMemo
from clusterplan.physics.rules import architecture_kernels
from clusterplan.physics.serving import attention_width

# FlashAttention-2/3 executed FLOPs per (query, key) pair and attention-width unit: forward 4 (QK^T and AV),
# backward 10 (the scores recomputed, then four GEMMs; Dao 2023's benchmark counts backward as 2.5x forward).
FLASH_FWD_FLOPS = 4.0
FLASH_BWD_FLOPS = 10.0
# Materialised attention (Megatron-LM 2021: baddbmm, FusedScaleMaskSoftmax, dropout, bmm), 16-bit scores.
# Bytes moved per score element: forward = scores written (2), softmax read + write (4), dropout read, write and
# its 1-byte mask (5), read by the AV bmm (2); backward = dP written (2), dropout backward (5), softmax backward
# reads P and dP and writes dS (6), dS read by the two QK^T-gradient bmms (4), P read by the AV weight gradient (2).
SCORE_BYTES_FWD = 13.0
SCORE_BYTES_BWD = 19.0


def gemm_curve(gpu: GpuSpec) -> GemmShapeCurve:
    """The shape curve of a GPU's architecture (catalog/kernels.yaml ``gemm_shape``)."""
    return architecture_kernels(gpu).gemm_shape


def gemm_shape_fraction(m: float, n: float, k: float, curve: GemmShapeCurve) -> float:
    """Share of the large-GEMM plateau one ``M x N x K`` GEMM reaches."""
    a, b = curve.per_output_dim_elements, curve.per_reduction_dim_elements
    return 1.0 / (1.0 + a / max(m, 1.0) + a / max(n, 1.0) + b / max(k, 1.0))


def linear_shape_fraction(tokens: float, d_in: float, d_out: float, curve: GemmShapeCurve) -> float:
    """A linear layer's three training GEMMs of equal FLOPs, time-weighted: forward ``(T, d_out, d_in)``, input
    gradient ``(T, d_in, d_out)``, weight gradient ``(d_in, d_out, T)`` (M, N, K)."""
    shapes = ((tokens, d_out, d_in), (tokens, d_in, d_out), (d_in, d_out, tokens))
    return 3.0 / sum(1.0 / gemm_shape_fraction(m, n, k, curve) for m, n, k in shapes)


# model_gemm_fraction per (model, tokens, tp, curve): a training search asks for a few dozen some 4,000 times.
_MODEL_GEMM: HeldMemo[float] = HeldMemo()


def model_gemm_fraction(arch: ModelArchitecture, tokens: float, tp: int, curve: GemmShapeCurve) -> float:
    """Share of the plateau a model's training GEMMs reach on one TP rank, FLOP-weighted harmonic mean.

    ``tokens``: rows of each GEMM (micro-batch x local sequence; sequence-parallel layers gather the full local
    sequence before each GEMM). Megatron-LM's fused QKV and (gated) fc1 GEMMs, the output projection, fc2 and the
    vocabulary-parallel LM head; an MoE expert's GEMMs see ``tokens x top-k / experts`` rows each. Memoised.
    """
    key = (id(arch), id(curve), tokens, tp)
    return _MODEL_GEMM.get_or_make(key, (arch, curve), _model_gemm_fraction, arch, tokens, tp, curve)


def _model_gemm_fraction(arch: ModelArchitecture, tokens: float, tp: int, curve: GemmShapeCurve) -> float:
    """:func:`model_gemm_fraction`, computed."""
    t = max(tp, 1)
    h, d = float(arch.hidden_size), float(arch.head_dim_eff)
    q = arch.attention_heads * d
    kv = 2.0 * arch.kv_heads * d
    moe = arch.moe_experts > 1
    ffn = float(arch.expert_ffn_size if moe else arch.ffn_size)
    up = (2.0 if arch.gated_mlp else 1.0) * ffn
    expert_tokens = tokens * arch.experts_per_token / arch.moe_experts if moe else tokens
    routed = arch.experts_per_token if moe else 1
    # (rows, d_in, d_out, parameters each token multiplies) per layer, then the LM head once per model.
    matrices = [
        (tokens, h, (q + kv) / t, h * (q + kv) / t * arch.layers),
        (tokens, q / t, h, q * h / t * arch.layers),
        (expert_tokens, h, up / t, h * up / t * routed * arch.layers),
        (expert_tokens, ffn / t, h, ffn * h / t * routed * arch.layers),
        (tokens, h, arch.vocab_size / t, h * arch.vocab_size / t),
    ]
    total = sum(w for *_, w in matrices)
    time = sum(w / linear_shape_fraction(rows, d_in, d_out, curve) for rows, d_in, d_out, w in matrices)
    return total / time if time > 0 else 1.0


def attention_span_tokens(arch: ModelArchitecture, seq_len: float) -> float:
    """``l·s`` summed over layers: keys each token attends to per layer, a local layer's at most its window."""
    if arch.attention_window is None:
        return arch.softmax_layer_count * seq_len  # linear-attention layers attend to no keys
    local = arch.local_layer_count
    return (arch.layers - local) * seq_len + local * min(seq_len, float(arch.attention_window))


def causal_pairs_per_token(arch: ModelArchitecture, seq_len: float) -> float:
    """(query, key) pairs a causal kernel computes per token, summed over layers: half the sequence for a global
    layer (the masked triangle skipped), the window for a local layer whose window is shorter than the sequence."""
    local = arch.local_layer_count if arch.attention_window is not None else 0
    window = float(arch.attention_window) if arch.attention_window is not None else seq_len
    local_keys = window if window < seq_len else seq_len / 2.0
    return (arch.softmax_layer_count - local) * seq_len / 2.0 + local * local_keys


def attention_core_s_per_token(
    arch: ModelArchitecture,
    seq_len: float,
    *,
    forward_repeats: float,
    flash: bool,
    attention_flops_per_s: float,
    gemm_flops_per_s: float,
    bytes_per_s: float,
) -> float:
    """Seconds the attention core of every layer takes per token on one GPU holding all heads (divide by TP).

    ``forward_repeats``: extra forward passes of the core (full recompute of that share of layers).
    FlashAttention: the causal pairs at ``FLASH_FWD_FLOPS x (1 + repeats) + FLASH_BWD_FLOPS`` per pair and width,
    at ``attention_flops_per_s``. Materialised: every pair's ``4 x (1 + repeats) + 8`` FLOPs in batched GEMMs at
    ``gemm_flops_per_s``, plus the score tensor's passes through memory at ``bytes_per_s``.
    """
    width = attention_width(arch)
    if flash:
        pairs = causal_pairs_per_token(arch, seq_len)
        flops = pairs * width * (FLASH_FWD_FLOPS * (1.0 + forward_repeats) + FLASH_BWD_FLOPS)
        return flops / attention_flops_per_s
    keys = attention_span_tokens(arch, seq_len)
    flops = keys * width * (4.0 * (1.0 + forward_repeats) + 8.0)
    score_bytes = keys * arch.attention_heads * (SCORE_BYTES_FWD * (1.0 + forward_repeats) + SCORE_BYTES_BWD)
    return flops / gemm_flops_per_s + score_bytes / bytes_per_s
