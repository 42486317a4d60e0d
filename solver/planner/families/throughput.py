"""``throughput``: each serving workload's replicas sustain its peak demand at the utilisation ceiling.

lit => sum_r rate_nolat[w,r] * x[w,r] >= D_w      for every serving workload w

Relaxed by lowering the demand: the largest common fraction of every workload's peak demand that a
design meets with every other family on (``max_throughput_ratio``); latency and N+k scale with the
demand, so they are relaxed with it.
"""

from __future__ import annotations

import math
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
    side_capacity,
)
from clusterplan.planner.families.goals import Goal
from clusterplan.planner.variables import ServingScale
from clusterplan.wording.fmt import rps

if TYPE_CHECKING:
    from clusterplan.planner.solve import ServingAssignment


def floor(wc: WorkloadCandidates, s: ServingScale) -> tuple[list[int], int] | None:
    return (s.rate_nolat, 0) if wc.is_serving else None


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None
    v = ctx.v
    for wc in ctx.table.workloads:
        if not wc.is_serving:
            continue
        s = v.scales[wc.index]
        # A replica rated above the demand counts as the demand: the same integer solutions, and a
        # tighter LP (a fraction of one big replica no longer meets demand in the relaxation).
        for side in wc.sides():  # aggregated + prefill pool, aggregated + decode pool (one side without pools)
            terms = v.side_replicas(wc, s.rate_nolat, side)
            ctx.model.add(sum(terms) >= s.demand).only_enforce_if(ctx.lit)
        fl = floor(wc, s)
        if not wc.allow_mixed and fl is not None:
            single_shape_floor(ctx, wc.index, fl[0], s.demand, spare=fl[1])


def active(table: CandidateTable) -> bool:
    return any(wc.is_serving for wc in table.workloads)


def _applies(wc: WorkloadCandidates) -> bool:
    return True


def _capacity(wc: WorkloadCandidates, rows: list[tuple[ServingAssignment, ServingRow]]) -> tuple[float, str]:
    cap = side_capacity(wc, rows, lambda r: r.rate_nolat_rps)
    return cap, f"{wc.name}: {cap:,.2f} req/s at the utilisation ceiling for {wc.demand_rps:,.2f} at peak"


def margin(d: DesignFacts) -> Margin | None:
    return demand_margin(d, _applies, _capacity)


def check(d: DesignFacts) -> bool:
    return demand_met(d, _applies, _capacity)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    """The demand fraction the relaxed optimum serves (ppm, rounded down), as each workload's demand."""
    table = r.design.table
    frac = math.floor(r.value) / 1e6
    if frac <= 0:
        return _demand_below_resolution(r)
    parts = [
        f"{wc.name}: peak demand <= {rps(wc.demand_rps * frac)} req/s (asked {rps(wc.demand_rps)})"
        for wc in table.workloads
        if wc.is_serving
    ]
    return restores(r.fid, "; ".join(parts), frac * 100, "% of demand")


def _demand_below_resolution(r: RelaxedAt) -> Relaxation | NotEnough:
    """Throughput relaxed to 0% of the demand is no relaxation: say why the search found nothing.

    The solver counts request rates in units sized to the demand (clusterplan.planner.scaling); a
    replica slower than one unit counts as 0 and cannot serve. At a demand many orders of magnitude
    above what one replica takes, that is every replica, and lowering the demand changes the units.
    """
    slow = []
    for wc in r.design.table.workloads:
        if not wc.is_serving or not wc.rows:
            continue
        unit = r.resolution_rps[wc.index]
        fastest = max(row.rate_nolat_rps for row in wc.serving_rows())
        if fastest < unit:
            slow.append(
                f"{wc.name}: even the fastest replica on any GPU takes {fastest:.3g} req/s, below the "
                f"{unit:g} req/s the solver counts in at a peak demand of {rps(wc.demand_rps)} req/s"
            )
    if not slow:
        return NotEnough(lead="lowering the demand alone is not enough")
    return Relaxation(
        family=r.fid,
        change="the least demand that fits was not computed: " + "; ".join(slow) + "; plan a lower demand",
        value=None,
        unit="",
        restores_feasibility=False,
    )


FAMILY = Family(
    id="throughput",
    title="throughput",
    sentence="each serving workload's replicas sustain its peak demand (average x peak_to_average) "
    "below the utilisation ceiling",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MAX_THROUGHPUT_RATIO, at=relaxation_at, with_families=("latency", "redundancy")),
    floor=floor,
)
