"""Load a requirement file: parse safely, validate the shape, then resolve names against the catalog.

The first stage of the pipeline. Every problem is reported with the file, line and column and the
field path; names that are not in the catalog get did-you-mean suggestions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterplan.catalog.schema import ModelArchitecture
from clusterplan.errors import (
    MAX_SUGGESTIONS,
    ClusterplanError,
    FieldProblem,
    InputError,
    UnknownNameError,
    did_you_mean,
    quoted,
)
from clusterplan.inputs.located import validate_document
from clusterplan.inputs.yamlio import (
    LocatedDocument,
    PathKey,
    format_path,
    load_yaml_file,
    parse_yaml_text,
)
from clusterplan.requirement.schema import (
    DEFAULT_PROVIDER_TIERS,
    HOURS_PER_PERIOD,
    QUALITY_CLASSES,
    FinetuneWorkload,
    HfConfigModel,
    InlineModel,
    Requirement,
    TrainingWorkload,
    quality_class_of,
)

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import FrameworkSpec

# The ranges clusterplan plans within (docs/guarantees.md). Outside them the solver's integer
# scaling cannot represent the figures exactly, so a value beyond one is refused, located, rather
# than planned wrongly: peak demand beyond 10**7 requests/min rounded every replica's rate to zero
# ("infeasible"), a budget of $10**17 or a demand of 10**-6 requests/min overflowed CP-SAT.
MIN_PEAK_REQUESTS_PER_MIN = 0.01  # about 14 requests a day; below it one replica of anything is enough
MAX_PEAK_REQUESTS_PER_MIN = 1e7  # about 6x the busiest public chat service's average
MAX_USD = 1e12
MAX_TRAINING_TOKENS = 1e15
MIN_DEADLINE_S = 60.0
MAX_POWER_W = 1e10


@dataclass(frozen=True)
class ResolvedRequirement:
    """A validated requirement with every model resolved to an architecture."""

    requirement: Requirement
    path: str
    document: LocatedDocument | None
    models: tuple[ModelArchitecture, ...] = field(default_factory=tuple)
    # What was derived from each hf_config model: parameters and KV bytes per token (the plan's assumptions).
    model_notes: tuple[str, ...] = ()

    def model_for(self, index: int) -> ModelArchitecture:
        """The architecture of workload ``index``."""
        return self.models[index]


def load_requirement(path: Path, catalog: Catalog) -> ResolvedRequirement:
    """Read, validate and resolve a requirement file."""
    doc = load_yaml_file(path)
    return _resolve(doc, catalog, base_dir=path.parent)


def load_requirement_text(
    text: str, name: str, catalog: Catalog, *, base_dir: Path | None = None
) -> ResolvedRequirement:
    """Like :func:`load_requirement` for text already in memory (tests, sweeps)."""
    return _resolve(parse_yaml_text(text, name), catalog, base_dir=base_dir or Path.cwd())


def _profiles_from_traces(doc: LocatedDocument, base_dir: Path) -> LocatedDocument:
    """Each serving workload's ``profile: {trace: FILE}`` read into its hourly rates (inputs/trace.hourly_profile),
    the file relative to the requirement; a broken trace is refused with its own file:line."""
    workloads = doc.data.get("workloads") if isinstance(doc.data, dict) else None
    if not isinstance(workloads, list):
        return doc
    changed = []
    for w in workloads:
        p = w.get("profile") if isinstance(w, dict) else None
        if not (isinstance(p, dict) and isinstance(p.get("trace"), str) and "requests_per_s_by_hour" not in p):
            changed.append(w)
            continue
        hours = HOURS_PER_PERIOD.get(str(p.get("kind")))
        if hours is None:
            changed.append(w)  # the kind's own (located) error is reported by validation
            continue
        from clusterplan.inputs.trace import hourly_profile, read_trace  # only a requirement with a trace reads one

        path = base_dir / p["trace"]
        rates = hourly_profile(read_trace(path), hours, str(path))
        rest = {k: v for k, v in p.items() if k != "trace"}
        changed.append({**w, "profile": {**rest, "requests_per_s_by_hour": rates}})
    return replace(doc, data={**doc.data, "workloads": changed})


def _resolve(doc: LocatedDocument, catalog: Catalog, *, base_dir: Path) -> ResolvedRequirement:
    if not isinstance(doc.data, dict):
        raise InputError(
            [
                FieldProblem(
                    doc.locate(()),
                    "",
                    f"expected a YAML mapping of requirement fields, got {type(doc.data).__name__}",
                )
            ]
        )
    req = validate_document(_profiles_from_traces(doc, base_dir), Requirement)
    problems: list[FieldProblem] = []

    def problem(path: PathKey, message: str, kind: str = "") -> None:
        problems.append(FieldProblem(doc.locate(path), format_path(path), message, kind))

    models: list[ModelArchitecture] = []
    model_notes: list[str] = []
    for i, w in enumerate(req.workloads):
        ref, path = (w.model, ("workloads", i, "model")) if w.model is not None else (req.model, ("model",))
        try:
            if isinstance(ref, HfConfigModel):
                from clusterplan.requirement.hf_config import derived_line, load_hf_config  # only for a config file

                read = load_hf_config(base_dir / ref.hf_config, name=ref.name)
                models.append(read.arch)
                line = derived_line(read)
                model_notes.extend([] if line in model_notes else [line])
            else:
                models.append(resolve_model(ref, catalog, base_dir))
        except ClusterplanError as exc:
            problem(path, exc.render(), "unknown_model" if isinstance(exc, UnknownNameError) else "model")

    c = req.constraints
    for key, names in (("allowed_gpus", c.allowed_gpus or []), ("excluded_gpus", c.excluded_gpus)):
        for j, gpu_name in enumerate(names):
            _check_gpu(catalog, gpu_name, ("constraints", key, j), problem, suggest=len(problems) < MAX_SUGGESTIONS)
    for j, item in enumerate(c.inventory):
        inventory_path: PathKey = ("constraints", "inventory", j, "gpu")
        _check_gpu(catalog, item.gpu, inventory_path, problem, suggest=len(problems) < MAX_SUGGESTIONS)
    if req.config is not None and req.config.gpu is not None:
        _check_gpu(catalog, req.config.gpu, ("config", "gpu"), problem, suggest=True)
    if c.clouds:
        known = sorted({inst.provider for inst in catalog.instances.values()})
        for j, cloud in enumerate(c.clouds):
            if cloud.lower() not in known:
                hint = did_you_mean(cloud, known) if len(problems) < MAX_SUGGESTIONS else None
                problem(
                    ("constraints", "clouds", j),
                    f"unknown cloud {quoted(cloud)}" + (f"; {hint}" if hint else f"; known: {', '.join(known)}"),
                    "unknown_cloud",
                )
    tiers = c.provider_tiers or DEFAULT_PROVIDER_TIERS
    for j, cloud in enumerate(c.clouds or []):
        provider = catalog.providers.get(cloud.lower())
        if provider is not None and provider.tier not in tiers:
            problem(
                ("constraints", "clouds", j),
                f"{cloud} is a {provider.tier} provider, which constraints.provider_tiers does not allow "
                f"({', '.join(tiers)}); add {provider.tier} to constraints.provider_tiers to plan its offers",
                "provider_tier",
            )
    gate = QUALITY_CLASSES[req.max_loss]
    for j, q in enumerate(c.quantizations or []):
        if ("bf16" if q == "fp16" else q) not in gate:
            problem(
                ("constraints", "quantizations", j),
                f"{q} is beyond the quality gate (quality.max_loss: {req.max_loss}"
                + (")" if req.quality is not None else ", the default)")
                + f"; set quality: {{max_loss: {quality_class_of(q)}}} to accept it, or drop it from the list",
                "quality_gate",
            )
    if c.allowed_gpus is not None and c.excluded_gpus and not problems:
        allowed = {catalog.gpu(n).id for n in c.allowed_gpus}
        if allowed <= {catalog.gpu(n).id for n in c.excluded_gpus}:
            problem(("constraints", "excluded_gpus"), "excludes every allowed GPU")
    if (
        req.config is not None
        and isinstance(req.config.workload, int)
        and not (0 <= req.config.workload < len(req.workloads))
    ):
        problem(("config", "workload"), f"no workload {req.config.workload}; there are {len(req.workloads)}")
    if (
        req.config is not None
        and isinstance(req.config.workload, str)
        and req.config.workload not in {w.name for w in req.workloads}
    ):
        problem(("config", "workload"), f"no workload named {quoted(req.config.workload)}")
    for i, w in enumerate(req.workloads):
        if w.kind != "serving":
            _check_framework(catalog, w, ("workloads", i, "framework"), problem)
    for i, (w, arch) in enumerate(zip(req.workloads, models, strict=False)):
        ctx = getattr(w, "context_tokens", None) or getattr(w, "sequence_length", None)
        if arch.max_context is not None and ctx is not None and ctx > arch.max_context:
            problem(
                ("workloads", i),
                f"needs {ctx:,.0f} tokens of context; {arch.name} supports {arch.max_context:,}",
            )
    _check_ranges(req, problem)
    if problems:
        raise InputError(problems)
    return ResolvedRequirement(
        requirement=_under_catalog_engines(req, catalog),
        path=doc.file,
        document=doc,
        models=tuple(models),
        model_notes=tuple(model_notes),
    )


def _under_catalog_engines(req: Requirement, catalog: Catalog) -> Requirement:
    """``req`` with its assumptions bound to the catalog's engine rows (a ``--catalog`` override of an engine is
    the row the physics runs; factors the requirement set keep their values)."""
    bound = req.assumptions.with_catalog_engines(catalog.engines)
    out = req.model_copy(update={"assumptions": bound})
    if "assumptions" not in req.model_fields_set:
        out.__pydantic_fields_set__.discard("assumptions")
    return out


def _check_ranges(req: Requirement, problem: Any) -> None:
    """Refuse figures outside the ranges the planner represents exactly (see the constants above)."""
    for key in ("capital", "monthly", "total"):
        value = getattr(req.budget, key)
        if value is not None and value > MAX_USD:
            problem(("budget", key), f"${value:,.4g} is beyond the ${MAX_USD:,.0f} clusterplan plans within")
    c = req.constraints
    if c.max_power is not None and c.max_power > MAX_POWER_W:
        problem(("constraints", "max_power"), f"{c.max_power:,.4g} W is beyond the {MAX_POWER_W:,.0f} W limit")
    for i, w in enumerate(req.workloads):
        if w.kind == "serving":
            field = "requests_per_min" if w.requests_per_min is not None else "tokens_per_sec"
            peak = w.requests_per_s * w.peak_to_average * 60.0
            if peak < MIN_PEAK_REQUESTS_PER_MIN:
                problem(
                    ("workloads", i, field),
                    f"peak demand is {peak:.3g} requests/min; clusterplan plans for at least "
                    f"{MIN_PEAK_REQUESTS_PER_MIN:g} (about 14 a day): ask for {MIN_PEAK_REQUESTS_PER_MIN:g}, "
                    "one replica is enough either way",
                )
            elif peak > MAX_PEAK_REQUESTS_PER_MIN:
                problem(
                    ("workloads", i, field),
                    f"peak demand is {peak:,.4g} requests/min; clusterplan plans for at most "
                    f"{MAX_PEAK_REQUESTS_PER_MIN:,.0f}: check the unit, or split the demand into regions",
                )
        else:
            if w.tokens > MAX_TRAINING_TOKENS:
                problem(
                    ("workloads", i, "tokens"),
                    f"{w.tokens:,.4g} tokens is beyond the {MAX_TRAINING_TOKENS:,.0f} clusterplan plans for",
                )
            if w.deadline < MIN_DEADLINE_S:
                problem(("workloads", i, "deadline"), f"{w.deadline:g} s is shorter than the minimum of one minute")


# The framework a training or fine-tuning workload runs on when it names none (specs/requirement.md): Megatron-LM for
# pretraining and full fine-tunes (the published pretraining recipes' framework), torchtune for LoRA and QLoRA.
DEFAULT_FRAMEWORK = {"full": "megatron-lm", "lora": "torchtune", "qlora": "torchtune"}


def framework_name(w: TrainingWorkload | FinetuneWorkload) -> str:
    """The framework a workload names, else its method's default (:data:`DEFAULT_FRAMEWORK`)."""
    method = w.method if w.kind == "finetune" else "full"
    return w.framework or DEFAULT_FRAMEWORK[method]


