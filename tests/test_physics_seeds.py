"""The worked examples of shared/seeds/, each under the seed's own assumptions.

Where a seed's arithmetic is wrong the test follows the physics; docs/model.md ("Where the seeds differ")
says where and why.
"""

from __future__ import annotations

from typing import Any

import pytest

from clusterplan.evaluation.evaluate import training_job
from clusterplan.physics import cost, memory
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.serving import RequestShape, estimate_serving, single_stream_tokens_per_s
from clusterplan.physics.training import estimate_training
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.requirement.schema import TrainingWorkload
from clusterplan.units import BYTES_PER_GB, bytes_to_gib
from test_physics_fixtures import A100, H100, LLAMA2_7B, LLAMA2_13B, LLAMA2_70B, RTX4090

A = Assumptions()


# ---------------------------------------------------------------- training memory (seed 002)


def test_7b_mixed_precision_adamw_is_126_gb() -> None:
    per_param = sum(memory.model_state_bytes_per_param("bf16", "adamw"))
    assert per_param == 18
    assert memory.weights_bytes(7e9, per_param) / BYTES_PER_GB == pytest.approx(126)


def test_13b_with_activations_at_twice_the_weights_is_286_gb() -> None:
    state = memory.weights_bytes(13e9, sum(memory.model_state_bytes_per_param("bf16", "adamw")))
    activations = 2 * memory.weights_bytes(13e9, 2)  # the seed's "activations roughly 2x weights"
    assert (state + activations) / BYTES_PER_GB == pytest.approx(286)
    # the seed's estimator prints the same bytes in GiB under a "GB" label: 266.4
    assert bytes_to_gib(state + activations) == pytest.approx(266.4, abs=0.05)


def test_7b_on_one_a100_does_not_fit_but_two_with_zero3_do() -> None:
    work = TrainingWorkload(kind="training", tokens=1e9, deadline=86400 * 30, sequence_length=2048,
                            global_batch_tokens=2048 * 16)  # fmt: skip
    kw: dict[str, Any] = dict(job=training_job(work), layout=Layout(recompute="full"), nodes_gpus_per_node=8,
                              assumptions=A)  # fmt: skip
    one = estimate_training(LLAMA2_7B, A100, settings=TrainingSettings(dp=1, zero_stage=3), **kw)
    two = estimate_training(LLAMA2_7B, A100, settings=TrainingSettings(dp=2, zero_stage=3), **kw)
    assert not one.feasible and one.bound == "memory_capacity"
    assert two.feasible


def test_13b_zero_on_a100_and_rtx4090() -> None:
    work = TrainingWorkload(kind="training", tokens=260e9, deadline=86400 * 60, sequence_length=2048,
                            global_batch_tokens=2048 * 64)  # fmt: skip
    kw: dict[str, Any] = dict(
        job=training_job(work), layout=Layout(recompute="full"), nodes_gpus_per_node=8, assumptions=A
    )
    # 2x A100 ZeRO-2: 2 + 16/2 = 10 B/param = 130 GB per GPU: does not fit (the seed calls it "tight")
    assert not estimate_training(LLAMA2_13B, A100, settings=TrainingSettings(dp=2, zero_stage=2), **kw).feasible
    # 4x A100 ZeRO-3: 18/4 = 4.5 B/param = 58.5 GB of state per GPU: fits (the seed's "~72 GB")
    four = estimate_training(LLAMA2_13B, A100, settings=TrainingSettings(dp=4, zero_stage=3), **kw)
    assert four.feasible
    state = four.memory.weights_gib + four.memory.gradients_gib + four.memory.optimizer_gib
    # beside the shards, ZeRO-3 holds two gathered 16-bit layers and the running layer's fp32 gradient whole:
    # 4h² attention + 3·h·ffn MLP + two norms = 317.2M parameters a layer, 2 x 2 + 4 bytes each
    layer = 4 * 5120**2 + 3 * 5120 * 13824 + 2 * 5120
    assert state == pytest.approx(bytes_to_gib(memory.weights_bytes(13.0e9, 4.5) + layer * 8), rel=0.005)
    # 8x RTX 4090 ZeRO-3: 18/8 = 2.25 B/param = 29 GB of state per 24 GB card: the seed says it fits; it does not
    assert not estimate_training(LLAMA2_13B, RTX4090, settings=TrainingSettings(dp=8, zero_stage=3), **kw).feasible


# ---------------------------------------------------------------- inference memory (seed 002)


def test_70b_fp16_weights_about_140_gb() -> None:
    assert memory.weights_bytes(70e9, 2) / BYTES_PER_GB == 140
    real = memory.serving_weight_bytes_per_gpu(LLAMA2_70B, tp=1, pp=1, quant="fp16")
    assert real / BYTES_PER_GB == pytest.approx(138, abs=1)  # Llama-2-70B has 68.98B parameters


