"""``clusterplan compare``: GPU types side by side for one model and workload.

Serving: each GPU's row is ``solve``'s answer with the GPU list narrowed to that GPU
(:func:`narrowed`: ``constraints.allowed_gpus: [gpu]``, the chosen workload alone), planned by
:func:`clusterplan.pipeline.plan_requirement` from the same candidate rows and CP-SAT model: expert parallelism,
attention data-parallelism and disaggregated pools wherever the requirement allows them, replica counts chosen by
CP-SAT. Each deployment column is that solve with ``deployment`` set to ``cloud`` or ``owned`` (both are shown,
whatever the requirement asks); the row's design is the one under the requirement's own deployment (``either``:
the cheaper, or a mix of both where CP-SAT finds one cheaper still). A GPU with no design says why with the
planner's own cause (:class:`clusterplan.plan.Infeasibility`). The planner's candidate rows are shared across the
GPUs' solves (:class:`clusterplan.candidates.build.CandidateCache`), so each GPU after the first costs a solve.

Training: estimate's own search (the fastest layout of the smallest count that meets the deadline,
:func:`clusterplan.design.estimate.estimate_requirement` with the GPU pinned), priced on the cheapest offering of
each kind by :mod:`clusterplan.evaluation.pricing` over the requirement's horizon, as ``solve`` prices it.

The figures this module adds are ratios of the planned or estimated figures and catalog rows (the functions
below); no cost or speed is computed twice. Weight precision: the best of those the requirement's quality gate
allows (``quality.max_loss``, narrowed by ``constraints.quantizations``), as the planner chooses, unless
``--precision`` names one.

Derived metrics, per GPU and deployment:

* ``usd_per_tb_per_s``: the price of one GPU over its memory bandwidth in TB/s. Cloud: $/GPU-hour of the
  chosen instance types; owned: capital per GPU slot of the chosen servers (GPU + its share of chassis and
  network, :func:`clusterplan.evaluation.pricing.owned_server`).
* ``usd_per_dense_tflops``: the same price over dense tensor TFLOPS at the compute precision
  (:func:`clusterplan.physics.serving.peak_tflops`, the figure the physics uses).
* ``usd_per_million_tokens``: serving: solve's figure (total over the horizon / the workload's average output
  tokens, :func:`clusterplan.evaluation.pricing.costs`); training: the cost of the hardware / million trained tokens.
* ``self_host_vs_api`` (serving): each row's design per deployment, beside the catalog's hosted API
  prices for the model, per month and per million tokens (input and output together), with the break-even demand
  (:mod:`clusterplan.design.selfhost`).
* power: W per GPU (cloud: the board's TDP; owned: the servers at full power with their overhead, per GPU slot)
  and per replica (x GPUs per replica).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import Field

from clusterplan.candidates.build import CandidateCache
from clusterplan.design.estimate import EstimateResult, Result, estimate_requirement, workload_index
from clusterplan.design.selfhost import SelfHostVsApi, api_quotes, catalog_model_id, with_designs
from clusterplan.errors import FieldProblem, InputError, Location, UnknownNameError, quoted
from clusterplan.evaluation import evaluate
from clusterplan.physics.serving import peak_tflops
from clusterplan.pipeline import PlanOptions, plan_requirement
from clusterplan.plan import Costs, Design, HardwareLine, Plan, ReplicaGroup, ServingPlan
from clusterplan.requirement.schema import (
    PinnedConfig,
    Quality,
    Requirement,
    ServingWorkload,
    quality_class_of,
)
from clusterplan.wording.fmt import layout as layout_text

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
    from clusterplan.requirement.load import ResolvedRequirement

GB_PER_TB = 1000.0  # decimal units, as GPU datasheets state bandwidth
TOKENS_PER_MILLION = 1e6
COMMAND_LINE = Location("command line")
DeploymentKind = Literal["cloud", "owned", "cloud+owned"]
# One design per solve, and no explanation of it: what a sweep's bisection plans with (pipeline.PlanOptions).
DESIGN_ONLY = PlanOptions(top=1, explain="design")
# A GPU (or deployment) with no design: the solve again with the analysis of why (its real cause first).
WHY_NOT = PlanOptions(top=1, explain=False)


# ------------------------------------------------------------------------------------------------
# Formulas (ratios of catalog rows and priced figures)
# ------------------------------------------------------------------------------------------------


def usd_per_tb_per_s(usd: float | None, bandwidth_gb_per_s: float) -> float | None:
    """``usd / (bandwidth_gb_per_s / 1000)``: dollars per TB/s of memory bandwidth (datasheet GB/s)."""
    if usd is None or bandwidth_gb_per_s <= 0:
        return None
    return usd / (bandwidth_gb_per_s / GB_PER_TB)


def usd_per_tflops(usd: float | None, tflops: float) -> float | None:
    """``usd / tflops``: dollars per dense TFLOPS (catalog ``dense`` at the compute precision)."""
    if usd is None or tflops <= 0:
        return None
    return usd / tflops


def usd_per_million_trained_tokens(total_usd: float, tokens: float) -> float | None:
    """``total / (tokens / 1e6)``: a training run's hardware cost per million tokens trained."""
    return total_usd / (tokens / TOKENS_PER_MILLION) if tokens > 0 else None


