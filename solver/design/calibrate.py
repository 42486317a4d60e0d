"""``clusterplan calibrate``: fit the engine x GPU factors a prediction rests on to a user's own benchmark runs.

Each run is predicted through the one path (``evaluation/evaluate.py``: the engine's batch cap, the replica's
step table at the run's concurrency, the queueing model's mean TTFT and TPOT at an open-loop run's measured request rate)
and the factors are chosen to minimise the summed squared log error of the figures the run measured (mean TTFT,
mean TPOT, output throughput). The fit is a bounded coordinate search, golden section on one factor at a time,
three rounds, from the catalog's values: deterministic, no solver library.

Serving factors and their bounds (catalog/engines.yaml, per engine and GPU class; the fit writes them for one GPU):

* ``memory_bandwidth_efficiency`` in [0.30, 1.00]: decode streams weights and KV (TPOT, throughput);
* ``compute_efficiency`` in [0.20, 1.00]: prefill's matmuls (TTFT) and large decode batches;
* ``decode_step_overhead_s`` in [0.0001, 0.030] s: the engine's fixed cost per step (TPOT at small batches).

Training: ``training_mfu`` in [0.10, 1.00] so the predicted step time (``evaluate.training_point``) equals the
logged one (a Megatron-LM step time or torchtitan's tokens/s per GPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.errors import CalibrationError, ClusterplanError, UnknownNameError
from clusterplan.evaluation import evaluate
from clusterplan.inputs.bench_results import ServingRun, TrainingRun, with_flags
from clusterplan.physics import queueing
from clusterplan.physics.factors import Assumptions, PerClass
from clusterplan.physics.layout import Layout
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.requirement.schema import EngineSettings, ServingWorkload, TrainingWorkload

SERVING_BOUNDS: dict[str, tuple[float, float]] = {
    "memory_bandwidth_efficiency": (0.30, 1.00),
    "compute_efficiency": (0.20, 1.00),
    "decode_step_overhead_s": (0.0001, 0.030),
}
TRAINING_BOUNDS = (0.10, 1.00)  # training_mfu
ROUNDS = 3  # coordinate-search rounds over the serving factors
GOLDEN_STEPS = 40  # golden-section steps per factor: the bracket shrinks to 0.618^40 ~ 4e-9 of its width
FIGURES = ("ttft_s", "tpot_s", "output_tokens_per_s")


@dataclass(frozen=True)
class BenchPoint:
    """One run with what the physics needs to predict it."""

    run: ServingRun
    arch: ModelArchitecture
    gpu: GpuSpec
    layout: Layout
    workload: ServingWorkload


@dataclass(frozen=True)
class Figures:
    """A run's mean TTFT and TPOT (s) and output throughput (tokens/s); None: not measured."""

    ttft_s: float | None
    tpot_s: float | None
    output_tokens_per_s: float | None


@dataclass(frozen=True)
class Residual:
    """One figure of one run: measured, predicted before and after the fit (log errors follow)."""

    run: str
    figure: str
    measured: float
    before: float
    after: float


@dataclass(frozen=True)
class ServingFit:
    """The fitted factors for one engine on one GPU, the catalog's before, and every residual."""

    engine: str
    gpu: GpuSpec
    before: dict[str, float]
    after: dict[str, float]
    residuals: list[Residual]
    at_bound: list[str]  # factors the fit left on a bound (the data ask for more than the bound allows)


def bench_point(run: ServingRun, catalog: Catalog, arch: ModelArchitecture, gpu: GpuSpec, quant: str) -> BenchPoint:
    """A run as a one-replica serving workload under its engine, at its TP and weight precision."""
    engine = catalog.engine(run.engine or "vllm").id
    workload = ServingWorkload(
        kind="serving", name="benchmark", requests_per_min=max(run.requests_per_s or 1.0, 1e-3) * 60.0,
        input_tokens=max(round(run.input_tokens), 1), output_tokens=max(round(run.output_tokens), 1),
        engine=EngineSettings(name=engine),
    )  # fmt: skip
    kv = "fp8" if quant in ("fp8", "fp4") else "bf16"
    return BenchPoint(run, arch, gpu, Layout(tp=run.tp or 1, quant=quant, kv_precision=kv), workload)


