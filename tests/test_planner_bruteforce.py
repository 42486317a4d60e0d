"""A brute-force enumerator over the same candidate rows agrees with CP-SAT's optimum.

The enumerator is written from the semantics, not from the model: for every shape it takes the
fewest replicas that meet every family, every split between cloud and owned, every way to rent
instances and buy servers up to what could be needed, packs the tensor-parallel groups into concrete
NVLink domains (first-fit decreasing), prices it in floating-point dollars and keeps the cheapest
design. Whether a design is allowed is decided only by the families' solver-free ``check`` (each
family module's own view of what it demands), never by family ids here. Hypothesis draws small
random requirements, including infeasible ones. ``bench/solve_bench.py`` imports
:func:`brute_force` for its ratios.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterplan.candidates.table import (
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
from clusterplan.design.check import Unit, check_design_on_table, pack
from clusterplan.explain import designs
from clusterplan.planner.families import Family, active_families
from clusterplan.planner.families.facts import DesignFacts
from clusterplan.planner.ranking import rank_designs
from clusterplan.planner.solve import Planner, ServingAssignment, SolverSettings, TrainingAssignment
from clusterplan.planner.status import SolveStatus
from clusterplan.units import HOURS_PER_MONTH


@dataclass(frozen=True)
class BruteResult:
    feasible: bool
    total_usd: float = math.inf
    evaluated: int = 0


def _facts(
    table: CandidateTable,
    serving: tuple[ServingAssignment, ...] = (),
    training: tuple[TrainingAssignment, ...] = (),
    *,
    instances: tuple[tuple[str, int], ...] = (),
    bought: tuple[tuple[str, int], ...] = (),
    from_inventory: tuple[tuple[str, int], ...] = (),
    capital: float = 0.0,
    monthly: float = 0.0,
    total: float = 0.0,
    gpus: int = 0,
    power: float = 0.0,
) -> DesignFacts:
    return DesignFacts(
        table=table,
        serving=serving,
        training=training,
        instances=tuple((k, n) for k, n in instances if n),
        bought=tuple((k, n) for k, n in bought if n),
        from_inventory=tuple((k, n) for k, n in from_inventory if n),
        capital_usd=capital,
        monthly_usd=monthly,
        total_usd=total,
        gpus_in_use=gpus,
        owned_power_w=power,
    )


def _allowed(fams: list[Family], d: DesignFacts) -> bool:
    """Every family the requirement states accepts the design (or the part of it decided so far:
    a part with no units and no cost breaks only the families that read its rows and replicas)."""
    return all(f.check(d) for f in fams)


def _min_replicas(table: CandidateTable, fams: list[Family], wc: WorkloadCandidates, r: int) -> int | None:
    """The fewest replicas of row ``r`` every family accepts (more only cost more), or None."""
    row = wc.serving_rows()[r]
    rates = [x for x in (row.rate_rps, row.rate_nolat_rps) if x > 0]
    if not rates:
        return None
    most = wc.redundancy + math.ceil(wc.demand_rps / min(rates)) + 1  # never more than this is needed
    for x in range(1, most + 1):
        # All on cloud or all owned: how replicas split is decided later; the count must suit one.
        if any(_allowed(fams, _facts(table, (ServingAssignment(wc.index, r, x - xo, xo),))) for xo in (0, x)):
            return x
    return None


def _purchases(offers: list[Offering], need_gpus: int) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every (bought, from-inventory) vector up to what ``need_gpus`` could use."""
    ranges_m = [range(0, (math.ceil(need_gpus / o.gpus_per_unit) if o.purchasable else 0) + 1) for o in offers]
    ranges_u = [range(0, min(o.inventory_units, math.ceil(need_gpus / o.gpus_per_unit)) + 1) for o in offers]
    for m in itertools.product(*ranges_m):
        for u in itertools.product(*ranges_u):
            yield m, u


