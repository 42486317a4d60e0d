"""Stated uncertainty: the model's measured error as data, each design's odds, ``confidence:`` and the risk section.

* ``catalog/model_error.yaml`` is what ``bench/accuracy.py --write-errors`` computes from today's rows;
* the odds and the derating factors against hand-computed normal quantiles;
* unset ``confidence`` derates nothing; ``confidence: 0.9`` changes the 13B example's plan to one that meets its
  deadline with at least that chance, and the checker still passes it;
* designs inside the model's error are flagged in the table, the Markdown and the JSON;
* the review's risk section: single points of failure, the prices that decide design 1, accuracy.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from clusterplan.evaluation import evaluate
from clusterplan.evaluation.uncertainty import (
    NO_DERATE,
    KindError,
    chance_at_least,
    chance_at_most,
    chance_time_at_most,
    derate_for,
    interval,
    model_error,
)
from conftest import DATA, ROOT, example, plan_file, run_cli, shared_plan

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.plan import Plan

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import accuracy

# The 13B example with a 68-day deadline (tests/data/requirements): one H100 server meets it inside the model's error.
THIRTEEN_B = DATA / "requirements" / "13b-train-then-serve-68d.yaml"
Z90 = NormalDist().inv_cdf(0.9)  # 1.2816
K = KindError(cases=10, bias=0.05, spread=0.1, median_abs_error=0.05, quantiles={}, rows=[])


def _with_confidence(tmp_path: Path, source: Path, confidence: float) -> Path:
    doc = yaml.safe_load(source.read_text(encoding="utf-8"))
    doc["confidence"] = confidence
    out = tmp_path / f"{source.stem}-c{confidence}.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return out


# ------------------------------------------------------------------------------------------------
# The data
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_shipped_error_table_is_what_the_bench_computes() -> None:
    """The shipped error is the out-of-source one (leave one source out). Recomputing it all takes minutes; the
    training rows' refit takes seconds, so training (and memory, which no fitted factor reaches) is recomputed here
    and must match exactly; serving and latency must come from the same unflagged rows."""
    shipped = yaml.safe_load((ROOT / "catalog" / "model_error.yaml").read_text(encoding="utf-8"))["model_error"]
    rows = accuracy.evaluate()
    cheap = [r for r in rows if r.kind in ("training throughput", "memory")]
    data = accuracy.FitData(accuracy.load_catalog(), accuracy.load_measurements(), accuracy.load_settings())
    knobs = [k for k in accuracy.fitted_knobs(rows) if k.path[0] in ("training_mfu", "architecture_training_fraction")]
    held = accuracy.leave_one_source_out(data, cheap, knobs, accuracy.FactorSet.shipped(), in_sample=False)
    computed = accuracy.error_table(held.rows, shipped["as_of"])
    for kind in ("training_throughput", "memory"):
        assert shipped["kinds"][kind] == computed["kinds"][kind], "rerun: python bench/accuracy.py --write-errors"
    in_sample = accuracy.error_table(rows, shipped["as_of"])
    for kind in ("serving_throughput", "latency"):
        assert shipped["kinds"][kind]["rows"] == in_sample["kinds"][kind]["rows"]
    assert shipped["source"] == accuracy.ERRORS_HOW
    e = model_error()
    assert set(e.kinds) == {"serving_throughput", "latency", "training_throughput", "memory"}
    for k in e.kinds.values():
        assert k.cases == len(k.rows) and k.spread > 0
        assert k.quantiles["p10"] <= k.quantiles["p50"] <= k.quantiles["p90"]


@pytest.mark.slow
def test_write_errors_writes_a_dated_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def in_sample(data: object, rows: list[accuracy.Row], *args: object, **kwargs: object) -> accuracy.OutOfSource:
        return accuracy.OutOfSource(rows=rows, refit_rows=rows, sources={r.id: "one" for r in rows}, factors={})

    monkeypatch.setattr(accuracy, "leave_one_source_out", in_sample)  # the writer, not the minutes of refits
    out = tmp_path / "errors.yaml"
    assert accuracy.main(["--write-errors", str(out), "--as-of", "2026-01-02"]) == 0
    data = yaml.safe_load(out.read_text(encoding="utf-8"))["model_error"]
    assert data["as_of"] == "2026-01-02"
    assert data["kinds"]["training_throughput"]["rows"]  # the rows it came from


# ------------------------------------------------------------------------------------------------
# Formulas
# ------------------------------------------------------------------------------------------------


def test_odds_by_hand() -> None:
    # A rate exactly at the need: P(e <= 0) = Phi(-bias / spread) = Phi(-0.5) = 0.3085.
    assert chance_at_least(10.0, 10.0, K) == pytest.approx(0.308538, abs=1e-6)
    # A latency at its target: P(e >= 0) = Phi(0.5) = 0.6915 (the model over-predicts: truth is faster).
    assert chance_at_most(2.0, 2.0, K) == pytest.approx(0.691462, abs=1e-6)
    # A time to train 10% under its deadline: Phi((ln(1/0.9) - 0.05) / 0.1) = Phi(0.5536) = 0.7101.
    assert chance_time_at_most(0.9, 1.0, K) == pytest.approx(NormalDist().cdf((math.log(1 / 0.9) - 0.05) / 0.1))
    assert chance_at_most(math.inf, 1.0, K) == 0.0
    lo, hi = interval(100.0, K)  # true rate: 100 x exp(-(0.05 +- 0.1 x 1.2816))
    assert (lo, hi) == pytest.approx((100 * math.exp(-0.05 - 0.1 * Z90), 100 * math.exp(-0.05 + 0.1 * Z90)))
    lo_t, hi_t = interval(100.0, K, inverse=True)
    assert (lo_t, hi_t) == pytest.approx((100 * math.exp(0.05 - 0.1 * Z90), 100 * math.exp(0.05 + 0.1 * Z90)))


def test_a_chance_never_reads_as_a_certainty() -> None:
    """A normal fit of the model's error leaves some chance on either side of any target: 0.996 is not "100%"."""
    from clusterplan.plan import TargetOdds
    from clusterplan.wording.odds import chance, sentence

    assert [chance(p) for p in (0.9952, 0.9999, 0.5, 0.004, 0.0)] == [
        "over 99%",
        "over 99%",
        "50%",
        "under 1%",
        "under 1%",
    ]
    odds = TargetOdds(
        workload="chat", figure="throughput", error_kind="serving_throughput", unit="req/s", predicted=28.6, target=20.0, probability=0.9952, low=24.4,
        high=36.1, within_error=False,
    )  # fmt: skip
    assert sentence(odds).endswith("over 99% chance to meet")


