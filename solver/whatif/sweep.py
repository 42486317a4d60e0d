"""What-if sweeps: re-plan a requirement across values of one or two fields and read where the optimal
design switches.

Pure data in and out; no printing. The fields and values of ``--vary`` are :mod:`clusterplan.whatif.vary`;
planning the points is :mod:`clusterplan.whatif.points`. Here:

1. **Points.** :func:`build_tasks` makes one task per grid point (:func:`grid`: the first axis varies
   fastest), each the base requirement with the axes' values set.
2. **Switch points.** Between two neighbouring points along the first axis whose optimal designs
   differ (or where one has a design and the other none), :func:`bisect_switch` halves the interval
   of the first axis, planning the design alone at each midpoint, until it is at most
   ``switch_tolerance`` of the value wide (integers: adjacent), and gives the :class:`SwitchPoint`
   with the designs on either side.
3. **Reading.** :func:`assemble` turns the outcomes into :class:`SweepRow` s, marks where the optimal
   design switches and where the requirement becomes feasible, and writes the notes a reader wants first.

Binding constraints (and the conflict of a point with no design) cost several CP-SAT solves a point, so
``binding="changes"`` works them out only for the rows that show a change: every row whose outcome
differs from the previous one's along the first axis, and a run's first row where it differs from the
previous run's first (:func:`changed_rows`).
The points are planned for their designs alone first, then those rows again with their binding
constraints; every other row's ``binding`` is None (not worked out). ``binding="all"``: every row.

:func:`run_sweep` does all three around :func:`clusterplan.whatif.points.run_tasks`, on one process pool
(:func:`clusterplan.whatif.points.one_pool`: each worker prepares the candidates once for the whole sweep). Pareto frontiers are
:mod:`clusterplan.whatif.frontier`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import Field

from clusterplan.errors import SweepError
from clusterplan.plan import Out, ServingPlan, TrainingPlan
from clusterplan.planner.solve import SolverSettings

# FrontierResult, default_jobs, load_base, parse_value and resolve_field are not used here: they stay
# importable from clusterplan.whatif.sweep for the modules that import them from here (render/plots.py,
# report/data.py, commands/report.py).
from clusterplan.whatif.frontier import FrontierResult
from clusterplan.whatif.known import Known
from clusterplan.whatif.points import (
    Base,
    Detail,
    PointCache,
    PointOutcome,
    PointTask,
    RowStatus,
    default_jobs,
    in_pool,
    load_base,
    load_task,
    one_pool,
    p95_of,
    point_task,
    pool_open,
    run_tasks,
    runner_set,
    shape_of,
    throughput_of,
)
from clusterplan.whatif.vary import Axis, first_workload, format_value, parse_value, resolve_field

MAX_POINTS = 2500  # a grid larger than this is a typo, not a question
DEFAULT_SWITCH_TOLERANCE = 0.01  # a switch point is bracketed to 1% of its value (the command's default)
MAX_BISECTIONS = 60  # halvings of one interval at most (2**-60 of it: beyond float resolution anyway)
BindingRows = Literal["changes", "all"]  # the rows whose binding constraints or conflict are worked out


# ------------------------------------------------------------------------------------------------
# 1. Points
# ------------------------------------------------------------------------------------------------


def grid(axes: Sequence[Axis]) -> list[tuple[float, ...]]:
    """Every combination of the axes' values; the first axis varies fastest."""
    combos = itertools.product(*(a.values for a in reversed(axes)))
    return [tuple(reversed(c)) for c in combos]


def build_tasks(
    base: Base, axes: Sequence[Axis], *, objective: str, solver: SolverSettings, detail: Detail = "binding"
) -> list[PointTask]:
    """One task per grid point, in point order (``detail``: each point's, :func:`clusterplan.whatif.points.plan_point`)."""
    points = grid(axes)
    if len(points) > MAX_POINTS:
        raise SweepError(f"{len(points):,} points is more than {MAX_POINTS:,}", fix="use fewer --steps or values")
    return [
        point_task(
            base,
            i,
            list(zip((a.target for a in axes), values, strict=True)),
            objective=objective,
            solver=solver,
            detail=detail,
        )
        for i, values in enumerate(points)
    ]


