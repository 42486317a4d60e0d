"""``clusterplan sweep``: rows agree with individual plans, jobs do not matter, bad fields and values exit 2
with a hint. Fields and values themselves: test_sweep_vary.py; frontiers: test_frontier.py."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from clusterplan.catalog.load import load_catalog
from clusterplan.cli import app
from clusterplan.pipeline import PlanOptions, plan_table
from clusterplan.plan import Design, Plan
from clusterplan.planner.synthetic import synthetic_table
from clusterplan.whatif.points import PointOutcome, load_base
from clusterplan.whatif.sweep import grid, row_of
from clusterplan.whatif.vary import make_axis
from conftest import example, plan_file

SERVING_70B = example("70b-serving")
runner = CliRunner()

# 0.2 s cannot be met (infeasible), 3 s and 8 s can; 9k input tokens exceed max_context 8k (invalid).
LATENCY_SPEC = "p95_latency=0.2s,3s,8s"


@pytest.fixture(scope="module")
def sweep_one_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("sweep") / "one.json"
    result = runner.invoke(app, ["sweep", str(SERVING_70B), "--vary", LATENCY_SPEC, "-j", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(out.read_text())
    data["_stdout"] = result.output
    data["_text"] = out.read_text()
    return data


def _plan_at(tmp_path: Path, p95_s: float) -> Any:
    """An independent plan of the same point: edit the YAML by hand, write it, solve it."""
    doc = yaml.safe_load(SERVING_70B.read_text())
    doc["workloads"][0]["p95_latency"] = f"{p95_s}s"
    f = tmp_path / f"p95-{p95_s}.yaml"
    f.write_text(yaml.safe_dump(doc))
    return plan_file(f, load_catalog())


@pytest.mark.slow
def test_sweep_rows_agree_with_individual_plans(sweep_one_job: dict[str, Any], tmp_path: Path) -> None:
    rows = sweep_one_job["rows"]
    assert [(r["values"][0], r["status"]) for r in rows] == [(0.2, "infeasible"), (3.0, "optimal"), (8.0, "optimal")]
    infeasible, *feasible = rows
    plan = _plan_at(tmp_path, 0.2)
    assert plan.status == "infeasible" and not plan.designs and plan.infeasibility is not None
    assert infeasible["binding"] == [f.title for f in plan.infeasibility.conflict] != []
    for row in feasible:
        plan = _plan_at(tmp_path, row["values"][0])
        expected = row_of(PointOutcome(index=row["index"], values=row["values"], status=plan.status,
                                       design=plan.designs[0]), "min_cost")  # fmt: skip
        assert row["status"] == plan.status
        assert row["design"] == plan.designs[0].summary
        assert row["total_usd"] == pytest.approx(plan.designs[0].costs.total_usd, abs=1e-6)
        assert row["binding"] == expected.binding
        assert (row["gpus"], row["parallelism"], row["quantization"]) == (
            expected.gpus,
            expected.parallelism,
            expected.quantization,
        )
        assert row["throughput"] == pytest.approx(expected.throughput)
        assert row["p95_latency_s"] == pytest.approx(expected.p95_latency_s)


def _without_trades(plan: Plan) -> list[Design]:
    return [
        d.model_copy(update={"constraints": [c.model_copy(update={"trade": None}) for c in d.constraints]})
        for d in plan.designs
    ]


def test_explain_binding_gives_the_same_design_and_conflict_without_the_rest() -> None:
    """What a sweep row plans with: the full explanation's first design and minimal conflict, nothing more."""
    t = synthetic_table(gpu_types=3, serving=2, training=1, seed=5)
    full = plan_table(t, PlanOptions(top=1, explain=True))
    binding = plan_table(t, PlanOptions(top=1, explain="binding"))
    # The full explanation adds each binding family's trade ("to what"); a sweep row does without.
    assert _without_trades(binding) == _without_trades(full) and full.explanation is not None
    assert binding.explanation is None
    short = replace(t, limits=replace(t.limits, budget_total_usd=1.0))
    full = plan_table(short, PlanOptions(top=1, explain=True))
    binding = plan_table(short, PlanOptions(top=1, explain="binding"))
    assert binding.status == full.status == "infeasible"
    assert binding.infeasibility is not None and full.infeasibility is not None
    assert binding.infeasibility.conflict == full.infeasibility.conflict != []
    assert full.infeasibility.relaxations and binding.infeasibility.relaxations == []
    assert binding.infeasibility.text == "conflict: " + ", ".join(f.title for f in full.infeasibility.conflict)