def brute_force(table: CandidateTable) -> BruteResult:
    """Cheapest design for tables with at most one serving workload (one shape) and one training one."""
    lim = table.limits
    fams = active_families(table)
    serving = [wc for wc in table.workloads if wc.is_serving]
    training = [wc for wc in table.workloads if not wc.is_serving]
    assert len(serving) <= 1 and len(training) <= 1 and not any(wc.allow_mixed for wc in serving)
    h = lim.horizon_months
    best = math.inf
    evaluated = 0

    s_choices: list[tuple[int, ServingRow | None, int]] = [(-1, None, 0)]
    if serving:
        s_choices = []
        for r, row in enumerate(serving[0].serving_rows()):
            x = _min_replicas(table, fams, serving[0], r)
            if x is not None:
                s_choices.append((r, row, x))
    t_choices: list[tuple[int, TrainingRow | None, str]] = [(-1, None, "")]
    if training:
        t_choices = []
        for r, t_row in enumerate(training[0].training_rows()):
            if t_row.cloud_offering is not None:
                t_choices.append((r, t_row, "cloud"))
            if table.offerings_of(t_row.gpu_id, "owned"):
                t_choices.append((r, t_row, "owned"))
    for (sr, srow, x), (tr, trow, where) in itertools.product(s_choices, t_choices):
        splits = range(x + 1) if srow is not None else range(1)
        for xc in splits:
            xo = x - xc if srow is not None else 0
            s_assign = (ServingAssignment(serving[0].index, sr, xc, xo),) if srow is not None else ()
            t_assign = (TrainingAssignment(training[0].index, tr, where),) if trow is not None else ()
            if not _allowed(fams, _facts(table, s_assign, t_assign)):
                continue
            one_off = 0.0
            train_cloud_gpus = 0
            if trow is not None and where == "cloud":
                o = table.offering(trow.cloud_offering)  # type: ignore[arg-type]
                one_off = trow.cloud_cost_usd
                train_cloud_gpus = trow.cloud_instances * o.gpus_per_unit
            # Cloud serving pool: every instance mix that hosts xc replicas (kept as options: the
            # cheapest may break the GPU cap where a dearer one does not).
            cloud_options: list[tuple[float, int, tuple[tuple[str, int], ...]]] = [(0.0, 0, ())]
            if srow is not None and xc:
                offers = table.offerings_of(srow.gpu_id, "cloud")
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
                                tuple((o.key, k) for o, k in zip(offers, n, strict=True)),
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
            options: list[list[_Owned]] = []
            ok = True
            for gid, by_w in sorted(owned_items.items()):
                offers = table.offerings_of(gid, "owned")
                need = (
                    max(sum(v) for v in by_w.values())
                    if lim.schedule == "sequential"
                    else sum(sum(v) for v in by_w.values())
                )
                opts = []
                for m, u in _purchases(offers, need):
                    units = [
                        Unit(o.gpus_per_unit, o.tp_domain)
                        for o, k in zip(offers, [a + b for a, b in zip(m, u, strict=True)], strict=True)
                        for _ in range(k)
                    ]
                    groups = (
                        list(by_w.values()) if lim.schedule == "sequential" else [[i for v in by_w.values() for i in v]]
                    )
                    if all(pack(g, units) for g in groups):
                        opts.append(
                            _Owned(
                                capital=sum(k * o.capital_usd for o, k in zip(offers, m, strict=True)),
                                energy=sum(
                                    (a + b) * o.energy_usd_per_month for o, a, b in zip(offers, m, u, strict=True)
                                ),
                                power=sum((a + b) * o.power_w for o, a, b in zip(offers, m, u, strict=True)),
                                gpus=sum((a + b) * o.gpus_per_unit for o, a, b in zip(offers, m, u, strict=True)),
                                bought=tuple((o.key, k) for o, k in zip(offers, m, strict=True)),
                                from_inventory=tuple((o.key, k) for o, k in zip(offers, u, strict=True)),
                            )
                        )
                if not opts:
                    ok = False
                    break
                options.append(opts)
            if not ok:
                continue
            for (cloud_month, cloud_gpus, inst), combo in itertools.product(cloud_options, itertools.product(*options)):
                evaluated += 1
                capital = sum(c.capital for c in combo)
                monthly = cloud_month + sum(c.energy for c in combo)
                total = capital + monthly * h + one_off
                owned_gpus = sum(c.gpus for c in combo)
                gpus = owned_gpus + (
                    max(cloud_gpus, train_cloud_gpus) if lim.schedule == "sequential" else cloud_gpus + train_cloud_gpus
                )
                design = _facts(
                    table,
                    s_assign,
                    t_assign,
                    instances=inst,
                    bought=tuple(b for c in combo for b in c.bought),
                    from_inventory=tuple(u for c in combo for u in c.from_inventory),
                    capital=capital,
                    monthly=monthly,
                    total=total,
                    gpus=gpus,
                    power=sum(c.power for c in combo),
                )
                if _allowed(fams, design):
                    best = min(best, total)
    return BruteResult(feasible=best < math.inf, total_usd=best, evaluated=evaluated)


@dataclass(frozen=True)
class _Owned:
    """One way to hold the owned servers of one GPU type: costs and units."""

    capital: float
    energy: float
    power: float
    gpus: int
    bought: tuple[tuple[str, int], ...]
    from_inventory: tuple[tuple[str, int], ...]


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
    deployments: list[Literal["cloud", "owned", "either"]] = ["either", "cloud", "owned"]
    schedules: list[Literal["sequential", "concurrent"]] = ["concurrent", "sequential"]
    deployment = draw(st.sampled_from(deployments))
    schedule = draw(st.sampled_from(schedules))
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
    design = designs.design(table, sol, rank=1, checks=[])
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


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(tables())
def test_cp_sat_agrees_with_brute_force(table: CandidateTable) -> None:
    _agrees(table, "auto")  # these models are small: CP-SAT alone


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(tables())
def test_lp_reduced_cost_fixing_keeps_the_optimum(table: CandidateTable) -> None:
    """Large models go through the LP, an incumbent and reduced-cost fixing (planner.relaxation);
    forced on here, every solve of the ranking must still reach the brute-force optimum."""
    _agrees(table, "on")