# ------------------------------------------------------------------------------------------------
# 2. Switch points
# ------------------------------------------------------------------------------------------------


class SwitchSide(Out):
    """The optimal design on one side of a switch point (or why there is none)."""

    value: float = Field(description="the value of the first axis it was planned at")
    status: RowStatus
    shape: str | None = Field(default=None, description="GPU type, parallelism, quantization and deployment")
    design: str | None = Field(default=None, description="the design's summary")
    total_usd: float | None = Field(default=None, description="total over the horizon, USD")


class SwitchPoint(Out):
    """Where, between two sample points, the optimal design changes: bracketed by bisection."""

    field: str = Field(description="the first axis's field")
    others: list[float] = Field(default_factory=list, description="the other axes' values (grids)")
    at: float = Field(description="the middle of the final bracket, in the axis's unit")
    tolerance: float = Field(description="the bracket's width the bisection stopped at, relative to the value")
    bisections: int = Field(description="points planned to find it")
    before: SwitchSide = Field(description="the last value found with the first sample's design")
    after: SwitchSide = Field(description="the first value found with another design (or none)")
    after_index: int = Field(description="index of the sample row just past the switch")


def _identity(out: PointOutcome) -> str:
    """What tells two points' outcomes apart: the design's shape, or the status when there is none."""
    return shape_of(out.design) if out.design is not None else out.status


def _side(out: PointOutcome, value: float) -> SwitchSide:
    d = out.design
    if d is None:
        return SwitchSide(value=value, status=out.status)
    return SwitchSide(value=value, status=out.status, shape=shape_of(d), design=d.summary, total_usd=d.costs.total_usd)


def _narrow(a: float, b: float, tolerance: float, integer: bool) -> bool:
    """Whether [a, b] is as narrow as asked: adjacent integers, or within ``tolerance`` of its larger end."""
    if integer:
        return abs(b - a) <= 1
    return abs(b - a) <= tolerance * max(abs(a), abs(b))


