"""Training counts are the fewest whole servers that meet the deadline, not a rung of a ladder.

The principle, held for every training example and for the 30-day 70B run that the power-of-two
ladder over-bought (1,024 H100 where about half meet the deadline): at the chosen layout, one server
fewer misses the deadline. Each check re-estimates through ``clusterplan estimate``'s path, the same
layout search the planner's rows come from.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA, EXAMPLES, shared_plan

PRETRAIN_70B = DATA / "requirements" / "70b-pretrain-30d.yaml"
TRAINING_CASES = [p for p in EXAMPLES if "train" in p.read_text() or "finetune" in p.read_text()] + [PRETRAIN_70B]


def test_whole_node_dps_fill_whole_servers() -> None:
    from clusterplan.candidates.training import whole_node_dps

    # TP4 x PP8 = 32 GPUs a replica fills 4 servers of 8: every DP is whole servers.
    assert whole_node_dps(16, 32, 32, 8) == list(range(17, 32))
    # TP2 = 2 GPUs a replica: 4 replicas a server, so DP steps by 4.
    assert whole_node_dps(4, 32, 2, 8) == [8, 12, 16, 20, 24, 28]
    # Nothing between two adjacent whole-server degrees.
    assert whole_node_dps(8, 12, 2, 8) == []


def _one_server_fewer(path: Path, catalog: Any) -> list[tuple[Any, Any]]:
    """(training plan, estimate of its layout with one server fewer) for each owned training workload."""
    from clusterplan.design.estimate import estimate_requirement
    from clusterplan.plan import TrainingPlan
    from clusterplan.requirement.load import load_requirement
    from clusterplan.requirement.schema import PinnedConfig

    resolved = load_requirement(path, catalog)
    plan = shared_plan(path, catalog, explain=False)
    out: list[tuple[Any, Any]] = []
    for index, wp in enumerate(plan.designs[0].workloads):
        if not isinstance(wp, TrainingPlan) or wp.deployment != "owned" or wp.deadline_s is None:
            continue
        node = catalog.gpus[wp.gpu].max_gpus_per_node
        step = node // math.gcd(node, wp.tp * wp.cp * wp.pp)  # DP degrees per server
        if wp.dp - step < 1:
            out.append((wp, None))  # one server or less: nothing fewer to buy
            continue
        pins = PinnedConfig(
            workload=index, gpu=wp.gpu, tp=wp.tp, cp=wp.cp, pp=wp.pp, dp=wp.dp - step, deployment="owned"
        )
        out.append((wp, estimate_requirement(resolved.requirement, list(resolved.models), catalog, pins)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", TRAINING_CASES, ids=[p.stem for p in TRAINING_CASES])
def test_one_server_fewer_misses_the_deadline(path: Path, catalog: Any) -> None:
    for wp, fewer in _one_server_fewer(path, catalog):
        assert wp.time_to_train_s <= wp.deadline_s
        if fewer is None:
            assert wp.gpus <= catalog.gpus[wp.gpu].max_gpus_per_node
            continue
        t = fewer.training
        assert not fewer.feasible or t.time_to_train_s > wp.deadline_s, (
            f"{wp.workload}: {wp.gpus} GPUs take {wp.time_to_train_s / 86400:.2f} d, but DP{wp.dp} less one "
            f"server also meets the {wp.deadline_s / 86400:.1f} d deadline ({t.time_to_train_s / 86400:.2f} d)"
        )


@pytest.mark.slow
def test_70b_30_day_run_buys_whole_servers_not_a_power_of_two(catalog: Any) -> None:
    from clusterplan.plan import TrainingPlan

    plan = shared_plan(PRETRAIN_70B, catalog, explain=False)
    (wp,) = plan.designs[0].workloads
    assert isinstance(wp, TrainingPlan), "the 70B pretraining requirement has one training workload"
    assert wp.gpus % catalog.gpus[wp.gpu].max_gpus_per_node == 0
    assert wp.gpus < 1024  # the ladder's answer, 16.5 days for a 30-day deadline
