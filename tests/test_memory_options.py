"""Training memory options (physics/optimizer_memory.py): what each saves on the GPU and what its PCIe time costs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clusterplan.cli import app
from clusterplan.evaluation import evaluate
from clusterplan.physics import optimizer_memory as om
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.optimizer_memory import PLAIN, MemoryPlan
from clusterplan.physics.training import estimate_training
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.physics.types import TrainingEstimate
from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from test_physics_fixtures import LLAMA31_8B, RTX4090

A = Assumptions(sustained_clock_fraction=1.0)  # one card in a desktop
# torchtune recipes/configs/llama3_1/8B_full_single_device.yaml: batch_size 2, gradient_accumulation_steps 1,
# enable_activation_checkpointing True, optimizer_in_bwd True, bitsandbytes PagedAdamW8bit, dtype bf16; the README's
# "Memory and training speed" table (packed to 2048 tokens) measures it at 18.9 GiB peak on one RTX 4090
# (github.com/pytorch/torchtune README at bd2a0fc7, read 2026-11-24; same figure as bench id
# mem-torchtune-llama31-8b-full-4090).
TORCHTUNE = FinetuneWorkload(kind="finetune", method="full", tokens=1e9, deadline=1e6, sequence_length=2048,
                             global_batch_tokens=4096)  # fmt: skip
TORCHTUNE_PLAN = MemoryPlan.of(["bf16_weights", "optimizer_in_backward", "adamw8bit", "paged_optimizer"])
TORCHTUNE_PEAK_GIB = 18.9


def full_ft(plan: MemoryPlan, *, mb: int = 2, work: FinetuneWorkload = TORCHTUNE) -> TrainingEstimate:
    return estimate_training(LLAMA31_8B, RTX4090, job=evaluate.training_job(work), layout=Layout(recompute="full"),
                             settings=TrainingSettings(dp=1, zero_stage=0, micro_batch=mb, memory_plan=plan),
                             nodes_gpus_per_node=1, assumptions=A)  # fmt: skip


def test_torchtune_full_finetune_of_8b_fits_a_24gb_card_only_with_its_options() -> None:
    fits = full_ft(TORCHTUNE_PLAN)
    assert fits.feasible, fits.why_not
    assert fits.memory_options == TORCHTUNE_PLAN.codes
    # What PyTorch's allocator sees (the paged state is CUDA unified memory, outside it): weights, the one
    # gradient alive at a time, activations. Within 10% of the published peak.
    m = fits.memory
    assert m.weights_gib + m.gradients_gib + m.activations_gib == pytest.approx(TORCHTUNE_PEAK_GIB, rel=0.10)
    # The spilled 8-bit state pages over PCIe every step, under the backward and forward compute (in-backward
    # updates, prefetched pages): hidden here, exposed once the transfer outlasts the compute.
    assert fits.offload_time_s == 0
    assert om.paging_s(10e9, 25e9) == pytest.approx(0.8)
    assert om.paging_s(10e9, 25e9, step_compute_s=0.3) == pytest.approx((0.4 - 0.2) + (0.4 - 0.1))
    assert om.paging_s(10e9, 25e9, step_compute_s=1.5) == 0
    # Refused without them, and without any one of the three that matter on this card.
    assert not full_ft(PLAIN).feasible
    for dropped in ("bf16_weights", "optimizer_in_backward", "paged_optimizer"):
        assert not full_ft(TORCHTUNE_PLAN.without(dropped)).feasible, dropped


def test_the_layout_search_reaches_for_the_options_only_when_needed() -> None:
    options = evaluate.TrainingOptions(zero_stages=(0,), recomputes=["full"], micro_batches=[2])
    found, _ = evaluate.fastest_training_layout(
        LLAMA31_8B, RTX4090, TORCHTUNE, layout=Layout(), dp=1, options=options, assumptions=A
    )
    assert found is not None and found.feasible
    assert {"bf16_weights", "optimizer_in_backward"} <= set(found.memory_options)
    forbidden = TORCHTUNE.model_copy(update={"memory_options": []})
    none, reason = evaluate.fastest_training_layout(
        LLAMA31_8B, RTX4090, forbidden, layout=Layout(), dp=1, options=options, assumptions=A
    )
    assert none is None and reason is not None
    # Pre-training defaults to none of them (Megatron-LM recipes): the plain plan only.
    pretrain = TrainingWorkload(kind="training", tokens=1e9, deadline=1e6)
    assert evaluate.memory_plans_for(pretrain) == [PLAIN]


def test_optimizer_in_backward_needs_one_micro_batch_per_step() -> None:
    two_steps = TORCHTUNE.model_copy(update={"global_batch_tokens": 8192})  # two micro-batches of 2
    e = full_ft(TORCHTUNE_PLAN, work=two_steps)
    assert "optimizer_in_backward" not in e.memory_options
    assert e.memory.gradients_gib > full_ft(TORCHTUNE_PLAN).memory.gradients_gib * 5


def test_state_bytes_per_param() -> None:
    assert sum(om.state_bytes_per_param("bf16", "adamw")) == 18  # mixed precision, Megatron-LM
    assert sum(om.state_bytes_per_param("bf16", "adamw", MemoryPlan.of(["bf16_weights"]))) == 8  # torchtune bf16
    eight = om.state_bytes_per_param("bf16", "adamw", MemoryPlan.of(["bf16_weights", "adamw8bit"]))
    assert eight[2] == pytest.approx(2 * (1 + 4 / 2048))  # two uint8 moments + an fp32 absmax per 2,048
    # QLoRA adapters: bf16 weights and gradients, fp32 Adam moments (QLoRA §3, paged_adamw_32bit): 12, not 18
    assert sum(om.adapter_state_bytes_per_param("adamw")) == 12


def test_offload_time_is_in_the_step() -> None:
    plan = MemoryPlan.of(["bf16_weights", "optimizer_in_backward", "optimizer_offload"])
    e = full_ft(plan)
    assert e.memory.optimizer_gib == 0 and e.offload_time_s > 0
    assert e.step_time_s == pytest.approx(e.compute_time_s + e.exposed_comm_time_s + e.offload_time_s)
    pcie = om.pcie_one_way_bytes_per_s(RTX4090.pcie_bandwidth_gb_per_s, A.link_efficiency)
    params = 8.03e9  # Llama 3.1 8B
    # 16-bit parameters come back after the CPU step (exposed); gradients go down under backward.
    assert e.offload_time_s >= 0.95 * params * 2 / pcie
    act = full_ft(MemoryPlan.of(["activation_offload"]))
    assert act.memory.activations_gib < full_ft(PLAIN).memory.activations_gib


def test_pinned_options() -> None:
    assert om.pinned_options("paged_adamw8bit", "none") == (
        ["adamw8bit", "paged_optimizer"], ["optimizer_offload", "activation_offload"]
    )  # fmt: skip
    plans = evaluate.memory_plans_for(TORCHTUNE, forced=["adamw8bit"], forbidden=["paged_optimizer"])
    assert all(p.has("adamw8bit") and not p.has("paged_optimizer") for p in plans)


def test_estimate_takes_optimizer_and_offload_flags(tmp_path: Path) -> None:
    req = tmp_path / "ft.yaml"
    req.write_text(
        "name: tt\nmodel: llama-3.1-8b\nworkloads:\n  - kind: finetune\n    method: full\n    tokens: 10M\n"
        "    deadline: 30d\n    sequence_length: 2048\n    global_batch_tokens: 4096\n",
        encoding="utf-8",
    )
    base = ["estimate", str(req), "--gpu", "rtx-4090", "--count", "1", "--recompute", "full", "--batch", "2"]
    runner = CliRunner()
    ok = runner.invoke(app, [*base, "--optimizer", "paged_adamw8bit", "--offload", "none"])
    assert ok.exit_code == 0, ok.output
    assert "paged_optimizer" in ok.output
    offloaded = runner.invoke(app, [*base, "--optimizer", "adamw", "--offload", "optimizer"])
    assert offloaded.exit_code == 0, offloaded.output
    assert "optimizer_offload" in offloaded.output and "host offload over PCIe" in offloaded.output
    refused = runner.invoke(app, [*base, "--optimizer", "adamw", "--offload", "none"])
    assert refused.exit_code == 1, refused.output