def test_derating_factors_by_hand() -> None:
    assert derate_for(None) is NO_DERATE and not NO_DERATE.active
    e = model_error()
    d = derate_for(0.9)
    s, lat, t = e.kinds["serving_throughput"], e.kinds["latency"], e.kinds["training_throughput"]
    assert d.rate_factor == pytest.approx(math.exp(-(s.bias + s.spread * Z90)))
    assert d.latency_factor == pytest.approx(math.exp(-(lat.bias - lat.spread * Z90)))
    assert d.time_factor == pytest.approx(math.exp(t.bias + t.spread * Z90))
    assert d.rate_factor < 1 < d.latency_factor and d.time_factor > 1
    # At 0.5 the factor is exp(-bias); where the model under-predicts on average (bias < 0) it is held at 1, never
    # loosened (serving's bias turned positive on 2026-11-24 with the dense Blackwell rows: a bias of -0.05 checks it).
    assert derate_for(0.5).rate_factor == pytest.approx(min(1.0, math.exp(-s.bias)))
    under = e.model_copy(update={"kinds": {**e.kinds, "serving_throughput": s.model_copy(update={"bias": -0.05})}})
    assert derate_for(0.5, under).rate_factor == 1.0


def test_serving_rates_are_derated_in_one_place(catalog: Catalog) -> None:
    from clusterplan.requirement.schema import ServingWorkload

    w = ServingWorkload(kind="serving", requests_per_min=600, p95_latency=8.0)
    arch, spec = catalog.model("llama-2-13b"), catalog.gpu("h100-sxm")
    from clusterplan.physics.factors import Assumptions
    from clusterplan.physics.layout import Layout

    a = Assumptions()
    layout = Layout(quant="fp8", kv_precision="fp8")
    batch = evaluate.serving_batch(evaluate.max_batch(arch, spec, w, layout, a))
    est = evaluate.serving_estimate(arch, spec, w, layout, batch=batch, assumptions=a)
    plain = evaluate.serving_rates(est, w, a)
    d = derate_for(0.9)
    held = evaluate.serving_rates(est, w, a, d)
    assert held.rate_no_targets_rps == pytest.approx(plain.rate_no_targets_rps * d.rate_factor)
    assert 0 < held.rate_rps < plain.rate_rps
    assert held.rated.p95_e2e_s <= 8.0 * (1 + 1e-9)  # the derated p95 still meets the target