def usd_per_gpu_hour(lines: list[HardwareLine]) -> float | None:
    """Cloud lines' instance prices over their GPUs (``sum(units x $/h) / sum(units x GPUs per unit)``); None
    when any line is owned."""
    if not lines or any(x.kind != "cloud" for x in lines):
        return None
    return sum(x.units * x.usd_per_hour for x in lines) / sum(x.units * x.gpus_per_unit for x in lines)


def capital_usd_per_gpu(lines: list[HardwareLine]) -> float | None:
    """Owned lines' capital per GPU slot bought (``sum(capital) / sum(bought x GPUs per server)``); None when any
    line is cloud or none is bought."""
    slots = sum(x.bought * x.gpus_per_unit for x in lines)
    if not lines or any(x.kind != "owned" for x in lines) or slots <= 0:
        return None
    return sum(x.capital_usd for x in lines) / slots


def power_w_per_gpu(lines: list[HardwareLine], tdp_w: float) -> float:
    """Owned: the servers' power at full load over their GPUs (with the node overhead); cloud: the board's TDP."""
    owned = [x for x in lines if x.kind == "owned"]
    gpus = sum(x.gpus for x in owned)
    return sum(x.power_w for x in owned) / gpus if gpus else tdp_w


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------


class DeploymentFigures(Result):
    """One GPU on one deployment: the cheapest design of that kind, as solve plans and prices it."""

    kind: DeploymentKind
    offering: str = Field(description="catalog offering key of the first hardware line: cloud:... or owned:gpu:size")
    label: str = Field(description="the first hardware line's instance type or server")
    units: int = Field(description="instances (cloud) or servers (owned), all lines")
    gpus_per_unit: int = Field(description="the first hardware line's GPUs per instance or server")
    hardware: str = Field("", description="every hardware line, 'units x label', joined by ' + '")
    gpus: int = Field(0, description="GPUs the design uses for the workload")
    gpus_per_replica: int = Field(0, description="serving: tp x pp of the design's first decoding replica group")
    layout: str = Field("", description="the design's layout as solve writes it (serving)")
    usd_per_gpu_hour: float | None = Field(description="cloud: instances' $/h over their GPUs, USD")
    capital_usd_per_gpu: float | None = Field(description="owned: capital per GPU slot bought, USD")
    costs: Costs = Field(description="over the requirement's horizon (pricing.costs, solve's figures)")
    usd_per_million_tokens: float | None = Field(
        description="serving: total / average output tokens over the horizon; training: total / trained tokens, USD"
    )
    usd_per_tb_per_s: float | None = Field(
        description="cloud: $/GPU-hour per TB/s; owned: capital $ per GPU per TB/s of memory bandwidth"
    )
    usd_per_dense_tflops: float | None = Field(
        description="cloud: $/GPU-hour per dense TFLOPS; owned: capital $ per GPU per dense TFLOPS"
    )
    power_w_per_gpu: float = Field(description="cloud: board TDP; owned: server power at full load per GPU, W")
    power_w_per_replica: float = Field(description="power per GPU x GPUs per replica (serving) or in the layout, W")


