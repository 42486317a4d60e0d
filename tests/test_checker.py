"""The independent checker passes every returned design and catches broken ones."""

from __future__ import annotations

import pytest

from clusterplan.design.check import Unit, check_design_on_table, check_plan, pack
from clusterplan.explain import designs
from clusterplan.pipeline import PlanOptions, plan_table
from clusterplan.plan import Plan, ServingPlan, TrainingPlan
from clusterplan.planner.ranking import rank_designs
from clusterplan.planner.solve import Planner
from clusterplan.planner.synthetic import synthetic_table
from clusterplan.requirement.load import ResolvedRequirement, load_requirement
from clusterplan.requirement.schema import EngineSettings
from conftest import EXAMPLES, ExamplePlans, cloud, serving, shared_plan, srow, table


@pytest.fixture(scope="module")
def solved(catalog) -> ExamplePlans:  # type: ignore[no-untyped-def]
    """Per example, its requirement and plan (planned when a test first reads it)."""
    return ExamplePlans(
        EXAMPLES, lambda path: (load_requirement(path, catalog), shared_plan(path, catalog, top=3, explain=False))
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.stem for p in EXAMPLES])
def test_every_returned_design_of_every_example_passes(name: str, solved, catalog) -> None:  # type: ignore[no-untyped-def]
    resolved, plan = solved[name]
    for design in plan.designs:
        assert check_plan(design, resolved, catalog) == [], (name, design.rank)


def _first_serving(plan: Plan) -> tuple[int, ServingPlan]:
    for i, w in enumerate(plan.designs[0].workloads):
        if isinstance(w, ServingPlan):
            return i, w
    raise AssertionError("no serving workload")


@pytest.mark.slow
def test_too_few_replicas_is_caught(solved, catalog) -> None:  # type: ignore[no-untyped-def]
    resolved, plan = solved["70b-serving"]
    d = plan.designs[0]
    _, w = _first_serving(plan)
    g = w.groups[0]
    fewer = g.model_copy(
        update={
            "replicas": 1,
            "owned_replicas": min(1, g.owned_replicas),
            "cloud_replicas": 1 - min(1, g.owned_replicas),
        }
    )
    broken = d.model_copy(update={"workloads": [w.model_copy(update={"groups": [fewer]})]})
    problems = check_plan(broken, resolved, catalog)
    assert any("demanded" in p or "p95" in p for p in problems), problems


@pytest.mark.slow
def test_batch_beyond_the_engines_cap_is_caught(solved, catalog) -> None:  # type: ignore[no-untyped-def]
    """The checker reads the workload's engine (catalog/engines.yaml): a batch over its cap is not a design."""
    resolved, plan = solved["70b-serving"]
    d = plan.designs[0]
    capped = resolved.requirement.workloads[0].model_copy(update={"engine": EngineSettings(name="vllm", max_batch=8)})
    req = resolved.requirement.model_copy(update={"workloads": [capped]})
    problems = check_plan(d, ResolvedRequirement(req, resolved.path, None, resolved.models), catalog)
    assert any("the vllm engine runs" in p for p in problems), problems


@pytest.mark.slow
def test_understated_cost_is_caught(solved, catalog) -> None:  # type: ignore[no-untyped-def]
    resolved, plan = solved["70b-serving"]
    d = plan.designs[0]
    cheap = d.model_copy(update={"costs": d.costs.model_copy(update={"total_usd": d.costs.total_usd - 100})})
    assert any("total cost" in p for p in check_plan(cheap, resolved, catalog))


@pytest.mark.slow
def test_tensor_parallel_over_pcie_is_caught(solved, catalog) -> None:  # type: ignore[no-untyped-def]
    resolved, plan = solved["70b-serving"]
    d = plan.designs[0]
    _, w = _first_serving(plan)
    g = w.groups[0].model_copy(update={"gpu": "l40s", "tp": 4})
    broken = d.model_copy(update={"workloads": [w.model_copy(update={"groups": [g]})]})
    assert any("NVLink" in p for p in check_plan(broken, resolved, catalog))


