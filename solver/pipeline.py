"""Requirement in, :class:`clusterplan.plan.Plan` out: prepare, model, solve, explain.

``plan_table`` works on any candidate table (synthetic ones in tests and benchmarks);
``plan_requirement`` builds the table from a resolved requirement and the catalog first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from clusterplan.candidates.build import CandidateCache, build_candidates
from clusterplan.candidates.table import CandidateTable
from clusterplan.evaluation import simulated
from clusterplan.evaluation.provisional import with_provisional
from clusterplan.evaluation.simulated import HeldLoad, with_simulation
from clusterplan.evaluation.uncertainty import with_odds
from clusterplan.explain import designs as report
from clusterplan.explain import disagg
from clusterplan.explain.binding import constraint_checks, explain
from clusterplan.explain.contradictions import contradictions
from clusterplan.explain.infeasibility import (
    TARGET_FIELDS,
    Retarget,
    TargetKey,
    Verify,
    analyse,
    find_conflict,
    unplaceable_report,
    unplaceable_workloads,
)
from clusterplan.plan import (
    DisaggregationNote,
    Explanation,
    FamilyRef,
    Infeasibility,
    Plan,
    PrecisionGate,
    QualityEvidence,
    RequirementRef,
    SimulatedMiss,
    SimulatedRejection,
    SolverInfo,
)
from clusterplan.planner.budget import Meter, Share, TimeBudget
from clusterplan.planner.builder import OBJECTIVES
from clusterplan.planner.families import family, latency
from clusterplan.planner.ranking import Ranked, add_variants, extended, rank_designs_and
from clusterplan.planner.solve import Outcome, Planner, SolverSettings
from clusterplan.planner.status import SolveStatus, relative_gap

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.requirement.load import ResolvedRequirement


@dataclass(frozen=True)
class PlanOptions:
    """How to plan. ``explain`` says how much of the why to work out (each part costs solves):

    * ``True``: the whole :class:`clusterplan.plan.Explanation` of the best design (binding families
      with their relaxed optimum, cheaper GPU types that lost, mixes); when infeasible, a minimal
      conflict and the least relaxation of each member.
    * ``"binding"``: only which families bind the best design (its constraint checks, no
      ``explanation``); when infeasible, the minimal conflict without relaxations and a one-line
      ``text``. What one row of a what-if sweep shows.
    * ``False``: margins only; when infeasible, the same analysis as ``True``.
    * ``"design"``: margins only, and no analysis when infeasible (``infeasibility`` is None): which
      design is optimal, and nothing else. What the bisection of a sweep's switch point plans with.

    Neither ``"binding"`` nor ``"design"`` works out ``disaggregation`` (the cheapest design of the other
    serving kind, often one more solve): a sweep row and an exported design do not show it.

    ``annotate``: each design's odds of meeting its targets, its replicas' simulated misses and the provisional
    catalog figures it rests on (False: left empty; a what-if sweep row or frontier point shows none of them).

    ``variants``: each design's other layouts on the same hardware (``also_runs_as``, two solves a design; False:
    left empty, as a what-if sweep row or frontier point shows none).
    """

    top: int = 5
    objective: str = "min_cost"
    explain: bool | Literal["binding", "design"] = True
    settings: SolverSettings = field(default_factory=SolverSettings)
    annotate: bool = True
    variants: bool = True


@dataclass
class Timings:
    """Wall times, seconds (kept out of the plan so its JSON stays byte-identical run to run)."""

    candidates_s: float = 0.0
    build_s: float = 0.0
    solver_s: float = 0.0
    total_s: float = 0.0
    solves: int = 0


OBJECTIVE_UNITS = {"min_cost": "US cents", "max_throughput": "ppm of peak demand", "min_latency": "ms"}


def _status(s: SolveStatus) -> str:
    return s.value if s is not SolveStatus.MODEL_INVALID else "unknown"


@dataclass(frozen=True)
class _Ranked:
    """One table's planner and its ranked designs (``explanation``: of design 1, where worked out beside them)."""

    table: CandidateTable
    planner: Planner
    ranked: Ranked
    explanation: Explanation | None
    variants: bool  # the designs' other layouts looked for
    counted: tuple[float, float, int] = (0.0, 0.0, 0)  # the planner's build s, solve s and solves already in Timings


