"""``clusterplan estimate``: the physics of one pinned configuration, without the solver.

Reads a requirement, picks one workload and one configuration (flags override the file's ``config:``
block; omitted knobs get the choices below, each recorded in ``choices``), and returns an
:class:`EstimateResult`: memory per GPU, speeds, latency at the requested load, cost and the bounding
resource. Rendering lives in :mod:`clusterplan.commands.estimate`; this module only computes.

Choices for omitted knobs:

* weights ``bf16`` (``fp16`` where the GPU has no bf16), or the first precision ``constraints.quantizations``
  allows that the GPU runs; KV cache follows the workload's ``kv_cache_precision`` or the weights.
* serving ``tp``/``pp``: the smallest tensor-parallel degree (within the NVLink domain) at which the weights
  fit, then pipeline stages; ``batch``: the planner's batch policy (the largest the memory holds,
  :func:`clusterplan.design.evaluate.serving_batch`); replicas (``dp``): enough for the peak demand at the
  largest per-replica rate meeting the p95 targets, plus redundancy.
* training: the fastest feasible (tp, cp, pp, virtual stages, ZeRO stage, recompute and recomputed layers,
  micro-batch) for the GPU count, searched as the planner's candidates search
  (:func:`clusterplan.design.evaluate.fastest_training_layout`); the count itself, if omitted, is the fewest whole
  servers that meet the deadline, found per layout by the planner's own DP ladder and whole-server bisection.
* ``count`` is ``tp x pp x dp``; a given count fixes ``dp = count / (tp x pp)``.
* cost: ``deployment`` from the flag, the file's config, or the requirement (``either`` shows both). The
  hardware is the cheapest one offering type of the planner's offerings that hosts the layout alone, priced
  by :mod:`clusterplan.design.pricing` over the requirement's horizon: the figures ``solve`` reports. Owned
  hardware also gets an amortised month (capital over the catalog's amortisation months plus power),
  labelled as such.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.design import evaluate, pricing
from clusterplan.errors import ClusterplanError, ConfigurationImpossible
from clusterplan.physics import cost, moe, optimizer_memory, queueing, rules
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.optimizer_memory import PLAIN, MemoryPlan
from clusterplan.physics.types import LatencyAtLoad, ServingEstimate, TrainingEstimate
from clusterplan.plan import Costs, HardwareLine
from clusterplan.render.reasons import render_reasons
from clusterplan.requirement.schema import (
    EngineSettings,
    FinetuneWorkload,
    PinnedConfig,
    Requirement,
    ServingWorkload,
    TrainingWorkload,
    quality_class_of,
)

if TYPE_CHECKING:
    from clusterplan.candidates.table import Offering

TP_DEGREES = (1, 2, 4, 8, 16, 32, 64, 72)  # serving tp/pp defaults: the smallest that fits
PP_DEGREES = (1, 2, 4, 8, 16)
QUANT_ORDER = ("bf16", "fp16", "fp8", "int8", "fp4", "int4")


class Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChosenConfig(Result):
    """The configuration estimated, every knob resolved."""

    workload_index: int
    workload: str
    kind: Literal["serving", "training", "finetune"]
    model: str
    gpu_id: str
    gpu_name: str
    count: int = Field(description="GPUs in total")
    tp: int
    pp: int
    dp: int = Field(description="data-parallel degree (training) or replicas (serving)")
    ep: int = Field(
        1, description="expert-parallel degree: per stage (serving an MoE model) or over the dp x cp GPUs (training)"
    )
    attention_dp: bool = Field(False, description="attention data-parallel over each stage's GPUs (serving)")
    quant: str | None = None
    kv_quant: str | None = None
    batch: int | None = Field(default=None, description="concurrency per replica (serving) or micro-batch (training)")
    zero: int | None = None
    recompute: str | None = None
    cp: int | None = Field(default=None, description="context-parallel degree (training)")
    vpp: int | None = Field(default=None, description="interleaved pipeline chunks per stage (training)")
    recompute_layers: int | None = Field(default=None, description="layers of each stage fully recomputed (training)")
    precision: str | None = None
    engine: str | None = Field(default=None, description="serving engine (catalog/engines.yaml)")
    batch_cap: int | None = Field(default=None, description="the engine's cap on concurrent sequences (serving)")
    memory_options: list[str] = Field(default_factory=list, description="training memory options in use")


class TargetCheck(Result):
    name: str
    target_s: float
    estimate_s: float
    met: bool


class CloudCost(Result):
    """The layout on rented instances, priced as ``solve`` prices it (over the requirement's horizon)."""

    instance: str = Field(description="provider:id")
    gpus_per_instance: int
    instances: int
    pricing: Literal["on_demand", "spot"]
    usd_per_hour: float = Field(description="all instances")
    usd_per_month: float = Field(description="recurring per month (serving: 730 h; training: 0)")
    usd_total: float = Field(description="serving: total over the horizon; training: the run, whole billed hours")
    billed_hours: int | None = None
    usd_per_million_tokens: float | None = Field(default=None, description="serving: total over the horizon / tokens")
    costs: Costs
    hardware: list[HardwareLine]


class OwnedCost(Result):
    """The layout on owned servers, priced as ``solve`` prices it (over the requirement's horizon)."""

    nodes: int
    gpus_per_node: int
    capital_usd: float = Field(description="servers bought (inventory servers are free)")
    power_w: float = Field(description="IT power at full load, W")
    power_usd_per_month: float
    usd_per_month: float = Field(description="recurring per month: electricity (solve's monthly)")
    usd_total: float = Field(description="capital + horizon x monthly")
    usd_per_million_tokens: float | None = Field(default=None, description="serving: total over the horizon / tokens")
    amortisation_months: float
    amortised_usd_per_month: float = Field(
        description="amortised view: capital / amortisation months + electricity (not solve's cost view)"
    )
    costs: Costs
    hardware: list[HardwareLine]
    notes: list[str] = Field(default_factory=list)


class LoadSummary(Result):
    """A serving configuration under the requirement's demand."""

    average_requests_per_s: float
    peak_requests_per_s: float
    per_replica_requests_per_s: float
    latency: LatencyAtLoad = Field(description="at the requested load: peak / replicas per replica")
    targets: list[TargetCheck] = Field(default_factory=list)
    max_rate_for_targets_per_replica: float = Field(description="largest per-replica rate meeting every target")
    rate_no_targets_per_replica: float = Field(description="per-replica rate at the utilisation ceiling")
    rated: LatencyAtLoad = Field(description="at the rated rate: the p95s solve reports")
    serves_peak: bool


class EstimateResult(Result):
    requirement: str
    config: ChosenConfig
    feasible: bool
    reasons: list[str] = Field(default_factory=list)
    serving: ServingEstimate | None = None
    load: LoadSummary | None = None
    training: TrainingEstimate | None = None
    cloud: CloudCost | None = None
    owned: OwnedCost | None = None
    choices: list[str] = Field(default_factory=list, description="knobs clusterplan chose, and why")
    notes: list[str] = Field(default_factory=list)
    assumptions: dict[str, float | int | bool] = Field(default_factory=dict, description="factors used")
    assumptions_overridden: list[str] = Field(default_factory=list)

    @property
    def bound(self) -> str:
        if self.serving is not None:
            return self.serving.bound
        return self.training.bound if self.training is not None else "compute"


# ------------------------------------------------------------------------------------------------
# Entry points
# ------------------------------------------------------------------------------------------------


def estimate_file(path: Path, catalog: Catalog, overrides: PinnedConfig | None = None) -> EstimateResult:
    """Load a requirement and estimate its pinned configuration (``overrides`` beat the file's ``config:``)."""
    from clusterplan.stdin import load_requirement_arg

    resolved = load_requirement_arg(path, catalog)  # '-' is standard input
    return estimate_requirement(resolved.requirement, list(resolved.models), catalog, overrides)


def merge_config(base: PinnedConfig | None, overrides: PinnedConfig | None) -> PinnedConfig:
    """The file's ``config:`` with every knob the command line set replaced."""
    data: dict[str, Any] = base.model_dump(exclude_none=True) if base is not None else {}
    if overrides is not None:
        data.update(overrides.model_dump(exclude_none=True))
    return PinnedConfig.model_validate(data)


def estimate_requirement(
    req: Requirement, models: list[ModelArchitecture], catalog: Catalog, overrides: PinnedConfig | None = None
) -> EstimateResult:
    cfg = merge_config(req.config, overrides)
    choices: list[str] = []
    index = workload_index(req, cfg.workload, choices)
    workload = req.workloads[index]
    arch = models[index]
    if cfg.gpu is None:
        raise ClusterplanError(
            "no GPU to estimate on",
            fix="pass --gpu (e.g. --gpu h100-sxm) or set config.gpu in the requirement",
            hint="clusterplan plan chooses GPUs for you",
        )
    gpu = catalog.gpu(cfg.gpu)
    a = req.assumptions
    if isinstance(workload, ServingWorkload):
        result = _estimate_serving(req, index, workload, arch, gpu, cfg, catalog, a, choices)
    else:
        result = _estimate_training(req, index, workload, arch, gpu, cfg, catalog, a, choices)
    return result


def check_feasible(result: EstimateResult) -> None:
    """Raise :class:`ConfigurationImpossible` (exit code 1) when the configuration cannot run."""
    if not result.feasible:
        raise ConfigurationImpossible(result.reasons)


# ------------------------------------------------------------------------------------------------
# Shared pieces
# ------------------------------------------------------------------------------------------------


MAX_WORKLOAD_INDEX_DIGITS = 6  # a requirement holds at most 64 workloads; a longer number is a name, not parsed


def workload_ref(value: int | str) -> int | str:
    """A workload as a command line or a pinned config names it: an index when it is a short run of ASCII
    digits (int() of '²' or of 5,000 digits raises), else a name."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= MAX_WORKLOAD_INDEX_DIGITS:
        return int(value)
    return value


def workload_index(req: Requirement, which: int | str | None, choices: list[str]) -> int:
    if which is None:
        if len(req.workloads) > 1:
            names = ", ".join(f"{i}={w.name}" for i, w in enumerate(req.workloads))
            choices.append(
                f"workload 0 ({req.workloads[0].name}) of {len(req.workloads)}; --workload picks another ({names})"
            )
        return 0
    which = workload_ref(which)
    if isinstance(which, int):
        if not 0 <= which < len(req.workloads):
            raise ClusterplanError(
                f"no workload {which}; the requirement has {len(req.workloads)}",
                fix=f"use an index from 0 to {len(req.workloads) - 1} or a workload name",
            )
        return which
    for i, w in enumerate(req.workloads):
        if w.name == which:
            return i
    from clusterplan.errors import did_you_mean, quoted

    raise ClusterplanError(
        f"no workload named {quoted(which)}",
        fix="use one of: " + ", ".join(w.name for w in req.workloads),
        hint=did_you_mean(which, [w.name for w in req.workloads]),
    )


def _check_count(count: int | None, tp: int, pp: int, dp: int | None, what: str) -> int:
    """dp from a given count (count must be a multiple of tp x pp), or the given dp."""
    group = tp * pp
    if count is None:
        return dp if dp is not None else 1
    if count % group:
        raise ClusterplanError(
            f"--count {count} is not a multiple of tp x pp = {tp} x {pp} = {group}",
            fix=f"use a count that is a multiple of {group}, or change tp/pp",
        )
    implied = count // group
    if dp is not None and dp != implied:
        raise ClusterplanError(
            f"--count {count} does not equal tp x pp x {what} = {tp} x {pp} x {dp} = {group * dp}",
            fix="give a consistent count, or leave one of them out",
        )
    return implied


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


def _offerings(catalog: Catalog, req: Requirement, gpu: GpuSpec) -> list[Offering]:
    """The planner's offerings of this GPU type (instance types per size and NVLink domain, owned server sizes)."""
    from clusterplan.candidates.offerings import build_offerings, gpu_type_of, limits_of

    offerings, _ = build_offerings(catalog, req, {gpu.id: gpu_type_of(gpu)}, limits_of(req, catalog))
    return offerings


def _costs(
    req: Requirement, lines: list[HardwareLine], *, one_off_usd: float = 0.0, tokens_per_s: float = 0.0
) -> Costs:
    return pricing.costs(
        lines, horizon_months=req.budget.horizon, one_off_usd=one_off_usd, output_tokens_per_s=tokens_per_s
    )


def _cloud_serving(
    req: Requirement, gpu: GpuSpec, offerings: list[Offering], *, tp: int, groups: int, tokens_per_s: float
) -> CloudCost | None:
    """The cheapest instance type hosting ``groups`` TP groups, rented around the clock over the horizon."""
    found = pricing.cheapest_hosting(
        offerings, gpu_id=gpu.id, kind="cloud", tp=tp, groups=groups, horizon_months=req.budget.horizon
    )
    if found is None:
        return None
    o, n, _ = found
    line = pricing.cloud_line(o, n, gpu_name=gpu.name)
    c = _costs(req, [line], tokens_per_s=tokens_per_s)
    return CloudCost(
        instance=o.label, gpus_per_instance=o.gpus_per_unit, instances=n, pricing=req.constraints.pricing,
        usd_per_hour=n * o.usd_per_hour, usd_per_month=c.monthly_usd, usd_total=c.total_usd,
        usd_per_million_tokens=c.usd_per_million_output_tokens, costs=c, hardware=[line],
    )  # fmt: skip


def _cloud_training(
    req: Requirement, gpu: GpuSpec, offerings: list[Offering], est: TrainingEstimate, workload: str
) -> CloudCost | None:
    """The run on the cheapest instance type the planner would rent for it, billed in whole hours."""
    o, n, run_usd, _ = pricing.cheapest_training_cloud(offerings, gpu.id, est.tp, est.gpus, est.time_to_train_s)
    if o is None:
        return None
    line = pricing.training_cloud_line(o, n, gpu_name=gpu.name, workload=workload, seconds=est.time_to_train_s)
    c = _costs(req, [line], one_off_usd=run_usd)
    return CloudCost(
        instance=o.label, gpus_per_instance=o.gpus_per_unit, instances=n, pricing=req.constraints.pricing,
        usd_per_hour=n * o.usd_per_hour, usd_per_month=c.monthly_usd, usd_total=c.total_usd,
        billed_hours=cost.billed_hours(est.time_to_train_s), costs=c, hardware=[line],
    )  # fmt: skip


def _owned_cost(
    req: Requirement, catalog: Catalog, gpu: GpuSpec, offerings: list[Offering], *, tp: int, groups: int,
    tokens_per_s: float = 0.0,
) -> tuple[OwnedCost | None, str | None]:  # fmt: skip
    """The cheapest owned server size hosting ``groups`` TP groups, over the horizon; or why it cannot be owned."""
    found = pricing.cheapest_hosting(
        offerings, gpu_id=gpu.id, kind="owned", tp=tp, groups=groups, horizon_months=req.budget.horizon
    )
    if found is None:
        return None, (
            f"the catalog has no purchase price for {gpu.name} and the requirement lists too few of them in its "
            "inventory: it cannot be owned"
        )
    o, bought, inventory = found
    line = pricing.owned_line(o, bought=bought, from_inventory=inventory, gpu_name=gpu.name)
    c = _costs(req, [line], tokens_per_s=tokens_per_s)
    months = catalog.owned.amortisation_months.value
    notes = [f"{inventory} server(s) from the inventory: power only, no capital"] if inventory else []
    owned = OwnedCost(
        nodes=line.units, gpus_per_node=o.gpus_per_unit, capital_usd=c.capital_usd, power_w=line.power_w,
        power_usd_per_month=line.monthly_usd, usd_per_month=c.monthly_usd, usd_total=c.total_usd,
        usd_per_million_tokens=c.usd_per_million_output_tokens, amortisation_months=months,
        amortised_usd_per_month=pricing.amortised_usd_per_month(c, months), costs=c, hardware=[line], notes=notes,
    )  # fmt: skip
    return owned, None


def _deployments(req: Requirement, cfg: PinnedConfig) -> tuple[bool, bool]:
    which = cfg.deployment or req.deployment
    return which in ("cloud", "either"), which in ("owned", "either")


# ------------------------------------------------------------------------------------------------
# Serving
# ------------------------------------------------------------------------------------------------


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
            layout = moe.MoeLayout(tp=tp, ep=cfg.ep or 1, attention_dp=bool(cfg.attention_dp))
            kw = dict(pp=pp, quant=quant, kv_precision=kv, context_tokens=context, assumptions=a)
            if moe.max_batch_by_memory(arch, gpu, layout, **kw) > 0:  # type: ignore[arg-type]
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


_TRAINING_EP_FIX = {
    "ep_without_experts": "--ep applies to mixture-of-experts models only; drop --ep",
    "ep_not_dividing_experts": "--ep must divide the model's routed experts (e.g. 8 for Mixtral, up to 64 for "
    "DeepSeek-V3's 256)",
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


def _estimate_serving(
    req: Requirement,
    index: int,
    w: ServingWorkload,
    arch: ModelArchitecture,
    gpu: GpuSpec,
    cfg: PinnedConfig,
    catalog: Catalog,
    a: Assumptions,
    choices: list[str],
) -> EstimateResult:
    if cfg.engine is not None:  # --engine: the workload's engine block under another engine name
        settings = w.engine.model_copy(update={"name": cfg.engine}) if w.engine is not None else None
        w = w.model_copy(update={"engine": settings or EngineSettings(name=cfg.engine)})
    a = evaluate.serving_assumptions(a, w)
    quant = cfg.quant or _default_quant(gpu, req, choices)
    kv = cfg.kv_quant or _default_kv(quant, gpu, w, choices)
    context = w.context_tokens
    tp, pp = _serving_layout(arch, gpu, cfg, quant, kv, context, a, choices)
    ep, attention_dp = _moe_layout(arch, cfg, tp)
    point: dict[str, Any] = dict(tp=tp, pp=pp, quant=quant, kv_precision=kv, assumptions=a)
    if ep > 1 or attention_dp:
        point |= {"ep": ep, "attention_dp": attention_dp}
    most = evaluate.max_batch(arch, gpu, w, **point)
    if cfg.batch is not None:
        batch = cfg.batch
    else:
        batch = evaluate.serving_batch(most)
        cap = a.batch_cap(gpu.memory_gib, gpu.name)
        limit = "the engine's KV pool holds" if batch < cap else f"the engine's batch cap ({a.engine})"
        choices.append(f"batch {batch}: the largest {limit} (the planner's operating point)")
    est = evaluate.serving_estimate(arch, gpu, w, batch=batch, **point)
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
        replicas = _check_count(cfg.count, tp, pp, cfg.dp, "dp (replicas)")
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
    want_cloud, want_owned = _deployments(req, cfg)
    offerings = _offerings(catalog, req, gpu)
    tokens_per_s = average * w.output_tokens
    cloud = owned = None
    if want_cloud:
        cloud = _cloud_serving(req, gpu, offerings, tp=tp, groups=replicas * pp, tokens_per_s=tokens_per_s)
        if cloud is None:
            notes.append(f"no cloud instance in the catalog hosts a TP {tp} group of {gpu.name}")
    if want_owned:
        owned, unowned = _owned_cost(
            req, catalog, gpu, offerings, tp=tp, groups=replicas * pp, tokens_per_s=tokens_per_s
        )
        if unowned:
            notes.append(unowned)
    config = ChosenConfig(
        workload_index=index, workload=w.name, kind="serving", model=arch.name, gpu_id=gpu.id, gpu_name=gpu.name,
        count=count, tp=tp, pp=pp, dp=replicas, ep=ep, attention_dp=attention_dp, quant=quant, kv_quant=kv,
        batch=batch, engine=a.engine, batch_cap=a.batch_cap(gpu.memory_gib, gpu.name),
    )  # fmt: skip
    return EstimateResult(
        requirement=req.name,
        config=config,
        feasible=est.feasible,
        reasons=render_reasons(est.why_not),
        serving=est,
        load=load,
        cloud=cloud,
        owned=owned,
        choices=choices,
        notes=notes,
        assumptions=a.used(gpu.gpu_class),
        assumptions_overridden=a.overridden(),
    )


# ------------------------------------------------------------------------------------------------
# Training and fine-tuning
# ------------------------------------------------------------------------------------------------


Layout = tuple[int, int, int, int]  # tp, cp, pp, dp


def _shapes(
    arch: ModelArchitecture, gpu: GpuSpec, w: TrainingWorkload | FinetuneWorkload, cfg: PinnedConfig
) -> list[tuple[int, int, int]]:
    """(tp, cp, pp) searched, as the planner's candidates are (same degrees; knobs the user pinned stay pinned)."""
    from clusterplan.candidates.offerings import gpu_type_of
    from clusterplan.candidates.table import TP_DEGREES
    from clusterplan.candidates.training import TRAINING_PP

    domain = gpu_type_of(gpu).nvlink_domain
    tps = [cfg.tp] if cfg.tp else [t for t in TP_DEGREES if t <= domain]
    pps = [cfg.pp] if cfg.pp else [p for p in TRAINING_PP if p <= arch.layers]
    pinned_cp = cfg.cp if cfg.cp is not None else w.context_parallel
    return [
        (tp, cp, pp) for tp in tps for pp in pps for cp in evaluate.context_parallel_options(w, tp, domain, pinned_cp)
    ]


def _fastest(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    cfg: PinnedConfig,
    a: Assumptions,
    layout: Layout,
) -> TrainingEstimate | None:
    """The fastest settings of one tp x cp x pp x dp layout (pinned knobs stay pinned), as the planner's rows."""
    tp, cp, pp, dp = layout
    method = getattr(w, "method", "full")
    zeros = (cfg.zero,) if cfg.zero is not None else evaluate.zero_stages_for(pp, method)
    layers = cfg.recompute_layers if cfg.recompute_layers is not None else w.recompute_layers
    recs: list[str]
    if cfg.recompute:
        recs = [cfg.recompute]
    elif cfg.recompute_layers is not None:
        recs = ["full"]
    else:
        recs = evaluate.recomputes_for(w, flash_attention=a.flash_attention)
    vpp = cfg.vpp if cfg.vpp is not None else w.virtual_stages
    est, _ = evaluate.fastest_training_layout(
        arch, gpu, w, tp=tp, pp=pp, dp=dp, zero_stages=zeros, recomputes=recs, assumptions=a,
        micro_batches=[cfg.batch] if cfg.batch else None, cp=cp,
        virtual_stages=(vpp,) if vpp is not None else None, recompute_layers=layers if "full" in recs else None,
        memory_plans=_memory_plans(w, cfg), expert_parallel=(cfg.ep,) if cfg.ep is not None else None,
    )  # fmt: skip
    return est


def _search_training(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    cfg: PinnedConfig,
    count: int,
    a: Assumptions,
) -> tuple[TrainingEstimate | None, list[Layout]]:
    """The fastest layout of ``count`` GPUs, searched as the planner's candidates are; and the layouts tried."""
    best: TrainingEstimate | None = None
    tried: list[Layout] = []
    for tp, cp, pp in _shapes(arch, gpu, w, cfg):
        if count % (tp * cp * pp):
            continue
        dp = count // (tp * cp * pp)
        if cfg.dp is not None and dp != cfg.dp:
            continue
        tried.append((tp, cp, pp, dp))
        est = _fastest(arch, gpu, w, cfg, a, (tp, cp, pp, dp))
        if est is not None and (best is None or est.time_to_train_s < best.time_to_train_s):
            best = est
    return best, tried


def _fewest_meeting_deadline(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    cfg: PinnedConfig,
    a: Assumptions,
) -> tuple[TrainingEstimate | None, bool, list[Layout]]:
    """The fewest GPUs (whole servers) meeting the deadline, searched as the planner's rows are: per shape, DP in
    powers of two up to the first that meets it, then a bisection over the whole-server DPs between
    (:func:`clusterplan.candidates.training.fewest_meeting`); the fewest GPUs over the shapes, the faster on a tie.
    When no layout meets the deadline: the fastest tried. Returns (estimate, meets, layouts tried)."""
    from clusterplan.candidates.training import MAX_TRAINING_GPUS, fewest_meeting

    node = gpu.max_gpus_per_node
    tried: list[Layout] = []
    meeting: TrainingEstimate | None = None
    fastest: TrainingEstimate | None = None
    for tp, cp, pp in _shapes(arch, gpu, w, cfg):
        replica = tp * cp * pp

        def at(dp: int, tp: int = tp, cp: int = cp, pp: int = pp) -> TrainingEstimate | None:
            tried.append((tp, cp, pp, dp))
            return _fastest(arch, gpu, w, cfg, a, (tp, cp, pp, dp))

        max_dp = max(1, min(MAX_TRAINING_GPUS // replica, evaluate.sequences_per_step(w)))
        dps = [cfg.dp] if cfg.dp is not None else [2**k for k in range(max_dp.bit_length()) if 2**k <= max_dp]
        missed: int | None = None
        for dp in dps:
            est = at(dp)
            if est is None:
                continue
            if fastest is None or est.time_to_train_s < fastest.time_to_train_s:
                fastest = est
            if est.time_to_train_s <= w.deadline:
                if missed is not None:
                    est = (fewest_meeting(missed, dp, replica, node, at, w.deadline) or [est])[0]
                if meeting is None or (est.gpus, est.time_to_train_s) < (meeting.gpus, meeting.time_to_train_s):
                    meeting = est
                break
            missed = dp
    if meeting is not None:
        return meeting, True, tried
    return fastest, False, tried


def _memory_plans(w: TrainingWorkload | FinetuneWorkload, cfg: PinnedConfig) -> list[MemoryPlan]:
    """The memory plans the workload allows, with ``--optimizer`` / ``--offload`` pinned where given."""
    forced, forbidden = optimizer_memory.pinned_options(cfg.optimizer, cfg.offload)
    return evaluate.memory_plans_for(w, forced=forced, forbidden=forbidden)


def _point(
    arch: ModelArchitecture, gpu: GpuSpec, w: TrainingWorkload | FinetuneWorkload, a: Assumptions, *, tp: int,
    pp: int, dp: int, zero: int, recompute: str, micro_batch: int, cp: int = 1, virtual_stages: int = 1,
    recompute_layers: int | None = None, memory_plan: MemoryPlan = PLAIN, ep: int = 1,
) -> TrainingEstimate:  # fmt: skip
    return evaluate.training_point(
        arch, gpu, w, tp=tp, pp=pp, dp=dp, zero_stage=zero, recompute=recompute, micro_batch=micro_batch,
        assumptions=a, cp=cp, virtual_stages=virtual_stages, recompute_layers=recompute_layers,
        memory_plan=memory_plan, ep=ep,
    )  # fmt: skip


def _closest(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    a: Assumptions,
    cfg: PinnedConfig,
    tried: list[Layout],
) -> TrainingEstimate:
    """Nothing runs: each layout tried at its most memory-friendly setting (the last memory plan the workload
    allows); the one closest to running."""
    method = getattr(w, "method", "full")
    plan = _memory_plans(w, cfg)[-1]
    ests = []
    for tp, cp, pp, dp in tried:
        zero = cfg.zero if cfg.zero is not None else max(evaluate.zero_stages_for(pp, method))
        rec = cfg.recompute or ("full" if cfg.recompute_layers else evaluate.recomputes_for(w)[-1])
        vpp = cfg.vpp or w.virtual_stages or 1
        layers = cfg.recompute_layers or w.recompute_layers
        eps = evaluate.expert_parallel_options(
            arch,
            tp=tp,
            dp_cp=dp * cp,
            nvlink_domain=evaluate.training_nvlink_domain(gpu),
            pinned=cfg.ep or w.expert_parallel,
        )
        point = _point(
            arch, gpu, w, a, tp=tp, pp=pp, dp=dp, zero=zero, recompute=rec, micro_batch=cfg.batch or 1, cp=cp,
            virtual_stages=vpp, recompute_layers=layers, memory_plan=plan, ep=max(eps),
        )  # fmt: skip
        ests.append(point)
    return min(ests, key=lambda e: (len(e.why_not), e.memory.total_gib / e.memory.capacity_gib, e.gpus))


def _layout_words(e: TrainingEstimate) -> str:
    cp = f", cp={e.cp}" if e.cp > 1 else ""
    cp += f", ep={e.ep}" if e.ep > 1 else ""
    vpp = f", {e.virtual_stages} virtual stages" if e.virtual_stages > 1 else ""
    rec = e.recompute
    if rec == "full":
        rec = f"full ({e.recompute_layers} layers per stage)"
    return f"tp={e.tp}{cp}, pp={e.pp}{vpp}, ZeRO {e.zero_stage}, recompute {rec}, micro-batch {e.micro_batch}"


def _estimate_training(
    req: Requirement,
    index: int,
    w: TrainingWorkload | FinetuneWorkload,
    arch: ModelArchitecture,
    gpu: GpuSpec,
    cfg: PinnedConfig,
    catalog: Catalog,
    a: Assumptions,
    choices: list[str],
) -> EstimateResult:
    if "precision" not in w.model_fields_set and w.precision == "bf16" and not rules.supports_precision(gpu, "bf16"):
        w = w.model_copy(update={"precision": "fp16"})
        choices.append(f"precision fp16: {gpu.name} has no bf16")
    if cfg.ep is not None and cfg.ep > 1:
        problem = moe.training_ep_problem(arch, cfg.ep, cfg.ep)  # the model's side; DP is searched
        if problem is not None:
            raise ClusterplanError(
                f"expert parallelism --ep {cfg.ep} does not fit {arch.name} ({arch.moe_experts} routed expert(s))",
                fix=_TRAINING_EP_FIX[problem],
            )
    count = cfg.count
    cp_pinned = cfg.cp if cfg.cp is not None else w.context_parallel
    if count is None and cfg.tp and cfg.pp and cfg.dp:
        count = cfg.tp * (cp_pinned or 1) * cfg.pp * cfg.dp
    all_pinned = all(v is not None for v in (cfg.tp, cfg.pp, cfg.zero, cfg.batch)) and (
        cfg.recompute or w.activation_recompute
    )
    tried: list[Layout] = []
    best: TrainingEstimate | None = None
    if count is not None:
        if cfg.tp and cfg.pp:
            _check_count(count, cfg.tp * (cp_pinned or 1), cfg.pp, cfg.dp, "dp")
        best, tried = _search_training(arch, gpu, w, cfg, count, a)
    else:
        best, meets, tried = _fewest_meeting_deadline(arch, gpu, w, cfg, a)
        if best is not None:
            if meets:
                choices.append(
                    f"{best.gpus} GPUs: the fewest whole servers that meet the deadline (each layout's DP searched "
                    "as the planner does)"
                )
            else:
                choices.append(f"{best.gpus} GPUs: no count meets the deadline; the fastest layout tried")
    if best is None:
        if not tried:
            raise ClusterplanError(
                f"no layout of {count} x {gpu.name} matches the given tp/cp/pp/dp",
                fix="give a count that is a multiple of tp x cp x pp, or leave tp and pp out",
            )
        # Nothing feasible: show the layout that comes closest (fewest reasons, least memory per capacity).
        best = _closest(arch, gpu, w, a, cfg, tried)
        if not all_pinned:
            choices.append(f"no layout tried runs; shown: the closest ({best.gpus} GPUs, {_layout_words(best)})")
    else:
        # The search leaves link reasons (TP over PCIe) to the planner's tp_nvlink family; shown here in full.
        best = _point(
            arch, gpu, w, a, tp=best.tp, pp=best.pp, dp=best.dp, zero=best.zero_stage, recompute=best.recompute,
            micro_batch=best.micro_batch, cp=best.cp, virtual_stages=best.virtual_stages,
            recompute_layers=best.recompute_layers if best.recompute == "full" else None,
            memory_plan=MemoryPlan.of(best.memory_options), ep=best.ep,
        )  # fmt: skip
        if not all_pinned:
            choices.append(f"{_layout_words(best)}: the fastest feasible layout tried")
    want_cloud, want_owned = _deployments(req, cfg)
    offerings = _offerings(catalog, req, gpu)
    cloud = owned = None
    notes: list[str] = []
    if want_cloud:
        cloud = _cloud_training(req, gpu, offerings, best, w.name)
        if cloud is None:
            notes.append(f"no cloud instance in the catalog offers {gpu.name} for this layout")
    if want_owned:
        owned, why = _owned_cost(req, catalog, gpu, offerings, tp=best.tp, groups=best.cp * best.pp * best.dp)
        if why:
            notes.append(why)
    kind: Literal["training", "finetune"] = "finetune" if isinstance(w, FinetuneWorkload) else "training"
    config = ChosenConfig(
        workload_index=index, workload=w.name, kind=kind, model=arch.name, gpu_id=gpu.id, gpu_name=gpu.name,
        count=best.gpus, tp=best.tp, pp=best.pp, dp=best.dp, ep=best.ep, batch=best.micro_batch, zero=best.zero_stage,
        recompute=best.recompute, precision=w.precision, cp=best.cp, vpp=best.virtual_stages,
        recompute_layers=best.recompute_layers if best.recompute == "full" else None,
        memory_options=best.memory_options,
    )  # fmt: skip
    return EstimateResult(
        requirement=req.name,
        config=config,
        feasible=best.feasible,
        reasons=render_reasons(best.why_not),
        training=best,
        cloud=cloud,
        owned=owned,
        choices=choices,
        notes=notes,
        assumptions=a.used(gpu.gpu_class),
        assumptions_overridden=a.overridden(),
    )
