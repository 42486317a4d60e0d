"""The physics that issue #6's calibration changed, each against a hand-computed value.

* TP all-reduces follow NCCL's cost model (``src/graph/tuning.cc``): the fastest of LL, LL128 and Simple, each
  ``baseLat + 2(n-1)·hwLat + 2(n-1)/n · M / (B · eff · share)``.
* A prompt's pass streams the weights and runs its FLOPs without overlap (Calculon's ``no_overlap`` mode): a
  128-token prefill of Llama-2-70B on 4 H100s, the case the roofline's max put at half the measured 26 ms.
  A decode step is a roofline per kind of kernel (LLM-Viewer): matmuls, then attention.
* Training memory: the 16-bit logits and the one layer rebuilt by full recompute are never live together.
"""

from __future__ import annotations

from typing import Any

import pytest

from clusterplan.evaluation.evaluate import training_job
from clusterplan.physics import comm, memory, params, serving, step
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.training import TRAINING_LOGIT_BYTES, estimate_training
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.requirement.schema import FinetuneWorkload
from test_physics_fixtures import H100, L40S, LLAMA2_70B, LLAMA31_8B, RTX4090

NVLINK = comm.Link("nvlink", 450, 8e-6)  # H100: 900 GB/s bidirectional, one direction per ring


# ---------------------------------------------------------------- NCCL all-reduce


def test_small_decode_message_rides_ll() -> None:
    """16 KiB over 2 GPUs: LL = 6.6 + 2·0.6 µs + 16384 B / (450 GB/s / 4); LL128 and Simple start later."""
    ll = 6.6e-6 + 2 * 0.6e-6 + 16384 / (450e9 * 0.25)
    assert comm.nccl_allreduce_s(16384, 2, NVLINK, 1.0) == pytest.approx(ll)
    assert ll < 14.0e-6 + 2 * 1.9e-6 and ll < 8.4e-6 + 2 * 3.4e-6


def test_prefill_message_rides_ll128_with_a_longer_start() -> None:
    """2 MiB over 4 GPUs (128 tokens of hidden 8192 in bf16): LL128 = 14 + 6·1.9 µs + 1.5 · 2 MiB / (0.92 · 450 GB/s)."""
    msg = 128 * 8192 * 2
    ll128 = 14.0e-6 + 6 * 1.9e-6 + 1.5 * msg / (450e9 * 0.92)
    simple = 8.4e-6 + 6 * 3.4e-6 + 1.5 * msg / 450e9
    ll = 6.6e-6 + 6 * 0.6e-6 + 1.5 * msg / (450e9 * 0.25)
    assert comm.nccl_allreduce_s(msg, 4, NVLINK, 1.0) == pytest.approx(min(ll128, simple, ll))
    assert comm.nccl_allreduce_s(msg, 4, NVLINK, 1.0) == pytest.approx(ll128)  # 33.0 µs, not the flat 8 µs + 7 µs
    assert ll128 == pytest.approx(33.0e-6, abs=0.1e-6)


def test_large_message_rides_simple_and_efficiency_scales_bandwidth() -> None:
    simple = 8.4e-6 + 14 * 3.4e-6 + 1.75 * 1e9 / (450e9 * 0.7)
    assert comm.nccl_allreduce_s(1e9, 8, NVLINK, 0.7) == pytest.approx(simple)


def test_pcie_has_no_ll128_and_network_keeps_the_plain_ring() -> None:
    pcie = comm.Link("pcie", 32, 15e-6)
    assert len(comm.nccl_allreduce_terms(4, pcie, 1.0)) == 2  # LL and Simple only (NCCL: LL128 needs NVLink)
    net = comm.Link("network", 50, 20e-6)
    assert comm.nccl_allreduce_s(1e9, 4, net, 1.0) == pytest.approx(comm.ring_allreduce_s(1e9, 4, net, 1.0))
    assert comm.nccl_allreduce_s(1e6, 1, NVLINK, 1.0) == 0.0
    assert comm.nccl_allreduce_s(0, 8, NVLINK, 1.0) == 0.0


# ---------------------------------------------------------------- prefill without overlap, decode per kernel


