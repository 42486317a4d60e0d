"""The LP step for large models (``clusterplan.planner.lp_bound``): a valid bound, exact fixing.

The brute-force cross-check (``test_planner_bruteforce.py``) runs the fixing on small random tables;
these tests hold it on tables large enough for the planner to choose it by itself, against CP-SAT
alone given the time to prove its own optimum.
"""

from __future__ import annotations

import pytest

from clusterplan.planner import lp_bound
from clusterplan.planner.cpsat import cp_model
from clusterplan.planner.ranking import rank_designs
from clusterplan.planner.solve import RELAXATION_MIN_VARIABLES, Planner, SolverSettings
from clusterplan.planner.status import SolveStatus
from clusterplan.planner.synthetic import synthetic_table


@pytest.mark.slow
@pytest.mark.parametrize("mixed", [False, True])
def test_large_model_takes_the_lp_path_and_reaches_cp_sat_alone_optimum(mixed: bool) -> None:
    table = synthetic_table(gpu_types=96, serving=16, seed=7, mixed=mixed)
    auto = Planner(table, settings=SolverSettings(time_limit_s=60))
    assert len(auto.built.model.proto.variables) >= RELAXATION_MIN_VARIABLES
    fast = auto.solve()
    assert auto.lp_s > 0  # the LP ran: the model is large enough for "auto"
    alone = Planner(table, settings=SolverSettings(time_limit_s=60, relaxation="off")).solve()
    assert fast.status is SolveStatus.OPTIMAL and alone.status is SolveStatus.OPTIMAL
    assert fast.objective == alone.objective


def test_small_models_are_left_to_cp_sat() -> None:
    p = Planner(synthetic_table(gpu_types=3, serving=1, seed=1))
    assert p.solve().status is SolveStatus.OPTIMAL
    assert p.lp_s == 0


def _knapsack() -> tuple[cp_model.CpModel, list[cp_model.IntVar]]:
    """min 7a + 4b + 3c  s.t.  2a + 2b + c >= 3 (enforced by e),  e true,  a, b, c in {0, 1, 2}."""
    m = cp_model.CpModel()
    xs = [m.new_int_var(0, 2, n) for n in "abc"]
    e = m.new_bool_var("e")
    m.add(2 * xs[0] + 2 * xs[1] + xs[2] >= 3).only_enforce_if(e)
    m.add(e == 1)
    m.minimize(7 * xs[0] + 4 * xs[1] + 3 * xs[2])
    return m, xs


def test_relaxation_bound_is_below_the_integer_optimum_and_fixing_keeps_it() -> None:
    m, xs = _knapsack()
    rel = lp_bound.solve_relaxation(m.proto)
    assert rel.optimal
    assert rel.objective == pytest.approx(6.0)  # b = 1.5: 4 * 1.5
    s = cp_model.CpSolver()
    assert s.solve(m) == cp_model.OPTIMAL
    opt = round(s.objective_value)  # b = 1, c = 1: 7
    assert opt == 7 and rel.bound(opt) <= opt
    fixed = dict(rel.fixable(opt))
    # The LP prices cover at 2 (b's 4 for 2 units). a: reduced cost 7 - 2 * 2 = 3, so any solution
    # with a >= 1 costs at least 6 + 3 = 9 > 7: fixed at 0. c: reduced cost 3 - 2 = 1, and 6 + 1 = 7
    # does not exceed 7 (b = 1, c = 1 is the optimum): free. b is basic: free.
    assert fixed == {xs[0].index: 0}
    for i, value in fixed.items():
        m.add(m.get_int_var_from_proto_index(i) == value)
    assert s.solve(m) == cp_model.OPTIMAL and round(s.objective_value) == opt


def test_an_unenforced_row_is_dropped_and_an_infeasible_lp_is_reported() -> None:
    m = cp_model.CpModel()
    x = m.new_int_var(0, 3, "x")
    off = m.new_bool_var("off")
    m.add(x >= 10).only_enforce_if(off)  # never enforced once off is fixed false
    m.add(off == 0)
    m.minimize(x)
    assert lp_bound.solve_relaxation(m.proto).objective == pytest.approx(0.0)
    m.add(x >= 5)
    assert not lp_bound.solve_relaxation(m.proto).optimal


def test_ranking_with_the_lp_path_matches_cp_sat_alone() -> None:
    """Top designs: the tie-break reuses the min-cost LP's fixings; same optima as CP-SAT alone. The LP path is
    turned on for a table small enough for CP-SAT alone to rank quickly, where the LP fixes variables in every
    solve (240 of 660 in the first); that "auto" takes it on a large table is the test above."""
    table = synthetic_table(gpu_types=24, serving=4, seed=7)
    lp_ran: list[bool] = []

    def ranked(mode: str) -> list[tuple[float | None, int, int]]:
        p = Planner(table, settings=SolverSettings(time_limit_s=60, relaxation=mode))
        r = rank_designs(p, top=2)
        assert r.status is SolveStatus.OPTIMAL and all(d.status is SolveStatus.OPTIMAL for d in r.designs)
        lp_ran.append(p.lp_s > 0)
        out = []
        for d in r.designs:
            assert d.solution is not None
            out.append((d.objective, d.solution.total_cents, d.solution.gpus_in_use))
        return out

    real = lp_bound.Relaxation.fixable
    fixings: list[int] = []

    def counted(rel: lp_bound.Relaxation, incumbent: float) -> list[tuple[int, int]]:
        out = real(rel, incumbent)
        fixings.append(len(out))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lp_bound.Relaxation, "fixable", counted)
        with_lp = ranked("on")
    assert len(fixings) >= 2 and all(n > 0 for n in fixings)  # the primary solve and the tie-break fix variables
    assert with_lp == ranked("off")
    assert lp_ran == [True, False]
