"""Training and fine-tuning estimates: hand-checked pieces and directional properties."""

from __future__ import annotations

import pytest

from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.evaluation.evaluate import training_job
from clusterplan.physics import kernels, memory
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout, Recompute
from clusterplan.physics.training import estimate_training, model_flops_per_token
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.physics.types import TrainingEstimate
from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from clusterplan.wording.reasons import render_reasons
from test_physics_fixtures import A100, H100, L40S, LLAMA2_7B, LLAMA2_70B, LLAMA31_8B, RTX4090

A = Assumptions()
PRETRAIN = TrainingWorkload(kind="training", tokens=100e9, deadline=30 * 86400, sequence_length=4096,
                            global_batch_tokens=4096 * 512)  # fmt: skip


def train(arch: ModelArchitecture = LLAMA2_7B, gpu: GpuSpec = H100, *, tp: int = 1, pp: int = 1, dp: int = 8,
          zero: int = 1, recompute: Recompute = "selective", mb: int = 1, node: int = 8,
          work: TrainingWorkload | FinetuneWorkload = PRETRAIN, a: Assumptions = A) -> TrainingEstimate:  # fmt: skip
    return estimate_training(arch, gpu, job=training_job(work), layout=Layout(tp=tp, pp=pp, recompute=recompute),
                             settings=TrainingSettings(dp=dp, zero_stage=zero, micro_batch=mb),
                             nodes_gpus_per_node=node, assumptions=a)  # fmt: skip


def test_single_gpu_step_is_flops_over_rate_plus_optimizer() -> None:
    work = TrainingWorkload(kind="training", tokens=1e9, deadline=86400, sequence_length=1024, global_batch_tokens=1024)
    # Training reads its own Hopper share (architecture_training_fraction), not serving's compute fraction.
    a = Assumptions(
        training_mfu=0.45, architecture_training_fraction={"hopper": 0.8}, architecture_compute_fraction={"hopper": 0.5}
    )
    e = train(LLAMA2_7B, H100, dp=1, zero=0, recompute="none", work=work, a=a)
    rate = 989.5e12 * 0.45 * 0.8  # training_mfu x the Hopper training fraction: the large-GEMM plateau
    # GEMMs at the share of the plateau their shapes reach (1,024 rows); the attention core (12·l·s·d counted)
    # instead runs causal: l·s/2 pairs per token at FlashAttention's 4 + 10 FLOPs, at 35% of the BF16 peak on Hopper.
    fraction = kernels.model_gemm_fraction(LLAMA2_7B, 1024, 1, kernels.gemm_curve(H100))
    core = 12.0 * 32 * 1024 * 4096
    attention = 32 * 512 * 4096 * (4.0 + 10.0) / (989.5e12 * 0.35)
    compute = ((model_flops_per_token(LLAMA2_7B, 1024) - core) / (rate * fraction) + attention) * 1024
    assert 0.7 < fraction < 0.9
    assert e.compute_time_s == pytest.approx(compute)
    assert e.exposed_comm_time_s == 0
    assert e.step_time_s > e.compute_time_s  # plus the memory-bound optimizer update
    assert 0.15 < e.mfu < 0.45 * 0.8 * fraction  # the optimizer update and the attention core below the plateau
    assert not e.feasible  # 7B x 18 B/param on one 80 GB GPU


def test_data_parallel_scales_tokens_and_exposes_some_comm() -> None:
    one_node = train(dp=8)
    two_nodes = train(dp=16)
    assert two_nodes.tokens_per_s > one_node.tokens_per_s
    assert two_nodes.exposed_comm_time_s > 0
    assert two_nodes.time_to_train_s == pytest.approx(PRETRAIN.tokens / two_nodes.tokens_per_s)


def test_zero_stages_reduce_memory() -> None:
    totals = [train(zero=z).memory.total_gib for z in (0, 1, 2, 3)]
    assert totals == sorted(totals, reverse=True)
    z3 = train(zero=3)
    assert z3.memory.optimizer_gib == pytest.approx(train(zero=0).memory.optimizer_gib / 8)


def test_recompute_trades_flops_for_memory() -> None:
    none, full = train(recompute="none", mb=4), train(recompute="full", mb=4)
    assert full.memory.activations_gib < none.memory.activations_gib
    assert full.flops_per_token > none.flops_per_token
    assert full.step_time_s > none.step_time_s


def test_pipeline_bubble_and_notes() -> None:
    e = train(LLAMA2_70B, H100, tp=8, pp=4, dp=2, zero=1, mb=1)
    m = PRETRAIN.global_batch_tokens / 4096 / 2
    assert e.bubble_fraction == pytest.approx(3 / (m + 3))
    assert any("pipeline bubble" in n for n in e.notes)
    assert e.gpus == 64


