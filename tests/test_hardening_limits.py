"""Solver limits: numeric ranges, the time limit, and the statuses a user sees when it bites.

* Figures beyond the ranges the solver represents exactly are refused (the corpus in
  tests/data/broken and tests/data/catalogs holds the located refusals); combinations of in-range
  figures that still overflow give a plain exit-2 message, never a traceback.
* ``--time-limit`` bounds each CP-SAT call; a design found before a proof of optimality is
  ``feasible`` with its bound and gap, and the table says so in a sentence; no answer at all is
  ``unknown`` (exit 4), never ``infeasible``.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from clusterplan.cli import app
from clusterplan.commands.solve import time_limit_note
from clusterplan.design.check import check_design_on_table, check_plan
from clusterplan.errors import ClusterplanError, OutOfRange
from clusterplan.pipeline import PlanOptions, plan_requirement, plan_table
from clusterplan.plan import Plan
from clusterplan.planner import solve as solve_module
from clusterplan.planner.solve import Planner
from clusterplan.planner.synthetic import synthetic_table
from clusterplan.requirement.load import load_requirement_text
from clusterplan.units import NotRepresentable
from conftest import example

runner = CliRunner()
EXAMPLE_70B = example("70b-serving")

# Four serving workloads that may mix GPU types: enough that CP-SAT needs more than a few
# hundredths of a second to prove the optimum, small enough that candidates take about two seconds.
SLOW_TO_PROVE = {
    "name": "four mixed serving workloads",
    "model": "llama-3.1-8b",
    "workloads": [
        {
            "kind": "serving",
            "name": f"s{i}",
            "requests_per_min": 200 + 137 * i,
            "output_tokens": 100 + 50 * i,
            "p95_latency": f"{3 + i}s",
            "redundancy": i % 2,
        }
        for i in range(4)
    ],
    "constraints": {"allow_mixed": True, "allowed_gpus": ["l4", "a10g", "l40s", "rtx-4090"]},
}
TIMING = re.compile(r"CP-SAT (?P<cpsat>[0-9.]+) s over (?P<solves>\d+) solves")


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "req.yaml") -> Path:
    f = tmp_path / name
    f.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return f


# ------------------------------------------------------------------------------------------------
# Numeric ranges
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("demand_rps", [1e-2, 1e-4, 1e-6])
def test_tiny_demand_with_mixing_and_redundancy_plans(demand_rps: float) -> None:
    """Regression: the tie-break objective gpus x (headroom_ub + 1) overflowed int64 ("CP-SAT rejected
    the model: Possible integer overflow in objective") once demand was far below one replica's rate."""
    t = synthetic_table(gpu_types=3, serving=1, seed=1, mixed=True, redundancy=2, demand_rps=demand_rps)
    plan = plan_table(t, PlanOptions(top=2, explain=True))
    assert plan.status == "optimal"
    assert all(check_design_on_table(d, t) == [] for d in plan.designs)


@pytest.mark.slow
def test_a_request_a_minute_with_mixing_and_redundancy_plans(tmp_path: Path, catalog: Any) -> None:
    """The same regression as a user met it: allow_mixed, redundancy 1, one request a minute."""
    doc = {
        "model": "llama-3.1-8b",
        "workloads": [{"kind": "serving", "requests_per_min": 1, "redundancy": 1, "allow_mixed": True}],
        "constraints": {"allowed_gpus": ["l4", "h100-sxm"]},
    }
    f = _write(tmp_path, doc)
    result = runner.invoke(app, ["solve", str(f), "--json", "--top", "2"])
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate_json(result.stdout)
    resolved = load_requirement_text(f.read_text(), str(f), catalog)
    assert all(check_plan(d, resolved, catalog) == [] for d in plan.designs)


def test_figures_the_solver_cannot_represent_are_a_plain_refusal() -> None:
    t = synthetic_table(gpu_types=3, serving=1, seed=1, mixed=True, redundancy=2, demand_rps=1e-9)
    with pytest.raises(OutOfRange) as info:
        plan_table(t, PlanOptions(top=1, explain=False))
    assert info.value.exit_code == 2
    assert "cannot plan this requirement exactly" in info.value.render()
    assert "docs/guarantees.md" in info.value.render()


def test_the_refusal_is_recognised_by_its_type_not_its_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """A figure clusterplan.units cannot hold is refused plainly whatever its message says; any other
    error from building the model stays the bug it is, even when its message reads like a range problem."""
    table = synthetic_table(gpu_types=2, serving=1, seed=1)

    def refuse(message: str, kind: type[ValueError]) -> Any:
        def build(*_: Any, **__: Any) -> Any:
            raise kind(message)

        return build

    monkeypatch.setattr(solve_module, "build", refuse("demand: 1e300 will not fit in an int64", NotRepresentable))
    with pytest.raises(OutOfRange) as info:
        Planner(table)
    assert "demand: 1e300 will not fit in an int64" in info.value.render()
    monkeypatch.setattr(solve_module, "build", refuse("x: too large for the solver at resolution 1", ValueError))
    with pytest.raises(ValueError) as bug:
        Planner(table)
    assert not isinstance(bug.value, OutOfRange)


def test_in_range_figures_either_plan_or_are_refused_plainly(catalog: Any) -> None:
    """max_throughput at the smallest demand accepted, on the fastest GPUs: a plan the checker confirms
    or the exit-2 OutOfRange message; never an internal error."""
    text = yaml.safe_dump(
        {
            "model": "mpt-3b",
            "workloads": [
                {"kind": "serving", "requests_per_min": 0.01, "input_tokens": 1, "output_tokens": 1, "redundancy": 3}
            ],
            "budget": {"total": "$10M"},
            "constraints": {"allowed_gpus": ["b200", "h100-sxm", "l4"], "allow_mixed": True},
        }
    )
    resolved = load_requirement_text(text, "r.yaml", catalog)
    try:
        plan = plan_requirement(resolved, catalog, PlanOptions(top=1, objective="max_throughput", explain=False))
    except ClusterplanError as exc:
        assert exc.exit_code == 2 and isinstance(exc, OutOfRange)
        return
    assert all(check_plan(d, resolved, catalog) == [] for d in plan.designs)


class _Timeout(Exception):
    pass


@pytest.fixture
def alarm() -> Iterator[None]:
    def _raise(*_: object) -> None:
        raise _Timeout

    old = signal.signal(signal.SIGALRM, _raise)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_tiny_inline_model_is_planned_or_refused_within_seconds(catalog: Any, alarm: None) -> None:
    text = (
        "model: {name: toy, layers: 1, hidden_size: 1, attention_heads: 1, kv_heads: 1, ffn_size: 1, vocab_size: 1}\n"
        "workloads: [{kind: serving, requests_per_min: 100}]\n"
        "constraints: {allowed_gpus: [l4]}\n"
    )
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        resolved = load_requirement_text(text, "toy.yaml", catalog)
        plan_requirement(resolved, catalog, PlanOptions(top=1, explain=False))
    except ClusterplanError as exc:
        assert exc.exit_code == 2


# ------------------------------------------------------------------------------------------------
# The time limit
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("slow"), SLOW_TO_PROVE)


