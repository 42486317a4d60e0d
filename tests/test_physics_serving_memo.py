"""The serving physics' memos (``physics/memo.py``: a layout's largest batch and weights, a GPU type's rates per
precision, a workload's engine-resolved assumptions) hand back what a fresh computation gives, bit for bit: each input
they read is varied alone around random layouts, the variant estimated right after its base (a key missing that input
would hand back the base's answer), and every figure is held to one computed with every memo emptied. The serving
candidate rows, and so every serving plan, rest on those figures."""

from __future__ import annotations

import random
from typing import Any

from clusterplan.catalog.load import Catalog
from clusterplan.evaluation import evaluate
from clusterplan.physics import memo
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.requirement.schema import EngineSettings, ServingWorkload
from conftest import one_axis_variants

# Each input of a replica's batch and estimate the memos read, and the values it takes.
AXES: dict[str, list[Any]] = {
    "model": ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "llama-3.1-70b"],  # dense, MoE, MLA + MoE
    "gpu": ["h100-sxm", "b200", "mi355x", "l40s", "a100-80gb"],  # FP4 as NVFP4 and MXFP4, none; PCIe
    "quant": ["bf16", "fp8", "int4", "fp4"],
    "kv": ["bf16", "fp8"],
    "tp": [1, 2, 4, 8],
    "pp": [1, 2],
    "expert_parallel": [False, True],  # ep = tp with attention DP (an MoE model's)
    "tokens": [(1000, 200, None), (4000, 500, 16000)],  # input, output, max context
    "engine": [
        None,
        EngineSettings(name="tensorrt-llm"),
        EngineSettings(max_batch=64),
        EngineSettings(memory_fraction=0.8),
    ],
    "assumptions": [Assumptions(), Assumptions(int4_group_size=64), Assumptions(engine="sglang")],
}


def _figures(catalog: Catalog, p: dict[str, Any]) -> tuple[int, str, str]:
    arch, spec = catalog.model(p["model"]), catalog.gpu(p["gpu"])
    moe_ep = p["expert_parallel"] and arch.moe_experts and p["tp"] > 1
    layout = Layout(
        tp=p["tp"], pp=p["pp"], quant=p["quant"], kv_precision=p["kv"], ep=p["tp"] if moe_ep else 1,
        attention_dp=bool(moe_ep),
    )  # fmt: skip
    input_tokens, output_tokens, context = p["tokens"]
    w = ServingWorkload(
        kind="serving", requests_per_min=60, input_tokens=input_tokens, output_tokens=output_tokens,
        max_context=context, engine=p["engine"],
    )  # fmt: skip
    a = p["assumptions"]
    top = evaluate.max_batch(arch, spec, w, layout, a)
    est = evaluate.serving_estimate(arch, spec, w, layout, batch=max(top, 1), assumptions=a)
    reasons = evaluate.serving_reasons(arch, spec, w, layout, batch=1, assumptions=a)
    return top, repr(est), repr(reasons)  # repr: every float exactly, NaN equal to itself


def test_memoised_serving_figures_are_the_fresh_ones(catalog: Catalog) -> None:
    rng = random.Random(31)
    # one base pinned where MLA's attention multiplies at another precision than the cache's (Hopper, FP8 KV)
    pinned = {axis: values[0] for axis, values in AXES.items()} | {"quant": "fp8", "kv": "fp8", "tp": 8}
    bases = [pinned] + [{axis: rng.choice(values) for axis, values in AXES.items()} for _ in range(30)]
    cases = one_axis_variants(bases, AXES)
    memo.clear_memos()
    warm = [_figures(catalog, p) for p in cases]  # each variant right after its base, memos kept
    for p, got in zip(cases, warm, strict=True):
        memo.clear_memos()
        assert got == _figures(catalog, p), p
