"""``latency``: at peak demand, every replica's p95 end-to-end latency, TTFT and TPOT are within target.

A row's ``rate`` is the largest arrival rate one replica takes with its p95 figures within target
(the queueing model, computed while preparing candidates); splitting demand over replicas in
proportion to their rates keeps every replica within its rate:

    lit => sum_r rate[w,r] * x[w,r] >= D_w      for every serving workload w with a target
    lit => x[w,r] = 0                           for every row with rate[w,r] = 0

A row with rate 0 misses a target even unloaded: any request routed to one of its replicas would
miss it, so none may be deployed (a distinct second-best design once added such a replica).

The scheduler simulation can overrule the rate. Where a returned design's replica of row r misses a
target simulated at the load it receives at peak (evaluation/simulated.py), the pipeline gives the row
``held[w,r]``: the largest load per replica at which the simulation meets every target (:func:`with_held`).
Demand splits in proportion to the rates, so a replica of row r receives ``D_w * rate[w,r] / C_side``
(``C_side = sum_r' rate[w,r'] * x[w,r']`` over the rows serving that side: an aggregated row both sides, a
prefill or decode pool's row its own, each pool held apart), and the load is capped:

    lit and sel[w,r] => C_side >= D_w * rate[w,r] / held[w,r]     for every row with a held load, each side it serves
    lit => x[w,r] = 0                                             for every row held at 0

One shape alone: ``x[w,r] >= ceil(D_w / held[w,r])``, the per-row floor (:func:`floor` gives it).

Relaxed by loosening the targets (``by_targets``: the explainer searches a factor on them,
rebuilding the candidates at each step); without that search, by dropping them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
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
    from clusterplan.evaluation.simulated import HeldLoad
    from clusterplan.planner.solve import ServingAssignment


def floor(wc: WorkloadCandidates, s: ServingScale) -> tuple[list[int], int] | None:
    return (s.held, 0) if wc.is_serving and wc.targets.any else None


def with_held(table: CandidateTable, held: Sequence[HeldLoad]) -> CandidateTable:
    """``table`` with each row a design's group ran on given the load the simulation held its targets at (the
    smallest where several, and never above the row's earlier held load); ``table`` itself when no row changes.
    A group's role picks the row's: an aggregated group holds a ``both`` row, a pool's group its pool's row."""
    caps: dict[tuple[str, tuple[object, ...]], float] = {}
    for h in held:
        g = h.group
        role = "both" if g.role == "aggregated" else g.role
        key = (h.workload, (role, g.gpu, g.tp, g.pp, g.quant, g.kv_cache, g.ep, g.attention_dp, g.batch))
        caps[key] = min(caps.get(key, math.inf), h.held_rps)
    changed = False

    def capped(wc: WorkloadCandidates, row: ServingRow) -> ServingRow:
        nonlocal changed
        shape = (row.role, row.gpu_id, row.tp, row.pp, row.quant, row.kv_precision, row.ep, row.attention_dp, row.batch)
        cap = caps.get((wc.name, shape))
        if cap is None or (row.held_rps is not None and row.held_rps <= cap):
            return row
        changed = True
        return replace(row, held_rps=cap)

    workloads = tuple(
        replace(wc, rows=tuple(capped(wc, r) for r in wc.serving_rows())) if wc.is_serving else wc
        for wc in table.workloads
    )
    return replace(table, workloads=workloads) if changed else table


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
        _add_held(ctx, wc, s)
        fl = floor(wc, s)
        if not wc.allow_mixed and fl is not None:
            single_shape_floor(ctx, wc.index, fl[0], s.demand, spare=fl[1])


def _add_held(ctx: FamilyContext, wc: WorkloadCandidates, s: ServingScale) -> None:
    """A row with a held load: its replicas take at most that load, demand split by rate (the module docstring)."""
    assert ctx.lit is not None
    v = ctx.v
    for r, row in enumerate(wc.serving_rows()):
        if row.held_rps is None or not s.rate[r]:
            continue
        if not s.held[r]:
            for x in v.replica_vars(wc.index, r):
                ctx.model.add(x == 0).only_enforce_if(ctx.lit)
            continue
        # rates capped at the demand, as the capacity terms are (a replica of rate >= D takes D / x)
        need = -(-s.demand * min(s.rate[r], s.demand) // s.held[r])
        for side in wc.sides():
            if not row.serves(side):  # a pool's row: its own side's replicas share its load
                continue
            terms = v.side_replicas(wc, s.rate, side)
            ctx.model.add(sum(terms) >= need).only_enforce_if([ctx.lit, v.selected(wc.index, r)])


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
    """Within-target capacity meets peak demand, no replica runs on a row that misses a target unloaded, and no
    replica of a row with a held load receives more than it at peak (demand split by rate)."""
    for wc in d.table.workloads:
        if not wc.is_serving or not _applies(wc):
            continue
        rows = [(a, r) for a, r in d.serving_rows(wc) if a.replicas]
        if any(r.rate_rps <= 0 for _, r in rows):
            return False
        demand = wc.demand_rps
        for _, r in rows:
            if r.held_rps is None:
                continue
            # the load a replica receives on the sides it serves, against its held load (1e-6: integer rates)
            cap = min(
                sum(a.replicas * min(x.rate_rps, demand) for a, x in rows if x.serves(side))
                for side in wc.sides()
                if r.serves(side)
            )
            if demand * min(r.rate_rps, demand) > cap * r.held_rps * (1 + 1e-6):
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
