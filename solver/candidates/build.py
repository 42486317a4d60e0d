"""The whole candidate table of a resolved requirement: offerings, serving and training rows, pruning."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from clusterplan.physics.reasons import (
    NotObtainable,
)

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.physics.factors import Assumptions
    from clusterplan.requirement.load import ResolvedRequirement
from clusterplan.candidates.offerings import build_offerings, gpu_type_of, limits_of, tier_exclusions
from clusterplan.candidates.serving import serving_candidates
from clusterplan.candidates.table import (
    SERVING_QUANTS,
    CandidateTable,
    PrecisionGate,
    WorkloadCandidates,
    excluded,
)
from clusterplan.candidates.training import training_candidates
from clusterplan.design.uncertainty import Derate, derate_for


def build_candidates(resolved: ResolvedRequirement, catalog: Catalog, *, keep_latency: bool = False) -> CandidateTable:
    """The candidate table of a requirement: every row costed and estimated before any solver runs."""
    req = resolved.requirement
    limits = limits_of(req, catalog)
    gpus = {gid: gpu_type_of(spec) for gid, spec in sorted(catalog.gpus.items())}
    offerings, notes = build_offerings(catalog, req, gpus, limits)
    derate = derate_for(req.confidence)  # targets held at this confidence (design/uncertainty.py); default none
    workloads: list[WorkloadCandidates] = []
    for i, w in enumerate(req.workloads):
        arch = resolved.model_for(i)
        if w.kind == "serving":
            mixed = w.allow_mixed if w.allow_mixed is not None else req.constraints.allow_mixed
            workloads.append(
                serving_candidates(
                    i, w, arch, catalog, gpus, limits, req.assumptions, mixed, keep_latency=keep_latency, derate=derate
                )
            )
        else:
            workloads.append(
                training_candidates(i, w, arch, catalog, gpus, offerings, limits, req.assumptions, derate=derate)
            )
    # GPUs with no way to obtain them cannot be placed: drop their rows, say why.
    placeable = {o.gpu_id for o in offerings}
    final: list[WorkloadCandidates] = []
    for wc in workloads:
        rows = [r for r in wc.rows if r.gpu_id in placeable]
        extra = tuple(
            excluded(gid, NotObtainable(gpu=gpus[gid].name)) for gid in sorted({r.gpu_id for r in wc.rows} - placeable)
        )
        final.append(replace(wc, rows=tuple(rows), exclusions=wc.exclusions + extra))  # type: ignore[arg-type]
    return CandidateTable(
        workloads=tuple(final),
        gpus=gpus,
        offerings=tuple(offerings),
        limits=limits,
        name=req.name,
        assumptions_used=tuple(assumption_lines(req.assumptions) + confidence_lines(derate)),
        notes=tuple(notes),
        offer_exclusions=tuple(tier_exclusions(catalog, req, gpus)),
        precision_gates=tuple(precision_gates(resolved, catalog)),
    )


def precision_gates(resolved: ResolvedRequirement, catalog: Catalog) -> list[PrecisionGate]:
    """Per serving workload: the precisions the quality gate allows and the catalog's published deltas."""
    req = resolved.requirement
    allowed = tuple(q for q in SERVING_QUANTS if q in req.allowed_precisions())
    out: list[PrecisionGate] = []
    for i, w in enumerate(req.workloads):
        if w.kind != "serving":
            continue
        model_id = str(getattr(resolved.model_for(i), "id", ""))
        evidence = tuple(q for p in SERVING_QUANTS[1:] for q in catalog.quality_for(model_id, p))
        out.append(
            PrecisionGate(
                workload=w.name,
                model=model_id,
                max_loss=req.max_loss,
                from_requirement=req.quality is not None,
                allowed=allowed,
                evidence=evidence,
            )
        )
    return out


def assumption_lines(assumptions: Assumptions) -> list[str]:
    """Every efficiency factor and default the physics used, one line each (listed in explanations)."""
    out: list[str] = []
    for name, f in type(assumptions).model_fields.items():
        value = getattr(assumptions, name)
        text = value.model_dump() if hasattr(value, "model_dump") else value
        default = f.get_default(call_default_factory=True)
        default_text = default.model_dump() if hasattr(default, "model_dump") else default
        tag = "" if text == default_text else " (overridden)"
        out.append(f"{name} = {text}{tag}")
    return out


def confidence_lines(derate: Derate) -> list[str]:
    """The derating a requirement's ``confidence`` applied, one line (none when it is unset)."""
    if not derate.active:
        return []
    return [
        f"confidence = {derate.confidence:g}: serving rates x{derate.rate_factor:.3f}, p95 latencies "
        f"x{derate.latency_factor:.3f}, time to train x{derate.time_factor:.3f} (the model's measured error, "
        "catalog/model_error.yaml)"
    ]
