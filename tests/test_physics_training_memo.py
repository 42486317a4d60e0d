"""The training physics' memos (``physics/memo.py``: activations, model state, FLOPs, compute split and rate, GEMM
shapes, rules, links, all-reduce terms) hand back what a fresh computation gives, bit for bit: each input a memo reads
is varied alone around random layouts, the variant estimated right after its base (a key missing that input would
hand back the base's answer), and every estimate is held to one computed with every memo emptied. The candidate rows,
and so every training plan, rest on those figures."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from clusterplan.catalog.load import Catalog
from clusterplan.physics import comm, memo, training
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.optimizer_memory import MemoryPlan
from clusterplan.physics.training_job import FrameworkRates, TrainingJob, TrainingSettings
from clusterplan.physics.types import TrainingEstimate
from conftest import one_axis_variants

# Each input of an estimate the memos read, and the values it takes.
AXES: dict[str, list[Any]] = {
    "model": ["llama-2-7b", "mixtral-8x7b", "llama-33b"],  # llama-33b: 52 heads, split by no TP of 8
    "gpu": ["h100-sxm", "a100-80gb", "l40s", "mi300x", "v100"],
    "assumptions": [Assumptions(), Assumptions(flash_attention=False)],
    "method": ["full", "lora", "qlora"],
    "lora_rank": [8, 64],
    "precision": ["bf16", "fp8", "fp32"],
    "optimizer": ["adamw", "sgd"],
    "sequence_length": [2048.0, 4096.0, 4094.0],  # 4094: no CP of 2 splits it in four
    "global_batch_tokens": [1_048_576.0, 4_194_304.0],
    "framework": [FrameworkRates(), FrameworkRates(achieved_rate=0.8, tp_comm_overlap=False, dp_comm_overlap=False)],
    "tp": [1, 2, 4, 8],
    "pp": [1, 2, 4],
    "cp": [1, 2],
    "ep": [1, 2],
    "virtual_stages": [1, 2],
    "recompute": ["none", "selective", "full"],
    "recompute_layers": [None, 1, 3],
    "dp": [1, 2, 8, 64],
    "zero_stage": [0, 1, 2, 3, 5],  # 5: no such stage, a reason
    "micro_batch": [1, 2, 4],
    "memory_plan": [
        MemoryPlan.of(()),
        MemoryPlan.of(("bf16_weights", "optimizer_in_backward")),
        MemoryPlan.of(("adamw8bit", "activation_offload")),
        MemoryPlan.of(("paged_optimizer",)),
        MemoryPlan.of(("optimizer_offload",)),
    ],
    "node": [8, 4],
}


def _estimate(catalog: Catalog, p: dict[str, Any]) -> TrainingEstimate:
    job = TrainingJob(
        tokens=1e11, deadline_s=30 * 86400.0, sequence_length=p["sequence_length"],
        global_batch_tokens=p["global_batch_tokens"], method=p["method"], lora_rank=p["lora_rank"],
        precision=p["precision"], optimizer=p["optimizer"], framework=p["framework"],
    )  # fmt: skip
    layout = Layout(
        tp=p["tp"], pp=p["pp"], cp=p["cp"], ep=p["ep"], virtual_stages=p["virtual_stages"], recompute=p["recompute"],
        recompute_layers=p["recompute_layers"],
    )  # fmt: skip
    settings = TrainingSettings(
        dp=p["dp"], zero_stage=p["zero_stage"], micro_batch=p["micro_batch"], memory_plan=p["memory_plan"]
    )
    return training.estimate_training(
        catalog.model(p["model"]), catalog.gpu(p["gpu"]), job=job, layout=layout, settings=settings,
        nodes_gpus_per_node=p["node"], assumptions=p["assumptions"],
    )  # fmt: skip


def test_memoised_training_estimates_are_the_fresh_ones(catalog: Catalog) -> None:
    rng = random.Random(33)
    cases = one_axis_variants([{axis: rng.choice(values) for axis, values in AXES.items()} for _ in range(12)], AXES)
    memo.clear_memos()
    warm = [_estimate(catalog, p) for p in cases]  # each variant right after its base, memos kept
    for p, got in zip(cases, warm, strict=True):
        memo.clear_memos()
        fresh = _estimate(catalog, p)
        assert got == fresh, {k: v for k, v in p.items() if not dataclasses.is_dataclass(v)}
        assert got.model_dump() == fresh.model_dump()


def test_an_all_reduce_over_one_link_follows_its_gpus_and_efficiency() -> None:
    link = comm.Link("nvlink", 450.0, 2e-6)
    for n, eff in [(2, 0.7), (8, 0.7), (8, 0.5), (2, 0.5)]:  # each after one sharing the link and n or efficiency
        fresh = min(lat + 1e6 * per_byte for lat, per_byte in comm.nccl_allreduce_terms(n, link, eff))
        assert comm.nccl_allreduce_s(1e6, n, link, eff) == fresh
