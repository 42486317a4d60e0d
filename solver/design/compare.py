"""``clusterplan compare``: GPU types side by side for one model and workload, without the solver.

Each GPU is described by ``clusterplan estimate``'s path (:func:`clusterplan.design.estimate.estimate_requirement`
with the GPU pinned). Serving: one estimate per replica shape the planner tries
(:func:`clusterplan.candidates.serving.serving_shapes`, TP within the NVLink domain), each at the planner's batch
policy with the replicas the demand needs; the row keeps the one that runs, meets the p95 targets and costs least
(:func:`_layout_key`). Training: estimate's own search (the fastest layout of the smallest count that meets the
deadline). Each deployment is priced on the cheapest offering of that kind by :mod:`clusterplan.evaluation.pricing`
over the requirement's horizon, as ``solve`` prices it. The figures this module adds are ratios of those figures
and catalog rows (the functions below); no cost or speed is computed twice. Weight precision: the best of those
the requirement's quality gate allows (``quality.max_loss``, narrowed by ``constraints.quantizations``), as the
planner chooses, unless ``--precision`` names one.

Derived metrics, per GPU and deployment:

* ``usd_per_tb_per_s``: the price of one GPU over its memory bandwidth in TB/s. Cloud: $/GPU-hour of the
  chosen instance type; owned: capital per GPU slot of the chosen server (GPU + its share of chassis and
  network, :func:`clusterplan.evaluation.pricing.owned_server`).
* ``usd_per_dense_tflops``: the same price over dense tensor TFLOPS at the compute precision
  (:func:`clusterplan.physics.serving.peak_tflops`, the figure the physics uses).
* ``usd_per_million_tokens``: serving: solve's figure (total over the horizon / the workload's average output
  tokens, :func:`clusterplan.evaluation.pricing.costs`); training: the cost of the hardware / million trained tokens.
* ``self_host_vs_api`` (serving): each row that meets its targets, per deployment, beside the catalog's hosted API
  prices for the model, per month and per million tokens (input and output together), with the break-even demand
  (:mod:`clusterplan.design.selfhost`).
* power: W per GPU (cloud: the board's TDP; owned: the server at full power with its overhead, per GPU slot)
  and per replica (x GPUs per replica).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import Field

from clusterplan.design.estimate import EstimateResult, Result, estimate_requirement
from clusterplan.design.selfhost import SelfHostVsApi, api_quotes, catalog_model_id, with_designs
from clusterplan.errors import FieldProblem, InputError, Location, UnknownNameError, quoted
from clusterplan.physics.serving import peak_tflops
from clusterplan.plan import Costs, HardwareLine
from clusterplan.requirement.schema import PinnedConfig, Requirement, ServingWorkload

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture

GB_PER_TB = 1000.0  # decimal units, as GPU datasheets state bandwidth
TOKENS_PER_MILLION = 1e6
COMMAND_LINE = Location("command line")


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


def usd_per_gpu_hour(line: HardwareLine) -> float | None:
    """A cloud line's instance price over its GPUs per instance (``$/h / GPUs``); None for owned lines."""
    return line.usd_per_hour / line.gpus_per_unit if line.kind == "cloud" else None


def capital_usd_per_gpu(line: HardwareLine) -> float | None:
    """An owned line's capital per GPU slot bought (``capital / (bought x GPUs per server)``); None if none bought."""
    if line.kind != "owned" or line.bought <= 0:
        return None
    return line.capital_usd / (line.bought * line.gpus_per_unit)


def power_w_per_gpu(line: HardwareLine, tdp_w: float) -> float:
    """Owned: the servers' power at full load over their GPUs (with the node overhead); cloud: the board's TDP."""
    return line.power_w / line.gpus if line.kind == "owned" and line.gpus else tdp_w


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------


class DeploymentFigures(Result):
    """One GPU on one deployment: the cheapest offering of that kind hosting the layout, as solve prices it."""

    kind: Literal["cloud", "owned"]
    offering: str = Field(description="catalog offering key: cloud:provider:instance or owned:gpu:size")
    label: str
    term: Literal["on_demand", "1y", "3y", "spot"] = Field(
        "on_demand", description="cloud: the term rented on (on demand, a 1- or 3-year commitment, spot)"
    )
    units: int = Field(description="instances (cloud) or servers (owned)")
    gpus_per_unit: int
    usd_per_gpu_hour: float | None = Field(description="cloud: instance $/h / GPUs per instance, USD")
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
    reasons: list[str] = Field(default_factory=list)
    count: int = Field(description="GPUs in total")
    tp: int
    pp: int
    dp: int = Field(description="replicas (serving) or data-parallel degree (training)")
    gpus_per_replica: int = Field(description="serving: tp x pp; training: the whole layout")
    quant: str | None = Field(description="serving: weight precision")
    kv_quant: str | None = None
    compute_precision: str = Field(description="precision the matmuls run at")
    batch: int | None = Field(description="serving: concurrency per replica (the batch policy); training: micro-batch")
    memory_capacity_gib: float
    weights_gib: float = Field(description="per GPU (most loaded), GiB")
    kv_cache_gib: float = Field(description="per GPU at the batch, GiB (serving)")
    memory_total_gib: float = Field(description="per GPU (most loaded), GiB")
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
    layouts_tried: int = Field(1, description="serving: the planner's replica shapes estimated; the best is shown")
    notes: list[str] = Field(default_factory=list)

    def cheapest_total_usd(self) -> float | None:
        totals = [d.costs.total_usd for d in (self.cloud, self.owned) if d is not None]
        return min(totals) if totals else None


