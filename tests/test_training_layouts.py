"""Training layouts as Megatron-LM / NeMo run them: context parallelism, interleaved stages, recompute of N layers,
communication exposed per kind, and the pinned-layout fields of a requirement.

Physics pieces are tested on the functions; one CLI run holds ``estimate --cp --vpp --recompute-layers`` end to end.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from clusterplan.evaluation import evaluate
from clusterplan.physics import memory, training
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout, Recompute
from clusterplan.physics.reasons import CpSplitsSequence, VirtualStagesSplitLayers
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.requirement.schema import TrainingWorkload
from conftest import DATA, run_cli
from test_physics_fixtures import H100, LLAMA2_70B

A = Assumptions()
PRETRAIN_70B = DATA / "requirements" / "70b-pretrain-30d.yaml"
# 8k sequences, 16M-token global batch: the NeMo Llama 3 70B recipe's shape (tp 4, pp 4, vpp 5, cp 2).
WORK_8K = TrainingWorkload(kind="training", tokens=1.4e12, deadline=30 * 86400, sequence_length=8192,
                           global_batch_tokens=16 * 2**20)  # fmt: skip
JOB_8K = evaluate.training_job(WORK_8K)


def est(*, dp: int = 16, zero_stage: int = 1, micro_batch: int = 1, **layout: Any) -> Any:
    """70B at 8k on H100: tp 4 x pp 4 unless ``layout`` says otherwise (Layout fields)."""
    shape = Layout(**{"tp": 4, "pp": 4, **layout})
    return training.estimate_training(
        LLAMA2_70B, H100, job=JOB_8K, layout=shape, settings=TrainingSettings(dp, zero_stage, micro_batch),
        nodes_gpus_per_node=8, assumptions=A,
    )  # fmt: skip


def test_interleaved_bubble_is_p_minus_1_over_v_m() -> None:
    # Narayanan et al. 2021 §2.2: bubble time / ideal time = (p - 1) / (v·m); idle share = that / (1 + that).
    ratio = 3 / (5 * 8)
    assert training.pipeline_bubble_fraction(4, 8, 5) == pytest.approx(ratio / (1 + ratio))
    assert training.pipeline_bubble_fraction(4, 8) == pytest.approx(3 / 11)  # 1F1B: (p-1)/(m+p-1)
    plain, inter = est(), est(virtual_stages=5)
    assert inter.bubble_fraction < plain.bubble_fraction
    assert inter.compute_time_s < plain.compute_time_s
    assert inter.memory.activations_gib > plain.memory.activations_gib  # 1 + (p-1)/(p·v) more in flight


def test_context_parallel_splits_activations_and_keeps_tokens_per_step() -> None:
    one, two = est(dp=16), est(dp=8, cp=2)
    assert two.gpus == one.gpus == 256
    assert two.cp == 2
    assert two.memory.activations_gib == pytest.approx(one.memory.activations_gib / 2, rel=0.02)
    # Same GPUs, same tokens per step; the KV ring hides behind attention at 8k tokens on NVLink.
    assert two.exposed_cp_s == 0.0
    assert two.time_to_train_s == pytest.approx(one.time_to_train_s, rel=0.05)


def test_nemo_70b_8k_recipe_shape_is_expressible() -> None:
    e = est(tp=4, cp=2, pp=4, virtual_stages=5, dp=18)
    assert e.feasible, e.why_not
    assert (e.tp, e.cp, e.pp, e.virtual_stages, e.dp, e.gpus) == (4, 2, 4, 5, 18, 576)
    assert not any("crosses the NVLink domain" in n for n in e.notes)  # TP x CP = 8: one node
    assert min(e.exposed_tp_s, e.exposed_cp_s, e.exposed_pp_s, e.exposed_dp_s) >= 0.0
    assert e.exposed_comm_time_s == pytest.approx(e.exposed_tp_s + e.exposed_cp_s + e.exposed_pp_s + e.exposed_dp_s)


def test_recompute_layers_scale_memory_and_work_linearly() -> None:
    by_layers = {n: est(recompute="full", recompute_layers=n) for n in (0, 5, 10, 15, 20)}
    acts = [by_layers[n].memory.activations_gib for n in (5, 10, 15)]
    assert acts[0] - acts[1] == pytest.approx(acts[1] - acts[2], rel=1e-6)  # linear in layers recomputed
    work = [by_layers[n].flops_per_token for n in (0, 5, 10, 20)]
    assert work[1] - work[0] == pytest.approx((work[3] - work[0]) / 4)
    assert by_layers[20].flops_per_token == pytest.approx(est(recompute="full").flops_per_token)
    assert by_layers[5].recompute_layers == 5


def test_selective_equals_none_with_flash_attention() -> None:
    none, selective = est(recompute="none"), est(recompute="selective")
    assert selective.memory.activations_gib == none.memory.activations_gib
    assert selective.flops_per_token == none.flops_per_token


def test_a_layout_short_of_memory_recomputes_a_few_layers_not_all() -> None:
    # 70B on 64 H100, TP 8 x PP 2 x DP 4, micro-batch 2 at 8k: without recompute it misses memory by ~15 GiB.
    def fastest(*recomputes: Recompute) -> Any:
        options = evaluate.TrainingOptions(zero_stages=(1,), recomputes=recomputes, micro_batches=(2,),
                                           virtual_stages=(1,))  # fmt: skip
        found, _ = evaluate.fastest_training_layout(
            LLAMA2_70B, H100, WORK_8K, layout=Layout(tp=8, pp=2), dp=4, options=options, assumptions=A
        )
        return found

    none, best = fastest("none"), fastest("none", "full")
    assert none is None
    assert best is not None and best.recompute == "full"
    assert 0 < best.recompute_layers < memory.layers_per_stage(80, 2) / 2
    fewer = est(tp=8, pp=2, dp=4, micro_batch=2, recompute="full", recompute_layers=best.recompute_layers - 1)
    assert not fewer.feasible  # the fewest layers that fit


def test_tp_collectives_overlap_gemms_on_hopper_only() -> None:
    hopper = est(tp=8, pp=1, dp=32, zero_stage=1, recompute="full")
    ampere = H100.model_copy(update={"architecture": "Ampere"})
    plain = training.estimate_training(
        LLAMA2_70B, ampere, job=JOB_8K, layout=Layout(tp=8, pp=1, recompute="full"),
        settings=TrainingSettings(dp=32, zero_stage=1, micro_batch=1), nodes_gpus_per_node=8, assumptions=A,
    )  # fmt: skip
    assert 0 < hopper.exposed_tp_s < plain.exposed_tp_s


def test_impossible_cp_and_virtual_stages_are_reasons() -> None:
    bad = training.layout_reasons(LLAMA2_70B, pp=4, cp=3, virtual_stages=3, sequence_length=8192)
    assert [type(r) for r in bad] == [CpSplitsSequence, VirtualStagesSplitLayers]
    assert training.layout_reasons(LLAMA2_70B, pp=1, cp=1, virtual_stages=2, sequence_length=8192)
    assert not training.layout_reasons(LLAMA2_70B, pp=4, cp=2, virtual_stages=5, sequence_length=8192)


def test_requirement_pins_layout_fields_with_located_errors(catalog: Any, tmp_path: Path) -> None:
    from clusterplan.errors import InputError
    from clusterplan.requirement.load import load_requirement_text
    from clusterplan.stdin import load_requirement_arg

    base = PRETRAIN_70B.read_text()
    ok = load_requirement_text(base.replace("    precision: bf16\n", "    precision: bf16\n    context_parallel: 2\n"
                                            "    virtual_stages: 5\n    recompute_layers: 3\n"), "ok.yaml", catalog)  # fmt: skip
    w = ok.requirement.workloads[0]
    assert (w.context_parallel, w.virtual_stages, w.recompute_layers) == (2, 5, 3)  # type: ignore[union-attr]
    assert evaluate.recomputes_for(w) == ["full"]  # type: ignore[arg-type]
    bad = base.replace("    precision: bf16\n", "    precision: bf16\n    context_parallel: 3\n    virtual_stages: 7\n"
                       "    activation_recompute: none\n    recompute_layers: 2\n")  # fmt: skip
    (tmp_path / "bad.yaml").write_text(bad)
    with pytest.raises(InputError) as exc:  # the reading step every command takes refuses it
        load_requirement_arg(tmp_path / "bad.yaml", catalog)
    text = exc.value.render() if hasattr(exc.value, "render") else str(exc.value)
    for field in ("context_parallel", "virtual_stages", "recompute_layers"):
        assert re.search(rf"bad\.yaml:\d+:\d+.*{field}", text), text
    res = run_cli("validate", str(tmp_path / "bad.yaml"))  # and so does validate, located, exit code 2
    assert res.exit_code == 2 and re.search(r"bad\.yaml:\d+:\d+.*virtual_stages", res.output), res.output


def test_estimate_cli_reports_bubble_comm_per_kind_and_mfu() -> None:
    res = run_cli(
        "estimate", str(PRETRAIN_70B), "--gpu", "h100-sxm", "--tp", "4", "--cp", "2", "--pp", "4", "--vpp", "4",
        "--recompute", "full", "--recompute-layers", "3", "--count", "512",
    )  # fmt: skip
    out = res.output
    assert res.exit_code == 0, out
    assert "tp 4 x cp 2 x pp 4 x dp 16" in out and "4 virtual stages" in out and "3 layers per stage" in out
    kinds = "pipeline bubble|MFU|tensor parallel|context parallel|pipeline parallel|data parallel"
    pattern = rf"^\s*({kinds})\s+([\d.,]+ ?\S*)$"
    values = {m.group(1): m.group(2) for m in re.finditer(pattern, out, re.MULTILINE)}
    assert set(values) == set(kinds.split("|")), out
    assert 0 < float(values["MFU"].rstrip("%")) < 100
    assert 0 < float(values["pipeline bubble"].rstrip("%")) < 5
