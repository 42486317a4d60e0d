"""Training frameworks as data (catalog/frameworks.yaml): a workload names its framework, the candidate layouts are
those it runs, what it left out is a framework_lacks exclusion, and the plan says which framework it assumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterplan.candidates.build import build_candidates
from clusterplan.candidates.training import framework_space
from clusterplan.catalog.load import Catalog, load_catalog, load_catalog_text
from clusterplan.errors import InputError
from clusterplan.physics.reasons import FrameworkLacks
from clusterplan.requirement.load import load_requirement_text
from conftest import run_cli

SMALL = """
name: small fine-tune
model: mistral-7b
workloads:
  - kind: finetune
    name: tune
    method: {method}
{extra}    tokens: 20M
    deadline: 2d
    sequence_length: 2k
    global_batch_tokens: 64k
constraints:
  allowed_gpus: [h100-sxm]
deployment: cloud
"""


def _table(catalog: Catalog, method: str = "full", extra: str = ""):  # type: ignore[no-untyped-def]
    text = SMALL.format(method=method, extra=extra)
    return build_candidates(load_requirement_text(text, "req.yaml", catalog), catalog).workloads[0]


def test_torchtune_runs_no_tensor_nor_pipeline_parallelism() -> None:
    spec = load_catalog().framework("torchtune")
    space = framework_space(spec, ["none", "full"], "qlora")
    assert space.tps == (1,) and space.pps == (1,)
    lacks = {r.feature: r.values for r in space.left_out}
    assert lacks["tensor"] == "2, 4, 8" and lacks["pipeline"] == "2, 4, 8, 16"
    assert "context" not in lacks  # torchtune's recipes have context_parallel_dim


def test_megatron_leaves_nothing_out() -> None:
    space = framework_space(load_catalog().framework("megatron-lm"), ["none", "full"], "full")
    assert space.left_out == () and space.tps == (1, 2, 4, 8) and space.pps == (1, 2, 4, 8, 16)


@pytest.mark.slow
def test_the_framework_decides_the_candidate_layouts() -> None:
    catalog = load_catalog()
    megatron = _table(catalog, "full")  # full fine-tune: megatron-lm by default
    assert megatron.framework == "megatron-lm"
    assert any(r.tp > 1 or r.pp > 1 for r in megatron.training_rows())
    peft = _table(catalog, "full", "    framework: peft\n")
    assert peft.framework == "peft"
    assert peft.training_rows() and all(r.tp == 1 and r.pp == 1 for r in peft.training_rows())
    assert all(r.recompute_layers in (0, 32) for r in peft.training_rows())  # gradient checkpointing: every layer
    lacks = [e.reason for e in peft.exclusions if isinstance(e.reason, FrameworkLacks)]
    assert {r.feature for r in lacks} >= {"tensor", "pipeline"}


def test_a_user_catalog_can_give_a_framework_pipeline_stages() -> None:
    """A framework is catalog data: overriding torchtune to pipeline lets the planner try PP for it."""
    overlay = """
frameworks:
- id: torchtune
  override: true
  pipeline_parallel: true
  source: https://example.org/our-torchtune-fork
  as_of: 2026-12
"""
    catalog = load_catalog_text(overlay, "ours.yaml")
    space = framework_space(catalog.framework("torchtune"), ["none", "full"], "lora")
    assert space.pps == (1, 2, 4, 8, 16)


def test_a_framework_that_does_not_run_the_method_is_a_located_input_error() -> None:
    catalog = load_catalog()
    with pytest.raises(InputError) as err:
        load_requirement_text(SMALL.format(method="qlora", extra="    framework: torchtitan\n"), "r.yaml", catalog)
    text = str(err.value.render())
    assert (
        "r.yaml:8:5: workloads[0].framework" in text
        and "torchtitan does not run qlora fine-tuning" in text
        and "torchtune" in text
    )
    with pytest.raises(InputError) as err:
        load_requirement_text(SMALL.format(method="lora", extra="    framework: torchtun\n"), "r.yaml", catalog)
    assert "unknown framework 'torchtun'; did you mean 'torchtune'" in str(err.value.render())


@pytest.mark.slow
def test_the_plan_names_the_framework_it_assumed(tmp_path: Path) -> None:
    path = tmp_path / "req.yaml"
    path.write_text(SMALL.format(method="lora", extra=""))
    plan = json.loads(run_cli("solve", str(path), "--json").output)
    (w,) = plan["designs"][0]["workloads"]
    assert w["framework"] == "torchtune" and w["tp"] == 1 and w["pp"] == 1
    table = run_cli("solve", str(path)).output
    assert "on torchtune" in table


def test_a_pinned_layout_the_framework_cannot_run_is_a_located_input_error() -> None:
    text = SMALL.format(method="qlora", extra="    virtual_stages: 2\n    context_parallel: 2\n")
    with pytest.raises(InputError) as err:
        load_requirement_text(text, "r.yaml", load_catalog())
    rendered = str(err.value.render())
    assert "r.yaml:8:5: workloads[0].virtual_stages: 2 virtual stages; torchtune runs no such layout" in rendered
    assert "context_parallel" not in rendered  # torchtune's recipes have context_parallel_dim


def test_torchtitan_pipelined_layouts_shard_with_fsdp_as_zero_1() -> None:
    """torchtitan runs FSDP2 beside pipeline stages; the schedule keeps each stage whole for the step (ZeRO 1), so its
    pipelined layouts are searched sharded, never replicated; DeepSpeed's pipeline engine stays at ZeRO 0-1."""
    catalog = load_catalog()
    titan = framework_space(catalog.framework("torchtitan"), ["none", "full"], "full")
    assert titan.zeros(4, "full") == (1,)  # its DDP runs alone: with stages, always FSDP2
    assert titan.zeros(1, "full") == (0, 2, 3)  # without stages: DDP or FSDP2, never a bare distributed optimizer
    assert titan.zeros(1, "full", tp=2) == (2, 3)  # its DDP runs alone: beside TP, FSDP2 only
    assert not any(r.feature == "zero" for r in titan.left_out)
    assert framework_space(catalog.framework("deepspeed"), ["none"], "full").zeros(4, "full") == (0, 1)


@pytest.mark.slow
def test_a_torchtitan_plan_can_pipeline_a_sharded_model() -> None:
    rows = _table(load_catalog(), "full", "    framework: torchtitan\n").training_rows()
    piped = [r for r in rows if r.pp > 1]
    assert piped and all(r.zero_stage == 1 for r in piped)  # FSDP2 beside the stages: state sharded
    assert all(r.zero_stage != 1 for r in rows if r.pp == 1)  # no bare distributed optimizer without them
    assert all(r.zero_stage >= 1 for r in rows if r.tp * r.cp * r.pp > 1)  # its DDP runs alone


def test_each_framework_names_its_rates_and_overlaps() -> None:
    """Every shipped framework carries the rates the physics reads (catalog/frameworks.yaml): none has a fitted
    achieved rate of its own (none helped out of source), and DeepSpeed's TP collectives are not overlapped."""
    from clusterplan.evaluation.evaluate import framework_rates

    rates = {name: framework_rates(name) for name in load_catalog().frameworks}
    assert {r.achieved_rate for r in rates.values()} == {1.0}
    assert not rates["deepspeed"].tp_comm_overlap and rates["megatron-lm"].tp_comm_overlap
    assert framework_rates("nemo") == rates["megatron-lm"]  # an alias
