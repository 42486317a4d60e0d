"""A design-review attachment as data: everything the Markdown and HTML writers print, computed here.

:func:`assemble` plans the requirement (with the full explanation), then adds what a review needs
around the plan: a one-paragraph summary, the per-GPU memory breakdown of each replica group and
training layout (:func:`clusterplan.design.estimate.estimate_requirement` on the design's own layout: the
same evaluation and pricing, :mod:`clusterplan.design`, the candidates and the plan came from), what relaxing each binding constraint would save, a small
what-if sweep (:mod:`clusterplan.whatif.sweep`), rent against buy for the recommended layout
(:func:`clusterplan.physics.cost.rent_vs_buy_breakeven`), every efficiency factor with where it came
from, the catalog rows used with their sources and dates, and what is needed to reproduce it
(clusterplan version, catalog fingerprint, sha256 of the requirement and of each user catalog).

Nothing here is time-dependent: the same inputs give the same report, byte for byte.
Strings from the requirement or a user catalog are kept as given; the writers escape them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterplan import __version__
from clusterplan.errors import ClusterplanError
from clusterplan.planner.solve import SolverSettings
from clusterplan.review.records import Reproduce, ReviewReport, UserCatalog, WhatIf
from clusterplan.review.sections import (
    binding_rows,
    design_estimates,
    factor_rows,
    memory_bars,
    rent_buy_rows,
    source_rows,
)
from clusterplan.review.summary import summary_text
from clusterplan.review.whatif_axis import choose_axis, early_axis
from clusterplan.whatif.points import Base, PointCache, PointOutcome, PointTask, run_tasks, start_tasks
from clusterplan.whatif.sweep import Axis, SweepResult, sweep_tasks
from clusterplan.whatif.sweep import assemble as assemble_sweep


def _plain(x: float) -> str:
    return f"{x:.6g}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class WhatIfRun:
    """The review's what-if sweep: its axis (``auto`` picks one, ``none`` leaves it out), the worker
    processes it runs on, and what to call as each point is done (a progress bar)."""

    axis: WhatIf = "auto"
    jobs: int = 1
    on_done: Callable[[int], None] | None = None
    meanwhile: Callable[[], None] | None = None  # called at most once, while points are planned in a pool


class _Once:
    """A callable run at its first call only (nothing when None)."""

    def __init__(self, fn: Callable[[], None] | None) -> None:
        self.fn = fn

    def __call__(self) -> None:
        fn, self.fn = self.fn, None
        if fn is not None:
            fn()


def _early_sweep(base: Base, run: WhatIfRun, solver: SolverSettings) -> tuple[tuple[Axis, str], list[PointTask]] | None:
    """The axis a plan with a design gets and its sweep's tasks, where they can be made before the plan (None:
    the sweep waits for the plan, which then raises whatever made them fail, in its turn)."""
    try:
        axis = early_axis(base, run.axis)
        if axis is None:
            return None
        return axis, sweep_tasks(base, [axis[0]], objective=axis[1], solver=solver)
    except ClusterplanError:
        return None


def _sweep_outcomes(
    base: Base, axis: tuple[Axis, str], solver: SolverSettings, run: WhatIfRun, meanwhile: Callable[[], None]
) -> list[PointOutcome]:
    """The sweep's outcomes planned now: in a pool of ``run.jobs`` processes (``meanwhile`` called as they run),
    or here, one by one."""
    tasks = sweep_tasks(base, [axis[0]], objective=axis[1], solver=solver)
    if run.jobs <= 1:
        return run_tasks(tasks, on_done=run.on_done)
    with start_tasks(tasks, jobs=run.jobs, on_done=run.on_done) as started:
        meanwhile()
        return started.outcomes()


def assemble(
    path: Path,
    catalog_paths: Sequence[Path] = (),
    *,
    top: int = 5,
    objective: str = "min_cost",
    settings: SolverSettings | None = None,
    whatif: WhatIfRun | None = None,
    text: str | None = None,
) -> ReviewReport:
    """Plan ``path`` and gather everything the review shows. Raises ClusterplanError on bad input only:
    an infeasible requirement gives a report that explains the conflict. ``path`` ``-`` is standard
    input; ``text`` is the requirement when the caller has read it already; ``whatif``: the sweep
    (default: the axis picked for the requirement, on one process)."""
    from clusterplan.pipeline import PlanOptions, plan_requirement
    from clusterplan.stdin import is_stdin, read_stdin
    from clusterplan.whatif.sweep import load_base

    solver = settings or SolverSettings()
    if text is None and is_stdin(path):
        text = read_stdin()
    requirement_bytes = text.encode("utf-8") if text is not None else path.read_bytes()
    base, resolved = load_base(path, catalog_paths, text=text)
    catalog = base.catalog
    run = whatif or WhatIfRun()
    meanwhile = _Once(run.meanwhile)
    # With more than one process, the what-if sweep starts before the plan, on the processes beside this one, along
    # the axis a plan with a design gets; it is kept where the plan's axis is that one, else stopped unread.
    early = _early_sweep(base, run, solver) if run.jobs > 1 else None
    with start_tasks(early[1] if early else [], jobs=run.jobs - 1, on_done=run.on_done) as started:
        options = PlanOptions(top=top, objective=objective, explain=True, settings=solver)
        cache = PointCache()  # the plan's rows and physics, which the price re-solves start from
        plan = plan_requirement(resolved, catalog, options, cache=cache.candidates)
        axis = choose_axis(base, plan, run.axis)
        kept = started.outcomes() if early is not None and axis is not None and early[0] == axis else None
    design = plan.designs[0] if plan.designs else None
    warnings: list[str] = []
    estimates: list[tuple[str, Any, str]] = []
    if design is not None:
        try:
            estimates = design_estimates(resolved, catalog, design)
        except ClusterplanError as exc:
            warnings.append(f"memory breakdown and rent-versus-buy left out: {exc.message}")
    binding = binding_rows(design) if design is not None else []
    sweep: SweepResult | None = None
    whatif_note = ""
    if axis is not None:
        ax, sweep_objective = axis
        outcomes = kept if kept is not None else _sweep_outcomes(base, axis, solver, run, meanwhile)
        sweep = assemble_sweep(base, [ax], outcomes, objective=sweep_objective)
        spec = f"{_plain(ax.values[0])}..{_plain(ax.values[-1])}"
        whatif_note = (
            f"{ax.target.field}"
            + (f" ({ax.target.path})" if ax.target.path != ax.target.field else "")
            + f" at {len(ax.values)} values around the requirement's, "
            f"objective {sweep_objective}; for more points: clusterplan sweep {path} --vary "
            f"'{ax.target.field}={spec}' --steps 10"
            + (f" --objective {sweep_objective}" if sweep_objective != "min_cost" else "")
        )
    risk = None
    if design is not None:
        from clusterplan.review.risk import risk_section

        try:
            risk = risk_section(plan, catalog, base, solver, jobs=run.jobs, meanwhile=meanwhile, cache=cache)
        except ClusterplanError as exc:
            warnings.append(f"risk section left out: {exc.message}")
    self_host = None
    if design is not None:
        from clusterplan.design.selfhost import for_design

        self_host = for_design(catalog, resolved.requirement, design)
    horizon = resolved.requirement.budget.horizon
    classes = sorted({catalog.gpu(g).gpu_class for g in design.gpus_by_type}) if design is not None else []
    catalogs = [UserCatalog(path=str(p), sha256=_sha256(p)) for p in catalog_paths]
    command = f"clusterplan report {path}" + "".join(f" --catalog {p}" for p in catalog_paths) + " -o REVIEW.md"
    return ReviewReport(
        title=resolved.requirement.name,
        status=plan.status,
        summary=summary_text(plan, binding),
        requirement_text=text if text is not None else path.read_text(encoding="utf-8"),
        plan=plan,
        memory=memory_bars(estimates),
        binding=binding,
        whatif=sweep,
        whatif_note=whatif_note,
        rent_buy=rent_buy_rows(estimates, design, horizon) if design is not None else [],
        rent_buy_note=(
            "each workload's layout priced alone, both ways, as the planner prices it: rented on the cheapest "
            "instance type that holds its tensor-parallel groups, bought as the server size that costs least over "
            "the horizon (the largest at equal cost), electricity at full power x PUE, colocation and support; "
            "serving runs around the "
            "clock over the horizon, training for its billed hours"
        ),
        factors=factor_rows(resolved, classes or ["datacenter", "workstation", "consumer"]),
        planner_notes=list(plan.explanation.notes) if plan.explanation is not None else [],
        sources=source_rows(catalog, resolved, design),
        reproduce=Reproduce(
            clusterplan_version=__version__,
            catalog_fingerprint=catalog.fingerprint(),
            requirement_file=str(base.path),
            requirement_sha256=hashlib.sha256(requirement_bytes).hexdigest(),
            user_catalogs=catalogs,
            command=command,
            objective=objective,
            random_seed=solver.random_seed,
            num_workers=solver.num_workers,
        ),
        warnings=warnings,
        risk=risk,
        self_host_vs_api=self_host,
    )