# ------------------------------------------------------------------------------------------------
# Plans
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory, catalog: Catalog) -> dict[str, Any]:
    held = _with_confidence(tmp_path_factory.mktemp("conf"), THIRTEEN_B, 0.9)
    return {
        "default": shared_plan(THIRTEEN_B, catalog, top=2, explain=False),
        "held": plan_file(held, catalog, top=2, explain=False),
        "held_path": held,
    }


def _deadline_odds(plan: Plan) -> Any:
    return next(o for o in plan.designs[0].odds if o.figure == "time_to_train")


@pytest.mark.slow
def test_default_plan_states_its_odds_and_flags_the_deadline(plans: dict[str, Any]) -> None:
    plan = plans["default"]
    assert plan.confidence is None
    odds = _deadline_odds(plan)
    d1 = plan.designs[0]
    train = next(w for w in d1.workloads if w.kind == "training")
    assert odds.predicted == pytest.approx(train.time_to_train_s)  # nothing derated
    assert odds.target == train.deadline_s
    # 67.0 of 68 days: inside the model's error, near even odds. Since 2026-12-06 the error table is the
    # out-of-source one (leave one source out): training's bias is +1.8% (a publication the fit never saw runs a
    # little slower than predicted), so the odds are just under even (0.49); in sample (bias -2.3%) they were 0.5-0.75.
    # It was further below even odds while the model predicted training 11% fast on average.
    assert 0.4 < odds.probability < 0.75 and odds.within_error
    figures = {(o.workload, o.figure) for o in d1.odds}
    assert figures == {("pretrain", "time_to_train"), ("product", "throughput"), ("product", "p95_latency")}


@pytest.mark.slow
def test_confidence_changes_the_13b_plan_and_holds_the_deadline(plans: dict[str, Any], catalog: Catalog) -> None:
    from clusterplan.design.check import check_plan
    from clusterplan.requirement.load import load_requirement

    default, held = plans["default"], plans["held"]
    assert held.confidence == 0.9
    assert held.designs[0].signature != default.designs[0].signature
    assert held.designs[0].costs.total_usd > default.designs[0].costs.total_usd
    odds = _deadline_odds(held)
    assert odds.probability >= 0.9 - 1e-9 and not odds.within_error
    train = next(w for w in held.designs[0].workloads if w.kind == "training")
    d = derate_for(0.9)
    assert train.time_to_train_s == pytest.approx(odds.predicted * d.time_factor)  # planned at the 0.9 quantile
    assert train.deadline_s is not None and train.time_to_train_s <= train.deadline_s
    resolved = load_requirement(plans["held_path"], catalog)
    for design in held.designs:
        assert check_plan(design, resolved, catalog) == []