class GpuComparison(Result):
    """One GPU type for the workload: fit, speed, cost per deployment, derived ratios."""

    gpu_id: str
    gpu_name: str
    feasible: bool
    reasons: list[str] = Field(default_factory=list, description="why no design: the planner's cause (serving)")
    deployment: DeploymentKind | None = Field(
        None, description="serving: the deployment of the row's design (solve's answer on this GPU)"
    )
    total_usd: float | None = Field(None, description="the row's design's total over the horizon, USD")
    layout: str = Field("", description="serving: the row's design's layout as solve writes it")
    count: int | None = Field(description="GPUs in total")
    tp: int | None
    pp: int | None
    dp: int | None = Field(description="replicas (serving; every pool's) or data-parallel degree (training)")
    ep: int = Field(1, description="serving: expert-parallel degree of each stage (MoE)")
    attention_dp: bool = Field(False, description="serving: attention data-parallel over each stage's GPUs (MoE)")
    disaggregated: bool = Field(False, description="serving: a prefill pool and a decode pool")
    gpus_per_replica: int | None = Field(
        description="serving: tp x pp of the first decoding replica group (_lead_group); training: all"
    )
    quant: str | None = Field(description="serving: weight precision")
    kv_quant: str | None = None
    compute_precision: str = Field(description="precision the matmuls run at")
    batch: int | None = Field(description="serving: concurrency per replica (the batch policy); training: micro-batch")
    memory_capacity_gib: float | None
    weights_gib: float | None = Field(description="per GPU (most loaded), GiB")
    kv_cache_gib: float | None = Field(description="per GPU at the batch, GiB (serving)")
    memory_total_gib: float | None = Field(
        description="per GPU (most loaded; serving: of the replica the row describes, _lead_group), GiB"
    )
    max_batch_by_memory: int | None = Field(description="serving: sequences whose KV cache fits beside the weights")
    bandwidth_tb_per_s: float = Field(description="catalog memory bandwidth, TB/s")
    dense_tflops: float = Field(description="catalog dense TFLOPS at the compute precision")
    tdp_w: float
    output_tokens_per_s_per_replica: float | None = Field(description="serving: saturated, at the batch policy")
    output_tokens_per_s_within_targets: float | None = Field(
        description="serving: per replica, at the largest rate meeting the p95 targets (0: never)"
    )
    tokens_per_s: float | None = Field(description="training: trained tokens/s, all GPUs")
    time_to_train_s: float | None = None
    meets_targets: bool | None = Field(description="serving: peak demand within targets; training: the deadline")
    cloud: DeploymentFigures | None = None
    owned: DeploymentFigures | None = None
    mixed: DeploymentFigures | None = Field(
        None, description="serving, deployment either: a design on cloud and owned together, where it is cheapest"
    )
    notes: list[str] = Field(default_factory=list)

    def deployments(self) -> list[DeploymentFigures]:
        return [d for d in (self.cloud, self.owned, self.mixed) if d is not None]

    def cheapest_total_usd(self) -> float | None:
        totals = [d.costs.total_usd for d in self.deployments()]
        return min(totals) if totals else None


class Comparison(Result):
    requirement: str
    workload: str
    kind: Literal["serving", "training", "finetune"]
    model: str
    horizon_months: float
    precision: str | None = Field(description="the precision asked for (--precision); None: the planner's choice")
    rows: list[GpuComparison]
    notes: list[str] = Field(default_factory=list)
    self_host_vs_api: SelfHostVsApi | None = Field(
        None, description="serving: the rows that meet their targets beside hosted API list prices for the model"
    )


# ------------------------------------------------------------------------------------------------
# Entry points
# ------------------------------------------------------------------------------------------------


def gpus_to_compare(names: list[str] | None, req: Requirement, catalog: Catalog) -> list[GpuSpec]:
    """The GPUs named on the command line (located errors for unknown names), else the requirement's allowed
    GPUs (``constraints.allowed_gpus`` less ``excluded_gpus``), else every catalog GPU."""
    if names:
        problems: list[FieldProblem] = []
        found: list[GpuSpec] = []
        for name in names:
            try:
                spec = catalog.gpu(name)
            except UnknownNameError as exc:
                hint = (
                    "; did you mean " + " or ".join(quoted(x) for x in exc.suggestions) + "?" if exc.suggestions else ""
                )
                problems.append(
                    FieldProblem(COMMAND_LINE, "--gpus", f"unknown GPU {quoted(name)}{hint}", "unknown_gpu")
                )
                continue
            if spec not in found:
                found.append(spec)
        if problems:
            raise InputError(problems, fix="run `clusterplan catalog gpus` to list them")
        return found
    from clusterplan.candidates.offerings import limits_of

    allowed = limits_of(req, catalog).allowed_gpus
    return [catalog.gpus[g] for g in sorted(catalog.gpus) if allowed is None or g in allowed]