@dataclass
class _Bracket:
    """One switch being bisected, a halving at a time (:func:`bisect_switch`'s loop; :func:`_bisect_all` steps many)."""

    axes: Sequence[Axis]
    first: PointOutcome
    second: PointOutcome
    tolerance: float
    lo: float = 0.0
    hi: float = 0.0
    lo_out: PointOutcome | None = None
    hi_out: PointOutcome | None = None
    steps: int = 0

    def __post_init__(self) -> None:
        self.lo, self.hi = self.first.values[0], self.second.values[0]
        self.lo_out, self.hi_out = self.first, self.second

    def values(self) -> tuple[float, ...] | None:
        """The next point to plan (the midpoint, the other axes' values after it), or None when narrow enough."""
        integer = self.axes[0].target.quantity == "integer"
        if self.steps >= MAX_BISECTIONS or _narrow(self.lo, self.hi, self.tolerance, integer):
            return None
        mid = float((self.lo + self.hi) // 2) if integer else (self.lo + self.hi) / 2
        if mid in (self.lo, self.hi):
            return None  # the floats are adjacent
        return (mid, *self.first.values[1:])

    def take(self, out: PointOutcome) -> None:
        """The midpoint's outcome replaces the end whose outcome it shares with the first point, else the other."""
        self.steps += 1
        if _identity(out) == _identity(self.first):
            self.lo, self.lo_out = out.values[0], out
        else:
            self.hi, self.hi_out = out.values[0], out

    def result(self) -> SwitchPoint:
        assert self.lo_out is not None and self.hi_out is not None
        lo, hi = self.lo, self.hi
        return SwitchPoint(
            field=self.axes[0].target.field,
            others=list(self.first.values[1:]),
            at=(lo + hi) / 2,
            tolerance=abs(hi - lo) / max(abs(lo), abs(hi)) if max(abs(lo), abs(hi)) > 0 else 0.0,
            bisections=self.steps,
            before=_side(self.lo_out, lo),
            after=_side(self.hi_out, hi),
            after_index=self.second.index,
        )


def _midpoint_task(
    base: Base, axes: Sequence[Axis], values: Sequence[float], objective: str, solver: SolverSettings
) -> PointTask:
    targets = [a.target for a in axes]
    return point_task(
        base, 0, list(zip(targets, values, strict=True)), objective=objective, solver=solver, detail="design"
    )


def bisect_switch(
    base: Base,
    axes: Sequence[Axis],
    first: PointOutcome,
    second: PointOutcome,
    *,
    objective: str,
    solver: SolverSettings,
    tolerance: float = DEFAULT_SWITCH_TOLERANCE,
    cache: PointCache | None = None,
) -> SwitchPoint:
    """Bisect the first axis between two points (same other values) whose outcomes differ.

    Each midpoint is planned for its optimal design alone (``detail="design"``) and replaces the end
    whose outcome it shares with the first point, else the other, so the bracket always holds the
    first point's design below and another above. With several switches in between, one of them is
    found. Stops when the bracket is ``tolerance`` of the value wide (integers: adjacent values).
    """
    here = cache if cache is not None else PointCache()
    bracket = _Bracket(axes, first, second, tolerance)
    while (values := bracket.values()) is not None:
        task = _midpoint_task(base, axes, values, objective, solver)
        bracket.take(run_tasks([task], jobs=1, cache=here)[0])
    return bracket.result()


def _bisect_all(
    base: Base,
    axes: Sequence[Axis],
    pairs: Sequence[tuple[PointOutcome, PointOutcome]],
    known: Known,
    run: _Run,
    tolerance: float,
) -> list[SwitchPoint]:
    """:func:`bisect_switch` of every pair, the same switch points: each midpoint the points planned so far prove
    (:class:`~clusterplan.whatif.known.Known`) is read off, the others planned ``run.jobs`` at a time, the lowest
    price first (what they prove carries to the higher prices)."""
    brackets = [_Bracket(axes, a, b, tolerance) for a, b in pairs]
    while True:
        waiting: list[tuple[_Bracket, PointTask]] = []
        for bracket in brackets:
            while (values := bracket.values()) is not None:
                task = _midpoint_task(base, axes, values, run.objective, run.settings)
                out = _read_off(task, known, run.cache)
                if out is None:
                    waiting.append((bracket, task))
                    break
                bracket.take(out)
        if not waiting:
            return [b.result() for b in brackets]
        batch = sorted(waiting, key=lambda bt: known.order(bt[1].values))[: max(1, run.jobs)]
        for (bracket, _), out in zip(
            batch, run_tasks([t for _, t in batch], jobs=run.jobs, cache=run.cache), strict=True
        ):
            known.learn(out)
            bracket.take(out)


def changed_rows(outcomes: Sequence[PointOutcome], axes: Sequence[Axis]) -> set[int]:
    """The indices of the rows that show a change: every point whose outcome (design shape, or status when there
    is none) differs from the previous point's along the first axis, and the first point of each run when it
    differs from the previous run's first (the grid's very first point always)."""
    n = len(axes[0].values) if axes else len(outcomes)
    keep: set[int] = set()
    runs = [outcomes[start : start + n] for start in range(0, len(outcomes), n)]
    for k, run in enumerate(runs):
        if k == 0 or _identity(runs[k - 1][0]) != _identity(run[0]):
            keep.add(run[0].index)
        keep.update(b.index for a, b in itertools.pairwise(run) if _identity(a) != _identity(b))
    return keep


BisectJob = tuple[Base, Sequence[Axis], PointOutcome, PointOutcome, str, SolverSettings, float]


def _bisect_job(job: BisectJob, cache: PointCache) -> SwitchPoint:
    """:func:`bisect_switch` of one pair in a pool worker (:func:`clusterplan.whatif.points.in_pool`)."""
    base, axes, a, b, objective, settings, tolerance = job
    return bisect_switch(base, axes, a, b, objective=objective, solver=settings, tolerance=tolerance, cache=cache)


def switch_pairs(outcomes: Sequence[PointOutcome], axes: Sequence[Axis]) -> list[tuple[PointOutcome, PointOutcome]]:
    """Neighbours along the first axis whose outcomes differ, at least one with a design."""
    n = len(axes[0].values)
    pairs = []
    for start in range(0, len(outcomes), n):
        run = outcomes[start : start + n]
        for a, b in itertools.pairwise(run):
            if (a.design is not None or b.design is not None) and _identity(a) != _identity(b):
                pairs.append((a, b))
    return pairs


# ------------------------------------------------------------------------------------------------
# 3. Reading
# ------------------------------------------------------------------------------------------------


class SweepRow(Out):
    """One point of a sweep: the optimal design there, or why there is none."""

    index: int
    values: list[float] = Field(description="one per axis, in the axis's unit")
    status: RowStatus
    design: str | None = Field(default=None, description="the design's summary, e.g. '4x NVIDIA B200 (owned)'")
    shape: str | None = Field(
        default=None, description="GPU type, parallelism, quantization and deployment per workload"
    )
    gpus: str | None = Field(default=None, description="GPU type x count, e.g. '4x b200'")
    deployment: str | None = None
    parallelism: str | None = None
    quantization: str | None = None
    total_usd: float | None = Field(default=None, description="total over the horizon, USD")
    capital_usd: float | None = None
    monthly_usd: float | None = Field(default=None, description="USD/month")
    throughput: float | None = Field(
        default=None, description="capacity within targets, in the sweep's throughput_unit"
    )
    p95_latency_s: float | None = Field(default=None, description="worst p95 end-to-end latency at rated load, s")
    objective_value: float | None = Field(default=None, description="what the objective optimises, in objective_unit")
    binding: list[str] | None = Field(
        default_factory=list,
        description="binding constraints (conflict when infeasible); None: not worked out for this row "
        "(sweep --binding changes works them out where the outcome changes)",
    )
    switch: bool = Field(default=False, description="the optimal design differs from the previous point's")
    change: str = Field(default="", description="what changed from the previous point along the first axis")
    detail: str = ""


class SweepResult(Out):
    requirement: str
    file: str
    objective: str
    objective_label: str
    objective_unit: str
    throughput_unit: str
    axes: list[Axis]
    rows: list[SweepRow]
    switches: list[SwitchPoint] = Field(
        default_factory=list, description="where the optimal design changes between sample points, bisected"
    )
    notes: list[str]


OBJECTIVE_LABEL: dict[str, tuple[str, str]] = {
    "min_cost": ("total cost over the horizon", "USD"),
    "max_throughput": ("capacity within the targets", "throughput"),
    "min_latency": ("p95 latency at rated load", "s"),
}


def _parallelism(w: ServingPlan | TrainingPlan) -> list[str]:
    if isinstance(w, ServingPlan):
        return [f"{g.replicas}x TP{g.tp} PP{g.pp}" for g in w.groups]
    return [f"TP{w.tp} PP{w.pp} DP{w.dp} ZeRO-{w.zero_stage}"]


def _quant(w: ServingPlan | TrainingPlan) -> list[str]:
    if isinstance(w, ServingPlan):
        return [g.quant for g in w.groups]
    return []


def row_of(outcome: PointOutcome, objective: str, *, checked: bool = True) -> SweepRow:
    """A row from one outcome (switch marks are added by :func:`assemble`); ``checked``: its binding constraints
    (or conflict) were worked out, else ``binding`` is None."""
    d = outcome.design
    if d is None:
        return SweepRow(
            index=outcome.index,
            values=outcome.values,
            status=outcome.status,
            binding=[r.title for r in outcome.conflict] if checked else None,
            detail=outcome.detail,
        )
    throughput, _ = throughput_of(d)
    p95 = p95_of(d)
    objective_value = {"min_cost": d.costs.total_usd, "max_throughput": throughput, "min_latency": p95}[objective]
    kinds = sorted({h.kind for h in d.hardware})
    return SweepRow(
        index=outcome.index,
        values=outcome.values,
        status=outcome.status,
        design=d.summary,
        shape=shape_of(d),
        gpus=", ".join(f"{n}x {g}" for g, n in d.gpus_by_type.items()),
        deployment="+".join(kinds),
        parallelism="; ".join(p for w in d.workloads for p in _parallelism(w)),
        quantization=", ".join(dict.fromkeys(q for w in d.workloads for q in _quant(w))) or "-",
        total_usd=d.costs.total_usd,
        capital_usd=d.costs.capital_usd,
        monthly_usd=d.costs.monthly_usd,
        throughput=throughput,
        p95_latency_s=p95,
        objective_value=objective_value,
        binding=[c.title for c in d.constraints if c.status == "binding"] if checked else None,
        detail=outcome.detail,
    )


def _has_design(row: SweepRow) -> bool:
    return row.shape is not None


def series(rows: Sequence[SweepRow], axes: Sequence[Axis]) -> list[list[SweepRow]]:
    """Rows split into runs along the first axis (one run per value of the other axes)."""
    n = len(axes[0].values) if axes else len(rows)
    return [list(rows[i : i + n]) for i in range(0, len(rows), n)]


def assemble(
    base: Base,
    axes: Sequence[Axis],
    outcomes: Sequence[PointOutcome],
    *,
    objective: str,
    switches: Sequence[SwitchPoint] = (),
    checked: set[int] | None = None,
) -> SweepResult:
    """Rows in point order with switches marked, and the notes: where it becomes feasible, where it
    switches (at the bisected value where ``switches`` has one, else at the sample point). ``checked``: the
    indices of the rows whose binding constraints were worked out (None: every row's)."""
    rows = [row_of(o, objective, checked=checked is None or o.index in checked) for o in outcomes]
    exact = {sp.after_index: sp for sp in switches}
    marked: list[SweepRow] = []
    notes: list[str] = []
    for run in series(rows, axes):
        prefix = ""
        if len(axes) > 1:
            others = run[0].values[1:]
            prefix = (
                ", ".join(
                    f"{a.target.field} = {format_value(v, a.target.quantity)}"
                    for a, v in zip(axes[1:], others, strict=True)
                )
                + ": "
            )
        prev: SweepRow | None = None
        for row in run:
            update: dict[str, Any] = {}
            at = f"{axes[0].target.field} = {format_value(row.values[0], axes[0].target.quantity)}" if axes else ""
            sp = exact.get(row.index)
            # What the note names on either side: the bisected designs (or statuses) where there are.
            below, above = (prev.shape if prev is not None else None), row.shape
            if sp is not None:
                q = axes[0].target.quantity
                at = (
                    f"{sp.field} ≈ {format_value(sp.at, q)} (between {format_value(sp.before.value, q)} "
                    f"and {format_value(sp.after.value, q)})"
                )
                below, above = sp.before.shape or sp.before.status, sp.after.shape or sp.after.status
            if prev is not None and _has_design(prev) and _has_design(row) and prev.shape != row.shape:
                update = {"switch": True, "change": f"{prev.shape} → {row.shape}"}
                notes.append(f"{prefix}the optimal design switches at {at}: {below} → {above}")
            elif prev is not None and not _has_design(prev) and _has_design(row):
                update = {"change": "feasible from here"}
                notes.append(f"{prefix}feasible from {at} ({above})")
            elif prev is not None and _has_design(prev) and not _has_design(row):
                update = {"change": f"{row.status} from here"}
                notes.append(f"{prefix}{row.status} from {at}")
            marked.append(row.model_copy(update=update) if update else row)
            prev = row
        if run and not any(_has_design(r) for r in run):
            notes.append(f"{prefix}no point has a design")
    if checked is not None and len(checked) < len(rows):
        notes.append(
            f"binding constraints (the conflict where there is no design) worked out for the {len(checked)} of "
            f"{len(rows)} rows where the outcome changes; --binding all for every row"
        )
    label, unit = OBJECTIVE_LABEL[objective]
    throughput_unit = "requests/s" if first_workload(base.data, ("serving",)) is not None else "tokens/s"
    if unit == "throughput":
        unit = throughput_unit
    return SweepResult(
        requirement=base.name,
        file=str(base.path),
        objective=objective,
        objective_label=label,
        objective_unit=unit,
        throughput_unit=throughput_unit,
        axes=list(axes),
        rows=marked,
        switches=list(switches),
        notes=notes,
    )


def needs_budget(base: Base, axes: Sequence[Axis], objective: str) -> bool:
    """True when max_throughput would be unbounded: no budget in the file and none being varied."""
    if objective != "max_throughput":
        return False
    b = base.data.get("budget") if isinstance(base.data.get("budget"), dict) else {}
    if isinstance(b, dict) and any(b.get(k) is not None for k in ("total", "monthly", "capital")):
        return False
    return not any(a.target.keys[:1] == ["budget"] and a.target.keys[-1] != "horizon" for a in axes)


def _check_sweep(base: Base, axes: Sequence[Axis], objective: str) -> None:
    if not axes:
        raise SweepError("nothing to vary", fix="give at least one --vary FIELD=SPEC")
    if needs_budget(base, axes, objective):
        raise SweepError(
            "--objective max_throughput needs a budget to stay within",
            fix="vary the budget (--vary budget=200k..2M) or set budget.total in the requirement",
        )


def sweep_tasks(base: Base, axes: Sequence[Axis], *, objective: str, solver: SolverSettings) -> list[PointTask]:
    """The tasks of :func:`run_sweep` with every row's binding constraints and no bisections, checked as it checks
    them (SweepError), for a caller that plans them itself (:func:`clusterplan.whatif.points.start_tasks`);
    :func:`assemble` of their outcomes is then ``run_sweep``'s result."""
    _check_sweep(base, axes, objective)
    return build_tasks(base, axes, objective=objective, solver=solver, detail="binding")


def run_sweep(
    base: Base,
    axes: Sequence[Axis],
    *,
    objective: str = "min_cost",
    solver: SolverSettings | None = None,
    jobs: int = 1,
    on_done: Callable[[int], None] | None = None,
    switch_tolerance: float | None = None,
    binding: BindingRows = "all",
) -> SweepResult:
    """Plan every point of the grid and read the result. ``switch_tolerance``: bisect each switch
    between neighbouring points to this relative width (:func:`bisect_switch`); None: do not.
    ``binding``: the rows whose binding constraints (or conflict) are worked out, "all" or "changes"
    (:func:`changed_rows`: the points are planned for their designs first, then those rows again)."""
    _check_sweep(base, axes, objective)
    settings = solver or SolverSettings()
    if binding not in ("changes", "all"):
        raise SweepError(f"unknown --binding {binding!r}", fix="use --binding changes or --binding all")
    detail: Detail = "binding" if binding == "all" else "design"
    tasks = build_tasks(base, axes, objective=objective, solver=settings, detail=detail)
    with one_pool(jobs):  # the points, the rows worked out again and the bisections on the same workers
        run = _Run(objective, settings, jobs, PointCache())  # the cache: the points planned inline
        outcomes, checked, switches = _run_phases(base, axes, tasks, run, on_done, switch_tolerance)
    return assemble(base, axes, outcomes, objective=objective, switches=switches, checked=checked)


@dataclass(frozen=True)
class _Run:
    """How a sweep plans its points: the objective, the solver's settings, the jobs and the inline points' cache."""

    objective: str
    settings: SolverSettings
    jobs: int
    cache: PointCache


def _run_phases(
    base: Base,
    axes: Sequence[Axis],
    tasks: list[PointTask],
    run: _Run,
    on_done: Callable[[int], None] | None,
    switch_tolerance: float | None,
) -> tuple[list[PointOutcome], set[int] | None, list[SwitchPoint]]:
    """:func:`run_sweep`'s three phases: the points, the rows whose binding constraints are worked out again
    (``tasks`` planned for their designs alone), and the bisections of the switches. Where the points planned
    prove others' outcomes (:mod:`clusterplan.whatif.known`: min_cost along a budget or a GPU price), those are
    read off instead of planned, in the points and the bisections alike."""
    known = Known(axes, run.objective)
    outcomes = _plan_points(tasks, known, run, on_done)
    checked: set[int] | None = None
    if tasks and tasks[0].detail == "design":  # binding "changes"
        checked = changed_rows(outcomes, axes)
        again = [replace(tasks[i], detail="binding") for i in sorted(checked)]
        redone = {o.index: o for o in run_tasks(again, jobs=run.jobs, cache=run.cache)}
        outcomes = [redone.get(o.index, o) for o in outcomes]
    switches = []
    if switch_tolerance is not None:
        if switch_tolerance <= 0:
            raise SweepError("the switch tolerance must be above 0", fix="e.g. 0.01 (1%)")
        pairs = switch_pairs(outcomes, axes)
        jobs_here = min(run.jobs, len(pairs))
        if known.active:
            switches = _bisect_all(base, axes, pairs, known, run, switch_tolerance)
        # The switches apart, side by side (each one's halvings in turn); one_pool's warm workers even for one.
        elif pairs and (jobs_here > 1 or pool_open()) and not runner_set():
            switches = in_pool(
                _bisect_job,
                [(base, axes, a, b, run.objective, run.settings, switch_tolerance) for a, b in pairs],
                jobs=jobs_here,
            )
        else:
            switches = [
                bisect_switch(
                    base, axes, a, b, objective=run.objective, solver=run.settings, tolerance=switch_tolerance,
                    cache=run.cache,
                )
                for a, b in pairs
            ]  # fmt: skip
    return outcomes, checked, switches


def _read_off(task: PointTask, known: Known, cache: PointCache) -> PointOutcome | None:
    """The task's outcome without planning it: 'invalid' where its file would be rejected (as planning it gives),
    else what the points planned so far prove (None: it must be planned). Each document is loaded once."""
    key = (task.text, task.catalog_override)
    if key not in known.loads:
        loaded = load_task(task, cache)
        known.loads[key] = loaded if isinstance(loaded, PointOutcome) else None
    invalid = known.loads[key]
    if invalid is not None:
        return invalid.model_copy(update={"index": task.index, "values": list(task.values)})
    return known.outcome(task.index, task.values)


def _plan_points(
    tasks: Sequence[PointTask], known: Known, run: _Run, on_done: Callable[[int], None] | None
) -> list[PointOutcome]:
    """Every task's outcome, in task order: all planned (:func:`run_tasks`), or, where planned points prove others
    (``known.active``, points planned for their designs alone), in rounds: each round reads off every point it can
    and plans at most ``run.jobs`` of the rest, one a line, the lowest price first and on each line its highest
    budget (a design there proves every budget down to its total; no design, every budget below)."""
    if not known.active or not tasks or tasks[0].detail != "design":
        outs = run_tasks(tasks, jobs=run.jobs, on_done=on_done, cache=run.cache)
        for out in outs:
            known.learn(out)
        return outs
    results: dict[int, PointOutcome] = {}
    while True:
        pending: list[PointTask] = []
        for task in tasks:
            if task.index not in results:
                read = _read_off(task, known, run.cache)
                if read is None:
                    pending.append(task)
                else:
                    results[task.index] = read
        if on_done is not None:
            on_done(len(results))
        if not pending:
            return [results[t.index] for t in tasks]
        batch: dict[tuple[float, ...], PointTask] = {}
        for task in sorted(pending, key=lambda t: known.order(t.values)):
            batch.setdefault(known.line_of(task.values), task)
            if len(batch) >= max(1, run.jobs):
                break
        for out in run_tasks(list(batch.values()), jobs=run.jobs, cache=run.cache):
            known.learn(out)
            results[out.index] = out


__all__ = [
    "DEFAULT_SWITCH_TOLERANCE",
    "MAX_POINTS",
    "OBJECTIVE_LABEL",
    "Axis",
    "Base",
    "BindingRows",
    "FrontierResult",
    "SweepResult",
    "SweepRow",
    "SwitchPoint",
    "SwitchSide",
    "assemble",
    "bisect_switch",
    "build_tasks",
    "changed_rows",
    "default_jobs",
    "first_workload",
    "format_value",
    "grid",
    "load_base",
    "needs_budget",
    "parse_value",
    "resolve_field",
    "row_of",
    "run_sweep",
    "series",
    "sweep_tasks",
    "switch_pairs",
]
