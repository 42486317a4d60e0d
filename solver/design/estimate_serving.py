"""``clusterplan estimate`` for a serving workload: layout, batch, replicas, latency at load and cost of one pinned
configuration (the choices for omitted knobs are listed in :mod:`clusterplan.design.estimate`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.design.estimate import (
    ChosenConfig,
    CloudCost,
    EstimateResult,
    Hosting,
    LoadSummary,
    PoolSummary,
    TargetCheck,
    check_count,
    deployments_wanted,
    estimate_result,
    horizon_costs,
    offerings_for,
    owned_cost,
)
from clusterplan.errors import ClusterplanError
from clusterplan.evaluation import evaluate, pools, pricing
from clusterplan.physics import moe, queueing, rules
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.reasons import EpNeedsFabric
from clusterplan.physics.types import ServingEstimate
from clusterplan.plan import Autoscaler
from clusterplan.requirement.schema import (
    EngineSettings,
    PinnedConfig,
    Requirement,
    ServingWorkload,
    quality_class_of,
)
from clusterplan.wording import fmt

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
    req: Requirement, gpu: GpuSpec, offerings: list[Offering], hosting: Hosting, operations: pricing.Operations,
    workload: str, burst_usd_per_month: float = 0.0,
) -> CloudCost | None:  # fmt: skip
    """The cheapest instance type hosting ``hosting``'s groups, rented around the clock over the horizon, run as
    ``workload``'s one pool (and its demand profile's burst replicas, ``burst_usd_per_month``)."""
    found = pricing.cheapest_hosting(
        offerings, gpu_id=gpu.id, kind="cloud", tp=hosting.tp, groups=hosting.groups,
        horizon_months=req.budget.horizon, needs_fabric=hosting.needs_fabric,
        min_network_gb_per_s=hosting.network_gb_per_s,
    )  # fmt: skip
    if found is None:
        return None
    o, n, _ = found
    line = pricing.cloud_line(o, n, gpu_name=gpu.name)
    c = horizon_costs(
        req, [line], operations=operations, serves=workload, tokens_per_s=hosting.tokens_per_s,
        burst_usd_per_month=burst_usd_per_month,
    )  # fmt: skip
    return CloudCost(
        instance=o.label, gpus_per_instance=o.gpus_per_unit, instances=n, pricing=o.term,
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


def workload_assumptions(
    req: Requirement, w: ServingWorkload, engine: str | None
) -> tuple[ServingWorkload, Assumptions]:
    """The workload under ``--engine`` (its engine block under another engine name) and the assumptions it runs
    under (:func:`clusterplan.evaluation.evaluate.serving_assumptions`)."""
    if engine is not None:
        settings = w.engine.model_copy(update={"name": engine}) if w.engine is not None else None
        w = w.model_copy(update={"engine": settings or EngineSettings(name=engine)})
    return w, evaluate.serving_assumptions(req.assumptions, w)


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
    w, a = workload_assumptions(req, w, cfg.engine)
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
    role = cfg.role or "aggregated"
    rates: evaluate.ServingRates | None = None
    pooled: pools.PoolRates | None = None
    if role == "aggregated":
        rates = evaluate.serving_rates(est, w, a)
        rate, ceiling = rates.rate_rps, rates.rate_no_targets_rps
    else:
        pooled = _pool_rates(role, est, arch, gpu, w, req)
        rate, ceiling = pooled.rate_rps, pooled.rate_no_targets_rps
    average = w.requests_per_s
    peak = average * w.peak_to_average * (cfg.share or 1.0)  # this group's part of the peak demand
    group = tp * pp
    burst = _burst(w, cfg, role)
    replicas = _pinned_replicas(cfg, tp, pp, burst)
    if replicas is None:
        replicas = _default_replicas(peak, rate, ceiling, w.redundancy, choices)
    count = (replicas + burst) * group
    per_replica = peak / (replicas + burst)  # every replica runs at the peak hour
    notes: list[str] = []
    outside = _outside_quality_gate(req, quant)
    if outside:
        notes.append(outside)
    load = pool = None
    if pooled is not None:
        pool = _pool_summary(est, arch, gpu, w, a, pooled, role, per_replica)
        utilisation, stable = pool.utilisation, pool.stable
    elif rates is not None:
        load = _load_summary(est, w, a, rates, average, per_replica)
        utilisation, stable = load.latency.utilisation, load.latency.stable
    if not stable:
        notes.append(
            f"peak load is {utilisation:.0%} of a replica's capacity, above the {a.utilisation_ceiling:.0%} "
            "ceiling: add replicas"
        )
    if load is not None and load.latency.mean_ttft_s > load.latency.p95_ttft_s:
        notes.append(_rare_wait_note(load, batch))
    want_cloud, want_owned = deployments_wanted(req, cfg)
    offerings = offerings_for(catalog, req, gpu)
    tokens_per_s = average * w.output_tokens
    cloud = owned = None
    host_tp, per_stage = moe.server_groups(layout, gpu)  # a wide-EP stage: one group per server
    wide = per_stage > 1
    network = a.inter_node_bandwidth_gb_per_s if wide else 0.0  # the rate its all-to-all was estimated at
    hosting = Hosting(host_tp, replicas * pp * per_stage, tokens_per_s, needs_fabric=wide, network_gb_per_s=network)
    operations = pricing.Operations.of(req.owned_costs(catalog.owned))
    scaler = None
    if w.profile is not None and rates is not None:  # the base runs every hour, the burst for the busy ones
        shape = PinnedShape(gpu.id, tp, pp, fleet_rate(w, rates.rate_rps, rates.rate_no_targets_rps))
        scaler = autoscaler(w, offerings, [(shape, replicas, burst)], cfg.share or 1.0)
    burst_usd = scaler.burst_usd_per_month if scaler is not None else 0.0
    if want_cloud:
        cloud = _cloud_serving(req, gpu, offerings, hosting, operations, w.name, burst_usd)
        if cloud is None and not hosting.needs_fabric:
            notes.append(f"no cloud instance in the catalog hosts a TP {tp} group of {gpu.name}")
    if want_owned:
        owned, unowned = owned_cost(req, catalog, gpu, offerings, hosting, serves=w.name, burst_usd_per_month=burst_usd)
        if unowned:
            notes.append(unowned)
    fabricless = replace(hosting, needs_fabric=False)
    if (
        hosting.needs_fabric
        and cloud is None
        and owned is None
        and _cloud_serving(req, gpu, offerings, fabricless, operations, w.name)
    ):
        # hosted only on instances without a fabric between them: the all-to-all has no network to ride
        no_fabric = EpNeedsFabric(
            gpu=rules.short_name(gpu), ep=ep, gpus_per_domain=host_tp, network_gb_per_s=hosting.network_gb_per_s
        )
        est = est.model_copy(update={"feasible": False, "why_not": [*est.why_not, no_fabric]})
    config = ChosenConfig(
        workload_index=index, workload=w.name, kind="serving", model=arch.name, gpu_id=gpu.id, gpu_name=gpu.name,
        count=count, tp=tp, pp=pp, dp=replicas, ep=ep, attention_dp=attention_dp, quant=quant, kv_quant=kv,
        batch=batch, engine=a.engine, batch_cap=a.batch_cap(gpu.memory_gib, gpu.name), role=role,
        share=cfg.share or 1.0, burst=burst,
    )  # fmt: skip
    return estimate_result(
        req,
        config,
        est,
        a,
        gpu.gpu_class,
        serving=est,
        load=load,
        pool=pool,
        cloud=cloud,
        owned=owned,
        autoscaler=scaler,
        choices=choices,
        notes=notes,
    )


# ------------------------------------------------------------------------------------------------
# A demand profile's fleet: the base every hour, burst replicas rented by the hour (planner/families/demand_profile.py)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PinnedShape:
    """One replica shape of a pinned design, as a demand profile's fleet reads it: where a burst replica is rented
    (its GPU, TP and PP) and what one replica takes (``rate_rps``, :func:`fleet_rate`)."""

    gpu_id: str
    tp: int
    pp: int
    rate_rps: float


def fleet_rate(w: ServingWorkload, rate_rps: float, rate_no_targets_rps: float) -> float:
    """What one replica takes in an hour of the profile: within the p95 targets where the workload states any, else
    at the utilisation ceiling (the planner's ``demand_profile._rate``)."""
    targets = (w.p95_latency, w.p95_ttft, w.p95_tpot)
    return rate_rps if any(t is not None for t in targets) else rate_no_targets_rps


def _burst(w: ServingWorkload, cfg: PinnedConfig, role: str) -> int:
    """The pinned burst replicas; a located refusal where the workload has no profile or the replicas are a pool."""
    burst = cfg.burst or 0
    if burst and w.profile is None:
        raise ClusterplanError(
            f"--burst {burst}: workload {w.name!r} has no demand profile, so every replica runs every hour",
            fix="drop --burst (or burst: in config:), or give the workload a profile: (specs/requirement.md)",
        )
    if burst and role != "aggregated":
        raise ClusterplanError(
            f"--burst {burst}: a {role} pool runs every hour; burst replicas are aggregated ones",
            fix="drop --burst for a pool (the planner rents burst replicas only for aggregated ones)",
        )
    return burst


def autoscaler(
    w: ServingWorkload, offerings: list[Offering], shapes: list[tuple[PinnedShape, int, int]], share: float = 1.0
) -> Autoscaler:
    """A profile workload's autoscaler over pinned ``(shape, base, burst)`` replicas: each shape's fleet hour by hour
    and its burst priced as ``solve`` prices them (:func:`clusterplan.planner.families.demand_profile.fleet_of`, the
    burst rented on :func:`clusterplan.evaluation.pricing.burst_offer`'s offering); ``share``: the part of each
    hour's demand these replicas take (one group of a larger design). A located refusal where no cloud offering
    rents a burst replica by the hour."""
    # CP-SAT is imported with the family module: only for a workload with a demand profile.
    from clusterplan.planner.families import demand_profile

    assert w.profile is not None
    profile = [d * share for d in w.profile.requests_per_s_by_hour]
    fleets = []
    for shape, base, burst in shapes:
        offer = pricing.burst_offer(offerings, gpu_id=shape.gpu_id, tp=shape.tp, pp=shape.pp)
        if burst and offer is None:
            raise ClusterplanError(
                f"--burst {burst}: no cloud offering rents a TP {shape.tp} x PP {shape.pp} replica of {shape.gpu_id} "
                "by the hour (on demand, or spot for an interruptible workload)",
                fix="drop --burst (size the replicas for the peak), or pin a GPU an on-demand offering rents",
            )
        fleets.append(
            demand_profile.fleet_of(profile, shape.rate_rps, w.redundancy, base=base, burst=burst, offer=offer)
        )
    return demand_profile.autoscaler_over(len(profile), fleets)


def _pinned_replicas(cfg: PinnedConfig, tp: int, pp: int, burst: int) -> int | None:
    """The replicas pinned to run every hour (None: neither --dp nor --count given). With a demand profile's burst,
    --count holds every replica running at the peak hour, the burst's too."""
    if cfg.dp is None and cfg.count is None:
        return None
    if not burst:
        return check_count(cfg.count, tp, pp, cfg.dp, "dp (replicas)")
    at_peak = None if cfg.dp is None else cfg.dp + burst
    replicas = check_count(cfg.count, tp, pp, at_peak, "(dp + burst) (replicas at the peak hour)") - burst
    if replicas < 1:
        raise ClusterplanError(
            f"--count {cfg.count} leaves no replica running every hour beside --burst {burst}",
            fix=f"give a --count above {burst * tp * pp} (tp x pp x burst), or --dp for the replicas every hour",
        )
    return replicas


def _rare_wait_note(load: LoadSummary, batch: int) -> str:
    """Why the mean TTFT sits above its p95: a rare long wait for a batch slot."""
    lat = load.latency
    return (
        f"fewer than 5% of requests wait for one of the {batch:,} batch slots, and those wait long: the mean "
        f"TTFT ({fmt.seconds(lat.mean_ttft_s)}) carries their wait, its p95 ({fmt.seconds(lat.p95_ttft_s)}) "
        "does not (the model's wait is a rare long one, not a spread over every request)"
    )


def _default_replicas(peak: float, rate: float, ceiling: float, redundancy: int, choices: list[str]) -> int:
    """Replicas for the peak demand at the largest per-replica rate meeting the p95 targets (or, out of their
    reach, at the utilisation ceiling), plus the spares."""
    usable = rate if rate > 0 else ceiling
    needed = math.ceil(peak / usable - 1e-9) if usable > 0 else 1
    replicas = max(1, needed) + redundancy
    why = "meeting the p95 targets" if rate > 0 else "at the utilisation ceiling (targets out of reach)"
    extra = f" + {redundancy} spare" if redundancy else ""
    choices.append(f"{replicas} replica(s): peak {peak:,.2f} req/s at {usable:,.2f} req/s per replica {why}{extra}")
    return replicas


def _load_summary(
    est: ServingEstimate,
    w: ServingWorkload,
    a: Assumptions,
    rates: evaluate.ServingRates,
    average: float,
    per_replica: float,
) -> LoadSummary:
    """An aggregated replica at ``per_replica`` requests/s: its latencies there and the targets they meet."""
    lat = queueing.latency_at_load(
        est, per_replica, input_tokens=w.input_tokens, output_tokens=w.output_tokens, assumptions=a
    )
    checks = [
        TargetCheck(name=name, target_s=target, estimate_s=value, met=value <= target)
        for name, target, value in (
            ("p95 latency", w.p95_latency, lat.p95_e2e_s),
            ("p95 time to first token", w.p95_ttft, lat.p95_ttft_s),
            ("p95 time per output token", w.p95_tpot, lat.p95_tpot_s),
        )
        if target is not None
    ]
    return LoadSummary(
        average_requests_per_s=average,
        peak_requests_per_s=average * w.peak_to_average,
        per_replica_requests_per_s=per_replica,
        latency=lat,
        targets=checks,
        max_rate_for_targets_per_replica=rates.rate_rps,
        rate_no_targets_per_replica=rates.rate_no_targets_rps,
        rated=rates.rated,
        serves_peak=lat.stable and all(c.met for c in checks),
    )


def _pool_rates(
    role: str, est: ServingEstimate, arch: ModelArchitecture, gpu: GpuSpec, w: ServingWorkload, req: Requirement
) -> pools.PoolRates:
    """A pool replica's rated point, as the planner's pool rows rate it (:mod:`clusterplan.evaluation.pools`)."""
    if role == "prefill":
        return pools.prefill_rates(est, arch, gpu, w, req.assumptions)
    return pools.decode_rates(est, w, req.assumptions)


def _finite(value: float) -> float | None:
    """A p95 at a load the replica cannot keep up with is unbounded: None, not infinity."""
    return value if math.isfinite(value) else None


def _pool_summary(
    est: ServingEstimate,
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: ServingWorkload,
    a: Assumptions,
    rated: pools.PoolRates,
    role: str,
    per_replica: float,
) -> PoolSummary:
    """A pool replica at ``per_replica`` requests/s (:func:`clusterplan.evaluation.pools.pool_at_load`) and its
    share of the p95 targets (:func:`clusterplan.evaluation.pools.targets`)."""
    average = w.requests_per_s
    at = pools.pool_at_load(est, arch, gpu, w, role, per_replica, a)
    prefill = role == "prefill"
    share = pools.targets(w)
    wanted = (
        [("p95 time to first token (prefill share)", share.ttft_s, at.p95_ttft_s)]
        if prefill
        else [
            ("p95 time per output token", share.tpot_s, at.p95_tpot_s),
            ("p95 latency (decode share)", share.decode_e2e_s, at.p95_e2e_s),
        ]
    )
    checks = [
        TargetCheck(name=name, target_s=target, estimate_s=value, met=value <= target)
        for name, target, value in wanted
        if target is not None
    ]
    return PoolSummary(
        role="prefill" if prefill else "decode",
        average_requests_per_s=average,
        peak_requests_per_s=average * w.peak_to_average,
        per_replica_requests_per_s=per_replica,
        utilisation=at.utilisation,
        stable=at.stable,
        p95_ttft_s=_finite(at.p95_ttft_s),
        p95_tpot_s=None if prefill else _finite(at.p95_tpot_s),
        p95_e2e_s=_finite(at.p95_e2e_s),
        targets=checks,
        rate_rps=rated.rate_rps,
        rate_no_targets_rps=rated.rate_no_targets_rps,
        rated_p95_ttft_s=rated.p95_ttft_s,
        rated_p95_tpot_s=None if prefill else rated.p95_tpot_s,
        rated_p95_e2e_s=rated.p95_e2e_s,
        ttft_s=rated.ttft_s,
        tpot_s=None if prefill else rated.tpot_s,
        kv_transfer_s=rated.kv_transfer_s if prefill else None,
        serves_peak=at.stable and all(c.met for c in checks),
    )
