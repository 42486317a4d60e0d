"""Why this one: each family's margin and whether it binds, what relaxing it would cost, why the
cheaper GPU types lost, and whether a mix of GPU types beat every single type.

All of it is data (:mod:`clusterplan.plan`); rendering lives in :mod:`clusterplan.render`.

* **Binding or slack.** A family binds when switching it off (every other family on) improves the
  optimum; its ``relaxed_total_usd`` is that optimum. Budgets cannot bind a min-cost optimum
  (removing an upper bound on cost never lowers the least cost), except capital and monthly
  budgets, which can push spending from one kind to another. Families that rarely bind are
  first switched off together: where no better design exists even then, none of them binds, in one
  solve (:func:`_switched_off`); a binding family's optimum is always its own switched-off solve.
* **Cheaper GPU types.** For each GPU type cheaper per GPU-hour than the cheapest one a workload
  uses: if physics ruled out all its candidates, the most common reason; otherwise the workload is
  forced onto it: feasible means it simply costs more (and how much); infeasible means a minimal set
  of families rules it out (assumptions + deletion loop), reported with the candidate-level reason
  where the family is row-level (e.g. ``L40S: tensor parallel 4 needs NVLink; L40S has PCIe only``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import cast

from clusterplan.candidates.table import (
    TP_NVLINK,
    CandidateTable,
    ServingRow,
    TrainingRow,
    WorkloadCandidates,
    most_common_reason,
)
from clusterplan.explain.designs import facts, hardware_lines, margins, summary_text
from clusterplan.explain.infeasibility import Retarget, TargetKey, Verify, find_conflict
from clusterplan.explain.trades import read_trade, with_trade
from clusterplan.physics.reasons import ReasonCategory
from clusterplan.plan import CandidateSummary, ConstraintCheck, Explanation, LostCause, LostGpu, MixNote, Plan
from clusterplan.planner.budget import Meter
from clusterplan.planner.cpsat import cp_model
from clusterplan.planner.families import family
from clusterplan.planner.families.goals import Bound, Goal
from clusterplan.planner.ranking import PRIMARY_GOAL
from clusterplan.planner.solve import Extra, Outcome, Planner, Solution
from clusterplan.planner.status import SolveStatus
from clusterplan.planner.variables import PlanVariables
from clusterplan.wording.reasons import render_lost

LOST_GPU_LIMIT = 6


def force_gpu(w: int, gpu_id: str) -> Extra:
    """An extra constraint: workload ``w`` runs only on ``gpu_id``."""

    def add(m: cp_model.CpModel, v: PlanVariables) -> None:
        wc = v.table.workloads[w]
        rows: tuple[ServingRow | TrainingRow, ...] = wc.rows
        for r, row in enumerate(rows):
            if row.gpu_id == gpu_id:
                continue
            if wc.is_serving:
                m.add(v.selected(w, r) == 0)
            else:
                for y in v.training_choices(w, r):
                    m.add(y == 0)

    return add


def single_gpu_type(w: int) -> Extra:
    """An extra constraint: workload ``w`` uses one GPU type (for 'does the mix beat every single type')."""

    def add(m: cp_model.CpModel, v: PlanVariables) -> None:
        wc = v.table.workloads[w]
        used: dict[str, cp_model.IntVar] = {}
        rows: tuple[ServingRow | TrainingRow, ...] = wc.rows
        for r, row in enumerate(rows):
            if row.gpu_id not in used:
                used[row.gpu_id] = m.new_bool_var(f"single_{w}_{row.gpu_id}")
            m.add_implication(v.selected(w, r), used[row.gpu_id])
        m.add_at_most_one(list(used.values()))

    return add


def _improves(planner: Planner, relaxed: float, optimum: float) -> bool:
    if PRIMARY_GOAL[planner.objective].minimise:
        return relaxed < optimum - 0.5
    return relaxed > optimum + 0.5


def constraint_checks(planner: Planner, best: Outcome) -> list[ConstraintCheck]:
    """Margins of the best design, each family marked binding (with its relaxed optimum) or not."""
    return [c for c, _ in _checks(planner, best)]


def _checks(planner: Planner, best: Outcome) -> list[tuple[ConstraintCheck, Outcome | None]]:
    """Each family's check, and for a binding one the optimum with it switched off (None: not solved)."""
    assert best.solution is not None and best.objective is not None
    table = planner.table
    checks = margins(table, best.solution, planner.built.families)
    out: list[tuple[ConstraintCheck, Outcome | None]] = []
    goal = PRIMARY_GOAL[planner.objective]
    read_checks: list[ConstraintCheck] = []
    for c in checks:
        f = family(c.family)
        if c.family in planner.families and f.trade_of is not None:
            # A trade read off the design: the family binds exactly when it has one (no solve).
            read = f.trade_of(facts(table, best.solution))
            if read is not None:
                c = c.model_copy(update={"status": "binding", "trade": read_trade(table, best.solution, read)})
        read_checks.append(c)
    solved = [
        c.family for c in read_checks if c.family in planner.families and goal not in family(c.family).cannot_bind
    ]

    # A family binds when switching it off admits a better design (_improves: by a whole unit of the integer
    # objective), so each switched-off solve is held to one: the same verdict and, when it binds, the same
    # relaxed optimum; a family that does not bind is proven so as an infeasible model, about twice as fast.
    better = Bound(goal, round(best.objective) - 1 if goal.minimise else round(best.objective) + 1)

    likely = {c.family for c in read_checks if _likely_binding(planner, c)}
    relaxed_of = _switched_off(planner, solved, better, likely)
    for c in read_checks:
        if c.family not in relaxed_of:
            out.append((c, None))
            continue
        relaxed = relaxed_of[c.family]
        if (
            relaxed.status.has_solution
            and relaxed.objective is not None
            and relaxed.solution is not None
            and _improves(planner, relaxed.objective, best.objective)
        ):
            sol = relaxed.solution
            update = {
                "status": "binding",
                "relaxed_total_usd": sol.total_cents / 100.0,
                "relaxed_design": summary_text(table, hardware_lines(table, sol)),
            }
            out.append((c.model_copy(update=update), relaxed))
        else:
            out.append((c, None))
    return out