class Comparison(Result):
    requirement: str
    workload: str
    kind: Literal["serving", "training", "finetune"]
    model: str
    horizon_months: float
    precision: str | None = Field(description="the precision asked for (--precision); None: estimate's default")
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
    req: Requirement,
    models: list[ModelArchitecture],
    catalog: Catalog,
    *,
    workload: int | str | None = None,
    gpus: list[str] | None = None,
    precision: str | None = None,
) -> Comparison:
    """Every GPU of ``gpus_to_compare`` through estimate's path, both deployments, in :func:`_row_order`."""
    both = req.model_copy(update={"deployment": "either"})  # both deployments, whatever the requirement asks
    specs = gpus_to_compare(gpus, req, catalog)
    notes: list[str] = []
    if req.deployment != "either":
        notes.append(f"the requirement asks for deployment: {req.deployment}; both deployments are shown")
    rows: list[GpuComparison] = []
    first: EstimateResult | None = None
    for spec in specs:
        pins = PinnedConfig(workload=workload, gpu=spec.id)
        work = both
        if precision is not None:
            pins, work = _with_precision(both, pins, workload, precision)
        result, tried = _best_estimate(work, models, catalog, spec, pins)
        first = first or result
        rows.append(_row(result, spec, work, layouts_tried=tried))
    if first is None:
        raise InputError([FieldProblem(COMMAND_LINE, "--gpus", "no GPU to compare")])
    rows.sort(key=_row_order)
    c = first.config
    return Comparison(
        requirement=req.name, workload=c.workload, kind=c.kind, model=c.model, horizon_months=req.budget.horizon,
        precision=precision, rows=rows, notes=notes, self_host_vs_api=_versus_api(req, catalog, c, rows),
    )  # fmt: skip


def _versus_api(req: Requirement, catalog: Catalog, c: Any, rows: list[GpuComparison]) -> SelfHostVsApi | None:
    """Serving: each row meeting its targets, per deployment priced, beside the model's hosted API prices."""
    w = req.workloads[c.workload_index]
    if not isinstance(w, ServingWorkload):
        return None
    base = api_quotes(
        catalog, catalog_model_id(catalog, c.model), workload=w.name, requests_per_s=w.requests_per_s,
        input_tokens=w.input_tokens, output_tokens=w.output_tokens,
    )  # fmt: skip
    designs = [
        (f"{r.gpu_name} {d.kind}", d.costs)
        for r in rows
        if r.feasible and r.meets_targets
        for d in (r.cloud, r.owned)
        if d is not None
    ]
    return with_designs(base, designs)


def _row_order(r: GpuComparison) -> tuple[bool, bool, bool, float]:
    """Runs and meets its targets first, then runs, then impossible; each cheapest first, unpriced last."""
    total = r.cheapest_total_usd()
    return (not r.feasible, r.meets_targets is False, total is None, total or 0.0)


def _layout_key(result: EstimateResult) -> tuple[bool, bool, float, int]:
    """A serving layout's rank: runs first, then serves the peak within the p95 targets, then the cheapest total
    of either deployment, then the fewest GPUs."""
    totals = [p.costs.total_usd for p in (result.cloud, result.owned) if p is not None]
    meets = result.load is not None and result.load.serves_peak
    return (not result.feasible, not meets, min(totals) if totals else math.inf, result.config.count)


def _best_estimate(
    req: Requirement, models: list[ModelArchitecture], catalog: Catalog, spec: GpuSpec, pins: PinnedConfig
) -> tuple[EstimateResult, int]:
    """Serving: estimate at each of the planner's replica shapes (:func:`clusterplan.candidates.serving.serving_shapes`,
    TP within the NVLink domain) and keep the best by :func:`_layout_key`; training: estimate's own layout search
    (the fastest layout of the smallest count that meets the deadline). Returns the estimate and the layouts tried."""
    from clusterplan.candidates.offerings import gpu_type_of
    from clusterplan.candidates.serving import serving_shapes
    from clusterplan.candidates.table import SERVING_QUANTS
    from clusterplan.design.estimate import workload_index

    w = req.workloads[workload_index(req, pins.workload, [])]
    if not isinstance(w, ServingWorkload):
        return estimate_requirement(req, models, catalog, pins), 1
    g = gpu_type_of(spec)
    shapes = [(tp, pp) for tp, pp in serving_shapes(g) if tp <= g.nvlink_domain]
    # Without --precision, every weight precision the quality gate allows, as the planner's rows do
    # (None: estimate's 16-bit default; the quantized ones in SERVING_QUANTS order).
    allowed = req.allowed_precisions()
    quants = [pins.quant] if pins.quant is not None else [None, *(q for q in SERVING_QUANTS[1:] if q in allowed)]
    results = [
        estimate_requirement(req, models, catalog, pins.model_copy(update={"tp": tp, "pp": pp, "quant": q}))
        for q in quants
        for tp, pp in shapes
    ]
    return min(results, key=_layout_key), len(results)


