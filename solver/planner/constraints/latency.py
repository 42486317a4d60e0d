"""``latency``: at peak demand, every replica's p95 end-to-end latency, TTFT and TPOT are within target.

A row's ``rate`` is the largest arrival rate one replica takes with its p95 figures within target
(the queueing model, computed while preparing candidates); splitting demand over replicas in
proportion to their rates keeps every replica within its rate:

    lit => sum_r rate[w,r] * x[w,r] >= D_w      for every serving workload w with a target
    lit => x[w,r] = 0                           for every row with rate[w,r] = 0

A row with rate 0 misses a target even unloaded: any request routed to one of its replicas would
miss it, so none may be deployed (a distinct second-best design once added such a replica).
"""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext, single_shape_floor


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None
    v = ctx.v
    for wc in ctx.table.workloads:
        if not wc.is_serving or not wc.targets.any:
            continue
        s = v.scales[wc.index]
        # Rates capped at the demand: the same integer solutions, a tighter LP (see ``throughput``).
        terms = [min(rate, s.demand) * v.replicas(wc.index, r) for r, rate in enumerate(s.rate) if rate]
        ctx.model.add(sum(terms) >= s.demand).only_enforce_if(ctx.lit)
        for r in range(len(wc.rows)):
            if not s.rate[r]:
                for x in v.replica_vars(wc.index, r):
                    ctx.model.add(x == 0).only_enforce_if(ctx.lit)
        if not wc.allow_mixed:
            single_shape_floor(ctx, wc.index, s.rate, s.demand)


def active(table: CandidateTable) -> bool:
    return any(wc.is_serving and wc.targets.any for wc in table.workloads)


FAMILY = Family(
    id="latency",
    title="p95 latency targets",
    sentence="at peak demand every replica keeps p95 end-to-end latency, time to first token and time per "
    "output token within their targets",
    add=add,
    active=active,
)
