"""``clusterplan estimate``: the physics of one pinned configuration, without the solver.

Reads a requirement, picks one workload and one configuration (flags override the file's ``config:``
block; omitted knobs get the choices below, each recorded in ``choices``), and returns an
:class:`EstimateResult`: memory per GPU, speeds, latency at the requested load, cost and the bounding
resource. Rendering lives in :mod:`clusterplan.commands.estimate`; this module only computes.

Choices for omitted knobs:

* weights ``bf16`` (``fp16`` where the GPU has no bf16), or the first precision ``constraints.quantizations``
  allows that the GPU runs; KV cache follows the workload's ``kv_cache_precision`` or the weights.
* serving ``tp``/``pp``: the smallest tensor-parallel degree (within the NVLink domain) at which the weights
  fit, then pipeline stages; ``batch``: the largest the memory holds, capped at 256; replicas (``dp``):
  enough for the peak demand at the largest per-replica rate meeting the p95 targets, plus redundancy.
* training: the fastest feasible (tp, pp, ZeRO stage, recompute, micro-batch) for the GPU count; the count
  itself, if omitted, is the smallest number of whole nodes that meets the deadline (up to 4,096 GPUs).
* ``count`` is ``tp x pp x dp``; a given count fixes ``dp = count / (tp x pp)``.
* cost: ``deployment`` from the flag, the file's config, or the requirement (``either`` shows both).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from clusterplan.catalog import Catalog
from clusterplan.catalog_schema import CloudInstance, GpuSpec, ModelArchitecture
from clusterplan.errors import ClusterplanError, ConfigurationImpossible
from clusterplan.physics import cost, memory, queueing, rules, serving, training
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.types import LatencyAtLoad, ServingEstimate, TrainingEstimate
from clusterplan.render.reasons import render_reasons
from clusterplan.requirement import FinetuneWorkload, PinnedConfig, Requirement, ServingWorkload, TrainingWorkload

MAX_DEFAULT_BATCH = 256
MAX_DEFAULT_GPUS = 4096
TP_DEGREES = (1, 2, 4, 8, 16, 32, 64, 72)
PP_DEGREES = (1, 2, 4, 8, 16)
MICRO_BATCHES = (1, 2, 4, 8)
QUANT_ORDER = ("bf16", "fp16", "fp8", "int8", "int4")


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
    quant: str | None = None
    kv_quant: str | None = None
    batch: int | None = Field(default=None, description="concurrency per replica (serving) or micro-batch (training)")
    zero: int | None = None
    recompute: str | None = None
    precision: str | None = None


class TargetCheck(Result):
    name: str
    target_s: float
    estimate_s: float
    met: bool


class LoadSummary(Result):
    """A serving configuration under the requirement's demand."""

    average_requests_per_s: float
    peak_requests_per_s: float
    per_replica_requests_per_s: float
    latency: LatencyAtLoad
    targets: list[TargetCheck] = Field(default_factory=list)
    max_rate_for_targets_per_replica: float = Field(description="largest per-replica rate meeting every target")
    serves_peak: bool


class CloudCost(Result):
    instance: str = Field(description="provider:id")
    gpus_per_instance: int
    instances: int
    pricing: Literal["on_demand", "spot"]
    usd_per_hour: float = Field(description="all instances")
    usd_per_month: float | None = Field(default=None, description="serving: 730 h")
    usd_total: float | None = Field(default=None, description="training: whole billed hours")
    billed_hours: int | None = None
    usd_per_million_tokens: float | None = Field(default=None, description="serving, at the average demand")


class OwnedCost(Result):
    nodes: int
    gpus_per_node: int
    capital_usd: float | None = Field(default=None, description="None when the catalog has no purchase price")
    power_w: float = Field(description="IT power at full load, W")
    power_usd_per_month: float
    amortised_usd_per_month: float | None
    usd_per_month: float | None
    amortisation_months: float
    usd_total: float | None = Field(default=None, description="training: power for the run plus amortisation over it")
    usd_per_million_tokens: float | None = None
    notes: list[str] = Field(default_factory=list)


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
    from clusterplan.requirement_loader import load_requirement

    resolved = load_requirement(path, catalog)
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
    index = _workload_index(req, cfg.workload, choices)
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


