"""``redundancy``: N+k: with the k largest replicas lost, the rest still meet peak demand.

M_w (the largest per-replica rate in use) is tied to the selected rows in ``structure``:

    lit => sum_r rho[w,r] * x[w,r] - k_w * M_w >= D_w     for every serving workload with k_w > 0

where rho is the latency-target rate when the workload has targets, else the throughput rate.
"""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext, single_shape_floor


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None
    v = ctx.v
    for wc in ctx.table.workloads:
        if not wc.is_serving or wc.redundancy <= 0:
            continue
        s = v.scales[wc.index]
        rho = s.rate if wc.targets.any else s.rate_nolat
        terms = [rho[r] * v.replicas(wc.index, r) for r in range(len(wc.rows)) if rho[r]]
        ctx.model.add(sum(terms) - wc.redundancy * v.largest_rate(wc.index) >= s.demand).only_enforce_if(ctx.lit)
        if not wc.allow_mixed:
            single_shape_floor(ctx, wc.index, rho, s.demand, spare=wc.redundancy)


def active(table: CandidateTable) -> bool:
    return any(wc.is_serving and wc.redundancy > 0 for wc in table.workloads)


FAMILY = Family(
    id="redundancy",
    title="N+k redundancy",
    sentence="with its k largest replicas lost (redundancy: k), each serving workload still meets peak demand",
    add=add,
    active=active,
)
