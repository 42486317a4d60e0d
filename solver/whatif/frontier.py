"""Pareto frontiers: total cost against p95 latency, or against throughput (``clusterplan frontier``).

Pure data in and out; no printing. :func:`run_frontier` plans the cheapest design, then a ladder of
levels beyond it (tighter p95 targets, or larger budgets with ``max_throughput``), each a point of
:mod:`clusterplan.whatif.points`, and :func:`pareto` keeps the points no other point beats on both counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field

from clusterplan import units
from clusterplan.errors import SweepError
from clusterplan.plan import Out
from clusterplan.planner.solve import SolverSettings
from clusterplan.whatif.points import (
    Base,
    PointCache,
    PointOutcome,
    PointTask,
    RowStatus,
    p95_of,
    point_task,
    run_tasks,
    shape_of,
    throughput_of,
)
from clusterplan.whatif.vary import Target, first_workload, format_value, tidy

Against = Literal["latency", "throughput"]

FRONTIER_BUDGET_SPAN = 4.0  # throughput frontier: budget levels from the least cost to this multiple of it
FRONTIER_LATENCY_SPAN = 4.0  # latency frontier: p95 targets from the cheapest design's p95 down to 1/4 of it
DEFAULT_FRONTIER_POINTS = 8

_BUDGET_TOTAL = Target(
    field="budget.total",
    path="budget.total",
    where="requirement",
    keys=["budget", "total"],
    quantity="money",
    unit="USD",
)


class FrontierPoint(Out):
    p95_target_s: float | None = Field(default=None, description="the p95_latency target planned at (latency frontier)")
    budget_usd: float | None = Field(
        default=None, description="the budget.total level planned at (throughput frontier)"
    )
    status: RowStatus
    design: str | None = None
    shape: str | None = None
    total_usd: float | None = Field(default=None, description="total over the horizon, USD")
    p95_latency_s: float | None = Field(default=None, description="worst p95 end-to-end latency at rated load, s")
    throughput: float | None = Field(default=None, description="capacity within the targets, in throughput_unit")
    on_frontier: bool = Field(default=False, description="no other point is at most as dear and at least as good")


class FrontierResult(Out):
    requirement: str
    file: str
    against: Against
    objective: str = Field(description="the planner objective at each point")
    throughput_unit: str
    target: float | None = Field(
        default=None, description="the requirement's own p95_latency (s) or peak demand (req/s)"
    )
    points: list[FrontierPoint] = Field(description="every point planned, cheapest first; infeasible ones last")
    notes: list[str]

    @property
    def frontier(self) -> list[FrontierPoint]:
        return [p for p in self.points if p.on_frontier]


def pareto(points: Sequence[tuple[float, float]], *, maximise: bool) -> list[bool]:
    """Which (cost, value) points are Pareto-optimal: lower cost, and lower (with ``maximise``,
    higher) value. Of equal points only the first is kept."""
    keep = [False] * len(points)
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1] if maximise else points[i][1], i))
    best: float | None = None
    for i in order:
        value = points[i][1]
        if best is None or (value > best if maximise else value < best):
            keep[i] = True
            best = value
    return keep


def _serving_workloads(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for w in data.get("workloads") or [] if isinstance(w, dict) and w.get("kind") == "serving"]


def _latency_target(value: float | None) -> Callable[[dict[str, Any]], None]:
    """An edit that sets (or, with None, removes) every serving workload's p95_latency."""

    def edit(data: dict[str, Any]) -> None:
        for w in _serving_workloads(data):
            if value is None:
                w.pop("p95_latency", None)
            else:
                w["p95_latency"] = units.stated(value, "s")  # a document states its unit

    return edit


