"""``clusterplan solve`` through typer's CliRunner: outputs, exit codes, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clusterplan.cli import app
from conftest import example

EXAMPLE = example("70b-serving")

runner = CliRunner()

INFEASIBLE = """\
name: 70B on a shoestring
model: llama-3.1-70b
workloads:
  - kind: serving
    requests_per_min: 1000
    input_tokens: 1000
    output_tokens: 200
    p95_latency: 5s
budget:
  total: $20k
  horizon: 12
deployment: cloud
"""


@pytest.mark.slow
def test_solve_prints_designs_and_why() -> None:
    result = runner.invoke(app, ["solve", str(EXAMPLE), "--top", "2"])
    assert result.exit_code == 0, result.output
    assert "Designs, best first" in result.output
    assert "Why this one" in result.output


@pytest.mark.slow
def test_solve_json_is_the_documented_schema_and_byte_identical() -> None:
    first = runner.invoke(app, ["solve", str(EXAMPLE), "--json", "--top", "2"])
    second = runner.invoke(app, ["solve", str(EXAMPLE), "--json", "--top", "2"])
    assert first.exit_code == 0, first.output
    assert first.output == second.output
    data = json.loads(first.output)
    assert data["status"] == "optimal" and data["schema_version"] == "1"
    assert len(data["designs"]) == 2


def test_solve_markdown() -> None:
    result = runner.invoke(app, ["solve", str(EXAMPLE), "--markdown", "--top", "1", "--no-explain"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("# 70B chat serving")


@pytest.mark.slow
def test_infeasible_exits_1_with_the_conflict(tmp_path: Path) -> None:
    f = tmp_path / "tight.yaml"
    f.write_text(INFEASIBLE)
    result = runner.invoke(app, ["solve", str(f), "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert data["status"] == "infeasible"
    conflict = {c["id"] for c in data["infeasibility"]["conflict"]}
    assert "budget_total" in conflict
    changes = " ".join(r["change"] for r in data["infeasibility"]["relaxations"])
    assert "budget.total >= $" in changes


@pytest.mark.parametrize("bad", [["--json", "--markdown"], ["--objective", "cheapest"]])
def test_bad_options_exit_2(bad: list[str]) -> None:
    result = runner.invoke(app, ["solve", str(EXAMPLE), *bad])
    assert result.exit_code == 2


def test_max_throughput_without_budget_is_an_input_error() -> None:
    result = runner.invoke(app, ["solve", str(EXAMPLE), "--objective", "max_throughput"])
    assert result.exit_code == 2
    assert "needs a budget" in result.output
