"""One feasible and one infeasible case per constraint family; the conflict names the family and its
least relaxation restores feasibility."""

from __future__ import annotations

import ast
import importlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from clusterplan.candidates.table import (
    ALLOWED_GPUS,
    ALLOWED_QUANT,
    DEADLINE,
    DEPLOYMENT,
    TP_NVLINK,
    CandidateTable,
    GpuType,
    Limits,
    Offering,
    ServingRow,
    ServingTargets,
    TrainingRow,
    WorkloadCandidates,
)
from clusterplan.design.check import check_design_on_table
from clusterplan.explain.designs import facts
from clusterplan.explain.infeasibility import analyse
from clusterplan.pipeline import PlanOptions, plan_table
from clusterplan.plan import Plan
from clusterplan.planner import families as constraints
from clusterplan.planner.families import Family, memory, registry
from clusterplan.planner.families.goals import Goal
from clusterplan.planner.ranking import rank_designs
from clusterplan.planner.solve import Planner
from clusterplan.planner.status import SolveStatus
from clusterplan.wording.reasons import render_lost

GPUS = {
    "a": GpuType(id="a", name="A", tdp_w=500, nvlink_domain=8, price_usd=10000),
    "p": GpuType(id="p", name="P", tdp_w=300, nvlink_domain=1, price_usd=4000),
}


def cloud(gid: str = "a", k: int = 1, price: float = 1.0, fb: tuple[tuple[str, str], ...] = ()) -> Offering:
    return Offering(
        key=f"cloud:{gid}:{k}",
        kind="cloud",
        gpu_id=gid,
        gpus_per_unit=k,
        tp_domain=min(k, GPUS[gid].nvlink_domain),
        usd_per_hour=price,
        provider="t",
        instance_id=f"{gid}{k}",
        forbidden_by=fb,
    )


def owned(
    gid: str = "a", s: int = 8, capital: float = 50000.0, inv: int = 0, fb: tuple[tuple[str, str], ...] = ()
) -> Offering:
    return Offering(
        key=f"owned:{gid}:{s}",
        kind="owned",
        gpu_id=gid,
        gpus_per_unit=s,
        tp_domain=min(s, GPUS[gid].nvlink_domain),
        capital_usd=capital,
        power_w=600.0 * s,
        energy_usd_per_month=40.0 * s,
        inventory_units=inv,
        forbidden_by=fb,
    )


def row(
    gid: str = "a",
    tp: int = 1,
    rate: float = 1.0,
    nolat: float | None = None,
    quant: str = "bf16",
    fb: tuple[tuple[str, str], ...] = (),
) -> ServingRow:
    return ServingRow(
        gpu_id=gid,
        tp=tp,
        pp=1,
        quant=quant,
        batch=8,
        rate_rps=rate,
        rate_nolat_rps=rate if nolat is None else nolat,
        forbidden_by=fb,
    )


def serve(rows: list[ServingRow], demand: float = 4.0, *, targets: bool = False, k: int = 0) -> WorkloadCandidates:
    return WorkloadCandidates(
        index=0,
        name="s",
        kind="serving",
        rows=tuple(rows),
        demand_rps=demand,
        average_rps=demand,
        output_tokens=100,
        targets=ServingTargets(p95_latency_s=2.0) if targets else ServingTargets(),
        redundancy=k,
    )


def train(deadline_days: float = 10.0) -> WorkloadCandidates:
    rows = tuple(
        TrainingRow(
            gpu_id="a",
            tp=1,
            pp=1,
            dp=dp,
            zero_stage=1,
            recompute="none",
            micro_batch=1,
            time_to_train_s=days * 86400,
            cloud_offering="cloud:a:1",
            cloud_instances=dp,
            cloud_cost_usd=dp * days * 24.0,
            forbidden_by=((DEADLINE, f"{days} d > {deadline_days} d"),) if days > deadline_days else (),
        )
        for dp, days in ((4, 16.0), (8, 8.0))
    )
    return WorkloadCandidates(index=0, name="t", kind="training", rows=rows, deadline_s=deadline_days * 86400)


def tbl(w: WorkloadCandidates, offers: list[Offering], **lim: object) -> CandidateTable:
    return CandidateTable(workloads=(w,), gpus=GPUS, offerings=tuple(offers), limits=Limits(horizon_months=12, **lim))  # type: ignore[arg-type]


