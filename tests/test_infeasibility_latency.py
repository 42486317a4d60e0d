"""A p95 target no GPU reaches: the least looser target that works, never "... restores
feasibility:" followed by nothing.

Before, the search gave up at 64x the stated targets ("even 64x looser p95 targets are not
enough"), which left the conflict with no change that restores feasibility, and it loosened every
target by the same factor, so an unreachable TTFT dragged the end-to-end target along (to 140 s).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from conftest import SMALL_SERVING, assert_not_dangling, example, infeasibility_of, plan_file, solve_doc, write_doc

if TYPE_CHECKING:
    from clusterplan.candidates.table import CandidateTable
    from clusterplan.catalog.load import Catalog
    from clusterplan.explain.infeasibility import Verify
    from clusterplan.plan import Plan, Relaxation
    from clusterplan.planner.budget import Meter


def _with_workload(doc: dict[str, Any], **update: Any) -> dict[str, Any]:
    return {**doc, "workloads": [{**doc["workloads"][0], **update}]}


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory: pytest.TempPathFactory, catalog: Catalog) -> Plan:
    """``clusterplan solve`` of SMALL_SERVING (top 5, explanation on: the command's defaults), planned once for the
    tests that read it in its three formats."""
    return plan_file(write_doc(tmp_path_factory.mktemp("small"), SMALL_SERVING), catalog, top=5)


def _infeasible(tmp_path: Path, doc: dict[str, Any], catalog: Catalog) -> bool:
    """Whether ``solve`` of ``doc`` exits 1 (status infeasible), planned for that answer alone (``explain="design"``:
    no conflict analysis, which these checks do not read; the status is the same)."""
    plan = plan_file(write_doc(tmp_path, doc, "tighter.yaml"), catalog, top=1, explain="design")
    return plan.status == "infeasible"


@pytest.mark.slow
def test_a_1ms_p95_latency_gets_the_least_target_that_works_not_a_dangling_colon(
    tmp_path: Path, small_plan: Plan, catalog: Catalog
) -> None:
    from clusterplan.render import jsonout

    assert small_plan.status == "infeasible"  # solve exits 1
    inf = json.loads(jsonout.render(small_plan))["infeasibility"]  # what solve --json prints
    assert_not_dangling(inf["text"])
    (lat,) = [r for r in inf["relaxations"] if r["family"] == "latency"]
    assert lat["restores_feasibility"], lat
    m = re.fullmatch(r"assistant: p95_latency >= ([0-9.]+)s", lat["change"])
    assert m, lat["change"]
    assert m.group(1) in inf["text"]
    target = float(m.group(1))
    # The change works as stated...
    code, out = solve_doc(tmp_path, _with_workload(SMALL_SERVING, p95_latency=f"{target}s"), "--json")
    assert code == 0, out
    # ... and it is the least one, within the bisection's few percent.
    assert _infeasible(tmp_path, _with_workload(SMALL_SERVING, p95_latency=f"{target / 1.1:.4f}s"), catalog)


def test_the_table_and_markdown_show_the_latency_relaxation(small_plan: Plan) -> None:
    """The plan as ``solve`` prints it by default (its table renderer, on its console) and with ``--markdown``; that
    those flags pick these renderers is tests/test_solve_cli.py's (test_solve_prints_designs_and_why,
    test_solve_markdown)."""
    from clusterplan.cli import out_console
    from clusterplan.render import plan_markdown
    from clusterplan.render import table as table_view

    assert small_plan.status == "infeasible"  # solve exits 1
    with out_console.capture() as captured:
        table_view.render(small_plan, out_console)
    out = captured.get()
    assert "assistant: p95_latency >= " in out
    assert "64x" not in out
    out = plan_markdown.render(small_plan)
    assert "assistant: p95_latency >= " in out


@pytest.mark.slow
def test_an_unreachable_ttft_relaxes_the_ttft_only(tmp_path: Path) -> None:
    """The end-to-end target was never the problem: relaxing it too (to 140 s) overstated the change."""
    doc = {
        "name": "tiny ttft",
        "model": "llama-3.1-70b",
        "workloads": [
            {
                "kind": "serving",
                "name": "chat",
                "requests_per_min": 1000,
                "input_tokens": 1000,
                "output_tokens": 200,
                "p95_latency": "5s",
                "p95_ttft": "1ms",
            }
        ],
        "budget": {"horizon": 36},
        "deployment": "either",
    }
    inf = infeasibility_of(tmp_path, doc)
    assert_not_dangling(inf["text"])
    (lat,) = [r for r in inf["relaxations"] if r["family"] == "latency"]
    assert lat["restores_feasibility"], lat
    m = re.fullmatch(r"chat: p95_ttft >= ([0-9.]+)s", lat["change"])
    assert m, lat["change"]
    code, out = solve_doc(tmp_path, _with_workload(doc, p95_ttft=f"{m.group(1)}s"), "--json")
    assert code == 0, out


@pytest.mark.slow
def test_the_retargeted_table_is_the_table_of_the_retargeted_requirement() -> None:
    """The analysis rebuilds only the serving workloads whose targets change; the result must be
    exactly what preparing the whole changed requirement gives (training layouts included)."""
    from dataclasses import replace

    from clusterplan.candidates.build import build_candidates
    from clusterplan.catalog.load import load_catalog
    from clusterplan.pipeline import retargeter
    from clusterplan.requirement.load import load_requirement
    from clusterplan.requirement.schema import ServingWorkload

    catalog = load_catalog()
    resolved = load_requirement(example("13b-train-then-serve"), catalog)
    req = resolved.requirement
    doc = req.model_copy(
        update={"workloads": [*req.workloads, req.workloads[1].model_copy(update={"name": "second", "p95_ttft": 2.0})]}
    )
    resolved = replace(resolved, requirement=doc, models=(*resolved.models, resolved.models[1]))
    table = build_candidates(resolved, catalog)
    retarget = retargeter(resolved, catalog, table)
    assert retarget({}) == table
    factors = {(1, "p95_latency"): 0.05, (2, "p95_ttft"): 3.0}
    w = list(doc.workloads)
    w1 = w[1]
    assert isinstance(w1, ServingWorkload) and w1.p95_latency is not None, "workload 1 is serving with a p95 target"
    w[1] = w1.model_copy(update={"p95_latency": w1.p95_latency * 0.05})
    w[2] = w[2].model_copy(update={"p95_ttft": 6.0})
    expected = build_candidates(replace(resolved, requirement=doc.model_copy(update={"workloads": w})), catalog)
    got = retarget(factors)
    assert got == expected
    assert got.workloads[1] != table.workloads[1]  # the change reached the table


@pytest.mark.slow
def test_two_unreachable_targets_each_move_only_as_far_as_they_must(tmp_path: Path, catalog: Catalog) -> None:
    """5 ms end to end and 1 ms per token: both must move, but the TPOT target no longer moves by the
    end-to-end target's factor (to 0.2 s a token, looser than the new end-to-end target implies)."""
    doc = _with_workload(SMALL_SERVING, p95_latency="5ms", p95_tpot="1ms")
    inf = infeasibility_of(tmp_path, doc)
    assert_not_dangling(inf["text"])
    (lat,) = [r for r in inf["relaxations"] if r["family"] == "latency"]
    m = re.fullmatch(r"assistant: p95_latency >= ([0-9.]+)s; assistant: p95_tpot >= ([0-9.]+)s", lat["change"])
    assert m and lat["restores_feasibility"], lat
    e2e, tpot = float(m.group(1)), float(m.group(2))
    # The common factor alone gave 1 ms x (e2e / 5 ms), about 0.2 s a token.
    assert tpot < 0.05 * (e2e / 1.1)
    code, out = solve_doc(tmp_path, _with_workload(doc, p95_latency=f"{e2e}s", p95_tpot=f"{tpot}s"), "--json")
    assert code == 0, out
    # Neither can be tightened by 10% with the other as stated: the change is minimal.
    for tighter in ({"p95_latency": f"{e2e / 1.1:.4f}s", "p95_tpot": f"{tpot}s"},
                    {"p95_latency": f"{e2e}s", "p95_tpot": f"{tpot / 1.1:.5f}s"}):  # fmt: skip
        assert _infeasible(tmp_path, _with_workload(doc, **tighter), catalog), tighter


