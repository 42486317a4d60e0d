"""Demand that varies: a serving workload's daily or weekly profile sizes a base that runs every hour and burst
replicas rented by the hour (planner/families/demand_profile.py, priced by evaluation/pricing.py); the plan states
the autoscaler's min and max, and the exports carry them."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterplan.candidates.table import CandidateTable, Offering
from clusterplan.design.check import check_design_on_table, check_plan
from clusterplan.design.export_targets import CloudTask
from clusterplan.evaluation import pricing
from clusterplan.pipeline import PlanOptions, plan_table
from clusterplan.plan import Design, ServingPlan
from clusterplan.planner.families import demand_profile
from clusterplan.units import HOURS_PER_MONTH
from clusterplan.wording import fmt
from conftest import EXAMPLES_DIR, cloud, run_cli, serving, shared_plan, srow, table, write_doc

PROFILE_EXAMPLE = EXAMPLES_DIR / "8b-daily-profile.yaml"
# Three levels over a day, 8 hours each: 1, 2 and 4 replicas of 10 req/s.
LEVELS = [10.0] * 8 + [20.0] * 8 + [40.0] * 8
ON_DEMAND_USD_PER_HOUR = 1.0


def _committed(price: float) -> Offering:
    """A 3-year commitment on the same GPU (cloud:a:1 on demand at $1/h beside it)."""
    return replace(cloud("a", 1, price), key="cloud:a:1:3y", term="3y", term_months=36)


def _table(profile: list[float], *offerings: Offering, k: int = 0) -> CandidateTable:
    w = serving([srow("a", 1, rate=10.0)], demand=max(profile), k=k)
    w = replace(w, profile_rps=tuple(profile), average_rps=sum(profile) / len(profile))
    return table([w], [cloud("a", 1, ON_DEMAND_USD_PER_HOUR), *offerings], horizon_months=36.0)


def _brute_force(profile: list[float], base_usd_per_hour: float, *, k: int = 0) -> tuple[int, float]:
    """(base, monthly USD) of the cheapest split, every base from one replica to the peak's tried in turn: a base
    replica costs its $/h x 730 h, a burst replica-hour $1 x 730 / 24 a day (written from the semantics)."""
    need = [k + -(-int(d) // 10) for d in profile]
    best: tuple[float, int] | None = None
    for base in range(1, max(need) + 1):
        burst_hours = sum(max(0, n - base) for n in need)
        usd = base * base_usd_per_hour * HOURS_PER_MONTH + burst_hours * ON_DEMAND_USD_PER_HOUR * HOURS_PER_MONTH / 24
        if best is None or usd < best[0] - 1e-9:
            best = (usd, base)
    assert best is not None
    return best[1], best[0]


def _design(t: CandidateTable) -> Design:
    plan = plan_table(t, PlanOptions(top=1, explain=False))
    assert plan.designs, plan.status
    return plan.designs[0]


def _serving(d: Design) -> ServingPlan:
    w = d.workloads[0]
    assert isinstance(w, ServingPlan)
    return w


# ------------------------------------------------------------------------------------------------ the formulas


def test_replicas_needed_is_the_hours_demand_over_the_rate_plus_spares_and_never_zero() -> None:
    assert pricing.replicas_needed(40.0, 10.0, 0) == 4
    assert pricing.replicas_needed(40.000000001, 10.0, 0) == 4  # float noise over a whole number
    assert pricing.replicas_needed(41.0, 10.0, 1) == 6
    assert pricing.replicas_needed(0.0, 10.0, 0) == 1  # an autoscaler keeps one replica up


def test_burst_month_is_a_periods_replica_hours_times_periods_a_month() -> None:
    assert pricing.burst_usd_per_month(24, 2.0, 24) == pytest.approx(2.0 * HOURS_PER_MONTH)  # one replica all day
    assert pricing.burst_usd_per_month(168, 1.0, 168) == pytest.approx(HOURS_PER_MONTH)  # all week


# ------------------------------------------------------------------------------------------------ the model


def test_on_demand_only_the_base_is_what_every_hour_needs_and_the_rest_is_burst() -> None:
    """With the base and the burst at the same hourly rate, a replica not needed all day is cheaper rented by the hour:
    min 1, max 4, and the month is 1 x 730 h + 8 x 1 + 8 x 3 = 32 burst replica-hours a day."""
    d = _design(_table(LEVELS))
    a = _serving(d).autoscaler
    assert a is not None
    assert (a.min_replicas, a.max_replicas) == (1, 4)
    assert a.replicas_by_hour == [1] * 8 + [2] * 8 + [4] * 8
    assert a.burst_replica_hours_per_period == 32
    assert _serving(d).groups[0].burst_replicas == 3
    assert d.costs.burst_usd_per_month == pytest.approx(32 * HOURS_PER_MONTH / 24)
    assert d.costs.monthly_usd == pytest.approx(HOURS_PER_MONTH + 32 * HOURS_PER_MONTH / 24)
    assert check_design_on_table(d, _table(LEVELS)) == []
    # the model itself charged those replica-hours (its integer cents, not only the design priced afterwards)
    from clusterplan.planner.ranking import rank_designs
    from clusterplan.planner.solve import Planner

    sol = rank_designs(Planner(_table(LEVELS)), top=1).designs[0].solution
    assert sol is not None
    # (each replica-hour's month is rounded up to the cent in the model: up to a cent per replica-hour)
    assert sol.monthly_cents == pytest.approx(d.costs.monthly_usd * 100, abs=a.burst_replica_hours_per_period + 2)


@pytest.mark.parametrize("commit_usd", [0.3, 0.5, 0.7, 0.9])
def test_the_split_between_a_committed_base_and_on_demand_burst_is_the_cheapest(commit_usd: float) -> None:
    """CP-SAT's base (3-year commitment) and burst (on demand) equal a brute force over every base: the cheaper the
    commitment, the more replicas run every hour (0.3: all 4; 0.5: 2; 0.9: 1)."""
    t = _table(LEVELS, _committed(commit_usd))
    d = _design(t)
    base, usd = _brute_force(LEVELS, commit_usd)
    a = _serving(d).autoscaler
    assert a is not None
    assert a.min_replicas == base and a.max_replicas == 4
    assert d.costs.monthly_usd == pytest.approx(usd, abs=0.01)
    assert demand_profile.FAMILY.check(_facts(t, d))


def test_redundancy_spares_run_every_hour_of_the_profile() -> None:
    t = _table(LEVELS, k=1)
    d = _design(t)
    a = _serving(d).autoscaler
    assert a is not None
    assert a.replicas_by_hour == [2] * 8 + [3] * 8 + [5] * 8  # each hour's need plus the N+1 spare


def test_a_flat_requirement_runs_every_replica_every_hour() -> None:
    """Without a profile nothing is burst and no autoscaler is stated (the JSON carries neither key)."""
    w = serving([srow("a", 1, rate=10.0)], demand=40.0)
    d = _design(table([w], [cloud("a", 1, 1.0)], horizon_months=36.0))
    assert _serving(d).autoscaler is None and _serving(d).groups[0].burst_replicas == 0
    assert d.costs.monthly_usd == pytest.approx(4 * HOURS_PER_MONTH)
    text = d.model_dump_json()
    assert "autoscaler" not in text and "burst" not in text


def _facts(t: CandidateTable, d: Design) -> Any:
    """The design's facts as the family reads them (its one group's counts)."""
    from clusterplan.explain.designs import facts
    from clusterplan.planner.solve import ServingAssignment, Solution

    g = _serving(d).groups[0]
    sol = Solution(
        serving=(ServingAssignment(0, 0, g.cloud_replicas, g.owned_replicas, g.burst_replicas),),
        training=(),
        instances=tuple((x.offering, x.units) for x in d.hardware),
        bought=(),
        from_inventory=(),
        total_cents=0,
        capital_cents=0,
        monthly_cents=0,
        one_off_cents=0,
        gpus_in_use=d.gpus_total,
        signature_on=frozenset(),
    )
    return facts(t, sol)


def test_the_family_check_refuses_a_burst_that_leaves_an_hour_short() -> None:
    t = _table(LEVELS)
    d = _design(t)
    g = _serving(d).groups[0]
    short = d.model_copy(
        update={
            "workloads": [
                _serving(d).model_copy(
                    update={"groups": [g.model_copy(update={"burst_replicas": 2, "replicas": g.replicas - 1})]}
                )
            ]
        }
    )
    assert demand_profile.FAMILY.check(_facts(t, d))
    assert not demand_profile.FAMILY.check(_facts(t, short))


# ------------------------------------------------------------------------------------------------ the requirement


def _doc(**profile: Any) -> dict[str, Any]:
    w: dict[str, Any] = {
        "kind": "serving",
        "name": "chat",
        "profile": {"kind": "daily", "requests_per_s_by_hour": [1.0] * 24} | profile,
        "input_tokens": 500,
        "output_tokens": 200,
    }
    return {"name": "profile", "model": "llama-3.1-8b", "workloads": [w], "deployment": "cloud"}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"requests_per_s_by_hour": [1.0] * 23}, "a daily profile lists 24 hourly rates"),
        ({"kind": "weekly"}, "a weekly profile lists 168 hourly rates"),
        ({"requests_per_s_by_hour": [1.0] * 23 + [-1.0]}, "greater than or equal to 0"),
        ({"requests_per_s_by_hour": [0.0] * 24}, "every hourly rate is 0"),
        ({"kind": "monthly"}, "daily"),
        ({"peak": 3}, "peak"),
    ],
)
def test_a_broken_profile_is_refused_located(tmp_path: Path, change: dict[str, Any], said: str) -> None:
    result = run_cli("validate", str(write_doc(tmp_path, _doc(**change))))
    assert result.exit_code == 2, result.output
    assert said in result.output and "profile" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("field", ["requests_per_min", "tokens_per_sec", "peak_to_average"])
def test_a_profile_beside_the_flat_demand_fields_is_a_conflict(tmp_path: Path, field: str) -> None:
    doc = _doc()
    doc["workloads"][0][field] = 2
    result = run_cli("validate", str(write_doc(tmp_path, doc)))
    assert result.exit_code == 2, result.output
    assert f"give either profile or {field}" in result.output


def test_a_profile_states_the_average_and_the_peak_every_command_reads() -> None:
    from clusterplan.requirement.schema import ServingWorkload

    rates = [2.0] * 12 + [6.0] * 12
    w = ServingWorkload.model_validate(
        {"kind": "serving", "profile": {"kind": "daily", "requests_per_s_by_hour": rates}}
    )
    assert w.requests_per_s == pytest.approx(4.0)
    assert w.requests_per_s * w.peak_to_average == pytest.approx(6.0)


# ------------------------------------------------------------------------------------------------ the example


@pytest.mark.slow
def test_the_example_plans_a_base_and_a_burst_cheaper_than_its_peak_all_day(tmp_path: Path, catalog: Any) -> None:
    """The shipped daily profile against the same service sized flat at its peak (96 req/s all day)."""
    d = shared_plan(PROFILE_EXAMPLE, catalog).designs[0]
    a = _serving(d).autoscaler
    assert a is not None and a.min_replicas < a.max_replicas
    flat = yaml.safe_load(PROFILE_EXAMPLE.read_text())
    w = flat["workloads"][0]
    w["requests_per_min"] = max(w.pop("profile")["requests_per_s_by_hour"]) * 60
    out = run_cli("solve", str(write_doc(tmp_path, flat)), "--json", "--top", "1")
    assert out.exit_code == 0, out.output
    flat_design = json.loads(out.stdout)["designs"][0]
    assert sum(g["replicas"] for g in flat_design["workloads"][0]["groups"]) == a.max_replicas
    assert d.costs.total_usd < flat_design["costs"]["total_usd"]


@pytest.mark.slow
def test_the_checker_holds_each_hour_to_its_demand(catalog: Any) -> None:
    from clusterplan.requirement.load import load_requirement

    resolved = load_requirement(PROFILE_EXAMPLE, catalog)
    d = shared_plan(PROFILE_EXAMPLE, catalog).designs[0]
    assert check_plan(d, resolved, catalog) == []
    w = _serving(d)
    assert w.autoscaler is not None
    hours = list(w.autoscaler.replicas_by_hour)
    peak_hour = hours.index(max(hours))
    hours[peak_hour] -= 1
    broken = d.model_copy(
        update={
            "workloads": [
                w.model_copy(update={"autoscaler": w.autoscaler.model_copy(update={"replicas_by_hour": hours})})
            ]
        }
    )
    problems = check_plan(broken, resolved, catalog)
    assert any(f"hour {peak_hour} runs" in p for p in problems), problems


@pytest.mark.slow
def test_the_kubernetes_autoscaler_spans_the_profiles_base_and_peak(tmp_path: Path, catalog: Any) -> None:
    d = shared_plan(PROFILE_EXAMPLE, catalog).designs[0]
    a = _serving(d).autoscaler
    assert a is not None
    result = run_cli("export", str(PROFILE_EXAMPLE), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all((tmp_path / "out" / "serving-k8s.yaml").read_text()))
    hpa = next(x for x in docs if x["kind"] == "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (a.min_replicas, a.max_replicas)


@pytest.mark.slow
def test_a_skypilot_burst_is_a_service_between_the_autoscalers_bounds(catalog: Any) -> None:
    """A cloud burst is a SkyServe service: replica_policy min/max and the rate per replica, every field in
    launchers.yaml's list."""
    from clusterplan.catalog.launchers import load_launchers
    from clusterplan.render.skypilot_view import task

    launch = _launch(catalog)
    t = CloudTask(
        name="chat-burst", provider="lambda", cloud="lambda", region=None, gpu="h100-sxm", accelerator="H100",
        gpus_per_node=1, num_nodes=1, copies=1, serving=launch, min_replicas=0, max_replicas=3,
        target_qps_per_replica=4.25,
    )  # fmt: skip
    out = task(t)
    assert out["service"]["replica_policy"] == {"min_replicas": 0, "max_replicas": 3, "target_qps_per_replica": 4.25}
    sky = set(load_launchers()["skypilot"].arguments)
    assert set(out) <= sky
    assert {f"resources.{k}" for k in out["resources"]} <= sky
    assert {f"service.{k}" for k in out["service"]} <= sky
    assert {f"service.replica_policy.{k}" for k in out["service"]["replica_policy"]} <= sky


