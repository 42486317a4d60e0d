"""Aggregated against disaggregated serving: the best design of the other kind, beside design 1.

For every serving workload whose ``disaggregation`` is ``auto`` and that has both kinds of rows, the
planner chose one kind for design 1. This solves the same table once more with each such workload held
to the other kind (its aggregated rows, or its pool rows, alone): the cheapest design of that kind, so
the plan can say whether disaggregation wins and by how much. One extra solve, min-cost only.
"""

from __future__ import annotations

from dataclasses import replace

from clusterplan.candidates.table import CandidateTable, WorkloadCandidates
from clusterplan.explain import designs as report
from clusterplan.explain.infeasibility import unplaceable_workloads
from clusterplan.plan import Design, DisaggregationNote, ServingPlan
from clusterplan.planner.budget import Meter
from clusterplan.planner.families.goals import Goal
from clusterplan.planner.solve import Planner, SolverSettings


def _both_kinds(wc: WorkloadCandidates) -> bool:
    roles = {r.role for r in wc.serving_rows()} if wc.is_serving else set()
    return wc.disaggregation == "auto" and "both" in roles and bool(roles - {"both"})


def _held(wc: WorkloadCandidates, pools: bool) -> WorkloadCandidates:
    """``wc`` with only its pool rows (``pools``) or only its aggregated rows."""
    rows = tuple(r for r in wc.serving_rows() if (r.role != "both") == pools)
    return replace(wc, rows=rows, disaggregation="required" if pools else "off")


def pools_summary(w: ServingPlan) -> str:
    """A serving workload's replicas in brief: '3x prefill H100 TP8 PP1 fp8 + 5x decode ...'."""
    return " + ".join(
        f"{g.replicas}x {'' if g.role == 'aggregated' else g.role + ' '}{g.gpu_name} TP{g.tp} PP{g.pp} {g.quant}"
        for g in w.groups
    )


def _kinds(d: Design) -> dict[str, bool]:
    """Per serving workload of ``d``: whether it is served by pools."""
    return {w.workload: w.disaggregated for w in d.workloads if isinstance(w, ServingPlan)}


def comparison(
    table: CandidateTable,
    designs: list[Design],
    *,
    objective: str,
    settings: SolverSettings,
    budget: Meter | None,
    cut_short: bool = False,
) -> list[DisaggregationNote]:
    """One note per workload that may go either way: design 1's kind, and the cheapest design of the other.

    The ranked designs are the cheapest of distinct signatures, best first: the first of them that flips every
    such workload to the other kind is the cheapest design of that kind (any cheaper one would rank before it),
    unless a solve was cut short. Only when none does is the table solved once more, held to the other kind.
    """
    either = [wc for wc in table.workloads if _both_kinds(wc)]
    if objective != "min_cost" or not either or not designs:
        return []
    best = designs[0]
    plans = {w.workload: w for w in best.workloads if isinstance(w, ServingPlan)}
    chose_pools = {wc.index: plans[wc.name].disaggregated for wc in either if wc.name in plans}
    flipped = {wc.name: not chose_pools[wc.index] for wc in either if wc.index in chose_pools}
    ranked = [d for d in designs[1:] if all(_kinds(d).get(n) == k for n, k in flipped.items())]
    other: Design | None = None
    if cut_short or (not ranked and budget is not None and budget.spent()):
        return []  # the time limit: neither the ranked designs nor one more solve can say which is the cheapest
    if ranked:
        other = ranked[0]
    else:
        held = tuple(_held(wc, not chose_pools[wc.index]) if wc.index in chose_pools else wc for wc in table.workloads)
        other_table = replace(table, workloads=held)
        if not unplaceable_workloads(other_table):
            planner = Planner(other_table, objective="min_cost", settings=settings, budget=budget)
            out = planner.solve(goal=Goal.MIN_TOTAL)
            if out.status.has_solution and out.solution is not None:
                other = report.design(other_table, out.solution, rank=0, checks=[])
    other_plans = {} if other is None else {w.workload: w for w in other.workloads if isinstance(w, ServingPlan)}
    notes = []
    for wc in either:
        if wc.index not in chose_pools:
            continue
        mine, theirs = plans[wc.name], other_plans.get(wc.name)
        pools_w, agg_w = (mine, theirs) if chose_pools[wc.index] else (theirs, mine)
        pools_d, agg_d = (best, other) if chose_pools[wc.index] else (other, best)
        pools_usd = None if pools_d is None else pools_d.costs.total_usd
        agg_usd = None if agg_d is None else agg_d.costs.total_usd
        notes.append(
            DisaggregationNote(
                workload=wc.name,
                chosen="disaggregated" if chose_pools[wc.index] else "aggregated",
                disaggregated_total_usd=pools_usd,
                disaggregated_design=None if pools_w is None else pools_summary(pools_w),
                aggregated_total_usd=agg_usd,
                aggregated_design=None if agg_w is None else pools_summary(agg_w),
                saving_usd=None if pools_usd is None or agg_usd is None else agg_usd - pools_usd,
            )
        )
    return notes
