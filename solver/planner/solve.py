"""Run CP-SAT on the base model: fixed parameters, a status enum, solutions read back as plain data.

Determinism: one search worker (``num_workers = 1``), a fixed ``random_seed``, and a limit in
CP-SAT's deterministic time drawn from the command's one :class:`~clusterplan.planner.budget.TimeBudget`.
CP-SAT's multi-worker portfolio is not reproducible run to run, and interleaved search ignores
assumptions, which the infeasibility analysis needs. When the limit is hit the status says
``feasible`` (with bound and gap) or ``unknown``, and the result is still the same on any machine:
only the budget's wall-clock safety net (far above the limit) depends on the machine's speed.

Each solve clones the base model, fixes the family literals (on or off), adds the solve's own
bounds, no-good cuts and objective, and solves the clone; the base is never modified.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from clusterplan.candidates.table import CandidateTable
from clusterplan.errors import OutOfRange
from clusterplan.planner.budget import LP_UNITS_PER_VARIABLE, Meter, Share, TimeBudget
from clusterplan.planner.builder import BuiltModel, Objective, build
from clusterplan.planner.cpsat import clone, cp_model
from clusterplan.planner.families import one_shape_restriction
from clusterplan.planner.families.goals import Bound, Goal
from clusterplan.planner.families.structure import upper_bound
from clusterplan.planner.status import SolveStatus
from clusterplan.planner.variables import PlanVariables
from clusterplan.units import NotRepresentable

if TYPE_CHECKING:
    # GLOP (OR-Tools' linear solver, ~10 ms to import) only for models of RELAXATION_MIN_VARIABLES or more.
    from clusterplan.planner import lp_bound

Extra = Callable[[cp_model.CpModel, PlanVariables], None]

# Largest value the combined tie-break objective may reach. CP-SAT refuses an objective that might
# overflow int64 by its own, more cautious, reckoning; 2**53 leaves a wide margin.
TIEBREAK_MAX_OBJECTIVE = 2**53


@dataclass(frozen=True)
class SolverSettings:
    time_limit_s: float = 10.0  # the whole command's (one TimeBudget shared by every solve)
    num_workers: int = 1
    random_seed: int = 20240601
    # LP reduced-cost fixing before CP-SAT (:mod:`clusterplan.planner.lp_bound`): "auto" for
    # models of RELAXATION_MIN_VARIABLES variables or more, "on" always, "off" never.
    relaxation: str = "auto"


# CP-SAT's presolve passes per solve of a model under SMALL_MODEL_VARIABLES (its default is 3).
SMALL_MODEL_PRESOLVE_ITERATIONS = 1
# Every example's model is smaller, and so are the fleets' (8 workloads: 3,194 variables, whose first solve one pass
# takes from 0.33 to 0.24 deterministic units with the same optimum); the largest, which GLOP relaxes first, keep 3.
SMALL_MODEL_VARIABLES = 5000

# Optimum solves of a planner whose base model has under RANKING_MAX_VARIABLES variables, where an optimum is sought
# afresh (no bound on the objective, no hint, no extra constraint: each design's first solve in a ranking, a trade's
# probe) or is a tie-break: no probing at the start of the search (presolve still probes) and no rounds of cuts at the
# root. Over the six serving and training examples' plans, the 72 rankings' fresh solves took 2.47 CPU s of CP-SAT
# instead of 3.69 (the 70B example's 11: 0.57 s instead of 0.87; 10 of the 72 came back with another solution of the
# same cost, which the tie-break after each settles as before) and the 77 tie-breaks 1.15 s instead of 1.45, each with
# the very same solution. Every example's solve --json, and the 70B example's sweeps and frontier, are byte-identical
# (2-core machine, 2026-12-06). Checks and variants keep CP-SAT's defaults: with probing level 1 on every solve, the
# Mixtral example's plan moved.
RANKING_PROBING_LEVEL = 1
RANKING_ROOT_CUT_ROUNDS = 0
# Every example's base model has at most 1,288 variables. The fleets' (1,809 for three workloads, 3,834 for eight) keep
# CP-SAT's defaults: their plans run up against the time limit, and cheaper solves let them do more within it, not
# finish sooner (the eight-workload fleet's first solve took 0.19 deterministic units instead of 0.74, with the same
# solution, and its plan listed three designs instead of two in 15% more CPU time: 3.17x a 70B solve's, over the 3x
# bench/whatif.py allows).
RANKING_MAX_VARIABLES = 1500

# Below this size CP-SAT proves the optimum in a fraction of a second on its own (every example has
# under 1,000 variables); above it, its own LP bound arrives late or never (x16 catalog).
RELAXATION_MIN_VARIABLES = 5000
# The LP relaxation is charged by the model's size (GLOP reports no units; budget.LP_UNITS_PER_VARIABLE), up to twice
# a solve. Where that would take more than this share of what is left, CP-SAT alone gets the budget: a 1 s limit
# (0.2 units) on a 5,077-variable model left CP-SAT 0.05 units after one LP and no design at all.
RELAXATION_MAX_SHARE = 0.5
# Independent solves (Planner.concurrently) run on this many threads: CP-SAT releases the GIL while it
# solves, one worker each, so two use a 2-core machine's second core.
CONCURRENT_SOLVES = 2
# Each of n calls run side by side gets 1/(n x this) of the units left: work thrown away when a call runs
# out of its share (it is redone in turn) is at most a quarter of what was left, so --time-limit still holds.
SHARE_DIVISOR = 4
# Below this many units a share (a quarter second of --time-limit), the calls run in turn: a command cut
# short by a tight limit keeps its sequential course.
MIN_SHARE_UNITS = 0.05
# Shares given by fraction (Planner.concurrently) add up to at most this much of what is left: work thrown
# away by a call that ran out of its share is at most half of it.
MAX_SHARED_FRACTION = 0.5
# Calls side by side inside a call that runs on a share split half of that share evenly (its size already
# bounds what a cut throws away; a quarter of a share would put the explanation's solves in turn).
NESTED_SHARE_DIVISOR = 2

T = TypeVar("T")


@dataclass(frozen=True)
class ServingAssignment:
    workload: int
    row: int
    cloud_replicas: int
    owned_replicas: int
    burst_replicas: int = 0  # a demand profile's replicas rented by the hour for its busy hours

    @property
    def replicas(self) -> int:
        """At the peak hour: every hour's (cloud and owned) and the burst."""
        return self.cloud_replicas + self.owned_replicas + self.burst_replicas


