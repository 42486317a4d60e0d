"""``latency``: at peak demand, every replica's p95 end-to-end latency, TTFT and TPOT are within target.

A row's ``rate`` is the largest arrival rate one replica takes with its p95 figures within target
(the queueing model, computed while preparing candidates); splitting demand over replicas in
proportion to their rates keeps every replica within its rate:

    lit => sum_r rate[w,r] * x[w,r] >= D_w      for every serving workload w with a target
    lit => x[w,r] = 0                           for every row with rate[w,r] = 0

A row with rate 0 misses a target even unloaded: any request routed to one of its replicas would
miss it, so none may be deployed (a distinct second-best design once added such a replica).

Relaxed by loosening the targets (``by_targets``: the explainer searches a factor on them,
rebuilding the candidates at each step); without that search, by dropping them.
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
    side_capacity,
)
from clusterplan.planner.families.goals import Goal
from clusterplan.planner.variables import ServingScale

if TYPE_CHECKING:
    from clusterplan.planner.solve import ServingAssignment


def floor(wc: WorkloadCandidates, s: ServingScale) -> tuple[list[int], int] | None:
    return (s.rate, 0) if wc.is_serving and wc.targets.any else None


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None
    v = ctx.v
    for wc in ctx.table.workloads:
        if not wc.is_serving or not wc.targets.any:
            continue
        s = v.scales[wc.index]
        # Rates capped at the demand: the same integer solutions, a tighter LP (see ``throughput``).
        for side in wc.sides():  # aggregated + prefill pool, aggregated + decode pool (one side without pools)
            terms = v.side_replicas(wc, s.rate, side)
            ctx.model.add(sum(terms) >= s.demand).only_enforce_if(ctx.lit)
        for r in range(len(wc.rows)):
            if not s.rate[r]:
                for x in v.replica_vars(wc.index, r):
                    ctx.model.add(x == 0).only_enforce_if(ctx.lit)
        fl = floor(wc, s)
        if not wc.allow_mixed and fl is not None:
            single_shape_floor(ctx, wc.index, fl[0], s.demand, spare=fl[1])


def active(table: CandidateTable) -> bool:
    return any(wc.is_serving and wc.targets.any for wc in table.workloads)


def _applies(wc: WorkloadCandidates) -> bool:
    return wc.targets.any


def _capacity(wc: WorkloadCandidates, rows: list[tuple[ServingAssignment, ServingRow]]) -> tuple[float, str]:
    cap = side_capacity(wc, rows, lambda r: r.rate_rps)
    worst_p95 = design_p95_e2e_s(rows)
    target = wc.targets.p95_latency_s
    text = (
        f"{wc.name}: {cap:,.2f} req/s within targets for {wc.demand_rps:,.2f} at peak; "
        f"p95 {worst_p95:,.2f} s at rated load (target {'none' if target is None else f'{target:g} s'})"
    )
    return cap, text


def design_p95_e2e_s(rows: list[tuple[ServingAssignment, ServingRow]]) -> float:
    """The worst p95 end-to-end latency of a design's replicas at rated load; with pools, the prefill pool's p95
    TTFT plus the decode pool's p95 (clusterplan.evaluation.pools.design_p95_e2e_s)."""
    both = max((r.p95_e2e_s for _, r in rows if r.role == "both"), default=0.0)
    prefill = max((r.p95_ttft_s for _, r in rows if r.role == "prefill"), default=0.0)
    decode = max((r.p95_e2e_s for _, r in rows if r.role == "decode"), default=0.0)
    return max(both, prefill + decode)


def margin(d: DesignFacts) -> Margin | None:
    return demand_margin(d, _applies, _capacity)


def check(d: DesignFacts) -> bool:
    """Within-target capacity meets peak demand, and no replica runs on a row that misses a target unloaded."""
    for wc in d.table.workloads:
        if wc.is_serving and _applies(wc) and any(a.replicas and r.rate_rps <= 0 for a, r in d.serving_rows(wc)):
            return False
    return demand_met(d, _applies, _capacity)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    return restores(r.fid, "drop the p95 targets")


def why_gpu_lost(table: CandidateTable, wc: WorkloadCandidates, gid: str) -> str | None:
    """Why a GPU type cannot meet a workload's p95 targets at any replica count."""
    if not wc.is_serving:
        return None
    name = table.gpus[gid].name
    rows = [r for r in wc.rows if r.gpu_id == gid and isinstance(r, ServingRow)]
    t = wc.targets
    want = ", ".join(
        f"{label} {v:g} s"
        for label, v in (("p95 latency", t.p95_latency_s), ("p95 TTFT", t.p95_ttft_s), ("p95 TPOT", t.p95_tpot_s))
        if v is not None
    )
    usable = [r for r in rows if r.rate_rps > 0]
    if not rows:
        return f"{name}: cannot meet the p95 targets ({want})"
    if not usable:
        fast = min(rows, key=lambda r: (r.ttft_s + r.tpot_s * wc.output_tokens, r.gpus))
        return (
            f"{name}: no replica meets the p95 targets ({want}) even lightly loaded; fastest is TP{fast.tp} "
            f"PP{fast.pp} {fast.quant}: TTFT {fast.ttft_s:.2f} s, TPOT {fast.tpot_s * 1000:.0f} ms unloaded, "
            f"{fast.ttft_s + fast.tpot_s * max(wc.output_tokens - 1, 0):.1f} s for {wc.output_tokens:g} tokens"
        )
    return f"{name}: only layouts that other constraints rule out meet the p95 targets ({want})"


FAMILY = Family(
    id="latency",
    title="p95 latency targets",
    sentence="at peak demand every replica keeps p95 end-to-end latency, time to first token and time per "
    "output token within their targets",
    add=add,
    active=active,
    margin=margin,
    check=check,
    # Latency rates never exceed throughput rates: the deletion loop keeps throughput instead.
    relaxation=Relaxing(
        goal=Goal.MIN_TOTAL,
        at=relaxation_at,
        implies=("throughput",),
        deletion_first=True,
        by_targets=True,
    ),
    floor=floor,
    why_gpu_lost=why_gpu_lost,
)