def test_70b_kv_at_batch_32_and_8k_is_85_9_gb() -> None:
    fp16 = Layout(quant="fp16", kv_precision="fp16")
    mem = memory.serving_memory(LLAMA2_70B, H100, fp16, batch=32, context_tokens=8192, assumptions=A)
    assert mem.kv_cache_gib * 2**30 / BYTES_PER_GB == pytest.approx(85.9, abs=0.05)
    half = memory.serving_memory(LLAMA2_70B, H100, fp16, batch=32, context_tokens=4096, assumptions=A)
    assert half.kv_cache_gib * 2**30 / BYTES_PER_GB == pytest.approx(42.9, abs=0.05)  # seed: "~42 GB"


def test_70b_int4_fits_one_a100_fp16_does_not() -> None:
    kw: dict[str, Any] = dict(context_tokens=4096, assumptions=A)
    assert memory.max_batch_by_memory(LLAMA2_70B, A100, Layout(quant="int4", kv_precision="fp16"), **kw) > 8
    assert memory.max_batch_by_memory(LLAMA2_70B, A100, Layout(quant="fp16", kv_precision="fp16"), **kw) == 0


# ---------------------------------------------------------------- decode speed (seed 002)


@pytest.mark.parametrize(
    ("bandwidth", "model_gb", "expected"),
    [(3350, 14, 239), (2000, 14, 143), (1000, 14, 71), (936, 14, 67), (3350, 140, 24), (2000, 140, 14)],
)
def test_single_stream_bandwidth_bound(bandwidth: float, model_gb: float, expected: float) -> None:
    assert single_stream_tokens_per_s(model_gb * 1e9, bandwidth) == pytest.approx(expected, abs=0.5)


def test_rtx4090_at_70_percent_is_50_tokens_per_s() -> None:
    assert single_stream_tokens_per_s(14e9, 1000, 0.7) == pytest.approx(50)


def test_7b_fp16_on_h100_estimate_near_240() -> None:
    full = Assumptions.model_validate({"memory_bandwidth_efficiency": 1.0, "decode_step_overhead_s": 1e-12})
    fp16 = Layout(quant="fp16", kv_precision="fp16")
    e = estimate_serving(LLAMA2_7B, H100, fp16, RequestShape(1, 2, 3), batch=1, assumptions=full)
    # Llama-2-7B streams 13.2 GB per token (6.74B parameters less the input embedding), not 14 GB
    assert 1 / e.decode_step_s == pytest.approx(253, abs=2)


# ---------------------------------------------------------------- cost (seeds 000 and 002)


def test_rtx4090_cost_per_million_tokens() -> None:
    # seed 002 cost_per_1m_tokens: $1,600, 70 tok/s, 450 W, 70 % utilisation, 3 years, $0.12/kWh
    got = cost.owned_cost_per_million_tokens_usd(hardware_usd=1600, lifetime_years=3, power_w=450,
                                                 usd_per_kwh=0.12, tokens_per_s=70, utilisation=0.7)  # fmt: skip
    assert got == pytest.approx(0.6513, abs=5e-4)
    h100 = cost.owned_cost_per_million_tokens_usd(hardware_usd=30000, lifetime_years=3, power_w=700,
                                                  usd_per_kwh=0.12, tokens_per_s=239, utilisation=0.7)  # fmt: skip
    assert h100 == pytest.approx(2.035, abs=1e-3)


def test_a100_rent_versus_buy() -> None:
    hours = cost.gpu_hours(3, 0.7)
    assert hours == pytest.approx(18_396)
    assert cost.cloud_cost_usd(40.96 / 8, 1, hours) == pytest.approx(94_187.52)
    b = cost.rent_vs_buy_breakeven(capital_usd=12_000, cloud_usd_per_hour=5.12, horizon_months=36, utilisation=0.7)
    assert b.rented_usd == pytest.approx(94_187.52)
    assert b.owned_usd == 12_000
    assert b.busy_hours == pytest.approx(2343.75)
    assert b.utilisation_over_horizon == pytest.approx(0.0892, abs=1e-4)


def test_rtx4090_rented_at_two_dollars() -> None:
    # seed 000: "$2 per hour hits $1,440 monthly" uses 720 h; clusterplan's month is 730 h
    assert cost.cloud_cost_usd(2.0, 1, cost.serving_hours_per_month()) == pytest.approx(1460)
    assert cost.cloud_cost_usd(2.0, 1, 720) == pytest.approx(1440)


def test_p4de_month() -> None:
    # seed 002 Q4: p4de.24xlarge at $41/h "roughly $30k/month"
    assert cost.cloud_cost_usd(41, 1, cost.serving_hours_per_month()) == pytest.approx(29_930)


def test_70b_int4_does_not_fit_an_a100_40gb() -> None:
    # seed 002 Q4 plans "20 single-GPU A100 instances = 20 A100 40GB" for 70B at INT4
    a100_40 = A100.model_copy(update={"id": "a100-40gb", "memory_gb": 40, "memory_gib": 39.4})
    int4 = Layout(quant="int4", kv_precision="fp16")
    kw: dict[str, Any] = dict(context_tokens=1200, assumptions=A)
    assert memory.serving_weight_bytes_per_gpu(LLAMA2_70B, tp=1, pp=1, quant="int4") / BYTES_PER_GB > 36
    assert memory.max_batch_by_memory(LLAMA2_70B, a100_40, int4, **kw) == 0
    assert memory.max_batch_by_memory(LLAMA2_70B, A100, int4, **kw) > 32