def _own_target(base: Base, against: Against, serving: int | None) -> float | None:
    """The requirement's own p95_latency (s), or its peak demand (requests/s) when it is in requests/min."""
    if against == "latency":
        assert serving is not None
        raw = base.data["workloads"][serving].get("p95_latency")
        return units.parse_duration(raw) if raw is not None else None
    w = base.data["workloads"][serving] if serving is not None else {}
    if w.get("requests_per_min") is not None:
        return units.parse_rate(w["requests_per_min"]) / 60.0 * float(w.get("peak_to_average", 1.0))
    return None


Levels = list[dict[str, float | None]]  # per task, the FrontierPoint fields that say where it was planned


def _latency_levels(
    base: Base, slowest: float, points: int, settings: SolverSettings
) -> tuple[list[PointTask], Levels, str]:
    """``points`` p95 targets log-spaced from just below ``slowest`` down to ``slowest / FRONTIER_LATENCY_SPAN``."""
    targets = [float(f"{slowest * FRONTIER_LATENCY_SPAN ** (-i / points):.3g}") for i in range(1, points + 1)]
    tasks = [
        point_task(
            base,
            i + 1,
            [],
            objective="min_cost",
            solver=settings,
            edit=_latency_target(t),
            reuse="physics",
            detail="design",
        )
        for i, t in enumerate(targets)
    ]
    note = (
        f"p95_latency of every serving workload removed for the cheapest point, then set from "
        f"{format_value(targets[0], 'duration')} down to {format_value(targets[-1], 'duration')} "
        f"({points} targets, log-spaced); TTFT and TPOT targets kept"
    )
    return tasks, [{"p95_target_s": t} for t in targets], note


def _budget_levels(
    base: Base, least_usd: float, points: int, settings: SolverSettings
) -> tuple[list[PointTask], Levels, str]:
    """``points`` budget.total levels log-spaced from just above ``least_usd`` to ``FRONTIER_BUDGET_SPAN`` times it."""
    low = math.ceil(least_usd) + 1.0  # above the least cost, so cent rounding never bites
    budgets = [tidy(low * FRONTIER_BUDGET_SPAN ** (i / (points - 1))) for i in range(points)]
    tasks = [
        point_task(base, i + 1, [(_BUDGET_TOTAL, b)], objective="max_throughput", solver=settings, detail="design")
        for i, b in enumerate(budgets)
    ]
    note = (
        f"budget.total from {format_value(budgets[0], 'money')} to {format_value(budgets[-1], 'money')} "
        f"({points} levels, log-spaced from the least cost), most capacity within each"
    )
    return tasks, [{"budget_usd": b} for b in budgets], note


def _frontier_point(out: PointOutcome, **level: float | None) -> FrontierPoint:
    d = out.design
    if d is None:
        return FrontierPoint(status=out.status, **level)
    return FrontierPoint(
        status=out.status,
        design=d.summary,
        shape=shape_of(d),
        total_usd=d.costs.total_usd,
        p95_latency_s=p95_of(d),
        throughput=throughput_of(d)[0],
        **level,
    )


def _mark_frontier(pts: Sequence[FrontierPoint], against: Against) -> list[FrontierPoint]:
    """The points with ``on_frontier`` set, cheapest first and those without a design last."""

    def value(p: FrontierPoint) -> float | None:
        return p.p95_latency_s if against == "latency" else p.throughput

    scored = [(i, p.total_usd, value(p)) for i, p in enumerate(pts) if p.total_usd is not None and value(p) is not None]
    flags = pareto([(c, v) for _, c, v in scored], maximise=against == "throughput")  # type: ignore[misc]
    on = {i for (i, _, _), f in zip(scored, flags, strict=True) if f}
    marked = [p.model_copy(update={"on_frontier": i in on}) for i, p in enumerate(pts)]
    marked.sort(key=lambda p: (p.total_usd is None, p.total_usd or 0.0))
    return marked


