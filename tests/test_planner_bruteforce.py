"""A brute-force enumerator over the same candidate rows agrees with CP-SAT's optimum.

The enumerator is written from the semantics, not from the model: for every allowed shape it takes
the fewest replicas that meet every family, every split between cloud and owned, every way to buy
instances and servers up to what could be needed, packs the tensor-parallel groups into concrete
NVLink domains (first-fit decreasing), prices it in floating-point dollars and keeps the cheapest
design that meets the budgets, GPU cap and power cap. Hypothesis draws small random requirements,
including infeasible ones. ``bench/solve_bench.py`` imports :func:`brute_force` for its ratios.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterplan.candidates import (
    ALLOWED_GPUS,
    DEADLINE,
    DEPLOYMENT,
    TP_NVLINK,
    CandidateTable,
    GpuType,
    Limits,
    Offering,
    ServingRow,
    ServingTargets,
    TrainingRow,
    WorkloadCandidates,
)
from clusterplan.checker import Unit, check_design_on_table, pack
from clusterplan.planner import report
from clusterplan.planner.solve import Planner, SolverSettings, rank_designs
from clusterplan.planner.status import SolveStatus
from clusterplan.units import HOURS_PER_MONTH


@dataclass(frozen=True)
class BruteResult:
    feasible: bool
    total_usd: float = math.inf
    evaluated: int = 0


def _active(table: CandidateTable) -> set[str]:
    fams = {ALLOWED_GPUS} if table.limits.allowed_gpus is not None else set()
    fams |= {TP_NVLINK, DEADLINE}
    if table.limits.deployment != "either":
        fams.add(DEPLOYMENT)
    return fams


def _allowed(forbidden: tuple[tuple[str, str], ...], active: set[str]) -> bool:
    return not any(f in active for f, _ in forbidden)


def _min_replicas(row: ServingRow, wc: WorkloadCandidates) -> int | None:
    d = wc.demand_rps
    rho = row.rate_rps if wc.targets.any else row.rate_nolat_rps
    if row.rate_nolat_rps <= 0 or (wc.targets.any and row.rate_rps <= 0):
        return None
    x = max(1, math.ceil(d / row.rate_nolat_rps - 1e-12))
    if wc.targets.any:
        x = max(x, math.ceil(d / row.rate_rps - 1e-12))
    x = max(x, wc.redundancy + math.ceil(d / rho - 1e-12))
    return x


def _purchases(
    offers: list[Offering], need_gpus: int, inventory: bool
) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every (bought, from-inventory) vector up to what ``need_gpus`` could use."""
    ranges_m = [range(0, (math.ceil(need_gpus / o.gpus_per_unit) if o.purchasable else 0) + 1) for o in offers]
    ranges_u = [
        range(0, min(o.inventory_units, math.ceil(need_gpus / o.gpus_per_unit)) + 1) if inventory else range(1)
        for o in offers
    ]
    for m in itertools.product(*ranges_m):
        for u in itertools.product(*ranges_u):
            yield m, u