class Rankings:
    """The designs-only rankings of one command's tables (``explain="design"``), by table: planning a table again
    with only ``explain`` changed (the simulation search's last table, planned as asked) explains the ranking
    already made instead of ranking it again. The same designs: a ranking depends on the table, ``top``, the
    objective and the solver settings, and on nothing ``explain`` or ``variants`` sets (``rank_designs_and``: the
    ranking with an explanation beside it is the ranking without; the other layouts of each design are looked for
    after the ranking, and are then added)."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[tuple[object, ...], _Ranked]] = {}

    @staticmethod
    def _key(opts: PlanOptions) -> tuple[object, ...]:
        return (opts.top, opts.objective, opts.settings)

    def keep(self, opts: PlanOptions, made: _Ranked) -> None:
        self._made[id(made.table)] = (self._key(opts), made)

    def take(self, table: CandidateTable, opts: PlanOptions) -> _Ranked | None:
        """The ranking kept of ``table`` (this very table) with ``opts``' ranking settings, once; None: none. A
        ranking of one design kept where more are asked is extended (:func:`~clusterplan.planner.ranking.extended`: a
        trade's verification plans design 1 first, then the whole ranking at the same targets)."""
        entry = self._made.get(id(table))
        if entry is None or entry[1].table is not table:
            return None
        key, made = entry
        if key != self._key(opts):
            if key != self._key(replace(opts, top=1)) or made.variants:
                return None
            made = replace(made, ranked=extended(made.planner, made.ranked, top=opts.top))
        del self._made[id(table)]
        return made


@dataclass(frozen=True)
class _Context:
    """What planning one table needs besides the table and the options (see :func:`plan_table`)."""

    file: str = ""
    catalog_fingerprint: str = ""
    retarget: Retarget | None = None
    timings: Timings | None = None
    budget: Meter | None = None  # the command's TimeBudget, or a share of it (a trade's verification beside others)
    verify: Verify | None = None
    rankings: Rankings | None = None
    # A designs-only plan whose table is then planned as asked with the whole explanation (a solve's first ranking):
    # design 1's explanation is worked out beside the ranking and kept with it (Rankings), used where that table is
    # the one the search settles on. ``held_of`` gives the loads the simulation holds a design's replicas at (of the
    # table and a design of it) as soon as the ranking has it: where a design has one the table does not yet hold, a
    # search round follows, and the explanation is stopped.
    held_of: Callable[[CandidateTable, Outcome], list[HeldLoad]] | None = None


def plan_table(
    table: CandidateTable,
    options: PlanOptions | None = None,
    *,
    file: str = "",
    catalog_fingerprint: str = "",
    retarget: Retarget | None = None,
    timings: Timings | None = None,
    budget: TimeBudget | None = None,
    verify: Verify | None = None,
) -> Plan:
    """Plan ``table``; ``budget``: the command's time budget (default: a fresh one of the settings' limit);
    ``verify``: what planning at moved p95 targets returns (a target trade's design, see :func:`verifier`)."""
    ctx = _Context(file, catalog_fingerprint, retarget, timings, budget, verify)
    return _plan_in(table, options or PlanOptions(), ctx)


def _plan_in(table: CandidateTable, opts: PlanOptions, ctx: _Context) -> Plan:
    """:func:`plan_table` in ``ctx``; with ``ctx.rankings``, a designs-only plan keeps its ranking there and a plan
    of a table already ranked so explains that ranking (the same plan, one ranking fewer)."""
    if opts.objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {opts.objective!r}")
    ref = RequirementRef(name=table.name, file=ctx.file)
    settings = opts.settings
    reasons = unplaceable_workloads(table)
    if reasons:
        # Physics rules out every candidate of some workload: there is nothing to model.
        info = SolverInfo(
            status="infeasible",
            objective=opts.objective,
            objective_unit=OBJECTIVE_UNITS[opts.objective],
            objective_value=None,
            best_bound=None,
            gap=None,
            num_workers=settings.num_workers,
            random_seed=settings.random_seed,
            time_limit_s=settings.time_limit_s,
        )
        return Plan(
            requirement=ref,
            catalog_fingerprint=ctx.catalog_fingerprint,
            status="infeasible",
            solver=info,
            designs=[],
            explanation=None,
            infeasibility=unplaceable_report(reasons),
            precision=precision_gates(table),
            warnings=contradictions(table.limits.deployment, table.limits.inventory),
        )
    partial = opts.explain in ("binding", "design")  # a what-if point or an export: the design and what binds
    full = bool(opts.explain) and not partial
    made = ctx.rankings.take(table, opts) if ctx.rankings is not None else None
    if made is None:
        ahead = ctx.held_of is not None and opts.explain == "design"
        made = _counted(_rank(table, opts, ctx, full=full or ahead, ahead=ahead), ctx.timings)
        if ctx.rankings is not None and opts.explain == "design":
            ctx.rankings.keep(opts, made)
    else:
        if opts.variants and not made.variants:
            add_variants(made.planner, made.ranked.designs)
        if full and made.ranked.designs and made.explanation is None:
            best = made.ranked.designs[0]
            made = replace(made, explanation=explain(made.planner, best, retarget=ctx.retarget, verify=ctx.verify))
    planner, ranked = made.planner, made.ranked
    explanation = made.explanation if full else None  # one worked out ahead (held_of) is the plan as asked's
    first = ranked.first
    objective = ranked.objective  # design 1's: the designs are sorted by it
    gap = None
    if objective is not None and first.bound is not None:
        gap = relative_gap(objective, first.bound)
    info = SolverInfo(
        status=_status(ranked.status),
        objective=opts.objective,
        objective_unit=OBJECTIVE_UNITS[opts.objective],
        objective_value=objective,
        best_bound=first.bound,
        gap=gap,
        num_workers=settings.num_workers,
        random_seed=settings.random_seed,
        time_limit_s=settings.time_limit_s,
    )
    designs = []
    infeasibility = None
    disaggregation: list[DisaggregationNote] = []
    if ranked.designs:
        best = ranked.designs[0]
        assert best.solution is not None
        if opts.explain == "binding":
            top_checks = constraint_checks(planner, best)
        elif opts.explain == "design":
            top_checks = report.margins(table, best.solution, planner.built.families)
        elif full:
            assert explanation is not None
            top_checks = explanation.constraints
        else:
            top_checks = report.margins(table, best.solution, planner.built.families)
        for i, out in enumerate(ranked.designs):
            assert out.solution is not None
            checks = top_checks if i == 0 else report.margins(table, out.solution, planner.built.families)
            d = report.design(table, out.solution, rank=i + 1, checks=checks)
            if out.variants:
                d = d.model_copy(update={"also_runs_as": [report.layout_text(table, s) for s in out.variants]})
            designs.append(d.model_copy(update={"cut_short": ranked.cut_short[i]}) if ranked.cut_short[i] else d)
        tags = report.labels(designs, min_cost=opts.objective == "min_cost")
        designs = [d.model_copy(update={"labels": t}) if t else d for d, t in zip(designs, tags, strict=True)]
    elif ranked.status is SolveStatus.INFEASIBLE and opts.explain != "design":
        infeasibility = (
            _conflict_only(planner)
            if opts.explain == "binding"
            else analyse(planner, retarget=ctx.retarget, verify=ctx.verify)
        )
    if ranked.designs and not partial:
        # The cheapest design of the other serving kind (pools or not): a plan shows it, a sweep row does not.
        disaggregation = disagg.comparison(
            table,
            designs,
            objective=opts.objective,
            settings=settings,
            budget=planner.budget,
            cut_short=any(ranked.cut_short),
        )
    _counted(made, ctx.timings)
    return Plan(
        requirement=ref,
        catalog_fingerprint=ctx.catalog_fingerprint,
        status=info.status,
        solver=info,
        designs=designs,
        explanation=explanation,
        infeasibility=infeasibility,
        precision=precision_gates(table),
        warnings=contradictions(table.limits.deployment, table.limits.inventory),
        disaggregation=disaggregation,
    )


def _rank(table: CandidateTable, opts: PlanOptions, ctx: _Context, *, full: bool, ahead: bool = False) -> _Ranked:
    """``table``'s planner and its ranked designs (``full``: with design 1's explanation, worked out beside them;
    ``ahead``: that explanation is worked out ahead of the plan that uses it, and stopped, its work thrown away and
    still charged, as soon as a design the ranking finds has a held load, :attr:`_Context.held_of`)."""
    planner = Planner(table, objective=opts.objective, settings=opts.settings, budget=ctx.budget)
    unwanted = threading.Event()  # ahead: the search will not settle on this table
    meters: list[Meter] = []

    def explainer(best: Outcome) -> Explanation | None:
        if unwanted.is_set():
            return None
        meter = planner.meter()  # this call's share where it runs beside the ranking, else the budget
        meters.append(meter)
        out = explain(planner, best, retarget=ctx.retarget, verify=ctx.verify)
        return None if unwanted.is_set() else out

    held: list[HeldLoad] = []

    def each_found(out: Outcome) -> None:
        if ctx.held_of is None or unwanted.is_set():
            return
        held.extend(ctx.held_of(table, out))
        if latency.with_held(table, held) is not table:  # a search round follows: the explanation is not wanted
            unwanted.set()
            for meter in meters:
                if isinstance(meter, Share):
                    meter.cut = True  # its solves stop; the call, redone in turn, returns at once

    # The explanation of the best design runs beside the ranking of the others (the same results as after it).
    ranked, explanation = rank_designs_and(
        planner,
        explainer if full else None,
        top=opts.top,
        variants=opts.variants,
        each_found=each_found if ahead else None,
    )
    return _Ranked(table, planner, ranked, explanation, opts.variants)


def _counted(made: _Ranked, timings: Timings | None) -> _Ranked:
    """``made`` with what its planner has done since it was last counted added to ``timings``."""
    p = made.planner
    build_s, solve_s, solves = made.counted
    if timings is not None:
        timings.build_s += p.build_s - build_s
        timings.solver_s += p.solve_s - solve_s
        timings.solves += p.solves - solves
    return replace(made, counted=(p.build_s, p.solve_s, p.solves))


def precision_gates(table: CandidateTable) -> list[PrecisionGate]:
    """The table's quality gate per serving workload, as the plan shows it."""
    return [
        PrecisionGate(
            workload=g.workload,
            max_loss=g.max_loss,
            from_requirement=g.from_requirement,
            allowed=list(g.allowed),
            evidence=[
                QualityEvidence(
                    precision=q.precision,
                    method=q.method,
                    loss_pct=q.loss_pct,
                    metric=q.metric,
                    models=list(q.models),
                    source=q.source,
                    provisional=q.provisional,
                )
                for q in g.evidence
            ],
        )
        for g in table.precision_gates
    ]


def _conflict_only(planner: Planner) -> Infeasibility:
    """A minimal conflict without the least relaxations (``explain="binding"``); ``text`` is one line."""
    status, conflict = find_conflict(planner)
    refs = [FamilyRef(id=f, title=family(f).title, sentence=family(f).sentence) for f in conflict]
    if status is not SolveStatus.INFEASIBLE:
        text = "the conflict search ran out of time"
    elif refs:
        text = "conflict: " + ", ".join(r.title for r in refs)
    else:
        text = "no design even with every constraint off"
    return Infeasibility(conflict=refs, relaxations=[], unplaceable=[], text=text)


def retargeter(
    resolved: ResolvedRequirement,
    catalog: Catalog,
    table: CandidateTable,
    *,
    keep_latency: bool = False,
    cache: CandidateCache | None = None,
) -> Retarget:
    """The candidate table of ``resolved`` with p95 targets scaled, for the infeasibility analysis.

    ``table`` is the requirement's own table. Only the serving workloads whose targets change are
    rebuilt: one workload's candidates never depend on another's, so the rest (training layouts
    included, the slowest to prepare) are taken from ``table`` unchanged. ``cache``: the one ``table``
    was built with, whose serving physics the rebuilt workloads reuse (only their rate search is redone).
    ``max_usd`` (a trade's probe): the rebuilt workloads without the rows no design that cheap can use.
    The same factors and ``max_usd`` give the same table, built once (planning it twice, a trade's verification
    does, then finds the ranking already made of it: :class:`Rankings`).
    """
    built: dict[tuple[tuple[tuple[TargetKey, float], ...], float | None], CandidateTable] = {}

    def retarget(factors: Mapping[TargetKey, float], *, max_usd: float | None = None) -> CandidateTable:
        key = (tuple(sorted(factors.items())), max_usd)
        if key not in built:
            built[key] = _retargeted_table(factors, max_usd)
        return built[key]

    def _retargeted_table(factors: Mapping[TargetKey, float], max_usd: float | None) -> CandidateTable:
        req = resolved.requirement
        changed = [
            i
            for i, w in enumerate(req.workloads)
            if w.kind == "serving" and any(factors.get((i, k), 1.0) != 1.0 for k in TARGET_FIELDS)
        ]
        if not changed:
            return table
        scaled = []
        for i in changed:
            w = req.workloads[i]
            scaled.append(
                w.model_copy(
                    update={
                        k: getattr(w, k) * factors.get((i, k), 1.0) for k in TARGET_FIELDS if getattr(w, k) is not None
                    }
                )
            )
        sub = replace(
            resolved,
            requirement=req.model_copy(update={"workloads": scaled}),
            models=tuple(resolved.model_for(i) for i in changed),
        )
        rebuilt = build_candidates(sub, catalog, keep_latency=keep_latency, cache=cache, max_usd=max_usd)
        fresh = {i: replace(wc, index=i) for i, wc in zip(changed, rebuilt.workloads, strict=True)}
        return replace(table, workloads=tuple(fresh.get(wc.index, wc) for wc in table.workloads))

    return retarget


SIM_ROUNDS = 3  # searches again after a simulated miss, at most
# A solve's first ranking works out design 1's explanation beside its further designs (False: after the search, as
# the plan is the same either way; tests compare the two).
EXPLAIN_AHEAD = True


def simulated_held(
    table: CandidateTable, out: Outcome, resolved: ResolvedRequirement, catalog: Catalog
) -> list[HeldLoad]:
    """The loads the scheduler simulation holds the replicas of ``out`` (a design of a plan of ``table``) at, where
    they miss a target at peak load: what :func:`simulation_searched` holds of the plan's designs."""
    if out.solution is None:
        return []
    # the design's replica groups are what the simulation reads: its constraint margins are not worked out here
    return simulated.held_loads(report.design(table, out.solution, rank=1, checks=[]), resolved, catalog)


def _designs_only(opts: PlanOptions, *, top: int | None = None) -> PlanOptions:
    """``opts`` for a plan whose designs alone are read (a search round, a trade's verification): no explanation and
    no other layouts of each design (``top``: how many designs, default ``opts.top``)."""
    return replace(opts, explain="design", variants=False, top=opts.top if top is None else top)


def simulation_searched(
    plan: Plan,
    table: CandidateTable,
    opts: PlanOptions,
    resolved: ResolvedRequirement,
    catalog: Catalog,
    replan: Callable[[CandidateTable, PlanOptions], Plan],
) -> Plan:
    """``plan`` (the analytical model's designs of ``table``, planned with ``explain="design"``) searched again while
    its designs fail the scheduler simulation, then planned with ``opts``.

    Each round simulates the designs at peak load (:mod:`clusterplan.evaluation.simulated`); every row whose
    replicas miss a target gets the load the simulation holds the targets at (``latency.with_held``: a latency
    constraint, so CP-SAT still chooses the counts) and the table is solved again (designs only), at most
    :data:`SIM_ROUNDS` times. A round without designs (every shape held at 0, or the time limit spent) leaves the
    one before it, its misses stated. The table the search settles on is then planned with ``opts`` (``replan``
    explains the ranking it already made of that table: :class:`Rankings`). Design 1 of each rejected round is kept
    in ``Plan.simulation_rejected``.
    """
    seen: dict[tuple[object, ...], list[SimulatedMiss]] = {}
    rejected: list[SimulatedRejection] = []
    search = _designs_only(opts)
    for n in range(1, SIM_ROUNDS + 1):
        held = [h for d in plan.designs for h in simulated.held_loads(d, resolved, catalog, seen)]
        capped = latency.with_held(table, held)
        if capped is table:  # nothing missed, or only rows already held at these loads
            break
        attempt = replan(capped, search)
        if not attempt.designs:
            break
        first = plan.designs[0]
        misses = simulated.design_misses(first, resolved, catalog, seen)
        if misses:
            rejected.append(
                SimulatedRejection(round=n, summary=first.summary, total_usd=first.costs.total_usd, misses=misses)
            )
        plan, table = attempt, capped
    final = plan if opts.explain == "design" else replan(table, opts)
    return final.model_copy(update={"simulation_rejected": rejected}) if rejected else final


def retargeted(resolved: ResolvedRequirement, factors: Mapping[TargetKey, float]) -> ResolvedRequirement:
    """``resolved`` with each serving workload's p95 targets times its factors (absent: 1)."""
    req = resolved.requirement
    workloads = [
        w.model_copy(
            update={k: getattr(w, k) * factors.get((i, k), 1.0) for k in TARGET_FIELDS if getattr(w, k) is not None}
        )
        if w.kind == "serving"
        else w
        for i, w in enumerate(req.workloads)
    ]
    return replace(resolved, requirement=req.model_copy(update={"workloads": workloads}))


def verifier(
    retarget: Retarget,
    opts: PlanOptions,
    resolved: ResolvedRequirement,
    catalog: Catalog,
    replan: Callable[[CandidateTable, PlanOptions, Meter | None], Plan],
) -> Verify:
    """What planning the requirement with its p95 targets scaled returns: the retargeted table searched as ``solve``
    searches its own (the analytical model, then the simulation's re-search), designs only (no explanation, so no
    trade of its own): one path per design, so a target trade states the design ``solve`` at that target returns, and
    an infeasibility's target relaxation the targets it returns one at. Design 1 comes with the targets it misses
    simulated (a re-search that found nothing the simulation admits leaves it, as ``solve`` states it)."""

    def verify(factors: Mapping[TargetKey, float], *, first_only: bool = False, meter: Meter | None = None) -> Plan:
        search = _designs_only(opts, top=1 if first_only else None)  # a trade reads design 1's hardware and cost

        def on_meter(t: CandidateTable, o: PlanOptions) -> Plan:
            return replan(t, o, meter)

        table = retarget(factors)
        at = retargeted(resolved, factors)  # the simulation holds the moved targets
        plan = simulation_searched(on_meter(table, search), table, search, at, catalog, on_meter)
        return plan.model_copy(update={"designs": [*with_simulation(plan.designs[:1], at, catalog), *plan.designs[1:]]})

    return verify


def plan_requirement(
    resolved: ResolvedRequirement,
    catalog: Catalog,
    options: PlanOptions | None = None,
    *,
    timings: Timings | None = None,
    cache: CandidateCache | None = None,
) -> Plan:
    """Plan a resolved requirement against the catalog.

    ``cache``: candidate rows and physics shared with plans of variants of this requirement (a what-if
    sweep's points); the plan is the same without it. By default a fresh one, which the infeasibility
    analysis's retargeted tables reuse.
    """
    import time

    t0 = time.perf_counter()
    opts = options or PlanOptions()
    cache = cache if cache is not None else CandidateCache()
    table = build_candidates(resolved, catalog, keep_latency=opts.objective == "min_latency", cache=cache)
    t1 = time.perf_counter()
    # One budget for the rest of the command. Candidate preparation (above) always runs to the end,
    # so the wall-clock net starts here: a slow preparation must not change what the solves return.
    budget = TimeBudget(opts.settings.time_limit_s)

    retarget = retargeter(resolved, catalog, table, keep_latency=opts.objective == "min_latency", cache=cache)

    tm = timings if timings is not None else Timings()
    # The search's last table is planned again as asked: its ranking is explained, not made again.
    ctx = _Context(str(resolved.path), catalog.fingerprint(), retarget, tm, budget, rankings=Rankings())

    def replan(t: CandidateTable, o: PlanOptions, meter: Meter | None = None) -> Plan:
        # ``meter``: a trade's verification draws on its caller's share (beside the ranking: the explanation's), not
        # the whole budget: its solves count in that share, and stop with it.
        return _plan_in(t, o, ctx if meter is None else replace(ctx, budget=meter))

    ctx = replace(ctx, verify=verifier(retarget, opts, resolved, catalog, replan))

    # Searched with the analytical model, then again where the scheduler simulation rejects what it chose (a
    # what-if point too: its row is the design that point's own solve returns). Each round ranks designs only; the
    # table the search settles on is then planned as asked, its ranking explained rather than made again (Rankings):
    # the first ranking works out design 1's explanation beside its further designs (2 cores: the explanation's
    # solves and physics beside the further designs' solves; the 70B's wall time 2.7 -> 2.1 s), kept for the plan as
    # asked where no search round follows. Each design the ranking finds is simulated at once, and where one has a
    # held load (a round follows: Mixtral), the explanation is stopped, its work so far thrown away (an explanation
    # run to its end and thrown away once spent the time limit the final one needed, on Mixtral).
    def held_of(t: CandidateTable, out: Outcome) -> list[HeldLoad]:
        return simulated_held(t, out, resolved, catalog)

    ahead = replace(ctx, held_of=held_of if opts.explain is True and EXPLAIN_AHEAD else None)
    # ... and each design's other layouts beside it too (the plan as asked shows them; a round throws them away)
    first = _plan_in(table, replace(_designs_only(opts), variants=opts.variants), ahead)
    plan = simulation_searched(first, table, opts, resolved, catalog, replan)
    designs = plan.designs
    if opts.annotate:
        # Each design's chance of meeting its targets under the model's measured error (evaluation/uncertainty.py).
        designs = with_odds(designs, resolved, catalog)
        # Each design's replicas simulated at peak load: targets the analytical model meets and the scheduler misses.
        designs = with_simulation(designs, resolved, catalog)
        # ... and the catalog figures it rests on that are recalled or derived (evaluation/provisional.py).
        designs = with_provisional(designs, catalog)
    plan = plan.model_copy(update={"designs": designs, "confidence": resolved.requirement.confidence})
    tm.candidates_s += t1 - t0
    tm.total_s += time.perf_counter() - t0
    return plan