def _concurrency(run: ServingRun) -> float:
    """The clients the run kept busy: its max_concurrency, else Little's law on its own figures."""
    if run.max_concurrency is not None:
        return run.max_concurrency
    if run.requests_per_s and run.mean_ttft_s is not None and run.mean_tpot_s is not None:
        return run.requests_per_s * (run.mean_ttft_s + max(run.output_tokens - 1.0, 0.0) * run.mean_tpot_s)
    return 1.0


def predict(point: BenchPoint, assumptions: Assumptions) -> Figures:
    """What the physics predicts the run measured: the replica's step table at the run's concurrency (capped by
    the engine). A closed-loop run (max_concurrency) keeps that many requests running, nothing queues: the unloaded
    TTFT and the TPOT at that batch. An open-loop run (request_rate): the queueing model's means at the measured
    request rate (unloaded where the model saturates first)."""
    arch, gpu, w, layout, run = point.arch, point.gpu, point.workload, point.layout, point.run
    cap = evaluate.max_batch(arch, gpu, w, layout, assumptions)
    if cap < 1:
        raise CalibrationError(
            f"{run.file}: {arch.name} does not fit {gpu.name} at TP {layout.tp} in {layout.quant}",
            fix="give the run's --tp and --quant, or check the model and GPU the file names",
        )
    batch = max(1, min(cap, round(_concurrency(run))))
    est = evaluate.serving_estimate(arch, gpu, w, layout, batch=batch, assumptions=assumptions)
    offered = run.request_rate_per_s * run.output_tokens if run.request_rate_per_s is not None else math.inf
    throughput = min(est.output_tokens_per_s, offered)
    if run.max_concurrency is not None:
        return Figures(ttft_s=est.ttft_s, tpot_s=est.tpot_s, output_tokens_per_s=throughput)
    a = evaluate.serving_assumptions(assumptions, w)
    lat = queueing.latency_at_load(
        est, run.requests_per_s or 0.0, input_tokens=w.input_tokens, output_tokens=w.output_tokens, assumptions=a
    )
    loaded = math.isfinite(lat.mean_ttft_s) and math.isfinite(lat.mean_tpot_s)
    return Figures(
        ttft_s=lat.mean_ttft_s if loaded else est.ttft_s,
        tpot_s=lat.mean_tpot_s if loaded else est.tpot_s,
        output_tokens_per_s=throughput,
    )


def measured(run: ServingRun) -> Figures:
    return Figures(run.mean_ttft_s, run.mean_tpot_s, run.output_tokens_per_s)


def _error(points: Sequence[BenchPoint], assumptions: Assumptions) -> float:
    """Summed squared log error of every measured figure."""
    total = 0.0
    for p in points:
        got, want = predict(p, assumptions), measured(p.run)
        for name in FIGURES:
            m, g = getattr(want, name), getattr(got, name)
            if m is not None and g is not None and g > 0:
                total += math.log(g / m) ** 2
    return total


def _with(assumptions: Assumptions, values: dict[str, float]) -> Assumptions:
    """``assumptions`` with engine factors set for every class (explicit: they win over the catalog's)."""
    update = {k: PerClass(datacenter=v, workstation=v, consumer=v) for k, v in values.items()}
    return assumptions.model_copy(update=update)


def golden_min(f: Callable[[float], float], lo: float, hi: float, steps: int = GOLDEN_STEPS) -> float:
    """The minimiser of a unimodal ``f`` on ``[lo, hi]`` by golden-section search (Kiefer 1953)."""
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    best = min(((lo, f(lo)), (hi, f(hi)), ((a + b) / 2.0, f((a + b) / 2.0))), key=lambda t: t[1])
    return best[0]


