"""Plan variants of one requirement: one task per point, run inline or in a process pool, in point order.

Pure data in and out; no printing. What sweeps and frontiers share:

1. **The base.** :func:`load_base` loads the requirement and the catalog once and keeps its document.
2. **Tasks.** :func:`point_task` makes a :class:`PointTask` from the base: the requirement document with
   values set, dumped back to YAML (so every point is validated and unit-parsed like a file), and, for
   catalog targets, a user-catalog override.
3. **Running.** :func:`run_task` loads and plans one point; :func:`run_tasks`, the one entry point that
   runs points, runs them inline (``jobs=1``) or in a process pool, and always returns them in point
   order, so results do not depend on ``jobs`` (the planner has a fixed seed and one search worker).
   The points planned in one process share a :class:`PointCache`: catalogs by their files, and the
   candidate rows and physics the varied field leaves alone (:func:`clusterplan.whatif.vary.reuse_of`
   decides which; every shared part is keyed by all its inputs, so a point plans as it would alone).
   A point plans with :func:`plan_point`: ``plan_requirement`` with ``explain="binding"``, which works
   out which constraints bind (or conflict) but not the rest of the explanation (lost GPU types, mixes,
   least relaxations), which a row does not show. The tests check that its design equals
   ``plan_requirement(..., PlanOptions(top=1))``'s first design.
4. **Reading a design.** :func:`shape_of`, :func:`throughput_of` and :func:`p95_of`: what a row of a
   sweep or a point of a frontier shows of it.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field

from clusterplan.candidates.build import CandidateCache
from clusterplan.errors import ClusterplanError, InputError, SweepError
from clusterplan.forks import pool_context, signals_held, stop_pool, usable_cpus, worker_signals
from clusterplan.pipeline import PlanOptions, plan_requirement
from clusterplan.plan import Design, FamilyRef, Out, ServingPlan, TrainingPlan
from clusterplan.planner.builder import ModelReuse
from clusterplan.planner.solve import SolverSettings
from clusterplan.whatif.vary import (
    Reuse,
    Target,
    catalog_override,
    format_value,
    requirement_value,
    reuse_of,
    set_path,
)

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.requirement.load import ResolvedRequirement

RowStatus = Literal["optimal", "feasible", "infeasible", "unknown", "invalid"]
Detail = Literal["binding", "design"]  # a sweep row's binding constraints or conflict; or the design alone


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
    # Texts made for earlier tasks (point_task): a grid's points share their requirement documents per value of the
    # requirement axes and their catalog overrides per value of the catalog axes (dumping each is ~3 ms).
    texts: dict[tuple[str, ...], str | None] = field(default_factory=dict, compare=False, repr=False)


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
    reuse: Reuse = "none"  # what points planned in one process may share (vary.reuse_of)
    detail: Detail = "binding"  # how much of each point to work out (plan_point)


_REUSE_ORDER: tuple[Reuse, ...] = ("none", "physics", "table")


def shared_by(targets: Sequence[Target]) -> Reuse:
    """What points varying all of ``targets`` may share: the least any one of them leaves alone."""
    return min((reuse_of(t) for t in targets), key=_REUSE_ORDER.index, default="table")


def point_task(
    base: Base,
    index: int,
    settings: Sequence[tuple[Target, float]],
    *,
    objective: str,
    solver: SolverSettings,
    edit: Callable[[dict[str, Any]], None] | None = None,
    reuse: Reuse | None = None,
    detail: Detail = "binding",
) -> PointTask:
    """The task of one point: the document with each requirement target set, catalog targets overridden.

    ``reuse``: what the points may share (default: what the targets leave alone; "none" with an ``edit``,
    whose caller knows what it changes and says so)."""
    in_requirement = [(t, v) for t, v in settings if t.where == "requirement"]
    text_key = ("requirement", *(f"{t.model_dump_json()}={v!r}" for t, v in in_requirement))
    text = base.texts.get(text_key) if edit is None else None
    if text is None:
        data = copy.deepcopy(base.data)
        if edit is not None:
            edit(data)
        for target, value in in_requirement:
            set_path(data, target.keys, requirement_value(value, target))
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        if edit is None:
            base.texts[text_key] = text
    in_catalog = [(t, v) for t, v in settings if t.where != "requirement"]
    override_key = ("catalog", *(f"{t.model_dump_json()}={v!r}" for t, v in in_catalog))
    if override_key not in base.texts:
        base.texts[override_key] = catalog_override(base.catalog, in_catalog)
    label = ", ".join(f"{t.field}={format_value(v, t.quantity)}" for t, v in settings)
    return PointTask(
        index=index,
        values=tuple(v for _, v in settings),
        text=text,
        name=f"{base.path} [{label}]" if label else str(base.path),
        base_dir=str(base.path.parent),
        catalog_paths=tuple(str(p) for p in base.catalog_paths),
        catalog_override=base.texts[override_key],
        objective=objective,
        settings=solver,
        reuse=reuse if reuse is not None else ("none" if edit is not None else shared_by([t for t, _ in settings])),
        detail=detail,
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
    rounds: int = Field(
        0, description="search rounds the scheduler simulation rejected before the design (Plan.simulation_rejected)"
    )
    objective: float | None = Field(
        None, description="the design's objective in the model's own units (min_cost: the total, US cents)"
    )


@dataclass
class PointCache:
    """What the points planned in one process share: each catalog by its files and override, the
    candidate rows and physics (:class:`~clusterplan.candidates.build.CandidateCache`), and the
    models' variables and structure (:class:`~clusterplan.planner.builder.ModelReuse`)."""

    catalogs: dict[tuple[tuple[str, ...], str | None], Catalog] = field(default_factory=dict)
    candidates: CandidateCache = field(default_factory=CandidateCache)
    models: ModelReuse = field(default_factory=ModelReuse)

    def catalog(self, paths: tuple[str, ...], override: str | None) -> Catalog:
        """The catalog of ``paths`` with ``override`` applied last, loaded once (CatalogInputError if invalid)."""
        key = (paths, override)
        if key not in self.catalogs:
            self.catalogs[key] = _load_catalog(paths, override)
        return self.catalogs[key]


