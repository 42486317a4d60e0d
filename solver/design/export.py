"""``clusterplan export``: one design of a plan as the engines run it, and what a benchmark should see.

For each replica group of each serving workload of the chosen design: the engine settings a launch needs
(TP/PP sizes, weight and KV precision, memory fraction, batch cap, chunked prefill, context, speculative
decoding, prefix caching) and the figures a benchmark replaying the requirement's workload should report.
Every figure comes from :mod:`clusterplan.evaluation.evaluate` (one path per design): the engine is resolved by
``evaluate.serving_assumptions``, the batch by ``evaluate.max_batch``, the latencies by the queueing model at the
replica's share of the requirement's average request rate. Rendering (command lines, files) is
:mod:`clusterplan.render.export_view`.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from clusterplan.errors import ClusterplanError
from clusterplan.evaluation import evaluate, pools
from clusterplan.physics import disagg, queueing
from clusterplan.physics.factors import SpeculativeDecoding
from clusterplan.plan import ServingPlan

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
    from clusterplan.physics.factors import Assumptions
    from clusterplan.physics.types import ServingEstimate
    from clusterplan.plan import Plan
    from clusterplan.requirement.load import ResolvedRequirement
    from clusterplan.requirement.schema import ServingWorkload

BENCH_PROMPTS_PER_RPS = 60  # a benchmark of one minute of requests at the average rate (at least 200 prompts)
_HF_CONFIG = re.compile(r"https://huggingface\.co/([^/]+/[^/]+)/")


class Expected(BaseModel):
    """What a benchmark at the requirement's average rate should report if the plan is right (per replica)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_rate_rps: float = Field(description="requests/s one replica receives (its share of the average rate)")
    output_tokens_per_s: float = Field(description="output tokens/s one replica delivers at that rate")
    mean_ttft_s: float | None = Field(description="None: not modelled (a prefill pool's mean wait)")
    p95_ttft_s: float
    mean_tpot_s: float | None
    p95_tpot_s: float
    mean_e2e_s: float | None
    p95_e2e_s: float
    saturated_output_tokens_per_s: float = Field(description="one replica kept full at its batch cap")


class Launch(BaseModel):
    """One replica group: the engine settings of one replica and how many to start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str
    role: Literal["aggregated", "prefill", "decode"] = Field(
        "aggregated", description="aggregated replicas, or one pool of a disaggregated design (launched as such)"
    )
    engine: str = Field(description="engine id (catalog/engines.yaml)")
    model: str = Field(description="Hugging Face repository or catalog id of the served model")
    gpu: str
    gpu_name: str
    replicas: int
    tp: int
    pp: int
    quant: str
    kv_cache: str
    memory_fraction: float = Field(description="the engine's memory fraction (its own meaning: memory_policy)")
    memory_policy: str
    max_batch: int = Field(description="cap on concurrent sequences per replica")
    prefill_chunk_tokens: int
    max_model_len: int = Field(description="context reserved per sequence, tokens")
    speculative: SpeculativeDecoding | None = None
    prefix_cache_hit_rate: float = 0.0
    input_tokens: int
    output_tokens: int
    average_rate_rps: float = Field(description="the requirement's average request rate, all replicas")
    peak_rate_rps: float
    num_prompts: int
    expected: Expected
    targets: dict[str, float] = Field(description="p95 targets in seconds: latency, ttft, tpot (those given)")


def model_repo(source: str, fallback: str) -> str:
    """The Hugging Face repository a catalog model's config came from, else ``fallback``."""
    found = _HF_CONFIG.match(source)
    return found.group(1) if found else fallback


def export_design(
    resolved: ResolvedRequirement, catalog: Catalog, plan: Plan, *, design: int = 1, engine: str | None = None
) -> list[Launch]:
    """The launches of design ``design`` (1-based) of ``plan``; ``engine`` re-evaluates under another engine."""
    if not plan.designs:
        raise ClusterplanError(
            "the requirement has no feasible design to export",
            fix="run `clusterplan solve FILE` to see what conflicts and how to relax it",
        )
    if not 1 <= design <= len(plan.designs):
        raise ClusterplanError(
            f"design {design} does not exist: the plan has {len(plan.designs)}",
            fix=f"pass --design between 1 and {len(plan.designs)}",
        )
    req = resolved.requirement
    chosen = plan.designs[design - 1]
    by_name = {w.name: (i, w) for i, w in enumerate(req.workloads)}
    out: list[Launch] = []
    for wp in chosen.workloads:
        if not isinstance(wp, ServingPlan):
            continue
        i, w = by_name[wp.workload]
        assert w.kind == "serving"
        if engine is not None:
            settings = w.engine.model_copy(update={"name": engine}) if w.engine is not None else None
            from clusterplan.requirement.schema import EngineSettings

            w = w.model_copy(update={"engine": settings or EngineSettings(name=engine)})
        out += _launches(resolved, catalog, i, w, wp)
    return out


