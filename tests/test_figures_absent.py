"""Figures that hold together: a statistic the model does not produce is absent (``null`` in JSON, ``-`` in the
table and Markdown), never 0.0; ``estimate --json`` on a replica its load overruns writes valid JSON (the unbounded
figures null, each with a reason code) and exits as the text view does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import EXAMPLES_DIR, run_cli, shared_plan

MIXTRAL = EXAMPLES_DIR / "mixtral-serving.yaml"  # design 1: two prefill pools and a decode pool


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("as_json", [True, False])
def test_an_overloaded_replica_is_unbounded_not_a_crash(as_json: bool) -> None:
    args = ["estimate", str(MIXTRAL), "--gpu", "gh200", "--tp", "1", "--pp", "1", "--quant", "fp8", "--dp", "1"]
    result = run_cli(*args, *(["--json"] if as_json else []))
    assert result.exit_code == 0, result.output  # the configuration runs; its load overruns it (a note says so)
    if not as_json:
        assert "unbounded" in result.output
        return
    data = _strict_json(result.stdout)
    assert data["load"]["latency"]["p95_ttft_s"] is None and data["load"]["latency"]["mean_e2e_s"] is None
    fields = {u["field"]: u["reason"] for u in data["unbounded"]}
    assert fields["load.latency.p95_ttft_s"] == "queue_grows_without_bound"


def test_a_bounded_estimate_lists_nothing_unbounded() -> None:
    result = run_cli("estimate", str(MIXTRAL), "--gpu", "h100-sxm", "--tp", "2", "--quant", "fp8", "--json")
    assert result.exit_code == 0, result.output
    assert "unbounded" not in _strict_json(result.stdout)


@pytest.mark.slow
def test_a_pools_unmodelled_figures_are_absent(catalog: Any, tmp_path: Any) -> None:
    # The 70B example with disaggregation required: design 1 is a prefill pool and a decode pool.
    pooled_70b = tmp_path / "70b-pooled.yaml"
    text = (EXAMPLES_DIR / "70b-serving.yaml").read_text()
    pooled_70b.write_text(text.replace("p95_latency: 5s", "p95_latency: 5s\n    disaggregation: required"))
    plan = shared_plan(pooled_70b, catalog, top=1, explain=False)
    groups = [g for w in plan.designs[0].workloads for g in getattr(w, "groups", [])]
    pooled = [g for g in groups if g.role != "aggregated"]
    assert {g.role for g in pooled} == {"prefill", "decode"}
    for g in pooled:
        assert (g.mean_ttft_s, g.mean_tpot_s, g.mean_latency_s) == (None, None, None)
        if g.role == "prefill":
            assert (g.tpot_s, g.p95_tpot_s) == (None, None)
    dumped = json.loads(plan.model_dump_json())
    prefill = next(g for w in dumped["designs"][0]["workloads"] for g in w["groups"] if g["role"] == "prefill")
    assert prefill["mean_ttft_s"] is None and prefill["p95_tpot_s"] is None
    table = run_cli("solve", str(pooled_70b), "--top", "1").output
    markdown = run_cli("solve", str(pooled_70b), "--top", "1", "--markdown").output
    assert "0.0 ms" not in table and "mean 0.0" not in markdown
    assert "TTFT mean - / p95" in markdown