def _load_catalog(paths: tuple[str, ...], override: str | None) -> Catalog:
    from clusterplan.catalog.load import load_catalog

    with tempfile.TemporaryDirectory(prefix="clusterplan-sweep-") as tmp:
        files = [Path(p) for p in paths]
        if override is not None:
            extra = Path(tmp) / "what-if-catalog.yaml"
            extra.write_text(override, encoding="utf-8")
            files.append(extra)
        return load_catalog(files)


def plan_point(
    resolved: ResolvedRequirement,
    catalog: Catalog,
    objective: str,
    settings: SolverSettings,
    *,
    cache: CandidateCache | None = None,
    detail: Detail = "binding",
) -> PointOutcome:
    """The best design of one point with its binding constraints, or the conflict when there is none.

    ``plan_requirement`` with ``top=1`` and ``explain="binding"``: the rest of the explanation (lost
    GPU types, mixes, least relaxations) is not worked out, as a row does not show it, nor are the design's
    odds, simulated misses and provisional figures (``annotate=False``) or its other layouts (``variants=False``). ``detail``
    "design": the best design alone (no binding constraints, no conflict), for bisections. ``cache``:
    rows and physics shared with the other points (the outcome is the same without it).
    """
    # annotate=False, variants=False: a row or frontier point shows none of a design's odds, simulated misses,
    # provisional figures or other layouts of its hardware ("also runs as").
    options = PlanOptions(top=1, objective=objective, explain=detail, settings=settings, annotate=False, variants=False)
    plan = plan_requirement(resolved, catalog, options, cache=cache)
    if plan.designs:
        return PointOutcome(
            index=0,
            values=[],
            status=plan.status,
            design=plan.designs[0],
            rounds=len(plan.simulation_rejected),
            objective=plan.solver.objective_value,
        )
    if plan.status == "infeasible" and detail == "design":
        return PointOutcome(index=0, values=[], status="infeasible")
    if plan.infeasibility is not None:
        why = plan.infeasibility
        return PointOutcome(index=0, values=[], status="infeasible", conflict=why.conflict, detail=why.text)
    return PointOutcome(index=0, values=[], status=plan.status, detail="time limit reached before a design or a proof")


def load_task(task: PointTask, cache: PointCache) -> tuple[ResolvedRequirement, Catalog] | PointOutcome:
    """One point's requirement and catalog, loaded as a file of its own would be (its pinned layouts checked), or
    its 'invalid' outcome."""
    from clusterplan.evaluation.pinned import check_pinned_layouts
    from clusterplan.requirement.load import load_requirement_text

    try:
        catalog = cache.catalog(task.catalog_paths, task.catalog_override)
        resolved = load_requirement_text(task.text, task.name, catalog, base_dir=Path(task.base_dir))
        check_pinned_layouts(resolved)
    except InputError as exc:
        first = exc.problems[0] if exc.problems else None
        detail = f"{first.path}: {first.message}" if first is not None and first.path else exc.message
        return PointOutcome(index=task.index, values=list(task.values), status="invalid", detail=detail)
    except ClusterplanError as exc:
        return PointOutcome(index=task.index, values=list(task.values), status="invalid", detail=exc.message)
    return resolved, catalog


