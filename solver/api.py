"""clusterplan from Python: what the CLI does, as a few functions a platform team can call from its own tooling.

Each function is a thin layer over the services the commands use (nothing here computes): a requirement is
read and resolved against a catalog (:func:`load`), planned (:func:`plan`, what ``clusterplan solve`` runs),
a design or a pinned configuration estimated (:func:`estimate`, what ``clusterplan estimate`` runs, a design
read from a plan included) and exported as launch and benchmark files (:func:`export`). Errors are
:class:`clusterplan.errors.ClusterplanError` (its ``exit_code`` says which kind: 2 bad input, 1 no answer)::

    from clusterplan import api

    req = api.load("examples/requirements/70b-serving.yaml")
    plan = api.plan(req, top=3)
    print(plan.designs[0].summary, plan.designs[0].costs.total_usd)
    figures = api.estimate(req, design=plan)  # design 1, every replica group and pool, as solve priced it
    files = api.export(req, plan)  # file name -> text, as `clusterplan export` writes them
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterplan.catalog.load import Catalog, load_catalog
from clusterplan.design.estimate import EstimateResult, estimate_requirement
from clusterplan.design.estimate_design import DesignEstimate, design_pins, estimate_design, pick_design, read_design
from clusterplan.plan import Design, Plan
from clusterplan.requirement.load import ResolvedRequirement, load_requirement, load_requirement_text
from clusterplan.requirement.schema import PinnedConfig

__all__ = ["DesignEstimate", "EstimateResult", "Loaded", "Plan", "estimate", "export", "load", "plan"]


@dataclass(frozen=True)
class Loaded:
    """A requirement read, validated and resolved against ``catalog`` (the one every later call uses)."""

    requirement: ResolvedRequirement
    catalog: Catalog


def load(path: str | Path | None = None, *, text: str | None = None, catalogs: Sequence[str | Path] = ()) -> Loaded:
    """Read a requirement file (or YAML ``text``) against the shipped catalog with ``catalogs`` applied in order
    (user catalog files, as ``--catalog``). Raises a located error for a file that does not validate."""
    catalog = load_catalog([Path(c) for c in catalogs])
    if text is not None:
        return Loaded(load_requirement_text(text, str(path or "<text>"), catalog), catalog)
    if path is None:
        raise TypeError("load() needs a path or text")
    return Loaded(load_requirement(Path(path), catalog), catalog)


def plan(req: Loaded, *, top: int = 5, explain: bool = True) -> Plan:
    """Plan the requirement as ``clusterplan solve`` does: up to ``top`` designs, cheapest first (the objective
    the requirement states), with their explanation unless ``explain`` is False. ``plan.model_dump_json()`` is
    ``solve --json``'s output."""
    from clusterplan.pipeline import PlanOptions, plan_requirement

    return plan_requirement(req.requirement, req.catalog, PlanOptions(top=top, explain=explain))


def estimate(
    req: Loaded,
    config: PinnedConfig | dict[str, Any] | None = None,
    *,
    design: Plan | Design | str | Path | None = None,
    index: int = 1,
    workload: int | str | None = None,
) -> EstimateResult | DesignEstimate:
    """Estimate one configuration (``config``: the knobs of ``clusterplan estimate``'s flags, e.g.
    ``{"gpu": "h100-sxm", "tp": 8, "quant": "fp8"}``; None: the requirement's ``config:`` block), or a whole
    design (``design``: a plan, one of its designs, or a plan file written by ``solve --json``; ``index``: which
    design, 1 the best; ``workload``: which of its workloads, default its first). A design returns a
    :class:`DesignEstimate` (every replica group and pool, the whole priced as ``solve`` priced it)."""
    resolved = req.requirement
    models = list(resolved.models)
    if design is None:
        pinned = PinnedConfig.model_validate(config) if isinstance(config, dict) else config
        return estimate_requirement(resolved.requirement, models, req.catalog, pinned)
    if isinstance(design, (str, Path)):
        chosen, source = read_design(Path(design), index), f"{design} design {index}"
    elif isinstance(design, Plan):
        chosen, source = _design_of(design, index), f"plan design {index}"
    else:
        chosen, source = design, f"design {design.rank}"
    pins = design_pins(chosen, resolved.requirement, workload)
    return estimate_design(resolved.requirement, models, req.catalog, pins, source)


def _design_of(p: Plan, index: int) -> Design:
    """Design ``index`` of a plan in memory, refused as a plan file's would be."""
    from clusterplan.errors import Location

    return pick_design(p, index, Location("plan"))


def export(req: Loaded, p: Plan, *, design: int = 1, engine: str | None = None) -> dict[str, str]:
    """The files ``clusterplan export`` writes for design ``design`` of ``p`` (file name -> text): launch
    commands per replica group or pool, benchmark commands and the figures they should report; ``engine``
    re-evaluates under another serving engine."""
    from clusterplan.design.export import export_design
    from clusterplan.render.export_view import export_files

    return export_files(export_design(req.requirement, req.catalog, p, design=design, engine=engine))