def _launch(catalog: Any) -> Any:
    """The serving launch of the 7B example's design 1 (any serving launch will do)."""
    from clusterplan.design.export import export_design
    from clusterplan.requirement.load import load_requirement

    path = EXAMPLES_DIR / "7b-chat-serving.yaml"
    return export_design(load_requirement(path, catalog), catalog, shared_plan(path, catalog))[0]


# ------------------------------------------------------------------------------------------------ a trace


def _trace(folder: Path, rates: list[float], days: int = 2, name: str = "trace.csv") -> Path:
    """``rates`` req/s hour by hour for ``days`` days, each hour's requests evenly spaced inside it."""
    lines = ["arrival_s,input_tokens,output_tokens"]
    for day in range(days):
        for h, r in enumerate(rates):
            n = round(r * 3600)
            lines += [f"{(day * 24 + h) * 3600 + (i + 0.5) * 3600 / n:.3f},800,250" for i in range(n)]
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_trace_is_read_into_the_hourly_profile_it_replays(tmp_path: Path, catalog: Any) -> None:
    from clusterplan.requirement.load import load_requirement

    rates = [0.05] * 8 + [0.1] * 8 + [0.2] * 8
    _trace(tmp_path, rates)
    doc = _doc()
    doc["workloads"][0]["profile"] = {"kind": "daily", "trace": "trace.csv"}  # relative to the requirement
    w = load_requirement(write_doc(tmp_path, doc), catalog).requirement.workloads[0]
    assert w.kind == "serving" and w.profile is not None
    assert w.profile.requests_per_s_by_hour == pytest.approx(rates)
    assert w.requests_per_s == pytest.approx(sum(rates) / 24)


