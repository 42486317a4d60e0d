"""A trade's target probes on cut-down tables (explain/trades.py) and independent solves side by side
(Planner.concurrently): the same answers as the whole table and as solves in turn, with less work."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from clusterplan.candidates.build import usd_per_gpu_floor
from clusterplan.candidates.serving import CostCap, fewest_replicas, within_cap
from clusterplan.catalog.load import Catalog
from clusterplan.explain.trades import at_resolution
from clusterplan.planner.budget import Share, TimeBudget
from clusterplan.planner.families.goals import Bound, Goal
from clusterplan.planner.ranking import rank_designs, rank_designs_and
from clusterplan.planner.solve import Planner
from clusterplan.units import HOURS_PER_MONTH
from conftest import example
from test_planner_families import cloud, owned, row, serve, tbl


def test_a_gpus_floor_is_its_cheapest_offering_over_the_horizon() -> None:
    """Cloud: instance-hours over the horizon per GPU; owned: capital plus energy, energy only when owned already."""
    floor = usd_per_gpu_floor([cloud("a", 2, 3.0), owned("a", 8, 50_000.0)], 12.0)
    assert floor["a"] == pytest.approx(min(3.0 * HOURS_PER_MONTH * 12 / 2, (50_000.0 + 40.0 * 8 * 12) / 8))
    assert usd_per_gpu_floor([owned("a", 8, 50_000.0, inv=1)], 12.0)["a"] == pytest.approx(40.0 * 12)


def test_a_row_over_the_cap_is_left_out_and_one_under_it_kept() -> None:
    """One shape serves 8 req/s: 2 replicas of the 4 req/s row (2 GPUs at $100: $200), 8 of the 1 req/s row ($800)."""
    fast, slow = row("a", rate=4.0), row("a", rate=1.0)
    assert fewest_replicas(8.0, 4.0, alone=True) == 2 and fewest_replicas(8.0, 4.0, alone=False) == 1
    assert fewest_replicas(8.0, 8.0 / 3.0, alone=True) == 3  # a float quotient a hair over 3 is not rounded up to 4
    cap = CostCap(max_usd=500.0, usd_per_gpu={"a": 100.0})
    assert within_cap([fast, slow], cap, 8.0, mixed=False, targets=False) == [fast]
    # Mixed shapes: a row may serve with one replica, so neither is over the cap.
    assert within_cap([fast, slow], cap, 8.0, mixed=True, targets=False) == [fast, slow]
    assert not CostCap(max_usd=200.0, usd_per_gpu={"a": 100.0}).excludes("a", 1, 2)  # exactly at the cap: kept


@pytest.fixture(scope="module")
def seventy_b(catalog: Catalog) -> tuple[Planner, object]:
    from clusterplan.candidates.build import CandidateCache, build_candidates
    from clusterplan.pipeline import retargeter
    from clusterplan.requirement.load import load_requirement

    resolved = load_requirement(example("70b-serving"), catalog)
    cache = CandidateCache()
    table = build_candidates(resolved, catalog, cache=cache)
    return Planner(table), retargeter(resolved, catalog, table, cache=cache)


@pytest.mark.slow
def test_a_cut_down_probe_answers_as_the_whole_table(seventy_b: tuple[Planner, object]) -> None:
    """70B example: at loosened targets, the probe without the rows over the best total finds the same cheapest
    total under it as the probe of every row (both at the plan's resolution), from far fewer rows."""
    planner, retarget = seventy_b
    best = planner.solve(goal=Goal.MIN_TOTAL)
    assert best.solution is not None
    cheaper = Bound(Goal.MIN_TOTAL, best.solution.total_cents - 1)
    for factor in (1.05, 2.0):
        factors = {(0, "p95_latency"): factor, (0, "p95_ttft"): factor}
        outs = []
        for cap in (None, (best.solution.total_cents - 1) / 100.0):
            table = at_resolution(retarget(factors, max_usd=cap), planner)  # type: ignore[operator]
            outs.append((len(table.workloads[0].rows), Planner(table).solve(bounds=[cheaper])))
        (whole_rows, whole), (cut_rows, cut) = outs
        assert cut_rows < whole_rows / 2
        assert (cut.status, cut.objective) == (whole.status, whole.objective)


def test_independent_solves_side_by_side_are_the_solves_in_turn() -> None:
    """The same outcomes and the same budget charged, in the same order, as one after the other."""
    t = tbl(serve([row("a", rate=4.0), row("p", rate=1.0)], demand=8.0), [cloud("a", 1, 3.0), cloud("p", 1, 1.0)])
    caps = [300_000, 1_000_000, 10_000_000, 20_000_000]

    def calls(p: Planner) -> list:
        return [lambda c=c: p.solve(bounds=[Bound(Goal.MIN_TOTAL, c)]) for c in caps]

    in_turn, side = Planner(t, budget=TimeBudget(10.0)), Planner(t, budget=TimeBudget(10.0))
    expected = [c() for c in calls(in_turn)]
    got = side.concurrently(calls(side))
    assert [(o.status, o.objective, o.solution) for o in got] == [(o.status, o.objective, o.solution) for o in expected]
    assert _used(side) == _used(in_turn) and side.solves == in_turn.solves


def _used(p: Planner) -> float:
    """Units the planner's command budget has been charged."""
    assert isinstance(p.budget, TimeBudget)
    return p.budget.units_used


def test_calls_side_by_side_inside_a_call_side_by_side_draw_on_its_share() -> None:
    """Nested: the inner calls' shares are slices of the outer call's share, their charges land there, and the
    outcomes and the budget charged are those of the solves in turn."""
    t = tbl(serve([row("a", rate=4.0), row("p", rate=1.0)], demand=8.0), [cloud("a", 1, 3.0), cloud("p", 1, 1.0)])
    caps = [300_000, 1_000_000, 10_000_000]
    outer: list[object] = []

    def calls(p: Planner) -> list:
        def solve(c: int):  # type: ignore[no-untyped-def]
            return lambda: p.solve(bounds=[Bound(Goal.MIN_TOTAL, c)])

        def nested() -> list:
            out = p.concurrently([solve(caps[0]), solve(caps[1])])
            outer.append(p.meter())  # this call's meter, after the inner calls
            return out

        return [nested, solve(caps[2])]

    def flat(results: list) -> list:
        inner, last = results
        return [(o.status, o.objective, o.solution) for o in [*inner, last]]

    in_turn = Planner(t)
    expected = [c() for c in calls(in_turn)]
    side = Planner(t)
    outer.clear()
    got = side.concurrently(calls(side), fractions=(0.25, 0.25))
    assert flat(got) == flat(expected)
    assert _used(side) == pytest.approx(_used(in_turn), rel=1e-12)
    assert side.solves == in_turn.solves
    share = outer[0]
    assert isinstance(share, Share) and share.budget is side.budget
    assert len(share.charges) == 2  # the two inner solves, charged to the outer call's share


@pytest.mark.slow
def test_the_explanation_beside_the_ranking_is_the_explanation_after_it(
    seventy_b: tuple[Planner, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """70B example: explaining the best design while the other designs are ranked gives the designs, the
    explanation (trades and their probes included) and the budget charged of ranking first, explaining after.
    The ranking's share is held at an eighth (the 70B's four further designs at its first design's 0.033 units
    each fit it), whatever the default: the run beside is what is compared."""
    from clusterplan.explain.binding import explain
    from clusterplan.planner import ranking

    monkeypatch.setattr(ranking, "RANK_SHARE", 1.0 / 8.0)
    monkeypatch.setattr(ranking, "BESIDE_SHARE", ranking.MAX_SHARED_FRACTION - 1.0 / 8.0)

    base, retarget = seventy_b
    in_turn = Planner(base.table)
    ranked = rank_designs(in_turn, top=5)
    expected = explain(in_turn, ranked.designs[0], retarget=retarget)  # type: ignore[arg-type]

    side = Planner(base.table)
    threads: list[str] = []

    def beside(best):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return explain(side, best, retarget=retarget)

    got_ranked, got = rank_designs_and(side, beside, top=5)
    assert threads and threads[0] != threading.main_thread().name  # it did run beside, on another thread
    assert [(d.objective, d.solution) for d in got_ranked.designs] == [
        (d.objective, d.solution) for d in ranked.designs
    ]
    assert got == expected
    assert any(c.trade is not None for c in got.constraints)  # the probes ran (a trade's target search)
    assert _used(side) == pytest.approx(_used(in_turn), rel=1e-9)


@pytest.mark.slow
def test_a_family_binds_exactly_when_switching_it_off_unbounded_finds_a_better_design(
    seventy_b: tuple[Planner, object],
) -> None:
    """The binding checks hold each switched-off solve to a design better than the best (a faster proof when the
    family does not bind): the verdict and the relaxed total are those of the switched-off optimum itself."""
    from clusterplan.explain.binding import _checks

    base, _ = seventy_b
    planner = Planner(base.table)
    best = rank_designs(planner, top=1).designs[0]
    assert best.objective is not None
    verdicts = {}
    for check, _relaxed in _checks(planner, best):
        if check.family not in planner.families:
            continue
        off = planner.solve(goal=Goal.MIN_TOTAL, on=[f for f in planner.families if f != check.family])
        assert off.objective is not None
        binds = off.objective <= best.objective - 1
        verdicts[check.family] = binds
        assert (check.status == "binding") == binds, check.family
        if binds:
            assert check.relaxed_total_usd == pytest.approx(off.objective / 100.0)
    assert set(verdicts.values()) == {True, False}  # both kinds checked


@pytest.mark.slow
def test_a_target_trade_is_the_plan_at_the_moved_targets_and_none_where_that_is_no_cheaper(
    catalog: Catalog, tmp_path: Path
) -> None:
    """70B example on H200, aggregated (its end-to-end target binds): with a verification (planning at the moved targets, the scheduler simulation's re-search
    included) a p95-target trade states that plan's design 1 and its total; where that plan returns nothing cheaper
    than the best design (every cheaper design rejected in simulation), no target move is offered."""
    from clusterplan.candidates.build import CandidateCache, build_candidates
    from clusterplan.explain.binding import explain
    from clusterplan.pipeline import PlanOptions, plan_table, retargeter
    from clusterplan.requirement.load import load_requirement

    path = tmp_path / "70b.yaml"
    text = example("70b-serving").read_text().replace("p95_latency: 5s", 'p95_latency: 5s\n    disaggregation: "off"')
    path.write_text(text + "constraints:\n  allowed_gpus: [h200]\n")
    resolved = load_requirement(path, catalog)
    cache = CandidateCache()
    base = Planner(build_candidates(resolved, catalog, cache=cache))
    retarget = retargeter(resolved, catalog, base.table, cache=cache)
    best = Planner(base.table).solve(goal=Goal.MIN_TOTAL)
    assert best.solution is not None
    same = plan_table(base.table, PlanOptions(top=1, explain="design"))  # the best design itself: nothing cheaper
    asked: list[object] = []

    def rejecting(factors, first_only=False, meter=None):  # type: ignore[no-untyped-def]
        asked.append(dict(factors))
        return same

    def latency(verify):  # type: ignore[no-untyped-def]
        (lat,) = [
            c
            for c in explain(Planner(base.table), best, retarget=retarget, verify=verify).constraints
            if c.family == "latency"
        ]
        assert lat.status == "binding"
        return lat

    # the analytical model alone admits a cheaper design at looser targets
    analytical = latency(None).trade
    assert analytical is not None and analytical.least and "→" in analytical.change
    rejected = latency(rejecting).trade
    assert asked  # each cheaper design the analytical search found was planned
    # no target move is offered (at most the targets dropped, the switched-off optimum: an upper bound)
    assert rejected is None or (not rejected.least and "→" not in rejected.change), rejected
    cheaper = same.designs[0].model_copy(
        update={
            "summary": "the verified design",
            "costs": same.designs[0].costs.model_copy(update={"total_usd": same.designs[0].costs.total_usd - 100.0}),
        }
    )
    verified = latency(lambda f, first_only=False, meter=None: same.model_copy(update={"designs": [cheaper]})).trade
    assert verified is not None
    assert verified.design == "the verified design" and verified.saving_usd == pytest.approx(100.0)