def _likely_binding(planner: Planner, check: ConstraintCheck) -> bool:
    """Whether a family is checked alone first rather than in a group (a guess: it changes how many solves the
    checks take, never a verdict): one with a measured margin, unless it is a budget (one binds a min-cost optimum
    only by moving spending between kinds) or implied by another family the requirement states (throughput beside
    latency). The others (rules without a margin, budgets, implied families) rarely bind on the examples."""
    f = family(check.family)
    implied = any(check.family in r.implies for g in planner.families if (r := family(g).relaxation) is not None)
    return check.margin is not None and not f.spending_cap and not implied


def _switched_off(planner: Planner, fids: list[str], better: Bound, likely: set[str]) -> dict[str, Outcome]:
    """Each family of ``fids`` switched off alone (every other one on), held to ``better``: the outcome of that solve,
    or, for a family a group test clears, the group's INFEASIBLE outcome (never read: it does not bind).

    Group test: switching a set of families off admits every design that switching one of them off admits, so if
    no design meets ``better`` with the whole set off (proven INFEASIBLE), none of them binds, in one solve. The
    families ``likely`` to bind are solved alone from the start; the others are tested as a group first. Where a
    group admits a design, the families of the group it violates (each family's solver-free check) are solved
    alone and the rest tested again as a group; where that narrows nothing (or the group solve was not decided,
    e.g. by the time limit), each is solved alone, as without groups. Each binding family's outcome is thus its
    own switched-off solve, the same as checking one family at a time; the calls of a round run side by side."""
    goal = better.goal
    table = planner.table

    def alone(fid: str) -> Callable[[], Outcome]:
        return lambda: planner.solve(goal=goal, on=[g for g in planner.families if g != fid], bounds=[better])

    def together(fs: list[str]) -> Callable[[], Outcome]:
        off = set(fs)
        # Feasibility is enough: the group's design only says which families to solve alone next.
        return lambda: planner.solve(
            goal=Goal.FEASIBILITY, on=[g for g in planner.families if g not in off], bounds=[better]
        )

    single = [f for f in fids if f in likely]
    group = [f for f in fids if f not in likely]
    out: dict[str, Outcome] = {}
    while True:
        if len(group) < 2:  # a group of one is that family alone
            single, group = single + group, []
        calls = [alone(f) for f in single] + ([together(group)] if group else [])
        results = planner.concurrently(calls)
        out.update(zip(single, results[: len(single)], strict=True))
        if not group:
            break
        tested = results[-1]
        if tested.status is SolveStatus.INFEASIBLE:
            out.update((f, tested) for f in group)
            break
        violated: list[str] = []
        if tested.status.has_solution and tested.solution is not None:
            d = facts(table, tested.solution)
            violated = [f for f in group if not family(f).check(d)]
        if violated and len(violated) < len(group):
            single, group = violated, [f for f in group if f not in violated]
        else:
            single, group = group, []
    return {f: out[f] for f in fids}


def _unit_cost(table: CandidateTable, gid: str) -> float | None:
    return table.gpu_unit_cost_usd_per_hour(gid)


def _gpus_used(wc: WorkloadCandidates, sol: Solution) -> set[str]:
    if wc.is_serving:
        return {wc.rows[a.row].gpu_id for a in sol.serving_of(wc.index)}
    a = sol.training_of(wc.index)
    return {wc.rows[a.row].gpu_id} if a is not None else set()