def _launches(
    resolved: ResolvedRequirement, catalog: Catalog, index: int, w: ServingWorkload, wp: ServingPlan
) -> list[Launch]:
    arch = resolved.model_for(index)
    req = resolved.requirement
    a = evaluate.serving_assumptions(req.assumptions, w)
    cat_model = catalog.models.get(arch.name) or next((m for m in catalog.models.values() if m.name == arch.name), None)
    repo = model_repo(cat_model.source, cat_model.id) if cat_model is not None else arch.name
    # Each side (aggregated, or a pool) takes the whole demand: its groups share it by their rated rates.
    weights: dict[str, float] = {}
    for g in wp.groups:
        weights[g.role] = weights.get(g.role, 0.0) + g.replicas * max(g.rate_rps, g.rate_no_targets_rps)
    targets = {
        k: v for k, v in (("latency", w.p95_latency), ("ttft", w.p95_ttft), ("tpot", w.p95_tpot)) if v is not None
    }
    launches: list[Launch] = []
    for g in wp.groups:
        spec = catalog.gpus[g.gpu]
        # the launch carries TP, PP and the precisions (no EP or attention-DP flag): its replica's dense layout
        layout = replace(evaluate.replica_layout(g), ep=1, attention_dp=False)
        batch = evaluate.serving_batch(evaluate.max_batch(arch, spec, w, layout, req.assumptions))
        est = evaluate.serving_estimate(arch, spec, w, layout, batch=batch, assumptions=req.assumptions)
        share = w.requests_per_s * max(g.rate_rps, g.rate_no_targets_rps) / (weights[g.role] or 1.0)
        expected = _expected(est, arch, spec, w, req.assumptions, a, g.role, share)
        policy, fraction, _ = a.memory_policy(g.tp)
        launches.append(
            Launch(
                workload=w.name, engine=a.engine, model=repo, gpu=g.gpu, gpu_name=g.gpu_name, replicas=g.replicas,
                tp=g.tp, pp=g.pp, quant=g.quant, kv_cache=g.kv_cache, memory_fraction=fraction, memory_policy=policy,
                max_batch=batch, prefill_chunk_tokens=a.chunk_tokens, max_model_len=math.ceil(w.context_tokens),
                speculative=a.speculative, prefix_cache_hit_rate=a.prefix_cache_hit_rate,
                input_tokens=round(w.input_tokens), output_tokens=round(w.output_tokens),
                average_rate_rps=w.requests_per_s, peak_rate_rps=w.requests_per_s * w.peak_to_average,
                num_prompts=max(200, math.ceil(w.requests_per_s * BENCH_PROMPTS_PER_RPS)),
                expected=expected, targets=targets, role=g.role,
            )
        )  # fmt: skip
    return launches


def _expected(
    est: ServingEstimate,
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: ServingWorkload,
    base: Assumptions,
    a: Assumptions,
    role: str,
    share: float,
) -> Expected:
    """What one replica of ``role`` should show at ``share`` requests/s: the queueing model of an aggregated
    replica, or of a prefill replica (TTFT incl. the KV transfer) or a decode-only one (evaluation/pools.py)."""
    if role == "prefill":
        p = pools.prefill_at(est, arch, spec, w, base, share)
        return Expected(
            request_rate_rps=share, output_tokens_per_s=0.0, mean_ttft_s=None, p95_ttft_s=p.p95_ttft_s,
            mean_tpot_s=None, p95_tpot_s=0.0, mean_e2e_s=None, p95_e2e_s=p.p95_ttft_s,
            saturated_output_tokens_per_s=0.0,
        )  # fmt: skip
    if role == "decode":
        dec = disagg.decode_only(est, output_tokens=w.output_tokens)
        lat = pools.decode_at_load(dec, w, base)(share)
        saturated = dec.output_tokens_per_s
    else:
        lat = queueing.latency_at_load(
            est, share, input_tokens=w.input_tokens, output_tokens=w.output_tokens, assumptions=a
        )
        saturated = est.output_tokens_per_s
    return Expected(
        request_rate_rps=share, output_tokens_per_s=share * w.output_tokens, mean_ttft_s=lat.mean_ttft_s,
        p95_ttft_s=lat.p95_ttft_s, mean_tpot_s=lat.mean_tpot_s, p95_tpot_s=lat.p95_tpot_s, mean_e2e_s=lat.mean_e2e_s,
        p95_e2e_s=lat.p95_e2e_s, saturated_output_tokens_per_s=saturated,
    )  # fmt: skip
