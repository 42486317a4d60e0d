"""Training at scale on H100 (issue #12): network collectives at InfiniBand's efficiency, interleaved schedules
syncing each chunk's gradients as its backward ends, and training's own Hopper compute fraction."""

from __future__ import annotations

import pytest

from clusterplan.evaluation.evaluate import training_job
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.training import estimate_training
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.physics.types import TrainingEstimate
from clusterplan.requirement.schema import TrainingWorkload
from test_physics_fixtures import H100, LLAMA2_70B

# Llama 2 70B at TP 8 PP 4 over 48 data-parallel replicas (1,536 H100s), one-sequence micro-batches, 16 per step.
WORK = TrainingWorkload(kind="training", tokens=1e12, deadline=1e9, sequence_length=4096,
                        global_batch_tokens=4096 * 16 * 48)  # fmt: skip


def run(*, vpp: int = 1, dp: int = 48, a: Assumptions | None = None) -> TrainingEstimate:
    return estimate_training(
        LLAMA2_70B, H100, job=training_job(WORK.model_copy(update={"global_batch_tokens": 4096 * 16 * dp})),
        layout=Layout(tp=8, pp=4, virtual_stages=vpp), settings=TrainingSettings(dp=dp, zero_stage=1),
        nodes_gpus_per_node=8, assumptions=a or Assumptions(),
    )  # fmt: skip


def run_one_server(a: Assumptions) -> TrainingEstimate:
    return estimate_training(
        LLAMA2_70B, H100, job=training_job(WORK), layout=Layout(tp=8, recompute="full"),
        settings=TrainingSettings(dp=1, zero_stage=1), nodes_gpus_per_node=8, assumptions=a,
    )  # fmt: skip


def test_interleaved_chunks_hide_their_gradient_sync_behind_the_last_round() -> None:
    # 1F1B reduces in the last micro-batch's backward; interleaved (Megatron-Core schedules.py grad_sync_func per
    # chunk) in the last round of p micro-batches through every chunk, all but the last chunk's share hidden.
    one_f_one_b, interleaved = run(vpp=1), run(vpp=5)
    assert one_f_one_b.exposed_dp_s > 0
    assert interleaved.exposed_dp_s < 0.6 * one_f_one_b.exposed_dp_s
    # Never below the last chunk's share (1/5 of the stage's reduce-scatter and all-gather).
    assert interleaved.exposed_dp_s > 0


def test_network_collectives_run_at_their_own_efficiency() -> None:
    slow = Assumptions(network_link_efficiency=0.7)
    fast = Assumptions(network_link_efficiency=0.9)
    across, across_slow = run(a=fast), run(a=slow)
    # Data-parallel rings cross the network (TP 8 fills each server): 0.9 moves them 0.9/0.7 as fast.
    assert across.exposed_dp_s < across_slow.exposed_dp_s
    # Inside one server nothing rides the network: the network efficiency changes nothing.
    inside = [run_one_server(x) for x in (slow, fast)]
    assert inside[0].step_time_s == pytest.approx(inside[1].step_time_s, rel=1e-12)


def test_hopper_training_has_its_own_compute_fraction() -> None:
    a = Assumptions()
    assert a.training_compute_fraction("Hopper", "bf16") == pytest.approx(0.72)  # fitted on 13 H100 training runs
    assert a.compute_fraction("Hopper", "bf16") == pytest.approx(0.84)  # serving keeps its own
    assert a.training_compute_fraction("hopper", "fp8") == pytest.approx(0.72 * a.fp8_matmul_fraction)
    # Unlisted architectures fall back to the shared compute fraction (Ampere: 1).
    assert a.training_compute_fraction("Ampere", "bf16") == a.compute_fraction("Ampere", "bf16") == 1.0
    lower = Assumptions(architecture_training_fraction={"Hopper": 0.5})
    # The GEMMs slow by 0.72 / 0.5; the attention core keeps its own kernel's rate.
    shipped, slower = run().compute_time_s, run(a=lower).compute_time_s
    assert shipped * 1.3 < slower < shipped * 0.72 / 0.5
