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
  :func:`clusterplan.evaluation.evaluate.serving_batch`); replicas (``dp``): enough for the peak demand at the
  largest per-replica rate meeting the p95 targets, plus redundancy.
* training: the fastest feasible (tp, cp, pp, virtual stages, ZeRO stage, recompute and recomputed layers,
  micro-batch) for the GPU count, searched as the planner's candidates search
  (:func:`clusterplan.evaluation.evaluate.fastest_training_layout`); the count itself, if omitted, is the fewest whole
  servers that meet the deadline, found per layout by the planner's own DP ladder and whole-server bisection.
* ``count`` is ``tp x pp x dp``; a given count fixes ``dp = count / (tp x pp)``.
* a workload with a demand profile: ``dp`` replicas run every hour and ``burst`` more are rented by the hour (none
  unless pinned; ``count`` holds both, every replica running at the peak hour); the peak hour's load is spread over
  all of them, the month rents the base, and the burst's replica-hours are priced into it through the planner's own
  fleet (:func:`clusterplan.planner.families.demand_profile.fleet_of`), the autoscaler ``solve`` states.
* cost: ``deployment`` from the flag, the file's config, or the requirement (``either`` shows both). The
  hardware is the cheapest one offering type of the planner's offerings that hosts the layout alone, priced
  by :mod:`clusterplan.evaluation.pricing` over the requirement's horizon: the figures ``solve`` reports. Owned
  hardware also gets an amortised month (capital over the catalog's amortisation months plus power),
  labelled as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import GpuClass, GpuSpec, ModelArchitecture
from clusterplan.errors import ClusterplanError, ConfigurationImpossible
from clusterplan.evaluation import pricing
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.types import Judged, LatencyAtLoad, ServingEstimate, TrainingEstimate
from clusterplan.plan import Autoscaler, Costs, HardwareLine
from clusterplan.requirement.schema import (
    PinnedConfig,
    Requirement,
    ServingWorkload,
)
from clusterplan.wording.reasons import render_reasons

if TYPE_CHECKING:
    from clusterplan.candidates.table import Offering


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
    count: int = Field(description="GPUs in total (a demand profile's burst replicas included: at the peak hour)")
    tp: int
    pp: int
    dp: int = Field(
        description="data-parallel degree (training) or replicas (serving; with a demand profile, those "
        "that run every hour)"
    )
    burst: int = Field(
        0,
        exclude_if=lambda v: v == 0,
        description="serving with a demand profile: replicas rented by the hour for the busy hours (count holds them)",
    )
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
    role: Literal["aggregated", "prefill", "decode"] = Field(
        "aggregated", description="serving: aggregated replicas, or one pool of a disaggregated design"
    )
    share: float = Field(1.0, description="serving: the share of the workload's demand these replicas take")


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
    pricing: Literal["on_demand", "1y", "3y", "spot"] = Field(
        description="the term the instances are rented on (on demand, a 1- or 3-year commitment, spot)"
    )
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
    power_usd_per_month: float = Field(description="electricity per month (IT power x PUE x $/kWh x 730 h)")
    usd_per_month: float = Field(
        description="recurring per month: electricity, colocation, support and operations (solve's monthly)"
    )
    usd_total: float = Field(description="capital + horizon x monthly")
    usd_per_million_tokens: float | None = Field(default=None, description="serving: total over the horizon / tokens")
    amortisation_months: float
    amortised_usd_per_month: float = Field(
        description="amortised view: capital / amortisation months + running costs (not solve's cost view)"
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


class PoolSummary(Result):
    """One pool of a disaggregated design (prefill or decode replicas) under the requirement's demand, through
    :mod:`clusterplan.evaluation.pools`: the figures ``solve`` gives its pool groups. A prefill replica has no
    output tokens (its TPOT is None), and the pools' means are not modelled (the plan's are None too)."""

    role: Literal["prefill", "decode"]
    average_requests_per_s: float
    peak_requests_per_s: float
    per_replica_requests_per_s: float = Field(description="peak demand / this pool's replicas")
    utilisation: float = Field(description="at the requested load, of the replica's capacity")
    stable: bool = Field(description="the requested load is within the utilisation ceiling")
    p95_ttft_s: float | None = Field(description="at the requested load (None: unbounded, the queue grows)")
    p95_tpot_s: float | None = Field(description="decode, at the requested load (None: prefill, or unbounded)")
    p95_e2e_s: float | None = Field(description="this pool's part of end to end (None: unbounded)")
    targets: list[TargetCheck] = Field(default_factory=list, description="this pool's share of the p95 targets")
    rate_rps: float = Field(description="largest per-replica rate within the pool's share of the targets")
    rate_no_targets_rps: float = Field(description="per-replica rate at the utilisation ceiling")
    rated_p95_ttft_s: float = Field(description="p95 TTFT at the rated rate (prefill: with the KV transfer)")
    rated_p95_tpot_s: float | None = Field(description="p95 TPOT at the rated rate (None: prefill)")
    rated_p95_e2e_s: float = Field(description="this pool's part of end to end at the rated rate")
    ttft_s: float = Field(description="unloaded: prefill + KV transfer (prefill), or the first step (decode)")
    tpot_s: float | None = Field(description="unloaded decode step (None: prefill)")
    kv_transfer_s: float | None = Field(description="prefill: the prompt's KV cache to the decode pool")
    serves_peak: bool


class EstimateResult(Result):
    requirement: str
    config: ChosenConfig
    feasible: bool
    reasons: list[str] = Field(default_factory=list)
    serving: ServingEstimate | None = None
    load: LoadSummary | None = None
    pool: PoolSummary | None = Field(None, description="a prefill or decode pool: its share of the demand")
    training: TrainingEstimate | None = None
    cloud: CloudCost | None = None
    owned: OwnedCost | None = None
    autoscaler: Autoscaler | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="a workload with a demand profile: the replicas running each hour and the burst tier, priced in "
        "cloud and owned (absent: flat demand, or a pool)",
    )
    choices: list[str] = Field(default_factory=list, description="knobs clusterplan chose, and why")
    notes: list[str] = Field(default_factory=list)
    assumptions: dict[str, float | int | bool] = Field(default_factory=dict, description="factors used")
    assumptions_overridden: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _reasons_as_text(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Each physics estimate's reason records as their sentences, under ``reasons`` right after its ``feasible``
        (the physics keeps codes; the words are written here, at the edge of the estimate's output)."""
        data: dict[str, Any] = handler(self)
        for key, judged in (("serving", self.serving), ("training", self.training)):
            if judged is not None and isinstance(data.get(key), dict):
                data[key] = _with_reasons(data[key], judged)
        unbounded: list[dict[str, str]] = []
        data = _finite_or_none(data, "", unbounded)
        if unbounded:
            data["unbounded"] = unbounded
        return data

    @property
    def bound(self) -> str:
        if self.serving is not None:
            return self.serving.bound
        return self.training.bound if self.training is not None else "compute"


# Why a figure is unbounded (None in the JSON, "unbounded" in the text view), by where it sits.
UNBOUNDED_QUEUE = "queue_grows_without_bound"  # a latency at a load at or above the replica's capacity
NOT_FINITE = "no_finite_value"  # any other figure the model cannot bound (e.g. a layout that cannot run)


def _finite_or_none(value: Any, path: str, unbounded: list[dict[str, str]]) -> Any:
    """``value`` with every infinite or NaN float replaced by None, each recorded in ``unbounded`` with its path and
    a reason code: JSON has no infinity, and an unbounded figure is absent, not a number."""
    if isinstance(value, float) and not math.isfinite(value):
        latency = path.startswith(("load.", "pool.")) or ".rated" in path
        unbounded.append({"field": path, "reason": UNBOUNDED_QUEUE if latency else NOT_FINITE})
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v, f"{path}.{k}" if path else k, unbounded) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v, f"{path}[{i}]", unbounded) for i, v in enumerate(value)]
    return value


