"""``clusterplan estimate`` for a serving workload: layout, batch, replicas, latency at load and cost of one pinned
configuration (the choices for omitted knobs are listed in :mod:`clusterplan.design.estimate`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.design.estimate import (
    ChosenConfig,
    CloudCost,
    EstimateResult,
    LoadSummary,
    TargetCheck,
    check_count,
    deployments_wanted,
    estimate_result,
    horizon_costs,
    offerings_for,
    owned_cost,
)
from clusterplan.errors import ClusterplanError
from clusterplan.evaluation import evaluate, pricing
from clusterplan.physics import moe, queueing, rules
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.reasons import EpNeedsFabric
from clusterplan.requirement.schema import (
    EngineSettings,
    PinnedConfig,
    Requirement,
    ServingWorkload,
    quality_class_of,
)

if TYPE_CHECKING:
    from clusterplan.candidates.table import Offering

TP_DEGREES = (1, 2, 4, 8, 16, 32, 64, 72)  # serving tp/pp defaults: the smallest that fits


PP_DEGREES = (1, 2, 4, 8, 16)


QUANT_ORDER = ("bf16", "fp16", "fp8", "int8", "fp4", "int4")


def _degrees(arch: ModelArchitecture, gpu: GpuSpec, cfg: PinnedConfig) -> tuple[list[int], list[int]]:
    """TP degrees to try (the pinned one, else those within the NVLink domain dividing the heads), and PP."""
    domain = gpu.scale_up_domain if gpu.scale_up != "pcie" else 1
    tps = [cfg.tp] if cfg.tp else [t for t in TP_DEGREES if t <= domain and arch.attention_heads % t == 0]
    pps = [cfg.pp] if cfg.pp else [p for p in PP_DEGREES if p <= arch.layers]
    return tps, pps


def _outside_quality_gate(req: Requirement, quant: str) -> str | None:
    """A pinned weight precision the requirement's quality gate does not allow: estimated as asked, and said, since
    ``solve`` would never choose it (the allowed_quant family)."""
    precision = "bf16" if quant in ("bf16", "fp16") else quant
    allowed = req.allowed_precisions()
    if precision in allowed:
        return None
    order = [q for q in QUANT_ORDER if q in allowed]
    return (
        f"weights {quant} are outside this requirement's quality gate (quality.max_loss {req.max_loss}"
        f"{', narrowed by constraints.quantizations' if req.constraints.quantizations is not None else ''}: "
        f"{', '.join(order)}): solve would not choose them; set quality.max_loss: "
        f"{quality_class_of(precision)} to allow them"
    )


def _default_quant(gpu: GpuSpec, req: Requirement, choices: list[str]) -> str:
    half = rules.half_precision(gpu)
    allowed = req.constraints.quantizations
    if allowed is None or half in allowed:
        choices.append(f"weights {half} (no --quant given)")
        return half
    for q in QUANT_ORDER:
        if q in allowed and (q not in ("bf16", "fp8") or rules.supports_precision(gpu, q)):
            choices.append(f"weights {q}: the first precision constraints.quantizations allows on {gpu.name}")
            return q
    return half


def _default_kv(quant: str, gpu: GpuSpec, workload: ServingWorkload, choices: list[str]) -> str:
    if workload.kv_cache_precision is not None:
        return workload.kv_cache_precision
    kv = rules.default_kv_precision(gpu, quant)
    choices.append(f"KV cache {kv} (follows the weights)")
    return kv


def _cloud_serving(
    req: Requirement, gpu: GpuSpec, offerings: list[Offering], *, tp: int, groups: int, tokens_per_s: float,
    needs_fabric: bool = False,
) -> CloudCost | None:  # fmt: skip
    """The cheapest instance type hosting ``groups`` TP groups, rented around the clock over the horizon."""
    found = pricing.cheapest_hosting(
        offerings, gpu_id=gpu.id, kind="cloud", tp=tp, groups=groups, horizon_months=req.budget.horizon,
        needs_fabric=needs_fabric,
    )  # fmt: skip
    if found is None:
        return None
    o, n, _ = found
    line = pricing.cloud_line(o, n, gpu_name=gpu.name)
    c = horizon_costs(req, [line], tokens_per_s=tokens_per_s)
    return CloudCost(
        instance=o.label, gpus_per_instance=o.gpus_per_unit, instances=n, pricing=req.constraints.pricing,
        usd_per_hour=n * o.usd_per_hour, usd_per_month=c.monthly_usd, usd_total=c.total_usd,
        usd_per_million_tokens=c.usd_per_million_output_tokens, costs=c, hardware=[line],
    )  # fmt: skip


def _serving_layout(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    cfg: PinnedConfig,
    quant: str,
    kv: str,
    context: float,
    a: Assumptions,
    choices: list[str],
) -> tuple[int, int]:
    """tp and pp: as given, else the smallest that fits the weights and one sequence (tp = ep when only ep is given)."""
    if cfg.tp is None and cfg.ep is not None and cfg.ep > 1:
        cfg = cfg.model_copy(update={"tp": cfg.ep})
        choices.append(f"tp={cfg.ep}: each stage is the EP group of --ep {cfg.ep}")
    if cfg.tp is not None and cfg.pp is not None:
        return cfg.tp, cfg.pp
    if cfg.tp is not None and cfg.count is not None and cfg.dp is not None and cfg.pp is None:
        return cfg.tp, max(1, cfg.count // (cfg.tp * cfg.dp))
    tps, pps = _degrees(arch, gpu, cfg)
    for pp in pps:
        for tp in tps:
            if cfg.count is not None and cfg.count % (tp * pp):
                continue
            layout = Layout(
                tp=tp, pp=pp, quant=quant, kv_precision=kv, ep=cfg.ep or 1, attention_dp=bool(cfg.attention_dp)
            )
            if moe.max_batch_by_memory(arch, gpu, layout, context_tokens=context, assumptions=a) > 0:
                if cfg.tp is None or cfg.pp is None:
                    choices.append(f"tp={tp}, pp={pp}: the smallest layout whose weights and one sequence fit")
                return tp, pp
    tp, pp = tps[-1], pps[0]
    choices.append(f"tp={tp}, pp={pp}: nothing smaller fits; shown for its reasons")
    return tp, pp


_MOE_LAYOUT_FIX = {
    "ep_not_divisor": "--ep must divide --tp (each stage's GPUs split into EP groups); e.g. --tp 8 --ep 8",
    "ep_without_experts": "--ep applies to mixture-of-experts models only; drop --ep",
    "ep_exceeds_experts": "--ep may not exceed the model's routed experts; use a smaller --ep",
}


def _moe_layout(arch: ModelArchitecture, cfg: PinnedConfig, tp: int) -> tuple[int, bool]:
    """(ep, attention_dp) as given (default 1, False); a user error when the model or tp cannot take them."""
    ep, attention_dp = cfg.ep or 1, bool(cfg.attention_dp)
    problem = moe.layout_problem(arch, tp, ep, attention_dp)
    if problem is not None:
        raise ClusterplanError(
            f"expert parallelism --ep {ep} does not fit {arch.name} with tp {tp} ({arch.moe_experts} routed expert(s))",
            fix=_MOE_LAYOUT_FIX[problem],
        )
    return ep, attention_dp


def estimate_serving(
    req: Requirement,
    index: int,
    w: ServingWorkload,
    arch: ModelArchitecture,
    gpu: GpuSpec,
    cfg: PinnedConfig,
    catalog: Catalog,
    choices: list[str],
) -> EstimateResult:
    """One pinned serving configuration under the requirement's assumptions and the workload's engine."""
    if cfg.engine is not None:  # --engine: the workload's engine block under another engine name
        settings = w.engine.model_copy(update={"name": cfg.engine}) if w.engine is not None else None
        w = w.model_copy(update={"engine": settings or EngineSettings(name=cfg.engine)})
    a = evaluate.serving_assumptions(req.assumptions, w)
    quant = cfg.quant or _default_quant(gpu, req, choices)
    kv = cfg.kv_quant or _default_kv(quant, gpu, w, choices)
    context = w.context_tokens
    tp, pp = _serving_layout(arch, gpu, cfg, quant, kv, context, a, choices)
    ep, attention_dp = _moe_layout(arch, cfg, tp)
    layout = Layout(tp=tp, pp=pp, quant=quant, kv_precision=kv, ep=ep, attention_dp=attention_dp)
    most = evaluate.max_batch(arch, gpu, w, layout, a)
    if cfg.batch is not None:
        batch = cfg.batch
    else:
        batch = evaluate.serving_batch(most)
        cap = a.batch_cap(gpu.memory_gib, gpu.name)
        limit = "the engine's KV pool holds" if batch < cap else f"the engine's batch cap ({a.engine})"
        choices.append(f"batch {batch}: the largest {limit} (the planner's operating point)")
    est = evaluate.serving_estimate(arch, gpu, w, layout, batch=batch, assumptions=a)
    tk: dict[str, Any] = dict(input_tokens=w.input_tokens, output_tokens=w.output_tokens, assumptions=a)
    rates = evaluate.serving_rates(est, w, a)
    rate = rates.rate_rps
    average = w.requests_per_s
    peak = average * w.peak_to_average
    group = tp * pp
    if cfg.dp is None and cfg.count is None:
        usable = rate if rate > 0 else a.utilisation_ceiling * est.requests_per_s
        needed = math.ceil(peak / usable - 1e-9) if usable > 0 else 1
        replicas = max(1, needed) + w.redundancy
        why = "meeting the p95 targets" if rate > 0 else "at the utilisation ceiling (targets out of reach)"
        extra = f" + {w.redundancy} spare" if w.redundancy else ""
        choices.append(f"{replicas} replica(s): peak {peak:,.2f} req/s at {usable:,.2f} req/s per replica {why}{extra}")
    else:
        replicas = check_count(cfg.count, tp, pp, cfg.dp, "dp (replicas)")
    count = replicas * group
    per_replica = peak / replicas
    lat = queueing.latency_at_load(est, per_replica, **tk)
    checks = [
        TargetCheck(name=name, target_s=target, estimate_s=value, met=value <= target)
        for name, target, value in (
            ("p95 latency", w.p95_latency, lat.p95_e2e_s),
            ("p95 time to first token", w.p95_ttft, lat.p95_ttft_s),
            ("p95 time per output token", w.p95_tpot, lat.p95_tpot_s),
        )
        if target is not None
    ]
    load = LoadSummary(
        average_requests_per_s=average,
        peak_requests_per_s=peak,
        per_replica_requests_per_s=per_replica,
        latency=lat,
        targets=checks,
        max_rate_for_targets_per_replica=rate,
        rate_no_targets_per_replica=rates.rate_no_targets_rps,
        rated=rates.rated,
        serves_peak=lat.stable and all(c.met for c in checks),
    )
    notes: list[str] = []
    outside = _outside_quality_gate(req, quant)
    if outside:
        notes.append(outside)
    if not lat.stable:
        notes.append(
            f"peak load is {lat.utilisation:.0%} of a replica's capacity, above the {a.utilisation_ceiling:.0%} "
            "ceiling: add replicas"
        )
    want_cloud, want_owned = deployments_wanted(req, cfg)
    offerings = offerings_for(catalog, req, gpu)
    tokens_per_s = average * w.output_tokens
    cloud = owned = None
    host_tp, per_stage = moe.server_groups(layout, gpu)  # a wide-EP stage: one group per server
    hosting: dict[str, Any] = dict(tp=host_tp, groups=replicas * pp * per_stage, tokens_per_s=tokens_per_s)
    hosting["needs_fabric"] = per_stage > 1
    if want_cloud:
        cloud = _cloud_serving(req, gpu, offerings, **hosting)
        if cloud is None and not hosting["needs_fabric"]:
            notes.append(f"no cloud instance in the catalog hosts a TP {tp} group of {gpu.name}")
    if want_owned:
        owned, unowned = owned_cost(req, catalog, gpu, offerings, **hosting)
        if unowned:
            notes.append(unowned)
    fabricless = hosting | {"needs_fabric": False}
    if (
        hosting["needs_fabric"]
        and cloud is None
        and owned is None
        and _cloud_serving(req, gpu, offerings, **fabricless)
    ):
        # hosted only on instances without a fabric between them: the all-to-all has no network to ride
        no_fabric = EpNeedsFabric(gpu=rules.short_name(gpu), ep=ep, gpus_per_domain=host_tp)
        est = est.model_copy(update={"feasible": False, "why_not": [*est.why_not, no_fabric]})
    config = ChosenConfig(
        workload_index=index, workload=w.name, kind="serving", model=arch.name, gpu_id=gpu.id, gpu_name=gpu.name,
        count=count, tp=tp, pp=pp, dp=replicas, ep=ep, attention_dp=attention_dp, quant=quant, kv_quant=kv,
        batch=batch, engine=a.engine, batch_cap=a.batch_cap(gpu.memory_gib, gpu.name),
    )  # fmt: skip
    return estimate_result(
        req,
        config,
        est,
        a,
        gpu.gpu_class,
        serving=est,
        load=load,
        cloud=cloud,
        owned=owned,
        choices=choices,
        notes=notes,
    )
