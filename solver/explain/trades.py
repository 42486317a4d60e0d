""" "To what": each binding family's marginal trade, the least move of it that admits a cheaper design.

Switching a family off gives an upper bound on what relaxing it is worth (``binding``); a reviewer
needs the smallest change that buys a cheaper design, and that design. For a binding family of a
min-cost plan with best total B (cents):

* **read off the design** (``Family.trade_of``, no solve): e.g. inventory, whose servers bought would
  save their purchase price had they been owned already;
* **a numeric relaxation goal** (capital, monthly, GPUs, power, training time over deadline, served
  demand): minimise that goal with the family off and total <= B - 1 cent (the least move admitting a
  cheaper design), then the cheapest design with the goal held at that move: two solves;
* **p95 targets** (``by_targets``, with a retargeting function): the least common factor on the
  targets at which a design cheaper than B exists, by the infeasibility analysis's target search
  (each probe rebuilds the serving candidates and solves min-cost with total <= B - 1 cent; the
  targets first loosened 2x, bisected to within 5%), then every target that need not move given
  back; no per-target bisection, to keep the rebuilds few (about six on the 70B example). A probe's
  table leaves out the serving rows whose cost floor is over the best total (candidates/serving.CostCap:
  on the 70B example ~40 rows of ~150, each rebuild a third of the time) and rounds rates at the plan's
  resolution; the trade's design is then solved on the whole table at the factors found;
* **categorical** (the relaxation goal is the total itself: deployment, allowed GPUs or
  quantizations, NVLink, N+k): the move is the family's own change at the switched-off optimum.

Where the search finds nothing (or the time limit stops it), the trade is the switched-off optimum,
marked ``least=False``. The explainer never branches on family ids: each family's module says what its
move is in the requirement's words (``Relaxing.at``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from clusterplan.candidates.table import CandidateTable
from clusterplan.explain.designs import costs_of, hardware_lines, summary_text
from clusterplan.explain.infeasibility import (
    TARGET_FIELDS,
    Retarget,
    TargetKey,
    TargetSearch,
    Verify,
    least_target_factors,
    relaxed_at,
    serving_targets,
    simulated_first,
    target_change,
    verified_search,
)
from clusterplan.plan import ConstraintCheck, Plan, Trade
from clusterplan.planner.families import Relaxing, family
from clusterplan.planner.families.facts import NotEnough, TradeRead
from clusterplan.planner.families.goals import Bound, Goal
from clusterplan.planner.ranking import PRIMARY_GOAL
from clusterplan.planner.solve import Outcome, Planner, Solution
from clusterplan.planner.status import SolveStatus

# The target search of a trade: targets first loosened 2x (a cheaper design is usually that close),
# bisected to within 5% (4 rebuilds of the serving candidates from a 2x bracket; 7 from a 64x one).
TRADE_FIRST_FACTOR = 2.0
TRADE_TOLERANCE = 1.05


def read_trade(table: CandidateTable, best: Solution, read: TradeRead) -> Trade:
    """A trade a family reads off the best design: the same design, ``read.saving_usd`` cheaper."""
    total = best.total_cents / 100.0
    return Trade(
        change=read.change,
        total_usd=total - read.saving_usd,
        saving_usd=read.saving_usd,
        design=summary_text(table, hardware_lines(table, best)),
        least=True,
    )


def with_trade(
    planner: Planner,
    best: Outcome,
    check: ConstraintCheck,
    relaxed: Outcome | None,
    retarget: Retarget | None,
    verify: Verify | None = None,
) -> ConstraintCheck:
    """``check`` with its trade, when it binds a min-cost plan and has none yet (``verify``: see :func:`trade`)."""
    if check.status != "binding" or check.trade is not None or relaxed is None:
        return check
    if PRIMARY_GOAL[planner.objective] is not Goal.MIN_TOTAL:
        return check  # a trade is priced in dollars: min-cost plans only
    t = trade(planner, best, check.family, relaxed, retarget, verify)
    return check if t is None else check.model_copy(update={"trade": t})


def trade(
    planner: Planner,
    best: Outcome,
    fid: str,
    relaxed: Outcome,
    retarget: Retarget | None,
    verify: Verify | None = None,
) -> Trade | None:
    """The least move of binding family ``fid`` that admits a design cheaper than ``best``. ``verify``: what planning
    at moved p95 targets returns (the scheduler simulation's re-search included); a target trade is then that plan's
    design 1, and none where that is no cheaper than ``best`` (the simulation rejects what the analytical search
    found)."""
    r = family(fid).relaxation
    assert r is not None and best.solution is not None
    if r.by_targets and retarget is not None:
        searched, found = _target_trade(planner, best.solution, retarget, relaxed, verify)
        if searched:
            return found
    elif r.goal is not Goal.MIN_TOTAL:
        found = _least_move(planner, best.solution, fid, r)
        if found is not None:
            return found
    return _switched_off(planner, best.solution, fid, r, relaxed, least=not r.by_targets)


def _cheaper(best: Solution) -> Bound:
    """Total strictly below the best design's (in the model's whole cents)."""
    return Bound(Goal.MIN_TOTAL, best.total_cents - 1)


def _trade(table: CandidateTable, best: Solution, sol: Solution, change: str, *, least: bool) -> Trade:
    return Trade(
        change=change,
        total_usd=sol.total_cents / 100.0,
        saving_usd=(best.total_cents - sol.total_cents) / 100.0,
        design=summary_text(table, hardware_lines(table, sol)),
        least=least,
    )


def _at(planner: Planner, fid: str, r: Relaxing, value: float, sol: Solution) -> str | None:
    """The family's own words for the move that ``value`` (its relaxation goal, at ``sol``) stands for."""
    at = relaxed_at(planner, fid, value, sol)
    rel = r.at(at)
    return None if isinstance(rel, NotEnough) or not rel.restores_feasibility else rel.change


