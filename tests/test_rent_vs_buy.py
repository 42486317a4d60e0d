"""``clusterplan rent-vs-buy``: solve's costs at the horizon to the cent, the break-even month by hand, clean errors."""

from __future__ import annotations

import itertools
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
    """70B example, aggregated and on MI300X (a GPU several clouds rent): design 1 is
    owned; the rent side hosts the same replica groups, each as ``estimate`` rents it."""
    from clusterplan.design.estimate import estimate_requirement
    from clusterplan.requirement.load import load_requirement
    from clusterplan.requirement.schema import PinnedConfig

    doc = yaml.safe_load(example("70b-serving").read_text(encoding="utf-8"))
    doc["workloads"][0]["disaggregation"] = "off"
    doc["constraints"] = {"allowed_gpus": ["mi300x"]}
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


def test_a_gpu_no_cloud_rents_says_so_per_pool() -> None:
    """No catalog cloud rents RTX PRO 6000: the rent side is not possible, and the pool says why."""
    args = [str(example("7b-chat-serving")), "--gpu", "rtx-pro-6000", "--count", "8", "--tp", "1"]
    result = run_cli("rent-vs-buy", *args)
    assert result.exit_code == 0, result.output
    assert "rent: not possible (NVIDIA RTX PRO 6000" in result.stdout
    assert "break-even: none" in result.stdout
    assert "no break-even: no cloud in the catalog" in result.stdout
    (pool,) = _rent_vs_buy(*args)["pools"]
    assert (pool["rent"], pool["break_even_month"], pool["reason"]) == (None, None, "no_cloud_offer")


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_pool_of_every_example_has_a_break_even_or_a_reason(path: Path, catalog: Any) -> None:
    """One answer per pool (replica group or training layout) of design 1: a break-even month, or a reason code,
    never both, never neither; the text prints one line for each."""
    design = shared_plan(path, catalog, explain=False).designs[0]
    doc = _rent_vs_buy(str(path))
    pools = doc["pools"]
    groups = sum(len(w.groups) if w.kind == "serving" else 1 for w in design.workloads)
    assert len(pools) == groups
    for p in pools:
        assert (p["break_even_month"] is None) != (p["reason"] is None), p
    text = run_cli("rent-vs-buy", str(path)).stdout
    lines = text.splitlines()
    start = lines.index("per pool, each rented and bought alone:") + 1
    section = [line for line in itertools.takewhile(lambda x: x.startswith("  "), lines[start:])]
    assert len(section) == groups and all("break-even" in line for line in section), text


@pytest.mark.slow
def test_a_pool_sold_only_without_a_fabric_is_rented_on_the_nearest_packaging(tmp_path: Path) -> None:
    """The 13B example held to RTX 6000 Ada (its own design 1 moved to one B200 server when the scheduler simulation
    rejected its RTX 6000 Ada serving layouts, issue 31) pretrains on them; RunPod rents them, but with no
    fabric between instances, so the run's exact packaging is not sold: the pool (TP1 PP4 DP7, 28 GPUs, since the
    queueing model's p95s took the prompt queue and the busy period) is rented on 7 x 4-GPU instances, marked no_fabric, and the design's rent side is priced on it (a break-even month, where it once said "rent: not
    possible")."""
    path = tmp_path / "13b-ada.yaml"
    text = example("13b-train-then-serve").read_text()
    path.write_text(
        text.replace("deployment: owned", "deployment: owned\nconstraints:\n  allowed_gpus: [rtx-6000-ada]")
    )
    doc = _rent_vs_buy(str(path))
    pretrain = next(p for p in doc["pools"] if p["workload"] == "pretrain")
    assert pretrain["rent_gap"] == "no_fabric"
    assert (pretrain["rent"]["offering"], pretrain["rent"]["units"]) == ("cloud:runpod:4x-rtx-6000-ada-secure", 7)
    assert pretrain["reason"] == "never_catches_up"  # a run rented once never costs what the servers do
    assert doc["rent"]["nearest"] == ["NVIDIA RTX 6000 Ada Generation 48GB"]
    assert doc["rent"]["costs"] is not None and doc["break_even_month"] is not None