def compare_requirement(
    resolved: ResolvedRequirement,
    catalog: Catalog,
    *,
    workload: int | str | None = None,
    gpus: list[str] | None = None,
    precision: str | None = None,
) -> Comparison:
    """Every GPU of ``gpus_to_compare``, both deployments, in :func:`_row_order`: serving as ``solve`` narrowed to
    the GPU (:func:`_serving_row`), training through estimate's path (:func:`_training_row`)."""
    req = resolved.requirement
    index = workload_index(req, workload, [])
    w = req.workloads[index]
    arch = resolved.model_for(index)
    specs = gpus_to_compare(gpus, req, catalog)
    if not specs:
        raise InputError([FieldProblem(COMMAND_LINE, "--gpus", "no GPU to compare")])
    notes: list[str] = []
    if req.deployment != "either":
        notes.append(f"the requirement asks for deployment: {req.deployment}; both deployments are shown")
    pins = PinnedConfig(workload=index)
    work = req
    if precision is not None:
        pins, work = _with_precision(req, pins, index, precision)
    if isinstance(w, ServingWorkload):
        if len(req.workloads) > 1:
            notes.append(f"planned for workload '{w.name}' alone (the requirement's other workloads left out)")
        notes += _precision_notes(req, pins.quant)
        cache = CandidateCache()  # the candidate rows and physics every GPU's solves share
        rows = [_serving_row(resolved, catalog, spec, index, pins.quant, cache) for spec in specs]
    else:
        both = work.model_copy(update={"deployment": "either"})  # both deployments, whatever the requirement asks
        rows = [
            _training_row(
                estimate_requirement(both, list(resolved.models), catalog, pins.model_copy(update={"gpu": spec.id})),
                spec,
                both,
            )
            for spec in specs
        ]
    rows.sort(key=_row_order)
    return Comparison(
        requirement=req.name, workload=w.name, kind=w.kind, model=arch.name, horizon_months=req.budget.horizon,
        precision=precision, rows=rows, notes=notes, self_host_vs_api=_versus_api(req, catalog, index, arch, rows),
    )  # fmt: skip


def _versus_api(
    req: Requirement, catalog: Catalog, index: int, arch: ModelArchitecture, rows: list[GpuComparison]
) -> SelfHostVsApi | None:
    """Serving: each row meeting its targets, per deployment priced, beside the model's hosted API prices."""
    w = req.workloads[index]
    if not isinstance(w, ServingWorkload):
        return None
    base = api_quotes(
        catalog, catalog_model_id(catalog, arch.name), workload=w.name, requests_per_s=w.requests_per_s,
        input_tokens=w.input_tokens, output_tokens=w.output_tokens,
    )  # fmt: skip
    designs = [
        (f"{r.gpu_name} {d.kind}", d.costs) for r in rows if r.feasible and r.meets_targets for d in r.deployments()
    ]
    return with_designs(base, designs)


def _row_order(r: GpuComparison) -> tuple[bool, bool, bool, float]:
    """Runs and meets its targets first, then runs, then impossible; each cheapest first, unpriced last."""
    total = r.total_usd if r.total_usd is not None else r.cheapest_total_usd()
    return (not r.feasible, r.meets_targets is False, total is None, total or 0.0)


# ------------------------------------------------------------------------------------------------
# Serving: solve narrowed to one GPU
# ------------------------------------------------------------------------------------------------


def narrowed(
    resolved: ResolvedRequirement, index: int, gpu_id: str, deployment: str, quant: str | None = None
) -> ResolvedRequirement:
    """``resolved`` as compare plans it for one GPU: workload ``index`` alone, ``constraints.allowed_gpus: [gpu]``
    (``excluded_gpus`` cleared: the GPU was asked for by name), ``deployment`` as given; ``quant`` (``--precision``):
    ``constraints.quantizations: [quant]``, the quality gate widened to admit it where it does not
    (:func:`_precision_notes` says so)."""
    req = resolved.requirement
    constraints = req.constraints.model_copy(update={"allowed_gpus": [gpu_id], "excluded_gpus": []})
    update: dict[str, Any] = {"deployment": deployment, "workloads": [req.workloads[index]]}
    if quant is not None:
        constraints = constraints.model_copy(update={"quantizations": [quant]})
        if ("bf16" if quant == "fp16" else quant) not in req.allowed_precisions():
            update["quality"] = Quality(max_loss=quality_class_of(quant))
    update["constraints"] = constraints
    return replace(resolved, requirement=req.model_copy(update=update), models=(resolved.model_for(index),))


