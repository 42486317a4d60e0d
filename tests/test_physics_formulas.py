"""Each physics formula against a hand-computed value."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from clusterplan.catalog.schema import ModelArchitecture
from clusterplan.physics import comm, memory, moe, rules, serving, training
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.wording.reasons import render_reasons
from test_physics_fixtures import A100, H100, L40S, LLAMA2_70B, RTX4090, T4

TINY = ModelArchitecture(
    name="tiny", layers=2, hidden_size=8, attention_heads=2, kv_heads=2, ffn_size=16, vocab_size=10, gated_mlp=False
)


# ---------------------------------------------------------------- memory


def serving_rules(*args: Any) -> list[str]:
    """The serving rules' reasons as the sentences a user reads."""
    return render_reasons(rules.serving_rule_reasons(*args))


def training_rules(*args: Any, **kwargs: Any) -> list[str]:
    """The training rules' reasons as the sentences a user reads."""
    return render_reasons(rules.training_rule_reasons(*args, **kwargs))


def test_int4_bytes_per_param_include_group_scale_and_zero() -> None:
    assert memory.weight_bytes_per_param("int4", int4_group_size=128) == pytest.approx(0.5 + 2.5 / 128)
    assert memory.weight_bytes_per_param("fp8") == 1.0
    assert memory.weight_bytes_per_param("bf16") == 2.0


def test_kv_cache_bytes_llama2_70b_seed_example() -> None:
    # 80 layers x 2 x 8 KV heads x 128 x 2 B x 8,192 tokens x 32 sequences
    assert memory.kv_cache_bytes(80, 8, 128, 2, 8192 * 32) == 85_899_345_920


def test_kv_heads_replicate_beyond_tp() -> None:
    assert memory.kv_heads_per_gpu(8, 4) == 2
    assert memory.kv_heads_per_gpu(8, 16) == 1
    assert memory.layers_per_stage(80, 3) == 27


def test_serving_activation_coefficients() -> None:
    assert memory.serving_activation_bytes(4096, 1, 8192) == 2 * 8192 * 4096 * 10
    assert memory.serving_activation_bytes(4096, 4, 8192) == 2 * 8192 * 4096 * 5


def test_korthikanti_activations() -> None:
    sbh = 2048 * 1 * 4096
    shape = memory.LayerShape(hidden_size=4096, attention_heads=32, ffn_size=16384, gated_mlp=False)
    kw: dict[str, Any] = dict(seq_len=2048, micro_batch=1)
    # no parallelism, no recompute, scores materialised: s·b·h·(34 + 5·a·s/h)
    got = memory.training_activation_bytes_per_layer(
        shape, **kw, tp=1, sequence_parallel=False, recompute="none", flash_attention=False
    )
    assert got == pytest.approx(sbh * (34 + 5 * 32 * 2048 / 4096))
    # TP 8 without SP, selective: s·b·h·(10 + 24/t)
    got = memory.training_activation_bytes_per_layer(
        shape, **kw, tp=8, sequence_parallel=False, recompute="selective", flash_attention=True
    )
    assert got == pytest.approx(sbh * (10 + 24 / 8))
    # TP 8 with SP, selective: s·b·h·34/t
    got = memory.training_activation_bytes_per_layer(
        shape, **kw, tp=8, sequence_parallel=True, recompute="selective", flash_attention=True
    )
    assert got == pytest.approx(sbh * 34 / 8)
    # full recompute keeps the layer input only
    got = memory.training_activation_bytes_per_layer(
        shape, **kw, tp=1, sequence_parallel=False, recompute="full", flash_attention=True
    )
    assert got == pytest.approx(2 * sbh)


def test_gated_mlp_keeps_a_third_ffn_tensor() -> None:
    kw: dict[str, Any] = dict(seq_len=1, micro_batch=1, tp=1, sequence_parallel=False, recompute="selective",
                              flash_attention=True)  # fmt: skip
    gelu = memory.training_activation_bytes_per_layer(memory.LayerShape(100, 1, 300, gated_mlp=False), **kw)
    gated = memory.training_activation_bytes_per_layer(memory.LayerShape(100, 1, 300, gated_mlp=True), **kw)
    assert gelu == pytest.approx(100 * (18 + 4 * 3))  # Megatron-LM: 18 + 4·ffn/h
    assert gated == pytest.approx(100 * (18 + 6 * 3))