def _with_reasons(dumped: dict[str, Any], judged: Judged) -> dict[str, Any]:
    """``dumped`` with ``reasons`` (the sentences of ``judged.why_not``) inserted right after ``feasible``."""
    out: dict[str, Any] = {}
    for key, value in dumped.items():
        out[key] = value
        if key == "feasible":
            out["reasons"] = render_reasons(judged.why_not)
    return out


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
    # The two kinds' modules build on this one's results and shared pieces, so they are imported here.
    from clusterplan.design.estimate_serving import estimate_serving
    from clusterplan.design.estimate_training import estimate_training

    if isinstance(workload, ServingWorkload):
        result = estimate_serving(req, index, workload, arch, gpu, cfg, catalog, choices)
    elif cfg.role not in (None, "aggregated"):
        raise ClusterplanError(
            f"workload {workload.name!r} trains: it has no {cfg.role} pool",
            fix="pools (--prefill-*, --decode-*, role:) apply to serving workloads only",
        )
    else:
        result = estimate_training(req, index, workload, arch, gpu, cfg, catalog, choices)
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


def check_count(count: int | None, tp: int, pp: int, dp: int | None, what: str) -> int:
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


def offerings_for(catalog: Catalog, req: Requirement, gpu: GpuSpec) -> list[Offering]:
    """The planner's offerings of this GPU type (instance types per size and NVLink domain, owned server sizes)."""
    from clusterplan.candidates.offerings import build_offerings, gpu_type_of, limits_of

    offerings, _ = build_offerings(catalog, req, {gpu.id: gpu_type_of(gpu)}, limits_of(req, catalog))
    return offerings