def _precision_notes(req: Requirement, quant: str | None) -> list[str]:
    """``--precision`` beyond the requirement's quality gate: planned as asked, and said (solve would not)."""
    if quant is None or ("bf16" if quant == "fp16" else quant) in req.allowed_precisions():
        return []
    return [
        f"weights {quant} are outside this requirement's quality gate (quality.max_loss {req.max_loss}): planned "
        f"as --precision asks; solve would not choose them (set quality.max_loss: {quality_class_of(quant)})"
    ]


def _solves(
    resolved: ResolvedRequirement, catalog: Catalog, gpu_id: str, index: int, quant: str | None, cache: CandidateCache
) -> dict[str, Plan]:
    """The GPU's plans: ``cloud`` and ``owned``, and the requirement's own deployment when it is ``either`` (its
    optimum may put cloud and owned hardware together). An ``either`` optimum on one kind of hardware is that
    kind's optimum too (any design of that kind is an ``either`` design), so only the other kind is solved again."""

    def solve(deployment: str) -> Plan:
        return plan_requirement(narrowed(resolved, index, gpu_id, deployment, quant), catalog, DESIGN_ONLY, cache=cache)

    plans: dict[str, Plan] = {}
    if resolved.requirement.deployment == "either":
        plans["either"] = solve("either")
        if plans["either"].designs and (kind := _kind_of(plans["either"].designs[0])) != "cloud+owned":
            plans[kind] = plans["either"]
    for kind in ("cloud", "owned"):
        if kind not in plans:
            plans[kind] = solve(kind)
    return plans


def _why_not(
    resolved: ResolvedRequirement, catalog: Catalog, gpu_id: str, index: int, quant: str | None, cache: CandidateCache
) -> list[str]:
    """The planner's cause for no design on this GPU under the requirement's deployment (the infeasibility
    analysis's real cause where it names one, else its conflict and least relaxations)."""
    deployment = resolved.requirement.deployment
    plan = plan_requirement(narrowed(resolved, index, gpu_id, deployment, quant), catalog, WHY_NOT, cache=cache)
    info = plan.infeasibility
    if info is None:
        return [f"no design: the solve ended {plan.status}"]
    return list(info.causes) or [info.text]


def _kind_of(d: Design) -> DeploymentKind:
    kinds = {x.kind for x in d.hardware}
    return "cloud+owned" if len(kinds) > 1 else "cloud" if kinds == {"cloud"} else "owned"


