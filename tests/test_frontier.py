"""``clusterplan frontier`` (:mod:`clusterplan.whatif.frontier`): Pareto marking, and no frontier point dominates another."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clusterplan.cli import app
from clusterplan.whatif.frontier import pareto
from conftest import example

SERVING_70B = example("70b-serving")
runner = CliRunner()


def test_pareto_drops_dominated_and_repeated_points() -> None:
    pts = [(100.0, 5.0), (150.0, 5.0), (120.0, 3.0), (100.0, 5.0), (200.0, 4.0), (300.0, 1.0)]
    assert pareto(pts, maximise=False) == [True, False, True, False, False, True]
    assert pareto([(1.0, 10.0), (2.0, 8.0), (3.0, 20.0)], maximise=True) == [True, False, True]


@pytest.mark.slow
def test_frontier_has_no_dominated_point(tmp_path: Path) -> None:
    out = tmp_path / "f.json"
    plot = tmp_path / "f.svg"
    result = runner.invoke(
        app, ["frontier", str(SERVING_70B), "--points", "2", "-j", "2", "--json", str(out), "--plot", str(plot)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    front = [p for p in data["points"] if p["on_frontier"]]
    assert len(front) >= 2 and "Pareto frontier" in result.output
    for i, p in enumerate(front):
        for q in front[:i] + front[i + 1 :]:
            assert not (q["total_usd"] <= p["total_usd"] and q["p95_latency_s"] <= p["p95_latency_s"]), (p, q)
    costs = [p["total_usd"] for p in front]
    assert costs == sorted(costs)
    assert plot.read_text().startswith("<?xml")
