"""What the points a sweep planned prove about its other points: outcomes read off without planning them, each the
outcome its point planned alone gives (issue 33: a grid's work only where it is read).

Pure data in and out; no planning, no printing. Only for the min_cost objective, along two kinds of axis:

1. **budget.total.** A point is planned in rounds (``pipeline.simulation_searched``): round 0 solves the candidate
   table T0; each later round solves the table before it with the rows the last design missed on in the scheduler
   simulation held at the load the simulation meets the targets at (T1, T2, ...), and a round with no design leaves
   the design before it. No table reads the budget (the rows are the same at every budget, ``vary.reuse_of``; the
   simulation reads a design, the targets and the demand). So along a *line* (the other axes fixed) the chain of
   designs D0, D1, ... (Di the optimum of Ti with no budget, costing ci in the model's cents) is the same at every
   budget, and c0 <= c1 <= ... (each table is the one before it with rows capped). The budget only bounds the very
   total the objective minimises (``budget_total``: total_cents <= cents_down(B)), so at budget B round i returns Di
   where ci <= B and nothing where ci > B (its tie-break runs on the same set of optima either way). The point at B
   is therefore Dm where cm <= B and the chain stops at m or c(m+1) > B, and has no design where B < c0. A point
   planned at b tells: with design Dm after m rejected rounds, cm exactly (the plan's objective) and that the chain
   stops at m for every B <= b; with no design (infeasible), that every B <= b has none.
2. **gpu_price.<gpu>** (the purchase price): a higher price raises the cost of every design that holds that GPU and
   of no other. Where a line's chain D0..DM holds none of it, each Di is still the optimum at a higher price (its
   cost is the same, every other design's no less), so the tables and rounds up to M are the same there: the facts
   of (1) about them carry over, and so do c(M+1) as a lower bound and every budget with no design.

Read only from points planned "optimal" (or "infeasible"), with their rows loaded as a file of their own would be
(a value a file rejects is its own 'invalid' row, never derived). As everywhere a sweep row is held to its point
planned alone, this takes the solves to end within the time limit and exactly tied designs (same total, GPUs and
headroom) to be one: the tests hold derived rows to points planned alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from clusterplan.plan import Design
from clusterplan.planner import scaling
from clusterplan.whatif.points import PointOutcome
from clusterplan.whatif.vary import Axis


@dataclass(frozen=True)
class _Link:
    """Round ``m`` of a line's chain: a planned point whose design it is, and that design's total in cents."""

    outcome: PointOutcome
    cents: int


@dataclass
class _Line:
    """What the points planned on one line (every axis but the budget fixed) tell about its chain."""

    links: dict[int, _Link] = field(default_factory=dict)  # round -> its design
    stops: list[tuple[float, int]] = field(default_factory=list)  # (b, m): planned at b, the chain stopped at m
    infeasible_to: float = -math.inf  # the largest budget planned with no design


@dataclass
class _View:
    """A line's facts, its own and those carried over from the same line at lower prices (section 2)."""

    links: dict[int, _Link]
    floors: dict[int, int]  # round -> its total is at least this, cents
    stops: list[tuple[float, int]]
    infeasible_to: float


def budget_axis(axes: Sequence[Axis]) -> int | None:
    """The index of the axis that sets budget.total, if any."""
    return next((i for i, a in enumerate(axes) if a.target.keys == ["budget", "total"]), None)


def price_axis(axes: Sequence[Axis]) -> int | None:
    """The index of the axis that sets a GPU's purchase price, if any."""
    return next((i for i, a in enumerate(axes) if a.target.where == "gpu_price"), None)


def applies(axes: Sequence[Axis], objective: str) -> bool:
    """Whether planned points can tell anything about the others: min_cost along a budget.total or price axis."""
    return objective == "min_cost" and (budget_axis(axes) is not None or price_axis(axes) is not None)


def _cents(budget_usd: float) -> float:
    """The budget as the model bounds the total, cents (no budget axis: unbounded along the line)."""
    if math.isinf(budget_usd):
        return math.inf
    return scaling.cents_down(budget_usd, what="budget.total")


