"""Activation and model-state memory per GPU as Megatron-LM accounts it.

Megatron-LM ``megatron/training/theoretical_memory_usage.py`` (``compute_activation_memory``, the formula of
Korthikanti et al. 2022, arXiv:2205.05198, Table 2, with sequence parallelism and selective recompute): the first
pipeline stage holds ``s·b·h·(18 + 4·ffn/h)`` bytes a layer for ``L`` layers (``L/p`` layers times ``p``
micro-batches in flight), plus the embedding's ids ``8·s·b·p`` and dropout mask ``s·b·h·p``; the interleaved
schedule multiplies it by ``1 + (p-1)/(p·v)``; 1F1B with ``m < p`` micro-batches by ``m/p``; everything divides by
TP. Context parallelism splits each sequence: ``s`` is ``s/cp`` on every rank. The distributed optimizer keeps
``6 + 12/d`` bytes per parameter. Each expected figure below is computed here by hand from those formulas on a
GPT-3-style model (GELU MLP, ``ffn = 4h``: the 34 of the paper), never read back from the code.
"""

from __future__ import annotations

import pytest

from clusterplan.catalog.schema import ModelArchitecture
from clusterplan.physics import training
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.training_job import TrainingJob, TrainingSettings
from test_physics_fixtures import H100

# GPT-3 175B (Brown et al. 2020, Table 2.1; Korthikanti et al. 2022 Table 3's 175B): GELU MLP of 4h.
GPT3 = ModelArchitecture(
    name="GPT-3 175B", layers=96, hidden_size=12288, attention_heads=96, kv_heads=96, ffn_size=49152,
    vocab_size=51200, gated_mlp=False, max_context=2048, published_params=175e9,
)  # fmt: skip
A = Assumptions()  # FlashAttention on: the 5·a·s²·b score term is never stored (as under selective recompute)


def job(seq: int, sequences_per_step: int) -> TrainingJob:
    return TrainingJob(
        tokens=1e9, deadline_s=86400.0, sequence_length=seq, global_batch_tokens=seq * sequences_per_step,
        method="full", lora_rank=0, precision="bf16", optimizer="adamw",
    )  # fmt: skip


def fit(*, tp: int, pp: int, cp: int = 1, v: int = 1, dp: int, seq: int, sequences: int) -> training.TrainingFit:
    layout = Layout(tp=tp, pp=pp, cp=cp, virtual_stages=v, recompute="selective")
    settings = TrainingSettings(dp=dp, zero_stage=1, micro_batch=1)
    return training.training_fit(
        GPT3, H100, job=job(seq, sequences), layout=layout, settings=settings, nodes_gpus_per_node=8, assumptions=A
    )


def megatron_first_stage_bytes(*, s: float, b: int, t: int, p: int, v: int | None, m: int) -> float:
    """``compute_activation_memory`` for p > 1, by hand (GELU: 18 + 4·ffn/h = 34)."""
    h, layers = 12288, 96
    total = s * b * h * 34 * layers + 8 * s * b * p + s * b * h * p
    if v is not None:
        total *= 1 + (p - 1) / (p * v)
    else:
        total *= min(1, m / p)
    return total / t


def test_sequence_parallel_1f1b_holds_what_megatron_accounts() -> None:
    # TP 8 with SP, PP 8, 1F1B, 2,048 tokens, 64 micro-batches a step: the first stage holds 8 in flight.
    f = fit(tp=8, pp=8, dp=4, seq=2048, sequences=256)
    expected = megatron_first_stage_bytes(s=2048, b=1, t=8, p=8, v=None, m=64)
    assert expected == pytest.approx(96 * 2048 * 12288 * 34 / 8, rel=3e-3)  # 12 layers x 8 in flight x 34sbh/t
    assert f.activations.total == pytest.approx(expected, rel=1e-9)


def test_context_parallel_splits_each_sequence_as_megatron_does() -> None:
    # TP 4, CP 2, PP 4 at 8,192 tokens: each rank holds s/cp = 4,096 tokens of every sequence.
    f = fit(tp=4, pp=4, cp=2, dp=4, seq=8192, sequences=64)
    expected = megatron_first_stage_bytes(s=4096, b=1, t=4, p=4, v=None, m=16)
    assert f.activations.total == pytest.approx(expected, rel=1e-9)
    whole = fit(tp=4, pp=4, cp=1, dp=8, seq=8192, sequences=128)
    assert f.activations.total == pytest.approx(whole.activations.total / 2, rel=1e-9)


def test_the_interleaved_schedule_holds_p_plus_p_minus_1_over_v_micro_batches() -> None:
    # TP 8, PP 8 with 4 virtual stages (3 layers a chunk): 8 + 7/4 micro-batches of the stage's activations.
    f = fit(tp=8, pp=8, v=4, dp=4, seq=2048, sequences=256)
    assert f.in_flight == pytest.approx(8 + 7 / 4)
    expected = megatron_first_stage_bytes(s=2048, b=1, t=8, p=8, v=4, m=64)
    assert f.activations.total == pytest.approx(expected, rel=1e-9)


def test_fewer_micro_batches_than_stages_hold_only_those() -> None:
    # 1F1B with m = 2 < p = 8 micro-batches a step: Megatron discounts by m/p.
    f = fit(tp=8, pp=8, dp=64, seq=2048, sequences=128)
    expected = megatron_first_stage_bytes(s=2048, b=1, t=8, p=8, v=None, m=2)
    assert f.activations.total == pytest.approx(expected, rel=1e-9)


def test_the_distributed_optimizer_keeps_6_plus_12_over_d_bytes_a_parameter() -> None:
    f = fit(tp=8, pp=8, dp=16, seq=2048, sequences=256)
    params = f.state.trainable
    state = f.mem.weights_gib + f.mem.gradients_gib + f.mem.optimizer_gib
    assert state * 2**30 == pytest.approx(params * (6 + 12 / 16), rel=1e-9)


def test_fsdp_holds_the_running_and_the_prefetched_layer_whole() -> None:
    """ZeRO-3 shards 18 B/param over the ranks, but the layer running and the one prefetched are gathered at 16
    bits, and the running layer's fp32 gradient is whole until its reduce-scatter: 2 x 2 + 4 bytes a layer param."""
    layout = Layout(tp=1, pp=1, recompute="full")
    z3 = training.training_fit(
        GPT3, H100, job=job(2048, 64), layout=layout, settings=TrainingSettings(dp=64, zero_stage=3, micro_batch=1),
        nodes_gpus_per_node=8, assumptions=A,
    )  # fmt: skip
    layer = 4 * 12288**2 + 2 * 12288 * 49152 + 2 * 12288  # attention 4h², GELU MLP 2·h·ffn, two norms' weights
    assert z3.stage.layer_p == pytest.approx(layer, rel=1e-3)
    shards = z3.state.trainable * 18 / 64
    state = (z3.mem.weights_gib + z3.mem.gradients_gib + z3.mem.optimizer_gib) * 2**30
    assert state == pytest.approx(shards + z3.stage.layer_p * (2 * 2 + 4), rel=1e-9)