def test_a_trace_shorter_than_the_period_is_refused_with_its_file(tmp_path: Path) -> None:
    _trace(tmp_path, [0.05] * 5, days=1, name="short.csv")
    doc = _doc()
    doc["workloads"][0]["profile"] = {"kind": "daily", "trace": "short.csv"}
    result = run_cli("validate", str(write_doc(tmp_path, doc)))
    assert result.exit_code == 2, result.output
    assert "short.csv" in result.output and "covers 5 hour(s) of a 24-hour period" in result.output


def test_rates_and_a_trace_together_are_a_conflict(tmp_path: Path) -> None:
    doc = _doc(trace="trace.csv")
    result = run_cli("validate", str(write_doc(tmp_path, doc)))
    assert result.exit_code == 2, result.output
    assert "give either requests_per_s_by_hour or trace" in result.output


def test_a_sweep_of_demand_over_a_profile_is_refused_saying_why() -> None:
    result = run_cli("sweep", str(PROFILE_EXAMPLE), "--vary", "demand=0.5..2", "--steps", "2")
    assert result.exit_code == 2, result.output
    assert "gives a demand profile" in result.output


def test_an_owned_base_bursts_to_the_cloud() -> None:
    """Owned servers hold the base; the cloud rents the burst by the hour. An owned 1-GPU server at $9,000 and 1 kW
    ($73 a month of energy) is $323 a month over 36 months: worth holding for a replica needed 16 hours a day ($487 of
    burst), not for one needed 8 ($243), so the base is 2 of the 4 at peak (and a brute force over every base agrees)."""
    from conftest import owned

    t = _table(LEVELS, owned("a", 1, 9000.0))
    d = _design(t)
    per_month = 9000.0 / 36 + 73.0
    base, usd = _brute_force(LEVELS, per_month / HOURS_PER_MONTH)
    a = _serving(d).autoscaler
    assert a is not None and a.burst_offering == "cloud:a:1"
    assert (a.min_replicas, a.max_replicas) == (base, 4) and base == 2
    g = _serving(d).groups[0]
    assert (g.owned_replicas, g.cloud_replicas, g.burst_replicas) == (2, 0, 2)
    assert d.costs.monthly_usd == pytest.approx(usd - 2 * 9000.0 / 36, abs=0.01)  # capital is not monthly