@pytest.mark.slow
def test_sweep_results_do_not_depend_on_jobs(sweep_one_job: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "two.json"
    result = runner.invoke(app, ["sweep", str(SERVING_70B), "--vary", LATENCY_SPEC, "-j", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == sweep_one_job["_text"]


@pytest.mark.slow
def test_sweep_table_marks_switches_and_feasibility(sweep_one_job: dict[str, Any]) -> None:
    rows = sweep_one_job["rows"]
    assert rows[0]["status"] == "infeasible" and rows[1]["change"] == "feasible from here"
    # Both changes are bisected (the command's default, 1%): the notes give the value in between.
    feasible, switch = sweep_one_job["switches"]
    assert feasible["before"]["status"] == "infeasible" and feasible["after"]["shape"] is not None
    assert 0.2 < feasible["at"] < 3.0 and feasible["tolerance"] <= 0.01
    assert any(n.startswith("feasible from p95_latency ≈ ") for n in sweep_one_job["notes"])
    assert "- feasible from p95_latency ≈ " in sweep_one_job["_stdout"] and "switch points" in sweep_one_job["_stdout"]
    # From 3 s to 8 s the optimum changes shape: the row says so, and so does a note.
    assert not rows[1]["switch"]
    one, other = rows[1]["shape"], rows[2]["shape"]
    assert one and other and one != other
    assert rows[2]["switch"] and rows[2]["change"] == f"{one} → {other}"
    assert switch["before"]["shape"] == one and 3.0 < switch["at"] < 8.0 and switch["after_index"] == 2
    assert any(
        n.startswith("the optimal design switches at p95_latency ≈ ") and f": {one} → " in n
        for n in sweep_one_job["notes"]
    )


@pytest.mark.slow
def test_sweep_without_bisection_names_the_sample_points(tmp_path: Path) -> None:
    out = tmp_path / "plain.json"
    args = ["sweep", str(SERVING_70B), "--vary", "p95_latency=0.2s,3s", "-j", "1", "--switch-tolerance", "0"]
    result = runner.invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["switches"] == [] and any("feasible from p95_latency = 3 s" in n for n in data["notes"])


@pytest.mark.slow
def test_invalid_point_is_a_row_not_a_failure(tmp_path: Path) -> None:
    csv_out = tmp_path / "rows.csv"
    result = runner.invoke(
        app, ["sweep", str(SERVING_70B), "--vary", "input_tokens=1k,9k", "-j", "1", "--csv", str(csv_out)]
    )
    assert result.exit_code == 0, result.output
    lines = csv_out.read_text().splitlines()
    assert lines[0].startswith("input_tokens (tokens),status,")
    assert lines[1].split(",")[1] == "optimal"
    assert lines[2].split(",")[1] == "invalid" and "max_context" in lines[2]


@pytest.mark.parametrize(
    ("vary", "expect"),
    [
        ("peak_to_avrage=1..2", "did you mean 'peak_to_average'"),
        ("workloads[0].name=1..2", "is not a number"),
        ("workloads[4].p95_latency=1s..2s", "there is no workloads[4]"),
        ("gpu_price.h100=20k..30k", "did you mean 'h100"),
        ("deadline=1d..2d", "no training or fine-tuning workload"),
        ("p95_latency=fast..slow", "expected a duration"),
        ("budget", "is not FIELD=SPEC"),
    ],
)
def test_bad_vary_exits_2_with_a_hint(vary: str, expect: str) -> None:
    result = runner.invoke(app, ["sweep", str(SERVING_70B), "--vary", vary, "-j", "1"])
    assert result.exit_code == 2, result.output
    assert expect in result.output
    assert "Traceback" not in result.output


def test_bad_plot_suffix_and_max_throughput_without_budget_exit_2(tmp_path: Path) -> None:
    bad = runner.invoke(app, ["sweep", str(SERVING_70B), "--vary", "demand=1k", "--plot", str(tmp_path / "x.pdf")])
    assert bad.exit_code == 2 and ".png or .svg" in bad.output
    unbounded = runner.invoke(app, ["sweep", str(SERVING_70B), "--vary", "demand=1k", "--objective", "max_throughput"])
    assert unbounded.exit_code == 2 and "needs a budget" in unbounded.output


# ------------------------------------------------------------------------------------------------
# Grids and points
# ------------------------------------------------------------------------------------------------


def test_grid_first_axis_fastest(catalog: Any) -> None:
    base, _ = load_base(SERVING_70B)
    a = make_axis("p95_latency=1s,2s", base.data, catalog, steps=10, log=False)
    b = make_axis("demand=100,200,300", base.data, catalog, steps=10, log=False)
    assert grid([a, b]) == [(1.0, 100.0), (2.0, 100.0), (1.0, 200.0), (2.0, 200.0), (1.0, 300.0), (2.0, 300.0)]


def test_requirement_edits_do_not_touch_the_base(catalog: Any) -> None:
    base, _ = load_base(SERVING_70B)
    before = copy.deepcopy(base.data)
    from clusterplan.planner.solve import SolverSettings
    from clusterplan.whatif.sweep import build_tasks

    axis = make_axis("budget=300k,400k", base.data, catalog, steps=10, log=False)
    tasks = build_tasks(base, [axis], objective="min_cost", solver=SolverSettings())
    assert base.data == before
    assert [yaml.safe_load(t.text)["budget"]["total"] for t in tasks] == [300_000.0, 400_000.0]
    assert yaml.safe_load(tasks[0].text)["budget"]["horizon"] == 36


# ------------------------------------------------------------------------------------------------
# Plots
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_plots_are_deterministic(sweep_one_job: dict[str, Any]) -> None:
    from clusterplan.render.plots import sweep_figure
    from clusterplan.whatif.sweep import SweepResult

    result = SweepResult.model_validate({k: v for k, v in sweep_one_job.items() if not k.startswith("_")})
    png = sweep_figure(result, "png")
    assert png.startswith(b"\x89PNG") and png == sweep_figure(result, "png")
    svg = sweep_figure(result, "svg")
    assert svg == sweep_figure(result, "svg") and b"<dc:date>" not in svg


@pytest.mark.slow
def test_markdown_lists_rows_and_switch_points(tmp_path: Path) -> None:
    md = tmp_path / "sweep.md"
    args = ["sweep", str(SERVING_70B), "--vary", "budget=300k,700k", "-j", "1", "--markdown", str(md)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = md.read_text()
    assert text.startswith("# 70B chat serving: sweep of budget (2)")
    assert "| $300k | infeasible |" in text and "| $700k | optimal |" in text
    switches = text.split("## Switch points")[1]
    assert "| budget ≈ | between | below | above |" in switches and "| infeasible | " in switches
    assert "- feasible from budget ≈ " in text


@pytest.mark.slow
def test_started_tasks_give_the_outcomes_run_tasks_gives_in_task_order() -> None:
    """What the review starts before its plan (whatif.points.start_tasks, read later) is what planning the points
    one by one gives, in task order, whatever order the workers finish in; tasks left unread are stopped."""
    from clusterplan.planner.solve import SolverSettings
    from clusterplan.whatif.points import run_tasks, start_tasks
    from clusterplan.whatif.sweep import sweep_tasks

    base, _ = load_base(example("7b-chat-serving"))
    axis = make_axis("demand=100,400,1600", base.data, base.catalog, steps=3, log=False)
    tasks = sweep_tasks(base, [axis], objective="min_cost", solver=SolverSettings())
    done: list[int] = []
    with start_tasks(tasks, jobs=2, on_done=done.append) as started:
        outcomes = started.outcomes()
    assert outcomes == run_tasks(tasks, jobs=1)
    assert [o.index for o in outcomes] == [0, 1, 2] and done == [1, 2, 3]
    with start_tasks(tasks, jobs=2) as unread:
        pass
    assert all(f.done() for f in unread.futures)  # cancelled, or stopped with their workers