def brute_force(table: CandidateTable) -> BruteResult:
    """Cheapest design for tables with at most one serving workload (one shape) and one training one."""
    lim = table.limits
    active = _active(table)
    serving = [wc for wc in table.workloads if wc.is_serving]
    training = [wc for wc in table.workloads if not wc.is_serving]
    assert len(serving) <= 1 and len(training) <= 1 and not any(wc.allow_mixed for wc in serving)
    h = lim.horizon_months
    inventory_family = any(o.inventory_units for o in table.offerings)
    best = math.inf
    evaluated = 0

    s_choices: list[tuple[ServingRow | None, int]] = [(None, 0)]
    if serving:
        s_choices = []
        for row in serving[0].serving_rows():
            if _allowed(row.forbidden_by, active):
                x = _min_replicas(row, serving[0])
                if x is not None:
                    s_choices.append((row, x))
    t_choices: list[tuple[TrainingRow | None, str]] = [(None, "")]
    if training:
        t_choices = []
        wc = training[0]
        for trow in wc.training_rows():
            if not _allowed(trow.forbidden_by, active):
                continue
            if trow.cloud_offering is not None and _allowed(table.offering(trow.cloud_offering).forbidden_by, active):
                t_choices.append((trow, "cloud"))
            if any(_allowed(o.forbidden_by, active) for o in table.offerings_of(trow.gpu_id, "owned")):
                t_choices.append((trow, "owned"))
    for (srow, x), (trow, where) in itertools.product(s_choices, t_choices):
        splits = range(x + 1) if srow is not None else range(1)
        for xc in splits:
            xo = x - xc if srow is not None else 0
            one_off = 0.0
            train_cloud_gpus = 0
            if trow is not None and where == "cloud":
                o = table.offering(trow.cloud_offering)  # type: ignore[arg-type]
                if trow.tp > o.tp_domain and TP_NVLINK in active:
                    continue
                one_off = trow.cloud_cost_usd
                train_cloud_gpus = trow.cloud_instances * o.gpus_per_unit
            # Cloud serving pool: every instance mix that hosts xc replicas (kept as options: the
            # cheapest may break the GPU cap where a dearer one does not).
            cloud_options: list[tuple[float, int]] = [(0.0, 0)]
            if srow is not None and xc:
                offers = [o for o in table.offerings_of(srow.gpu_id, "cloud") if _allowed(o.forbidden_by, active)]
                items = [srow.tp] * (xc * srow.pp)
                need = xc * srow.gpus
                cloud_options = []
                for n in itertools.product(*[range(math.ceil(need / o.gpus_per_unit) + 1) for o in offers]):
                    units = [
                        Unit(o.gpus_per_unit, o.tp_domain) for o, k in zip(offers, n, strict=True) for _ in range(k)
                    ]
                    if pack(items, units):
                        cloud_options.append(
                            (
                                sum(k * o.usd_per_hour * HOURS_PER_MONTH for o, k in zip(offers, n, strict=True)),
                                sum(k * o.gpus_per_unit for o, k in zip(offers, n, strict=True)),
                            )
                        )
                if not cloud_options:
                    continue
            # Owned servers, per GPU type.
            owned_items: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
            if srow is not None and xo:
                owned_items[srow.gpu_id]["s"] += [srow.tp] * (xo * srow.pp)
            if trow is not None and where == "owned":
                owned_items[trow.gpu_id]["t"] += [trow.tp] * (trow.pp * trow.dp)
            options: list[list[tuple[float, float, float, int, float]]] = []
            ok = True
            for gid, by_w in sorted(owned_items.items()):
                offers = [o for o in table.offerings_of(gid, "owned") if _allowed(o.forbidden_by, active)]
                need = (
                    max(sum(v) for v in by_w.values())
                    if lim.schedule == "sequential"
                    else sum(sum(v) for v in by_w.values())
                )
                opts = []
                for m, u in _purchases(offers, need, inventory_family):
                    units = [
                        Unit(o.gpus_per_unit, o.tp_domain)
                        for o, k in zip(offers, [a + b for a, b in zip(m, u, strict=True)], strict=True)
                        for _ in range(k)
                    ]
                    groups = (
                        list(by_w.values()) if lim.schedule == "sequential" else [[i for v in by_w.values() for i in v]]
                    )
                    if all(pack(g, units) for g in groups):
                        capital = sum(k * o.capital_usd for o, k in zip(offers, m, strict=True))
                        energy = sum((a + b) * o.energy_usd_per_month for o, a, b in zip(offers, m, u, strict=True))
                        gpus = sum((a + b) * o.gpus_per_unit for o, a, b in zip(offers, m, u, strict=True))
                        power = sum((a + b) * o.power_w for o, a, b in zip(offers, m, u, strict=True))
                        opts.append((capital, energy, power, gpus, capital + energy * h))
                if not opts:
                    ok = False
                    break
                options.append(opts)
            if not ok:
                continue
            for (cloud_month, cloud_gpus), combo in itertools.product(cloud_options, itertools.product(*options)):
                evaluated += 1
                capital = sum(c[0] for c in combo)
                monthly = cloud_month + sum(c[1] for c in combo)
                power = sum(c[2] for c in combo)
                owned_gpus = sum(c[3] for c in combo)
                total = capital + monthly * h + one_off
                gpus = owned_gpus + (
                    max(cloud_gpus, train_cloud_gpus) if lim.schedule == "sequential" else cloud_gpus + train_cloud_gpus
                )
                if lim.budget_capital_usd is not None and capital > lim.budget_capital_usd:
                    continue
                if lim.budget_monthly_usd is not None and monthly > lim.budget_monthly_usd:
                    continue
                if lim.budget_total_usd is not None and total > lim.budget_total_usd:
                    continue
                if lim.max_gpus is not None and gpus > lim.max_gpus:
                    continue
                if lim.max_power_w is not None and power > lim.max_power_w:
                    continue
                best = min(best, total)
    return BruteResult(feasible=best < math.inf, total_usd=best, evaluated=evaluated)


