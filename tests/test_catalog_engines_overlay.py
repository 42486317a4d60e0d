"""A user catalog's engine rows are the ones the physics runs: an override of the `vllm` row moves a serving
estimate and the plan (issue 32: an overlay shown by `catalog engines` and then ignored by planning)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterplan.catalog.load import load_catalog_text
from conftest import example, run_cli

# vLLM with a step ten times dearer and a memory fraction of 0.6: slower decode, a smaller KV pool.
SLOW_VLLM = """
engines:
- id: vllm
  override: true
  memory_fraction: 0.6
  decode_step_overhead_s: {datacenter: 0.0321, workstation: 0.0321, consumer: 0.0321}
  source: https://example.com/my-vllm-measurements
  as_of: '2026-12'
"""


def _overlay(tmp_path: Path, text: str = SLOW_VLLM) -> Path:
    path = tmp_path / "slow-vllm.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_overlay_is_the_catalogs_engine_row() -> None:
    user = load_catalog_text(SLOW_VLLM, "slow-vllm.yaml")
    assert user.engine("vllm").decode_step_overhead_s.datacenter == 0.0321


def test_an_engine_override_moves_an_estimate(tmp_path: Path) -> None:
    args = ["estimate", str(example("70b-serving")), "--gpu", "h100-sxm", "--count", "4", "--tp", "4", "--json"]
    shipped, mine = run_cli(*args), run_cli(*args, "--catalog", str(_overlay(tmp_path)))
    assert shipped.exit_code == 0 and mine.exit_code == 0, mine.output
    before, after = json.loads(shipped.output), json.loads(mine.output)
    assert after["serving"]["tpot_s"] > 1.2 * before["serving"]["tpot_s"]  # ten times the step overhead
    assert after["serving"]["max_batch_by_memory"] < before["serving"]["max_batch_by_memory"]  # fraction 0.6


@pytest.mark.slow
def test_an_engine_override_changes_the_plan(tmp_path: Path) -> None:
    args = ["solve", str(example("7b-chat-serving")), "--json"]
    slower = SLOW_VLLM.replace("  memory_fraction: 0.6\n", "").replace("0.0321", "0.008")
    shipped, mine = run_cli(*args), run_cli(*args, "--catalog", str(_overlay(tmp_path, slower)))
    assert shipped.exit_code == 0 and mine.exit_code == 0, mine.output
    assert json.loads(mine.output)["designs"] != json.loads(shipped.output)["designs"]
