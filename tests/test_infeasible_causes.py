"""Infeasibility names the real cause first: the model fits no allowed layout, the budget buys nothing
that runs it; never a "minimal set" it then calls not enough, never an empty $0-$1 plot (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import example, run_cli


def _consumer_405b(tmp_path: Path) -> Path:
    """The 405B example on RTX 4090/5090 with $50k: 405B at int4 needs 25.3 GiB per GPU even at TP8."""
    text = example("405b-serving").read_text()
    text = text.replace("  horizon: 36\n", "  horizon: 36\n  total: 50000\n")
    assert "\nconstraints:" not in text and "\nquality:" not in text  # the example states neither
    text += "constraints:\n  allowed_gpus: [rtx-4090, rtx-5090]\nquality: {max_loss: any}  # int4 allowed\n"
    path = tmp_path / "405b-consumer.yaml"
    path.write_text(text)
    return path


def test_405b_on_consumer_cards_says_it_fits_no_allowed_layout_and_the_budget_buys_nothing(tmp_path: Path) -> None:
    path = _consumer_405b(tmp_path)
    result = run_cli("solve", str(path), "--json")
    assert result.exit_code == 1, result.output
    inf = json.loads(result.stdout)["infeasibility"]
    fit, budget, fix = inf["causes"]
    assert fit.startswith(
        "research: Llama 3.1 405B does not fit any allowed layout on the GPUs the requirement allows "
        "(rtx-4090, rtx-5090) (closest: does not fit in memory"
    ), fit
    assert "it fits on " in fit and "h200" in fit
    assert budget.startswith("the budget (budget.total $50,000) buys nothing that runs it"), budget
    assert fix.startswith("allowing a GPU type, precision or layout it fits and a budget that covers it restore")
    assert inf["conflict"] == [] and inf["relaxations"] == []
    table = run_cli("solve", str(path)).output
    assert table.index("does not fit any allowed layout") < table.index("buys nothing")
    assert "minimal" not in table and "not enough" not in table


@pytest.mark.slow
def test_an_infeasible_sweep_plot_says_why_instead_of_an_empty_scale(tmp_path: Path) -> None:
    svg = tmp_path / "p.svg"
    result = run_cli(
        "sweep", str(_consumer_405b(tmp_path)), "--vary", "budget=40k,50k", "--jobs", "1", "--plot", str(svg)
    )
    assert result.exit_code in (0, 1), result.output
    text = svg.read_text()
    assert "no design at any budget tried" in text


def test_the_fix_sentence_agrees_with_how_many_changes_it_names_not_with_its_words() -> None:
    """ "X restores feasibility", "X and Y restore": the count decides, so a change whose own words say
    "and" is still one change (reading " and " in the sentence made it plural)."""
    from clusterplan.explain.infeasibility import _restores

    one = "allowing a GPU type and a layout it fits"
    assert _restores([one]) == f"{one} restores feasibility"
    assert _restores([one, "a budget that covers it"]) == f"{one} and a budget that covers it restore feasibility"
