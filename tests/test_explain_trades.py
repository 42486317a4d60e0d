"""Explanations a reviewer can act on: every binding constraint says "to what" and what that saves."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.pipeline import PlanOptions, plan_table
from clusterplan.plan import Plan
from clusterplan.render import plan_markdown
from conftest import EXAMPLES, example, plan_file, shared_plan
from test_planner_families import cloud, owned, row, serve, tbl


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_binding_constraint_of_every_example_carries_a_trade(path: Path, catalog: Catalog) -> None:
    plan = shared_plan(path, catalog)
    assert plan.explanation is not None
    for c in plan.explanation.constraints:
        if c.status != "binding":
            continue
        t = c.trade
        assert t is not None, f"{path.stem}: {c.family} binds with no 'to what'"
        assert t.change and t.design, t
        assert t.saving_usd > 0 and t.total_usd == pytest.approx(plan.designs[0].costs.total_usd - t.saving_usd)
        assert t.change in plan_markdown.render(plan)


def _p95_plan(catalog: Catalog, tmp_path: Path, p95: str, *, explain: bool = False) -> Plan:
    """The 70B example on H200, aggregated replicas only (its end-to-end target binds them), at p95 latency ``p95``
    (held to one GPU type: on the MI300X design 1 of the example the end-to-end target has slack)."""
    text = example("70b-serving").read_text()
    assert "p95_latency: 5s" in text
    path = tmp_path / "70b.yaml"
    text = text.replace("p95_latency: 5s", f'p95_latency: {p95}\n    disaggregation: "off"')
    path.write_text(text + "constraints:\n  allowed_gpus: [h200]\n")
    return plan_file(path, catalog, explain=explain)


@pytest.mark.slow
def test_the_latency_trade_is_the_least_target_that_admits_a_cheaper_design(catalog: Catalog, tmp_path: Path) -> None:
    """70B (aggregated only): the p95 target moved to the trade's value gives the trade's design and saving;
    5% short of it, the plan is still the original one."""
    plan = _p95_plan(catalog, tmp_path, "5s", explain=True)
    assert plan.explanation is not None
    (lat,) = [c for c in plan.explanation.constraints if c.family == "latency"]
    assert lat.trade is not None and lat.trade.least
    change = lat.trade.change
    assert change.startswith("chat: p95_latency 5s → ") and change.endswith("s"), change
    to_s = float(change.rsplit("→ ", 1)[1].removesuffix("s"))
    assert 5.0 < to_s < 60.0  # a figure, not the target switched off
    moved = _p95_plan(catalog, tmp_path, f"{to_s}s")
    # the trade's total is CP-SAT's objective in cents, each priced term (hardware, its term, operations) rounded up
    # to a cent a month: a few cents over the horizon from the design's exact total
    assert moved.designs[0].costs.total_usd == pytest.approx(lat.trade.total_usd, abs=0.05)
    short = _p95_plan(catalog, tmp_path, f"{to_s * 0.95:.3f}s")
    assert short.designs[0].costs.total_usd == pytest.approx(plan.designs[0].costs.total_usd, abs=0.01)


def test_a_numeric_trade_is_the_least_move_not_the_family_switched_off() -> None:
    """max_gpus 4 binds (2x A). 5 GPUs buy a cheaper mix (1x A + 4x P); switched off it is 8x P."""
    w = replace(serve([row("a", rate=4.0), row("p", rate=1.0)], demand=8.0), allow_mixed=True)
    t = tbl(w, [cloud("a", price=10.0), cloud("p", price=1.0)], max_gpus=4)
    plan = plan_table(t, PlanOptions(top=1))
    assert plan.explanation is not None
    c = next(c for c in plan.explanation.constraints if c.family == "max_gpus")
    assert c.status == "binding" and c.trade is not None, c
    assert c.trade.least and c.trade.change == "constraints.max_gpus >= 5", c.trade
    hours = 12 * 730
    assert c.trade.saving_usd == pytest.approx((20.0 - 14.0) * hours)
    assert c.relaxed_total_usd == pytest.approx(8.0 * hours)  # the upper bound: the family switched off


def test_inventory_trade_prices_more_inventory_at_its_purchase_price_never_free() -> None:
    """16 GPUs needed, 8 owned: the other server is bought. 8 more in inventory would save its purchase
    price, and nothing is priced as free hardware (once: '$13.6k (4x H200 owned)')."""
    t = tbl(serve([row(rate=0.5)], demand=8.0), [owned(inv=1)], inventory=(("a", 8),))
    plan = plan_table(t, PlanOptions(top=1))
    assert plan.explanation is not None
    d = plan.designs[0]
    assert d.costs.capital_usd == pytest.approx(50000.0)  # one server bought, one from inventory
    inv = next(c for c in plan.explanation.constraints if c.family == "inventory")
    assert inv.status == "binding" and inv.trade is not None, inv
    assert inv.trade.change == "constraints.inventory + 8x a (what this design buys)"
    assert inv.trade.saving_usd == pytest.approx(50000.0)
    assert inv.relaxed_total_usd is None  # never the optimum with owned hardware for free


def test_inventory_that_covers_the_design_has_no_trade() -> None:
    t = tbl(serve([row(rate=0.5)], demand=1.0), [owned(inv=1)], inventory=(("a", 8),))
    plan = plan_table(t, PlanOptions(top=1))
    assert plan.explanation is not None
    inv = next(c for c in plan.explanation.constraints if c.family == "inventory")
    assert inv.status != "binding" and inv.trade is None and inv.relaxed_total_usd is None


def test_a_known_feasible_bracket_is_bisected_without_probing_its_top() -> None:
    """The relaxed design's p95s at its ceiling rates say where a cheaper design is known to exist: only
    the targets it exceeds move, the search bisects [1, that factor] and never probes the top itself
    (6 probes from the blind 2x bracket with a give-back, 4 here; on the 70B example 7 and 3), to the same
    least factor."""
    from clusterplan.explain.infeasibility import least_target_factors
    from clusterplan.planner.status import SolveStatus

    a, b = (0, "p95_latency"), (0, "p95_ttft")
    targets = [(a, "chat", 5.0), (b, "chat", 1.0)]

    def search(known: dict[tuple[int, str], float] | None) -> tuple[dict[tuple[int, str], float], list[float]]:
        probed: list[float] = []

        def status_at(factors: object) -> SolveStatus:
            f = dict(factors)  # type: ignore[call-overload]
            probed.append(f[a])
            return SolveStatus.OPTIMAL if f[a] >= 1.3 else SolveStatus.INFEASIBLE

        found = least_target_factors(targets, status_at, shrink_max=0, first=2.0, tolerance=1.05, known=known)
        assert found.status is SolveStatus.OPTIMAL
        return found.factors, probed

    blind, blind_probes = search(None)
    informed, informed_probes = search({a: 1.5, b: 1.0})
    assert informed[b] == 1.0 and blind[b] == 1.0
    assert 1.3 <= informed[a] <= 1.3 * 1.05 and 1.3 <= blind[a] <= 1.3 * 1.05
    assert 1.5 * (1 + 1e-9) not in informed_probes[:-1]  # the known top is never probed before the end
    assert len(set(informed_probes)) == 4 < len(set(blind_probes)) == 6


def test_each_serving_row_carries_its_p95s_at_its_ceiling_rate(catalog: Catalog) -> None:
    """Rows whose targets admit their ceiling rate report the same p95s at both; the others report
    ceiling p95s beyond some target (the trade search reads these as known-feasible factors)."""
    from clusterplan.candidates.build import build_candidates
    from clusterplan.requirement.load import load_requirement

    table = build_candidates(load_requirement(example("70b-serving"), catalog), catalog)
    (wc,) = table.workloads
    rows = [r for r in wc.serving_rows() if r.role == "both"]  # aggregated replicas (pool rows rate their side)
    assert rows
    for r in rows:
        assert r.ceiling_p95_e2e_s >= r.p95_e2e_s - 1e-12
        if r.rate_rps == r.rate_nolat_rps:
            assert r.ceiling_p95_e2e_s == r.p95_e2e_s and r.ceiling_p95_ttft_s == r.p95_ttft_s
        else:
            assert r.ceiling_p95_e2e_s > 5.0 or r.ceiling_p95_ttft_s > 1.0
