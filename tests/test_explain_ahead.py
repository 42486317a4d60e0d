"""A solve's first ranking explains design 1 beside its further designs (pipeline.EXPLAIN_AHEAD), and a trade's
verification extends a ranking of one design to five (planner/solve.extended): both only reorder work, so the
plan is the one made without them, whether the search then settles on the first table or moves on."""

from __future__ import annotations

import pytest

from clusterplan import pipeline
from clusterplan.candidates.build import build_candidates
from clusterplan.catalog.load import Catalog
from clusterplan.evaluation import simulated
from clusterplan.evaluation.simulated import HeldLoad
from clusterplan.explain import designs as report
from clusterplan.pipeline import PlanOptions, plan_requirement
from clusterplan.plan import Plan, ServingPlan
from clusterplan.planner.ranking import extended, rank_designs_and
from clusterplan.planner.solve import Planner
from clusterplan.requirement.load import load_requirement
from conftest import example


def _signature(ranked):  # type: ignore[no-untyped-def]
    return ranked.status, [(d.objective, d.solution) for d in ranked.designs], ranked.cut_short


@pytest.mark.slow
def test_a_ranking_of_one_design_extended_to_five_is_the_ranking_of_five(catalog: Catalog) -> None:
    """70B example: design 1 ranked alone, then four more, gives the five designs, in order, of ranking five."""
    table = build_candidates(load_requirement(example("70b-serving"), catalog), catalog)
    one = Planner(table)
    got = extended(one, rank_designs_and(one, None, top=1, variants=False)[0], top=5)
    five = Planner(table)
    want = rank_designs_and(five, None, top=5, variants=False)[0]
    assert len(want.designs) == 5
    assert _signature(got) == _signature(want)


def _plan(catalog: Catalog, *, ahead: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Plan, int]:
    """The 70B example's plan (two designs), and how many explanations were started."""
    monkeypatch.setattr(pipeline, "EXPLAIN_AHEAD", ahead)
    started = [0]
    real = pipeline.explain

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        started[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "explain", counted)
    plan = plan_requirement(load_requirement(example("70b-serving"), catalog), catalog, PlanOptions(top=2))
    return plan, started[0]


def _second_design_misses(table, out, resolved, catalog):  # type: ignore[no-untyped-def]
    """What the simulation is made to say of the ranking's second design: its first group holds half its rate."""
    if _second_design_misses.seen == 0:
        _second_design_misses.seen += 1
        return []
    design = report.design(table, out.solution, rank=1, checks=[])
    w = next(w for w in design.workloads if isinstance(w, ServingPlan) and w.groups)
    g = w.groups[0]
    return [HeldLoad(w.workload, g, g.rate_rps * 0.5)]


@pytest.mark.slow
def test_an_explanation_stopped_ahead_leaves_the_plan_made_without_it(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """70B example: where design 2 is said to miss in simulation as soon as it is found, the explanation worked out
    ahead is stopped and design 1 explained again after the search: the same plan as explaining after the search
    (which, here, settles on the first table: only the ahead check is told of the miss)."""
    want, _ = _plan(catalog, ahead=False, monkeypatch=monkeypatch)
    _second_design_misses.seen = 0  # type: ignore[attr-defined]
    monkeypatch.setattr(pipeline, "simulated_held", _second_design_misses)
    got, started = _plan(catalog, ahead=True, monkeypatch=monkeypatch)
    assert started == 2  # stopped ahead, then the plan's own
    assert got.model_dump_json() == want.model_dump_json()


@pytest.mark.slow
def test_an_explanation_worked_out_ahead_is_the_plans_where_the_search_settles_on_the_first_table(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """70B example: the explanation worked out beside the first ranking is the plan's (one explanation, not two),
    and the plan is the one made explaining after the search."""
    want, started_after = _plan(catalog, ahead=False, monkeypatch=monkeypatch)
    got, started = _plan(catalog, ahead=True, monkeypatch=monkeypatch)
    assert (started, started_after) == (1, 1)
    assert got.model_dump_json() == want.model_dump_json()


@pytest.mark.slow
def test_an_explanation_ahead_of_a_search_that_moves_on_is_not_the_plans(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """70B example: where the explanation worked out ahead runs to its end and the simulation then makes the search
    move to another table (design 2 said to miss, after the ranking), the plan explains the table it settles on: the
    plan made explaining after the search."""
    real = simulated.held_loads
    monkeypatch.setattr(pipeline, "simulated_held", lambda *args: [])  # the ahead check sees no miss
    resolved = load_requirement(example("70b-serving"), catalog)
    calls = [0]

    def misses_once(design, at, catalog, seen=None):  # type: ignore[no-untyped-def]
        if at is resolved:  # the search's own checks (a trade's verification plans at moved targets: not these)
            calls[0] += 1
            if calls[0] == 2:  # the first ranking's design 2
                w = next(w for w in design.workloads if isinstance(w, ServingPlan) and w.groups)
                return [HeldLoad(w.workload, w.groups[0], w.groups[0].rate_rps * 0.5)]
        return real(design, at, catalog, seen)

    monkeypatch.setattr(simulated, "held_loads", misses_once)
    plans = []
    for ahead in (False, True):
        calls[0] = 0
        monkeypatch.setattr(pipeline, "EXPLAIN_AHEAD", ahead)
        plans.append(plan_requirement(resolved, catalog, PlanOptions(top=2)))
    want, got = plans
    assert calls[0] >= 2  # the search did see design 2 miss
    assert got.model_dump_json() == want.model_dump_json()


@pytest.mark.slow
def test_a_trades_verification_draws_on_its_callers_meter(catalog: Catalog) -> None:
    """70B example: planning at moved targets for a trade solves on the meter its caller gives (the explanation's
    share where it runs beside the ranking): on a spent one it plans nothing, on the command's budget it plans."""
    from dataclasses import replace

    from clusterplan.candidates.build import CandidateCache
    from clusterplan.pipeline import Rankings, _Context, _plan_in, retargeter, verifier
    from clusterplan.planner.budget import Share, TimeBudget

    resolved = load_requirement(example("70b-serving"), catalog)
    cache = CandidateCache()
    table = build_candidates(resolved, catalog, cache=cache)
    retarget = retargeter(resolved, catalog, table, cache=cache)
    ctx = _Context(retarget=retarget, budget=TimeBudget(10.0), rankings=Rankings())

    def replan_on(t, o, meter):  # type: ignore[no-untyped-def]
        return _plan_in(t, o, ctx if meter is None else replace(ctx, budget=meter))

    verify = verifier(retarget, PlanOptions(), resolved, catalog, replan_on)
    assert verify({(0, "p95_latency"): 1.2}, first_only=True).designs
    assert not verify({(0, "p95_latency"): 1.3}, first_only=True, meter=Share(TimeBudget(10.0), 0.0)).designs