@dataclass(frozen=True)
class TrainingAssignment:
    workload: int
    row: int
    where: str  # "cloud" | "owned"


@dataclass(frozen=True)
class Solution:
    """One design as the model chose it: counts only; costs are recomputed from the table."""

    serving: tuple[ServingAssignment, ...]
    training: tuple[TrainingAssignment, ...]
    instances: tuple[tuple[str, int], ...]  # cloud offering key, instances
    bought: tuple[tuple[str, int], ...]  # owned offering key, servers bought
    from_inventory: tuple[tuple[str, int], ...]  # owned offering key, inventory servers used
    total_cents: int
    capital_cents: int
    monthly_cents: int
    one_off_cents: int
    gpus_in_use: int
    signature_on: frozenset[int]  # proto indices of the signature literals that are true
    # What it buys or rents: GPUs per (GPU type, cloud | owned) and each pooled workload's disaggregated flag (0/1).
    hardware: tuple[tuple[tuple[str, str], int], ...] = ()
    working: tuple[tuple[tuple[str, str], int], ...] = ()  # GPUs at work per (GPU type, cloud | owned)
    pools: tuple[int, ...] = ()

    def serving_of(self, w: int) -> list[ServingAssignment]:
        return [a for a in self.serving if a.workload == w]

    def training_of(self, w: int) -> TrainingAssignment | None:
        for a in self.training:
            if a.workload == w:
                return a
        return None


@dataclass
class Outcome:
    status: SolveStatus
    solution: Solution | None = None
    objective: float | None = None
    bound: float | None = None
    wall_s: float = 0.0
    core: list[str] | None = None  # families in a sufficient set for infeasibility (assumption solves)
    values: list[int] = field(default_factory=list, repr=False)
    variants: list[Solution] = field(default_factory=list)  # other layouts on the same hardware (ranking.rank_designs)