def horizon_costs(
    req: Requirement,
    lines: list[HardwareLine],
    *,
    operations: pricing.Operations,
    serves: str | None,
    one_off_usd: float = 0.0,
    tokens_per_s: float = 0.0,
    burst_usd_per_month: float = 0.0,
) -> Costs:
    """One pinned configuration's costs (:func:`clusterplan.evaluation.pricing.costs`): ``serves`` names the serving
    workload whose one aggregated pool it runs (None: a training run, no serving pool); ``burst_usd_per_month``: a
    demand profile's burst replicas (the autoscaler's, planner/families/demand_profile.autoscaler_over)."""
    pools: set[pricing.PoolKey] = set()
    if serves is not None:
        pools = {(serves, "aggregated", line.gpu, line.kind) for line in lines}
    return pricing.costs(
        lines,
        horizon_months=req.budget.horizon,
        one_off_usd=one_off_usd,
        output_tokens_per_s=tokens_per_s,
        operations=operations,
        pools=pools,
        burst_usd_per_month=burst_usd_per_month,
    )


@dataclass(frozen=True)
class Hosting:
    """What a pinned configuration asks of its servers: ``groups`` groups of ``tp`` GPUs, each within one NVLink
    domain; ``needs_fabric``: the groups talk across servers (a wide-EP stage's all-to-all), so several servers or
    instances are used only where a fabric joins them; ``tokens_per_s`` output at average demand (0: training)."""

    tp: int
    groups: int
    tokens_per_s: float = 0.0
    needs_fabric: bool = False
    network_gb_per_s: float = 0.0  # needs_fabric: the network per GPU its all-to-all is rated at


def owned_cost(
    req: Requirement, catalog: Catalog, gpu: GpuSpec, offerings: list[Offering], hosting: Hosting,
    serves: str | None = None, burst_usd_per_month: float = 0.0,
) -> tuple[OwnedCost | None, str | None]:  # fmt: skip
    """The cheapest owned server size hosting ``groups`` TP groups, over the horizon; or why it cannot be owned.
    ``serves``: the serving workload it runs as one pool (None: a training run); ``burst_usd_per_month``: its demand
    profile's burst replicas, rented in the cloud beside the servers."""
    found = pricing.cheapest_hosting(
        offerings, gpu_id=gpu.id, kind="owned", tp=hosting.tp, groups=hosting.groups,
        horizon_months=req.budget.horizon, needs_fabric=hosting.needs_fabric,
        min_network_gb_per_s=hosting.network_gb_per_s,
    )  # fmt: skip
    if found is None:
        return None, (
            f"the catalog has no purchase price for {gpu.name} and the requirement lists too few of them in its "
            "inventory: it cannot be owned"
        )
    o, bought, inventory = found
    line = pricing.owned_line(o, bought=bought, from_inventory=inventory, gpu_name=gpu.name)
    c = horizon_costs(
        req, [line], operations=pricing.Operations.of(req.owned_costs(catalog.owned)), serves=serves,
        tokens_per_s=hosting.tokens_per_s, burst_usd_per_month=burst_usd_per_month,
    )  # fmt: skip
    months = req.owned_costs(catalog.owned).amortisation_months.value
    notes = [f"{inventory} server(s) from the inventory: power only, no capital"] if inventory else []
    owned = OwnedCost(
        nodes=line.units, gpus_per_node=o.gpus_per_unit, capital_usd=c.capital_usd, power_w=line.power_w,
        power_usd_per_month=line.energy_usd_per_month, usd_per_month=c.monthly_usd, usd_total=c.total_usd,
        usd_per_million_tokens=c.usd_per_million_output_tokens, amortisation_months=months,
        amortised_usd_per_month=pricing.amortised_usd_per_month(c, months), costs=c, hardware=[line], notes=notes,
    )  # fmt: skip
    return owned, None


def deployments_wanted(req: Requirement, cfg: PinnedConfig) -> tuple[bool, bool]:
    which = cfg.deployment or req.deployment
    return which in ("cloud", "either"), which in ("owned", "either")


def estimate_result(
    req: Requirement, config: ChosenConfig, judged: Judged, a: Assumptions, gpu_class: GpuClass, **parts: Any
) -> EstimateResult:
    """One estimate's result: the configuration, whether it runs (and why not, in words), the assumptions used
    and ``parts`` (serving or training figures, load, cloud and owned costs, choices, notes)."""
    return EstimateResult(
        requirement=req.name,
        config=config,
        feasible=judged.feasible,
        reasons=render_reasons(judged.why_not),
        assumptions=a.used(gpu_class),
        assumptions_overridden=a.overridden(),
        **parts,
    )
