"""Sweeps share what the varied field leaves alone, and still plan each point as it would be planned alone;
switch points are bisected to within 1% and hold when planned just either side.

- :func:`clusterplan.whatif.vary.reuse_of`: the one decision of what a field's points share.
- Candidate tables built with a shared :class:`~clusterplan.candidates.build.CandidateCache` equal
  tables built afresh, point by point (training rows included).
- Sweep rows with the points sharing one cache equal plans of each point alone (design, cost, status,
  binding families or conflict) on a grid of budget, a GPU price, horizon, demand and a p95 target.
- Models built inside a :class:`~clusterplan.planner.builder.ModelReuse` equal models built afresh
  (budgets and caps re-add the families to the last structure; horizon and demand build anew).
- :func:`clusterplan.whatif.sweep.bisect_switch`: the bracket is within 1% and planning at either end
  alone gives the designs it names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterplan.candidates.build import build_candidates
from clusterplan.catalog.load import Catalog
from clusterplan.pipeline import PlanOptions, plan_requirement
from clusterplan.plan import Plan
from clusterplan.planner.builder import ModelReuse, build
from clusterplan.planner.solve import SolverSettings
from clusterplan.whatif.points import PointCache, PointTask, load_base, run_tasks, shape_of
from clusterplan.whatif.sweep import build_tasks, row_of, run_sweep
from clusterplan.whatif.vary import make_axis, resolve_field, reuse_of
from conftest import example, point_alone

# Every test here plans sweeps twice over (shared and fresh): 70 s of the suite on two workers.
pytestmark = pytest.mark.slow

SERVING_70B = example("70b-serving")
TRAIN_THEN_SERVE = example("13b-train-then-serve")


def _plan_alone(task: PointTask) -> Plan:
    resolved, catalog = point_alone(task)
    return plan_requirement(resolved, catalog, PlanOptions(top=1, explain="binding"))


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("budget", "table"),
        ("horizon", "table"),
        ("max_gpus", "table"),
        ("gpu_price.h200", "table"),
        ("electricity_price", "table"),
        ("demand", "table"),
        ("peak_to_average", "table"),
        ("p95_latency", "physics"),
        ("p95_ttft", "physics"),
        ("input_tokens", "none"),
        ("workloads[0].redundancy", "none"),
    ],
)
def test_reuse_is_decided_by_the_field(field: str, expected: str, catalog: Catalog) -> None:
    base, _ = load_base(SERVING_70B)
    assert reuse_of(resolve_field(field, base.data, catalog)) == expected


@pytest.mark.parametrize(
    ("path", "vary"),
    [
        (SERVING_70B, "budget=300k,450k,1M"),
        (SERVING_70B, "gpu_price.h200=20k,45k"),
        (SERVING_70B, "horizon=12mo,60mo"),
        (SERVING_70B, "demand=300,3000"),
        (SERVING_70B, "p95_latency=1s,3s,6s"),
        (SERVING_70B, "p95_ttft=0.5s,2s"),
        (TRAIN_THEN_SERVE, "budget=200k,2M"),
        (TRAIN_THEN_SERVE, "gpu_price.h100-sxm=15k,40k"),
    ],
)
def test_tables_built_with_a_shared_cache_equal_fresh_ones(path: Path, vary: str) -> None:
    base, _ = load_base(path)
    axis = make_axis(vary, base.data, base.catalog, steps=10, log=False)
    shared = PointCache()
    for task in build_tasks(base, [axis], objective="min_cost", solver=SolverSettings()):
        resolved, catalog = point_alone(task)
        cached_catalog = shared.catalog(task.catalog_paths, task.catalog_override)
        cached = build_candidates(resolved, cached_catalog, cache=shared.candidates)
        assert cached == build_candidates(resolved, catalog), (vary, task.values)
    if reuse_of(axis.target) == "table":
        assert shared.candidates.hits >= len(axis.values) - 1  # every later point reused every workload's rows
    else:
        assert shared.candidates.physics  # the physics was shared, the rate search redone


GRID = [
    "budget=300k,450k,1M",
    "gpu_price.h200=20k,45k",
    "horizon=12mo,60mo",
    "demand=300,3000",
    "p95_latency=1s,3s,6s",
]


@pytest.mark.parametrize("vary", GRID)
def test_sweep_rows_equal_each_point_planned_alone(vary: str) -> None:
    base, _ = load_base(SERVING_70B)
    axis = make_axis(vary, base.data, base.catalog, steps=10, log=False)
    tasks = build_tasks(base, [axis], objective="min_cost", solver=SolverSettings())
    shared = PointCache()
    outcomes = run_tasks(tasks, jobs=1, cache=shared)
    assert shared.candidates.rows or shared.candidates.physics  # the points did share a cache
    for task, out in zip(tasks, outcomes, strict=True):
        row = row_of(out, "min_cost")
        plan = _plan_alone(task)
        assert row.status == plan.status, (vary, task.values)
        if plan.designs:
            d = plan.designs[0]
            assert out.design is not None
            assert (row.design, row.shape) == (d.summary, shape_of(d)), (vary, task.values)
            assert row.total_usd == d.costs.total_usd
            assert row.binding == [c.title for c in d.constraints if c.status == "binding"]
        else:
            assert plan.infeasibility is not None and row.shape is None
            assert row.binding == [f.title for f in plan.infeasibility.conflict]


@pytest.mark.parametrize(
    ("vary", "before", "after"),
    [
        ("budget=300k,700k", "infeasible", "design"),  # where the least-cost design ($586.6k) becomes affordable
        # where a cheaper layout meets the target (B200 TP4 -> TP2 near 3.2 s; between 5 s and 6.5 s, where owned
        # RTX PRO 6000 + H100 once gave way to H200 servers, the cloud design now wins on both sides)
        ("p95_latency=3s,5s", "design", "design"),
    ],
)
def test_switch_point_holds_when_planned_either_side(vary: str, before: str, after: str) -> None:
    base, _ = load_base(SERVING_70B)
    axis = make_axis(vary, base.data, base.catalog, steps=10, log=False)
    result = run_sweep(base, [axis], switch_tolerance=0.01)
    [sp] = result.switches
    lo, hi = sp.before.value, sp.after.value
    assert axis.values[0] <= lo < hi <= axis.values[1]
    assert (hi - lo) <= 0.01 * hi and sp.tolerance <= 0.01
    assert (sp.before.shape is None) == (before == "infeasible") and sp.after.shape is not None
    # Planned alone, just below and just above: the designs the switch point names, and they differ.
    below, above = (
        _plan_alone(build_tasks(base, [axis.model_copy(update={"values": [v]})], objective="min_cost",
                                solver=SolverSettings())[0])
        for v in (lo, hi)
    )  # fmt: skip
    assert (shape_of(below.designs[0]) if below.designs else None) == sp.before.shape
    assert below.status == sp.before.status
    assert above.designs and shape_of(above.designs[0]) == sp.after.shape != sp.before.shape
    assert sp.after.total_usd == above.designs[0].costs.total_usd
    if before == "infeasible":
        # A budget switch is the least cost itself: it lies inside the bracket.
        assert lo < above.designs[0].costs.total_usd <= hi


@pytest.mark.parametrize(
    ("path", "vary", "replays"),
    [
        (SERVING_70B, "budget=150k,400k,2M", True),
        (SERVING_70B, "max_gpus=4,64", True),
        (SERVING_70B, "max_power=5kW,100kW", True),
        (TRAIN_THEN_SERVE, "budget=200k,2M", True),
        (SERVING_70B, "horizon=12mo,60mo", False),  # the horizon is a cost coefficient of the structure
        (SERVING_70B, "demand=300,3000", False),  # the demand bounds the replica counts
    ],
)
def test_models_reused_across_bounds_equal_models_built_afresh(path: Path, vary: str, replays: bool) -> None:
    """Inside a ModelReuse, a table that differs only in a limit its family alone reads gets the last
    model's variables and structure with the families added again: the same model, proto for proto."""
    base, _ = load_base(path)
    axis = make_axis(vary, base.data, base.catalog, steps=10, log=False)
    shared, reuse = PointCache(), ModelReuse()
    for objective in ("min_cost", "max_throughput"):
        for task in build_tasks(base, [axis], objective=objective, solver=SolverSettings()):
            resolved, catalog = point_alone(task)
            table = build_candidates(resolved, catalog, cache=shared.candidates)
            with reuse:
                again = build(table, objective=objective)
            assert str(again.model.proto) == str(build(table, objective=objective).model.proto), task.values
    assert (reuse.replays == 2 * (len(axis.values) - 1)) if replays else reuse.replays == 0