class Planner:
    """The base model of one candidate table and every solve made on it."""

    def __init__(
        self,
        table: CandidateTable,
        *,
        objective: Objective = "min_cost",
        settings: SolverSettings | None = None,
        budget: Meter | None = None,
    ) -> None:
        self.table = table
        self.objective = objective
        self.settings = settings or SolverSettings()
        # The command's budget, shared with every other planner of the same command (a planner made inside a
        # call run side by side, e.g. a trade's probe, draws on that call's Share: Planner.meter()).
        self.budget: Meter = budget if budget is not None else TimeBudget(self.settings.time_limit_s)
        t0 = time.perf_counter()
        try:
            self.built: BuiltModel = build(table, objective=objective)
        except NotRepresentable as exc:  # clusterplan.units refused to scale a figure (any other error is a bug)
            raise OutOfRange(str(exc)) from None
        self.build_s = time.perf_counter() - t0
        self.solve_s = 0.0  # total wall time inside the solvers (CP-SAT, and GLOP for large models)
        self.lp_s = 0.0  # of which: LP relaxations (GLOP) before large solves
        # The cost LP of each min-cost solve, by (families on, no-goods): its tie-break reuses it.
        self._cost_lp: dict[object, lp_bound.Relaxation] = {}
        self.solves = 0
        # CP-SAT's deterministic time of this planner's first solve (the primary optimum): what one solve of the
        # model takes, the least a share must hold to be worth running side by side (Planner.concurrently).
        self.first_solve_units: float | None = None
        self._local = threading.local()  # a thread's Share while Planner.concurrently runs it
        self._reader: _Reader | None = None  # where a solution's parts lie in its values (Planner._read)
        self._lock = threading.Lock()  # the counters above, from those threads

    @property
    def v(self) -> PlanVariables:
        return self.built.v

    @property
    def families(self) -> list[str]:
        """Relaxable families the requirement states."""
        return self.built.relaxable

    def meter(self) -> Meter:
        """What this thread's solves draw on: its Share inside :meth:`concurrently`, else the budget. A planner
        made for a probe inside such a call takes this as its budget, so its solves count in the call's share."""
        share: Share | None = getattr(self._local, "share", None)
        return share if share is not None else self.budget

    def concurrently(self, calls: Sequence[Callable[[], T]], *, fractions: Sequence[float] | None = None) -> list[T]:
        """``[call() for call in calls]``, the calls (solves of this planner, independent of one another) run on
        CONCURRENT_SOLVES threads, each on a :class:`~clusterplan.planner.budget.Share` of what is left:
        ``fractions`` of it (together at most 1/2), or by default an equal 1/(n x SHARE_DIVISOR) each (1/(2n)
        inside a call that itself runs on a share, whose size already bounds the work a cut throws away).
        The result is the sequential one: a call that ran out of its share, and every call after it, run again
        in turn."""
        meter = self.meter()
        if len(calls) < 2 or self.settings.num_workers != 1 or meter.spent():
            return [call() for call in calls]
        from concurrent.futures import ThreadPoolExecutor

        left = meter.units_left()
        # Inside a call run side by side, its own share already bounds the work a cut throws away: half of it.
        divisor = len(calls) * (NESTED_SHARE_DIVISOR if isinstance(meter, Share) else SHARE_DIVISOR)
        parts = list(fractions) if fractions is not None else [1.0 / divisor] * len(calls)
        assert len(parts) == len(calls) and sum(parts) <= MAX_SHARED_FRACTION + 1e-12
        if min(parts) * left < max(MIN_SHARE_UNITS, self.first_solve_units or 0.0):
            # A share that cannot hold one solve of this model (a fleet's, whose solves take a tenth of the default
            # limit each) would be cut and its work redone in turn: run them in turn from the start.
            return [call() for call in calls]
        shares = [Share(meter, part * left) for part in parts]

        def run(i: int) -> T:
            self._local.share = shares[i]
            try:
                return calls[i]()
            finally:
                self._local.share = None

        with ThreadPoolExecutor(max_workers=CONCURRENT_SOLVES) as pool:
            results = list(pool.map(run, range(len(calls))))
        # The calls before the first one cut short ran as they would have in turn: keep them, charged in
        # order; from the first cut one on, run them again in turn on the whole budget, as without threads.
        kept = next((i for i, sh in enumerate(shares) if sh.cut), len(calls))
        for sh in shares[:kept]:
            for units in sh.charges:
                meter.charge(units)
        return results[:kept] + [call() for call in calls[kept:]]

    # ------------------------------------------------------------------------------------------------
    def _solver(self, m: cp_model.CpModel, *, ranking: bool = False) -> cp_model.CpSolver:
        """A solver for ``m`` with the planner's parameters; ``ranking``: ``m`` seeks an optimum afresh or is a
        tie-break (a ranking's solves), which the RANKING_* settings make cheaper on a small base model."""
        s = cp_model.CpSolver()
        s.parameters.num_workers = self.settings.num_workers
        s.parameters.random_seed = self.settings.random_seed
        # What is left of the command's budget: deterministic units (the limit), wall time (the net).
        meter = self.meter()
        s.parameters.max_deterministic_time = meter.units_left()
        s.parameters.max_time_in_seconds = meter.wall_left_s()
        s.parameters.log_search_progress = False
        # Ctrl-C and SIGTERM are the command's (cli.run): CP-SAT's own SIGINT handler stopped the search and let the
        # command finish with exit 0 as if the limit had passed, and put the default handler back after each solve.
        s.parameters.catch_sigint_signal = False
        # The LP relaxation with every linear constraint (level 2) closes these knapsack-like models
        # in a handful of conflicts; the default level needs thousands once GPU types may mix.
        s.parameters.linearization_level = 2
        if len(m.proto.variables) < SMALL_MODEL_VARIABLES:
            # One presolve pass below RELAXATION_MIN_VARIABLES (every example's model, and a fleet's): presolve was
            # about half of each solve's time, and repeating it bought nothing (every example's plan, the 13B one's
            # of 1,104 variables included, and the two-workload fleet's are byte-identical with one pass; planning
            # CPU time over the six examples fell 15%). The largest models keep CP-SAT's default: GLOP relaxes them
            # first, a solve may hit the time limit there, and fewer passes change what it reaches.
            s.parameters.max_presolve_iterations = SMALL_MODEL_PRESOLVE_ITERATIONS
            if ranking and len(self.built.model.proto.variables) < RANKING_MAX_VARIABLES:
                s.parameters.cp_model_probing_level = RANKING_PROBING_LEVEL
                s.parameters.max_cut_rounds_at_level_zero = RANKING_ROOT_CUT_ROUNDS
        return s

    def _check_families(self, on: Iterable[str]) -> None:
        unknown = set(on) - set(self.families)
        if unknown:
            raise KeyError(f"unknown families: {sorted(unknown)}")

    def _clone(self, on: Iterable[str], *, assume: bool = False) -> cp_model.CpModel:
        m = clone(self.built.model)
        on_set = set(on)
        self._check_families(on_set)
        for fid, lit in self.v.literals().items():
            if fid in on_set:
                if assume:
                    continue
                m.add(lit == 1)
            else:
                m.add(lit == 0)
        if assume:
            m.add_assumptions([self.v.literal(f) for f in self.families if f in on_set])
        return m

    def _run(self, m: cp_model.CpModel, *, ranking: bool = False) -> tuple[cp_model.CpSolver, SolveStatus, float]:
        solver = self._solver(m, ranking=ranking)
        if self.meter().spent():
            return solver, SolveStatus.UNKNOWN, 0.0  # nothing left: the caller reports it ran out
        code, wall = self._charged(solver, m)
        status = SolveStatus.from_cpsat(code)
        if status is SolveStatus.MODEL_INVALID:
            reason = m.validate()
            if "overflow" in reason:  # coefficients times bounds beyond int64: the figures' range
                raise OutOfRange(reason.splitlines()[0])
            raise RuntimeError(f"CP-SAT rejected the model: {reason}")  # a bug, not a user's problem
        return solver, status, wall

    def _charged(self, solver: cp_model.CpSolver, m: cp_model.CpModel) -> tuple[cp_model.CpSolverStatus, float]:
        """Solve ``m`` and charge its deterministic time to the budget; (CP-SAT's status code, wall s)."""
        t0 = time.perf_counter()
        code = solver.solve(m)
        wall = time.perf_counter() - t0
        with self._lock:
            self.solve_s += wall
            self.solves += 1
            if self.first_solve_units is None:
                self.first_solve_units = solver.response_proto.deterministic_time
        undecided = code not in (cp_model.OPTIMAL, cp_model.INFEASIBLE, cp_model.MODEL_INVALID)
        # Stopped short of its deterministic limit while undecided: the wall net stopped it.
        net = undecided and solver.response_proto.deterministic_time < solver.parameters.max_deterministic_time * 0.99
        meter = self.meter()
        meter.charge(solver.response_proto.deterministic_time, wall_hit=net)
        if undecided and isinstance(meter, Share):
            meter.cut = True  # stopped by its share's limit, perhaps: redone in turn
        return code, wall

    def solve(
        self,
        *,
        goal: Goal = Goal.MIN_TOTAL,
        on: Iterable[str] | None = None,
        bounds: Sequence[Bound] = (),
        nogoods: Sequence[Solution] = (),
        extra: Extra | None = None,
        tiebreak: bool = False,
        hint: Outcome | None = None,
        layouts_of: Solution | None = None,
    ) -> Outcome:
        """One CP-SAT solve.

        ``on``: families enforced (default: all the requirement states); the others are switched off.
        ``goal``: what to optimise (``Goal.FEASIBILITY``: nothing). ``bounds``: goals held no worse than a value.
        ``nogoods``: designs whose hardware must differ (:func:`_hardware_differs`). ``tiebreak``: instead of
        ``goal``, minimise GPUs then maximise headroom (used after a min-cost solve with the cost bounded).
        ``layouts_of``: hold the hardware to that design's, and let ``nogoods`` differ in layout (signature) instead:
        the same servers and instances run another way.
        """
        fams = self.families if on is None else list(on)
        if self.meter().spent():
            # What _run answers with nothing left, without cloning the model first (a fleet's explanation asks for
            # dozens of solves after the budget is spent: their clones cost a third of a CPU second at 8 workloads).
            if on is not None:
                self._check_families(fams)
            return Outcome(status=SolveStatus.UNKNOWN)
        m = self._clone(fams)
        v = self.v
        for b in bounds:
            var = b.goal.variable(v)
            m.add(var <= b.value if b.goal.minimise else var >= b.value)
        sig = v.signature_literals()
        if layouts_of is not None:
            _same_hardware(m, v, layouts_of)
            for ng in nogoods:
                m.add_bool_or([lit.Not() if lit.index in ng.signature_on else lit for lit in sig])
        else:
            for ng in nogoods:
                _hardware_differs(m, v, ng)
        if extra is not None:
            extra(m, v)
        if tiebreak:
            assert v.gpus_in_use is not None and v.headroom_ppm is not None
            # Lexicographic (fewest GPUs, then most headroom) as one objective, when it fits in
            # int64. A tiny demand (a request a minute against replicas taking dozens a second)
            # puts headroom beyond any meaningful order and made gpus x (headroom_ub + 1) overflow:
            # then fewest GPUs alone breaks the tie.
            gpus_ub = upper_bound(v.gpus_in_use)
            if gpus_ub * (v.headroom_ub + 1) + v.headroom_ub <= TIEBREAK_MAX_OBJECTIVE:
                m.minimize(v.gpus_in_use * (v.headroom_ub + 1) - v.headroom_ppm)
            else:
                m.minimize(v.gpus_in_use)
        elif goal is not Goal.FEASIBILITY:
            if goal.minimise:
                m.minimize(goal.variable(v))
            else:
                m.maximize(goal.variable(v))
        if hint is not None and hint.values:
            m.proto.solution_hint.vars.extend(range(len(hint.values)))
            m.proto.solution_hint.values.extend(hint.values)
        t0 = time.perf_counter()
        if (tiebreak or goal is not Goal.FEASIBILITY) and self._relax(m):
            # A tie-break bounds the cost by the optimum just proven: the cost LP of that solve
            # already says which variables no design that cheap can move (no second LP needed).
            key = (
                (frozenset(fams), tuple((ng.hardware, ng.working, ng.pools) for ng in nogoods))
                if extra is None and layouts_of is None
                else None
            )
            caps = [b.value for b in bounds if b.goal is Goal.MIN_TOTAL]
            cost_lp = self._cost_lp.get(key) if key is not None and len(caps) == len(bounds) == 1 else None
            if tiebreak and cost_lp is not None:
                m = _fixed(m, cost_lp, caps[0])
            else:
                m, rel = self._reduce(m, keep_hint=hint is not None and bool(hint.values))
                if goal is Goal.MIN_TOTAL and not bounds and key is not None and rel is not None:
                    self._cost_lp[key] = rel
        # A tie-break, or an optimum sought afresh (the objective unbounded, no hint: not a check or a variant, nor a
        # model the LP relaxation reduced and hinted): CP-SAT's lighter RANKING_* settings.
        fresh = goal is not Goal.FEASIBILITY and not (bounds or extra or layouts_of) and not m.proto.has_solution_hint()
        solver, status, wall = self._run(m, ranking=tiebreak or fresh)
        wall = time.perf_counter() - t0
        out = Outcome(status=status, wall_s=wall)
        if status.has_solution:
            values = list(solver.response_proto.solution)
            out.values = values[: len(self.built.model.proto.variables)]
            out.solution = self._read(values)
            if goal is not Goal.FEASIBILITY or tiebreak:
                out.objective = solver.objective_value
                out.bound = solver.best_objective_bound
        return out

    def _relax(self, m: cp_model.CpModel) -> bool:
        mode = self.settings.relaxation
        if mode == "auto":
            n = len(m.proto.variables)
            lp_units = LP_UNITS_PER_VARIABLE * n  # one LP's charge, by size
            return n >= RELAXATION_MIN_VARIABLES and lp_units <= RELAXATION_MAX_SHARE * self.meter().units_left()
        return mode == "on"

    def _incumbent(self, m: cp_model.CpModel) -> tuple[lp_bound.Relaxation, list[int] | None]:
        """The LP relaxation of ``m`` and a solution of ``m`` found where the LP points (RINS)."""
        from clusterplan.planner import lp_bound

        t0 = time.perf_counter()
        rel = lp_bound.solve_relaxation(m.proto)
        self.meter().charge(LP_UNITS_PER_VARIABLE * len(m.proto.variables))  # by size: GLOP reports no units
        lp_s = time.perf_counter() - t0
        with self._lock:
            self.lp_s += lp_s
            self.solve_s += lp_s
        if not rel.optimal:
            return rel, None
        sub = clone(m)
        for i, value in rel.integral([lit.index for lit in self.v.choice_literals()]):
            sub.add(sub.get_int_var_from_proto_index(i) == value)
        solver, status, _ = self._run(sub)
        return rel, list(solver.response_proto.solution) if status.has_solution else None

    def _reduce(self, m: cp_model.CpModel, *, keep_hint: bool) -> tuple[cp_model.CpModel, lp_bound.Relaxation | None]:
        """``m`` with the variables fixed that no solution as good as an incumbent can move.

        The LP relaxation (GLOP), an incumbent from CP-SAT in the neighbourhood the LP induces, then
        reduced-cost fixing and the LP bound: see :mod:`clusterplan.planner.lp_bound`. Every
        optimum of ``m`` is a solution of the result, so an OPTIMAL there is optimal for ``m``.
        Where workloads may mix GPU types the LP is loose (fractions of replicas and instances) and
        its neighbourhood poor, so the same is done with one shape per workload
        (:func:`~clusterplan.planner.families.one_shape_restriction`) and the better incumbent kept.
        Returns ``m`` itself when the LP or the incumbent step gives nothing; and the LP, if it solved.
        """
        from clusterplan.planner import lp_bound

        if self.meter().spent():
            return m, None  # no time for the LP: CP-SAT alone, on what is left (nothing)
        rel, best = self._incumbent(m)
        if not rel.optimal:
            return m, None  # LP infeasible (so is m) or numerically unsure: CP-SAT decides on its own
        if keep_hint:  # the caller's hint (the primary optimum, for a tie-break) may be the better one
            check = self._solver(m)
            check.parameters.fix_variables_to_their_hinted_value = True
            if not self.meter().spent() and self._charged(check, m)[0] in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                hinted = list(check.response_proto.solution)
                if best is None or lp_bound.objective_value(m.proto, hinted) < lp_bound.objective_value(m.proto, best):
                    best = hinted
        if any(wc.is_serving and wc.allow_mixed for wc in self.table.workloads):
            restricted = clone(m)
            one_shape_restriction(restricted, self.v, self.table)
            _, alt = self._incumbent(restricted)
            if alt is not None and (
                best is None or lp_bound.objective_value(m.proto, alt) < lp_bound.objective_value(m.proto, best)
            ):
                best = alt
        if best is None:
            return m, rel
        incumbent = lp_bound.objective_value(m.proto, best)
        reduced = _fixed(m, rel, incumbent)
        obj = reduced.proto.objective
        reduced.add(
            sum(c * reduced.get_int_var_from_proto_index(v) for v, c in zip(obj.vars, obj.coeffs, strict=True))
            >= rel.bound(incumbent)
        )
        if not keep_hint:
            reduced.proto.solution_hint.vars.extend(range(len(best)))
            reduced.proto.solution_hint.values.extend(best)
        return reduced, rel

    def core(self, on: Iterable[str], *, extra: Extra | None = None) -> tuple[SolveStatus, list[str]]:
        """Feasibility with the families of ``on`` as assumptions (the rest off).

        If infeasible, CP-SAT returns a sufficient set of assumptions (not necessarily minimal);
        :mod:`clusterplan.explain.infeasibility` shrinks it. No objective (assumptions and objectives
        do not mix well in CP-SAT), one worker.
        """
        on = list(on)
        if self.meter().spent():  # what _run answers with nothing left, without the clone
            self._check_families(on)
            return SolveStatus.UNKNOWN, []
        m = self._clone(on, assume=True)
        if extra is not None:
            extra(m, self.v)
        solver, status, _ = self._run(m)
        if status is not SolveStatus.INFEASIBLE:
            return status, []
        idx = set(solver.sufficient_assumptions_for_infeasibility())
        by_index = {lit.index: f for f, lit in self.v.literals().items()}
        return status, [f for f in self.families if self.v.literal(f).index in idx and f in by_index.values()]

    def feasible(self, on: Iterable[str], *, extra: Extra | None = None) -> SolveStatus:
        return self.solve(goal=Goal.FEASIBILITY, on=on, extra=extra).status

    # ------------------------------------------------------------------------------------------------
    def _read(self, values: list[int]) -> Solution:
        """The design a solution sets, through the planner's :class:`_Reader` (made once per built model)."""
        reader = self._reader
        if reader is None or reader.built is not self.built:
            reader = self._reader = _Reader.of(self)
        return reader.read(values)