def test_tp_over_pcie_is_ruled_out() -> None:
    e = train(LLAMA2_7B, L40S, tp=2, dp=4)
    assert any("needs NVLink" in r for r in render_reasons(e.why_not))


def test_global_batch_smaller_than_one_round() -> None:
    work = TrainingWorkload(kind="training", tokens=1e9, deadline=86400, sequence_length=4096, global_batch_tokens=4096)
    e = train(dp=8, work=work)
    assert any("global batch" in r for r in render_reasons(e.why_not))


def test_lora_and_qlora_memory_on_a_4090() -> None:
    kw = dict(tokens=200e6, deadline=2 * 86400, sequence_length=2048, global_batch_tokens=65536)
    full = FinetuneWorkload(kind="finetune", method="full", **kw)
    lora = FinetuneWorkload(kind="finetune", method="lora", **kw)
    qlora = FinetuneWorkload(kind="finetune", method="qlora", **kw)
    f = train(LLAMA31_8B, RTX4090, dp=1, zero=0, recompute="full", mb=2, node=1, work=full)
    lo = train(LLAMA31_8B, RTX4090, dp=1, zero=0, recompute="full", mb=2, node=1, work=lora)
    q = train(LLAMA31_8B, RTX4090, dp=1, zero=0, recompute="full", mb=2, node=1, work=qlora)
    assert not f.feasible
    assert lo.memory.total_gib < f.memory.total_gib and q.memory.total_gib < lo.memory.total_gib
    assert q.feasible
    # NF4 base (4.127 bits per linear weight) + 16-bit embedding and head + bf16 adapters (as many bytes as their
    # bf16 gradients: QLoRA §3 trains the adapters in the 16-bit compute dtype, no fp32 master copy)
    base = 32 * memory.layer_params_per_gpu(LLAMA31_8B, 1) * memory.NF4_BYTES_PER_PARAM + 2 * 128256 * 4096 * 2
    assert q.memory.weights_gib == pytest.approx(base / 2**30 + q.memory.gradients_gib)
    assert lo.tokens_per_s > f.tokens_per_s  # no weight gradients of the frozen base
    assert any("adapter parameters" in n for n in lo.notes)


def test_fp8_training_needs_native_fp8() -> None:
    work = PRETRAIN.model_copy(update={"precision": "fp8"})
    assert any("fp8" in r for r in render_reasons(train(LLAMA2_7B, A100, work=work).why_not))
    assert train(LLAMA2_7B, H100, work=work, zero=3).feasible


def test_a_workload_reaches_the_physics_as_the_training_job_evaluation_builds() -> None:
    """The physics reads a TrainingJob, not the requirement's workload (that physics imports nothing of the
    requirement layer is tests/test_structure.py's to hold)."""
    qlora = FinetuneWorkload(kind="finetune", method="qlora", lora_rank=8, tokens=1e9, deadline=86400)
    job = training_job(qlora)
    assert (job.method, job.lora_rank, job.sequence_length, job.global_batch_tokens) == ("qlora", 8, 2048, 65536)
    assert (training_job(PRETRAIN).method, training_job(PRETRAIN).lora_rank) == ("full", 0)


def test_the_framework_sets_the_compute_rate_and_what_it_overlaps() -> None:
    """The framework a run names reaches the physics: its achieved rate scales the compute, a framework without TP
    comm overlap (DeepSpeed) leaves the TP collectives exposed, one without DP overlap its gradient reduction."""
    from dataclasses import replace

    from clusterplan.physics.training_job import FrameworkRates

    def run(rates: FrameworkRates) -> TrainingEstimate:
        job = replace(training_job(PRETRAIN), framework=rates)
        return estimate_training(LLAMA2_70B, H100, job=job, layout=Layout(tp=8, pp=1, recompute="full"),
                                 settings=TrainingSettings(dp=16, zero_stage=1, micro_batch=1),
                                 nodes_gpus_per_node=8, assumptions=A)  # fmt: skip

    megatron = run(FrameworkRates())
    assert training_job(PRETRAIN).framework == FrameworkRates()  # pretraining defaults to Megatron-LM
    deepspeed = training_job(PRETRAIN.model_copy(update={"framework": "deepspeed"})).framework
    assert run(deepspeed).exposed_tp_s > 2 * megatron.exposed_tp_s
    assert run(FrameworkRates(dp_comm_overlap=False)).exposed_dp_s > megatron.exposed_dp_s
    assert run(FrameworkRates(achieved_rate=0.5)).compute_time_s == pytest.approx(2 * megatron.compute_time_s)
