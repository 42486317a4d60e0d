"""``throughput``: each serving workload's replicas sustain its peak demand at the utilisation ceiling.

lit => sum_r rate_nolat[w,r] * x[w,r] >= D_w      for every serving workload w
"""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext, single_shape_floor


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None
    v = ctx.v
    for wc in ctx.table.workloads:
        if not wc.is_serving:
            continue
        s = v.scales[wc.index]
        # A replica rated above the demand counts as the demand: the same integer solutions, and a
        # tighter LP (a fraction of one big replica no longer meets demand in the relaxation).
        terms = [min(rate, s.demand) * v.replicas(wc.index, r) for r, rate in enumerate(s.rate_nolat) if rate]
        ctx.model.add(sum(terms) >= s.demand).only_enforce_if(ctx.lit)
        if not wc.allow_mixed:
            single_shape_floor(ctx, wc.index, s.rate_nolat, s.demand)


def active(table: CandidateTable) -> bool:
    return any(wc.is_serving for wc in table.workloads)


FAMILY = Family(
    id="throughput",
    title="throughput",
    sentence="each serving workload's replicas sustain its peak demand (average x peak_to_average) "
    "below the utilisation ceiling",
    add=add,
    active=active,
)