def two_types(max_gpu_types: int) -> CandidateTable:
    """Two serving workloads, one runnable on GPU type a only, the other on p only: two types to operate."""
    first = serve([row("a", rate=4.0)])
    second = replace(serve([row("p", rate=4.0)]), index=1, name="s2")
    return CandidateTable(
        workloads=(first, second),
        gpus=GPUS,
        offerings=(cloud("a"), cloud("p")),
        limits=Limits(horizon_months=12, max_gpu_types=max_gpu_types),
    )


Case = tuple[str, CandidateTable, CandidateTable]

CASES: list[Case] = [
    ("throughput", tbl(serve([row()]), [cloud()], max_gpus=4), tbl(serve([row()]), [cloud()], max_gpus=3)),
    (
        "latency",
        tbl(serve([row(rate=1.0, nolat=4.0)], targets=True), [cloud()], max_gpus=4),
        tbl(serve([row(rate=1.0, nolat=4.0)], targets=True), [cloud()], max_gpus=3),
    ),
    (
        "redundancy",
        tbl(serve([row(rate=4.0)], k=1), [cloud()], max_gpus=2),
        tbl(serve([row(rate=4.0)], k=1), [cloud()], max_gpus=1),
    ),
    ("deadline", tbl(train(), [cloud()], max_gpus=8), tbl(train(), [cloud()], max_gpus=4)),
    (
        "tp_nvlink",
        tbl(serve([row("a", tp=2, rate=4.0)]), [cloud("a", 2)]),
        tbl(serve([row("p", tp=2, rate=4.0, fb=((TP_NVLINK, "P: tensor parallel 2 needs NVLink"),))]), [cloud("p", 2)]),
    ),
    (
        "allowed_gpus",
        tbl(serve([row("a", rate=4.0)]), [cloud("a")], allowed_gpus=frozenset({"a"})),
        tbl(
            serve([row("a", rate=4.0, fb=((ALLOWED_GPUS, "A: not allowed"),))]),
            [cloud("a")],
            allowed_gpus=frozenset({"p"}),
        ),
    ),
    (
        "allowed_quant",
        tbl(serve([row(rate=4.0)]), [cloud()], quantizations=frozenset({"bf16"})),
        tbl(
            serve([row(rate=4.0, quant="int4", fb=((ALLOWED_QUANT, "int4 not allowed"),))]),
            [cloud()],
            quantizations=frozenset({"bf16"}),
        ),
    ),
    (
        "deployment",
        tbl(serve([row(rate=4.0)]), [cloud(), owned()], deployment="cloud"),
        tbl(serve([row(rate=4.0)]), [owned(fb=((DEPLOYMENT, "cloud only"),))], deployment="cloud"),
    ),
    ("max_gpus", tbl(serve([row()]), [cloud()], max_gpus=4), tbl(serve([row()]), [cloud()], max_gpus=2)),
    ("max_gpu_types", two_types(2), two_types(1)),
    (
        "power",
        tbl(serve([row()]), [owned(s=4)], max_power_w=2400.0),
        tbl(serve([row()]), [owned(s=4)], max_power_w=2000.0),
    ),
    (
        "inventory",
        tbl(serve([row(rate=0.5)]), [owned(inv=1)], budget_capital_usd=0.0, inventory=(("a", 8),)),
        tbl(serve([row(rate=0.5)], demand=8.0), [owned(inv=1)], budget_capital_usd=0.0, inventory=(("a", 8),)),
    ),
    (
        "budget_capital",
        tbl(serve([row()]), [owned()], budget_capital_usd=50000.0),
        tbl(serve([row()]), [owned()], budget_capital_usd=40000.0),
    ),
    (
        "budget_monthly",
        tbl(serve([row()]), [cloud()], budget_monthly_usd=2920.0),
        tbl(serve([row()]), [cloud()], budget_monthly_usd=2000.0),
    ),
    (
        "budget_total",
        tbl(serve([row()]), [cloud()], budget_total_usd=35040.0),
        tbl(serve([row()]), [cloud()], budget_total_usd=30000.0),
    ),
]