def test_model_state_and_zero_sharding() -> None:
    assert sum(memory.model_state_bytes_per_param("bf16", "adamw")) == 18
    assert sum(memory.model_state_bytes_per_param("fp32", "adamw")) == 16
    w, g, o = memory.model_state_bytes_per_param("bf16", "adamw")
    assert sum(memory.zero_sharded_bytes_per_param(w, g, o, stage=1, dp=4)) == pytest.approx(2 + 4 + 3)
    assert sum(memory.zero_sharded_bytes_per_param(w, g, o, stage=2, dp=4)) == pytest.approx(2 + 1 + 3)
    assert sum(memory.zero_sharded_bytes_per_param(w, g, o, stage=3, dp=4)) == pytest.approx(18 / 4)


def test_max_batch_by_memory_fills_free_memory() -> None:
    a = Assumptions()
    kw: dict[str, Any] = dict(context_tokens=4096, assumptions=a)
    int4 = Layout(quant="int4", kv_precision="fp16")
    b = memory.max_batch_by_memory(LLAMA2_70B, A100, int4, **kw)
    assert b > 0
    fits = memory.serving_memory(LLAMA2_70B, A100, int4, batch=b, **kw)
    over = memory.serving_memory(LLAMA2_70B, A100, int4, batch=b + 1, **kw)
    assert fits.fits and not over.fits
    assert memory.max_batch_by_memory(LLAMA2_70B, A100, replace(int4, quant="fp16"), **kw) == 0


# ---------------------------------------------------------------- FLOPs


def test_prefill_and_decode_flops_by_hand() -> None:
    # per layer: attention 8·4·(2·2 + 2·2) = 256, MLP 2·8·16 = 256; two layers = 1,024 non-embedding
    assert serving.prefill_flops(TINY, 4) == 2 * 1024 * 4 + 2 * 2 * 16 * 8 + 2 * 10 * 8
    assert serving.decode_flops_per_token(TINY, 4) == 2 * 1024 + 4 * 2 * 4 * 8 + 2 * 10 * 8


def test_training_flops_six_n_and_recompute() -> None:
    n = 1024 + 10 * 8  # non-embedding + LM head
    attention = 12 * 2 * 4 * 8
    assert training.model_flops_per_token(TINY, 4) == 6 * n + attention
    assert training.hardware_flops_per_token(TINY, 4, recompute="full") == 8 * n + attention + 4 * 2 * 4 * 8
    assert training.hardware_flops_per_token(TINY, 4, recompute="selective") == 6 * n + attention
    lora = training.model_flops_per_token(TINY, 4, method="lora", lora_rank=1)
    adapters = 2 * training.lora_params_per_layer(TINY, 1)
    assert lora == 4 * n + 6 * adapters + attention


def test_lora_params_all_linear_layers() -> None:
    # q: r(8+8), k,v: 2r(8+8), o: r(8+8), MLP 2 matrices: 2r(8+16)
    assert training.lora_params_per_layer(TINY, 1) == 16 + 32 + 16 + 48


def test_experts_touched() -> None:
    assert moe.experts_touched(1, 1, 100) == 1
    assert moe.experts_touched(8, 2, 1) == pytest.approx(2)
    assert moe.experts_touched(8, 2, 1000) == pytest.approx(8)


def test_pipeline_bubble() -> None:
    assert training.pipeline_bubble_fraction(1, 8) == 0
    assert training.pipeline_bubble_fraction(4, 12) == pytest.approx(3 / 15)


# ---------------------------------------------------------------- communication


def test_ring_collectives() -> None:
    link = comm.Link("nvlink", 450, 8e-6)
    assert comm.ring_allreduce_s(1e9, 8, link, 1.0) == pytest.approx(8e-6 + 2 * 7 / 8 * 1e9 / 450e9)
    assert comm.ring_allgather_s(1e9, 4, comm.Link("network", 50, 20e-6), 1.0) == pytest.approx(20e-6 + 0.015)
    assert comm.ring_allreduce_s(1e9, 1, link, 1.0) == 0
    assert comm.p2p_s(1e6, link, 0.5) == pytest.approx(8e-6 + 1e6 / 225e9)