# --------------------------------------------------------------------------------------------------------------------
# The relaxation is one solve confirms: planning at it, the scheduler simulation's re-search included, returns a design
# the simulation does not reject. Before, it came from the analytical model alone.
# --------------------------------------------------------------------------------------------------------------------

P95 = (0, "p95_latency")


def _latency_table(rate_rps: float) -> CandidateTable:
    """One GPU type in the cloud and one row whose p95 latency (target 2 s) allows ``rate_rps`` a replica (0: the
    target is missed even unloaded)."""
    from test_planner_families import cloud, row, serve, tbl

    return tbl(serve([row(rate=rate_rps, nolat=4.0)], targets=True), [cloud()])


def _retarget(factors: Mapping[tuple[int, str], float], *, max_usd: float | None = None) -> CandidateTable:
    """The analytical model admits the row from 1.3x the 2 s target."""
    return _latency_table(4.0 if factors.get(P95, 1.0) >= 1.3 else 0.0)


@functools.cache
def _feasible_plan() -> Plan:
    """A plan of the table at a target the row meets: one design."""
    from clusterplan.pipeline import PlanOptions, plan_table

    plan = plan_table(_latency_table(4.0), PlanOptions(top=1, explain="design"))
    assert plan.designs
    return plan


def _planned(admitted: bool) -> Plan:
    """What planning returns (``Verify``), read only for design 1 and its simulated misses: a design the simulation
    admits, or one it rejects (as ``solve`` returns it where its re-search found nothing the simulation admits)."""
    from clusterplan.plan import SimulatedMiss

    plan = _feasible_plan()
    if admitted:
        return plan
    miss = SimulatedMiss(
        workload="s", figure="p95_latency", group="a TP1 bf16", load_rps=4.0, requests=1000, simulated_s=2.5,
        planned_s=1.9, target_s=2.0, held_rps=0.0,
    )  # fmt: skip
    return plan.model_copy(update={"designs": [plan.designs[0].model_copy(update={"simulation_misses": [miss]})]})