def _with_precision(
    req: Requirement, pins: PinnedConfig, workload: int | str | None, precision: str
) -> tuple[PinnedConfig, Requirement]:
    """Serving: the weights' precision (estimate's ``--quant``); training: the workload's ``precision``."""
    from clusterplan.design.estimate import workload_index

    index = workload_index(req, workload, [])
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


def _deployment(
    kind: Literal["cloud", "owned"],
    costs: Costs,
    lines: list[HardwareLine],
    spec: GpuSpec,
    *,
    tflops: float,
    gpus_per_replica: int,
    per_million: float | None,
) -> DeploymentFigures:
    line = lines[0]  # estimate prices a layout on one offering type
    per_gpu = usd_per_gpu_hour(line) if kind == "cloud" else capital_usd_per_gpu(line)
    watts = power_w_per_gpu(line, spec.tdp_w)
    return DeploymentFigures(
        kind=kind, offering=line.offering, label=line.label, term=line.term, units=line.units, gpus_per_unit=line.gpus_per_unit,
        usd_per_gpu_hour=usd_per_gpu_hour(line), capital_usd_per_gpu=capital_usd_per_gpu(line), costs=costs,
        usd_per_million_tokens=per_million, usd_per_tb_per_s=usd_per_tb_per_s(per_gpu, spec.bandwidth_gb_per_s),
        usd_per_dense_tflops=usd_per_tflops(per_gpu, tflops), power_w_per_gpu=watts,
        power_w_per_replica=watts * gpus_per_replica,
    )  # fmt: skip


def _row(result: EstimateResult, spec: GpuSpec, req: Requirement, *, layouts_tried: int) -> GpuComparison:
    c = result.config
    notes = list(result.notes)
    if result.serving is not None:
        s = result.serving
        load = result.load
        assert load is not None  # a serving estimate always carries its load
        w = req.workloads[c.workload_index]
        assert isinstance(w, ServingWorkload)
        precision = s.compute_precision or s.quant
        memory = s.memory
        group = s.gpus_per_replica
        within = load.max_rate_for_targets_per_replica * w.output_tokens
        speed: dict[str, Any] = dict(
            output_tokens_per_s_per_replica=s.output_tokens_per_s, output_tokens_per_s_within_targets=within,
            tokens_per_s=None, time_to_train_s=None, meets_targets=load.serves_peak,
            max_batch_by_memory=s.max_batch_by_memory, kv_cache_gib=memory.kv_cache_gib,
        )  # fmt: skip

        def per_million(costs: Costs) -> float | None:
            return costs.usd_per_million_output_tokens
    else:
        t = result.training
        assert t is not None  # a training estimate always carries its layout
        w_t = req.workloads[c.workload_index]
        precision = c.precision or "bf16"
        memory = t.memory
        group = t.gpus
        deadline = getattr(w_t, "deadline", None)
        speed = dict(
            output_tokens_per_s_per_replica=None, output_tokens_per_s_within_targets=None,
            tokens_per_s=t.tokens_per_s, time_to_train_s=t.time_to_train_s,
            meets_targets=deadline is None or t.time_to_train_s <= deadline, max_batch_by_memory=None,
            kv_cache_gib=0.0,
        )  # fmt: skip
        tokens = float(getattr(w_t, "tokens", 0.0))

        def per_million(costs: Costs) -> float | None:
            return usd_per_million_trained_tokens(costs.total_usd, tokens)

    tflops = peak_tflops(spec, precision)
    figures: dict[str, DeploymentFigures | None] = {"cloud": None, "owned": None}
    for kind, priced in (("cloud", result.cloud), ("owned", result.owned)):
        if result.feasible and priced is not None and priced.hardware:  # an impossible layout is not priced
            figures[kind] = _deployment(
                kind,  # type: ignore[arg-type]
                priced.costs, priced.hardware, spec, tflops=tflops, gpus_per_replica=group,
                per_million=per_million(priced.costs),
            )  # fmt: skip
    return GpuComparison(
        gpu_id=spec.id, gpu_name=spec.name, feasible=result.feasible, reasons=list(result.reasons), count=c.count,
        tp=c.tp, pp=c.pp, dp=c.dp, gpus_per_replica=group, quant=c.quant, kv_quant=c.kv_quant,
        compute_precision=precision, batch=c.batch, memory_capacity_gib=memory.capacity_gib,
        weights_gib=memory.weights_gib, memory_total_gib=memory.total_gib,
        bandwidth_tb_per_s=spec.bandwidth_gb_per_s / GB_PER_TB, dense_tflops=tflops, tdp_w=spec.tdp_w,
        cloud=figures["cloud"], owned=figures["owned"], layouts_tried=layouts_tried, notes=notes, **speed,
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