@pytest.mark.slow
def test_the_plan_lists_the_derating_it_applied(tmp_path: Path) -> None:
    result = run_cli("solve", str(_with_confidence(tmp_path, THIRTEEN_B, 0.9)), "--json", "--top", "1")
    assert result.exit_code == 0, result.stdout
    plan = json.loads(result.stdout)
    assert plan["confidence"] == 0.9
    line = f"confidence = 0.9: serving rates x{derate_for(0.9).rate_factor:.3f}"  # catalog/model_error.yaml's
    assert any(a.startswith(line) for a in plan["explanation"]["assumptions"])
    assert plan["designs"][0]["odds"]


@pytest.mark.parametrize("bad", [1.5, 0.2, "high"])
def test_confidence_out_of_range_is_a_located_error(tmp_path: Path, bad: Any) -> None:
    doc = yaml.safe_load(THIRTEEN_B.read_text(encoding="utf-8"))
    doc["confidence"] = bad
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    result = run_cli("solve", str(f))
    assert result.exit_code == 2
    assert "confidence" in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_designs_within_the_model_error_are_flagged_in_every_format(catalog: Catalog) -> None:
    """One plan of ``solve --top 2`` (explanation on, as the command's default), printed by the renderers ``solve``
    uses for its three formats: the table on its console, ``--markdown`` and ``--json``. That the flags pick those
    renderers is tests/test_solve_cli.py's (test_solve_prints_designs_and_why, test_solve_markdown,
    test_solve_json_is_the_documented_schema_and_byte_identical)."""
    from clusterplan.cli import out_console
    from clusterplan.render import jsonout, plan_markdown
    from clusterplan.render import table as table_view

    plan = plan_file(THIRTEEN_B, catalog, top=2)
    assert plan.status in ("optimal", "feasible")  # solve exits 0
    with out_console.capture() as captured:
        table_view.render(plan, out_console)
    table = captured.get()
    # the designs table's cell (the header and the odds list below it carry the words without the chance)
    assert "within model error" in table and re.search(r"│ pretrain: deadline \d+%", table)
    md = plan_markdown.render(plan)
    assert "| within model error |" in md
    assert re.search(r"\| pretrain: deadline \d+%", md)
    assert "chance to meet; within the model's error" in md
    js = json.loads(jsonout.render(plan))
    assert any(o["within_error"] for o in js["designs"][0]["odds"])