def _switched_off(
    planner: Planner, best: Solution, fid: str, r: Relaxing, relaxed: Outcome, *, least: bool
) -> Trade | None:
    """The switched-off optimum as the trade (categorical families; the fallback of the searches)."""
    if relaxed.solution is None or relaxed.objective is None:
        return None
    sol = relaxed.solution
    # The relaxed optimum minimised the total, not the family's own goal: read that goal off the design.
    value = relaxed.objective if r.goal is Goal.MIN_TOTAL else _goal_value(planner, relaxed, r.goal)
    change = _at(planner, fid, r, value, sol) if value is not None else None
    if change is None:
        return None
    return _trade(planner.table, best, sol, change, least=least)


def _goal_value(planner: Planner, out: Outcome, goal: Goal) -> float | None:
    """The value of ``goal``'s aggregate in ``out``'s solution (None: not recorded)."""
    var = goal.variable(planner.v)
    return float(out.values[var.index]) if out.values and var.index < len(out.values) else None


def _least_move(planner: Planner, best: Solution, fid: str, r: Relaxing) -> Trade | None:
    """Two solves, ``fid`` off: the least value of its relaxation goal with the total below the best's,
    then the cheapest design with the goal held there."""
    on = [f for f in planner.families if f != fid]
    first = planner.solve(goal=r.goal, on=on, bounds=[_cheaper(best)])
    if not first.status.has_solution or first.objective is None or first.solution is None:
        return None
    value = round(first.objective)
    second = planner.solve(goal=Goal.MIN_TOTAL, on=on, bounds=[Bound(r.goal, value)], hint=first)
    sol = second.solution if second.status.has_solution and second.solution is not None else first.solution
    change = _at(planner, fid, r, value, sol)
    if change is None:
        return None
    return _trade(planner.table, best, sol, change, least=first.status is SolveStatus.OPTIMAL)


def _known_factors(
    table: CandidateTable, targets: list[tuple[TargetKey, str, float]], relaxed: Outcome
) -> dict[TargetKey, float] | None:
    """Per target, the factor at which the relaxed design (the targets off) meets it with every replica
    at its ceiling rate: its p95 there over the target. The relaxed design is cheaper than the best, so
    a cheaper design is known to exist at these factors without a probe. None: no relaxed design."""
    if relaxed.solution is None:
        return None
    known = {k: 1.0 for k, _, _ in targets}
    ceiling = dict(zip(TARGET_FIELDS, ("ceiling_p95_e2e_s", "ceiling_p95_ttft_s", "ceiling_p95_tpot_s"), strict=True))
    for a in relaxed.solution.serving:
        if a.replicas <= 0:
            continue
        row = table.workloads[a.workload].rows[a.row]
        for (w, field), _, target_s in targets:
            if w == a.workload:
                known[(w, field)] = max(known[(w, field)], getattr(row, ceiling[field]) / target_s)
    return known