def test_llama2_70b_tp4_prefill_of_128_tokens_by_hand() -> None:
    """Regression for the worst latency case (TensorRT-LLM 0.5 measured 26 ms; the roofline's max gave 13 ms).

    FP8 weights on 4 H100s: stream the stage's weights once, run the prompt's FLOPs, 160 NCCL all-reduces of
    128 x 8192 x 2 B, one step overhead. Factors chosen by hand so the numbers are easy to follow.
    """
    a = Assumptions(
        memory_bandwidth_efficiency=1.0, compute_efficiency=0.5, decode_step_overhead_s=1e-3, link_efficiency=1.0,
        architecture_compute_fraction={},
    )  # fmt: skip
    e = serving.estimate_serving(
        LLAMA2_70B, H100, Layout(tp=4, quant="fp8", kv_precision="fp8"), serving.RequestShape(128, 1, 129), batch=1,
        assumptions=a,
    )  # fmt: skip
    attn = memory.attention_params_per_gpu(LLAMA2_70B, 4)
    mlp = params.mlp_params_per_expert(LLAMA2_70B) / 4
    head = LLAMA2_70B.vocab_size * LLAMA2_70B.hidden_size / 4
    weights = (LLAMA2_70B.layers * (attn + mlp) * 1.0 + head * 2.0) / 3350e9
    flops = serving.prefill_flops(LLAMA2_70B, 128) / 4 / (1979e12 * 0.5 * 0.88)  # fp8 matmuls at 0.88 of bf16's share
    allreduces = 2 * 80 * comm.nccl_allreduce_s(128 * 8192 * 2, 4, NVLINK, 1.0)
    assert e.prefill_s == pytest.approx(weights + flops + allreduces + 1e-3, rel=1e-9)
    assert allreduces == pytest.approx(160 * 33.0e-6, rel=0.01)  # 5.3 ms: the TP latency the flat 8 µs missed


def test_decode_step_is_a_roofline_per_kernel_kind() -> None:
    """max(weights, matmul FLOPs) + max(KV cache, attention FLOPs): the attention kernels follow the matmuls."""
    e = serving.estimate_serving(
        LLAMA31_8B, H100, Layout(), serving.RequestShape(512, 256, 768), batch=512,
        assumptions=Assumptions(decode_step_overhead_s=1e-6),
    )  # fmt: skip
    m = e.step_model
    assert m is not None
    weights, kv = m.dense_weights_s + m.head_weights_s + m.expert_weights_s, 512 * m.kv_per_seq_s
    matmuls = 512 * (m.compute_per_seq_s + m.head_compute_per_seq_s)
    attention = 512 * m.attention_compute_per_seq_s
    assert matmuls > weights and kv > attention  # compute-bound matmuls, memory-bound attention
    assert e.decode_step_s == pytest.approx(matmuls + kv + 1e-6)
    # the single roofline over the sums would have hidden the KV stream behind the matmuls
    assert e.decode_step_s > max(weights + kv, matmuls + attention) + 1e-6


def test_prefill_adds_weights_and_flops() -> None:
    assert step.prefill_compute_s(3e-3, 2e-3) == pytest.approx(5e-3)


def test_pcie_tp_uses_pcie_latencies() -> None:
    e = serving.estimate_serving(
        LLAMA31_8B, L40S, Layout(tp=2, quant="fp8", kv_precision="fp8"), serving.RequestShape(128, 2, 130), batch=1,
        assumptions=Assumptions(),
    )  # fmt: skip
    assert e.step_model is not None
    assert e.step_model.tp_allreduce_latency_s == pytest.approx([6.6e-6 + 2 * 1.0e-6, 8.4e-6 + 2 * 5.7e-6])


# ---------------------------------------------------------------- training memory


def test_logits_and_the_recomputed_layer_are_not_live_together() -> None:
    """Llama 3.1 8B LoRA, batch 2 x 2048, full recompute: stored inputs + max(logits, one layer), not the sum (and
    the embedding's ids and dropout mask, 8 + h bytes a token, Megatron-LM's accounting)."""
    work = FinetuneWorkload(kind="finetune", method="lora", lora_rank=8, tokens=1e9, deadline=1e6,
                            sequence_length=2048, global_batch_tokens=4096)  # fmt: skip
    e = estimate_training(LLAMA31_8B, RTX4090, job=training_job(work), layout=Layout(recompute="full"),
                          settings=TrainingSettings(dp=1, zero_stage=0, micro_batch=2), nodes_gpus_per_node=1,
                          assumptions=Assumptions())  # fmt: skip
    shape = memory.LayerShape(hidden_size=4096, attention_heads=32, ffn_size=14336, gated_mlp=True)
    kw: dict[str, Any] = dict(seq_len=2048, micro_batch=2, tp=1, sequence_parallel=False, flash_attention=True)
    stored = 32 * memory.training_activation_bytes_per_layer(shape, **kw, recompute="full")  # 2·s·b·h per layer
    layer = memory.training_activation_bytes_per_layer(shape, **kw, recompute="none")
    logits = TRAINING_LOGIT_BYTES * 4096 * 128256
    assert layer < logits
    embedding = (8 + 4096) * 4096
    assert e.memory.activations_gib == pytest.approx((stored + logits + embedding) / 2**30)
