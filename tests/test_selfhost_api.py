"""Self-host versus a hosted API: the formulas by hand, the figure in ``compare`` and the report, a price overlay
that moves it, and a model without an API price said in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterplan.catalog.load import load_catalog_text
from clusterplan.design import selfhost
from clusterplan.errors import CatalogInputError
from clusterplan.plan import Costs
from clusterplan.wording.fmt import usd_per_m
from conftest import example, run_cli, shared_plan


def _costs(total_usd: float, horizon_months: float) -> Costs:
    return Costs(
        capital_usd=total_usd, monthly_usd=0.0, one_off_usd=0.0, total_usd=total_usd, horizon_months=horizon_months,
        usd_per_million_output_tokens=None,
    )  # fmt: skip


def test_api_bill_and_break_even_by_hand() -> None:
    # 1,000 requests a minute of 1,000 in + 200 out at $0.23/M in and $0.40/M out:
    # one request = (1000 x 0.23 + 200 x 0.40) / 1e6 = $0.00031; a 730 h month = 2,628,000 s,
    # 16.667 req/s x 2,628,000 s = 43.8M requests -> $13,578.00 a month.
    per_req = selfhost.api_usd_per_request(1000, 200, 0.23, 0.40)
    assert per_req == pytest.approx(0.00031)
    assert selfhost.api_usd_per_month(43_800_000, 1000, 200, 0.23, 0.40) == pytest.approx(13_578.0)
    # Blended at 1000:200: (230 + 80) / 1200 = $0.25833/M.
    assert selfhost.blended_usd_per_million_tokens(1000, 200, 0.23, 0.40) == pytest.approx(0.258333, rel=1e-5)
    # A $360,000 design over 36 months is $10,000 a month; tokens a month = 16.667 x 2,628,000 x 1,200 = 52,560M,
    # so $0.19026/M; the bills are equal at 10,000 / (0.00031 x 2,628,000) = 12.2747 req/s.
    monthly = selfhost.design_usd_per_month(_costs(360_000.0, 36))
    assert monthly == pytest.approx(10_000.0)
    assert selfhost.design_usd_per_million_tokens(monthly, 1000 / 60, 1200) == pytest.approx(0.190259, rel=1e-5)
    assert selfhost.break_even_requests_per_s(monthly, per_req) == pytest.approx(12.2747, rel=1e-5)
    assert selfhost.break_even_requests_per_s(monthly, 0.0) is None


def test_break_even_says_which_side_is_cheaper_and_when_it_lies_beyond_sizing(catalog: Any) -> None:
    base = selfhost.api_quotes(
        catalog, "llama-3.1-70b", workload="chat", requests_per_s=1000 / 60, input_tokens=1000, output_tokens=200
    )
    deepinfra = next(q for q in base.quotes if q.id == "deepinfra-llama-3.1-70b")
    assert deepinfra.usd_per_month == pytest.approx(13_578.0)
    cheap, dear = selfhost.with_designs(
        base, [("cheap", _costs(360_000.0, 36)), ("dear", _costs(720_000.0, 36))]
    ).designs
    b_cheap = next(b for b in cheap.break_even if b.api == deepinfra.id)
    b_dear = next(b for b in dear.break_even if b.api == deepinfra.id)
    assert (b_cheap.self_host_cheaper, b_cheap.beyond_sizing) == (True, False)
    assert b_cheap.times_demand == pytest.approx(12.2747 / (1000 / 60), rel=1e-5)
    # $20,000 a month against a $13,578 bill: the API is cheaper, and self-hosting pays only at 1.47x the demand.
    assert (b_dear.self_host_cheaper, b_dear.beyond_sizing) == (False, True)
    assert b_dear.times_demand == pytest.approx(20_000 / 13_578.0, rel=1e-5)


def _compare_json(*extra: str) -> dict[str, Any]:
    result = run_cli("compare", str(example("70b-serving")), "--gpus", "h200", "--json", *extra)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@pytest.mark.slow
def test_compare_shows_the_design_beside_the_apis_for_the_70b_example() -> None:
    doc = _compare_json()
    v = doc["self_host_vs_api"]
    assert v["model"] == "llama-3.1-70b" and v["note"] is None
    assert {q["id"] for q in v["quotes"]} >= {"deepinfra-llama-3.1-70b", "together-llama-3.1-70b-turbo"}
    row = doc["rows"][0]
    owned = next(d for d in v["designs"] if d["label"].endswith("owned"))
    # The design's figures are its compare totals over the horizon, blended over every token of the demand.
    monthly = row["owned"]["costs"]["total_usd"] / 36
    assert owned["usd_per_month"] == pytest.approx(monthly)
    assert owned["usd_per_million_tokens"] == pytest.approx(monthly / (1000 / 60 * 2_628_000 * 1200 / 1e6))
    text = run_cli("compare", str(example("70b-serving")), "--gpus", "h200").stdout
    assert "Self-host versus API" in text and "vs DeepInfra $0.26/M" in text


@pytest.mark.slow
def test_an_overlay_price_moves_the_break_even(tmp_path: Path) -> None:
    before = _compare_json()["self_host_vs_api"]
    overlay = tmp_path / "api.yaml"
    row = {
        "id": "deepinfra-llama-3.1-70b", "override": True, "usd_per_million_input_tokens": 0.46,
        "usd_per_million_output_tokens": 0.80, "source": "https://example.com/quote", "as_of": "2026-12",
    }  # fmt: skip
    overlay.write_text(yaml.safe_dump({"api_prices": [row]}), encoding="utf-8")
    after = _compare_json("--catalog", str(overlay))["self_host_vs_api"]
    q0 = next(q for q in before["quotes"] if q["id"] == row["id"])
    q1 = next(q for q in after["quotes"] if q["id"] == row["id"])
    assert q1["usd_per_month"] == pytest.approx(2 * q0["usd_per_month"])
    assert q1["source"] == "https://example.com/quote"
    b0 = next(b for b in before["designs"][0]["break_even"] if b["api"] == row["id"])
    b1 = next(b for b in after["designs"][0]["break_even"] if b["api"] == row["id"])
    assert b1["requests_per_s"] == pytest.approx(b0["requests_per_s"] / 2)


@pytest.mark.slow
def test_a_model_without_an_api_price_says_so_in_one_line() -> None:
    result = run_cli(
        "compare", "--model", "llama-2-13b", "--input-tokens", "500", "--output-tokens", "200",
        "--tokens-per-s", "500", "--gpus", "h100-sxm",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [x for x in result.stdout.splitlines() if "hosted API price" in x]
    assert len(lines) == 1 and "llama-2-13b" in lines[0]
    assert "vs DeepInfra" not in result.stdout


def test_an_api_price_must_name_a_catalog_model_once() -> None:
    bad = {"id": "x", "provider": "P", "served_model": "m", "model": "llama-9b", "usd_per_million_input_tokens": 1,
           "usd_per_million_output_tokens": 1, "source": "https://example.com", "as_of": "2026-12"}  # fmt: skip
    with pytest.raises(CatalogInputError, match="llama-9b"):
        load_catalog_text(yaml.safe_dump({"api_prices": [bad]}))
    both = {**bad, "model": "llama-3.1-8b", "equivalent": "llama-3.1-8b"}
    with pytest.raises(CatalogInputError, match="exactly one of model"):
        load_catalog_text(yaml.safe_dump({"api_prices": [both]}))


@pytest.mark.slow
def test_the_report_shows_design_1_beside_the_apis_for_the_70b_example(tmp_path: Path, catalog: Any) -> None:
    out = tmp_path / "review.md"
    result = run_cli("report", str(example("70b-serving")), "-o", str(out), "--top", "1", "--what-if", "none")
    assert result.exit_code == 0, result.output
    md = out.read_text(encoding="utf-8")
    section = md.split("## Self-host versus API", 1)[1].split("\n## ", 1)[0]
    d = shared_plan(example("70b-serving"), catalog).designs[0]
    # Design 1's total over 36 months, per month, over the 16.67 req/s x 1,200 tokens of a 730 h month.
    monthly = d.costs.total_usd / 36
    per_m = monthly / (1000 / 60 * 2_628_000 * 1200 / 1e6)
    assert f"| **design 1, self-hosted** | **-** | **-** | **-** | **{usd_per_m(per_m)}** |" in section
    assert "| DeepInfra | meta-llama/Meta-Llama-3.1-70B-Instruct | $0.23 | $0.40 | $0.26 | $13.6k/month |" in section


def test_rent_vs_buy_sets_each_priced_side_beside_the_apis() -> None:
    result = run_cli("rent-vs-buy", str(example("7b-chat-serving")), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    v = doc["self_host_vs_api"]
    assert v["model"] == "llama-3.1-8b" and v["requests_per_s"] == pytest.approx(4000 / 250)
    (rent,) = v["designs"]  # the 8B example's GPU has no purchase price: only the rent side is priced
    assert rent["label"] == "rent"
    assert rent["usd_per_month"] == pytest.approx(doc["rent"]["costs"]["total_usd"] / 24)
    assert [b["api"] for b in rent["break_even"]] == [q["id"] for q in v["quotes"]]
    text = run_cli("rent-vs-buy", str(example("7b-chat-serving"))).stdout
    assert "self-host versus API at 16.00 req/s" in text and "vs Amazon Bedrock $0.22/M" in text


@pytest.mark.slow
def test_without_a_design_that_meets_its_targets_compare_sets_none_beside_the_apis() -> None:
    result = run_cli("compare", str(example("70b-serving")), "--gpus", "t4")  # 70B does not fit a T4
    assert result.exit_code == 0, result.output
    assert "no design here meets its targets" in result.stdout and "vs DeepInfra" not in result.stdout
