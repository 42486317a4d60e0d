"""The terms clouds sell: on demand, 1- and 3-year commitments owed for whole terms, and spot for interruptible work.

The whole-term rule is checked by hand (``T x ceil(h / T)`` months at the committed rate), on a hand-made table
for the CP-SAT model, and end to end on the shipped catalog's Hyperstack H100 PCIe row (on demand $2.60/h, a
3-year reservation $1.82/h): a 3-year term wins at 30 and 36 months, and loses at 24 (36 months owed) and 3.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clusterplan.candidates.offerings import build_offerings, gpu_type_of, limits_of
from clusterplan.catalog.load import Catalog
from clusterplan.design.check import check_plan
from clusterplan.physics.cost import paid_months
from clusterplan.plan import Plan
from clusterplan.planner.ranking import rank_designs
from clusterplan.planner.solve import Planner
from clusterplan.requirement.load import load_requirement
from clusterplan.requirement.schema import Requirement
from conftest import cloud, plan_file, run_cli, serving, solve_doc, srow, table, write_doc

ON_DEMAND, RESERVED_3Y = 2.6, 1.82  # catalog/instances.yaml hyperstack 1x-h100-pcie-nvlink
HOURS = 730


def service(horizon: float, **constraints: Any) -> dict[str, Any]:
    """An 8B chat service one H100 PCIe serves, on Hyperstack's cloud only."""
    return {
        "name": "small service",
        "model": "llama-3.1-8b",
        "workloads": [
            {"kind": "serving", "name": "chat", "requests_per_min": 30, "input_tokens": 500, "output_tokens": 200}
        ],
        "budget": {"horizon": horizon},
        "deployment": "cloud",
        "constraints": {"clouds": ["hyperstack"], "allowed_gpus": ["h100-pcie"], **constraints},
    }


def finetune(*, interruptible: bool, pricing: str = "auto") -> dict[str, Any]:
    """A QLoRA fine-tune that one 8x A100 80GB instance runs (AWS p4de: $27.45/h on demand, $9.97/h spot)."""
    w: dict[str, Any] = {
        "kind": "finetune",
        "name": "adapt",
        "method": "qlora",
        "tokens": "200M",
        "deadline": "2d",
        "sequence_length": "2k",
        "global_batch_tokens": "64k",
    }
    if interruptible:
        w["interruptible"] = True
    return {
        "name": "fine-tune",
        "model": "mistral-7b",
        "workloads": [w],
        "budget": {"horizon": 1},
        "deployment": "cloud",
        "constraints": {"clouds": ["aws"], "allowed_gpus": ["a100-80gb"], "pricing": pricing},
    }


def _design(tmp_path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    code, out = solve_doc(tmp_path, doc, "--json")
    assert code == 0, out
    design: dict[str, Any] = json.loads(out)["designs"][0]
    return design


# ------------------------------------------------------------------------------------------------
# The rule, by hand
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("horizon", "term", "paid"),
    [(6, 0, 6), (6, 12, 12), (12, 12, 12), (18, 12, 24), (24, 36, 36), (36, 36, 36), (37, 36, 72)],
)
def test_a_commitment_is_owed_for_whole_terms(horizon: float, term: int, paid: float) -> None:
    assert paid_months(horizon, term) == paid


def test_each_term_is_an_offering_priced_over_the_horizon(catalog: Catalog) -> None:
    """A 3-year term owes 36 months at any horizon up to 36; at 3 months it is dearer than on demand over the horizon
    but still offered, being cheaper by the month (a monthly budget may want it); pricing: on_demand offers none."""
    gpus = {"h100-pcie": gpu_type_of(catalog.gpus["h100-pcie"])}

    def terms(horizon: float, **constraints: Any) -> dict[str, float]:
        req = load_requirement_doc(service(horizon, **constraints))
        offerings, _ = build_offerings(catalog, req, gpus, limits_of(req, catalog))
        return {o.key: o.horizon_usd(horizon) for o in offerings if o.instance_id == "1x-h100-pcie-nvlink"}

    long = terms(36)
    assert long["cloud:hyperstack:1x-h100-pcie-nvlink:3y"] == pytest.approx(RESERVED_3Y * HOURS * 36)
    assert long["cloud:hyperstack:1x-h100-pcie-nvlink"] == pytest.approx(ON_DEMAND * HOURS * 36)
    short = terms(3)
    assert short["cloud:hyperstack:1x-h100-pcie-nvlink:3y"] == pytest.approx(RESERVED_3Y * HOURS * 36)
    assert set(terms(36, pricing="on_demand")) == {"cloud:hyperstack:1x-h100-pcie-nvlink"}


def load_requirement_doc(doc: dict[str, Any]) -> Requirement:
    return Requirement.model_validate(doc)


# ------------------------------------------------------------------------------------------------
# The model: the cheaper term over the horizon
# ------------------------------------------------------------------------------------------------


