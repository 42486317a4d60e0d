"""Golden results for every shipped example, each number explained.

``test_planner_examples.golden.json`` pins, per example: the status; design 1's GPUs by type, its
layout per workload and the hardware it buys or rents; its cost figures to the cent (per million output
tokens to 0.01%); the families the explanation marks *binding* (switching one off lowers the optimum);
and a ``why`` that says where the numbers come from. Two independent checks hold the file:

- the planner must reproduce it (``test_example_matches_golden``);
- its costs must be the catalog arithmetic done here from the raw YAML of ``catalog/``, not by the
  planner's code (``test_golden_costs_are_the_catalog_arithmetic``): owned capital is
  ``servers x (GPUs x GPU price + host + network)``, electricity ``W x PUE x 730 h x $/kWh``, colocation
  ``IT kW x $/kW-month``, support ``server price x fraction per year / 12`` (every server in use), cloud
  ``instances x $/h x 730 h`` a month, a cloud training run ``instances x $/h x billed hours``.

A physics, catalog or model change that moves a design or a cost fails here on purpose. Regenerate,
then review the diff like any change of result and rewrite the ``why`` of every example whose design
changed (regeneration keeps a ``why`` only where the hardware and layout are unchanged, and a
``TODO`` fails ``test_every_golden_number_is_explained``). Never in CI (``CI`` set: refused)::

    CLUSTERPLAN_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_planner_examples.py
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterplan.plan import Plan, ServingPlan, TrainingPlan
from clusterplan.wording.fmt import moe_layout
from conftest import EXAMPLES, ROOT, ExamplePlans, shared_plan

GOLDEN_FILE = Path(__file__).resolve().parent / "test_planner_examples.golden.json"
UPDATE_ENV = "CLUSTERPLAN_UPDATE_GOLDEN"
TODO_WHY = "TODO: say where these numbers come from (design changed at regeneration)"
USD_ABS = 0.006  # to the cent (the golden file keeps cents)
PER_TOKEN_REL = 1e-4
HOURS_PER_MONTH = 730.0  # 8,760 h / 12, the serving month the catalog's prices are multiplied by


# ------------------------------------------------------------------------------------------------
# What is pinned
# ------------------------------------------------------------------------------------------------


def _layout(plan: Plan) -> list[str]:
    """Design 1 per workload: replicas x GPU TPn PPn quant for serving, the layout for training."""
    out: list[str] = []
    for w in plan.designs[0].workloads:
        if isinstance(w, ServingPlan):
            out += [
                f"{w.workload}: {g.replicas}x {'' if g.role == 'aggregated' else g.role + ' '}"
                f"{g.gpu} TP{g.tp} PP{g.pp}{moe_layout(g.ep, g.attention_dp)} {g.quant}"
                for g in w.groups
            ]
        else:
            assert isinstance(w, TrainingPlan)
            out.append(f"{w.workload}: {w.gpu} TP{w.tp} PP{w.pp} DP{w.dp} ZeRO-{w.zero_stage} ({w.deployment})")
    return out


def _hardware(plan: Plan) -> list[dict[str, Any]]:
    d = plan.designs[0]
    hours = {
        w.cloud_instance: math.ceil(w.time_to_train_s / 3600 - 1e-9)
        for w in d.workloads
        if isinstance(w, TrainingPlan) and w.deployment == "cloud"
    }
    out: list[dict[str, Any]] = []
    for h in d.hardware:
        line: dict[str, Any] = {"offering": h.offering, "units": h.units}
        if h.kind == "owned":
            line |= {"bought": h.bought, "from_inventory": h.from_inventory}
        elif h.purpose != "serving":
            line["billed_hours"] = hours[h.offering.removeprefix("cloud:")]
        out.append(line)
    return out


def summarise(plan: Plan) -> dict[str, Any]:
    """What the golden file pins of one example's plan (without its ``why``)."""
    out: dict[str, Any] = {"status": plan.status}
    if plan.designs:
        d = plan.designs[0]
        c = d.costs
        out |= {
            "gpus": d.gpus_by_type,
            "gpus_total": d.gpus_total,
            "layout": _layout(plan),
            "hardware": _hardware(plan),
            "costs": {
                "capital_usd": round(c.capital_usd, 2),
                "monthly_usd": round(c.monthly_usd, 2),
                "one_off_usd": round(c.one_off_usd, 2),
                "total_usd": round(c.total_usd, 2),
                "horizon_months": c.horizon_months,
                "usd_per_million_output_tokens": None
                if c.usd_per_million_output_tokens is None
                else round(c.usd_per_million_output_tokens, 6),
            },
            "binding": [x.family for x in d.constraints if x.status == "binding"],
        }
        scalers = {w.workload: w.autoscaler for w in d.workloads if isinstance(w, ServingPlan) and w.autoscaler}
        if scalers:  # a demand profile: the base held every hour, the peak, and the burst replicas hour by hour
            out["autoscaler"] = {
                name: {
                    "min_replicas": a.min_replicas,
                    "max_replicas": a.max_replicas,
                    "replicas_by_hour": a.replicas_by_hour,
                    "burst_offering": a.burst_offering,
                }
                for name, a in scalers.items()
            }
    if plan.infeasibility is not None:
        out["conflict"] = [f.id for f in plan.infeasibility.conflict]
    return out