def _check_framework(catalog: Catalog, w: TrainingWorkload | FinetuneWorkload, path: PathKey, problem: Any) -> None:
    """The workload's framework is in the catalog and runs its method, optimizer and precision."""
    name = framework_name(w)
    spec = catalog.find_framework(name)
    if spec is None:
        known = sorted(catalog.frameworks)
        hint = did_you_mean(name, known)
        problem(path, f"unknown framework {quoted(name)}" + (f"; {hint}" if hint else f"; known: {', '.join(known)}"))
        return
    method = w.method if w.kind == "finetune" else "full"
    others = [f.id for f in catalog.frameworks.values() if method in f.methods]
    where = path if w.framework is not None else path[:-1]
    if method not in spec.methods:
        what = "pretraining" if w.kind == "training" else f"{method} fine-tuning"
        problem(where, f"{spec.name} does not run {what}; frameworks that do: {', '.join(others)}", "framework")
    elif w.optimizer not in spec.optimizers:
        problem(
            where, f"{spec.name} has no {w.optimizer} optimizer (it runs {', '.join(spec.optimizers)}); choose one "
            "of those, or a framework that has it", "framework",
        )  # fmt: skip
    elif w.precision not in spec.precisions:
        problem(
            where, f"{spec.name} does not train in {w.precision} (it runs {', '.join(spec.precisions)})", "framework"
        )
    for pinned, message in _pinned_beyond(spec, w):
        problem((*path[:-1], pinned), f"{message}; {spec.name} runs no such layout: leave it out or name a framework "
                "that does", "framework")  # fmt: skip