def fit_serving(points: Sequence[BenchPoint], base: Assumptions) -> ServingFit:
    """The serving factors that best predict ``points`` (one engine, one GPU), within :data:`SERVING_BOUNDS`."""
    first = points[0]
    a = evaluate.serving_assumptions(base, first.workload)
    before = {name: a.engine_factor(name, first.gpu) for name in SERVING_BOUNDS}
    values = {k: min(max(v, SERVING_BOUNDS[k][0]), SERVING_BOUNDS[k][1]) for k, v in before.items()}
    for _ in range(ROUNDS):
        for name, (lo, hi) in SERVING_BOUNDS.items():

            def error_at(x: float, n: str = name) -> float:
                return _error(points, _with(base, {**values, n: x}))

            values[name] = golden_min(error_at, lo, hi)
    fitted = _with(base, values)
    residuals = [
        Residual(Path(p.run.file).name + ("" if p.run.line is None else f":{p.run.line}"), name, m, b, g)
        for p in points
        for name, m, b, g in _rows(measured(p.run), predict(p, base), predict(p, fitted))
    ]
    span = {k: (hi - lo) * 1e-3 for k, (lo, hi) in SERVING_BOUNDS.items()}
    at_bound = [
        k for k, v in values.items() if min(abs(v - SERVING_BOUNDS[k][0]), abs(v - SERVING_BOUNDS[k][1])) < span[k]
    ]
    engine = a.engine
    return ServingFit(engine, first.gpu, before, {k: round(v, 6) for k, v in values.items()}, residuals, at_bound)


def _rows(want: Figures, before: Figures, after: Figures) -> list[tuple[str, float, float, float]]:
    out = []
    for name in FIGURES:
        m, b, g = getattr(want, name), getattr(before, name), getattr(after, name)
        if m is not None and b is not None and g is not None:
            out.append((name, m, b, g))
    return out


@dataclass(frozen=True)
class TrainingPoint:
    """A training log with the layout it ran: model, GPU, GPUs, TP, PP and sequence length."""

    run: TrainingRun
    arch: ModelArchitecture
    gpu: GpuSpec
    gpus: int
    layout: Layout
    sequence_length: int
    global_batch_sequences: int


@dataclass(frozen=True)
class TrainingFit:
    gpu: GpuSpec
    before: float
    after: float
    measured_s: float  # step time, seconds
    predicted_before_s: float
    predicted_after_s: float
    at_bound: bool


