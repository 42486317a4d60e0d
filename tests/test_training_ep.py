"""Expert parallelism in training: EP carved out of the DP x CP ranks (physics/moe.py training section)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.design.check import check_plan
from clusterplan.evaluation import evaluate
from clusterplan.physics import moe, rules, training
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.reasons import EpSplitsExperts
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.plan import TrainingPlan
from clusterplan.requirement.load import load_requirement
from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from conftest import plan_file, run_cli

A = Assumptions()
MIXTRAL_FT = FinetuneWorkload(kind="finetune", method="full", tokens=2e9, deadline=7 * 86400, sequence_length=4096,
                              global_batch_tokens=4096 * 128)  # fmt: skip
DSV3_PRETRAIN = TrainingWorkload(kind="training", tokens=14.8e12, deadline=60 * 86400, sequence_length=4096,
                                 global_batch_tokens=4096 * 15360, precision="fp8")  # fmt: skip


@pytest.fixture(scope="module")
def mixtral(catalog: Catalog) -> ModelArchitecture:
    return catalog.model("mixtral-8x7b")


@pytest.fixture(scope="module")
def h100(catalog: Catalog) -> GpuSpec:
    return catalog.gpu("h100-sxm")


def _fit(arch: ModelArchitecture, gpu: GpuSpec, *, ep: int, tp: int = 2, dp: int = 8, zero: int = 1) -> Any:
    return training.training_fit(
        arch, gpu, job=evaluate.training_job(MIXTRAL_FT), layout=Layout(tp=tp, ep=ep, recompute="full"),
        settings=TrainingSettings(dp=dp, zero_stage=zero), nodes_gpus_per_node=8, assumptions=A,
    )  # fmt: skip


def test_ep_divides_expert_memory_and_fits_where_tp_only_does_not(mixtral: ModelArchitecture, h100: GpuSpec) -> None:
    tp_only, ep8 = _fit(mixtral, h100, ep=1), _fit(mixtral, h100, ep=8)
    # Routed experts: 8 x 3·h·f_e per MoE layer over tp 2; EP 8 keeps one of the eight on each GPU.
    experts = mixtral.layers * 8 * moe.expert_params(mixtral) / 2
    assert ep8.expert_trainable == pytest.approx(experts / 8)
    # ZeRO 1: 16-bit weights and fp32 gradients stay whole per GPU: the experts not held are gone from both.
    freed = experts * 7 / 8
    assert tp_only.mem.weights_gib - ep8.mem.weights_gib == pytest.approx(freed * 2 / 2**30, rel=1e-6)
    assert tp_only.mem.gradients_gib - ep8.mem.gradients_gib == pytest.approx(freed * 4 / 2**30, rel=1e-6)
    assert not tp_only.mem.fits and ep8.mem.fits and not ep8.why_not
    # The expert optimizer state shards over dp / ep = 1 expert-data-parallel rank, the rest over 8.
    assert ep8.expert_dp == 1
    assert training.optimizer_shard_params(100.0, 40.0, 1, 8, 1) == pytest.approx(60 / 8 + 40)


def test_ep_group_across_servers_pays_network_all_to_all(h100: GpuSpec) -> None:
    inside, link_in = moe.training_all_to_all_s(h100, ep=8, tp=1, node_gpus=8, bytes_sent_per_gpu=1e8, assumptions=A)
    across, link_x = moe.training_all_to_all_s(h100, ep=8, tp=2, node_gpus=8, bytes_sent_per_gpu=1e8, assumptions=A)
    assert (link_in.kind, link_x.kind) == ("nvlink", "network")
    # Across: the 4 of 7 peers on other servers' share over the 50 GB/s rail at the all-to-all efficiency.
    assert across == pytest.approx(link_x.latency_s + 1e8 * 4 / 7 / (50e9 * A.moe_all_to_all_efficiency))
    assert across > 5 * inside
    assert moe.training_all_to_all_s(h100, ep=1, tp=8, node_gpus=8, bytes_sent_per_gpu=1e8, assumptions=A)[0] == 0


def test_deepseek_v3_pretraining_with_ep_beats_tp_only(catalog: Catalog, h100: GpuSpec) -> None:
    dsv3 = catalog.model("deepseek-v3")

    def pretrain(layout: Layout, dp: int) -> Any:
        return training.estimate_training(
            dsv3, h100, job=evaluate.training_job(DSV3_PRETRAIN), layout=layout,
            settings=TrainingSettings(dp=dp, zero_stage=1), nodes_gpus_per_node=8, assumptions=A,
        )  # fmt: skip

    tp_only, ep8 = pretrain(Layout(tp=8, pp=16), 16), pretrain(Layout(tp=1, pp=16, ep=8), 128)
    assert tp_only.gpus == ep8.gpus == 2048 and (tp_only.ep, ep8.ep) == (1, 8)
    # 256 fine-grained experts at EP 1 see 128 tokens each per micro-batch: grouped GEMMs far below dense ones.
    fit = rules.architecture_kernels(h100).grouped_gemm
    ep1, ep8_share = (
        moe.grouped_gemm_efficiency(4096 * 8 / 256, fit),
        moe.grouped_gemm_efficiency(8 * 4096 * 8 / 256, fit),
    )
    assert ep1 < 0.4 < 0.9 < ep8_share
    assert ep8.exposed_ep_s > 0 == tp_only.exposed_ep_s
    assert ep8.time_to_train_s < 0.9 * tp_only.time_to_train_s


def test_dense_models_never_get_ep(catalog: Catalog, h100: GpuSpec) -> None:
    llama = catalog.model("llama-3.1-8b")
    assert evaluate.expert_parallel_options(llama, tp=1, dp_cp=64, nvlink_domain=8) == (1,)
    assert moe.training_ep_problem(llama, 2, 8) == "ep_without_experts"
    est = training.estimate_training(
        llama, h100, job=evaluate.training_job(MIXTRAL_FT), layout=Layout(ep=2),
        settings=TrainingSettings(dp=8, zero_stage=1), nodes_gpus_per_node=8, assumptions=A,
    )  # fmt: skip
    assert isinstance(est.why_not[0], EpSplitsExperts)


def test_ep_options_fold_out_of_dp_and_stay_in_nvlink_first(mixtral: ModelArchitecture) -> None:
    assert evaluate.expert_parallel_options(mixtral, tp=2, dp_cp=8, nvlink_domain=8) == (1, 4, 8)
    assert evaluate.expert_parallel_options(mixtral, tp=1, dp_cp=2, nvlink_domain=8) == (1, 2)
    assert evaluate.expert_parallel_options(mixtral, tp=1, dp_cp=8, nvlink_domain=8, pinned=[2, 16]) == (2,)
    assert moe.training_ep_problem(mixtral, 8, 4) == "ep_not_dividing_dp"
    assert moe.training_ep_problem(mixtral, 3, 6) == "ep_not_dividing_experts"


QWEN_FT = """\
name: MoE fine-tune
model: qwen3-30b-a3b
workloads:
  - kind: finetune
    name: ft
    method: full
    tokens: 100M
    deadline: 1h
    sequence_length: 4k
    global_batch_tokens: 32k