@pytest.mark.slow
def test_missed_deadline_is_caught(solved, catalog) -> None:  # type: ignore[no-untyped-def]
    resolved, plan = solved["13b-train-then-serve"]
    d = plan.designs[0]
    ws = [
        w.model_copy(update={"dp": 1, "gpus": w.tp * w.pp}) if isinstance(w, TrainingPlan) else w for w in d.workloads
    ]
    problems = check_plan(d.model_copy(update={"workloads": ws}), resolved, catalog)
    assert any("deadline" in p or "time to train" in p for p in problems), problems


@pytest.mark.slow
def test_budget_overrun_is_caught(solved, catalog) -> None:  # type: ignore[no-untyped-def]
    resolved, plan = solved["70b-serving"]
    req = resolved.requirement
    tight = req.model_copy(update={"budget": req.budget.model_copy(update={"total": 1000.0})})
    problems = check_plan(plan.designs[0], ResolvedRequirement(tight, resolved.path, None, resolved.models), catalog)
    assert any("exceeds budget" in p for p in problems)


def test_first_fit_decreasing_packing() -> None:
    assert pack([4, 2, 1, 1], [Unit(8, 8)])
    assert not pack([4, 4], [Unit(8, 2)])
    assert pack([2, 2, 2, 2], [Unit(8, 2)])
    assert not pack([2], [Unit(8, 1)])
    assert not pack([1] * 9, [Unit(8, 8)])


@pytest.mark.parametrize("seed", range(6))
def test_synthetic_designs_pass_the_table_checker(seed: int) -> None:
    t = synthetic_table(gpu_types=3, serving=2, training=1, seed=seed, mixed=seed % 2 == 1, redundancy=seed % 3)
    r = rank_designs(Planner(t), top=3)
    for out in r.designs:
        d = designs.design(t, out.solution, rank=1, checks=[])  # type: ignore[arg-type]
        assert check_design_on_table(d, t) == []


def test_table_checker_catches_a_missing_replica() -> None:
    # 10 req/s at 3 req/s per replica: ceil(10 / 3) = 4 replicas on four 1-GPU instances.
    t = table([serving([srow("a", 1, rate=3.0)], demand=10.0)], [cloud("a", 1, 2.0)], horizon_months=1)
    plan = plan_table(t, PlanOptions(top=1, explain=False))
    d = plan.designs[0]
    w = d.workloads[0]
    assert isinstance(w, ServingPlan)
    (g,) = w.groups
    assert (g.replicas, g.cloud_replicas) == (4, 4)
    assert check_design_on_table(d, t) == []
    three = g.model_copy(update={"replicas": 3, "cloud_replicas": 3, "gpus": 3})
    broken = d.model_copy(update={"workloads": [w.model_copy(update={"groups": [three]})]})
    problems = check_design_on_table(broken, t)
    # 3 x 3 = 9 req/s: short of the demand both within the p95 target and at the utilisation ceiling.
    short = [p for p in problems if "demanded" in p]
    assert len(short) == 2 and all("9.000" in p for p in short), problems


def test_a_training_runs_cloud_line_is_found_by_its_workload_not_by_its_words(solved, catalog) -> None:  # type: ignore[no-untyped-def]
    """The checker reads which workload a cloud line trains from the line's ``trains``, not from the words of its
    ``purpose``: reworded, the QLoRA example's design still passes; pointed at another workload, it does not."""
    resolved, plan = solved["7b-qlora-finetune"]
    design = plan.designs[0]
    (line,) = [h for h in design.hardware if h.kind == "cloud"]
    assert line.trains == "domain-adapt" and check_plan(design, resolved, catalog) == []
    reworded = design.model_copy(update={"hardware": [line.model_copy(update={"purpose": "the fine-tune, 9 h"})]})
    assert check_plan(reworded, resolved, catalog) == []
    elsewhere = design.model_copy(update={"hardware": [line.model_copy(update={"trains": "another"})]})
    assert any("expected one cloud instance line" in p for p in check_plan(elsewhere, resolved, catalog))
