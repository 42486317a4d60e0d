"""``clusterplan rent-vs-buy``: solve's costs at the horizon to the cent, the break-even month by hand, clean errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import EXAMPLES, example, plan_file, run_cli, shared_plan

CENT = 0.005


def _rent_vs_buy(*args: str) -> dict[str, Any]:
    result = run_cli("rent-vs-buy", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_design_side_at_the_horizon_is_solves_cost(path: Path, catalog: Any) -> None:
    """The side design 1 itself uses (all cloud: rent; all owned: buy) costs, at the requirement's horizon, what
    solve reports for design 1: capital, monthly, one-off, total and $ per million tokens, to the cent; the curve's
    point at the horizon is the same total."""
    design = shared_plan(path, catalog, explain=False).designs[0]
    doc = _rent_vs_buy(str(path))
    kinds = {x.kind for x in design.hardware}
    assert len(kinds) == 1, "every example's design 1 is all cloud or all owned"
    side = doc["rent"] if kinds == {"cloud"} else doc["buy"]
    assert side["from_design"] is True
    c, got = design.costs, side["costs"]
    for key in ("capital_usd", "monthly_usd", "one_off_usd", "total_usd"):
        assert got[key] == pytest.approx(getattr(c, key), abs=CENT), key
    if c.usd_per_million_output_tokens is None:
        assert got["usd_per_million_output_tokens"] is None
    else:
        assert got["usd_per_million_output_tokens"] == pytest.approx(c.usd_per_million_output_tokens, abs=CENT)
    at_horizon = [p for p in doc["curve"] if p["month"] == c.horizon_months]
    assert len(at_horizon) == 1
    value = at_horizon[0]["rent_usd" if kinds == {"cloud"} else "buy_usd"]
    assert value == pytest.approx(c.total_usd, abs=CENT)
    assert doc["gpus"] == design.gpus_by_type


@pytest.mark.slow
def test_other_side_is_estimates_price_for_the_same_layout(catalog: Any, tmp_path: Path) -> None:
    """70B example, aggregated: design 1 is owned; the rent side hosts the same replica groups, each as
    ``estimate`` rents it."""
    from clusterplan.design.estimate import estimate_requirement
    from clusterplan.requirement.load import load_requirement
    from clusterplan.requirement.schema import PinnedConfig

    doc = yaml.safe_load(example("70b-serving").read_text(encoding="utf-8"))
    doc["workloads"][0]["disaggregation"] = "off"
    path = tmp_path / "70b-aggregated.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    design = plan_file(path, catalog, explain=False).designs[0]
    groups = design.workloads[0].groups  # type: ignore[union-attr]
    assert groups
    resolved = load_requirement(path, catalog)
    clouds = []
    for group in groups:
        pins = PinnedConfig(
            gpu=group.gpu, tp=group.tp, pp=group.pp, dp=group.replicas, quant=group.quant, kv_quant=group.kv_cache,
            deployment="cloud",
        )  # fmt: skip
        est = estimate_requirement(resolved.requirement, list(resolved.models), catalog, pins)
        assert est.cloud is not None
        clouds.append(est.cloud)
    doc = _rent_vs_buy(str(path))
    assert doc["rent"]["costs"]["total_usd"] == pytest.approx(sum(c.costs.total_usd for c in clouds), abs=2 * CENT)
    assert sorted(h["offering"] for h in doc["rent"]["hardware"]) == sorted(c.hardware[0].offering for c in clouds)


@pytest.mark.slow
def test_a_design_no_cloud_rents_says_so() -> None:
    """Eight RTX PRO 6000, which no catalog cloud rents (the 70B example's design 1 put its prefill pool on them
    until a workload's pools were held to one GPU type: it is now an H200 server, which clouds rent)."""
    result = run_cli("rent-vs-buy", str(example("70b-serving")), "--gpu", "rtx-pro-6000", "--count", "8", "--tp", "1")
    assert result.exit_code == 0, result.output
    assert "rent: not possible (NVIDIA RTX PRO 6000" in result.stdout
    assert "break-even: none" in result.stdout


def test_break_even_month_by_hand(catalog: Any) -> None:
    """8 H100 SXM in one TP 8 group, around the clock.

    Buy (owned.yaml, gpus.yaml): capital 8 x $27,500 + $93,500 host + $15,000 network = $328,500; electricity
    (8 x 700 W + 4,600 W) = 10.2 kW x PUE 1.56 x 730 h x $0.0977/kWh = $1,134.86 a month.
    Rent: the 8-GPU instance the result names, at its catalog $/h x 730 h a month.
    Break-even: $328,500 / (rent a month - $1,134.86) months.
    """
    doc = _rent_vs_buy(str(example("7b-chat-serving")), "--gpu", "h100-sxm", "--count", "8", "--tp", "8")
    electricity = 10.2 * 1.56 * 730 * 0.0977
    assert electricity == pytest.approx(1134.86, abs=CENT)
    buy = doc["buy"]["costs"]
    assert (buy["capital_usd"], buy["monthly_usd"]) == (pytest.approx(328_500), pytest.approx(electricity))
    (line,) = doc["rent"]["hardware"]
    inst = catalog.instances[line["label"]]
    assert (inst.gpu_id, inst.gpus_per_instance, line["units"]) == ("h100-sxm", 8, 1)
    rent_month = inst.on_demand_usd_per_hour * 730
    assert doc["rent"]["costs"]["monthly_usd"] == pytest.approx(rent_month)
    months = 328_500 / (rent_month - electricity)
    assert doc["break_even_month"] == pytest.approx(months, rel=1e-9)
    assert doc["first_cheaper_month"] == math.ceil(months)
    by_month = {p["month"]: p for p in doc["curve"]}
    m = doc["first_cheaper_month"]
    assert by_month[m]["buy_usd"] <= by_month[m]["rent_usd"]
    assert by_month[m - 1]["buy_usd"] > by_month[m - 1]["rent_usd"]
    assert by_month[m]["rent_usd"] == pytest.approx(m * rent_month)
    assert by_month[m]["buy_usd"] == pytest.approx(328_500 + m * electricity)
    # The curve runs past the break-even (at least 60 months) and always holds the horizon (24 months).
    assert max(by_month) >= max(60, m) and 24.0 in by_month
    assert doc["cheaper_at_horizon"] == ("buy" if 328_500 + 24 * electricity <= 24 * rent_month else "rent")


def test_break_even_edge_cases() -> None:
    from clusterplan.design.breakeven import break_even_month
    from clusterplan.plan import Costs

    def c(capital: float, monthly: float, one_off: float = 0.0) -> Costs:
        return Costs(
            capital_usd=capital, monthly_usd=monthly, one_off_usd=one_off, total_usd=0.0, horizon_months=1.0,
            usd_per_million_output_tokens=None,
        )  # fmt: skip

    assert break_even_month(c(0, 1000), c(12_000, 0)) == pytest.approx(12.0)
    assert break_even_month(c(0, 1000, one_off=2000), c(12_000, 500)) == pytest.approx(20.0)  # fixed 10,000 / 500
    assert break_even_month(c(0, 1000), c(12_000, 1000)) is None  # never catches up
    assert break_even_month(c(0, 1000, one_off=5000), c(4000, 900)) == 0.0  # cheaper from the start


def test_plot_is_a_png(tmp_path: Path) -> None:
    out = tmp_path / "rvb.png"
    result = run_cli("rent-vs-buy", str(example("7b-chat-serving")), "--gpu", "l4", "--count", "2", "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Cumulative cost" in result.output and "break-even" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "h100", "--count", "8"], "unknown GPU 'h100'"),
        (["--gpu", "h100-sxm"], "--count: --gpu and --count go together"),
        (["--count", "8"], "--gpu: --gpu and --count go together"),
        (["--gpu", "h100-sxm", "--count", "6", "--tp", "4"], "--count 6 is not a positive multiple of --tp 4"),
        (["--gpu", "l4", "--count", "1", "--plot", "x.jpg"], "--plot: x.jpg: the file name must end in .png"),
    ],
)
def test_bad_input_is_a_clean_exit_2(args: list[str], needle: str) -> None:
    result = run_cli("rent-vs-buy", str(example("7b-chat-serving")), *args)
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_no_design_is_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "poor.yaml"
    path.write_text(
        "model: llama-3.1-70b\nworkloads:\n  - kind: serving\n    tokens_per_sec: 5k\nbudget:\n  total: $10\n"
    )
    result = run_cli("rent-vs-buy", str(path))
    assert result.exit_code == 1, result.output
    assert "no feasible design" in result.output
