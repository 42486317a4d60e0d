""" "No GPU can run <workload>": only the GPUs the requirement allows are reasoned about.

Before, the examples were the two most common reasons over the whole catalog (A10 and A100 40GB
for a model that needs 211 GiB per GPU), GPUs that allowed_gpus or the deployment had already
ruled out. Now the closest allowed GPU is the example, and the message says whether any GPU the
requirement rules out could run the workload, and what rules it out.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterplan.candidates.table import AVAILABILITY, MEMORY, CandidateTable, Exclusion, GpuType, Limits, Offering
from clusterplan.explain.infeasibility import unplaceable_workloads
from clusterplan.physics.reasons import ReasonCategory, Stated
from clusterplan.pipeline import PlanOptions, plan_table
from conftest import assert_not_dangling, infeasibility_of, serving_workload, solve_doc


def _unplaceable_table(limits: Limits, offerings: tuple[Offering, ...]) -> CandidateTable:
    gpus = {
        "small": GpuType(id="small", name="Small 24GB", memory_gib=24.0, price_usd=2000),
        "mid": GpuType(id="mid", name="Mid 80GB", memory_gib=80.0, price_usd=20000),
        "big": GpuType(id="big", name="Big 500GB", memory_gib=500.0),
    }
    excl = (
        Exclusion("small", MEMORY, Stated("does not fit in memory: M needs 211 GiB per GPU; Small 24GB has 24 GiB", ReasonCategory.MEMORY)),
        Exclusion("mid", MEMORY, Stated("does not fit in memory: M needs 211 GiB per GPU; Mid 80GB has 80 GiB", ReasonCategory.MEMORY)),
        Exclusion("big", AVAILABILITY, Stated("Big 500GB: no cloud instance in the allowed clouds and regions, and no purchase price in the catalog", ReasonCategory.AVAILABILITY)),
    )  # fmt: skip
    return CandidateTable(workloads=(serving_workload((), excl),), gpus=gpus, offerings=offerings, limits=limits)


def _offer(gid: str, kind: str, fb: tuple[tuple[str, str], ...] = ()) -> Offering:
    return Offering(key=f"{kind}:{gid}", kind=kind, gpu_id=gid, gpus_per_unit=8, tp_domain=8, forbidden_by=fb)  # type: ignore[arg-type]


def test_no_gpu_can_run_lists_only_the_allowed_gpus_and_names_the_ones_that_could() -> None:
    t = _unplaceable_table(
        Limits(allowed_gpus=frozenset({"small"})), (_offer("small", "owned"), _offer("mid", "owned"))
    )
    (msg,) = unplaceable_workloads(t)
    assert "Small 24GB has 24 GiB" in msg
    assert "Mid 80GB" not in msg  # ruled out by allowed_gpus: not an example of why nothing fits
    assert "allowed" in msg and "small" in msg
    assert "big" in msg  # the one GPU that could run it, and why it is out of reach
    assert "no purchase price" in msg


def test_no_gpu_can_run_ignores_gpus_the_deployment_rules_out() -> None:
    cloud_only = (("deployment", "deployment: cloud excludes owned servers"),)
    t = _unplaceable_table(Limits(deployment="cloud"), (_offer("small", "cloud"), _offer("mid", "owned", cloud_only)))
    (msg,) = unplaceable_workloads(t)
    assert "Small 24GB has 24 GiB" in msg
    assert "Mid 80GB" not in msg
    plan = plan_table(t, PlanOptions(top=1))
    assert plan.infeasibility is not None and plan.infeasibility.unplaceable == [msg]
    assert_not_dangling(plan.infeasibility.text)


def test_no_gpu_can_run_without_restrictions_keeps_the_plain_sentence() -> None:
    t = _unplaceable_table(Limits(), (_offer("small", "owned"), _offer("mid", "owned")))
    t = CandidateTable(
        workloads=(serving_workload((), tuple(e for e in t.workloads[0].exclusions if e.gpu_id != "big")),),
        gpus={g: t.gpus[g] for g in ("small", "mid")},
        offerings=t.offerings,
        limits=t.limits,
    )
    (msg,) = unplaceable_workloads(t)
    assert msg.startswith("svc: no GPU can run M (e.g. ")
    # The first example is the GPU that comes closest (the most memory), not the first in the alphabet.
    assert msg.index("Mid 80GB") < msg.index("Small 24GB")


GIANT_CATALOG = {
    "sources": {"giant-src": {"title": "a made-up giant model and GPU", "as_of": "2026-11"}},
    "models": [
        {
            "id": "giant-34t",
            "name": "Giant 34T",
            "layers": 1600,  # 17T fit a GB200 NVL72 rack at fp4 (TP 64, 150 GB a GPU); 34T fits nothing
            "hidden_size": 65536,
            "attention_heads": 512,
            "kv_heads": 8,
            "ffn_size": 65536,
            "vocab_size": 128256,
            "max_context": 8192,
            "published_params": 3.42e13,
            "source": "https://example.invalid/giant/config.json",
            "as_of": "2026-11",
        }
    ],
}

GIANT: dict[str, Any] = {
    "name": "giant",
    "model": "giant-34t",
    "workloads": [
        {
            "kind": "serving",
            "name": "chat",
            "requests_per_min": 10,
            "input_tokens": 500,
            "output_tokens": 100,
            "max_context": "1k",
        }
    ],
    "deployment": "either",
    "constraints": {"allowed_gpus": ["h100-sxm", "a100-80gb"]},
}


def _big_gpu_row() -> dict[str, Any]:
    from clusterplan.catalog.load import load_catalog

    row = load_catalog().gpu("h200").model_dump(mode="json", exclude_none=True)
    row.update(
        id="big-g1",
        aliases=[],
        name="Big G1 1200GB",
        memory_gb=1200.0,
        memory_gib=1117.0,
        provisional=False,
        provisional_fields=[],
        also_sources=[],
        source="giant-src",
        as_of="2026-11",
    )
    for key in ("notes", "price"):
        row.pop(key, None)
    return row


@pytest.mark.parametrize("with_big_gpu", [False, True])
def test_no_gpu_can_run_a_giant_model_names_only_allowed_gpus_cli(tmp_path: Path, with_big_gpu: bool) -> None:
    cat = dict(GIANT_CATALOG)
    if with_big_gpu:
        cat["gpus"] = [_big_gpu_row()]
    cat_file = tmp_path / "cat.yaml"
    cat_file.write_text(yaml.safe_dump(cat, sort_keys=False), encoding="utf-8")
    inf = infeasibility_of(tmp_path, GIANT, "--catalog", str(cat_file))
    (msg,) = inf["unplaceable"]
    assert_not_dangling(inf["text"])
    # Only the two allowed GPUs are reasoned about.
    names = set(re.findall(r"(A10 24GB|A100 SXM4 40GB|B200|H200|MI3\d\dX|L40S|RTX)", msg))
    assert names == set(), msg
    assert "A100 SXM4 80GB has 80.0 GiB" in msg  # the closest allowed GPU, as the example
    assert "a100-80gb, h100-sxm" in msg
    if with_big_gpu:
        assert "big-g1" in msg and "not in constraints.allowed_gpus" in msg
    else:
        assert "no other GPU" in msg
    code, out = solve_doc(tmp_path, GIANT, "--catalog", str(cat_file))
    assert code == 1 and "a100-80gb, h100-sxm" in out