def run_frontier(
    base: Base,
    *,
    against: Against = "latency",
    points: int = DEFAULT_FRONTIER_POINTS,
    solver: SolverSettings | None = None,
    jobs: int = 1,
    on_done: Callable[[int], None] | None = None,
) -> FrontierResult:
    """The Pareto frontier of total cost against p95 latency (or against throughput).

    Latency: the least-cost design with every serving workload's ``p95_latency`` removed (TTFT and
    TPOT targets stay) gives the slow, cheap end and its p95 at rated load ``L``; then ``points``
    targets log-spaced from just below ``L`` down to ``L / FRONTIER_LATENCY_SPAN`` are each planned at
    least cost. Tighter targets buy more replicas at lower load, faster GPUs or lighter quantization;
    targets nothing can meet come back infeasible and are left off the frontier.

    Throughput: the least-cost design as given, then ``points`` ``budget.total`` levels log-spaced from
    that cost to ``FRONTIER_BUDGET_SPAN`` times it, each planned with ``max_throughput`` (whose
    tie-break is the least cost).

    Then dominated points (another at most as dear and at least as good) are marked off.
    """
    settings = solver or SolverSettings()
    serving = first_workload(base.data, ("serving",))
    if against == "latency" and serving is None:
        raise SweepError("a latency frontier needs a serving workload", fix="use --against throughput")
    if points < 2:
        raise SweepError("--points must be at least 2")

    def result(pts: list[FrontierPoint], notes: list[str]) -> FrontierResult:
        return FrontierResult(
            requirement=base.name,
            file=str(base.path),
            against=against,
            objective="min_cost" if against == "latency" else "max_throughput",
            throughput_unit="requests/s" if serving is not None else "tokens/s",
            target=_own_target(base, against, serving),
            points=pts,
            notes=notes,
        )

    edit = _latency_target(None) if against == "latency" else None
    # Every point differs from the first in p95 targets only (latency: the rate search is redone) or
    # in budget.total only (throughput: the candidates are the same): vary.reuse_of's "physics" and "table".
    # A frontier point shows its design alone (no binding constraints, detail="design"); only the cheapest
    # point's conflict is read, when it has no design (planned again for it).
    first = point_task(base, 0, [], objective="min_cost", solver=settings, edit=edit, reuse="physics", detail="design")
    cache = PointCache()
    cheapest = run_tasks([first], jobs=1, cache=cache)[0]
    if cheapest.design is None and cheapest.status == "infeasible":
        cheapest = run_tasks([replace(first, detail="binding")], jobs=1, cache=cache)[0]
    if cheapest.design is None:
        return result([], [f"no design at any cost: {cheapest.detail}"])
    if against == "latency":
        slowest = p95_of(cheapest.design)
        assert slowest is not None
        tasks, levels, note = _latency_levels(base, slowest, points, settings)
    else:
        tasks, levels, note = _budget_levels(base, cheapest.design.costs.total_usd, points, settings)
    outcomes = run_tasks(tasks, jobs=jobs, on_done=on_done, cache=cache)
    planned = [_frontier_point(o, **lv) for o, lv in zip(outcomes, levels, strict=True)]
    pts = _mark_frontier([_frontier_point(cheapest), *planned], against)
    on = sum(p.on_frontier for p in pts)
    infeasible = [p for p in pts if p.total_usd is None]
    notes = [note, f"{on} designs on the frontier; {len(pts) - on - len(infeasible)} dominated or repeated"]
    if infeasible and against == "latency":
        tightest = min(p.p95_target_s or 0.0 for p in infeasible)
        loosest = max(p.p95_target_s or 0.0 for p in infeasible)
        notes.append(
            f"no design meets p95_latency {format_value(loosest, 'duration')}"
            + (f" or less (tried down to {format_value(tightest, 'duration')})" if tightest != loosest else "")
        )
    return result(pts, notes)


__all__ = [
    "DEFAULT_FRONTIER_POINTS",
    "FRONTIER_BUDGET_SPAN",
    "FRONTIER_LATENCY_SPAN",
    "Against",
    "FrontierPoint",
    "FrontierResult",
    "pareto",
    "run_frontier",
]