constraints:
  allowed_gpus: [h100-sxm]
deployment: owned
"""


@pytest.mark.slow
def test_solve_chooses_ep_for_a_small_moe_finetune(tmp_path: Path, catalog: Catalog) -> None:
    f = tmp_path / "moe.yaml"
    # gpt-oss-20b (32 experts, top-4, 24 layers: a small search) without the fine-tuning memory options, as a
    # Megatron recipe runs: one 8-GPU server trains it in 903 s as EP 8 and in 1,367 s without EP (TP1 PP4 DP2),
    # so a 20-minute deadline is met by one server only with experts spread over its GPUs.
    text = QWEN_FT.replace("qwen3-30b-a3b", "gpt-oss-20b").replace("deadline: 1h", "deadline: 20min")
    f.write_text(text.replace("    sequence_length", "    memory_options: []\n    sequence_length"))
    plan = plan_file(f, catalog, top=1, explain=False)
    runs = [w for d in plan.designs for w in d.workloads if isinstance(w, TrainingPlan)]
    assert runs and runs[0].ep > 1 and runs[0].gpus == 8, runs
    # The checker re-evaluates the plan's layout, EP included, through the same physics (one path per design).
    assert check_plan(plan.designs[0], load_requirement(f, catalog), catalog) == []


@pytest.mark.parametrize(
    ("model", "value", "words"),
    [("qwen3-30b-a3b", "3", "does not divide the 128 routed experts"), ("llama-3.1-8b", "[1, 2]", "dense model")],
)
def test_bad_expert_parallel_is_refused_located(tmp_path: Path, model: str, value: str, words: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(QWEN_FT.replace("qwen3-30b-a3b", model).replace("    method: full\n",
                 f"    method: full\n    expert_parallel: {value}\n"))  # fmt: skip
    res = run_cli("estimate", str(f), "--gpu", "h100-sxm", "--count", "8")
    assert res.exit_code == 2, res.output
    assert re.search(r"bad\.yaml:7:\d+.*expert_parallel", res.output) and words in res.output, res.output


def test_estimate_ep_option_applies_to_training(tmp_path: Path) -> None:
    f = tmp_path / "moe.yaml"
    f.write_text(QWEN_FT)
    res = run_cli("estimate", str(f), "--gpu", "h100-sxm", "--count", "8", "--tp", "1", "--ep", "8")
    assert res.exit_code == 0, res.output
    assert "ep 8 (experts over the dp x cp GPUs)" in res.output
    assert re.search(r"expert parallel all-to-all\s+[\d.]+ ms", res.output), res.output
    bad = run_cli("estimate", str(f), "--gpu", "h100-sxm", "--count", "8", "--ep", "3")
    assert bad.exit_code == 2 and "--ep must divide" in bad.output, bad.output
