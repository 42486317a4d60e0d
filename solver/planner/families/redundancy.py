"""``redundancy``: N+k: with the k largest replicas lost, the rest still meet peak demand.

M_w (the largest per-replica rate in use) is tied to the selected rows in ``structure``:

    lit => sum_r rho[w,r] * x[w,r] - k_w * M_w >= D_w     for every serving workload with k_w > 0

where rho is the latency-target rate when the workload has targets, else the throughput rate.
Relaxed by dropping the spare replicas (redundancy: 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clusterplan.candidates.table import CandidateTable, ServingRow, WorkloadCandidates
from clusterplan.plan import Relaxation
from clusterplan.planner.families import Family, FamilyContext, Relaxing, single_shape_floor
from clusterplan.planner.families.facts import (
    DesignFacts,
    Margin,
    NotEnough,
    RelaxedAt,
    demand_margin,
    demand_met,
    restores,
)
from clusterplan.planner.families.goals import Goal
from clusterplan.planner.variables import ServingScale

if TYPE_CHECKING:
    from clusterplan.planner.solve import ServingAssignment


def floor(wc: WorkloadCandidates, s: ServingScale) -> tuple[list[int], int] | None:
    if not wc.is_serving or wc.redundancy <= 0:
        return None
    return (s.rate if wc.targets.any else s.rate_nolat), wc.redundancy


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None
    v = ctx.v
    for wc in ctx.table.workloads:
        s = v.scales[wc.index] if wc.is_serving else None
        fl = floor(wc, s) if s is not None else None
        if s is None or fl is None:
            continue
        rho = fl[0]
        terms = [rho[r] * v.replicas(wc.index, r) for r in range(len(wc.rows)) if rho[r]]
        ctx.model.add(sum(terms) - wc.redundancy * v.largest_rate(wc.index) >= s.demand).only_enforce_if(ctx.lit)
        if not wc.allow_mixed:
            single_shape_floor(ctx, wc.index, rho, s.demand, spare=fl[1])


def active(table: CandidateTable) -> bool:
    return any(wc.is_serving and wc.redundancy > 0 for wc in table.workloads)


def _applies(wc: WorkloadCandidates) -> bool:
    return wc.redundancy > 0


def _capacity(wc: WorkloadCandidates, rows: list[tuple[ServingAssignment, ServingRow]]) -> tuple[float, str]:
    rho = [(a, r.rate_rps if wc.targets.any else r.rate_nolat_rps) for a, r in rows]
    biggest = max((x for _, x in rho), default=0.0)
    cap = sum(a.replicas * x for a, x in rho) - wc.redundancy * biggest
    return cap, f"{wc.name}: {cap:,.2f} req/s with {wc.redundancy} replica(s) lost, for {wc.demand_rps:,.2f}"


def margin(d: DesignFacts) -> Margin | None:
    return demand_margin(d, _applies, _capacity)


def check(d: DesignFacts) -> bool:
    return demand_met(d, _applies, _capacity)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    return restores(r.fid, "redundancy: 0 (no spare replica)", 0, "replicas")


FAMILY = Family(
    id="redundancy",
    title="N+k redundancy",
    sentence="with its k largest replicas lost (redundancy: k), each serving workload still meets peak demand",
    add=add,
    active=active,
    margin=margin,
    check=check,
    # N+k rates never exceed throughput rates: the deletion loop keeps throughput instead.
    relaxation=Relaxing(goal=Goal.MIN_TOTAL, at=relaxation_at, implies=("throughput",), deletion_first=True),
    floor=floor,
)