def _row_reason(wc: WorkloadCandidates, gid: str, fid: str) -> str | None:
    rows = sorted((r for r in wc.rows if r.gpu_id == gid), key=lambda r: (r.gpus, r.tp))
    for r in rows:
        for f, reason in r.forbidden_by:
            if f == fid:
                return reason
    return None


def _offering_reason(table: CandidateTable, gid: str, fid: str) -> str | None:
    for o in table.offerings_of(gid):
        for f, reason in o.forbidden_by:
            if f == fid:
                return f"{table.gpus[gid].name}: {reason}"
    return None


def lost_gpus(planner: Planner, best: Outcome, *, limit: int = LOST_GPU_LIMIT) -> list[LostGpu]:
    assert best.solution is not None
    table = planner.table
    sol = best.solution
    base_total = sol.total_cents / 100.0
    todo: list[tuple[WorkloadCandidates, str, float]] = []
    for wc in table.workloads:
        used = _gpus_used(wc, sol)
        used_costs = [c for c in (_unit_cost(table, g) for g in used) if c is not None]
        if not used_costs:
            continue
        threshold = min(used_costs)
        cands = []
        for gid in sorted(table.gpus):
            if gid in used:
                continue
            c = _unit_cost(table, gid)
            if c is not None and c < threshold:
                cands.append((c, gid))
        # The closest competitors first: the GPU types just cheaper than the one chosen.
        todo += [(wc, gid, cost) for cost, gid in sorted(cands, key=lambda c: (-c[0], c[1]))[:limit]]

    def why(wc: WorkloadCandidates, gid: str, cost: float) -> Callable[[], LostGpu]:
        return lambda: _why_lost(planner, wc, gid, cost, base_total)

    # Each GPU type's forced solve and conflict search are independent: run side by side (the same as in turn).
    return planner.concurrently([why(wc, gid, cost) for wc, gid, cost in todo])


def _why_lost(planner: Planner, wc: WorkloadCandidates, gid: str, unit_cost: float, base_total: float) -> LostGpu:
    table = planner.table
    name = table.gpus[gid].name
    rows = [r for r in wc.rows if r.gpu_id == gid]
    excluded = most_common_reason(wc.exclusions, gid)
    if not rows:
        cause = LostCause(
            "no_candidate", name, model=wc.model_name, excluded=excluded.reason if excluded is not None else None
        )
        return LostGpu(
            workload=wc.name,
            gpu=gid,
            gpu_name=name,
            usd_per_gpu_hour=unit_cost,
            reason=render_lost(cause),
            families=[excluded.family] if excluded is not None else [],
            extra_cost_usd=None,
            cause=cause,
        )
    force = force_gpu(wc.index, gid)
    forced = planner.solve(goal=PRIMARY_GOAL[planner.objective], extra=force)
    if forced.status.has_solution and forced.solution is not None:
        extra = forced.solution.total_cents / 100.0 - base_total
        what = summary_text(table, hardware_lines(table, forced.solution))
        cause = LostCause("dearer", name, extra_usd=extra, design=what)
        return LostGpu(
            workload=wc.name,
            gpu=gid,
            gpu_name=name,
            usd_per_gpu_hour=unit_cost,
            reason=render_lost(cause),
            families=[],
            extra_cost_usd=extra,
            cause=cause,
        )
    _, conflict = find_conflict(planner, extra=force)
    texts = []
    for fid in conflict:
        f = family(fid)
        own = f.why_gpu_lost(table, wc, gid) if f.why_gpu_lost is not None else None
        texts.append(
            own or _row_reason(wc, gid, fid) or _offering_reason(table, gid, fid) or f"{f.title}: {f.sentence}"
        )
    # A link reason is what the tp_nvlink family's own text already says: not repeated.
    said = excluded is not None and excluded.reason.category is ReasonCategory.LINK and TP_NVLINK in conflict
    other = excluded.reason if excluded is not None and not said else None
    cause = LostCause("ruled_out", name, excluded=other, conflicts=tuple(texts))
    return LostGpu(
        workload=wc.name,
        gpu=gid,
        gpu_name=name,
        usd_per_gpu_hour=unit_cost,
        reason=render_lost(cause),
        families=conflict,
        extra_cost_usd=None,
        cause=cause,
    )