# ------------------------------------------------------------------------------------------------
# The review's risk section
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def review(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The 13B example's review, aggregated replicas only: its design 2 is then other hardware (with pools on,
    a disaggregated layout on the same server ties design 1 and takes that place)."""
    from clusterplan.review.assemble import WhatIfRun, assemble

    path = tmp_path_factory.mktemp("review") / THIRTEEN_B.name
    path.write_text(
        THIRTEEN_B.read_text().replace("    name: product\n", '    name: product\n    disaggregation: "off"\n')
    )
    return assemble(path, whatif=WhatIfRun("none"), top=2)


@pytest.mark.slow
def test_risk_section_data(review: Any) -> None:
    risk = review.risk
    assert risk is not None
    # 4 H100 replicas with no spare: losing one leaves about three quarters of peak demand.
    (sp,) = risk.single_points
    assert sp.workload == "product" and sp.spares == 0 and 50 < sp.capacity_after_loss_pct < 100
    d1, d2 = review.plan.designs[:2]
    assert risk.price_gap_usd == pytest.approx(d2.costs.total_usd - d1.costs.total_usd)
    assert risk.prices
    first = next(p for p in risk.prices if p.unit == "USD per GPU")
    assert first.resolved and first.changed  # re-solved just past the switch: design 1 is no longer the optimum
    assert any(o.figure == "time_to_train" for o in risk.within_error)
    assert {a.kind for a in risk.accuracy} >= {"training throughput", "serving throughput", "latency"}


@pytest.mark.slow
def test_price_resolve_that_takes_design_1_as_its_first_point_equals_both_points_planned(review: Any) -> None:
    """The review re-solves the closest purchase price from the plan's design 1 and one point past the switch
    (review/risk.py confirm, ``planned``): the same as planning the point at the catalog price too."""
    from clusterplan.catalog.load import load_catalog
    from clusterplan.planner.solve import SolverSettings
    from clusterplan.review.risk import confirm, price_risks
    from clusterplan.whatif.points import load_base

    prices, _ = price_risks(review.plan, load_catalog())
    i = next(i for i, p in enumerate(prices) if p.unit == "USD per GPU")
    base, _ = load_base(Path(review.reproduce.requirement_file))
    assert review.risk.prices[i].resolved
    assert confirm(prices[i], base, SolverSettings()) == review.risk.prices[i]


@pytest.mark.slow
def test_price_switch_is_where_the_totals_cross(review: Any) -> None:
    """The switch figure makes design 1's total equal design 2's (the totals are linear in each price)."""
    d1, d2 = review.plan.designs[:2]
    for p in review.risk.prices:
        if p.unit != "USD per GPU":
            continue
        n1 = sum(h.bought * h.gpus_per_unit for h in d1.hardware if h.kind == "owned" and h.gpu == p.gpu)
        n2 = sum(h.bought * h.gpus_per_unit for h in d2.hardware if h.kind == "owned" and h.gpu == p.gpu)
        change = p.switch_usd - p.value_usd
        assert d1.costs.total_usd + n1 * change == pytest.approx(d2.costs.total_usd + n2 * change)


@pytest.mark.slow
def test_risk_section_is_in_the_document(review: Any) -> None:
    from clusterplan.review import document

    doc = document.build(review, set())
    headings = [b.text for b in doc.blocks if isinstance(b, document.Heading)]
    for h in (
        "Risks",
        "Single points of failure",
        "Prices that decide the choice",
        "Each target against the model's error",
    ):
        assert h in headings
    assert headings.index("Risks") < headings.index("Assumptions")
    (alternatives,) = [b for b in doc.blocks if isinstance(b, document.Table) and "$/M tok" in b.header]
    flags = alternatives.rows[0][alternatives.header.index("within model error")]
    assert isinstance(flags, str) and "pretrain: deadline" in flags


@pytest.mark.slow
def test_one_replica_is_a_single_point_and_a_spare_is_not(review: Any) -> None:
    from clusterplan.plan import ServingPlan
    from clusterplan.review.risk import single_points

    d1 = review.plan.designs[0]
    w = next(x for x in d1.workloads if isinstance(x, ServingPlan))
    g = w.groups[0]
    one = w.model_copy(update={"groups": [g.model_copy(update={"replicas": 1})], "capacity_rps": g.rate_rps})
    (sp,) = single_points(d1.model_copy(update={"workloads": [one]}))
    assert sp.replicas == 1 and sp.capacity_after_loss_pct == 0.0
    spare = w.model_copy(update={"redundancy": 1})
    assert single_points(d1.model_copy(update={"workloads": [spare]})) == []


def test_the_checker_holds_a_serving_design_to_the_confidence_it_was_asked_for(
    tmp_path: Path, catalog: Catalog
) -> None:
    """70B: design 1 meets p95 5 s at the point prediction (74% odds); at confidence 0.9 the same design
    misses its derated figures, and the checker says so (it re-derived the rates without the derating)."""
    from clusterplan.design.check import check_plan
    from clusterplan.requirement.load import load_requirement

    doc = yaml.safe_load(example("70b-serving").read_text(encoding="utf-8"))
    doc["workloads"][0]["disaggregation"] = "off"  # aggregated replicas: 8x H200, p95 5.00 s at rated load
    seventy = tmp_path / "70b-aggregated.yaml"
    seventy.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    design = plan_file(seventy, catalog, top=1, explain=False).designs[0]
    assert check_plan(design, load_requirement(seventy, catalog), catalog) == []
    held = load_requirement(_with_confidence(tmp_path, seventy, 0.9), catalog)
    problems = check_plan(design, held, catalog)
    assert any("chat:" in p and ("p95" in p or "req/s" in p or "capacity" in p) for p in problems), problems
