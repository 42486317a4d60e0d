"""When nothing fits: a minimal set of conflicting families, and the least relaxation of each.

1. Solve for feasibility with every family's literal as an *assumption* (one worker, no objective).
   CP-SAT returns a sufficient set of assumptions for infeasibility (a core, not always minimal).
2. Shrink it with a deletion loop (CPMpy's ``mus``): drop each family in turn and keep it dropped
   if the rest (all other families off) is still infeasible. What remains is minimal: removing any
   one member makes the rest feasible.
3. For each member, the least relaxation that restores feasibility *with every other family of the
   requirement on*: optimise the family's relaxation goal (capital, monthly, total, GPUs, power,
   training time over deadline, extra owned GPUs, served demand) with that family off, and let the
   family's module say what the optimum stands for (``Relaxing.at``); for a family relaxed by its
   targets (latency), search a common factor on the targets (the rates depend on the targets
   through the queueing physics, so each step rebuilds the serving candidates), then give back
   every target that need not move. With a ``Verify`` (what ``solve`` at moved targets returns), the
   targets stated are ones where planning, the scheduler simulation's re-search included, returns a
   design the simulation does not reject: where it rejects the analytical search's factors, the
   search runs again with each probe so planned (:func:`verified_search`, shared with the trades);
   where the time limit stops that, the relaxation says so (``Relaxation.unverified``) instead of
   stating factors that may not work.
4. If relaxing a member alone does not suffice, that is said, with the families that still cannot
   all hold once it is relaxed (a minimal set again), so the user knows what else to change. A solve
   that ran out of time is reported as such, never as "not enough".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from clusterplan.candidates.table import (
    AVAILABILITY,
    CandidateTable,
    ServingRow,
    TrainingRow,
    WorkloadCandidates,
    most_common_reason,
)
from clusterplan.explain.designs import facts, hardware_lines, summary_text
from clusterplan.physics.reasons import Reason
from clusterplan.plan import Design, FamilyRef, Infeasibility, Plan, Relaxation
from clusterplan.planner.budget import Meter
from clusterplan.planner.families import Relaxing, family
from clusterplan.planner.families.facts import NotEnough, RelaxedAt
from clusterplan.planner.families.goals import Goal
from clusterplan.planner.solve import Extra, Planner, Solution
from clusterplan.planner.status import SolveStatus
from clusterplan.wording import fmt
from clusterplan.wording.reasons import render_predicate, render_reasons
from clusterplan.wording.simulated import unverified_relaxation

# A latency target: (workload index, requirement field: p95_latency, p95_ttft or p95_tpot).
TargetKey = tuple[int, str]
# Whether a design exists with each target times its factor (absent: 1): a probe of the target search.
StatusAt = Callable[[Mapping[TargetKey, float]], SolveStatus]


class Retarget(Protocol):
    """Each target times its factor (absent: 1) -> the candidate table of the requirement so changed;
    ``max_usd``: without the serving rows no design costing at most that can use (a trade's probe)."""

    def __call__(self, factors: Mapping[TargetKey, float], *, max_usd: float | None = None) -> CandidateTable: ...


class Verify(Protocol):
    """Each target times its factor (absent: 1) -> the designs that planning the requirement so changed returns:
    the analytical search, then the scheduler simulation's re-search (what ``solve`` at those targets returns),
    design 1 with the targets it misses simulated (``simulation_misses``: see :func:`simulated_first`);
    ``first_only``: ranking and simulating design 1 alone (a search's probe: cheaper, and design 1 may then differ
    where another ranked design's simulated miss would have held a row it uses); ``meter``: what its solves draw on,
    the caller's (its share where it runs beside other work: a cut share stops them too; None: the command's budget)."""

    def __call__(
        self, factors: Mapping[TargetKey, float], *, first_only: bool = False, meter: Meter | None = None
    ) -> Plan: ...


TARGET_FIELDS = ("p95_latency", "p95_ttft", "p95_tpot")
# A known-feasible bracket top (least_target_factors' ``known``) is raised by this much, so that the
# targets it implies are met despite the rounding of p95 / target x target.
KNOWN_MARGIN = 1e-9
# The latency search tries targets 64x, 64^2x, ... looser, bisecting inside the first bracket that
# is feasible (7 halvings of the exponent: within 64^(1/128), about 3%, rounded up). It stops once
# every target is at least LOOSEST_TARGET_S: past an hour, a p95 target no longer constrains a plan.
TARGET_FACTOR_STEP = 64.0
TARGET_BISECTION_STEPS = 7
TARGET_TOLERANCE = TARGET_FACTOR_STEP ** (1 / 2**TARGET_BISECTION_STEPS)  # a 64x bracket after 7 halvings
LOOSEST_TARGET_S = 3600.0
# Targets still relaxed after the give-backs that are then tightened one by one (7 rebuilds each);
# any further ones keep the common factor (a relaxation that works, not necessarily the least).
SHRINK_TARGETS_MAX = 6


def _relaxing(fid: str) -> Relaxing:
    r = family(fid).relaxation
    assert r is not None, f"{fid} is never switched off"
    return r


def minimal_conflict(
    planner: Planner, core: list[str], *, extra: Extra | None = None, among: list[str] | None = None
) -> list[str]:
    """Deletion loop: a minimal subset of ``core`` that is still infeasible (reported in registry order).

    ``among``: the families that may be kept (default: all the requirement states); a family
    switched off by the caller is never brought back in.
    """
    allowed = planner.families if among is None else among
    members = set(core)
    # A family a member implies (latency and N+k imply throughput: their rates never exceed the
    # throughput rate) is a candidate to keep instead: it yields the more useful relaxation.
    members |= {g for f in core for g in _relaxing(f).implies if g in allowed}
    kept = [f for f in planner.families if f in members]
    # Families marked deletion_first are tried first (in registry order), so the weaker one is kept.
    order = [f for f in kept if _relaxing(f).deletion_first] + [f for f in kept if not _relaxing(f).deletion_first]
    # Families proven infeasible together (every other one off): the core, then each infeasible trial. Switching a
    # family on only removes designs, so a trial holding all of them is infeasible too: dropped without a solve
    # (a member the core does not name, e.g. throughput beside latency: one solve of three on the 70B example).
    proven = set(core)
    for f in order:
        trial = [g for g in kept if g != f]
        if f not in proven:
            kept = trial
        elif planner.feasible(trial, extra=extra) is SolveStatus.INFEASIBLE:
            kept = trial
            proven = set(trial)
    return kept


def find_conflict(planner: Planner, *, extra: Extra | None = None) -> tuple[SolveStatus, list[str]]:
    """(INFEASIBLE, minimal families) or (the status, []) when the requirement is not proven infeasible.

    An empty list with INFEASIBLE means no combination works even with every family off (every
    candidate is ruled out by physics, or nothing can be obtained).
    """
    status, core = planner.core(planner.families, extra=extra)
    if status is not SolveStatus.INFEASIBLE:
        return status, []
    if not core:
        return status, []
    return status, minimal_conflict(planner, core, extra=extra)


def still_conflicting(planner: Planner, off: set[str]) -> tuple[SolveStatus, list[str]]:
    """With the families of ``off`` switched off and every other one on: (INFEASIBLE, a minimal set
    that still conflicts), or (the status, []) when that is not proven."""
    on = [f for f in planner.families if f not in off]
    status, core = planner.core(on)
    if status is not SolveStatus.INFEASIBLE or not core:
        return status, []
    return status, minimal_conflict(planner, core, among=on)


def _relaxed_with(fid: str) -> set[str]:
    """The families one relaxation switches off: the family and those relaxed with it (lowering the
    demand relaxes every family that scales with it)."""
    return {fid, *_relaxing(fid).with_families}


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _rest_clause(rest: list[str]) -> str:
    """What still conflicts, readable: one family rules out every design; several cannot all hold."""
    titles = _and([family(f).title for f in rest])
    return f"{titles} still rules out every design" if len(rest) == 1 else f"{titles} still cannot all hold"


def _not_enough(planner: Planner, fid: str, *, lead: str = "") -> Relaxation:
    """Relaxing ``fid`` alone is proven not to be enough: say so, and what still conflicts."""
    lead = lead or f"relaxing {family(fid).title} alone is not enough"
    status, rest = still_conflicting(planner, _relaxed_with(fid))
    return _still_conflicts(fid, lead, "it", status, rest)


def _still_conflicts(fid: str, lead: str, relaxed: str, status: SolveStatus, rest: list[str]) -> Relaxation:
    """A relaxation proven not to be enough: ``lead``, then what still conflicts with ``relaxed`` relaxed."""
    if rest:
        change = f"{lead}: with {relaxed} relaxed, {_rest_clause(rest)}"
    elif status is SolveStatus.INFEASIBLE:
        change = f"{lead}: no design exists even with every other stated constraint relaxed too"
    else:
        change = f"{lead} (which other constraints conflict was not found within the time limit)"
    return Relaxation(
        family=fid, change=change, value=None, unit="", restores_feasibility=False, still_conflicting=rest
    )


def _timed_out(planner: Planner, fid: str) -> Relaxation:
    """The search for the least relaxation ran out of time: neither a value nor a proof there is none."""
    return Relaxation(
        family=fid,
        change=f"the least relaxation of {family(fid).title} was not found within the time limit "
        f"(--time-limit {planner.settings.time_limit_s:g} s for the whole command); raise --time-limit",
        value=None,
        unit="",
        restores_feasibility=False,
    )


def least_relaxation(
    planner: Planner, fid: str, *, retarget: Retarget | None = None, verify: Verify | None = None
) -> Relaxation:
    """The smallest change to family ``fid`` that makes the requirement feasible, all else unchanged (``verify``: a
    p95-target change is one where planning, the scheduler simulation included, returns a design)."""
    if _relaxing(fid).by_targets and retarget is not None:
        return _target_relaxation(planner, fid, retarget, verify)
    return _least_by_solving(planner, fid)


def _least_by_solving(planner: Planner, fid: str) -> Relaxation:
    """Optimise the family's relaxation goal with ``fid`` (and those relaxed with it) off, every other on."""
    others = [f for f in planner.families if f not in _relaxed_with(fid)]
    out = planner.solve(goal=_relaxing(fid).goal, on=others)
    if out.status is SolveStatus.INFEASIBLE:
        return _not_enough(planner, fid)
    if not out.status.has_solution or out.solution is None or out.objective is None:
        return _timed_out(planner, fid)
    rel = _relaxation_at(planner, fid, out.objective, out.solution)
    if out.status is SolveStatus.FEASIBLE and rel.restores_feasibility:
        # The time limit stopped the search: this change works, but a smaller one may too.
        rel = rel.model_copy(update={"change": rel.change + " (time limit: a smaller change may also work)"})
    return rel


def relaxed_at(planner: Planner, fid: str, value: float, sol: Solution) -> RelaxedAt:
    """What a family's wording reads of the relaxed optimum ``value`` (solution ``sol``) of family ``fid``."""
    return RelaxedAt(
        fid=fid,
        value=value,
        design=facts(planner.table, sol),
        resolution_rps={
            wc.index: planner.v.scales[wc.index].resolution_rps for wc in planner.table.workloads if wc.is_serving
        },
    )


def _relaxation_at(planner: Planner, fid: str, value: float, sol: Solution) -> Relaxation:
    """The change that the relaxed optimum ``value`` (solution ``sol``) of family ``fid`` stands for."""
    at = relaxed_at(planner, fid, value, sol)
    rel = _relaxing(fid).at(at)
    if isinstance(rel, NotEnough):
        return _not_enough(planner, fid, lead=rel.lead)
    return rel


def serving_targets(table: CandidateTable) -> list[tuple[TargetKey, str, float]]:
    """Every p95 target the requirement states: (key, workload name, seconds), in a fixed order."""
    out: list[tuple[TargetKey, str, float]] = []
    for wc in table.workloads:
        if not wc.is_serving:
            continue
        t = wc.targets
        for field, value in zip(TARGET_FIELDS, (t.p95_latency_s, t.p95_ttft_s, t.p95_tpot_s), strict=True):
            if value is not None:
                out.append(((wc.index, field), wc.name, value))
    return out


def _target_relaxation(planner: Planner, fid: str, retarget: Retarget, verify: Verify | None) -> Relaxation:
    """The least looser p95 targets that make the requirement feasible, all else unchanged (see
    :func:`least_target_factors`; each step rebuilds the candidate table: the rates depend on the targets). With
    ``verify``, the least at which planning returns a design the scheduler simulation does not reject
    (:func:`verified_search`; its probes plan design 1 alone)."""
    targets = serving_targets(planner.table)
    if not targets:
        return _least_by_solving(planner, fid)
    statuses: dict[tuple[tuple[TargetKey, float], ...], SolveStatus] = {}

    def status_at(factors: Mapping[TargetKey, float]) -> SolveStatus:
        key = tuple(sorted(factors.items()))
        if key not in statuses and planner.meter().spent():
            return SolveStatus.UNKNOWN  # the time limit: no table rebuilt, nothing solved
        if key not in statuses:
            p = Planner(
                retarget(factors), objective=planner.objective, settings=planner.settings, budget=planner.meter()
            )
            statuses[key] = p.feasible(p.families)
        return statuses[key]

    found = least_target_factors(targets, status_at)
    if found.status is SolveStatus.INFEASIBLE:
        return _targets_not_enough(planner, fid, retarget, found.factors)
    if not found.status.has_solution:
        return _timed_out(planner, fid)
    if verify is not None:
        # The verified search walks the analytical search's grid, so every probe below its factors is one the
        # analytical model already rejected (no plan).
        checked = verified_search(
            found,
            lambda status: least_target_factors(targets, status),
            status_at,
            lambda factors: simulated_first(verify(factors, first_only=True, meter=planner.meter())) is not None,
            lambda: planner.meter().spent(),
        )
        if not checked.status.has_solution:
            return _unverified(planner, fid, targets, found.factors, checked.status)
        found = checked
    return Relaxation(
        family=fid,
        change=target_change(targets, found.factors, ">="),
        value=round(max(found.factors.values()), 3),
        unit="x targets",
        restores_feasibility=True,
    )


@dataclass(frozen=True)
class TargetSearch:
    """Where :func:`least_target_factors` stopped: ``status`` has a solution at ``factors`` (the least
    found), is INFEASIBLE (``factors``: the loosest tried, every target past LOOSEST_TARGET_S) or
    neither (the time limit)."""

    status: SolveStatus
    factors: dict[TargetKey, float]


def least_target_factors(
    targets: list[tuple[TargetKey, str, float]],
    status_at: Callable[[Mapping[TargetKey, float]], SolveStatus],
    *,
    shrink_max: int = SHRINK_TARGETS_MAX,
    first: float = TARGET_FACTOR_STEP,
    tolerance: float = TARGET_TOLERANCE,
    known: Mapping[TargetKey, float] | None = None,
) -> TargetSearch:
    """The least factors on the p95 targets at which ``status_at`` finds a solution.

    Every target is multiplied by a common factor f: f = ``first``, then 64 times more each step, until
    it has one (or every target is past LOOSEST_TARGET_S), then f is bisected inside that bracket until
    its ends are within a factor ``tolerance``. Targets that can then
    go back to their stated value are given back (a workload at a time, then a target at a time),
    and each of the first ``shrink_max`` targets still relaxed is bisected down on its own, the
    others held: the change names only the targets that must move, each about as little as it must
    (an unreachable TTFT does not drag the end-to-end target along; a TPOT target does not stay at
    f times its value when the end-to-end target already implies it). Lowering one target only makes
    the others harder, so one pass in a fixed order ends at a point where no single target can be
    tightened further.

    ``known``: factors at which a solution is known to exist without probing (every target's; a
    design's p95s at its ceiling rates over the targets). Only the targets it loosens move; the
    bracket is [1, the largest of them] when that is below ``first``, and nothing is probed at its top
    unless the search ends there.
    """
    moving = [t for t in targets if known is None or known.get(t[0], math.inf) > 1.0]
    known_top = max((known.get(k, math.inf) for k, _, _ in moving), default=math.inf) if known else math.inf
    if not moving or not math.isfinite(known_top):
        moving, known_top = targets, math.inf

    def common(f: float) -> dict[TargetKey, float]:
        return {k: (f if any(k == m for m, _, _ in moving) else 1.0) for k, _, _ in targets}

    tightest = min(v for _, _, v in moving)
    lo, hi = 1.0, first
    if known_top < first:
        hi = known_top * (1.0 + KNOWN_MARGIN)  # a solution is known there: no probe
    else:
        while not status_at(common(hi)).has_solution:
            if status_at(common(hi)) is not SolveStatus.INFEASIBLE:
                return TargetSearch(status_at(common(hi)), common(hi))
            if tightest * hi >= LOOSEST_TARGET_S:
                return TargetSearch(SolveStatus.INFEASIBLE, common(hi))
            lo, hi = hi, hi * TARGET_FACTOR_STEP
    steps = _halvings(hi / lo, tolerance)
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        if status_at(common(mid)).has_solution:
            hi = mid
        else:
            lo = mid
    factors = common(hi)

    def others_relaxed(keys: set[TargetKey]) -> bool:
        """Some target outside ``keys`` stays relaxed: else holding ``keys`` lower is known infeasible."""
        return any(f != 1.0 for k, f in factors.items() if k not in keys)

    def give_back(keys: set[TargetKey]) -> bool:
        nonlocal factors
        trial = {k: (1.0 if k in keys else f) for k, f in factors.items()}
        if trial == factors or not others_relaxed(keys):
            return False
        if status_at(trial).has_solution:
            factors = trial
            return True
        return False

    workloads = sorted({k[0] for k, _, _ in targets})
    if len(workloads) > 1:
        for w in workloads:
            give_back({k for k, _, _ in targets if k[0] == w})
    shrunk = 0
    for k, _, _ in targets:
        if factors[k] == 1.0 or give_back({k}) or not others_relaxed({k}) or shrunk >= shrink_max:
            continue
        shrunk += 1
        k_lo, k_hi = 1.0, factors[k]
        for _ in range(_halvings(k_hi, tolerance)):
            mid = math.sqrt(k_lo * k_hi)
            if status_at({**factors, k: mid}).has_solution:
                k_hi = mid
            else:
                k_lo = mid
        factors = {**factors, k: k_hi}
    return TargetSearch(status_at(factors), factors)


def simulated_first(plan: Plan) -> Design | None:
    """Design 1 of ``plan`` (what planning at moved targets returns, :class:`Verify`) where the scheduler simulation
    does not reject it; None where planning returned no design, or design 1 misses a p95 target simulated (the
    re-search found nothing the simulation admits, and ``solve`` states the miss)."""
    if not plan.designs or plan.designs[0].simulation_misses:
        return None
    return plan.designs[0]


def verified_search(
    found: TargetSearch,
    search: Callable[[StatusAt], TargetSearch],
    status_at: StatusAt,
    admits: Callable[[Mapping[TargetKey, float]], bool],
    spent: Callable[[], bool],
) -> TargetSearch:
    """``found`` (``search`` run on the analytical probe ``status_at``) where planning at its factors, the scheduler
    simulation's re-search included, admits a design (``admits``); else ``search`` again with each probe so checked:
    the analytical probe first (no design there: none once the simulation holds rows either), then ``admits`` where
    it has one. A probe the simulation rejects is INFEASIBLE, or UNKNOWN once the time limit is ``spent`` (planning
    there was cut short). The infeasibility analysis's relaxation and a trade both search this way."""
    admitted: dict[tuple[tuple[TargetKey, float], ...], bool] = {}

    def verified_status(factors: Mapping[TargetKey, float]) -> SolveStatus:
        status = status_at(factors)
        k = tuple(sorted(factors.items()))
        if status.has_solution and k not in admitted:
            admitted[k] = admits(factors)
        if not status.has_solution or admitted[k]:
            return status
        return SolveStatus.UNKNOWN if spent() else SolveStatus.INFEASIBLE

    if not found.status.has_solution or verified_status(found.factors).has_solution:
        return found
    return search(verified_status)


def _unverified(
    planner: Planner,
    fid: str,
    targets: list[tuple[TargetKey, str, float]],
    factors: Mapping[TargetKey, float],
    status: SolveStatus,
) -> Relaxation:
    """The analytical model's least targets (``factors``), which planning there did not confirm: the simulation
    rejects every design up to the loosest targets (``status`` INFEASIBLE), or the time limit stopped the check."""
    code: Literal["time_limit", "simulation_rejects"] = (
        "simulation_rejects" if status is SolveStatus.INFEASIBLE else "time_limit"
    )
    return Relaxation(
        family=fid,
        change=unverified_relaxation(code, target_change(targets, factors, ">="), planner.settings.time_limit_s),
        value=round(max(factors.values()), 3),
        unit="x targets",
        restores_feasibility=False,
        unverified=code,
    )


def _halvings(ratio: float, tolerance: float) -> int:
    """Bisections of a bracket [lo, lo x ratio] in log space until its ends are within ``tolerance``."""
    if ratio <= tolerance:
        return 0
    return math.ceil(math.log2(math.log(ratio) / math.log(tolerance)) - 1e-9)


def target_change(targets: list[tuple[TargetKey, str, float]], factors: Mapping[TargetKey, float], op: str) -> str:
    """The targets that move, each rounded up to 3 significant figures: 'chat: p95_latency >= 7.6s'
    (``op`` '>='), or 'chat: p95_latency 5s → 7.6s' (``op`` '→')."""
    parts = []
    for k, name, value in targets:
        if factors.get(k, 1.0) == 1.0:
            continue
        to = f"{fmt.up_3sf(value * factors[k])}s"
        parts.append(f"{name}: {k[1]} >= {to}" if op == ">=" else f"{name}: {k[1]} {value:g}s → {to}")
    return "; ".join(parts)


def _targets_not_enough(
    planner: Planner, fid: str, retarget: Retarget, factors: Mapping[TargetKey, float]
) -> Relaxation:
    """No p95 target restores feasibility: say what still conflicts with every target past an hour."""
    loose = Planner(retarget(factors), objective=planner.objective, settings=planner.settings, budget=planner.meter())
    status, rest = find_conflict(loose)
    lead = f"relaxing the p95 targets alone is not enough (even at {LOOSEST_TARGET_S / 3600:g} h or more each)"
    return _still_conflicts(fid, lead, "them", status, rest)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def analyse(planner: Planner, *, retarget: Retarget | None = None, verify: Verify | None = None) -> Infeasibility:
    """The infeasibility report of a requirement whose primary solve was proven infeasible (``verify``: what planning
    at moved p95 targets returns, so a target relaxation is one ``solve`` confirms)."""
    table = planner.table
    unplaceable = unplaceable_workloads(table)
    if unplaceable:
        return unplaceable_report(unplaceable)
    causes = real_causes(planner)
    status, conflict = find_conflict(planner)
    if status is not SolveStatus.INFEASIBLE:
        return Infeasibility(
            conflict=[],
            relaxations=[],
            unplaceable=[],
            text="the conflict analysis ran out of time before proving which constraints conflict",
        )
    if not conflict:
        # Nothing to relax: the causes found before the conflict search are the whole answer, where there are any.
        return Infeasibility(
            conflict=[],
            relaxations=[],
            unplaceable=[],
            causes=causes.sentences,
            text=" ".join(_sentence(c) for c in causes.sentences)
            or "no design exists even with every stated constraint relaxed",
        )
    refs = [FamilyRef(id=f, title=family(f).title, sentence=family(f).sentence) for f in conflict]
    relax = [least_relaxation(planner, f, retarget=retarget, verify=verify) for f in conflict]
    if causes.sentences and not all(r.restores_feasibility for r in relax):
        # No member of the minimal set alone restores feasibility: the causes, and the change to all of
        # them together, instead of a set whose every relaxation is "not enough".
        said = [*causes.sentences, _fix(planner, causes.off)]
        return Infeasibility(
            conflict=[], relaxations=[], unplaceable=[], causes=said, text=" ".join(_sentence(c) for c in said)
        )
    text = "these requirements cannot all hold: " + "; ".join(r.title for r in refs) + "."
    fixes = [r.change for r in relax if r.restores_feasibility]
    if fixes:
        text += " Any one of these changes restores feasibility: " + "; ".join(fixes)
    else:
        text += " " + " ".join(_sentence(r.change) for r in relax)
    if planner.meter().spent():
        text += " The time limit stopped this analysis: the conflict may not be minimal; raise --time-limit."
    if causes.sentences:
        text = " ".join(_sentence(c) for c in causes.sentences) + " " + text[:1].upper() + text[1:]
    return Infeasibility(conflict=refs, relaxations=relax, unplaceable=[], causes=causes.sentences, text=text)


@dataclass(frozen=True)
class Causes:
    """What :func:`real_causes` found: the sentences, and the families to change to remove them."""

    sentences: list[str]
    off: set[str]


def real_causes(planner: Planner) -> Causes:
    """The real causes, said before any conflict: a workload fits no layout the requirement allows
    (GPU types, precisions, NVLink, how GPUs may be obtained), or the budget alone buys nothing that
    runs it (not even one replica of anything on any GPU, every other constraint relaxed)."""
    table = planner.table
    usable = usable_gpus(table)
    sentences = [
        _no_allowed_layout(table, wc, usable) for wc in table.workloads if not _allowed_rows(table, wc, usable)
    ]
    off: set[str] = set()
    if sentences:
        obtain = {f for o in table.offerings for f, _ in o.forbidden_by}
        off = {f for f in planner.families if family(f).layout_rule or f in obtain}
    budgets = [f for f in planner.families if family(f).spending_cap]
    if budgets and planner.feasible(budgets) is SolveStatus.INFEASIBLE:
        # Every other family off: the cheapest design that runs each workload at all (one replica).
        least = planner.solve(goal=Goal.MIN_TOTAL, on=[])
        spent = (
            f": the cheapest design that runs {_workloads(table)} at all (every other constraint relaxed) "
            f"is {_design(table, least.solution)} at {_costs(least.solution)}"
            if least.solution is not None
            else ""
        )
        sentences.append(f"the budget ({_budget_limits(table)}) buys nothing that runs it{spent}")
        off |= set(budgets)
    return Causes(sentences, off)


def _allowed_rows(table: CandidateTable, wc: WorkloadCandidates, usable: list[str]) -> bool:
    """Every side of a request of ``wc`` (one, or prefill and decode where it has pool rows) has a candidate that
    runs on a GPU the requirement lets a plan obtain, in a layout its layout rules (GPU types, precisions, NVLink)
    allow (a disaggregated workload whose prefill rows were all ruled out, e.g. ``kv_stream_over_link``, has none)."""

    def allowed(row: ServingRow | TrainingRow) -> bool:
        return row.gpu_id in usable and not any(family(f).layout_rule for f in row.forbidding_families)

    if not wc.is_serving:
        return any(allowed(row) for row in wc.rows)
    return all(any(allowed(row) and row.serves(side) for row in wc.serving_rows()) for side in wc.sides())


def _closest(table: CandidateTable, usable: list[str]) -> list[str]:
    """The GPUs ``usable`` (all if none), largest memory first: the closest to fitting."""
    return sorted(usable or table.gpus, key=lambda g: (-table.gpus[g].memory_gib, g))


def _closest_reasons(table: CandidateTable, wc: WorkloadCandidates, usable: list[str]) -> list[Reason]:
    """The most common reason ``wc`` cannot run on each GPU it may use, closest first, up to
    EXAMPLE_REASONS distinct ones; unobtainable GPUs (AVAILABILITY) do not count."""
    found: list[Reason] = []
    for gid in _closest(table, usable):
        e = most_common_reason([x for x in wc.exclusions if x.family != AVAILABILITY], gid)
        if e is not None and e.reason not in found:
            found.append(e.reason)
        if len(found) == EXAMPLE_REASONS:
            break
    return found


def _no_allowed_layout(table: CandidateTable, wc: WorkloadCandidates, usable: list[str]) -> str:
    """Why ``wc`` fits no allowed layout: the closest reason on the GPUs it may use, and which GPUs it
    does fit on (ruled out by the requirement)."""
    what = wc.model_name or "it"
    found = _closest_reasons(table, wc, usable)
    reasons = render_reasons(found)
    listed = ", ".join(usable) if len(usable) <= LISTED_GPUS else f"{len(usable)} types"
    head = f"{wc.name}: {what} does not fit any allowed layout on the GPUs the requirement allows ({listed})"
    if not usable:
        head = (
            f"{wc.name}: {what} does not fit any allowed layout: no GPU the requirement allows can be obtained "
            "(allowed_gpus, deployment, clouds and regions)"
        )
    if reasons:
        head += f" (closest: {reasons[0]})"
    fits = sorted({r.gpu_id for r in wc.rows})
    if fits:
        shown = ", ".join(fits[:LISTED_GPUS]) + (
            f" and {len(fits) - LISTED_GPUS} more" if len(fits) > LISTED_GPUS else ""
        )
        head += f"; it fits on {shown}"
    return head


def _workloads(table: CandidateTable) -> str:
    return _and([wc.model_name or wc.name for wc in table.workloads])


def _design(table: CandidateTable, sol: Solution) -> str:
    return summary_text(table, hardware_lines(table, sol))


def _costs(sol: Solution) -> str:
    return (
        f"capital {fmt.usd_exact(sol.capital_cents / 100)}, monthly {fmt.usd_exact(sol.monthly_cents / 100)}, "
        f"total {fmt.usd_exact(sol.total_cents / 100)}"
    )


def _budget_limits(table: CandidateTable) -> str:
    lim = table.limits
    parts = [
        f"{name} {fmt.usd_exact(v)}"
        for name, v in (
            ("budget.capital", lim.budget_capital_usd),
            ("budget.monthly", lim.budget_monthly_usd),
            ("budget.total", lim.budget_total_usd),
        )
        if v is not None
    ]
    return ", ".join(parts)


def _restores(changes: list[str]) -> str:
    """The changes and "restore(s) feasibility", the verb agreeing with how many changes there are (not with
    the words: one change may say "and")."""
    return f"{_and(changes)} restore{'s' if len(changes) == 1 else ''} feasibility"


def _fix(planner: Planner, off: set[str]) -> str:
    """What restores feasibility once the families of ``off`` (the causes) are changed: the cheapest
    design meeting every other stated constraint, or what still conflicts."""
    table = planner.table
    changes = (
        ["allowing a GPU type, precision or layout it fits"] if any(family(f).layout_rule for f in off) else []
    ) + (["a budget that covers it"] if any(family(f).spending_cap for f in off) else [])
    what = _and(changes)
    out = planner.solve(goal=Goal.MIN_TOTAL, on=[f for f in planner.families if f not in off])
    if out.solution is not None:
        sol = out.solution
        design = f"{_design(table, sol)} at {_costs(sol)}"
        return f"{_restores(changes)}: the cheapest design meeting every other constraint is {design}"
    status, rest = still_conflicting(planner, off)
    if rest:
        return f"with {what}, {_rest_clause(rest)}"
    if status is SolveStatus.INFEASIBLE:
        return f"even with {what}, no design meets the other stated constraints"
    return f"whether {what} restores feasibility was not found within the time limit"


def unplaceable_report(reasons: list[str]) -> Infeasibility:
    """The report when physics rules out every candidate of some workload: nothing to model or relax."""
    return Infeasibility(
        conflict=[], relaxations=[], unplaceable=reasons, text="no candidate can run: " + "; ".join(reasons)
    )


# GPU ids listed by name in a "none of the GPUs it may use (...)" sentence; more are counted.
LISTED_GPUS = 8
EXAMPLE_REASONS = 2


def usable_gpus(table: CandidateTable) -> list[str]:
    """GPU types the requirement lets a plan use: in allowed_gpus (less excluded_gpus) and obtainable
    under its deployment, clouds, regions and pricing (an offering no family forbids: a cloud
    instance, or an owned server that can be bought or is in inventory)."""
    allowed = table.limits.allowed_gpus
    out = []
    for gid in sorted(table.gpus):
        if allowed is not None and gid not in allowed:
            continue
        if any(
            not o.forbidden_by and (o.kind == "cloud" or o.purchasable or o.inventory_units)
            for o in table.offerings_of(gid)
        ):
            out.append(gid)
    return out


def unplaceable_workloads(table: CandidateTable) -> list[str]:
    """Workloads with no candidate row at all, and why: physics rules out every GPU type the
    requirement lets them use (the closest ones as examples), and which ruled-out GPUs could run them.

    Only the GPUs the requirement allows are reasoned about: a GPU it already excluded
    (allowed_gpus, deployment, clouds, regions) is no example of why nothing fits.
    """
    usable = usable_gpus(table)
    out = []
    for wc in table.workloads:
        if wc.rows:
            continue
        out.append(_unplaceable(table, wc, usable))
    return out


def _unplaceable(table: CandidateTable, wc: WorkloadCandidates, usable: list[str]) -> str:
    what = wc.model_name or "it"
    # GPUs physics admits that cannot be obtained had their rows dropped (availability): they could.
    could = sorted({e.gpu_id for e in wc.exclusions if e.family == AVAILABILITY})
    found = _closest_reasons(table, wc, usable)
    if not found:  # no reason recorded (a synthetic table): the most common ones
        found = [r for r, _ in Counter(e.reason for e in wc.exclusions).most_common(EXAMPLE_REASONS)]
    reasons = render_reasons(found)
    examples = f" (e.g. {'; '.join(reasons)})" if reasons else ""
    # Restricted: allowed_gpus is set, or a GPU that can be had some way is not one it may use.
    restricted = table.limits.allowed_gpus is not None or set(usable) != {o.gpu_id for o in table.offerings}
    if not usable:
        head = "no GPU the requirement allows can be obtained (allowed_gpus, deployment, clouds and regions)"
        if not could:
            head += f", and no other GPU can run {what} either{examples}"
    elif not restricted:
        head = f"no GPU can run {what}{examples}"
    else:
        listed = (
            ", ".join(usable)
            if len(usable) <= LISTED_GPUS
            else f"{len(usable)} types, e.g. {', '.join(_closest(table, usable)[:3])}"
        )
        closest_reason = f" (closest: {reasons[0]})" if reasons else ""
        head = f"none of the GPUs the requirement allows ({listed}) can run {what}{closest_reason}"
        if not could:
            head += ", and no other GPU in the catalog can either"
    if could:
        head += "; GPUs that could run it but are ruled out: " + "; ".join(_why_out(table, wc, g) for g in could)
    return f"{wc.name}: {head}"


def _why_out(table: CandidateTable, wc: WorkloadCandidates, gid: str) -> str:
    """Why a GPU that physics admits is out of reach: allowed_gpus, and how it could be obtained."""
    why = []
    allowed = table.limits.allowed_gpus
    if allowed is not None and gid not in allowed:
        why.append("not in constraints.allowed_gpus")
    for e in wc.exclusions:
        if e.gpu_id == gid and e.family == AVAILABILITY:
            why.append(render_predicate(e.reason))  # the line names the GPU already
            break
    return f"{gid} ({'; '.join(why)})" if why else gid