def _same_design(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("status", "gpus", "layout", "hardware", "autoscaler"))


def write_golden(plans: Mapping[str, Plan]) -> None:
    """Rewrite the golden file from ``plans``, keeping each ``why`` whose design did not change."""
    old = json.loads(GOLDEN_FILE.read_text()) if GOLDEN_FILE.exists() else {}
    new: dict[str, Any] = {}
    for stem, plan in sorted(plans.items()):
        entry = summarise(plan)
        before = old.get(stem, {})
        entry["why"] = before["why"] if before.get("why") and _same_design(before, entry) else TODO_WHY
        new[stem] = entry
    GOLDEN_FILE.write_text(json.dumps(new, indent=2, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def plans(catalog: Any) -> ExamplePlans:
    """Per example, its plan (planned when a test first reads it)."""
    return ExamplePlans(EXAMPLES, lambda path: shared_plan(path, catalog, top=1))


@pytest.fixture(scope="module")
def golden(plans: ExamplePlans) -> dict[str, dict[str, Any]]:
    if os.environ.get(UPDATE_ENV) == "1":
        if os.environ.get("CI"):
            pytest.fail(f"{UPDATE_ENV}=1 in CI: the golden file is regenerated by hand and reviewed, never in CI")
        write_golden(plans)
    data: dict[str, dict[str, Any]] = json.loads(GOLDEN_FILE.read_text())
    return data


# ------------------------------------------------------------------------------------------------
# The planner reproduces the golden file
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("stem", [p.stem for p in EXAMPLES])
def test_example_matches_golden(stem: str, plans: Mapping[str, Plan], golden: dict[str, dict[str, Any]]) -> None:
    want = golden.get(stem)
    assert want is not None, f"no golden result for {stem}: regenerate (see this module's docstring)"
    got = summarise(plans[stem])
    hint = f"{stem} moved; if intended, regenerate (see this module's docstring) and explain the change"
    for key in ("status", "gpus", "gpus_total", "layout", "hardware", "binding", "conflict", "autoscaler"):
        assert got.get(key) == want.get(key), f"{key}: {hint}"
    if "costs" not in want:
        assert "costs" not in got, hint
        return
    for key, value in want["costs"].items():
        if key == "usd_per_million_output_tokens" and value is not None:
            assert got["costs"][key] == pytest.approx(value, rel=PER_TOKEN_REL), f"{key}: {hint}"
        else:
            assert got["costs"][key] == pytest.approx(value, abs=USD_ABS), f"{key}: {hint}"


@pytest.mark.slow
@pytest.mark.parametrize("stem", [p.stem for p in EXAMPLES])
def test_no_example_plans_a_consumer_card_unless_it_opts_in(stem: str, plans: Mapping[str, Plan], catalog: Any) -> None:
    """A GeForce card's driver licence excludes datacenter deployment: an example plans one only with
    constraints.allow_consumer_gpus."""
    doc = yaml.safe_load((ROOT / "examples" / "requirements" / f"{stem}.yaml").read_text(encoding="utf-8"))
    if (doc.get("constraints") or {}).get("allow_consumer_gpus"):
        return
    for d in plans[stem].designs:
        assert all(catalog.gpu(g).gpu_class != "consumer" for g in d.gpus_by_type), (stem, d.gpus_by_type)


@pytest.mark.slow
def test_every_golden_number_is_explained(golden: dict[str, dict[str, Any]]) -> None:
    assert sorted(golden) == sorted(p.stem for p in EXAMPLES)
    for stem, entry in golden.items():
        why = entry.get("why", "")
        assert why and "TODO" not in why, f"{stem}: write its why (where its numbers come from)"
        # The why names the total it explains, as printed: "$425,850.95".
        if "costs" in entry:
            assert f"${entry['costs']['total_usd']:,.2f}" in why, f"{stem}: the why does not state the total"


# ------------------------------------------------------------------------------------------------
# The golden costs are the catalog's arithmetic (raw YAML, none of the planner's code)
# ------------------------------------------------------------------------------------------------


@functools.cache
def _yaml(name: str) -> Any:
    return yaml.safe_load((ROOT / "catalog" / name).read_text())


def _quantity(text: object) -> float:
    """``"4k"`` -> 4000.0, ``"$2M"`` -> 2e6, ``1000`` -> 1000.0 (the few forms the examples use)."""
    m = re.fullmatch(r"\$?([0-9.]+)\s*([kKM]?)", str(text).strip())
    assert m, text
    return float(m[1]) * {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6}[m[2]]


def _output_tokens_per_s(stem: str) -> float:
    """Average output tokens/s the example asks for: ``tokens_per_sec``, or requests/min / 60 x output tokens."""
    doc = yaml.safe_load((ROOT / "examples" / "requirements" / f"{stem}.yaml").read_text())
    total = 0.0
    for w in doc["workloads"]:
        if w["kind"] != "serving":
            continue
        if "profile" in w:  # a demand profile: its hourly requests/s averaged over the period
            rates = w["profile"]["requests_per_s_by_hour"]
            total += sum(rates) / len(rates) * _quantity(w["output_tokens"])
        elif "tokens_per_sec" in w:
            total += _quantity(w["tokens_per_sec"])
        else:
            total += _quantity(w["requests_per_min"]) / 60.0 * _quantity(w["output_tokens"])
    return total


def _instance_offering(offering: str) -> tuple[str, str]:
    """``cloud:PROVIDER:ID[:TERM]`` -> (``cloud:PROVIDER:ID``, TERM or '' for on demand)."""
    parts = offering.split(":")
    return ":".join(parts[:3]), parts[3] if len(parts) > 3 else ""


def _operations_usd_per_month(entry: dict[str, Any], owned: dict[str, Any]) -> float:
    """owned.yaml's operations a month: each GPU type held (any hardware line but a training run's) and each serving
    pool (a layout line's workload, role and GPU, on each side its GPU's lines sit on)."""
    held: dict[str, set[str]] = {}
    for line in entry["hardware"]:
        if "billed_hours" not in line:
            kind, gpu = line["offering"].split(":")[:2] if line["offering"].startswith("owned:") else ("cloud", "")
            if kind == "cloud":  # the instance, without a commitment's or spot's term suffix
                gpu = next(i["gpu_id"] for i in _yaml("instances.yaml")["instances"]
                           if f"cloud:{i['provider']}:{i['id']}" == _instance_offering(line["offering"])[0])  # fmt: skip
            held.setdefault(gpu, set()).add(kind)
    pools: set[tuple[str, str, str, str]] = set()  # one per workload, role and GPU type on each side (owned.yaml)
    for text in entry["layout"]:
        if " DP" in text:  # a training layout: a run, not a serving pool
            continue
        m = re.fullmatch(r"([^:]+): \d+x (?:(prefill|decode) )?(\S+) TP.*", text)
        assert m, text
        pools |= {(m[1], m[2] or "", m[3], kind) for kind in held[m[3]]}  # its TP shapes share the pool
    per_type = owned["operations_usd_per_gpu_type_month"]["value"]
    return len(held) * per_type + len(pools) * owned["operations_usd_per_pool_month"]["value"]


def catalog_costs(stem: str, entry: dict[str, Any]) -> dict[str, float | None]:
    """Capital, monthly, one-off, total and $/M output tokens of ``entry['hardware']``, from catalog/*.yaml."""
    gpus = {g["id"]: g for g in _yaml("gpus.yaml")["gpus"]}
    instances = {f"cloud:{i['provider']}:{i['id']}": i for i in _yaml("instances.yaml")["instances"]}
    owned = _yaml("owned.yaml")["owned"]
    capital = monthly = one_off = unused = 0.0
    for line in entry["hardware"]:
        if line["offering"].startswith("owned:"):
            _, gpu_id, size = line["offering"].split(":")
            g = gpus[gpu_id]
            cls = g["gpu_class"]
            # A node of `size` GPUs carries size / reference of a reference node's host, network and power overhead
            # (catalog/schema.py OwnedCosts.reference_node_gpus: 8 datacenter, 4 workstation and consumer).
            frac = int(size) / {"datacenter": 8, "workstation": 4, "consumer": 4}[cls]
            network = owned.get("network_usd_per_node_by_class", {}).get(cls, owned["network_usd_per_node"])
            overhead = owned.get("node_power_overhead_w_by_class", {}).get(cls, owned["node_power_overhead_w"])
            per_server = (
                int(size) * g["price"]["usd"]
                + owned["server_usd_per_node"][cls]["value"] * frac
                + network["value"] * frac
            )  # owned.yaml: host and network per node, on top of the GPUs
            capital += line["bought"] * per_server
            watts = int(size) * g["tdp_w"] + overhead["value"] * frac
            kwh_usd = owned["pue"]["value"] * owned["electricity_usd_per_kwh"]["value"]
            monthly += line["units"] * watts / 1000.0 * HOURS_PER_MONTH * kwh_usd  # kW x 730 h x PUE x $/kWh
            monthly += line["units"] * watts / 1000.0 * owned["colocation_usd_per_kw_month"]["value"]  # IT kW
            monthly += line["units"] * per_server * owned["support_fraction_per_year"]["value"] / 12.0
        else:
            offering, term = _instance_offering(line["offering"])
            inst = instances[offering]
            usd_per_hour = inst["on_demand_usd_per_hour"]
            if term == "spot":
                usd_per_hour = inst["spot_usd_per_hour"]
            elif term:  # a 1- or 3-year commitment (instances.yaml `commitments`), owed for whole terms
                (c,) = [c for c in inst["commitments"] if c["term_months"] == {"1y": 12, "3y": 36}[term]]
                usd_per_hour = c["usd_per_hour"]
                h = entry["costs"]["horizon_months"]
                unused += (
                    line["units"]
                    * usd_per_hour
                    * HOURS_PER_MONTH
                    * (c["term_months"] * math.ceil(h / c["term_months"]) - h)
                )
            if "billed_hours" in line:  # a training run, billed in whole hours
                one_off += line["units"] * usd_per_hour * line["billed_hours"]
            else:
                monthly += line["units"] * usd_per_hour * HOURS_PER_MONTH
    monthly += _operations_usd_per_month(entry, owned)
    for a in entry.get("autoscaler", {}).values():
        # a demand profile's burst: the replica-hours above the minimum in one period, at the burst offer's on-demand
        # rate (one instance per replica in the examples), x periods a month (730 h / 24 h or 168 h)
        hours = sum(n - a["min_replicas"] for n in a["replicas_by_hour"])
        if hours:
            rate = instances[_instance_offering(a["burst_offering"])[0]]["on_demand_usd_per_hour"]
            monthly += hours * rate * HOURS_PER_MONTH / len(a["replicas_by_hour"])
    horizon = entry["costs"]["horizon_months"]
    total = capital + horizon * monthly + one_off + unused
    tokens = _output_tokens_per_s(stem) * 3600.0 * HOURS_PER_MONTH * horizon
    return {
        "capital_usd": capital,
        "monthly_usd": monthly,
        "one_off_usd": one_off,
        "total_usd": total,
        "usd_per_million_output_tokens": total / tokens * 1e6 if tokens else None,
    }


@pytest.mark.parametrize("stem", [p.stem for p in EXAMPLES])
def test_golden_costs_are_the_catalog_arithmetic(stem: str) -> None:
    entry = json.loads(GOLDEN_FILE.read_text())[stem]
    assert entry["status"] in ("optimal", "feasible"), f"every shipped example has a design; {stem} has none"
    want = catalog_costs(stem, entry)
    got = entry["costs"]
    for key, value in want.items():
        if value is None:
            assert got[key] is None, key
        elif key == "usd_per_million_output_tokens":
            assert got[key] == pytest.approx(value, rel=PER_TOKEN_REL), (stem, key)
        else:
            assert got[key] == pytest.approx(value, abs=USD_ABS), (stem, key)


def test_horizons_are_the_requirements() -> None:
    golden = json.loads(GOLDEN_FILE.read_text())
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        assert golden[path.stem]["costs"]["horizon_months"] == doc["budget"]["horizon"], path.stem