class Known:
    """The outcomes of a sweep's planned points (:meth:`learn`) and what they prove about the others
    (:meth:`outcome`): the module docstring's two rules."""

    def __init__(self, axes: Sequence[Axis], objective: str) -> None:
        self.active = applies(axes, objective)
        self.budget = budget_axis(axes)
        self.price = price_axis(axes)
        self.gpu = axes[self.price].target.gpu if self.price is not None else None
        self.lines: dict[tuple[float, ...], _Line] = {}
        self._views: dict[tuple[float, ...], _View] = {}
        # Each point document's (requirement text, catalog override) 'invalid' outcome, None where it loads: a point
        # is read off only where its own file loads (sweep._read_off).
        self.loads: dict[tuple[str, str | None], PointOutcome | None] = {}

    def _key(self, values: Sequence[float]) -> tuple[float, ...]:
        return tuple(v for i, v in enumerate(values) if i != self.budget)

    def _budget_of(self, values: Sequence[float]) -> float:
        return values[self.budget] if self.budget is not None else math.inf

    def line_of(self, values: Sequence[float]) -> tuple[float, ...]:
        """The line a point lies on: its values but the budget."""
        return self._key(values)

    def order(self, values: Sequence[float]) -> tuple[float, ...]:
        """Which points to plan first: the lowest price (what a line proves carries to higher prices), then on each
        line the highest budget (a design there proves every budget down to its total)."""
        price = values[self.price] if self.price is not None else 0.0
        return (price, *self._key(values), -self._budget_of(values))

    def learn(self, out: PointOutcome) -> None:
        """Record a point planned for its design alone (``detail="design"``)."""
        if not self.active:
            return
        line = self.lines.setdefault(self._key(out.values), _Line())
        b = self._budget_of(out.values)
        if out.status == "infeasible" and out.design is None:
            line.infeasible_to = max(line.infeasible_to, b)
        elif out.status == "optimal" and out.design is not None and out.objective is not None:
            line.links.setdefault(out.rounds, _Link(out, round(out.objective)))
            line.stops.append((b, out.rounds))
        else:
            return
        self._views.clear()

    def _free(self, design: Design | None) -> bool:
        """The design holds none of the varied-price GPU."""
        return design is not None and self.gpu not in design.gpus_by_type

    def _below(self, key: tuple[float, ...]) -> list[_Line]:
        """The lines that differ from ``key`` only in a lower price (section 2)."""
        if self.price is None:
            return []
        at = self.price - (1 if self.budget is not None and self.budget < self.price else 0)
        return [
            line
            for other, line in self.lines.items()
            if other[at] < key[at] and other[:at] == key[:at] and other[at + 1 :] == key[at + 1 :]
        ]

    def _view(self, key: tuple[float, ...]) -> _View:
        if key in self._views:
            return self._views[key]
        own = self.lines.get(key, _Line())
        view = _View(dict(own.links), {m: k.cents for m, k in own.links.items()}, list(own.stops), own.infeasible_to)
        for line in self._below(key):
            free = 0  # rounds 0 .. free-1 hold none of the GPU: the same designs at the higher price
            while free in line.links and self._free(line.links[free].outcome.design):
                view.links.setdefault(free, line.links[free])
                view.floors[free] = line.links[free].cents
                free += 1
            if free in line.links:  # the first round that may differ: its total no lower at the higher price
                view.floors[free] = max(view.floors.get(free, 0), line.links[free].cents)
            view.stops += [(b, m) for b, m in line.stops if m < free]
            view.infeasible_to = max(view.infeasible_to, line.infeasible_to)
        self._views[key] = view
        return view

    def outcome(self, index: int, values: Sequence[float]) -> PointOutcome | None:
        """The outcome of the point at ``values`` as planning it alone gives it, where the points learned prove it;
        else None. A design's constraint margins are not carried (a row shows them only where it is planned again
        with its binding constraints)."""
        if not self.active:
            return None
        view = self._view(self._key(values))
        b = self._budget_of(values)
        cents = _cents(b)
        if b <= view.infeasible_to or (0 in view.floors and cents < view.floors[0]):
            return PointOutcome(index=index, values=list(values), status="infeasible")
        for m, link in view.links.items():
            if link.cents > cents:
                continue
            stops = any(at >= b and k == m for at, k in view.stops)
            if stops or (m + 1 in view.floors and view.floors[m + 1] > cents):
                design = link.outcome.design
                assert design is not None
                return link.outcome.model_copy(
                    update={
                        "index": index,
                        "values": list(values),
                        "design": design.model_copy(update={"constraints": []}),
                    }
                )
        return None


__all__ = ["Known", "applies", "budget_axis", "price_axis"]
