"""Plan variants of one requirement: one task per point, run inline or in a process pool, in point order.

Pure data in and out; no printing. What sweeps and frontiers share:

1. **The base.** :func:`load_base` loads the requirement and the catalog once and keeps its document.
2. **Tasks.** :func:`point_task` makes a :class:`PointTask` from the base: the requirement document with
   values set, dumped back to YAML (so every point is validated and unit-parsed like a file), and, for
   catalog targets, a user-catalog override.
3. **Running.** :func:`run_task` loads and plans one point; :func:`run_tasks` runs them inline
   (``jobs=1``) or in a process pool, and always returns them in point order, so results do not depend
   on ``jobs`` (the planner has a fixed seed and one search worker).
   A point plans with :func:`plan_point`: ``plan_requirement`` with ``explain="binding"``, which works
   out which constraints bind (or conflict) but not the rest of the explanation (lost GPU types, mixes,
   least relaxations), which a row does not show. The tests check that its design equals
   ``plan_requirement(..., PlanOptions(top=1))``'s first design.
4. **Reading a design.** :func:`shape_of`, :func:`throughput_of` and :func:`p95_of`: what a row of a
   sweep or a point of a frontier shows of it.
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field

from clusterplan.errors import ClusterplanError, InputError
from clusterplan.pipeline import PlanOptions, plan_requirement
from clusterplan.plan import Design, FamilyRef, Out, ServingPlan, TrainingPlan
from clusterplan.planner.solve import SolverSettings
from clusterplan.whatif.vary import SweepError, Target, catalog_override, format_value, set_path

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.requirement.load import ResolvedRequirement

RowStatus = Literal["optimal", "feasible", "infeasible", "unknown", "invalid"]


# ------------------------------------------------------------------------------------------------
# 1. The base
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Base:
    """The requirement a sweep starts from."""

    path: Path
    data: dict[str, Any]  # the located document's data, never modified
    name: str
    catalog: Catalog
    catalog_paths: tuple[Path, ...] = ()


def load_base(
    path: Path, catalog_paths: Sequence[Path] = (), *, text: str | None = None
) -> tuple[Base, ResolvedRequirement]:
    """Load the catalog and the requirement once (exit 2 on bad input) and keep its document. ``path``
    ``-`` is standard input (``text`` when the caller has read it), named ``<stdin>`` from then on."""
    from clusterplan.catalog.load import load_catalog
    from clusterplan.stdin import display_path, load_requirement_arg

    catalog = load_catalog(list(catalog_paths))
    resolved = load_requirement_arg(path, catalog, text=text)
    assert resolved.document is not None
    base = Base(
        path=display_path(path),
        data=copy.deepcopy(resolved.document.data),
        name=resolved.requirement.name,
        catalog=catalog,
        catalog_paths=tuple(catalog_paths),
    )
    return base, resolved


# ------------------------------------------------------------------------------------------------
# 2. Tasks
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PointTask:
    """Everything a worker needs to plan one point (picklable)."""

    index: int
    values: tuple[float, ...]
    text: str  # the requirement YAML with the values set
    name: str  # what located errors call it
    base_dir: str
    catalog_paths: tuple[str, ...]
    catalog_override: str | None  # a user-catalog document applied last, or None
    objective: str
    settings: SolverSettings = field(default_factory=SolverSettings)


def point_task(
    base: Base,
    index: int,
    settings: Sequence[tuple[Target, float]],
    *,
    objective: str,
    solver: SolverSettings,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> PointTask:
    """The task of one point: the document with each requirement target set, catalog targets overridden."""
    data = copy.deepcopy(base.data)
    if edit is not None:
        edit(data)
    for target, value in settings:
        if target.where == "requirement":
            set_path(data, target.keys, int(value) if target.quantity == "integer" else value)
    label = ", ".join(f"{t.field}={format_value(v, t.quantity)}" for t, v in settings)
    return PointTask(
        index=index,
        values=tuple(v for _, v in settings),
        text=yaml.safe_dump(data, sort_keys=False, allow_unicode=True),
        name=f"{base.path} [{label}]" if label else str(base.path),
        base_dir=str(base.path.parent),
        catalog_paths=tuple(str(p) for p in base.catalog_paths),
        catalog_override=catalog_override(base.catalog, settings),
        objective=objective,
        settings=solver,
    )


# ------------------------------------------------------------------------------------------------
# 3. Running
# ------------------------------------------------------------------------------------------------


class PointOutcome(Out):
    """What planning one point gave: the best design, or why there is none."""

    index: int
    values: list[float]
    status: RowStatus
    design: Design | None = None
    conflict: list[FamilyRef] = Field(default_factory=list, description="a minimal conflicting set (infeasible)")
    detail: str = ""


def plan_point(
    resolved: ResolvedRequirement, catalog: Catalog, objective: str, settings: SolverSettings
) -> PointOutcome:
    """The best design of one point with its binding constraints, or the conflict when there is none.

    ``plan_requirement`` with ``top=1`` and ``explain="binding"``: the rest of the explanation (lost
    GPU types, mixes, least relaxations) is not worked out, as a row does not show it.
    """
    options = PlanOptions(top=1, objective=objective, explain="binding", settings=settings)
    plan = plan_requirement(resolved, catalog, options)
    if plan.designs:
        return PointOutcome(index=0, values=[], status=plan.status, design=plan.designs[0])
    if plan.infeasibility is not None:
        why = plan.infeasibility
        return PointOutcome(index=0, values=[], status="infeasible", conflict=why.conflict, detail=why.text)
    return PointOutcome(index=0, values=[], status=plan.status, detail="time limit reached before a design or a proof")


def run_task(task: PointTask) -> PointOutcome:
    """Load and plan one point (in a worker process or inline). Bad values give an 'invalid' row."""
    from clusterplan.catalog.load import load_catalog
    from clusterplan.requirement.load import load_requirement_text

    try:
        with tempfile.TemporaryDirectory(prefix="clusterplan-sweep-") as tmp:
            paths = [Path(p) for p in task.catalog_paths]
            if task.catalog_override is not None:
                extra = Path(tmp) / "what-if-catalog.yaml"
                extra.write_text(task.catalog_override, encoding="utf-8")
                paths.append(extra)
            catalog = load_catalog(paths)
        resolved = load_requirement_text(task.text, task.name, catalog, base_dir=Path(task.base_dir))
    except InputError as exc:
        first = exc.problems[0] if exc.problems else None
        detail = f"{first.path}: {first.message}" if first is not None and first.path else exc.message
        return PointOutcome(index=task.index, values=list(task.values), status="invalid", detail=detail)
    except ClusterplanError as exc:
        return PointOutcome(index=task.index, values=list(task.values), status="invalid", detail=exc.message)
    out = plan_point(resolved, catalog, task.objective, task.settings)
    return out.model_copy(update={"index": task.index, "values": list(task.values)})


def default_jobs() -> int:
    return os.cpu_count() or 1


def _pool_context() -> Any:
    """Fork where it is safe and cheap (Linux: the pool forks every worker before any thread starts);
    spawn elsewhere."""
    import multiprocessing
    import sys

    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


# Plans tasks elsewhere (a Ray cluster: clusterplan.whatif.ray_backend) instead of here, outcomes in task
# order; set for a block by use_runner, else run_tasks plans inline or in its process pool.
Runner = Callable[[Sequence[PointTask], Callable[[int], None] | None], list[PointOutcome]]
_RUNNER: ContextVar[Runner | None] = ContextVar("clusterplan_point_runner", default=None)


@contextmanager
def use_runner(runner: Runner | None) -> Iterator[None]:
    """Within the block, :func:`run_tasks` hands its tasks to ``runner`` (None: plan them here)."""
    token = _RUNNER.set(runner)
    try:
        yield
    finally:
        _RUNNER.reset(token)


def run_tasks(
    tasks: Sequence[PointTask], *, jobs: int = 1, on_done: Callable[[int], None] | None = None
) -> list[PointOutcome]:
    """Plan every task; ``jobs`` > 1 uses a process pool. Outcomes come back in task order."""
    if jobs < 1:
        raise SweepError("--jobs must be at least 1")
    runner = _RUNNER.get()
    if runner is not None and tasks:
        return runner(tasks, on_done)
    jobs = min(jobs, len(tasks)) or 1
    results: dict[int, PointOutcome] = {}
    if jobs == 1:
        for task in tasks:
            results[task.index] = run_task(task)
            if on_done is not None:
                on_done(len(results))
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=jobs, mp_context=_pool_context()) as pool:
            futures = [pool.submit(run_task, t) for t in tasks]
            for fut in as_completed(futures):
                out = fut.result()
                results[out.index] = out
                if on_done is not None:
                    on_done(len(results))
    return [results[t.index] for t in tasks]


# ------------------------------------------------------------------------------------------------
# 4. Reading a design
# ------------------------------------------------------------------------------------------------


def shape_of(design: Design) -> str:
    """GPU type, parallelism, quantization and deployment per workload (workload names dropped when one)."""
    parts = design.signature
    if len(design.workloads) == 1:
        parts = [s.partition(": ")[2] or s for s in parts]
    return "; ".join(parts)


def throughput_of(design: Design) -> tuple[float, str]:
    """Serving capacity within the targets (requests/s, all serving workloads), else training tokens/s."""
    serving = [w for w in design.workloads if isinstance(w, ServingPlan)]
    if serving:
        return sum(w.capacity_rps for w in serving), "requests/s"
    return sum(w.tokens_per_s for w in design.workloads if isinstance(w, TrainingPlan)), "tokens/s"


def p95_of(design: Design) -> float | None:
    """The worst p95 end-to-end latency of any serving replica group at its rated load, s."""
    values = [g.p95_latency_s for w in design.workloads if isinstance(w, ServingPlan) for g in w.groups]
    return max(values) if values else None


__all__ = [
    "Base",
    "PointOutcome",
    "PointTask",
    "RowStatus",
    "Runner",
    "default_jobs",
    "load_base",
    "p95_of",
    "plan_point",
    "point_task",
    "run_task",
    "run_tasks",
    "shape_of",
    "throughput_of",
    "use_runner",
]
