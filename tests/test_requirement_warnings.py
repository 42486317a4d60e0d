"""Contradictions inside a requirement are warned about (a record in the plan, a line in validate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clusterplan.cli import app
from clusterplan.explain.contradictions import contradictions
from clusterplan.plan import INVENTORY_IGNORED

CLOUD_WITH_INVENTORY = """name: cloud with inventory
model: llama-3.1-8b
workloads:
  - kind: serving
    requests_per_min: 60
    p95_latency: 10s
deployment: {deployment}
constraints:
  inventory:
    - gpu: h200
      count: 4
"""


def _file(tmp_path: Path, deployment: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(CLOUD_WITH_INVENTORY.format(deployment=deployment))
    return path


def test_inventory_under_a_cloud_deployment_is_a_warning_record() -> None:
    (w,) = contradictions("cloud", [("h200", 4)])
    assert w.code == INVENTORY_IGNORED and w.gpus == ["4x h200"]
    assert contradictions("either", [("h200", 4)]) == []
    assert contradictions("cloud", []) == []


@pytest.mark.slow
def test_validate_and_solve_warn_that_cloud_ignores_the_inventory(tmp_path: Path) -> None:
    path = _file(tmp_path, "cloud")
    runner = CliRunner()
    v = runner.invoke(app, ["validate", str(path)])
    assert v.exit_code == 0, v.output
    assert "warning: deployment: cloud ignores constraints.inventory (4x h200)" in v.output
    s = runner.invoke(app, ["solve", str(path), "--json"])
    assert s.exit_code == 0, s.output
    assert [w["code"] for w in json.loads(s.output)["warnings"]] == [INVENTORY_IGNORED]
    md = runner.invoke(app, ["solve", str(path), "--markdown"])
    assert "**Warning:** deployment: cloud ignores constraints.inventory" in md.output
    table = runner.invoke(app, ["solve", str(path)])
    assert "warning: deployment: cloud ignores constraints.inventory" in table.output


def test_no_warning_when_the_inventory_can_be_used(tmp_path: Path) -> None:
    v = CliRunner().invoke(app, ["validate", str(_file(tmp_path, "either"))])
    assert v.exit_code == 0 and "warning:" not in v.output