NONE = -1  # a _Reader index where the model has no such variable (it reads as 0)


def _index(var: cp_model.IntVar | None) -> int:
    return NONE if var is None else var.index


@dataclass(frozen=True)
class _Reader:
    """Where each part of a :class:`Solution` lies in a solution's values: the variable indices, in the order the
    Solution lists them. Reading a design walked every candidate row through the variables' accessors, about 3 ms a
    solution of the 70B example's model (most of the Python time of its 39 solves); the indices do not change
    between solves of one built model."""

    built: BuiltModel
    serving: tuple[tuple[int, int, int, int, int], ...]  # workload, row, cloud, owned, burst replicas
    training: tuple[tuple[int, int, int, int], ...]  # workload, row, runs on cloud, runs owned
    cloud: tuple[tuple[str, int], ...]  # offering key, instances
    owned: tuple[tuple[str, int, int], ...]  # offering key, bought, from inventory
    totals: tuple[int, int, int, int, int]  # total, capital, monthly, one-off cents, GPUs in use
    signature: tuple[int, ...]
    hardware: tuple[tuple[tuple[str, str], int], ...]
    working: tuple[tuple[tuple[str, str], int], ...]
    pools: tuple[int, ...]

    @classmethod
    def of(cls, planner: Planner) -> _Reader:
        v = planner.v
        serving = tuple(
            (
                wc.index,
                r,
                _index(v._xc.get((wc.index, r))),
                _index(v._xo.get((wc.index, r))),
                _index(v.burst_replicas(wc.index, r)),
            )
            for wc, r, _ in v.serving_rows()
        )
        training = tuple(
            (wc.index, r, _index(v.runs_on_cloud(wc.index, r)), _index(v.runs_owned(wc.index, r)))
            for wc, r, _ in v.training_rows()
        )
        offerings = planner.table.offerings
        return cls(
            built=planner.built,
            serving=serving,
            training=training,
            cloud=tuple((o.key, _index(v.instances(o))) for o in offerings if o.kind == "cloud"),
            owned=tuple(
                (o.key, _index(v.bought(o)), _index(v.from_inventory(o))) for o in offerings if o.kind != "cloud"
            ),
            totals=(
                _index(v.total_cents),
                _index(v.capital_cents),
                _index(v.monthly_cents),
                _index(v.one_off_cents),
                _index(v.gpus_in_use),
            ),
            signature=tuple(lit.index for lit in v.signature_literals()),
            hardware=tuple((key, _index(var)) for key, var in sorted(v.hardware_counts.items())),
            working=tuple((key, _index(var)) for key, var in sorted(v.working_counts.items())),
            pools=tuple(_index(d) for d in v.pool_literals()),
        )

    def read(self, values: list[int]) -> Solution:
        def val(i: int) -> int:
            return 0 if i == NONE else int(values[i])

        serving = []
        for w, r, ixc, ixo, ixb in self.serving:
            xc, xo, xb = val(ixc), val(ixo), val(ixb)
            if xc or xo or xb:
                serving.append(ServingAssignment(w, r, xc, xo, xb))
        training = []
        for w, r, iyc, iyo in self.training:
            if val(iyc):
                training.append(TrainingAssignment(w, r, "cloud"))
            if val(iyo):
                training.append(TrainingAssignment(w, r, "owned"))
        bought, inv = [], []
        for key, ib, iu in self.owned:
            m, u = val(ib), val(iu)
            if m:
                bought.append((key, m))
            if u:
                inv.append((key, u))
        total, capital, monthly, one_off, gpus = (val(i) for i in self.totals)
        return Solution(
            serving=tuple(serving),
            training=tuple(training),
            instances=tuple((key, n) for key, i in self.cloud if (n := val(i))),
            bought=tuple(bought),
            from_inventory=tuple(inv),
            total_cents=total,
            capital_cents=capital,
            monthly_cents=monthly,
            one_off_cents=one_off,
            gpus_in_use=gpus,
            signature_on=frozenset(i for i in self.signature if values[i]),
            hardware=tuple((key, val(i)) for key, i in self.hardware),
            working=tuple((key, val(i)) for key, i in self.working),
            pools=tuple(val(i) for i in self.pools),
        )


