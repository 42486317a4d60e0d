"""Operations per distinct GPU type and per serving pool (issue 35): charged in the CP-SAT objective through
indicator variables, so a second GPU type or a second pool wins only when it pays for itself; shown as a cost line;
priced the same way by the checker."""

from __future__ import annotations

import pytest

from clusterplan.design.check import check_design_on_table
from clusterplan.pipeline import PlanOptions, plan_table
from clusterplan.plan import Design
from clusterplan.wording import fmt
from conftest import cloud, owned, serving, srow, table


def _best(**limits: float) -> Design:
    """Two workloads over GPU types A and P on 1-GPU cloud instances at $1/h ($730 a month), one month.

    s0 runs on one A (1 req/s) or two P (0.5 req/s each); s1 on one P or two A. Each on its own best type: 2 GPUs,
    $1,460 a month. Both on one type: 3 GPUs, $2,190. With $1,000 a month per GPU type operated, two types cost
    $1,460 + $2,000 = $3,460 against one type's $2,190 + $1,000 = $3,190: one type wins, by $270.
    """
    w0 = serving([srow("a", 1, 1.0), srow("p", 1, 0.5)], 1.0, idx=0)
    w1 = serving([srow("p", 1, 1.0), srow("a", 1, 0.5)], 1.0, idx=1)
    t = table([w0, w1], [cloud("a", 1, 1.0), cloud("p", 1, 1.0)], horizon_months=1, **limits)
    plan = plan_table(t, PlanOptions(top=1, explain=False))
    (d,) = plan.designs
    assert check_design_on_table(d, t) == []  # the checker prices the operations the same way
    return d


def test_a_second_gpu_type_wins_only_when_it_pays_for_its_operations() -> None:
    free = _best()
    assert free.gpus_by_type == {"a": 1, "p": 1}
    assert free.costs.total_usd == pytest.approx(2 * 730)
    charged = _best(operations_usd_per_gpu_type_month=1000.0)
    assert len(charged.gpus_by_type) == 1 and charged.gpus_total == 3
    assert charged.costs.gpu_types_operated == 1
    assert charged.costs.gpu_type_operations_usd_per_month == pytest.approx(1000)
    assert charged.costs.total_usd == pytest.approx(3 * 730 + 1000)
    assert fmt.operations_line(charged.costs) == "operations: 1 GPU type x $1,000 = $1,000/month"
    # Below the $730 a second type saves, two types still win, and pay for both.
    cheap = _best(operations_usd_per_gpu_type_month=700.0)
    assert cheap.gpus_by_type == {"a": 1, "p": 1}
    assert cheap.costs.total_usd == pytest.approx(2 * 730 + 2 * 700)


def test_a_second_pool_wins_only_when_it_pays_for_its_operations() -> None:
    """3 req/s of A replicas (1 req/s each): two A servers in inventory cost only their power ($73 a month each at
    1 kW), a third is bought at $1e6 or rented at $730 a month. Inventory plus one rented: two pools (owned and
    cloud), $876 a month; all three rented: one pool, $2,190. At $2,000 a month per pool the split costs
    $876 + $4,000 = $4,876 against $2,190 + $2,000 = $4,190: one pool wins."""
    w = serving([srow("a", 1, 1.0)], 3.0)
    offers = [cloud("a", 1, 1.0), owned("a", 1, 1e6, inv=2)]

    def best(**limits: float) -> Design:
        t = table([w], offers, horizon_months=1, inventory=(("a", 2),), **limits)
        (d,) = plan_table(t, PlanOptions(top=1, explain=False)).designs
        assert check_design_on_table(d, t) == []
        return d

    split = best()
    assert {x.kind for x in split.hardware} == {"cloud", "owned"}
    assert split.costs.total_usd == pytest.approx(2 * 73 + 730)
    one = best(operations_usd_per_pool_month=2000.0)
    assert {x.kind for x in one.hardware} == {"cloud"} and one.gpus_total == 3
    assert (one.costs.pools, one.costs.pool_operations_usd_per_month) == (1, pytest.approx(2000))
    assert one.costs.total_usd == pytest.approx(3 * 730 + 2000)


def test_the_checker_catches_a_design_that_leaves_its_operations_out() -> None:
    """A design whose stated costs drop the operations line is refused by the solver-free checker."""
    w0 = serving([srow("a", 1, 1.0)], 1.0)
    t = table([w0], [cloud("a", 1, 1.0)], horizon_months=1, operations_usd_per_gpu_type_month=1000.0)
    (d,) = plan_table(t, PlanOptions(top=1, explain=False)).designs
    c = d.costs
    dropped = c.model_copy(
        update={"gpu_type_operations_usd_per_month": 0.0, "monthly_usd": c.monthly_usd - 1000, "total_usd": 730.0}
    )
    problems = check_design_on_table(d.model_copy(update={"costs": dropped}), t)
    assert any("operations" in p for p in problems), problems