def _workload_index(req: Requirement, which: int | str | None, choices: list[str]) -> int:
    if which is None:
        if len(req.workloads) > 1:
            names = ", ".join(f"{i}={w.name}" for i, w in enumerate(req.workloads))
            choices.append(
                f"workload 0 ({req.workloads[0].name}) of {len(req.workloads)}; --workload picks another ({names})"
            )
        return 0
    if isinstance(which, str) and which.isdigit():
        which = int(which)
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
    from clusterplan.errors import did_you_mean

    raise ClusterplanError(
        f"no workload named '{which}'",
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
    kv = "fp8" if quant == "fp8" else rules.half_precision(gpu)
    choices.append(f"KV cache {kv} (follows the weights)")
    return kv


def _cheapest_instance(
    catalog: Catalog, gpu: GpuSpec, req: Requirement, *, gpus: int, group: int
) -> tuple[CloudInstance, int, float] | None:
    """The cheapest instance type for ``gpus`` GPUs whose instances hold a whole ``group`` (a TP x PP replica
    for serving, the TP group for training): (instance, instances, USD/hour for all)."""
    c = req.constraints
    spot = c.pricing == "spot"
    best: tuple[CloudInstance, int, float] | None = None
    for inst in catalog.instances_for(gpu.id, providers=c.clouds, regions=c.regions):
        rate = inst.spot_usd_per_hour if spot else inst.on_demand_usd_per_hour
        if rate is None:
            continue
        if group > 1 and (inst.gpus_per_instance < group or inst.gpus_per_instance % group):
            continue
        instances = math.ceil(gpus / inst.gpus_per_instance)
        total = instances * rate
        if best is None or total < best[2] - 1e-9:
            best = (inst, instances, total)
    return best


def _owned_nodes(catalog: Catalog, gpu: GpuSpec, gpus: int) -> tuple[int, int]:
    """(nodes, GPUs per node): the largest owned server size this GPU ships in, enough nodes for ``gpus``."""
    sizes = catalog.owned.sizes_for(gpu)
    fitting = [s for s in sizes if s >= gpus]
    per_node = min(fitting) if fitting else max(sizes)
    return math.ceil(gpus / per_node), per_node


def _owned_cost(
    catalog: Catalog,
    gpu: GpuSpec,
    gpus: int,
    *,
    hours: float | None = None,
    tokens_per_s: float | None = None,
) -> OwnedCost:
    owned = catalog.owned
    nodes, per_node = _owned_nodes(catalog, gpu, gpus)
    cls = gpu.gpu_class
    notes: list[str] = []
    # Per-node figures scale with the node's GPU slots (OwnedCosts.node_fraction); the planner uses the same.
    network = owned.network_usd_for_node(cls, per_node)
    server = owned.server_usd_for_node(cls, per_node)
    power_w = cost.owned_power_w(gpu.tdp_w, gpus, nodes, owned.power_overhead_w_for_node(cls, per_node))
    pue, kwh = owned.pue.value, owned.electricity_usd_per_kwh.value
    power_month = cost.owned_power_usd_per_month(power_w, pue, kwh)
    months = owned.amortisation_months.value
    capital: float | None = None
    amortised: float | None = None
    monthly: float | None = None
    if gpu.price is None:
        notes.append(f"the catalog has no purchase price for {gpu.name}: capital unknown")
    else:
        capital = cost.owned_capital_usd(gpu.price.usd, gpus, nodes, server, network)
        amortised = cost.amortised_usd_per_month(capital, months)
        monthly = amortised + power_month
    total: float | None = None
    if hours is not None and amortised is not None:
        total = (power_month + amortised) * hours / cost.SERVING_HOURS_PER_MONTH
    per_m: float | None = None
    if tokens_per_s and monthly is not None:
        per_m = cost.cost_per_million_tokens_usd(monthly / cost.SERVING_HOURS_PER_MONTH, tokens_per_s)
    return OwnedCost(
        nodes=nodes,
        gpus_per_node=per_node,
        capital_usd=capital,
        power_w=power_w,
        power_usd_per_month=power_month,
        amortised_usd_per_month=amortised,
        usd_per_month=monthly,
        amortisation_months=months,
        usd_total=total,
        usd_per_million_tokens=per_m,
        notes=notes,
    )


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
    """tp and pp: as given, else the smallest that fits the weights and one sequence."""
    if cfg.tp is not None and cfg.pp is not None:
        return cfg.tp, cfg.pp
    if cfg.tp is not None and cfg.count is not None and cfg.dp is not None and cfg.pp is None:
        return cfg.tp, max(1, cfg.count // (cfg.tp * cfg.dp))
    tps, pps = _degrees(arch, gpu, cfg)
    for pp in pps:
        for tp in tps:
            if cfg.count is not None and cfg.count % (tp * pp):
                continue
            kw = dict(tp=tp, pp=pp, quant=quant, kv_precision=kv, context_tokens=context, assumptions=a)
            if memory.max_batch_by_memory(arch, gpu, **kw) > 0:  # type: ignore[arg-type]
                if cfg.tp is None or cfg.pp is None:
                    choices.append(f"tp={tp}, pp={pp}: the smallest layout whose weights and one sequence fit")
                return tp, pp
    tp, pp = tps[-1], pps[0]
    choices.append(f"tp={tp}, pp={pp}: nothing smaller fits; shown for its reasons")
    return tp, pp


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
    quant = cfg.quant or _default_quant(gpu, req, choices)
    kv = cfg.kv_quant or _default_kv(quant, gpu, w, choices)
    context = w.context_tokens
    tp, pp = _serving_layout(arch, gpu, cfg, quant, kv, context, a, choices)
    kw: dict[str, Any] = dict(tp=tp, pp=pp, quant=quant, kv_precision=kv, assumptions=a)
    max_batch = serving.max_batch_by_memory(arch, gpu, context_tokens=context, **kw)
    if cfg.batch is not None:
        batch = cfg.batch
    else:
        batch = max(1, min(max_batch, MAX_DEFAULT_BATCH))
        choices.append(f"batch {batch}: the largest the memory holds (max {max_batch}), capped at {MAX_DEFAULT_BATCH}")
    est = serving.estimate_serving(
        arch, gpu, batch=batch, input_tokens=w.input_tokens, output_tokens=w.output_tokens, context_tokens=context,
        **kw,
    )  # fmt: skip
    tk: dict[str, Any] = dict(input_tokens=w.input_tokens, output_tokens=w.output_tokens, assumptions=a)
    rate = queueing.max_rate_for_targets(
        est, p95_latency_s=w.p95_latency, p95_ttft_s=w.p95_ttft, p95_tpot_s=w.p95_tpot, **tk
    )
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
        serves_peak=lat.stable and all(c.met for c in checks),
    )
    notes: list[str] = []
    if not lat.stable:
        notes.append(
            f"peak load is {lat.utilisation:.0%} of a replica's capacity, above the {a.utilisation_ceiling:.0%} "
            "ceiling: add replicas"
        )
    want_cloud, want_owned = _deployments(req, cfg)
    cloud = None
    if want_cloud:
        found = _cheapest_instance(catalog, gpu, req, gpus=count, group=group)
        if found is None:
            notes.append(f"no cloud instance in the catalog offers {gpu.name} with {group} GPUs per replica")
        else:
            inst, n, usd_h = found
            cloud = CloudCost(
                instance=inst.key, gpus_per_instance=inst.gpus_per_instance, instances=n,
                pricing=req.constraints.pricing, usd_per_hour=usd_h,
                usd_per_month=usd_h * cost.serving_hours_per_month(),
                usd_per_million_tokens=cost.cost_per_million_tokens_usd(usd_h, average * w.output_tokens),
            )  # fmt: skip
    owned = _owned_cost(catalog, gpu, count, tokens_per_s=average * w.output_tokens) if want_owned else None
    config = ChosenConfig(
        workload_index=index, workload=w.name, kind="serving", model=arch.name, gpu_id=gpu.id, gpu_name=gpu.name,
        count=count, tp=tp, pp=pp, dp=replicas, quant=quant, kv_quant=kv, batch=batch,
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


def _training_candidates(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    cfg: PinnedConfig,
    count: int | None,
    a: Assumptions,
) -> list[TrainingEstimate]:
    tps, pps = _degrees(arch, gpu, cfg)
    recomputes = [cfg.recompute or w.activation_recompute] if (cfg.recompute or w.activation_recompute) else [
        "none", "selective", "full"
    ]  # fmt: skip
    mbs = [cfg.batch] if cfg.batch else list(MICRO_BATCHES)
    out: list[TrainingEstimate] = []
    for tp in tps:
        for pp in pps:
            group = tp * pp
            if count is not None:
                if count % group:
                    continue
                dp = count // group
            else:
                dp = cfg.dp or 1
            if cfg.dp is not None and dp != cfg.dp:
                continue
            zeros = [cfg.zero] if cfg.zero is not None else ([0] if dp == 1 else [1, 2, 3])
            for zero in zeros:
                for rc in recomputes:
                    for mb in mbs:
                        est = training.estimate_training(
                            arch, gpu, workload=w, tp=tp, pp=pp, dp=dp, zero_stage=zero, recompute=rc,
                            micro_batch=mb, nodes_gpus_per_node=min(tp * pp * dp, gpu.max_gpus_per_node),
                            assumptions=a,
                        )  # fmt: skip
                        out.append(est)
    return out


def _best(estimates: list[TrainingEstimate]) -> TrainingEstimate | None:
    feasible = [e for e in estimates if e.feasible]
    if not feasible:
        return None
    return max(feasible, key=lambda e: (e.tokens_per_s, -e.tp, -e.pp, -e.zero_stage, -e.micro_batch))


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
    count = cfg.count
    if count is None and cfg.tp and cfg.pp and cfg.dp:
        count = cfg.tp * cfg.pp * cfg.dp
    all_pinned = all(v is not None for v in (cfg.tp, cfg.pp, cfg.zero, cfg.batch)) and (
        cfg.recompute or w.activation_recompute
    )
    tried: list[TrainingEstimate] = []
    best: TrainingEstimate | None = None
    if count is not None:
        if cfg.tp and cfg.pp:
            _check_count(count, cfg.tp, cfg.pp, cfg.dp, "dp")
        tried = _training_candidates(arch, gpu, w, cfg, count, a)
        best = _best(tried)
    else:
        node = gpu.max_gpus_per_node
        sizes = [s for s in (1, 2, 4) if s < node] + [node * k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
        for size in [s for s in sizes if s <= MAX_DEFAULT_GPUS]:
            batch = _training_candidates(arch, gpu, w, cfg, size, a)
            tried += batch
            found = _best(batch)
            if found is not None:
                best = found
                if found.time_to_train_s <= w.deadline:
                    break
        if best is not None:
            met = "meets" if best.time_to_train_s <= w.deadline else "is the fastest tried but misses"
            choices.append(f"{best.gpus} GPUs: the smallest count tried that {met} the deadline")
    if best is None:
        if not tried:
            raise ClusterplanError(
                f"no layout of {count} x {gpu.name} matches the given tp/pp/dp",
                fix="give a count that is a multiple of tp x pp, or leave tp and pp out",
            )
        # Nothing feasible: show the layout that comes closest (fewest reasons, least memory per capacity).
        best = min(tried, key=lambda e: (len(e.why_not), e.memory.total_gib / e.memory.capacity_gib, e.gpus))
        if not all_pinned:
            choices.append(
                f"no layout tried runs; shown: the closest ({best.gpus} GPUs, tp={best.tp}, pp={best.pp}, "
                f"ZeRO {best.zero_stage}, recompute {best.recompute}, micro-batch {best.micro_batch})"
            )
    elif not all_pinned:
        choices.append(
            f"tp={best.tp}, pp={best.pp}, ZeRO {best.zero_stage}, recompute {best.recompute}, micro-batch "
            f"{best.micro_batch}: the fastest feasible layout tried"
        )
    want_cloud, want_owned = _deployments(req, cfg)
    cloud = None
    notes: list[str] = []
    if want_cloud:
        found = _cheapest_instance(catalog, gpu, req, gpus=best.gpus, group=best.tp)
        if found is None:
            notes.append(f"no cloud instance in the catalog offers {gpu.name} for this layout")
        else:
            inst, n, usd_h = found
            cloud = CloudCost(
                instance=inst.key, gpus_per_instance=inst.gpus_per_instance, instances=n,
                pricing=req.constraints.pricing, usd_per_hour=usd_h,
                usd_total=cost.training_cloud_cost_usd(usd_h, 1, best.time_to_train_s),
                billed_hours=cost.billed_hours(best.time_to_train_s),
            )  # fmt: skip
    owned = _owned_cost(catalog, gpu, best.gpus, hours=best.time_to_train_s / 3600.0) if want_owned else None
    kind: Literal["training", "finetune"] = "finetune" if isinstance(w, FinetuneWorkload) else "training"
    config = ChosenConfig(
        workload_index=index, workload=w.name, kind=kind, model=arch.name, gpu_id=gpu.id, gpu_name=gpu.name,
        count=best.gpus, tp=best.tp, pp=best.pp, dp=best.dp, batch=best.micro_batch, zero=best.zero_stage,
        recompute=best.recompute, precision=w.precision,
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