def training_step_s(point: TrainingPoint, assumptions: Assumptions) -> float:
    """The predicted step time of the log's layout (``evaluate.training_point``), seconds."""
    tokens = point.global_batch_sequences * point.sequence_length
    w = TrainingWorkload(
        kind="training", tokens=tokens * 1000, deadline=30 * 86400, sequence_length=point.sequence_length,
        global_batch_tokens=tokens,
    )  # fmt: skip
    dp = max(point.gpus // (point.layout.tp * point.layout.pp), 1)
    settings = TrainingSettings(dp=dp, zero_stage=1, micro_batch=1)
    est = evaluate.training_point(
        point.arch, point.gpu, w, layout=point.layout, settings=settings, assumptions=assumptions
    )
    return est.step_time_s


def measured_step_s(point: TrainingPoint) -> float:
    """The log's step time: Megatron-LM's, or torchtitan's tokens/s per GPU turned into one."""
    run = point.run
    if run.step_time_s is not None:
        return run.step_time_s
    assert run.tokens_per_s_per_gpu is not None
    return point.global_batch_sequences * point.sequence_length / (run.tokens_per_s_per_gpu * point.gpus)


def fit_training(point: TrainingPoint, base: Assumptions) -> TrainingFit:
    """``training_mfu`` on the log's GPU so the predicted step time meets the logged one, in :data:`TRAINING_BOUNDS`."""
    want = measured_step_s(point)
    before = base.training_mfu_on(point.gpu)

    def at(mfu: float) -> Assumptions:
        return base.model_copy(update={"training_mfu": PerClass(datacenter=mfu, workstation=mfu, consumer=mfu)})

    lo, hi = TRAINING_BOUNDS
    after = golden_min(lambda x: math.log(training_step_s(point, at(x)) / want) ** 2, lo, hi)
    return TrainingFit(
        point.gpu, before, round(after, 6), want, training_step_s(point, base), training_step_s(point, at(after)),
        at_bound=min(after - lo, hi - after) < 1e-3,
    )  # fmt: skip


def source_key(kind: str, gpu_id: str) -> str:
    return f"measured-on-your-hardware-{kind}-{gpu_id}"


def serving_overlay(fit: ServingFit, runs: Sequence[ServingRun], catalog: Catalog, as_of: str) -> dict[str, Any]:
    """A catalog overlay (``--catalog``) carrying the fit as the engine's factors measured on this GPU; the
    engine's earlier measurements on other GPUs are kept."""
    key = source_key(fit.engine, fit.gpu.id)
    by = _provenance(runs)
    kept = {g: m.model_dump(exclude_none=True) for g, m in catalog.engine(fit.engine).measured.items()}
    entry = {**fit.after, "measured_by": by}
    return {
        "sources": {
            key: {"title": f"measured on your hardware: {by}", "as_of": as_of, "kind": "measured on your hardware"}
        },
        "engines": [
            {"id": fit.engine, "override": True, "measured": {**kept, fit.gpu.id: entry}, "source": key, "as_of": as_of}
        ],
    }


def training_overlay(fit: TrainingFit, run: TrainingRun, as_of: str) -> dict[str, Any]:
    """A catalog overlay carrying the fitted ``training_mfu`` as the GPU row's measured value."""
    key = source_key("training", fit.gpu.id)
    by = f"{run.tool} step-time log {Path(run.file).name} ({run.iterations} iterations)"
    return {
        "sources": {
            key: {"title": f"measured on your hardware: {by}", "as_of": as_of, "kind": "measured on your hardware"}
        },
        "gpus": [
            {"id": fit.gpu.id, "override": True, "measured_training_mfu": fit.after, "source": key, "as_of": as_of}
        ],
    }


def _provenance(runs: Sequence[ServingRun]) -> str:
    """Tool, version, date and file of each run, once each."""
    parts = []
    for r in runs:
        version = f" {r.tool_version}" if r.tool_version else " (version not recorded)"
        date = f", run {r.date}" if r.date else ""
        part = f"{r.tool}{version}: {Path(r.file).name}{date}"
        parts.extend([] if part in parts else [part])
    return "; ".join(parts)


@dataclass(frozen=True)
class RunSettings:
    """What a run used where its file does not record it (the command's flags; None: not given)."""

    gpu: str | None = None
    engine: str | None = None
    model: str | None = None
    tp: int | None = None
    pp: int | None = None
    quant: str = "bf16"
    gpus: int | None = None  # training: GPUs in the job
    sequence_length: int | None = None  # training
    global_batch: int | None = None  # training: sequences per step, where the log does not say


def resolve_model(name: str | None, catalog: Catalog, where: str) -> ModelArchitecture:
    """A catalog model from the name a run records (a Hugging Face id: its last part, less -Instruct/-Chat)."""
    if name is None:
        raise CalibrationError(f"{where}: the run does not record its model", fix="give --model")
    tail = name.rstrip("/").split("/")[-1]
    for candidate in (
        name,
        tail,
        *(tail[: -len(s)] for s in ("-Instruct", "-instruct", "-Chat", "-chat") if tail.endswith(s)),
    ):
        try:
            return catalog.model(candidate)
        except UnknownNameError:
            continue
    return catalog.model(tail)  # UnknownNameError (exit 2) with did-you-mean


def resolve_gpu(name: str | None, catalog: Catalog, where: str) -> GpuSpec:
    """The catalog GPU a run records (nvidia-smi names are aliases), else exit 2 asking for --gpu."""
    if name is None:
        raise CalibrationError(f"{where}: the run does not record its GPU", fix="give --gpu (a catalog GPU id)")
    return catalog.gpu(name)


def serving_points(runs: Sequence[ServingRun], settings: RunSettings, catalog: Catalog) -> list[BenchPoint]:
    """Each run with its model, GPU, engine and TP (the file's where it records them, else the flags'); all runs
    must share one engine and one GPU, the pair the fit is for."""
    points = []
    for r in runs:
        run = with_flags(r, gpu=settings.gpu, engine=settings.engine, model=settings.model, tp=settings.tp)
        where = r.file if r.line is None else f"{r.file}:{r.line}"
        arch = resolve_model(run.model, catalog, where)
        gpu = resolve_gpu(run.gpu, catalog, where)
        points.append(bench_point(run, catalog, arch, gpu, settings.quant))
    pairs = {(catalog.engine(p.run.engine or "vllm").id, p.gpu.id) for p in points}
    if len(pairs) > 1:
        raise CalibrationError(
            "the runs mix engines or GPUs: " + ", ".join(f"{e} on {g}" for e, g in sorted(pairs)),
            fix="calibrate one engine on one GPU at a time",
        )
    return points


@dataclass(frozen=True)
class FlagIgnored:
    """A flag a run's file overrides: the file records ``field`` as ``recorded``; the flag said ``given``."""

    file: str
    field: str
    recorded: str
    given: str


def flags_ignored(runs: Sequence[ServingRun], settings: RunSettings, catalog: Catalog) -> list[FlagIgnored]:
    """Every flag that names another GPU, engine, model or TP than a run's file records (the file wins)."""

    def same(name: str, a: object, b: object) -> bool:
        ids = {
            "gpu": lambda x: catalog.gpu(x).id,
            "engine": lambda x: catalog.engine(x).id,
            "model": lambda x: resolve_model(x, catalog, "").name,
        }
        try:
            key = ids.get(name, str)
            return bool(key(str(a)) == key(str(b)))
        except ClusterplanError:
            return str(a) == str(b)

    out = []
    for r in runs:
        for name in ("gpu", "engine", "model", "tp"):
            recorded, given = getattr(r, name), getattr(settings, name)
            if recorded is not None and given is not None and not same(name, recorded, given):
                out.append(FlagIgnored(Path(r.file).name, name, str(recorded), str(given)))
    return out


def training_point(run: TrainingRun, settings: RunSettings, catalog: Catalog) -> TrainingPoint:
    """The log with the layout it ran (flags: the log records neither model, GPU nor layout)."""
    arch = resolve_model(settings.model, catalog, run.file)
    gpu = resolve_gpu(settings.gpu, catalog, run.file)
    batch = run.global_batch_sequences or settings.global_batch
    missing = [
        f
        for f, v in (("--gpus", settings.gpus), ("--seq-len", settings.sequence_length), ("--global-batch", batch))
        if v is None
    ]
    if missing:
        raise CalibrationError(
            f"{run.file}: the log does not record {', '.join(missing)}", fix="give " + " and ".join(missing)
        )
    assert settings.gpus is not None and settings.sequence_length is not None and batch is not None
    layout = Layout(tp=settings.tp or 1, pp=settings.pp or 1, quant=settings.quant)
    return TrainingPoint(run, arch, gpu, settings.gpus, layout, settings.sequence_length, batch)


@dataclass(frozen=True)
class DesignOne:
    """A plan's design 1 in brief: its summary and total cost (None: no design, ``status`` says why)."""

    status: str
    summary: str | None
    total_usd: float | None


def design_one(requirement: Path, catalog: Catalog) -> DesignOne:
    """Plan ``requirement`` against ``catalog`` as ``solve`` does and keep design 1."""
    from clusterplan.pipeline import plan_requirement
    from clusterplan.stdin import load_requirement_arg

    plan = plan_requirement(load_requirement_arg(requirement, catalog), catalog)
    if not plan.designs:
        return DesignOne(str(plan.status), None, None)
    first = plan.designs[0]
    return DesignOne(str(plan.status), first.summary, first.costs.total_usd)