def test_link_choice() -> None:
    a = Assumptions()
    assert comm.link_for_group(H100, group_size=8, spans_nodes=False, assumptions=a).kind == "nvlink"
    assert comm.link_for_group(H100, group_size=8, spans_nodes=False, assumptions=a).bandwidth_gb_per_s == 450
    assert comm.link_for_group(L40S, group_size=2, spans_nodes=False, assumptions=a).kind == "pcie"
    assert comm.link_for_group(H100, group_size=16, spans_nodes=True, assumptions=a).kind == "network"
    slow = comm.link_for_group(RTX4090, group_size=16, spans_nodes=True, assumptions=a)
    assert slow.kind == "pcie" and slow.bandwidth_gb_per_s == 32  # PCIe 4 x16 one way is slower than 50 GB/s IB
    assert comm.link_for_group(H100, group_size=1, spans_nodes=False, assumptions=a) is comm.NO_LINK


def test_multi_rail_rings_across_nodes() -> None:
    """8 GPUs of the group per node drive 8 NICs: min(NVLink 450, 8 x 50) = 400 GB/s (NVIDIA/nccl-tests#29)."""
    a = Assumptions()
    one = comm.link_for_group(H100, group_size=64, spans_nodes=True, assumptions=a, members_per_node=1)
    eight = comm.link_for_group(H100, group_size=64, spans_nodes=True, assumptions=a, members_per_node=8)
    two = comm.link_for_group(H100, group_size=64, spans_nodes=True, assumptions=a, members_per_node=2)
    assert one.bandwidth_gb_per_s == 50 and eight.bandwidth_gb_per_s == 400 and two.bandwidth_gb_per_s == 100
    assert eight.kind == "network" and eight.latency_s == a.network_latency_s
    nvlink_bound = comm.link_for_group(H100, group_size=64, spans_nodes=True, assumptions=a.model_copy(
        update={"inter_node_bandwidth_gb_per_s": 100.0}), members_per_node=8)  # fmt: skip
    assert nvlink_bound.bandwidth_gb_per_s == 450


# ---------------------------------------------------------------- rules


def test_rules_read_as_sentences() -> None:
    assert serving_rules(LLAMA2_70B, L40S, 4, 1, "fp8", "fp8") == [
        "L40S: tensor parallel 4 needs NVLink; L40S has PCIe only"
    ]
    reasons = serving_rules(LLAMA2_70B, A100, 1, 1, "fp8", "fp16")
    assert reasons == ["A100 SXM 80GB: fp8 weights need native FP8 tensor cores (ampere has none)"]
    assert any("bf16" in r for r in serving_rules(LLAMA2_70B, T4, 1, 1, "bf16", "fp16"))
    assert serving_rules(LLAMA2_70B, T4, 1, 1, "int4", "fp16") == []
    assert any("does not divide" in r for r in serving_rules(LLAMA2_70B, H100, 3, 1, "bf16", "bf16"))
    assert any("exceeds its 80 layers" in r for r in serving_rules(LLAMA2_70B, H100, 1, 81, "bf16", "bf16"))
    assert any("domain" in r for r in serving_rules(LLAMA2_70B, H100, 16, 1, "bf16", "bf16"))


def test_precision_support() -> None:
    assert rules.half_precision(T4) == "fp16"
    assert rules.half_precision(A100) == "bf16"
    assert rules.compute_precision_for_weights(A100, "int4") == "bf16"
    assert rules.compute_precision_for_weights(T4, "int8") == "fp16"
    assert rules.compute_precision_for_weights(H100, "fp8") == "fp8"
    assert any("QLoRA" in r for r in training_rules(
        LLAMA2_70B, T4.model_copy(update={"compute_capability": "7.0"}), tp=1, pp=1, dp=1, zero_stage=0,
        precision="fp16", method="qlora",
    ))  # fmt: skip


def test_peak_falls_back_to_other_half_precision() -> None:
    assert serving.peak_tflops(T4, "bf16") == 65
    assert math.isclose(serving.peak_tflops(H100, "fp8"), 1979)
