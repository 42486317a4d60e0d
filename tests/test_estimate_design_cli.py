"""``clusterplan estimate --design PLAN.json`` and the pool flags as a user meets them: located refusals (exit 2)
for what is not a plan, an index the plan does not hold and flags that do not pair up; a design read back whole.
(That every example's design 1 is reproduced to the cent is tests/test_one_path.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import EXAMPLES_DIR, run_cli

MIXTRAL = EXAMPLES_DIR / "mixtral-serving.yaml"
SEVEN_B = EXAMPLES_DIR / "7b-chat-serving.yaml"


def _plan_file(tmp_path: Path, designs: int = 1) -> Path:
    """A plan of the 7B example as ``solve --json`` writes it (its design 1 on one GPU type)."""
    result = run_cli("solve", str(SEVEN_B), "--json", "--top", str(designs))
    assert result.exit_code == 0, result.output
    path = tmp_path / "plan.json"
    path.write_text(result.stdout)
    return path


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not JSON"),
        ('{"name": "a requirement"}', "a plan as clusterplan solve --json writes it"),
        ("[1, 2]", "a plan as clusterplan solve --json writes it"),
    ],
)
def test_a_file_that_is_not_a_plan_is_refused_with_its_location(tmp_path: Path, text: str, says: str) -> None:
    bad = tmp_path / "not-a-plan.json"
    bad.write_text(text)
    result = run_cli("estimate", str(SEVEN_B), "--design", str(bad))
    assert result.exit_code == 2, result.output
    assert "not-a-plan.json" in result.output and says in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_missing_plan_file_is_refused(tmp_path: Path) -> None:
    result = run_cli("estimate", str(SEVEN_B), "--design", str(tmp_path / "absent.json"))
    assert result.exit_code == 2, result.output
    assert "absent.json" in result.output


def test_an_index_the_plan_does_not_hold_is_refused(tmp_path: Path) -> None:
    plan = _plan_file(tmp_path)
    held = len(json.loads(plan.read_text())["designs"])
    for index in (0, held + 1):
        result = run_cli("estimate", str(SEVEN_B), "--design", str(plan), "--index", str(index))
        assert result.exit_code == 2, result.output
        flat = " ".join(result.output.split())
        assert "--index" in flat and f"no design {index}" in flat and f"holds {held}" in flat


def test_a_design_with_layout_flags_is_refused(tmp_path: Path) -> None:
    plan = _plan_file(tmp_path)
    result = run_cli("estimate", str(SEVEN_B), "--design", str(plan), "--tp", "2")
    assert result.exit_code == 2, result.output
    assert "--tp" in result.output and "fixes the layout" in " ".join(result.output.split())


def test_index_without_design_is_refused() -> None:
    result = run_cli("estimate", str(SEVEN_B), "--gpu", "h100-sxm", "--index", "2")
    assert result.exit_code == 2, result.output
    assert "--design" in result.output


def test_design_1_read_back_prices_as_solve(tmp_path: Path) -> None:
    plan = _plan_file(tmp_path)
    cost = json.loads(plan.read_text())["designs"][0]["costs"]["total_usd"]
    result = run_cli("estimate", str(SEVEN_B), "--design", str(plan), "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert abs(got["costs"]["total_usd"] - cost) < 0.005
    assert got["source"].endswith("design 1") and got["parts"][0]["config"]["role"] == "aggregated"


def test_pool_flags_given_a_mismatched_number_of_times_are_refused() -> None:
    result = run_cli(
        "estimate", str(MIXTRAL), "--quant", "fp8", "--prefill-gpu", "gh200", "--prefill-gpu", "l40s",
        "--prefill-tp", "1", "--prefill-tp", "1", "--prefill-tp", "1", "--decode-gpu", "b200",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--prefill-gpu" in result.output and "given 2 times for 3 prefill groups" in result.output


def test_one_pool_alone_is_not_a_design() -> None:
    result = run_cli("estimate", str(MIXTRAL), "--quant", "fp8", "--prefill-gpu", "gh200")
    assert result.exit_code == 2, result.output
    assert "a prefill pool and a decode pool" in " ".join(result.output.split())


def test_pool_flags_estimate_both_pools_and_the_whole() -> None:
    result = run_cli(
        "estimate", str(MIXTRAL), "--quant", "fp8", "--deployment", "cloud", "--prefill-gpu", "gh200",
        "--prefill-count", "2", "--decode-gpu", "b200", "--decode-count", "1",
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    out = result.output
    assert "(prefill pool)" in out and "(decode pool)" in out and "The design as a whole" in out
    assert "KV transfer to the decode pool" in out and "TTFT mean" not in out  # a pool's means are not modelled