@pytest.mark.slow
def test_the_report_of_a_profile_has_no_demand_sweep_and_states_the_fleet_over_the_day(tmp_path: Path) -> None:
    """The review's what-if axis would scale one demand figure; a profile has 24, so it sweeps nothing (the report ran
    the sweep and failed on the refusal before)."""
    out = tmp_path / "review.md"
    result = run_cli("report", str(PROFILE_EXAMPLE), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "1 replicas every hour, 3 at the peak hour" in out.read_text(encoding="utf-8")


@pytest.mark.slow
def test_estimate_of_the_design_prices_its_burst_as_solve_does(tmp_path: Path) -> None:
    """estimate --design pins the base and the burst replicas: on the example it priced the held replica alone
    ($143,881) and then refused the design; now it prints solve's total ($191,524.65, shown $191,525) and autoscaler
    (tests/test_one_path.py holds every figure to the cent)."""
    plan = tmp_path / "plan.json"
    solved = run_cli("solve", str(PROFILE_EXAMPLE), "--json", "--top", "1")
    assert solved.exit_code == 0
    plan.write_text(solved.stdout, encoding="utf-8")
    design = Design.model_validate(json.loads(solved.stdout)["designs"][0])
    w = _serving(design)
    assert w.autoscaler is not None and w.groups[0].burst_replicas == 2
    result = run_cli("estimate", str(PROFILE_EXAMPLE), "--design", str(plan))
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "tp 1 x pp 1 x replicas 1 + 2 burst" in text
    assert f"total over 36 months {fmt.usd_exact(design.costs.total_usd)}" in text
    line = fmt.autoscaler_line(w)
    assert line is not None and " ".join(line.split()) in text


@pytest.mark.slow
def test_compare_prices_a_profile_design_as_solve_with_its_burst(catalog: Any) -> None:
    """compare's row for design 1's GPU is solve's design (narrowed to that GPU): its total to the cent, the burst
    replicas' month inside it."""
    d = shared_plan(PROFILE_EXAMPLE, catalog).designs[0]
    a = _serving(d).autoscaler
    gpu = _serving(d).groups[0].gpu
    assert a is not None and a.burst_usd_per_month > 0
    result = run_cli("compare", str(PROFILE_EXAMPLE), "--gpus", gpu, "--json")
    assert result.exit_code == 0, result.output
    cloud = next(r for r in json.loads(result.stdout)["rows"] if r["gpu_id"] == gpu)["cloud"]["costs"]
    assert cloud["total_usd"] == pytest.approx(d.costs.total_usd, abs=0.005)
    assert cloud["burst_usd_per_month"] == pytest.approx(a.burst_usd_per_month, abs=0.005)


@pytest.mark.slow
def test_the_reports_rent_row_of_a_profile_design_is_solves_total(catalog: Any) -> None:
    """The review's rent-versus-buy row estimates each group pinned: the base rented all month, the burst by the
    hour (it priced all 3 replicas all month: $264.2k against solve's $191.5k)."""
    from clusterplan.requirement.load import load_requirement
    from clusterplan.review.sections import design_estimates, rent_buy_rows

    d = shared_plan(PROFILE_EXAMPLE, catalog).designs[0]
    assert _serving(d).groups[0].burst_replicas > 0
    resolved = load_requirement(PROFILE_EXAMPLE, catalog)
    rows = rent_buy_rows(design_estimates(resolved, catalog, d), d, d.costs.horizon_months)
    assert len(rows) == 1 and rows[0].rent_total_usd == pytest.approx(d.costs.total_usd, abs=0.005)


BURST_PIN = ["--gpu", "gh200", "--quant", "fp8", "--batch", "1024", "--deployment", "cloud"]


def test_burst_flags_pin_the_design_and_count_holds_the_burst() -> None:
    """--dp 1 --burst 2 is design 1; --count counts every replica at the peak hour, so --count 3 --burst 2 is too."""
    by_dp = run_cli("estimate", str(PROFILE_EXAMPLE), *BURST_PIN, "--dp", "1", "--burst", "2", "--json")
    by_count = run_cli("estimate", str(PROFILE_EXAMPLE), *BURST_PIN, "--count", "3", "--burst", "2", "--json")
    assert by_dp.exit_code == 0 and by_count.exit_code == 0, by_dp.output + by_count.output
    a, b = json.loads(by_dp.stdout), json.loads(by_count.stdout)
    assert (a["config"]["dp"], a["config"]["burst"], a["config"]["count"]) == (1, 2, 3)
    assert a["autoscaler"]["replicas_by_hour"] == b["autoscaler"]["replicas_by_hour"]
    assert a["cloud"]["costs"]["total_usd"] == b["cloud"]["costs"]["total_usd"]
    assert a["cloud"]["costs"]["burst_usd_per_month"] > 0
    assert a["load"]["per_replica_requests_per_s"] == pytest.approx(96.0 / 3)  # the peak hour over all 3 running


def test_a_base_split_over_owned_and_cloud_is_one_fleet(catalog: Any) -> None:
    """A shape's owned and cloud replicas are one base (the planner's row): 1 owned + 1 cloud + 1 burst scales as
    2 every hour + 1 burst, each hour max(2, min(3, ceil(demand / rate))), the burst priced at its replica-hours."""
    from clusterplan.design.estimate_design import estimate_design
    from clusterplan.requirement.load import load_requirement
    from clusterplan.requirement.schema import PinnedConfig

    resolved = load_requirement(PROFILE_EXAMPLE, catalog)
    req, models = resolved.requirement, list(resolved.models)
    shape = {"gpu": "h100-sxm", "tp": 1, "pp": 1, "quant": "fp8", "kv_quant": "fp8"}
    split = [
        PinnedConfig.model_validate({**shape, "dp": 1, "deployment": "owned"}),
        PinnedConfig.model_validate({**shape, "dp": 1, "deployment": "cloud", "burst": 1}),
    ]
    est = estimate_design(req, models, catalog, split, "test")
    assert est.feasible and [p.config.share < 1 for p in est.parts] == [True, True]
    a = est.autoscaler
    assert a is not None and (a.min_replicas, a.max_replicas) == (2, 3)
    rate = est.parts[0].load.max_rate_for_targets_per_replica  # type: ignore[union-attr]
    profile = req.workloads[0].profile.requests_per_s_by_hour  # type: ignore[union-attr]
    assert a.replicas_by_hour == [max(2, min(3, math.ceil(d / rate - 1e-9))) for d in profile]
    hours = sum(n - 2 for n in a.replicas_by_hour)
    assert hours > 0 and est.costs is not None
    assert est.costs.burst_usd_per_month == pytest.approx(hours * a.burst_usd_per_replica_hour * HOURS_PER_MONTH / 24)
    alone_pin = PinnedConfig.model_validate({**shape, "dp": 2, "burst": 1, "deployment": "cloud"})
    alone = estimate_design(req, models, catalog, [alone_pin], "alone")
    assert alone.autoscaler == a


def test_a_pool_with_burst_is_refused(catalog: Any) -> None:
    """Pools run every hour (the planner rents burst replicas for aggregated ones only): a pinned pool's burst is
    refused, not priced."""
    from clusterplan.design.estimate import estimate_requirement
    from clusterplan.errors import ClusterplanError
    from clusterplan.requirement.load import load_requirement
    from clusterplan.requirement.schema import PinnedConfig

    resolved = load_requirement(PROFILE_EXAMPLE, catalog)
    pin = PinnedConfig(gpu="gh200", role="prefill", dp=1, burst=1)
    with pytest.raises(ClusterplanError, match="a prefill pool runs every hour"):
        estimate_requirement(resolved.requirement, list(resolved.models), catalog, pin)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--count", "2", "--burst", "2"], "leaves no replica running every hour beside --burst 2"),
        (["--prefill-count", "1", "--decode-count", "1", "--burst", "1"], "sizes aggregated replicas, not a pool"),
    ],
    ids=["count-below-burst", "pools"],
)
def test_burst_the_pin_cannot_hold_is_refused_located(args: list[str], says: str) -> None:
    result = run_cli("estimate", str(PROFILE_EXAMPLE), *BURST_PIN, *args)
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())


def test_burst_without_a_profile_is_refused() -> None:
    result = run_cli("estimate", str(EXAMPLES_DIR / "7b-chat-serving.yaml"), "--gpu", "h100-sxm", "--burst", "1")
    assert result.exit_code == 2, result.output
    assert "has no demand profile, so every replica runs every hour" in " ".join(result.output.split())