@pytest.mark.parametrize(("family", "ok", "bad"), CASES, ids=[c[0] for c in CASES])
def test_family_feasible_and_infeasible(family: str, ok: CandidateTable, bad: CandidateTable) -> None:
    p_ok = Planner(ok)
    assert family in p_ok.families
    r_ok = rank_designs(p_ok, top=1)
    assert r_ok.status is SolveStatus.OPTIMAL
    plan = plan_table(ok, PlanOptions(top=1, explain=False))
    from clusterplan.design.check import check_design_on_table as check

    assert check(plan.designs[0], ok) == []

    p_bad = Planner(bad)
    assert rank_designs(p_bad, top=1).status is SolveStatus.INFEASIBLE
    report = analyse(p_bad)
    ids = [c.id for c in report.conflict]
    assert family in ids, report
    relax = {r.family: r for r in report.relaxations}
    assert relax[family].restores_feasibility, relax[family]
    # Minimal: dropping any one member makes the rest feasible (all other families off).
    for f in ids:
        assert p_bad.feasible([g for g in ids if g != f]).has_solution


def test_relaxation_values_are_the_least_ones() -> None:
    _, _, bad = next(c for c in CASES if c[0] == "max_gpus")
    rel = {r.family: r for r in analyse(Planner(bad)).relaxations}
    assert rel["max_gpus"].change == "constraints.max_gpus >= 4"
    assert "peak demand <= 2.00 req/s" in rel["throughput"].change
    _, _, bad_total = next(c for c in CASES if c[0] == "budget_total")
    rel = {r.family: r for r in analyse(Planner(bad_total)).relaxations}
    assert rel["budget_total"].change == "budget.total >= $35,040"
    rel = {r.family: r for r in analyse(Planner(two_types(1))).relaxations}
    assert rel["max_gpu_types"].change == "fleet.max_gpu_types >= 2"
    _, _, bad_inv = next(c for c in CASES if c[0] == "inventory")
    rel = {r.family: r for r in analyse(Planner(bad_inv)).relaxations}
    assert rel["inventory"].value == 8


def test_explanation_marks_binding_families_and_prices_relaxing_them() -> None:
    ok = tbl(serve([row(rate=1.0, nolat=4.0)], targets=True), [cloud()], max_gpus=8)
    plan = plan_table(ok, PlanOptions(top=1))
    assert plan.explanation is not None
    checks = {c.family: c for c in plan.explanation.constraints}
    assert checks["latency"].status == "binding"
    assert checks["latency"].relaxed_total_usd == pytest.approx(730 * 12)
    assert checks["max_gpus"].status == "slack" and checks["max_gpus"].margin == 4


def test_cheaper_gpu_ruled_out_by_a_family_says_which() -> None:
    rows = [
        row("a", rate=4.0),
        row("p", tp=2, rate=8.0, fb=((TP_NVLINK, "P: tensor parallel 2 needs NVLink; P has PCIe only"),)),
    ]
    t = replace(tbl(serve(rows), [cloud("a", price=4.0), cloud("p", 2, price=1.0)]))
    plan = plan_table(t, PlanOptions(top=1))
    assert plan.explanation is not None
    lost = {x.gpu: x for x in plan.explanation.lost_gpus}
    assert lost["p"].families == ["tp_nvlink"]
    assert "needs NVLink" in lost["p"].reason
    assert check_design_on_table(plan.designs[0], t) == []
    # The sentence's code and parameters travel beside it, for layers that decide; the JSON keeps its schema.
    cause = lost["p"].cause
    assert cause is not None and cause.kind == "ruled_out"
    assert cause.conflicts == ("P: tensor parallel 2 needs NVLink; P has PCIe only",)
    assert render_lost(cause) == lost["p"].reason
    (written,) = json.loads(plan.model_dump_json())["explanation"]["lost_gpus"]
    assert "cause" not in written
    assert Plan.model_validate_json(plan.model_dump_json()).model_dump_json() == plan.model_dump_json()


# ------------------------------------------------------------------------------------------------
# Each family module defines its whole story; the explainers never name a family
# ------------------------------------------------------------------------------------------------

CONSTRAINTS_DIR = Path(constraints.__file__).parent
NOT_FAMILIES = {"__init__", "structure", "facts", "goals"}  # shared modules of the package
SOLVER_DIR = CONSTRAINTS_DIR.parent.parent
EXPLAINERS = (
    "explain/designs",
    "explain/infeasibility",
    "explain/binding",
    "explain/trades",
    "planner/solve",
    "pipeline",
)


def test_every_module_in_the_package_is_a_registered_family() -> None:
    modules = {p.stem for p in CONSTRAINTS_DIR.glob("*.py")} - NOT_FAMILIES
    ids = [f.id for f in registry()]
    assert len(ids) == len(set(ids))
    assert modules == set(ids)