def run_task(task: PointTask, cache: PointCache | None = None) -> PointOutcome:
    """Load and plan one point (in a worker process or inline). Bad values give an 'invalid' row.

    ``cache``: what the points planned in this process share (catalogs always; candidates where the
    task's ``reuse`` allows)."""
    here = cache if cache is not None else PointCache()
    loaded = load_task(task, here)
    if isinstance(loaded, PointOutcome):
        return loaded
    resolved, catalog = loaded
    shared = here.candidates if task.reuse != "none" else None
    if task.reuse == "table":  # the models differ in bounds at most: the last one's structure serves
        with here.models:
            out = plan_point(resolved, catalog, task.objective, task.settings, cache=shared, detail=task.detail)
    else:
        out = plan_point(resolved, catalog, task.objective, task.settings, cache=shared, detail=task.detail)
    return out.model_copy(update={"index": task.index, "values": list(task.values)})


def default_jobs() -> int:
    """Points planned side by side when ``--jobs`` is not given: the CPUs this process may use (its affinity and its
    control group's quota, :func:`clusterplan.forks.usable_cpus`). The machine's count started 64 workers in a pod
    limited to two CPUs on a 64-core node, each taking turns under the quota."""
    return usable_cpus()


_WORKER_CACHE: PointCache | None = None  # a pool worker's own, made by _start_worker


@dataclass
class _HeldPool:
    """The process pool :func:`one_pool` keeps for its block: started by the first :func:`in_pool` in it."""

    jobs: int
    pool: Any = None

    def get(self) -> Any:
        if self.pool is None:
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=pool_context(), initializer=_start_worker)
        return self.pool


_POOL: ContextVar[_HeldPool | None] = ContextVar("clusterplan_point_pool", default=None)


@contextmanager
def one_pool(jobs: int) -> Iterator[None]:
    """Within the block, every :func:`in_pool` (and :func:`run_tasks` with ``jobs`` > 1) runs on one process pool of
    ``jobs`` workers, started when first needed: a sweep's phases (its points, the rows worked out again, the
    bisections) reuse the workers and their caches (each pool's workers otherwise prepare the candidates again).
    The results are the same as with a pool per call (a point plans as it would alone, whatever its worker's cache
    holds). No worker outlives the block, an interrupt or an error."""
    if jobs <= 1:
        yield
        return
    held = _HeldPool(jobs)
    token = _POOL.set(held)
    try:
        yield
    except BaseException:
        if held.pool is not None:
            stop_pool(held.pool)
            held.pool = None
        raise
    finally:
        _POOL.reset(token)
        if held.pool is not None:
            held.pool.shutdown(wait=True)


def _start_worker(cache: PointCache | None = None) -> None:
    """A pool worker's start: its own cache (``cache``, inherited where it forked, else a fresh one), and a worker's
    signals (:func:`clusterplan.forks.worker_signals`)."""
    global _WORKER_CACHE
    _POOL.set(None)  # forked inside one_pool's block: the parent's pool is not this worker's to use
    worker_signals()
    _WORKER_CACHE = cache if cache is not None else PointCache()


def _call_in_worker(job: tuple[Callable[[Any, PointCache], Any], Any]) -> Any:
    """``fn(arg, cache)`` in a pool worker, with the worker's cache."""
    fn, arg = job
    assert _WORKER_CACHE is not None
    return fn(arg, _WORKER_CACHE)


def in_pool(
    fn: Callable[[Any, PointCache], Any],
    args: Sequence[Any],
    *,
    jobs: int,
    on_done: Callable[[int], None] | None = None,
) -> list[Any]:
    """``fn(arg, cache)`` for each of ``args`` in a process pool of ``jobs`` workers (each with its own cache),
    the results in the order of ``args``; no worker outlives an interrupt or an error. ``fn`` and ``args`` are
    pickled (``fn``: a module-level function). Within :func:`one_pool`'s block, its pool (``jobs`` is then its)."""
    from concurrent.futures import ProcessPoolExecutor

    held = _POOL.get()
    if held is not None:
        pool = held.get()
    else:
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=pool_context(), initializer=_start_worker)
    try:
        with signals_held():
            futures = [pool.submit(_call_in_worker, (fn, a)) for a in args]
        results = _results(futures, on_done)
    except BaseException:  # an interrupt, SIGTERM (console.Terminated) or an error: no worker is left behind
        stop_pool(pool)
        if held is not None:
            held.pool = None
        raise
    if held is None:
        pool.shutdown(wait=True)
    return results


def _results(futures: Sequence[Any], on_done: Callable[[int], None] | None) -> list[Any]:
    """The futures' results in their order, waited for as they complete (``on_done``: how many have, each time)."""
    from concurrent.futures import as_completed

    done: dict[int, Any] = {}
    index = {fut: i for i, fut in enumerate(futures)}
    for fut in as_completed(futures):
        done[index[fut]] = fut.result()
        if on_done is not None:
            on_done(len(done))
    return [done[i] for i in range(len(futures))]