@pytest.mark.slow
def test_time_limit_bounds_every_cpsat_call_and_the_status_says_what_it_found(slow_file: Path) -> None:
    limit = 0.05
    result = runner.invoke(app, ["solve", str(slow_file), "--time-limit", str(limit), "--top", "1", "--no-explain"])
    out = result.output
    m = TIMING.search(out)
    assert m, out
    solves = int(m["solves"])
    assert float(m["cpsat"]) <= solves * limit * 2 + 0.5, out  # each call stops near its limit
    if result.exit_code == 4:
        assert "status: UNKNOWN" in out and "No answer within the time limit" in out
        assert "INFEASIBLE" not in out
    else:
        assert result.exit_code == 0, out
        if "status: FEASIBLE" in out:
            assert "Stopped at the time limit (0.05 s for the whole command); not proven optimal (gap " in out
        else:
            assert "status: OPTIMAL" in out and "Stopped at the time limit" not in out


@pytest.mark.slow
def test_a_time_limited_design_reports_bound_and_gap_in_json(slow_file: Path, catalog: Any) -> None:
    result = runner.invoke(app, ["solve", str(slow_file), "--time-limit", "0.05", "--json", "--top", "1"])
    assert result.exit_code in (0, 4), result.output
    data = json.loads(result.stdout)
    s = data["solver"]
    assert s["time_limit_s"] == 0.05 and data["status"] == s["status"]
    if data["status"] == "unknown":
        assert data["designs"] == [] and data["infeasibility"] is None
        assert s["objective_value"] is None
        return
    assert s["objective_value"] is not None and s["best_bound"] is not None and s["gap"] is not None
    if data["status"] == "feasible":
        assert s["gap"] > 0 and s["best_bound"] <= s["objective_value"]
    else:
        assert data["status"] == "optimal" and s["gap"] == 0
    resolved = load_requirement_text(slow_file.read_text(), str(slow_file), catalog)
    plan = Plan.model_validate(data)
    assert all(check_plan(d, resolved, catalog) == [] for d in plan.designs)


def _as_status(plan: Plan, status: str, gap: float | None) -> Plan:
    solver = plan.solver.model_copy(update={"status": status, "gap": gap, "time_limit_s": 2.0})
    return plan.model_copy(update={"status": status, "solver": solver})


@pytest.fixture(scope="module")
def solved_70b(catalog: Any) -> Plan:
    resolved = load_requirement_text(EXAMPLE_70B.read_text(), str(EXAMPLE_70B), catalog)
    return plan_requirement(resolved, catalog, PlanOptions(top=1, explain=False))


def test_the_time_limit_sentence_is_only_for_feasible(solved_70b: Plan) -> None:
    assert time_limit_note(solved_70b) is None  # optimal
    note = time_limit_note(_as_status(solved_70b, "feasible", 0.125))
    assert note is not None
    assert note.startswith("Stopped at the time limit (2 s for the whole command); not proven optimal (gap 12.5%")
    assert time_limit_note(_as_status(solved_70b, "unknown", None)) is None


@pytest.mark.parametrize(("status", "code"), [("feasible", 0), ("unknown", 4), ("infeasible", 1)])
def test_cli_exit_codes_follow_the_status(
    solved_70b: Plan, status: str, code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import clusterplan.pipeline as pipeline

    plan = _as_status(solved_70b, status, 0.125 if status == "feasible" else None)
    if status != "feasible":
        plan = plan.model_copy(update={"designs": []})
    monkeypatch.setattr(pipeline, "plan_requirement", lambda *a, **k: plan)
    result = runner.invoke(app, ["solve", str(EXAMPLE_70B), "--top", "1"])
    assert result.exit_code == code, result.output
    assert ("not proven optimal (gap 12.5%" in result.output) == (status == "feasible")
    assert ("No answer within the time limit" in result.output) == (status == "unknown")
