"""When nothing fits, the explanation says what would: never a dangling colon, never a
relaxation that is not one, never "not enough" for a search that ran out of time.

Before: a conflict none of whose members could be relaxed alone ended its text with "Any one of
these changes restores feasibility: " and nothing after it, and the table said "relaxing X alone is
not enough (not enough on its own)" without saying what else conflicts; a relaxation solve that
timed out was reported as "not enough"; a demand no replica registers at was "relaxed" to
"peak demand <= 0.00 req/s".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from clusterplan.candidates.table import CandidateTable, GpuType, Limits, Offering, ServingRow
from clusterplan.explain import infeasibility
from clusterplan.explain.infeasibility import analyse
from clusterplan.pipeline import PlanOptions, plan_table
from clusterplan.plan import Plan
from clusterplan.planner.families import family
from clusterplan.planner.solve import Outcome, Planner
from clusterplan.planner.status import SolveStatus
from clusterplan.render import plan_markdown, table
from conftest import SMALL_SERVING, assert_not_dangling, infeasibility_of, serving_workload, solve_doc

GPUS = {"a": GpuType(id="a", name="A", tdp_w=500, nvlink_domain=8, price_usd=10000)}


def _owned() -> Offering:
    return Offering(
        key="owned:a:8",
        kind="owned",
        gpu_id="a",
        gpus_per_unit=8,
        tp_domain=8,
        capital_usd=50000.0,
        power_w=4800.0,
        energy_usd_per_month=320.0,
    )


def _two_conflicts() -> CandidateTable:
    """Owned servers only: the capital budget and the power cap each rule out every design alone."""
    row = ServingRow(gpu_id="a", tp=1, pp=1, quant="bf16", batch=8, rate_rps=1.0, rate_nolat_rps=1.0)
    limits = Limits(horizon_months=12, budget_capital_usd=1000.0, max_power_w=1000.0)
    return CandidateTable(workloads=(serving_workload((row,)),), gpus=GPUS, offerings=(_owned(),), limits=limits)


def test_when_the_budget_buys_nothing_that_is_said_first_and_the_other_conflict_named() -> None:
    """Capital $1,000 buys no server and 1 kW powers none: the cause first (the budget buys nothing that
    runs it, with the cheapest design at all), then what still conflicts once it is covered; never a
    "minimal set" whose one relaxation is then "not enough" (issue 15)."""
    t = _two_conflicts()
    report = analyse(Planner(t))
    assert report.conflict == [] and report.relaxations == []
    lead, then = report.causes
    assert lead.startswith("the budget (budget.capital $1,000) buys nothing that runs it")
    assert "capital $50,000" in lead  # the cheapest design that runs it at all
    assert then == "with a budget that covers it, power cap still rules out every design"
    assert_not_dangling(report.text)
    plan = plan_table(t, PlanOptions(top=1))
    md = plan_markdown.render(plan)
    assert "power cap" in md and "not enough" not in md and "minimal" not in md


TWO_CONFLICTS: dict[str, Any] = {
    "name": "two conflicts",
    "model": "llama-3.1-8b",
    "workloads": [
        {
            "kind": "serving",
            "name": "assistant",
            "requests_per_min": 20000,
            "input_tokens": 800,
            "output_tokens": 250,
            "p95_latency": "10s",
        }
    ],
    "budget": {"total": "$1000"},
    "deployment": "owned",
    "constraints": {"max_gpus": 1},
}


@pytest.mark.slow
def test_a_conflict_no_single_relaxation_fixes_says_what_else_to_change_cli(tmp_path: Path) -> None:
    """$1,000 in total and one GPU for 20,000 requests a minute: raising the budget alone does not help."""
    inf = infeasibility_of(tmp_path, TWO_CONFLICTS)
    assert_not_dangling(inf["text"])
    assert not any(r["restores_feasibility"] for r in inf["relaxations"])
    for r in inf["relaxations"]:
        assert r["still_conflicting"], r
        assert r["family"] not in r["still_conflicting"]
        for fid in r["still_conflicting"]:
            assert family(fid).title in r["change"] and family(fid).title in inf["text"]
    code, out = solve_doc(tmp_path, TWO_CONFLICTS)
    assert code == 1 and "still cannot all hold" in out and "not enough on its own" not in out


def test_a_relaxation_that_ran_out_of_time_is_not_called_not_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """UNKNOWN is not INFEASIBLE: "relaxing X alone is not enough" would be a claim nobody proved."""
    t = _two_conflicts()
    planner = Planner(t)
    conflict = infeasibility.find_conflict(planner)[1]
    monkeypatch.setattr(planner, "solve", lambda **_: Outcome(status=SolveStatus.UNKNOWN))
    relax = infeasibility.least_relaxation(planner, conflict[0])
    assert not relax.restores_feasibility
    assert "not enough" not in relax.change
    assert "time limit" in relax.change


def test_demand_no_replica_registers_is_not_relaxed_to_zero(tmp_path: Path) -> None:
    """166,667 req/s on a 405B model: its replica rates once rounded to 0 units against the demand,
    so the requirement was reported infeasible (and relaxed to 'peak demand <= 0.00 req/s'). The
    rate units now follow the slowest replica too: with no budget or GPU cap it plans."""
    import json

    doc = {
        "name": "huge demand",
        "model": "llama-3.1-405b",
        "workloads": [
            {
                "kind": "serving",
                "name": "chat",
                "requests_per_min": 10_000_000,
                "input_tokens": 8000,
                "output_tokens": 2000,
            }
        ],
        "deployment": "cloud",
        "constraints": {"allowed_gpus": ["a100-80gb"]},
    }
    code, out = solve_doc(tmp_path, doc, "--json", "--no-explain", "--top", "1")
    assert code == 0, out
    plan = json.loads(out)
    (w,) = plan["designs"][0]["workloads"]
    assert sum(g["replicas"] for g in w["groups"]) > 0 and w["headroom_pct"] >= 0


def _dangling_headers(text: str) -> list[str]:
    """Lines ending in a colon with no list item under them."""
    lines = [x for x in text.splitlines() if x.strip()]
    return [
        x
        for x, nxt in zip(lines, [*lines[1:], ""], strict=True)
        if x.rstrip().endswith(":") and not nxt.lstrip().startswith("- ")
    ]


@pytest.mark.slow
def test_no_rendering_ends_a_heading_with_nothing_under_it(tmp_path: Path) -> None:
    code, out = solve_doc(tmp_path, SMALL_SERVING, "--json")
    assert code == 1
    plans = [Plan.model_validate_json(out), plan_table(_two_conflicts(), PlanOptions(top=1))]
    for plan in plans:
        assert plan.infeasibility is not None
        for r in plan.infeasibility.relaxations:
            assert r.value is None or 0 < r.value < float("inf"), r
        assert_not_dangling(plan.infeasibility.text)
        assert _dangling_headers(plan_markdown.render(plan)) == []
        console = Console(record=True, width=200)
        table.render(plan, console)
        assert _dangling_headers(console.export_text()) == []


def test_a_tiny_demand_relaxation_is_printed_with_its_digits_not_as_zero() -> None:
    """0.004 req/s against one GPU that takes 0.001: the demand relaxation read 'peak demand <= 0.00
    req/s (asked 0.00)'."""
    from dataclasses import replace

    row = ServingRow(gpu_id="a", tp=1, pp=1, quant="bf16", batch=8, rate_rps=0.001, rate_nolat_rps=0.001)
    wc = replace(serving_workload((row,)), demand_rps=0.004, average_rps=0.004)
    cloud = Offering(key="cloud:a:1", kind="cloud", gpu_id="a", gpus_per_unit=1, tp_domain=1, usd_per_hour=1.0)
    t = CandidateTable(workloads=(wc,), gpus=GPUS, offerings=(cloud,), limits=Limits(max_gpus=1))
    report = analyse(Planner(t))
    relax = {r.family: r for r in report.relaxations}
    assert relax["throughput"].restores_feasibility
    assert relax["throughput"].change == "svc: peak demand <= 0.001 req/s (asked 0.004)"
    assert relax["max_gpus"].change == "constraints.max_gpus >= 4"