def _pinned_beyond(spec: FrameworkSpec, w: TrainingWorkload | FinetuneWorkload) -> list[tuple[str, str]]:
    """(field, what it pins) for each layout field the workload pins that its framework has no form of."""
    out: list[tuple[str, str]] = []
    if w.context_parallel is not None and w.context_parallel > 1 and not spec.context_parallel:
        out.append(("context_parallel", f"context parallel {w.context_parallel}"))
    if w.virtual_stages is not None and w.virtual_stages > 1 and not spec.interleaved_pipeline:
        out.append(("virtual_stages", f"{w.virtual_stages} virtual stages"))
    eps = [w.expert_parallel] if isinstance(w.expert_parallel, int) else w.expert_parallel
    if isinstance(eps, list) and min(eps) > 1 and not spec.expert_parallel:
        out.append(("expert_parallel", f"expert parallel {min(eps)}"))
    if w.activation_recompute is not None and w.activation_recompute not in spec.recompute:
        out.append(("activation_recompute", f"{w.activation_recompute} recompute"))
    if w.recompute_layers is not None and not spec.recompute_layers:
        out.append(
            ("recompute_layers", f"recompute of {w.recompute_layers} layers a stage (it checkpoints every layer)")
        )
    return out


def _check_gpu(catalog: Catalog, name: str, path: PathKey, problem: Any, *, suggest: bool) -> None:
    """A problem if ``name`` is no catalog GPU, with a did-you-mean while ``suggest`` (capped per file:
    30,000 unknown names took 9 s to suggest for)."""
    if not suggest:
        if catalog.find_gpu(name) is None:
            problem(path, f"unknown GPU {quoted(name)}", "unknown_gpu")
        return
    try:
        catalog.gpu(name)
    except ClusterplanError as exc:
        problem(path, exc.message + (f"; {exc.hint}" if exc.hint else ""), "unknown_gpu")


def resolve_model(ref: Any, catalog: Catalog, base_dir: Path) -> ModelArchitecture:
    """A catalog name, an inline architecture or a local Hugging Face config, as an architecture."""
    if isinstance(ref, str):
        return catalog.model(ref)
    if isinstance(ref, InlineModel):
        return ModelArchitecture.model_validate(ref.model_dump())
    if isinstance(ref, HfConfigModel):
        from clusterplan.requirement.hf_config import read_hf_config

        return read_hf_config(base_dir / ref.hf_config, name=ref.name)
    raise ClusterplanError(f"unsupported model reference {ref!r}")  # pragma: no cover - schema prevents it
