"""Sweep points read off the points planned before them (issue 33), each the outcome its point planned alone gives.

- :class:`clusterplan.whatif.known.Known`, on outcomes made by hand: a design planned at a budget holds every budget
  down to its total (and past the total of the next round's design where that is known); no design, every budget
  below; the facts of a line carry to higher prices of a GPU its designs do not hold, and not where one does.
- On the 70B example (its first design, $493,444.40, misses in simulation; the search's next, $521,344.40, passes):
  a budget sweep's rows, a budget x H200-price grid's rows and the switch points bisected between them equal the
  points planned alone, while fewer points are planned than the rows and midpoints.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.physics import queueing
from clusterplan.pipeline import PlanOptions, plan_requirement
from clusterplan.plan import Design
from clusterplan.planner.solve import SolverSettings
from clusterplan.whatif import sweep as sweep_module
from clusterplan.whatif.known import Known
from clusterplan.whatif.points import PointCache, PointOutcome, PointTask, load_base, load_task, shape_of
from clusterplan.whatif.sweep import bisect_switch, build_tasks, run_sweep, switch_pairs
from clusterplan.whatif.vary import Axis, make_axis
from conftest import example

SERVING_70B = example("70b-serving")


@pytest.fixture
def mean_p95() -> Iterator[None]:
    """The analytical model with its p95s at their means (optimistic): the 70B's first choice, 4 aggregated MI300X
    TP2 replicas, is then rejected by the simulation and the search moves on to the pools, so a budget line holds
    the three outcomes the rules read across (none, the first design alone, the search's). The shipped model, whose
    p95s take the prompt queue and the busy period, chooses the pools at once on every example."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(queueing, "gamma_p95", lambda mean, variance: mean)
        yield


def _axes(*vary: str) -> list[Axis]:
    base, _ = load_base(SERVING_70B)
    return [make_axis(v, base.data, base.catalog, steps=2, log=False) for v in vary]


def _design(name: str, gpu: str) -> Design:
    fields: dict[str, Any] = {"summary": name, "gpus_by_type": {gpu: 8}, "constraints": []}
    return Design.model_construct(**fields)  # what Known reads of a design


def _planned(
    values: Sequence[float], design: Design | None = None, *, rounds: int = 0, usd: float = 0.0
) -> PointOutcome:
    if design is None:
        return PointOutcome(index=0, values=list(values), status="infeasible")
    return PointOutcome(
        index=0, values=list(values), status="optimal", design=design, rounds=rounds, objective=usd * 100
    )


def _summary(known: Known, *values: float) -> str | None:
    out = known.outcome(7, values)
    if out is None:
        return None
    assert out.index == 7 and out.values == list(values)
    return out.design.summary if out.design is not None else out.status


D0, D1 = _design("D0", "mi300x"), _design("D1", "mi300x")


def test_a_design_holds_every_budget_down_to_its_total() -> None:
    known = Known(_axes("budget=150k,2M"), "min_cost")
    known.learn(_planned([2e6], D1, rounds=1, usd=521_344.40))
    assert _summary(known, 1e6) == "D1"
    assert _summary(known, 521_344.40) == "D1"  # the budget bounds the total in whole cents: equal is within
    assert _summary(known, 521_344.39) is None  # below: the first round's design, or none; not known yet
    assert _summary(known, 2.5e6) is None  # above: a round with no design at 2M may find one
    known.learn(_planned([505e3], D0, rounds=0, usd=493_444.40))
    assert _summary(known, 521_000) == "D0"  # at least D0's total, under D1's (the next round's)
    assert _summary(known, 493_444.40) == "D0"
    assert _summary(known, 493_444.39) == "infeasible"  # under the least total of all
    known.learn(_planned([300e3]))
    assert _summary(known, 299e3) == "infeasible"


def test_no_design_at_a_budget_means_none_below_it() -> None:
    known = Known(_axes("budget=150k,2M"), "min_cost")
    known.learn(_planned([400e3]))
    assert _summary(known, 400e3) == "infeasible"
    assert _summary(known, 150e3) == "infeasible"
    assert _summary(known, 401e3) is None


def test_a_line_carries_to_higher_prices_of_a_gpu_its_designs_do_not_hold() -> None:
    known = Known(_axes("budget=150k,2M", "gpu_price.h200=20k,45k"), "min_cost")
    known.learn(_planned([2e6, 20e3], D1, rounds=1, usd=521_344.40))
    assert _summary(known, 1e6, 30e3) is None  # round 0's design unknown: it may hold H200s
    known.learn(_planned([505e3, 20e3], D0, rounds=0, usd=493_444.40))
    assert _summary(known, 1e6, 30e3) == "D1"
    assert _summary(known, 500e3, 45e3) == "D0"
    assert _summary(known, 400e3, 45e3) == "infeasible"
    assert _summary(known, 1e6, 10e3) is None  # a lower price can make an H200 design the cheapest


def test_a_line_whose_design_holds_the_gpu_carries_only_bounds() -> None:
    known = Known(_axes("budget=150k,2M", "gpu_price.h200=20k,45k"), "min_cost")
    h200 = _design("H", "h200")
    known.learn(_planned([2e6, 20e3], h200, rounds=0, usd=400e3))
    known.learn(_planned([300e3, 20e3]))
    assert _summary(known, 1e6, 20e3) == "H"
    assert _summary(known, 1e6, 30e3) is None  # dearer H200s: another design may be cheaper
    assert _summary(known, 399e3, 30e3) == "infeasible"  # no design costs less than the least at the lower price
    assert _summary(known, 250e3, 45e3) == "infeasible"
    # The same round at the higher price found on its own: where the chain stops there is its own to tell.
    known.learn(_planned([800e3, 45e3], _design("H'", "h200"), rounds=0, usd=600e3))
    assert _summary(known, 700e3, 45e3) == "H'"
    assert _summary(known, 1.5e6, 45e3) is None  # not the lower price's stop at 2M


@pytest.mark.parametrize(("objective", "vary"), [("max_throughput", "budget=150k,2M"), ("min_cost", "demand=300,3000")])
def test_nothing_is_read_off_where_the_rules_do_not_hold(objective: str, vary: str) -> None:
    known = Known(_axes(vary), objective)
    known.learn(_planned([2e6], D1, usd=500e3))
    assert known.outcome(0, [2e6]) is None


def test_a_point_whose_file_is_rejected_is_its_own_invalid_row(catalog: Catalog) -> None:
    base, _ = load_base(SERVING_70B)
    axis = make_axis("budget=1M,2M", base.data, catalog, steps=2, log=False)
    known = Known([axis], "min_cost")
    known.learn(_planned([2e6], D1, usd=500e3))
    [task, _] = build_tasks(base, [axis], objective="min_cost", solver=SolverSettings(), detail="design")
    bad = replace(task, text=task.text.replace("llama-3.1-70b", "llama-9-70b"))
    cache = PointCache()
    expected = load_task(bad, cache)
    assert isinstance(expected, PointOutcome) and expected.status == "invalid"
    assert known.outcome(bad.index, bad.values) is not None  # the rule alone would read it off ...
    assert sweep_module._read_off(bad, known, cache) == expected  # ... but its file is rejected, as planning it says


# ------------------------------------------------------------------------------------------------
# Held to the points planned alone (the 70B example)
# ------------------------------------------------------------------------------------------------


def _alone(task: PointTask) -> tuple[str, str | None, float | None]:
    cache = PointCache()
    loaded = load_task(task, cache)
    assert not isinstance(loaded, PointOutcome)
    resolved, catalog = loaded
    plan = plan_requirement(resolved, catalog, PlanOptions(top=1, explain="design", annotate=False, variants=False))
    if not plan.designs:
        return plan.status, None, None
    return plan.status, shape_of(plan.designs[0]), plan.designs[0].costs.total_usd


def _count_planned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    planned: list[int] = []
    run_tasks = sweep_module.run_tasks

    def counting(tasks: Sequence[PointTask], **kw: Any) -> list[PointOutcome]:
        planned.append(len(tasks))
        return run_tasks(tasks, **kw)

    monkeypatch.setattr(sweep_module, "run_tasks", counting)
    return planned


@pytest.mark.slow
def test_budget_rows_read_off_equal_each_point_planned_alone(monkeypatch: pytest.MonkeyPatch, mean_p95: None) -> None:
    base, _ = load_base(SERVING_70B)
    # No design; the first design alone (its next round finds none within budget); the search's design.
    axis = make_axis("budget=300k,505k,515k,700k,2M", base.data, base.catalog, steps=2, log=False)
    planned = _count_planned(monkeypatch)
    result = run_sweep(base, [axis], switch_tolerance=None, binding="changes")
    assert sum(planned) < len(result.rows) + 3  # the points planned, then the 3 rows worked out again
    tasks = build_tasks(base, [axis], objective="min_cost", solver=SolverSettings())
    for row, task in zip(result.rows, tasks, strict=True):
        assert (row.status, row.shape, row.total_usd) == _alone(task), task.values
    assert len({r.shape for r in result.rows}) == 3  # none, the first design, the search's


@pytest.mark.slow
def test_grid_rows_and_switch_points_read_off_equal_points_planned_alone(
    monkeypatch: pytest.MonkeyPatch, mean_p95: None
) -> None:
    """The dearer H200 price's row and switch points are read off the cheaper price's: each equals its point
    planned alone, and each switch point what bisect_switch finds planning every midpoint."""
    base, _ = load_base(SERVING_70B)
    axes = [
        make_axis(v, base.data, base.catalog, steps=2, log=False)
        for v in ("budget=300k,505k,700k", "gpu_price.h200=20k,45k")
    ]
    planned = _count_planned(monkeypatch)
    result = run_sweep(base, axes, switch_tolerance=0.05, binding="changes")
    monkeypatch.undo()
    tasks = build_tasks(base, axes, objective="min_cost", solver=SolverSettings(), detail="design")
    cache = PointCache()
    dearer = sweep_module.run_tasks(tasks[3:], cache=cache)
    for row, task, out in zip(result.rows[3:], tasks[3:], dearer, strict=True):
        assert (row.status, row.shape, row.total_usd) == _alone(task), task.values
        assert out.design is None or shape_of(out.design) == row.shape
    pairs = switch_pairs(dearer, axes)
    assert len(pairs) == 2 and len(result.switches) == 4  # none -> the first design -> the search's, at each price
    for (a, b), sp in zip(pairs, result.switches[2:], strict=True):
        assert bisect_switch(base, axes, a, b, objective="min_cost", solver=SolverSettings(), tolerance=0.05) == sp
    midpoints = sum(sp.bisections for sp in result.switches)
    assert sum(planned) < len(result.rows) + midpoints  # rows and midpoints read off, not planned