def _chosen(horizon: float) -> dict[str, int]:
    od = cloud("a", 1, 1.0)
    three = replace(od, key="cloud:a:1:3y", usd_per_hour=0.7, term="3y", term_months=36)
    t = table([serving([srow("a", 1, rate=3.0)], demand=2.0)], [od, three], horizon_months=horizon)
    r = rank_designs(Planner(t), top=1)
    sol = r.designs[0].solution
    assert sol is not None
    return dict(sol.instances)


def test_the_planner_takes_the_term_the_horizon_pays_for() -> None:
    # 3-year at $0.70/h owes 36 months: $18,396; on demand over 36 months $26,280, over 24 months $17,520.
    assert _chosen(36) == {"cloud:a:1:3y": 1}
    assert _chosen(30) == {"cloud:a:1:3y": 1}  # 30 x $730 = $21,900 on demand > $18,396
    assert _chosen(24) == {"cloud:a:1": 1}  # $0.70 x 730 x 24 = $12,264 would win if the term were ignored
    assert _chosen(3) == {"cloud:a:1": 1}


# ------------------------------------------------------------------------------------------------
# End to end on the shipped catalog
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("horizon", "term"), [(3, "on_demand"), (24, "on_demand"), (30, "3y"), (36, "3y")])
def test_a_service_rents_on_the_term_its_horizon_makes_cheapest(tmp_path: Path, horizon: int, term: str) -> None:
    d = _design(tmp_path, service(horizon))
    (line,) = d["hardware"]
    assert (line["term"], line["term_months"]) == (term, 36 if term == "3y" else 0)
    rate = RESERVED_3Y if term == "3y" else ON_DEMAND
    owed = 36 if term == "3y" else horizon
    assert line["usd_per_hour"] == rate
    # operations of its one GPU type and one pool (owned.yaml) run for the horizon only, commitment or not
    ops = (1550 + 775) * horizon
    assert d["costs"]["total_usd"] == pytest.approx(rate * HOURS * owed + ops, abs=0.01)
    assert d["costs"]["unused_commitment_usd"] == pytest.approx(rate * HOURS * (owed - horizon), abs=0.01)
    assert ("3y" in d["summary"]) == (term == "3y")


@pytest.mark.slow
def test_pricing_on_demand_keeps_a_long_service_off_commitments(tmp_path: Path) -> None:
    (line,) = _design(tmp_path, service(36, pricing="on_demand"))["hardware"]
    assert line["term"] == "on_demand"


@pytest.mark.slow
def test_spot_only_for_a_workload_that_says_it_is_interruptible(tmp_path: Path) -> None:
    (steady,) = _design(tmp_path, finetune(interruptible=False))["hardware"]
    assert (steady["offering"], steady["term"], steady["usd_per_hour"]) == (
        "cloud:aws:p4de.24xlarge",
        "on_demand",
        27.44705,
    )
    (spot,) = _design(tmp_path, finetune(interruptible=True))["hardware"]
    assert (spot["offering"], spot["term"], spot["usd_per_hour"]) == ("cloud:aws:p4de.24xlarge:spot", "spot", 9.97)


def test_pricing_spot_is_refused_for_a_workload_that_is_not_interruptible(tmp_path: Path) -> None:
    path = write_doc(tmp_path, finetune(interruptible=False, pricing="spot"))
    r = run_cli("validate", str(path))
    assert r.exit_code == 2
    assert "interruptible: true" in r.output and "adapt" in r.output
    assert "Traceback" not in r.output
    ok = write_doc(tmp_path, finetune(interruptible=True, pricing="spot"), name="ok.yaml")
    assert run_cli("validate", str(ok)).exit_code == 0


@pytest.mark.slow
def test_the_checker_refuses_spot_for_a_steady_workload(tmp_path: Path, catalog: Catalog) -> None:
    spot_path = write_doc(tmp_path, finetune(interruptible=True), name="spot.yaml")
    plan: Plan = plan_file(spot_path, catalog)
    d = plan.designs[0]
    assert d.hardware[0].term == "spot"
    steady = load_requirement(write_doc(tmp_path, finetune(interruptible=False), name="steady.yaml"), catalog)
    assert check_plan(d, load_requirement(spot_path, catalog), catalog) == []
    problems = check_plan(d, steady, catalog)
    assert any("interruptible" in p for p in problems), problems


@pytest.mark.slow
@pytest.mark.parametrize(("interruptible", "term", "rate"), [(False, "on_demand", 27.44705), (True, "spot", 9.97)])
def test_a_service_goes_on_spot_only_when_it_says_it_is_interruptible(
    tmp_path: Path, interruptible: bool, term: str, rate: float
) -> None:
    doc = service(3)
    doc["workloads"][0]["interruptible"] = interruptible
    doc["constraints"] = {"clouds": ["aws"], "allowed_gpus": ["a100-80gb"]}
    (line,) = _design(tmp_path, doc)["hardware"]
    assert (line["term"], line["usd_per_hour"]) == (term, rate)