def at_resolution(table: CandidateTable, planner: Planner) -> CandidateTable:
    """``table`` with each serving workload's rates in ``planner``'s integer units: a probe's answer (is a design
    cheaper than the plan's there?) then does not hang on which rows the probe kept (the smallest rate of a
    table sets its resolution, planner/scaling.rate_exponent), and a row the probe left out changes nothing."""
    scales = planner.v.scales
    return replace(
        table,
        workloads=tuple(
            replace(wc, rate_exponent=scales[wc.index].exponent) if wc.is_serving else wc for wc in table.workloads
        ),
    )


def _verified(planner: Planner, best: Solution, change: str, plan: Plan) -> Trade | None:
    """The trade as planning at the moved targets returns it (``plan``: its design 1), when the scheduler simulation
    does not reject that design and it is cheaper than ``best`` (both priced by the same path, to the cent); None:
    it is not."""
    d = simulated_first(plan)
    if d is None:
        return None
    best_usd = costs_of(planner.table, best, hardware_lines(planner.table, best)).total_usd
    saving_usd = round(best_usd - d.costs.total_usd, 2)
    if saving_usd < 0.01:
        return None
    least = plan.status == SolveStatus.OPTIMAL.value
    total_usd = round(d.costs.total_usd, 2)  # to the cent, as the best design's total is compared
    return Trade(change=change, total_usd=total_usd, saving_usd=saving_usd, design=d.summary, least=least)


def _target_trade(
    planner: Planner, best: Solution, retarget: Retarget, relaxed: Outcome, verify: Verify | None
) -> tuple[bool, Trade | None]:
    """The least common factor on the p95 targets that admits a cheaper design, targets that need not
    move given back (each probe: rebuild the serving candidates, min-cost solve with total < best). The
    relaxed design's p95s at its ceiling rates bound the search from above and name the targets that
    must move at all. With ``verify``, the design at the factors found is what planning there returns
    (one plan, the simulation's re-search included), the trade only where that is cheaper.

    Returns whether the search found such factors, and the trade."""
    targets = serving_targets(planner.table)
    if not targets:
        return False, None
    probes: dict[tuple[tuple[TargetKey, float], ...], tuple[Planner, Outcome]] = {}

    def key(factors: Mapping[TargetKey, float]) -> tuple[tuple[TargetKey, float], ...]:
        return tuple(sorted(factors.items()))

    # Each probe asks only whether a design cheaper than the best exists, so its table leaves out the rows
    # no such design can use (CostCap: the same answer from a smaller rebuild, model and solve).
    max_usd = (best.total_cents - 1) / 100.0

    def probe(factors: Mapping[TargetKey, float], cap: float | None) -> tuple[Planner, Outcome]:
        table = at_resolution(retarget(factors, max_usd=cap), planner)
        p = Planner(table, objective=planner.objective, settings=planner.settings, budget=planner.meter())
        return p, p.solve(goal=Goal.MIN_TOTAL, bounds=[_cheaper(best)])

    def status_at(factors: Mapping[TargetKey, float]) -> SolveStatus:
        k = key(factors)
        if k not in probes:
            if planner.meter().spent():
                return SolveStatus.UNKNOWN
            probes[k] = probe(factors, max_usd)
        return probes[k][1].status

    def search(status: Callable[[Mapping[TargetKey, float]], SolveStatus]) -> TargetSearch:
        return least_target_factors(
            targets,
            status,
            shrink_max=0,
            first=TRADE_FIRST_FACTOR,
            tolerance=TRADE_TOLERANCE,
            known=_known_factors(planner.table, targets, relaxed),
        )

    found = search(status_at)
    if not found.status.has_solution:
        return False, None
    if verify is not None:
        # The analytical search's factors planned (design 1 alone); where the simulation rejects every cheaper design
        # there, the search again with each cheaper design it finds so planned. The factors found: planned as solve
        # plans them, the trade only where that is cheaper.
        found = verified_search(
            found,
            search,
            status_at,
            lambda factors: (
                _verified(planner, best, "", verify(factors, first_only=True, meter=planner.meter())) is not None
            ),
            lambda: planner.meter().spent(),
        )
        if not found.status.has_solution:
            return True, None
        plan = verify(found.factors, meter=planner.meter())
        return True, _verified(planner, best, target_change(targets, found.factors, "→"), plan)
    change = target_change(targets, found.factors, "→")
    # The trade's design from the whole table at the factors found (among equally cheap designs, the one a
    # solve of the whole table returns: what the plan showed before the probes were cut down).
    p, out = probe(found.factors, None)
    if out.solution is None:  # the time limit stopped this solve: the probe's own design
        p, out = probes[key(found.factors)]
    assert out.solution is not None
    return True, _trade(p.table, best, out.solution, change, least=out.status is SolveStatus.OPTIMAL)