@dataclass
class StartedTasks:
    """Point tasks :func:`start_tasks` handed to a process pool: their outcomes, in task order, when read."""

    tasks: list[PointTask]
    on_done: Callable[[int], None] | None = None
    cache: PointCache | None = None  # what the points start from, inline or in each worker (its forked copy)
    futures: list[Any] = field(default_factory=list)  # empty: planned inline (run_tasks) when read
    read: list[PointOutcome] | None = None

    def outcomes(self) -> list[PointOutcome]:
        """Every task's outcome in task order, waiting for the pool's (planned here, one by one, without one)."""
        if self.read is None:
            if not self.futures:
                self.read = run_tasks(self.tasks, jobs=1, on_done=self.on_done, cache=self.cache)
            else:
                self.read = _results(self.futures, self.on_done)
        return self.read


@contextmanager
def start_tasks(
    tasks: Sequence[PointTask],
    *,
    jobs: int,
    on_done: Callable[[int], None] | None = None,
    cache: PointCache | None = None,
) -> Iterator[StartedTasks]:
    """The tasks handed now to a process pool of its own (``jobs`` workers, at least one, at most one a task),
    so that the caller works meanwhile and reads their outcomes later (:meth:`StartedTasks.outcomes`: the
    same as :func:`run_tasks` gives). The workers fork here, in the calling thread. At the block's end the pool
    is shut down: at once, its tasks stopped, where the outcomes were not read (a guess the caller no longer
    needs), or on an error or an interrupt. No tasks, or a runner set (:func:`use_runner`): nothing starts,
    and reading the outcomes plans them as :func:`run_tasks` would. ``cache``: what the points start from (the
    rows and physics of a plan just made, say), each worker its own copy where workers fork (else a fresh one);
    the outcomes are the same without it."""
    started = StartedTasks(list(tasks), on_done, cache)
    if not tasks or runner_set():
        yield started
        return
    from concurrent.futures import ProcessPoolExecutor

    workers = max(1, min(jobs, len(tasks)))
    context = pool_context()
    forked = cache is not None and context.get_start_method() == "fork"  # a spawned worker would unpickle it
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_start_worker, initargs=(cache if forked else None,)
    )
    try:
        with signals_held():
            started.futures = [pool.submit(_call_in_worker, (run_task, t)) for t in started.tasks]
        yield started
    except BaseException:
        stop_pool(pool)
        raise
    if started.read is None:
        stop_pool(pool)
    else:
        pool.shutdown(wait=True)


def pool_open() -> bool:
    """Whether :func:`one_pool` holds a started process pool for this block (workers with warm caches)."""
    held = _POOL.get()
    return held is not None and held.pool is not None


def runner_set() -> bool:
    """Whether points are planned elsewhere (:func:`use_runner`: a Ray cluster) in this block."""
    return _RUNNER.get() is not None


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
    tasks: Sequence[PointTask],
    *,
    jobs: int = 1,
    on_done: Callable[[int], None] | None = None,
    cache: PointCache | None = None,
) -> list[PointOutcome]:
    """Plan every task; ``jobs`` > 1 uses a process pool. Outcomes come back in task order.

    The one entry point that runs points. Inline, the tasks share ``cache`` (a fresh one if None; pass
    one to share it with a later call); in a pool, each worker has its own.
    """
    if jobs < 1:
        raise SweepError("--jobs must be at least 1")
    runner = _RUNNER.get()
    if runner is not None and tasks:
        return runner(tasks, on_done)
    if jobs > 1 and tasks and pool_open():  # one_pool's workers, whose caches are warm, even for one task
        return in_pool(run_task, tasks, jobs=jobs, on_done=on_done)
    jobs = min(jobs, len(tasks)) or 1
    if jobs > 1:
        return in_pool(run_task, tasks, jobs=jobs, on_done=on_done)
    results: dict[int, PointOutcome] = {}
    here = cache if cache is not None else PointCache()
    for task in tasks:
        results[task.index] = run_task(task, here)
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
    "Detail",
    "PointCache",
    "PointOutcome",
    "PointTask",
    "RowStatus",
    "Runner",
    "StartedTasks",
    "default_jobs",
    "in_pool",
    "load_base",
    "load_task",
    "one_pool",
    "p95_of",
    "plan_point",
    "point_task",
    "pool_open",
    "run_task",
    "run_tasks",
    "runner_set",
    "shape_of",
    "shared_by",
    "start_tasks",
    "throughput_of",
    "use_runner",
]