def mixes(planner: Planner, best: Outcome) -> list[MixNote]:
    assert best.solution is not None
    table = planner.table
    sol = best.solution
    out: list[MixNote] = []
    for wc in table.workloads:
        if not wc.is_serving or not wc.allow_mixed:
            continue
        used = sorted(_gpus_used(wc, sol))
        mixed_total = sol.total_cents / 100.0
        if len(used) < 2:
            out.append(
                MixNote(
                    workload=wc.name,
                    mixed_total_usd=mixed_total,
                    best_single_gpu=used[0] if used else None,
                    best_single_total_usd=mixed_total,
                    saving_usd=0.0,
                    text=f"{wc.name}: mixing GPU types was allowed; one type ({', '.join(used)}) is cheapest",
                )
            )
            continue
        single = planner.solve(goal=PRIMARY_GOAL[planner.objective], extra=single_gpu_type(wc.index))
        if single.status.has_solution and single.solution is not None:
            s_total = single.solution.total_cents / 100.0
            s_gpu = sorted(_gpus_used(wc, single.solution))[0]
            out.append(
                MixNote(
                    workload=wc.name,
                    mixed_total_usd=mixed_total,
                    best_single_gpu=s_gpu,
                    best_single_total_usd=s_total,
                    saving_usd=s_total - mixed_total,
                    text=f"{wc.name}: the mix of {' + '.join(used)} costs ${mixed_total:,.0f}; the best "
                    f"single type ({s_gpu}) costs ${s_total:,.0f}: the mix saves ${s_total - mixed_total:,.0f}",
                )
            )
        else:
            out.append(
                MixNote(
                    workload=wc.name,
                    mixed_total_usd=mixed_total,
                    best_single_gpu=None,
                    best_single_total_usd=None,
                    saving_usd=None,
                    text=f"{wc.name}: only a mix of {' + '.join(used)} meets the requirement; no single GPU type does",
                )
            )
    return out


def candidate_summaries(table: CandidateTable) -> list[CandidateSummary]:
    return [
        CandidateSummary(
            workload=wc.name,
            considered=wc.considered,
            rows=len(wc.rows),
            excluded=len(wc.exclusions),
            gpus_with_candidates=sorted({r.gpu_id for r in wc.rows}),
        )
        for wc in table.workloads
    ]


def memory_option_lines(table: CandidateTable, best: Outcome) -> list[str]:
    """The training memory options the chosen layouts use (physics/optimizer_memory.py), one line per workload."""
    sol = best.solution
    if sol is None:
        return []
    out: list[str] = []
    for wc in table.workloads:
        if wc.kind == "serving":
            continue
        chosen = sol.training_of(wc.index)
        if chosen is None:
            continue
        options = wc.training_rows()[chosen.row].memory_options
        if options:
            out.append(f"{wc.name}: memory options {', '.join(options)} (the layout does not fit without them)")
    return out


def explain(
    planner: Planner,
    best: Outcome,
    *,
    lost_limit: int = LOST_GPU_LIMIT,
    retarget: Retarget | None = None,
    verify: Verify | None = None,
) -> Explanation:
    """The whole explanation of the best design; ``retarget`` (the requirement's table with p95 targets
    scaled) lets a binding latency family say at which targets a cheaper design appears, ``verify`` (planning
    at those targets) what design planning there returns."""
    table = planner.table
    pairs = _checks(planner, best)
    # The GPU types that lost and the mixes read no trade: they run beside the last part of the trades, a target
    # trade's plan of its designs at the moved targets (CP-SAT's solves, which leave the interpreter to them), and
    # not beside the trades' probes, whose candidate rebuilds are Python like them (the two would only take turns).
    last_part = threading.Event()

    def verify_marked(
        factors: Mapping[TargetKey, float], *, first_only: bool = False, meter: Meter | None = None
    ) -> Plan:
        assert verify is not None
        if not first_only:
            last_part.set()
        return verify(factors, first_only=first_only, meter=meter)

    def traded() -> list[ConstraintCheck]:
        try:
            marked = verify_marked if verify is not None else None
            return [with_trade(planner, best, c, relaxed, retarget, marked) for c, relaxed in pairs]
        finally:
            last_part.set()

    def others() -> tuple[list[LostGpu], list[MixNote]]:
        last_part.wait()
        return lost_gpus(planner, best, limit=lost_limit), mixes(planner, best)

    calls: list[Callable[[], object]] = [traded, others]
    done = planner.concurrently(calls)  # the results of the two in turn
    checks = cast(list[ConstraintCheck], done[0])
    lost, mixed = cast(tuple[list[LostGpu], list[MixNote]], done[1])
    notes = list(table.notes)
    counts = Counter(e.family for wc in table.workloads for e in wc.exclusions)
    counts.update(e.family for e in table.offer_exclusions)  # cloud offers of a tier not allowed
    if counts:
        notes.append(
            "candidates ruled out before the model: " + ", ".join(f"{n} by {fam}" for fam, n in sorted(counts.items()))
        )
    return Explanation(
        constraints=checks,
        lost_gpus=lost,
        mixes=mixed,
        candidates=candidate_summaries(table),
        assumptions=list(table.assumptions_used) + memory_option_lines(table, best),
        notes=notes,
        # The command's budget ran out on the way: some solves above were skipped or cut short.
        complete=not planner.meter().spent(),
    )
