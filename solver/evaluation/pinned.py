"""A requirement's pinned layouts checked before any planning: each layout field a training or fine-tuning workload
pins that no layout of its model can honour, and MTP speculative decoding on a model without MTP modules, refused
located in the requirement file (exit 2, like every input error).

Every command that reads a requirement runs these checks (:func:`clusterplan.stdin.load_requirement_arg`, each
what-if point); they need a little of the training physics and none of a design's evaluation, so they live beside
:mod:`clusterplan.evaluation.evaluate` rather than in it: ``validate`` does not import the serving physics
evaluate.py runs (~30 ms of its start).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from clusterplan.errors import FieldProblem, InputError, Location
from clusterplan.inputs.yamlio import PathKey, format_path
from clusterplan.wording.reasons import render_reasons

if TYPE_CHECKING:
    from clusterplan.catalog.schema import ModelArchitecture
    from clusterplan.requirement.load import ResolvedRequirement
    from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload


def check_pinned_layouts(resolved: ResolvedRequirement) -> None:
    """Refuse, located in the requirement file, each layout field a training or fine-tuning workload pins that no
    layout of its model can honour (:func:`pinned_layout_problems`), and MTP speculative decoding on a model that
    ships no MTP modules; exit code 2 like every input error."""
    problems: list[FieldProblem] = []
    doc = resolved.document
    for i, w in enumerate(resolved.requirement.workloads):
        found: list[tuple[PathKey, str]] = []
        if w.kind != "serving":
            found = [(("workloads", i, f), m) for f, m in pinned_layout_problems(w, resolved.model_for(i))]
        elif w.speculative is not None and w.speculative.method == "mtp" and resolved.model_for(i).mtp_layers == 0:
            message = (
                f"model {resolved.model_for(i).name} ships no multi-token-prediction modules (mtp_layers 0); "
                "use method eagle or draft, or a model whose config has MTP layers"
            )
            found = [(("workloads", i, "speculative", "method"), message)]
        for path, message in found:
            where = doc.locate(path) if doc is not None else Location(resolved.path)
            problems.append(FieldProblem(where, format_path(path), message, "layout"))
    if problems:
        raise InputError(problems)


# Pipeline-parallel degrees a training layout search tries (powers of two up to 16 stages).
TRAINING_PP = (1, 2, 4, 8, 16)


def pinned_layout_problems(w: TrainingWorkload | FinetuneWorkload, arch: ModelArchitecture) -> list[tuple[str, str]]:
    """(field, message) for each layout field a training workload pins that no layout of this model can honour."""
    from clusterplan.physics import training
    from clusterplan.physics.memory import layers_per_stage

    out: list[tuple[str, str]] = []
    cp = w.context_parallel
    if cp is not None and cp > 1 and w.sequence_length % (2 * cp):
        out.append(
            (
                "context_parallel",
                f"context parallel {cp} splits each sequence into {2 * cp} chunks; sequence_length "
                f"{w.sequence_length:,.0f} is not a multiple of {2 * cp}",
            )
        )
    v = w.virtual_stages
    if v is not None and v > 1:
        stages = [p for p in TRAINING_PP if 1 < p <= arch.layers and layers_per_stage(arch.layers, p) % v == 0]
        if not stages:
            out.append(
                (
                    "virtual_stages",
                    f"{v} virtual stages divide no pipeline stage's layers of {arch.name} ({arch.layers} layers over "
                    f"{', '.join(str(p) for p in TRAINING_PP if p > 1)} stages)",
                )
            )
    for ep in pinned_eps(w.expert_parallel):
        reason = training.expert_parallel_reason(arch, ep, ep)  # the count decides DP later; the model decides now
        if reason is not None:
            (words,) = render_reasons([reason])
            fix = "; leave expert_parallel out or set it to 1" if reason.problem == "ep_without_experts" else ""
            out.append(("expert_parallel", f"{arch.name}: {words}{fix}"))
    n = w.recompute_layers
    if n is not None:
        if w.activation_recompute in ("none", "selective"):
            out.append(
                ("recompute_layers", f"recompute_layers counts fully recomputed layers; activation_recompute is "
                 f"{w.activation_recompute}: set it to full or leave it out")
            )  # fmt: skip
        elif n > arch.layers:
            out.append(("recompute_layers", f"{n} layers recomputed; {arch.name} has {arch.layers}"))
    return out


def pinned_eps(pinned: int | Sequence[int] | str | None) -> tuple[int, ...]:
    """The EP degrees a workload pins (none for ``auto`` / None)."""
    if pinned is None or isinstance(pinned, str):
        return ()
    return (pinned,) if isinstance(pinned, int) else tuple(pinned)