def _serving_row(
    resolved: ResolvedRequirement,
    catalog: Catalog,
    spec: GpuSpec,
    index: int,
    quant: str | None,
    cache: CandidateCache,
) -> GpuComparison:
    """One GPU's row: each deployment's cheapest design, and the row's figures from the design ``solve`` returns
    on this GPU under the requirement's deployment (the cheapest column where that deployment has none)."""
    plans = _solves(resolved, catalog, spec.id, index, quant, cache)
    best = {k: p.designs[0] for k, p in plans.items() if p.designs}
    asked = resolved.requirement.deployment
    design = best.get(asked)
    mixed = best["either"] if "either" in best and _kind_of(best["either"]) == "cloud+owned" else None
    columns = {k: best[k] for k in ("cloud", "owned") if k in best}
    notes = [f"no {k} design on this GPU" for k in ("cloud", "owned") if k not in best and best]
    if design is None and columns:
        design = min(columns.values(), key=lambda d: d.costs.total_usd)
        notes.insert(0, f"no design under the requirement's deployment ({asked}); the cheapest other is shown")
    if design is None:
        return _no_design(spec, _why_not(resolved, catalog, spec.id, index, quant, cache))
    sp = design.workloads[0]
    assert isinstance(sp, ServingPlan)  # the narrowed requirement's one workload is this serving workload
    w = resolved.requirement.workloads[index]
    assert isinstance(w, ServingWorkload)
    first = _lead_group(sp)
    est = evaluate.serving_estimate(
        resolved.model_for(index), spec, w, evaluate.replica_layout(first), batch=first.batch,
        assumptions=resolved.requirement.assumptions,
    )  # fmt: skip
    precision = est.compute_precision or first.quant
    tflops = peak_tflops(spec, precision)

    def figures(kind: DeploymentKind, d: Design) -> DeploymentFigures:
        plan = d.workloads[0]
        assert isinstance(plan, ServingPlan)
        lead = _lead_group(plan)
        planned = Planned(d.costs, d.hardware, lead.tp * lead.pp, gpus=plan.gpus, layout=layout_text(plan))
        return _deployment(kind, planned, spec, tflops=tflops, per_million=d.costs.usd_per_million_output_tokens)

    return GpuComparison(
        gpu_id=spec.id, gpu_name=spec.name, feasible=True, deployment=_kind_of(design),
        total_usd=design.costs.total_usd, layout=layout_text(sp), count=sp.gpus, tp=first.tp, pp=first.pp,
        dp=sum(g.replicas for g in sp.groups), ep=first.ep, attention_dp=first.attention_dp,
        disaggregated=sp.disaggregated, gpus_per_replica=first.tp * first.pp, quant=first.quant,
        kv_quant=first.kv_cache, compute_precision=precision, batch=first.batch,
        memory_capacity_gib=first.gpu_memory_gib, weights_gib=est.memory.weights_gib,
        kv_cache_gib=est.memory.kv_cache_gib, memory_total_gib=first.memory_gib_per_gpu,
        max_batch_by_memory=est.max_batch_by_memory, bandwidth_tb_per_s=spec.bandwidth_gb_per_s / GB_PER_TB,
        dense_tflops=tflops, tdp_w=spec.tdp_w, output_tokens_per_s_per_replica=first.output_tokens_per_s,
        output_tokens_per_s_within_targets=first.rate_rps * w.output_tokens, tokens_per_s=None,
        time_to_train_s=None, meets_targets=True,
        cloud=figures("cloud", columns["cloud"]) if "cloud" in columns else None,
        owned=figures("owned", columns["owned"]) if "owned" in columns else None,
        mixed=figures("cloud+owned", mixed) if mixed is not None else None, notes=notes,
    )  # fmt: skip


def _lead_group(sp: ServingPlan) -> ReplicaGroup:
    """The replica group a row's per-replica figures describe: the first that decodes (an aggregated replica, or
    the decode pool of a disaggregated design; a prefill replica emits no output tokens)."""
    return next((g for g in sp.groups if g.role != "prefill"), sp.groups[0])