def _latency_relaxation(verify: Verify) -> Relaxation:
    from clusterplan.explain.infeasibility import analyse
    from clusterplan.planner.solve import Planner

    planner = Planner(_latency_table(0.0))
    (rel,) = analyse(planner, retarget=_retarget, verify=verify).relaxations
    return rel


def test_the_p95_relaxation_is_searched_past_targets_the_simulation_rejects() -> None:
    """Planning admits a design from 2x the target only (the simulation rejects the analytical model's 1.3x): the
    relaxation states about 4 s, not the 2.6 s the analytical search alone finds, and each probe planned is one the
    analytical model admits (none below 1.3x)."""
    planned: list[float] = []

    def verify(
        factors: Mapping[tuple[int, str], float], *, first_only: bool = False, meter: Meter | None = None
    ) -> Plan:
        planned.append(factors[P95])
        return _planned(factors[P95] >= 2.0)

    analytical = _latency_relaxation(lambda factors, *, first_only=False, meter=None: _planned(True))
    m = re.fullmatch(r"s: p95_latency >= ([0-9.]+)s", analytical.change)
    assert m and 2.6 <= float(m.group(1)) <= 2.6 * 1.04, analytical.change
    rel = _latency_relaxation(verify)
    m = re.fullmatch(r"s: p95_latency >= ([0-9.]+)s", rel.change)
    assert m and rel.restores_feasibility and rel.unverified is None, rel
    assert 4.0 <= float(m.group(1)) <= 4.0 * 1.04
    assert planned and min(planned) >= 1.3


def test_a_p95_relaxation_the_time_limit_leaves_unverified_is_not_stated_as_restoring_feasibility() -> None:
    """The simulation rejects the analytical factors and the time limit then stops the search: the relaxation says so
    by its code and never claims the analytical target restores feasibility."""
    from clusterplan.planner.solve import Planner

    def spent_verify(planner: Planner) -> Verify:
        def verify(
            factors: Mapping[tuple[int, str], float], *, first_only: bool = False, meter: Meter | None = None
        ) -> Plan:
            planner.meter().charge(1e9)  # the planning spent what was left of the command's time limit
            return _planned(False)

        return verify

    from clusterplan.explain.infeasibility import analyse

    planner = Planner(_latency_table(0.0))
    report = analyse(planner, retarget=_retarget, verify=spent_verify(planner))
    (rel,) = report.relaxations
    assert not rel.restores_feasibility and rel.unverified == "time_limit", rel
    assert rel.change.startswith("s: p95_latency >= 2.6") and "raise --time-limit" in rel.change
    assert "restores feasibility" not in report.text
    assert_not_dangling(report.text)


def test_a_p95_relaxation_the_simulation_rejects_at_every_target_says_so() -> None:
    rel = _latency_relaxation(lambda factors, *, first_only=False, meter=None: _planned(False))
    assert not rel.restores_feasibility and rel.unverified == "simulation_rejects", rel
    assert "rejects" in rel.change


# The 70B example with a p95 latency no design meets (1 s) and a $100M total budget: the analytical model's least
# target (1.4 s) admits 576 GB200 at $44.6M, but simulated at peak their p95 is 1.43 s; the simulation holds them to
# a tenth of that load, and the re-search finds nothing within the budget (it needs 5,688 GPUs).
TIGHT_70B: dict[str, Any] = {
    **yaml.safe_load(example("70b-serving").read_text()),
    "budget": {"horizon": 36, "total": "$100M"},
}
TIGHT_70B["workloads"] = [{**TIGHT_70B["workloads"][0], "p95_latency": "1s"}]


@pytest.mark.slow
def test_solve_at_the_stated_p95_relaxation_returns_a_design_the_simulation_accepts(
    tmp_path: Path, catalog: Catalog
) -> None:
    """Before: "chat: p95_latency >= 1.4s restores feasibility", and solve at 1.4 s returned 576 GB200 whose simulated
    p95 (1.43 s) misses 1.4 s. Now the relaxation is a target solve confirms (1.48 s: 144 GB200, $11,211,925.91)."""
    # The analysis plans about ten times (7.5 CPU s): a limit whose wall-clock net (3x) a loaded machine does not reach
    # first; at the default 10 s it states the same target.
    inf = infeasibility_of(tmp_path, TIGHT_70B, "--time-limit", "60")
    (lat,) = [r for r in inf["relaxations"] if r["family"] == "latency"]
    assert lat["restores_feasibility"] and lat["unverified"] is None, lat
    m = re.fullmatch(r"chat: p95_latency >= ([0-9.]+)s", lat["change"])
    assert m, lat["change"]
    relaxed = {**TIGHT_70B, "workloads": [{**TIGHT_70B["workloads"][0], "p95_latency": f"{m.group(1)}s"}]}
    plan = plan_file(write_doc(tmp_path, relaxed, "relaxed.yaml"), catalog, top=5)  # as solve plans it
    assert plan.status == "optimal" and plan.designs
    assert plan.designs[0].simulation_misses == [], plan.designs[0].simulation_misses