# ------------------------------------------------------------------------------------------------
# Random small requirements
# ------------------------------------------------------------------------------------------------

GPUS = {
    "big": GpuType(id="big", name="Big", tdp_w=700, nvlink_domain=8, price_usd=25000),
    "mid": GpuType(id="mid", name="Mid", tdp_w=400, nvlink_domain=2, price_usd=9000),
    "pci": GpuType(id="pci", name="Pci", tdp_w=300, nvlink_domain=1, price_usd=4000),
}


@st.composite
def tables(draw: st.DrawFn) -> CandidateTable:
    gids = draw(st.lists(st.sampled_from(sorted(GPUS)), min_size=1, max_size=3, unique=True))
    deployment = draw(st.sampled_from(["either", "cloud", "owned"]))
    schedule = draw(st.sampled_from(["concurrent", "sequential"]))
    offerings: list[Offering] = []
    inventory: dict[str, int] = {}
    for gid in gids:
        g = GPUS[gid]
        for k in draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=0, max_size=2, unique=True)):
            price = draw(st.integers(1, 40)) / 2.0
            offerings.append(
                Offering(
                    key=f"cloud:{gid}:{k}",
                    kind="cloud",
                    gpu_id=gid,
                    gpus_per_unit=k,
                    tp_domain=min(k, g.nvlink_domain),
                    usd_per_hour=price * k,
                    provider="t",
                    instance_id=f"{gid}.{k}",
                    forbidden_by=((DEPLOYMENT, "owned only"),) if deployment == "owned" else (),
                )
            )
        inv = draw(st.sampled_from([0, 0, 4, 8]))
        if inv:
            inventory[gid] = inv
        for s in draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=0, max_size=2, unique=True)):
            power = s * g.tdp_w + 200 * s
            offerings.append(
                Offering(
                    key=f"owned:{gid}:{s}",
                    kind="owned",
                    gpu_id=gid,
                    gpus_per_unit=s,
                    tp_domain=min(s, g.nvlink_domain),
                    capital_usd=float(draw(st.integers(1, 30)) * 1000 * s),
                    power_w=float(power),
                    energy_usd_per_month=power / 1000 * 0.15 * HOURS_PER_MONTH,
                    inventory_units=inv // s if s == max(1, min(8, inv)) else 0,
                    forbidden_by=((DEPLOYMENT, "cloud only"),) if deployment == "cloud" else (),
                )
            )
    allowed = frozenset(draw(st.lists(st.sampled_from(gids), min_size=1, unique=True))) if draw(st.booleans()) else None
    workloads: list[WorkloadCandidates] = []
    if draw(st.booleans()) or True:
        rows = []
        for gid in gids:
            g = GPUS[gid]
            for tp in draw(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=2, unique=True)):
                nolat = draw(st.integers(1, 12)) / 2.0
                rate = draw(st.integers(0, int(nolat * 2))) / 2.0
                fb: list[tuple[str, str]] = []
                if tp > g.nvlink_domain:
                    fb.append((TP_NVLINK, "needs NVLink"))
                if allowed is not None and gid not in allowed:
                    fb.append((ALLOWED_GPUS, "not allowed"))
                rows.append(
                    ServingRow(
                        gpu_id=gid,
                        tp=tp,
                        pp=draw(st.sampled_from([1, 1, 2])),
                        quant="bf16",
                        batch=16,
                        rate_rps=rate,
                        rate_nolat_rps=nolat,
                        forbidden_by=tuple(fb),
                    )
                )
        demand = draw(st.integers(1, 16)) / 2.0
        targets = draw(st.booleans())
        workloads.append(
            WorkloadCandidates(
                index=0,
                name="serve",
                kind="serving",
                rows=tuple(rows),
                demand_rps=demand,
                average_rps=demand,
                output_tokens=100,
                targets=ServingTargets(p95_latency_s=5.0) if targets else ServingTargets(),
                redundancy=draw(st.sampled_from([0, 0, 1])),
                allow_mixed=False,
            )
        )
    if draw(st.booleans()):
        rows_t = []
        deadline = 10 * 86400.0
        for gid in gids:
            g = GPUS[gid]
            for tp, dp in draw(
                st.lists(st.sampled_from([(1, 2), (2, 2), (1, 4), (4, 1)]), min_size=1, max_size=2, unique=True)
            ):
                days = draw(st.integers(2, 16))
                fb = []
                if tp > g.nvlink_domain:
                    fb.append((TP_NVLINK, "needs NVLink"))
                if allowed is not None and gid not in allowed:
                    fb.append((ALLOWED_GPUS, "not allowed"))
                if days * 86400 > deadline:
                    fb.append((DEADLINE, "too slow"))
                clouds = [o for o in offerings if o.kind == "cloud" and o.gpu_id == gid and o.tp_domain >= tp]
                cheapest = min(
                    clouds, key=lambda o: (math.ceil(tp * dp / o.gpus_per_unit) * o.usd_per_hour, o.key), default=None
                )
                inst = math.ceil(tp * dp / cheapest.gpus_per_unit) if cheapest else 0
                rows_t.append(
                    TrainingRow(
                        gpu_id=gid,
                        tp=tp,
                        pp=1,
                        dp=dp,
                        zero_stage=1,
                        recompute="none",
                        micro_batch=1,
                        time_to_train_s=days * 86400.0,
                        forbidden_by=tuple(fb),
                        cloud_offering=cheapest.key if cheapest else None,
                        cloud_instances=inst,
                        cloud_cost_usd=inst * cheapest.usd_per_hour * days * 24 if cheapest else 0.0,
                    )
                )
        workloads.append(
            WorkloadCandidates(
                index=len(workloads), name="train", kind="training", rows=tuple(rows_t), deadline_s=deadline
            )
        )
    budget = draw(st.sampled_from([None, None, 5e3, 5e4, 5e5]))
    limits = Limits(
        horizon_months=draw(st.sampled_from([1, 12, 36])),
        budget_total_usd=budget,
        budget_capital_usd=draw(st.sampled_from([None, None, 2e4])),
        max_gpus=draw(st.sampled_from([None, None, 6, 16])),
        max_power_w=draw(st.sampled_from([None, None, 3000.0])),
        deployment=deployment,
        schedule=schedule,
        allowed_gpus=allowed,
        inventory=tuple(sorted(inventory.items())),
    )
    return CandidateTable(
        workloads=tuple(workloads),
        gpus={g: GPUS[g] for g in gids},
        offerings=tuple(offerings),
        limits=limits,
        name="random",
    )