def _no_design(spec: GpuSpec, reasons: list[str]) -> GpuComparison:
    """A GPU the planner finds no design on: the catalog's figures and the planner's reason, nothing planned."""
    return GpuComparison(
        gpu_id=spec.id, gpu_name=spec.name, feasible=False, reasons=reasons, count=None, tp=None, pp=None, dp=None,
        gpus_per_replica=None, quant=None, compute_precision="bf16", batch=None, memory_capacity_gib=None,
        weights_gib=None, kv_cache_gib=None, memory_total_gib=None, max_batch_by_memory=None,
        bandwidth_tb_per_s=spec.bandwidth_gb_per_s / GB_PER_TB, dense_tflops=peak_tflops(spec, "bf16"),
        tdp_w=spec.tdp_w, output_tokens_per_s_per_replica=None, output_tokens_per_s_within_targets=None,
        tokens_per_s=None, meets_targets=None,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# Training: estimate's layout search
# ------------------------------------------------------------------------------------------------


def _with_precision(
    req: Requirement, pins: PinnedConfig, index: int, precision: str
) -> tuple[PinnedConfig, Requirement]:
    """Serving: the weights' precision (estimate's ``--quant``); training: the workload's ``precision``."""
    w = req.workloads[index]
    field = "quant" if isinstance(w, ServingWorkload) else "precision"
    allowed = get_args(PinnedConfig.model_fields["quant"].annotation) if field == "quant" else ()
    if field == "precision":
        allowed = get_args(type(w).model_fields["precision"].annotation)
    allowed = tuple(a for arg in allowed for a in (get_args(arg) or (arg,)) if isinstance(a, str))
    if precision not in allowed:
        raise InputError(
            [FieldProblem(COMMAND_LINE, "--precision", f"{quoted(precision)} is not one of {', '.join(allowed)}")]
        )
    if field == "quant":
        return PinnedConfig.model_validate({**pins.model_dump(exclude_none=True), "quant": precision}), req
    changed = w.model_copy(update={"precision": precision})
    workloads = list(req.workloads)
    workloads[index] = changed
    return pins, req.model_copy(update={"workloads": workloads})


@dataclass(frozen=True)
class Planned:
    """One deployment's design as a column prices it: its costs and hardware lines, the GPUs it uses, one replica's
    GPUs (serving; training: the layout's) and its layout as solve writes it (serving)."""

    costs: Costs
    lines: list[HardwareLine]
    gpus_per_replica: int
    gpus: int = 0
    layout: str = ""


def _deployment(
    kind: DeploymentKind, planned: Planned, spec: GpuSpec, *, tflops: float, per_million: float | None
) -> DeploymentFigures:
    lines = planned.lines
    per_gpu = usd_per_gpu_hour(lines) if kind == "cloud" else capital_usd_per_gpu(lines)
    watts = power_w_per_gpu(lines, spec.tdp_w)
    line = lines[0]
    return DeploymentFigures(
        kind=kind, offering=line.offering, label=line.label, units=sum(x.units for x in lines),
        gpus_per_unit=line.gpus_per_unit, hardware=" + ".join(f"{x.units} x {x.label}" for x in lines),
        gpus=planned.gpus or sum(x.gpus for x in lines), gpus_per_replica=planned.gpus_per_replica,
        layout=planned.layout, usd_per_gpu_hour=usd_per_gpu_hour(lines), capital_usd_per_gpu=capital_usd_per_gpu(lines),
        costs=planned.costs, usd_per_million_tokens=per_million,
        usd_per_tb_per_s=usd_per_tb_per_s(per_gpu, spec.bandwidth_gb_per_s),
        usd_per_dense_tflops=usd_per_tflops(per_gpu, tflops), power_w_per_gpu=watts,
        power_w_per_replica=watts * planned.gpus_per_replica,
    )  # fmt: skip


def _training_row(result: EstimateResult, spec: GpuSpec, req: Requirement) -> GpuComparison:
    c = result.config
    t = result.training
    assert t is not None  # a training estimate always carries its layout
    w_t = req.workloads[c.workload_index]
    precision = c.precision or "bf16"
    deadline = getattr(w_t, "deadline", None)
    tokens = float(getattr(w_t, "tokens", 0.0))
    tflops = peak_tflops(spec, precision)
    figures: dict[str, DeploymentFigures | None] = {"cloud": None, "owned": None}
    for kind, priced in (("cloud", result.cloud), ("owned", result.owned)):
        if result.feasible and priced is not None and priced.hardware:  # an impossible layout is not priced
            figures[kind] = _deployment(
                kind,  # type: ignore[arg-type]
                Planned(priced.costs, priced.hardware, t.gpus), spec, tflops=tflops,
                per_million=usd_per_million_trained_tokens(priced.costs.total_usd, tokens),
            )  # fmt: skip
    memory = t.memory
    return GpuComparison(
        gpu_id=spec.id, gpu_name=spec.name, feasible=result.feasible, reasons=list(result.reasons), count=c.count,
        tp=c.tp, pp=c.pp, dp=c.dp, gpus_per_replica=t.gpus, quant=c.quant, kv_quant=c.kv_quant,
        compute_precision=precision, batch=c.batch, memory_capacity_gib=memory.capacity_gib,
        weights_gib=memory.weights_gib, memory_total_gib=memory.total_gib, kv_cache_gib=0.0,
        max_batch_by_memory=None, bandwidth_tb_per_s=spec.bandwidth_gb_per_s / GB_PER_TB, dense_tflops=tflops,
        tdp_w=spec.tdp_w, output_tokens_per_s_per_replica=None, output_tokens_per_s_within_targets=None,
        tokens_per_s=t.tokens_per_s, time_to_train_s=t.time_to_train_s,
        meets_targets=deadline is None or t.time_to_train_s <= deadline, cloud=figures["cloud"],
        owned=figures["owned"], notes=list(result.notes),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# A requirement from the command line (``--model M`` and request lengths)
# ------------------------------------------------------------------------------------------------


def model_requirement_text(
    model: str, *, input_tokens: int, output_tokens: int, tokens_per_s: float, horizon_months: float
) -> str:
    """A one-workload serving requirement as YAML (validated by the requirement loader like any file)."""
    import yaml

    doc = {
        "name": f"compare {model}",
        "model": model,
        "workloads": [
            {
                "kind": "serving",
                "name": "serving",
                "tokens_per_sec": tokens_per_s,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
            }
        ],
        "budget": {"horizon": horizon_months},
    }
    return yaml.safe_dump(doc, sort_keys=False)
