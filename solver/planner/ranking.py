"""Rank the designs of one planner: the best design, then the next best of other hardware, each with its
tie-break, the other layouts of each design, and design 1's explanation worked out beside the ranking of the others.

One solve of the model is :mod:`clusterplan.planner.solve`'s (:class:`~clusterplan.planner.solve.Planner`); this
module chooses which solves a ranking makes and in what order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from clusterplan.planner.families.goals import Bound, Goal
from clusterplan.planner.solve import MAX_SHARED_FRACTION, Outcome, Planner, Solution
from clusterplan.planner.status import SolveStatus

T = TypeVar("T")


# Each objective's primary goal (the tie-break after it: fewest GPUs for min_cost, else least cost).
PRIMARY_GOAL: dict[str, Goal] = {
    "min_cost": Goal.MIN_TOTAL,
    "max_throughput": Goal.MAX_SERVED_RATIO,
    "min_latency": Goal.MIN_P95,
}


@dataclass
class Ranked:
    """The top designs, best first by the objective, and how the first solve went.

    ``first`` is the primary solve with no design excluded: its bound holds for every design, and
    its status says whether the best design is proven optimal. ``cut_short[i]``: design ``i``'s own
    solves stopped at the time limit (its objective may not be the best its signature allows).
    """

    status: SolveStatus
    designs: list[Outcome]
    first: Outcome  # the primary solve with nothing excluded (status, bound)
    cut_short: list[bool] = field(default_factory=list)

    @property
    def objective(self) -> float | None:
        """The best design's objective (the plan's reported objective)."""
        return self.designs[0].objective if self.designs else self.first.objective


def _goal_value(planner: Planner, out: Outcome, goal: Goal) -> float:
    """The objective's aggregate as the design ``out`` sets it (not the solve's own objective)."""
    return float(out.values[goal.variable(planner.v).index])


def rank_designs(planner: Planner, *, top: int = 5) -> Ranked:
    """Best design, then the next best with a different signature, up to ``top`` designs.

    Each design takes two solves: the primary objective, then the tie-break with the primary bounded
    by its optimum (min_cost: fewer GPUs, then more headroom; the other objectives: least cost).
    A no-good cut on the signature (shapes used per workload, cloud/owned per workload) makes the
    next design distinct. Each design's objective is read from its own solution, and the designs are
    returned sorted by it (a solve cut short by the time limit can find a later design better than
    an earlier one). When the command's time budget is spent, fewer designs are returned.
    """
    return rank_designs_and(planner, None, top=top)[0]


# Of what is left after the best design, the shares of the other designs' ranking and of the work done on
# the best design beside it (rank_designs_and): the ranking needs little (0.07 units at most on the examples,
# of 2 at the default limit), an explanation up to 0.41 (13B train-then-serve). An eighth, so that four further
# designs at the 70B's first design's 0.033 units each fit it (a sixteenth did not: the two ran in turn).
RANK_SHARE = 1.0 / 8.0
BESIDE_SHARE = MAX_SHARED_FRACTION - RANK_SHARE


def rank_designs_and(
    planner: Planner,
    beside: Callable[[Outcome], T] | None,
    *,
    top: int = 5,
    variants: bool = True,
    each_found: Callable[[Outcome], None] | None = None,
) -> tuple[Ranked, T | None]:
    """:func:`rank_designs`, and ``beside`` (an explanation) of the best design: the same results as the
    ranking followed by ``beside(ranked.designs[0])``, faster.

    When the first design's solves are proven optimal, it is the best whatever follows (a later design costs
    no less, and the sort is stable), so ``beside`` runs alongside the ranking of the others
    (:meth:`Planner.concurrently`: the sequential results, or the calls are redone in turn). ``variants``: each
    design's other layouts on its hardware (False: none looked for, as a what-if point shows none). ``each_found``:
    called with each design as it is found, design 1 before ``beside`` starts, the others on the ranking's thread
    (where they run side by side): a caller may tell ``beside`` there that its work is not wanted.
    """
    goal = PRIMARY_GOAL[planner.objective]
    meter = planner.meter()
    before = meter.units_left()
    first, design = _next_design(planner, goal, [])
    found = [] if design is None else [design]
    extra: T | None = None
    early = beside is not None and design is not None and not design[1] and top > 1
    # Each further design takes about what the first one took: where the ranking's share cannot hold them (a
    # fleet's), it would be cut and both calls redone in turn, the explanation's work thrown away with it.
    fits = RANK_SHARE * meter.units_left() >= (top - 1) * (before - meter.units_left())
    if design is not None:
        best = design[0]
        assert best.solution is not None
        nogoods = [best.solution]
        if each_found is not None:
            each_found(best)

        def further() -> list[tuple[Outcome, bool]]:
            more = _more_designs(planner, goal, nogoods, top - 1, each_found)
            if variants and early:  # beside the call's work too: each design's layouts are its own solves
                add_variants(planner, [best, *(out for out, _ in more)])
            return more

        if early:
            assert beside is not None
            calls = [further, lambda: beside(best)]
            more, side = (
                planner.concurrently(calls, fractions=(RANK_SHARE, BESIDE_SHARE))
                if fits
                else [call() for call in calls]  # in turn: what concurrently returns when the ranking is cut
            )
            found += more  # type: ignore[arg-type]
            extra = side  # type: ignore[assignment]
        else:
            found += further()
    designs, cut_short = _in_order(goal, found)
    ranked = Ranked(status=first.status, designs=designs, first=first, cut_short=cut_short)
    if variants and not early:
        add_variants(planner, ranked.designs)
    if early:
        assert ranked.designs[0] is found[0][0]  # the design ``beside`` ran on is the best
    elif beside is not None and ranked.designs:
        extra = beside(ranked.designs[0])
    return ranked, extra


def extended(planner: Planner, ranked: Ranked, *, top: int) -> Ranked:
    """``ranked`` (a ranking of at most one design, made by ``rank_designs_and(planner, None, top=1, variants=False)``)
    with its further designs up to ``top``: the ranking ``rank_designs_and(planner, None, top=top, variants=False)``
    makes, the first design's two solves not made again (the further designs are the same solves on the same model,
    in the same order)."""
    assert len(ranked.designs) <= 1
    if not ranked.designs or top <= 1:
        return ranked
    goal = PRIMARY_GOAL[planner.objective]
    best = ranked.designs[0]
    assert best.solution is not None
    found = [(best, ranked.cut_short[0]), *_more_designs(planner, goal, [best.solution], top - 1)]
    designs, cut_short = _in_order(goal, found)
    return replace(ranked, designs=designs, cut_short=cut_short)


def _in_order(goal: Goal, found: list[tuple[Outcome, bool]]) -> tuple[list[Outcome], list[bool]]:
    """The designs found (each with whether its solves were cut short), best first by ``goal``'s objective. Stable:
    equal objectives keep the order they were found in (the optimum first)."""
    sign = 1.0 if goal.minimise else -1.0
    ordered = sorted(found, key=lambda pair: sign * (pair[0].objective or 0.0))
    return [out for out, _ in ordered], [cut for _, cut in ordered]


def _next_design(planner: Planner, goal: Goal, nogoods: list[Solution]) -> tuple[Outcome, tuple[Outcome, bool] | None]:
    """The primary solve excluding ``nogoods`` and, when it finds one, the design (after the tie-break) and
    whether its solves were cut short."""
    prim = planner.solve(goal=goal, nogoods=nogoods)
    if not prim.status.has_solution or prim.objective is None:
        return prim, None
    opt = round(prim.objective)
    if planner.objective == "min_cost":
        tb = planner.solve(bounds=[Bound(goal, opt)], nogoods=nogoods, tiebreak=True, hint=prim)
    else:
        tb = planner.solve(goal=Goal.MIN_TOTAL, bounds=[Bound(goal, opt)], nogoods=nogoods, hint=prim)
    best = tb if tb.status.has_solution else prim
    best.objective, best.bound = _goal_value(planner, best, goal), prim.bound
    cut = prim.status is not SolveStatus.OPTIMAL or tb.status is not SolveStatus.OPTIMAL
    best.status = SolveStatus.FEASIBLE if prim.status is SolveStatus.FEASIBLE else best.status
    assert best.solution is not None
    return prim, (best, cut)


LAYOUT_VARIANTS = 2  # other layouts of one design's hardware a plan lists ("also runs as")


def add_variants(planner: Planner, designs: Iterable[Outcome]) -> None:
    """Each of ``designs`` with its other layouts (:func:`_layout_variants`), in the order given (a ranking's: what
    ``rank_designs_and(..., variants=True)`` adds to a ranking made without them)."""
    for out in designs:
        out.variants = _layout_variants(planner, out)


def _layout_variants(planner: Planner, out: Outcome) -> list[Solution]:
    """Up to LAYOUT_VARIANTS other layouts on ``out``'s hardware (the same GPU counts per type and deployment, the
    same aggregated / disaggregated choice), each of a signature none before it has; fewer when the budget is spent.
    The hardware fixes the cost up to cloud training runs: the cheapest such layout first."""
    assert out.solution is not None
    seen = [out.solution]
    for _ in range(LAYOUT_VARIANTS):
        if planner.meter().spent():
            break
        got = planner.solve(goal=Goal.MIN_TOTAL, nogoods=seen, layouts_of=out.solution)
        if not got.status.has_solution or got.solution is None:
            break
        seen.append(got.solution)
    return seen[1:]


def _more_designs(
    planner: Planner,
    goal: Goal,
    nogoods: list[Solution],
    count: int,
    each_found: Callable[[Outcome], None] | None = None,
) -> list[tuple[Outcome, bool]]:
    """Up to ``count`` further designs, each distinct from ``nogoods`` and the ones before it; fewer when the
    budget is spent (the time limit: fewer alternatives rather than an overrun). ``each_found``: called with each."""
    found: list[tuple[Outcome, bool]] = []
    excluded = list(nogoods)
    for _ in range(count):
        if planner.meter().spent():
            break
        _, design = _next_design(planner, goal, excluded)
        if design is None:
            break
        found.append(design)
        if each_found is not None:
            each_found(design[0])
        assert design[0].solution is not None
        excluded.append(design[0].solution)
    return found