def _hardware_differs(m: cp_model.CpModel, v: PlanVariables, ng: Solution) -> None:
    """A no-good on ``ng``'s hardware. The next design differs from it in the GPUs it holds of some type and
    deployment (another layout of the same servers is not another design) and in the GPUs it puts to work (the
    same work on a server more, or a bigger one, is a dearer copy, not another option), unless some pooled
    workload is served the other way (aggregated / disaggregated), which is always another design."""
    pools: list[cp_model.LiteralT] = [d.Not() if was else d for d, was in zip(v.pool_literals(), ng.pools, strict=True)]
    for name, counts, held in (
        ("held", v.hardware_counts, dict(ng.hardware)),
        ("work", v.working_counts, dict(ng.working)),
    ):
        alternatives = list(pools)
        for key, var in sorted(counts.items()):
            b = m.new_bool_var(f"differs_{name}_{key[0]}_{key[1]}")
            m.add(var != held.get(key, 0)).only_enforce_if(b)
            alternatives.append(b)
        m.add_bool_or(alternatives)


def _same_hardware(m: cp_model.CpModel, v: PlanVariables, sol: Solution) -> None:
    """Hold the GPU counts per (type, cloud | owned) and the pooled workloads' choices to ``sol``'s."""
    held = dict(sol.hardware)
    for key, var in sorted(v.hardware_counts.items()):
        m.add(var == held.get(key, 0))
    for d, was in zip(v.pool_literals(), sol.pools, strict=True):
        m.add(d == was)


def _fixed(m: cp_model.CpModel, rel: lp_bound.Relaxation, incumbent: float) -> cp_model.CpModel:
    """A copy of ``m`` with the variables fixed that no solution of objective <= ``incumbent`` moves."""
    reduced = clone(m)
    for i, value in rel.fixable(incumbent):
        reduced.add(reduced.get_int_var_from_proto_index(i) == value)
    return reduced