@pytest.mark.slow
def test_pool_break_even_by_hand(catalog: Any) -> None:
    """A pool of 4 L40S in TP1 (Mixtral's prefill pool until its design moved to aggregated H200, issue 35) alone.
    Rent: one runpod:4x-l40s-secure at $3.44/h x 730 h = $2,511.20 a month. Buy: one 4-GPU server, 4 x $9,000 + half
    of ($93,500 host + $15,000 network) = $90,250; a month of electricity (4 x 350 W + 2,300 W = 3.7 kW) x 1.56 x
    730 h x $0.0977 + colocation 3.7 kW x $184.06 + support $90,250 x 10% / 12 = $1,844.77. Break-even
    $90,250 / ($2,511.20 - $1,844.77) = 135.4 months (a pool's operations are the same rented or bought). A GH200
    has no purchase price: no break-even, and the reason says so."""
    doc = _rent_vs_buy(str(example("7b-chat-serving")), "--gpu", "l40s", "--count", "4", "--tp", "1")
    (pool,) = doc["pools"]
    assert (pool["rent"]["units"], pool["rent"]["monthly_usd"]) == (1, pytest.approx(3.44 * 730))
    buy = pool["buy"]
    month = 3.7 * 1.56 * 730 * 0.0977 + 3.7 * 184.06 + 90_250 * 0.10 / 12
    assert (buy["capital_usd"], buy["monthly_usd"]) == (pytest.approx(90_250), pytest.approx(month))
    assert pool["break_even_month"] == pytest.approx(90_250 / (3.44 * 730 - month))
    (gh200,) = _rent_vs_buy(str(example("7b-chat-serving")), "--gpu", "gh200", "--count", "1", "--tp", "1")["pools"]
    assert (gh200["buy"], gh200["reason"]) == (None, "no_purchase_price")


def test_break_even_month_by_hand(catalog: Any) -> None:
    """8 H100 SXM in one TP 8 group, around the clock.

    Buy (owned.yaml, gpus.yaml): capital 8 x $27,500 + $93,500 host + $15,000 network = $328,500; a month of
    electricity (8 x 700 W + 4,600 W) = 10.2 kW x PUE 1.56 x 730 h x $0.0977/kWh = $1,134.86, colocation
    10.2 kW x $184.06/kW-month = $1,877.41 and support $328,500 x 10% a year / 12 = $2,737.50: $5,749.77.
    Rent: the 8-GPU instance the result names, at its catalog $/h x 730 h a month. Each side also runs one GPU
    type and one pool ($1,550 + $775 a month, owned.yaml): the same on both sides, so the break-even is unmoved.
    Break-even: $328,500 / (rent a month - $5,749.77) months (25.4 at Hyperstack's $25.60/h; 18.7 while owned
    servers paid electricity only).
    """
    doc = _rent_vs_buy(str(example("7b-chat-serving")), "--gpu", "h100-sxm", "--count", "8", "--tp", "8")
    running = 10.2 * 1.56 * 730 * 0.0977 + 10.2 * 184.06 + 328_500 * 0.10 / 12  # the owned server's month
    assert running == pytest.approx(1134.86 + 1877.41 + 2737.50, abs=2 * CENT)
    buy = doc["buy"]["costs"]
    ops = 1550 + 775
    assert (buy["capital_usd"], buy["monthly_usd"]) == (pytest.approx(328_500), pytest.approx(running + ops))
    (line,) = doc["rent"]["hardware"]
    inst = catalog.instances[line["label"]]
    assert (inst.gpu_id, inst.gpus_per_instance, line["units"]) == ("h100-sxm", 8, 1)
    rent_month = inst.on_demand_usd_per_hour * 730
    assert doc["rent"]["costs"]["monthly_usd"] == pytest.approx(rent_month + ops)
    months = 328_500 / (rent_month - running)
    assert doc["break_even_month"] == pytest.approx(months, rel=1e-9)
    assert doc["first_cheaper_month"] == math.ceil(months)
    by_month = {p["month"]: p for p in doc["curve"]}
    m = doc["first_cheaper_month"]
    assert by_month[m]["buy_usd"] <= by_month[m]["rent_usd"]
    assert by_month[m - 1]["buy_usd"] > by_month[m - 1]["rent_usd"]
    assert by_month[m]["rent_usd"] == pytest.approx(m * (rent_month + ops))
    assert by_month[m]["buy_usd"] == pytest.approx(328_500 + m * (running + ops))
    # The curve runs past the break-even (at least 60 months) and always holds the horizon (24 months).
    assert max(by_month) >= max(60, m) and 24.0 in by_month
    assert doc["cheaper_at_horizon"] == ("buy" if 328_500 + 24 * running <= 24 * rent_month else "rent")


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


@pytest.mark.slow
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
