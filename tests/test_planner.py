"""The CP-SAT model on small hand-built and synthetic candidate tables (no physics, no catalog)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clusterplan.candidates.table import (
    ALLOWED_GPUS,
    DEADLINE,
    TP_NVLINK,
    CandidateTable,
    TrainingRow,
    WorkloadCandidates,
)
from clusterplan.explain import designs
from clusterplan.pipeline import PlanOptions, plan_table
from clusterplan.planner.builder import build
from clusterplan.planner.cpsat import clone
from clusterplan.planner.families import active_families, registry
from clusterplan.planner.ranking import rank_designs
from clusterplan.planner.solve import Planner
from clusterplan.planner.status import SolveStatus
from clusterplan.planner.synthetic import synthetic_table
from conftest import cloud, owned, serving, srow, table


def best(t: CandidateTable):  # type: ignore[no-untyped-def]
    p = Planner(t)
    r = rank_designs(p, top=1)
    return p, r


def test_single_row_needs_ceil_demand_over_rate_replicas() -> None:
    t = table([serving([srow("a", 1, rate=3.0)], demand=10.0)], [cloud("a", 1, 2.0)], horizon_months=1)
    _, r = best(t)
    assert r.status is SolveStatus.OPTIMAL
    sol = r.designs[0].solution
    assert sol.serving[0].replicas == 4  # ceil(10 / 3)
    assert sol.instances == (("cloud:a:1", 4),)
    assert sol.total_cents == round(4 * 2.0 * 730 * 100)


def test_tp_groups_stay_inside_an_nvlink_domain() -> None:
    # One TP4 replica; 4-GPU instances with NVLink cost more per GPU than 1-GPU ones, but TP4 cannot span them.
    t = table(
        [serving([srow("a", 4, rate=10.0)], demand=5.0)], [cloud("a", 1, 1.0), cloud("a", 4, 8.0)], horizon_months=1
    )
    _, r = best(t)
    assert dict(r.designs[0].solution.instances) == {"cloud:a:4": 1}
    # Without the tp_nvlink family four 1-GPU instances would do.
    p = Planner(t)
    out = p.solve(on=[f for f in p.families if f != "tp_nvlink"])
    assert out.solution is not None and dict(out.solution.instances) == {"cloud:a:1": 4}


def test_rows_forbidden_by_a_family_need_it_switched_off() -> None:
    rows = [
        srow("p", 2, rate=10.0, forbidden=((TP_NVLINK, "P: tensor parallel 2 needs NVLink"),)),
        srow("a", 1, rate=1.0),
    ]
    t = table([serving(rows, demand=5.0)], [cloud("p", 2, 1.0, domain=1), cloud("a", 1, 3.0)], horizon_months=1)
    _, r = best(t)
    assert {a.row for a in r.designs[0].solution.serving} == {1}
    p = Planner(t)
    relaxed = p.solve(on=[])
    assert relaxed.solution is not None and {a.row for a in relaxed.solution.serving} == {0}


def test_redundancy_adds_the_largest_replica() -> None:
    t = table([serving([srow("a", 1, rate=4.0)], demand=10.0, k=1)], [cloud("a", 1, 1.0)], horizon_months=1)
    _, r = best(t)
    assert r.designs[0].solution.serving[0].replicas == 4  # 3 for demand + 1 spare


def test_latency_rate_binds_before_throughput_rate() -> None:
    t = table([serving([srow("a", 1, rate=1.0, nolat=5.0)], demand=4.0)], [cloud("a", 1, 1.0)], horizon_months=1)
    p, r = best(t)
    assert r.designs[0].solution.serving[0].replicas == 4
    out = p.solve(on=["throughput"])
    assert out.solution.serving[0].replicas == 1


def test_one_shape_unless_mixed() -> None:
    rows = [srow("a", 1, rate=10.0), srow("p", 1, rate=3.0)]
    offers = [cloud("a", 1, 8.0), cloud("p", 1, 2.5)]
    # Demand 13 req/s. One shape: 2 x a = $16/h or 5 x p = $12.50/h (ceil(13 / 3) = 5).
    # Mixed: 1 a + 1 p = 13 req/s for $10.50/h, strictly cheaper than either single shape.
    single = table([serving(rows, demand=13.0)], offers, horizon_months=1)
    mixed = table([serving(rows, demand=13.0, mixed=True)], offers, horizon_months=1)
    _, r1 = best(single)
    _, r2 = best(mixed)
    one = r1.designs[0].solution
    assert {(a.row, a.replicas) for a in one.serving} == {(1, 5)}
    assert one.total_cents == round(12.5 * 730 * 100)
    mix = r2.designs[0].solution
    assert {(a.row, a.replicas) for a in mix.serving} == {(0, 1), (1, 1)}  # two shapes, one replica each
    assert dict(mix.instances) == {"cloud:a:1": 1, "cloud:p:1": 1}
    assert mix.total_cents == round(10.5 * 730 * 100) < one.total_cents


def test_owned_servers_shared_when_sequential_summed_when_concurrent() -> None:
    train = WorkloadCandidates(
        index=1,
        name="t",
        kind="training",
        deadline_s=10 * 86400,
        rows=(
            TrainingRow(
                gpu_id="a", tp=1, pp=1, dp=8, zero_stage=1, recompute="none", micro_batch=1, time_to_train_s=86400
            ),
        ),
    )
    serve = serving([srow("a", 1, rate=1.0)], demand=4.0)
    offers = [owned("a", 8, capital=100000.0)]
    seq = table([serve, train], offers, schedule="sequential", deployment="owned")
    con = table([serve, train], offers, schedule="concurrent", deployment="owned")
    _, rs = best(seq)
    _, rc = best(con)
    assert dict(rs.designs[0].solution.bought) == {"owned:a:8": 1}
    assert dict(rc.designs[0].solution.bought) == {"owned:a:8": 2}


def test_inventory_is_used_before_buying_and_costs_no_capital() -> None:
    t = table(
        [serving([srow("a", 1, rate=1.0)], demand=10.0)],
        [owned("a", 8, capital=100000.0, inv=1)],
        deployment="owned",
        inventory=(("a", 8),),
    )
    _, r = best(t)
    sol = r.designs[0].solution
    assert dict(sol.from_inventory) == {"owned:a:8": 1}
    assert dict(sol.bought) == {"owned:a:8": 1}
    assert sol.capital_cents == 100000 * 100


def test_training_picks_the_cheapest_layout_meeting_the_deadline() -> None:
    rows = (
        TrainingRow(
            gpu_id="a",
            tp=1,
            pp=1,
            dp=8,
            zero_stage=1,
            recompute="none",
            micro_batch=1,
            time_to_train_s=20 * 86400,
            cloud_offering="cloud:a:8",
            cloud_instances=1,
            cloud_cost_usd=1000,
            forbidden_by=((DEADLINE, "too slow"),),
        ),
        TrainingRow(
            gpu_id="a",
            tp=1,
            pp=1,
            dp=16,
            zero_stage=1,
            recompute="none",
            micro_batch=1,
            time_to_train_s=9 * 86400,
            cloud_offering="cloud:a:8",
            cloud_instances=2,
            cloud_cost_usd=1100,
        ),
    )
    train = WorkloadCandidates(index=0, name="t", kind="training", deadline_s=10 * 86400, rows=rows)
    t = table([train], [cloud("a", 8, 10.0)], deployment="cloud")
    p, r = best(t)
    assert r.designs[0].solution.training[0].row == 1
    assert r.designs[0].solution.one_off_cents == 110000
    assert p.solve(on=[f for f in p.families if f != "deadline"]).solution.training[0].row == 0


def test_a_training_row_no_offering_runs_adds_no_alternative_designs() -> None:
    # Row 1's GPU is neither rented nor owned here (e.g. a multi-instance layout on an offer without a
    # fabric). Its shape must not be a free literal of the signature: the alternatives would be the
    # optimum again with that literal flipped (seen as five identical designs on the 13B example).
    base = TrainingRow(
        gpu_id="a", tp=1, pp=1, dp=8, zero_stage=1, recompute="none", micro_batch=1,
        time_to_train_s=9 * 86400, cloud_offering="cloud:a:8", cloud_instances=1, cloud_cost_usd=1000,
    )  # fmt: skip
    stranded = replace(base, gpu_id="b", tp=2, cloud_offering=None, cloud_instances=0, cloud_cost_usd=0)
    train = WorkloadCandidates(index=0, name="t", kind="training", deadline_s=10 * 86400, rows=(base, stranded))
    t = table([train], [cloud("a", 8, 10.0)], deployment="cloud")
    ranked = rank_designs(Planner(t), top=3)
    assert len(ranked.designs) == 1  # the only runnable layout, once


def test_capital_budget_pushes_spending_to_cloud() -> None:
    offers = [cloud("a", 1, 1.0), owned("a", 4, capital=1000.0)]
    free = table([serving([srow("a", 1, rate=1.0)], demand=4.0)], offers, horizon_months=36)
    assert best(free)[1].designs[0].solution.bought  # owning is cheaper over 36 months
    capped = replace(free, limits=replace(free.limits, budget_capital_usd=1.0))
    p, r = best(capped)
    sol = r.designs[0].solution
    assert sol.capital_cents == 0 and sol.instances
    assert p.solve(on=[]).solution.total_cents < sol.total_cents


@pytest.mark.parametrize("budget_field", ["budget_monthly_usd", "budget_total_usd"])
def test_budgets_too_small_are_infeasible(budget_field: str) -> None:
    t = table(
        [serving([srow("a", 1, rate=1.0)], demand=4.0)],
        [cloud("a", 1, 1.0), owned("a", 4, capital=1000.0)],
        horizon_months=36,
        **{budget_field: 1.0},
    )
    p, r = best(t)
    assert r.status is SolveStatus.INFEASIBLE
    assert p.solve(on=[f for f in p.families if f != budget_field.removesuffix("_usd")]).status.has_solution


def test_max_gpus_and_power() -> None:
    t = table(
        [serving([srow("a", 1, rate=1.0)], demand=4.0)], [owned("a", 4, capital=1000.0, power=3000.0)], max_gpus=3
    )
    assert best(t)[1].status is SolveStatus.INFEASIBLE
    t2 = table(
        [serving([srow("a", 1, rate=1.0)], demand=4.0)],
        [owned("a", 4, capital=1000.0, power=3000.0)],
        max_power_w=2999.0,
    )
    assert best(t2)[1].status is SolveStatus.INFEASIBLE
    t3 = replace(t2, limits=replace(t2.limits, max_power_w=3000.0))
    assert best(t3)[1].status is SolveStatus.OPTIMAL


def test_allowed_gpus_family() -> None:
    rows = [srow("a", 1, rate=5.0, forbidden=((ALLOWED_GPUS, "A: not allowed"),)), srow("p", 1, rate=1.0)]
    t = table([serving(rows, demand=5.0)], [cloud("a", 1, 1.0), cloud("p", 1, 1.0)], allowed_gpus=frozenset({"p"}))
    _, r = best(t)
    assert {a.row for a in r.designs[0].solution.serving} == {1}


def test_top_k_designs_are_distinct_and_ordered() -> None:
    t = synthetic_table(gpu_types=4, serving=1, seed=3)
    p = Planner(t)
    sols = [d.solution for d in rank_designs(p, top=5).designs if d.solution is not None]
    assert len(sols) == 5
    # Distinct in hardware: the GPUs held per type and deployment differ (here: one server each of another type,
    # then the cheapest type rented instead of owned); another layout of the same servers is not a design.
    held = [(s.hardware, s.pools) for s in sols]
    assert len(set(held)) == len(held)
    sigs = [tuple(designs.signature(t, s)) for s in sols]
    assert len(set(sigs)) == len(sigs)
    totals = [s.total_cents for s in sols]
    assert totals == sorted(totals)


# Two ways to serve 4 req/s for $4/h each; the first needs fewer GPUs. Listed in both orders: which of
# two equal-cost optima CP-SAT meets first depends on the order, the tie-break must not.
TIES = {
    # 2 "a" GPUs at $2/h taking 2 req/s each, or 4 "p" GPUs at $1/h taking 1 req/s each.
    "faster-gpu": (
        [srow("a", 1, rate=2.0), srow("p", 1, rate=1.0)],
        [cloud("a", 1, 2.0), cloud("p", 1, 1.0)],
        {"cloud:a:1": 2},
        {"cloud:p:1": 4},
    ),
    # Four TP1 replicas on a 4-GPU instance, or on an 8-GPU instance at the same $4/h.
    "smaller-instance": (
        [srow("a", 1, rate=1.0)],
        [cloud("a", 4, 4.0), cloud("a", 8, 4.0)],
        {"cloud:a:4": 1},
        {"cloud:a:8": 1},
    ),
}


@pytest.mark.parametrize("reverse", [False, True], ids=["listed", "reversed"])
@pytest.mark.parametrize("case", sorted(TIES))
def test_tiebreak_prefers_fewer_gpus_at_equal_cost(case: str, reverse: bool) -> None:
    rows, offers, fewer, more = TIES[case]
    if reverse:
        rows, offers = rows[::-1], offers[::-1]
    got = best(table([serving(rows, demand=4.0)], offers, horizon_months=1))[1].designs[0].solution
    assert dict(got.instances) == fewer
    assert got.total_cents == round(4.0 * 730 * 100)
    # The other design really ties: alone on the table, it costs the same with more GPUs.
    (other,) = (o for o in offers if o.key in more)
    alone = best(table([serving(rows, demand=4.0)], [other], horizon_months=1))[1].designs[0].solution
    assert dict(alone.instances) == more
    assert alone.total_cents == got.total_cents and alone.gpus_in_use > got.gpus_in_use


@pytest.mark.parametrize("p_first", [True, False], ids=["p-row-first", "a-row-first"])
def test_tiebreak_then_prefers_more_headroom(p_first: bool) -> None:
    # Demand 2 req/s, one GPU at $1/h either way: "a" takes 2 req/s (no headroom), "p" takes 3 (50%).
    rows = [srow("p", 1, rate=3.0), srow("a", 1, rate=2.0)]
    if not p_first:
        rows.reverse()
    t = table([serving(rows, demand=2.0)], [cloud("a", 1, 1.0), cloud("p", 1, 1.0)], horizon_months=1)
    r = rank_designs(Planner(t), top=2)
    first, second = (d.solution for d in r.designs if d.solution is not None)
    assert dict(first.instances) == {"cloud:p:1": 1}
    assert dict(second.instances) == {"cloud:a:1": 1}
    assert first.total_cents == second.total_cents and first.gpus_in_use == second.gpus_in_use == 1


@pytest.mark.parametrize("reverse", [False, True], ids=["listed", "reversed"])
def test_pro_rata_cloud_instances_give_the_fewer_machines(reverse: bool) -> None:
    # Four TP1 replicas of 1 req/s at $1/h a GPU: four 1-GPU instances or one 4-GPU instance, the same $4/h, the same
    # four GPUs and the same headroom, so the tie-break cannot tell them apart. One machine is the design an operator
    # would pick, whichever is listed first (families/structure.py: fewer than k of an instance k of which cost one).
    rows = [srow("a", 1, rate=1.0)]
    offers = [cloud("a", 1, 1.0), cloud("a", 4, 4.0)]
    if reverse:
        offers.reverse()
    got = best(table([serving(rows, demand=4.0)], offers, horizon_months=1))[1].designs[0].solution
    assert dict(got.instances) == {"cloud:a:4": 1}
    # The other design really ties: alone on the table, four 1-GPU instances cost the same for the same GPUs.
    alone = best(table([serving(rows, demand=4.0)], [cloud("a", 1, 1.0)], horizon_months=1))[1].designs[0].solution
    assert dict(alone.instances) == {"cloud:a:1": 4}
    assert alone.total_cents == got.total_cents and alone.gpus_in_use == got.gpus_in_use == 4


def test_every_family_module_has_a_sentence_and_unique_id() -> None:
    ids = [f.id for f in registry()]
    assert len(ids) == len(set(ids))
    assert all(f.sentence and f.title for f in registry())
    t = synthetic_table(gpu_types=2, serving=1, seed=0)
    assert {f.id for f in active_families(t)} >= {"memory", "throughput", "latency"}


def test_plan_table_end_to_end_on_a_synthetic_table() -> None:
    t = synthetic_table(gpu_types=3, serving=2, training=1, seed=5)
    plan = plan_table(t, PlanOptions(top=3))
    assert plan.status == "optimal"
    assert plan.designs and plan.explanation is not None
    assert plan.designs[0].costs.total_usd <= plan.designs[-1].costs.total_usd


def test_relaxable_families_are_the_stated_ones_less_memory() -> None:
    # Stated by this table: serving (throughput), N+1 (redundancy), cloud only (deployment), a GPU cap
    # and a total budget. No latency target, no tensor parallelism: latency and tp_nvlink are silent.
    quiet = table(
        [serving([srow("a", 1, rate=1.0)], demand=2.0, k=1, targets=False)],
        [cloud("a", 1, 1.0)],
        deployment="cloud",
        max_gpus=8,
        budget_total_usd=1e6,
    )
    built = build(quiet)
    assert [f.id for f in built.families] == [
        "memory", "throughput", "redundancy", "deployment", "max_gpus", "budget_total",
    ]  # fmt: skip
    assert built.relaxable == ["throughput", "redundancy", "deployment", "max_gpus", "budget_total"]
    assert Planner(quiet).families == built.relaxable
    # A p95 target and a TP2 row add latency and tp_nvlink; memory is never relaxable.
    loud = table([serving([srow("a", 2, rate=1.0)], demand=2.0)], [cloud("a", 2, 1.0)])
    assert build(loud).relaxable == ["throughput", "latency", "tp_nvlink"]


@pytest.mark.slow
def test_time_limit_never_reports_infeasible() -> None:
    from clusterplan.design.check import check_design_on_table
    from clusterplan.planner.solve import SolverSettings

    t = synthetic_table(gpu_types=96, serving=16, seed=3)
    plan = plan_table(t, PlanOptions(top=1, explain=False, settings=SolverSettings(time_limit_s=0.05)))
    assert plan.status in ("unknown", "feasible", "optimal")
    assert plan.infeasibility is None
    if plan.status == "unknown":
        assert plan.designs == []
    else:
        assert plan.solver.gap is not None
        assert all(check_design_on_table(d, t) == [] for d in plan.designs)


def test_max_throughput_within_budget_and_min_latency() -> None:
    rows = [srow("a", 1, rate=1.0), srow("a", 2, rate=3.0)]
    rows[1] = replace(rows[1], p95_e2e_s=0.5)
    t = table(
        [serving(rows, demand=2.0, mixed=True)],
        [cloud("a", 1, 1.0), cloud("a", 2, 2.0)],
        horizon_months=1,
        budget_total_usd=4 * 730.0,
    )
    plan = plan_table(t, PlanOptions(top=1, objective="max_throughput", explain=False))
    w = plan.designs[0].workloads[0]
    assert isinstance(w, designs.ServingPlan)
    assert w.capacity_rps == pytest.approx(6.0)  # 4 GPUs of budget: two TP2 replicas
    assert plan.designs[0].costs.total_usd <= 4 * 730.0 + 1e-6
    fast = plan_table(t, PlanOptions(top=1, objective="min_latency", explain=False))
    assert {g.tp for g in fast.designs[0].workloads[0].groups} == {2}  # type: ignore[union-attr]


def test_every_solve_sees_the_model_cp_sat_would_clone() -> None:
    """The planner's faster copy of its base model is CpModel.clone's, proto and constants: CP-SAT is deterministic on
    its input, so the designs, their tie-breaks and every explanation stay what they were (byte-identical plans)."""
    base = Planner(synthetic_table(gpu_types=3, serving=2, seed=1)).built.model
    base.new_constant(7)
    ours, theirs = clone(base), base.clone()
    for m in (ours, theirs):
        x = m.new_int_var(0, 9, "x")
        m.add(x >= m.new_constant(7))  # the copy reuses the base's constant, as CpModel.clone's does
        m.minimize(x)
    assert str(ours.proto) == str(theirs.proto)
    assert str(clone(ours).proto) == str(theirs.clone().proto)  # and so are copies of a copy
    assert len(base.proto.constraints) < len(ours.proto.constraints)  # the base is left as it was