def _model_optimum(table: CandidateTable, relaxation: str = "auto") -> tuple[SolveStatus, float | None, list[str]]:
    if any(not wc.rows for wc in table.workloads):
        return SolveStatus.INFEASIBLE, None, []
    p = Planner(table, settings=SolverSettings(relaxation=relaxation))
    r = rank_designs(p, top=1)
    if not r.designs:
        return r.status, None, []
    sol = r.designs[0].solution
    assert sol is not None
    design = report.design(table, sol, rank=1, checks=[])
    return r.status, design.costs.total_usd, check_design_on_table(design, table)


def _agrees(table: CandidateTable, relaxation: str) -> None:
    status, total, problems = _model_optimum(table, relaxation)
    brute = brute_force(table)
    assert status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE)
    assert (status is SolveStatus.OPTIMAL) == brute.feasible, (status, brute)
    if brute.feasible:
        assert total is not None
        # The model prices in whole cents rounded up per unit; the enumerator in float dollars.
        assert abs(total - brute.total_usd) <= 0.02 * (1 + len(table.offerings)) + 1e-6 * brute.total_usd, (
            total,
            brute.total_usd,
        )
        assert problems == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(tables())
def test_cp_sat_agrees_with_brute_force(table: CandidateTable) -> None:
    _agrees(table, "auto")  # these models are small: CP-SAT alone


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(tables())
def test_lp_reduced_cost_fixing_keeps_the_optimum(table: CandidateTable) -> None:
    """Large models go through the LP, an incumbent and reduced-cost fixing (planner.relaxation);
    forced on here, every solve of the ranking must still reach the brute-force optimum."""
    _agrees(table, "on")