@pytest.mark.parametrize("fam", registry(), ids=lambda f: f.id)
def test_every_family_defines_every_part(fam: Family) -> None:
    module = importlib.import_module(f"clusterplan.planner.families.{fam.id}")
    assert module.FAMILY is fam
    assert module.__doc__ and fam.id in module.__doc__
    assert fam.title and fam.sentence
    for part in (fam.add, fam.active, fam.margin, fam.check):
        assert callable(part) and part.__module__ == module.__name__, part
    if fam.relaxation is None:  # physics: never switched off
        return
    r = fam.relaxation
    assert isinstance(r.goal, Goal) and r.goal is not Goal.FEASIBILITY
    assert callable(r.at) and r.at.__module__ == module.__name__
    known = {f.id for f in registry()}
    assert set(r.with_families) <= known and set(r.implies) <= known
    assert fam.id not in r.with_families and fam.id not in r.implies


def _literals(tree: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@pytest.mark.parametrize("name", EXPLAINERS)
def test_explainers_never_name_a_family(name: str) -> None:
    """No family id appears as a string in the modules that iterate over the registry."""
    path = SOLVER_DIR / f"{name}.py"
    named = _literals(ast.parse(path.read_text())) & {f.id for f in registry()}
    assert named == set(), f"{path.name} names {sorted(named)}"


@pytest.mark.parametrize(("family", "ok", "bad"), CASES, ids=[c[0] for c in CASES])
def test_check_agrees_with_the_model(family: str, ok: CandidateTable, bad: CandidateTable) -> None:
    """The optimum with every family on passes every family's solver-free check; the optimum of the
    infeasible case with the family (and those relaxed with it) off violates that family's check,
    and its margin, where it has one, says 'violated'."""
    fam = constraints.family(family)
    p_ok = Planner(ok)
    best = rank_designs(p_ok, top=1).designs[0].solution
    assert best is not None
    d_ok = facts(ok, best)
    assert [f.id for f in p_ok.built.families if not f.check(d_ok)] == []

    p_bad = Planner(bad)
    assert fam.relaxation is not None
    off = {family, *fam.relaxation.with_families}
    out = p_bad.solve(goal=Goal.MIN_TOTAL, on=[f for f in p_bad.families if f not in off])
    assert out.solution is not None, "the case must be feasible with the family off"
    d_bad = facts(bad, out.solution)
    assert not fam.check(d_bad)
    assert [f.id for f in p_bad.built.families if f.id not in off and not f.check(d_bad)] == []
    c = fam.constraint_check(d_bad)
    assert c is not None
    if c.margin is not None:
        assert c.status == "violated", c


def test_memory_check_rejects_a_row_that_does_not_fit() -> None:
    t = tbl(serve([row()]), [cloud()])
    fits = facts(t, rank_designs(Planner(t), top=1).designs[0].solution)  # type: ignore[arg-type]
    assert memory.FAMILY.check(fits)
    big = replace(t.workloads[0].serving_rows()[0], memory_gib=90.0, capacity_gib=80.0)
    t_big = replace(t, workloads=(replace(t.workloads[0], rows=(big,)),))
    over = replace(fits, table=t_big)
    assert not memory.FAMILY.check(over)
    c = memory.FAMILY.constraint_check(over)
    assert c is not None and c.status == "violated" and c.margin == pytest.approx(-10.0)


def test_a_held_load_caps_the_load_each_replica_takes() -> None:
    """A row the scheduler simulation held at 1.5 req/s a replica (``ServingRow.held_rps``, set by the pipeline
    after a simulated miss): demand 4 split over replicas of rate 2 needs 3 of them, not 2, also where shapes may
    mix (no per-row floor); the solver-free check rejects the 2 on the held table."""
    w = replace(serve([row("a", rate=2.0)], demand=4.0, targets=True), allow_mixed=True)
    free = tbl(w, [cloud("a")])
    held = tbl(replace(w, rows=(replace(w.serving_rows()[0], held_rps=1.5),)), [cloud("a")])

    def replicas(t: CandidateTable) -> tuple[int, object]:
        sol = rank_designs(Planner(t), top=1).designs[0].solution
        assert sol is not None
        return sum(a.replicas for a, _ in facts(t, sol).serving_rows(t.workloads[0])), sol

    n_free, sol_free = replicas(free)
    n_held, sol_held = replicas(held)
    assert (n_free, n_held) == (2, 3)
    latency = constraints.family("latency")
    assert latency.check(facts(held, sol_held))  # type: ignore[arg-type]
    assert not latency.check(facts(held, sol_free))  # type: ignore[arg-type]
