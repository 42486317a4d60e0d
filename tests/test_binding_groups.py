"""The binding checks' group tests (explain/binding.py): families checked together where none binds give the
verdicts and relaxed optima of checking each family alone, in fewer solves; the deletion loop
(explain/infeasibility.py) keeps the conflict it found with a solve per member, without the solves the core answers."""

from __future__ import annotations

import pytest

from clusterplan.candidates.table import TP_NVLINK, CandidateTable
from clusterplan.explain.binding import constraint_checks
from clusterplan.explain.infeasibility import minimal_conflict
from clusterplan.planner.families import Relaxing, family
from clusterplan.planner.families.goals import Bound, Goal
from clusterplan.planner.ranking import rank_designs
from clusterplan.planner.solve import Planner
from clusterplan.planner.status import SolveStatus
from conftest import cloud, serving, srow, table

NVLINK_REASON = "P: tensor parallel 2 needs NVLink; P has PCIe only"


def _table(*, p_price: float, p_forbidden: bool) -> CandidateTable:
    """4 req/s with a p95 target, on A (TP1, $4/h) or P (TP2 over PCIe, ``p_price``/h, ruled out by NVLink or
    not); a monthly budget and a GPU cap, both slack: five families the checks solve for."""
    forbidden = ((TP_NVLINK, NVLINK_REASON),) if p_forbidden else ()
    rows = [srow("a", 1, rate=4.0), srow("p", 2, rate=8.0, forbidden=forbidden)]
    return table(
        [serving(rows, 4.0)],
        [cloud("a", 1, price=4.0), cloud("p", 2, price=p_price)],
        budget_monthly_usd=1_000_000.0,
        max_gpus=8,
    )


def _one_at_a_time(planner: Planner, best_total_usd: float) -> dict[str, float | None]:
    """Each family the checks solve for, switched off alone: the cheaper optimum it admits (None: it does not bind)."""
    out: dict[str, float | None] = {}
    for fid in planner.families:
        if Goal.MIN_TOTAL in family(fid).cannot_bind:
            continue
        off = planner.solve(on=[g for g in planner.families if g != fid])
        assert off.solution is not None
        total = off.solution.total_cents / 100.0
        out[fid] = total if total < best_total_usd - 0.005 else None
    return out


@pytest.mark.parametrize(
    ("p_price", "p_forbidden", "binds"),
    [
        (1.0, True, "tp_nvlink"),  # the cheap P is ruled out by NVLink alone: tp_nvlink binds, grouped with others
        (1.0, False, None),  # P is allowed and chosen: nothing binds
    ],
)
def test_grouped_checks_are_the_checks_one_family_at_a_time(
    p_price: float, p_forbidden: bool, binds: str | None
) -> None:
    planner = Planner(_table(p_price=p_price, p_forbidden=p_forbidden))
    best = rank_designs(planner, top=1).designs[0]
    assert best.solution is not None
    best_total = best.solution.total_cents / 100.0
    alone = _one_at_a_time(planner, best_total)
    assert {"throughput", "latency", "tp_nvlink", "budget_monthly", "max_gpus"} <= set(alone), alone
    assert [f for f, total in alone.items() if total is not None] == ([binds] if binds else [])

    solves = planner.solves
    checks = {c.family: c for c in constraint_checks(planner, best)}
    for fid, total in alone.items():
        if total is None:
            assert checks[fid].status != "binding" and checks[fid].relaxed_total_usd is None, checks[fid]
        else:
            assert checks[fid].status == "binding", checks[fid]
            assert checks[fid].relaxed_total_usd == pytest.approx(total), checks[fid]
    # Throughput (implied by latency), the NVLink rule and the monthly budget are checked together first: where none
    # of them binds, that is one solve for three; where the NVLink rule does, it is then solved alone and the other
    # two together (no more solves than one per family).
    assert planner.solves - solves == (len(alone) if binds else len(alone) - 2)


def test_binding_family_keeps_its_own_switched_off_optimum() -> None:
    """The relaxed design of a family found binding inside a group is its own switched-off optimum, held below
    the best cost, as when each family is solved alone."""
    planner = Planner(_table(p_price=1.0, p_forbidden=True))
    best = rank_designs(planner, top=1).designs[0]
    assert best.solution is not None and best.objective is not None
    own = planner.solve(
        on=[g for g in planner.families if g != TP_NVLINK], bounds=[Bound(Goal.MIN_TOTAL, round(best.objective) - 1)]
    )
    assert own.solution is not None
    (nvlink,) = [c for c in constraint_checks(planner, best) if c.family == TP_NVLINK]
    assert nvlink.status == "binding"
    assert nvlink.relaxed_total_usd == own.solution.total_cents / 100.0
    assert nvlink.relaxed_design is not None and "P" in nvlink.relaxed_design


def _relaxing(fid: str) -> Relaxing:
    r = family(fid).relaxation
    assert r is not None
    return r


def _plain_deletion_loop(planner: Planner, core: list[str]) -> list[str]:
    """The deletion loop with a solve for every member (what infeasibility.minimal_conflict returns)."""
    members = set(core) | {g for f in core for g in _relaxing(f).implies if g in planner.families}
    kept = [f for f in planner.families if f in members]
    first = [f for f in kept if _relaxing(f).deletion_first]
    for f in first + [f for f in kept if f not in first]:
        trial = [g for g in kept if g != f]
        if planner.feasible(trial) is SolveStatus.INFEASIBLE:
            kept = trial
    return kept


def test_deletion_loop_skips_what_the_core_proves_and_keeps_the_same_conflict() -> None:
    """A (TP1) meets the demand only without its p95 target; P (TP2 over PCIe) is ruled out by NVLink. The core
    names latency and the NVLink rule; throughput, which latency implies, joins the loop and is dropped without a
    solve (the core, which it is not part of, is infeasible already)."""
    forbidden = ((TP_NVLINK, NVLINK_REASON),)
    rows = [srow("a", 1, rate=0.0, nolat=8.0), srow("p", 2, rate=8.0, forbidden=forbidden)]
    planner = Planner(table([serving(rows, 4.0)], [cloud("a", 1, price=4.0), cloud("p", 2, price=1.0)]))
    status, core = planner.core(planner.families)
    assert status is SolveStatus.INFEASIBLE and "throughput" not in core, core
    plain_solves = planner.solves
    plain = _plain_deletion_loop(planner, core)
    plain_solves = planner.solves - plain_solves
    solves = planner.solves
    assert minimal_conflict(planner, core) == plain == ["latency", TP_NVLINK]
    assert planner.solves - solves == plain_solves - 1
