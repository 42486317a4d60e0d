"""Kernel efficiencies of a training step: GEMMs by shape, the attention core (physics/kernels.py)."""

from __future__ import annotations

import pytest

from clusterplan.catalog.load import shipped_kernels
from clusterplan.evaluation.evaluate import training_job
from clusterplan.physics import kernels
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.training import estimate_training
from clusterplan.physics.training_comm import reduced_grad_bytes
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.requirement.schema import TrainingWorkload
from test_physics_fixtures import A100, H100, LLAMA2_7B, LLAMA2_70B, RTX4090

AMPERE, HOPPER = shipped_kernels()["ampere"].gemm_shape, shipped_kernels()["hopper"].gemm_shape


def test_gemm_fraction_is_the_fitted_curve_and_grows_toward_the_plateau() -> None:
    # 1 / (1 + a/M + a/N + b/K) with the A100 fit a = 312, b = 486.
    assert kernels.gemm_shape_fraction(2048, 2048, 2048, AMPERE) == pytest.approx(1 / (1 + 2 * 312 / 2048 + 486 / 2048))
    small = kernels.gemm_shape_fraction(2048, 2304, 2304, AMPERE)
    assert small < kernels.gemm_shape_fraction(2048, 9600, 25600, AMPERE) < 1.0
    assert kernels.gemm_shape_fraction(1e9, 1e9, 1e9, HOPPER) == pytest.approx(1.0, abs=1e-6)
    # a hand-built row (no catalog resolved it) reads the shipped row of its architecture, matched by name, any case
    assert kernels.gemm_curve(H100) == HOPPER and kernels.gemm_curve(A100) == AMPERE
    assert kernels.gemm_curve(RTX4090) == AMPERE  # 'ada' no row lists: the default row


def test_a_layers_gemms_are_narrower_under_tensor_parallelism_and_with_fewer_tokens() -> None:
    tp1 = kernels.model_gemm_fraction(LLAMA2_70B, 4096, 1, HOPPER)
    tp8 = kernels.model_gemm_fraction(LLAMA2_70B, 4096, 8, HOPPER)
    assert 0.5 < tp8 < tp1 < 1.0
    assert kernels.model_gemm_fraction(LLAMA2_70B, 1024, 8, HOPPER) < tp8
    # A 7B model's GEMMs reach less of the plateau than a 70B's at the same layout (Megatron-LM 2021's size trend).
    assert kernels.model_gemm_fraction(LLAMA2_7B, 4096, 1, AMPERE) < kernels.model_gemm_fraction(
        LLAMA2_70B, 4096, 1, AMPERE
    )


def test_flash_attention_runs_the_causal_half_and_materialised_attention_costs_memory_passes() -> None:
    assert kernels.causal_pairs_per_token(LLAMA2_7B, 4096) == 32 * 2048
    rate, bw = 300e12, 1.6e12
    flash = kernels.attention_core_s_per_token(
        LLAMA2_7B, 4096, forward_repeats=0.0, flash=True, attention_flops_per_s=rate, gemm_flops_per_s=rate,
        bytes_per_s=bw,
    )  # fmt: skip
    assert flash == pytest.approx(32 * 2048 * 4096 * 14.0 / rate)
    dense = kernels.attention_core_s_per_token(
        LLAMA2_7B, 4096, forward_repeats=0.0, flash=False, attention_flops_per_s=rate, gemm_flops_per_s=rate,
        bytes_per_s=bw,
    )  # fmt: skip
    score_bytes = 32 * 4096 * 32 * (kernels.SCORE_BYTES_FWD + kernels.SCORE_BYTES_BWD)  # l·s keys x heads
    assert dense == pytest.approx(32 * 4096 * 4096 * 12.0 / rate + score_bytes / bw)
    assert dense > 2 * flash


def test_attention_kernel_efficiency_matters_at_long_context_only() -> None:
    def compute_s(seq: int, efficiency: float) -> float:
        work = TrainingWorkload(kind="training", tokens=1e9, deadline=86400, sequence_length=seq,
                                global_batch_tokens=seq * 8)  # fmt: skip
        a = Assumptions(attention_kernel_efficiency={"Hopper": efficiency})
        return estimate_training(LLAMA2_7B, H100, job=training_job(work), layout=Layout(recompute="full"),
                                 settings=TrainingSettings(dp=8, zero_stage=3), nodes_gpus_per_node=8,
                                 assumptions=a).compute_time_s  # fmt: skip

    assert compute_s(2048, 0.175) / compute_s(2048, 0.35) < 1.25
    assert compute_s(65536, 0.175) / compute_s(65536, 0.35) > 1.5
    assert Assumptions().attention_fraction("hopper") == 0.35
    assert Assumptions().attention_fraction("CDNA 3 (gfx942)") == pytest.approx(0.45)


def test_megatron_2021_materialised_attention_and_fp16_gradients() -> None:
    work = TrainingWorkload(kind="training", tokens=1e9, deadline=86400, sequence_length=2048,
                            global_batch_tokens=2048 * 64)  # fmt: skip

    def est(a: Assumptions, workload: TrainingWorkload = work) -> tuple[float, float]:
        e = estimate_training(LLAMA2_7B, A100, job=training_job(workload), layout=Layout(recompute="full"),
                              settings=TrainingSettings(dp=16, zero_stage=0), nodes_gpus_per_node=8,
                              assumptions=a)  # fmt: skip
        return e.compute_time_s, e.exposed_dp_s

    flash, _ = est(Assumptions())
    materialised, _ = est(Assumptions(flash_attention=False))
    assert materialised > 1.1 * flash
    # fp16 training all-reduces fp16 gradients (Megatron-LM), bf16 fp32 main gradients: half the bytes.
    assert reduced_grad_bytes("fp16") == 2.0 and reduced_grad_bytes("bf16") == 4.0
