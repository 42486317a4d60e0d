"""Constraint families: one module each, owning its whole story.

Every requirement-level constraint is added behind its family's enforcement literal (``OnlyEnforceIf``
/ implications), so the planner can switch a family off to price its relaxation, and an infeasible
requirement is explained as a minimal set of *family names* (assumptions on those literals, then a
deletion loop). ``structure`` (linking, capacity, costs) has no literal: it is what a plan *is*.
``memory`` has none either: rows that do not fit never reach the model; the family exists so the
explanation can report the memory margin.

Adding a family is one module here plus its test. The module defines ``FAMILY = Family(...)`` with:

* ``id``, ``title``, ``sentence``: its name in explanations and what it demands, readable by a user;
* ``add(ctx)``: its CP-SAT constraints, behind ``ctx.lit``;
* ``active(table)``: whether the requirement states it (a family with nothing to say is not reported);
* ``margin(design)``: how far inside it a design sits, a :class:`~.facts.Margin` (or None: nothing
  to measure), from :class:`~.facts.DesignFacts` alone;
* ``check(design)``: whether a design meets it, without a solver (the brute-force test's and the
  validator's view: it must agree with ``add``);
* ``relaxation``: a :class:`Relaxing` (None: physics, reported but never switched off): the goal
  optimised with the family off, the families relaxed with it, its place in the deletion loop, and
  ``at(RelaxedAt)``: the change the relaxed optimum stands for, in the requirement's words;
* optionally ``trade_of(design)``: the family's marginal trade read off a design without a solve
  (a :class:`~.facts.TradeRead`, or None: nothing to gain); such a family binds exactly when it has one;
* optionally ``floor`` (a per-row replica floor a demand family adds for a one-shape workload) and
  ``why_gpu_lost`` (a family-specific reason a cheaper GPU type cannot be used).

Then list it in :func:`registry`. The explainers (``explain.designs``, ``explain.binding``, ``explain.infeasibility``) iterate
over the registry and never branch on family ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clusterplan.candidates.table import CandidateTable, WorkloadCandidates
from clusterplan.plan import ConstraintCheck, FamilyStatus, Relaxation
from clusterplan.planner.cpsat import cp_model
from clusterplan.planner.families.facts import MARGIN_TOLERANCE, DesignFacts, Margin, NotEnough, RelaxedAt, TradeRead
from clusterplan.planner.families.goals import Goal
from clusterplan.planner.variables import PlanVariables, ServingScale


@dataclass(frozen=True)
class FamilyContext:
    model: cp_model.CpModel
    v: PlanVariables
    table: CandidateTable
    lit: cp_model.IntVar | None  # None only for families without a literal (memory)


@dataclass(frozen=True)
class Relaxing:
    """How a family is relaxed when it conflicts."""

    goal: Goal  # optimised with the family (and ``with_families``) off, every other family on
    at: Callable[[RelaxedAt], Relaxation | NotEnough]  # the change that optimum stands for
    with_families: tuple[str, ...] = ()  # switched off with it (lowering the demand relaxes N+k too)
    implies: tuple[str, ...] = ()  # weaker families it implies: kept in the deletion loop instead of it
    deletion_first: bool = False  # tried first in the deletion loop (so a weaker family is kept)
    by_targets: bool = False  # relaxed by loosening its p95 targets (a search that rebuilds candidates)
    field: str | None = None  # the one requirement field the relaxation raises (what-if sweeps vary it)


# A per-row replica floor for a one-shape workload: (rates per row, spare replicas), or None.
Floor = Callable[[WorkloadCandidates, ServingScale], tuple[list[int], int] | None]
# Why a cheaper GPU type cannot serve a workload, in this family's terms (None: the generic reason).
WhyLost = Callable[[CandidateTable, WorkloadCandidates, str], str | None]


@dataclass(frozen=True)
class Family:
    id: str
    title: str
    sentence: str  # what the family demands, readable by a user
    add: Callable[[FamilyContext], None]
    active: Callable[[CandidateTable], bool]
    margin: Callable[[DesignFacts], Margin | None]
    check: Callable[[DesignFacts], bool]
    relaxation: Relaxing | None  # None: physics, reported but never switched off
    floor: Floor | None = None
    why_gpu_lost: WhyLost | None = None
    cannot_bind: tuple[Goal, ...] = ()  # primary goals that switching this family off never improves
    trade_of: Callable[[DesignFacts], TradeRead | None] | None = None  # binds when it has a trade (no solve)
    layout_rule: bool = False  # rules which layouts may run (GPU type, precision, NVLink): none left = no fit
    spending_cap: bool = False  # a budget: alone, it can leave nothing that runs a workload at all

    @property
    def relaxable(self) -> bool:
        return self.relaxation is not None

    def constraint_check(self, design: DesignFacts) -> ConstraintCheck | None:
        """The family's margin at ``design`` as a report line (status 'slack', 'satisfied' or 'violated';
        the explainer upgrades it to 'binding' when relaxing the family improves the optimum)."""
        m = self.margin(design)
        if m is None:
            return None
        status: FamilyStatus = (
            "satisfied" if m.value is None else ("slack" if m.value >= -MARGIN_TOLERANCE else "violated")
        )
        return ConstraintCheck(
            family=self.id, title=self.title, status=status, margin=m.value, unit=m.unit, detail=m.detail
        )


def registry() -> list[Family]:
    """All families in a fixed order (the order explanations list them in)."""
    from clusterplan.planner.families import (
        allowed_gpus,
        allowed_quant,
        budget_capital,
        budget_monthly,
        budget_total,
        deadline,
        demand_profile,
        deployment,
        inventory,
        latency,
        max_gpu_types,
        max_gpus,
        memory,
        power,
        redundancy,
        throughput,
        tp_nvlink,
    )

    return [
        memory.FAMILY,
        throughput.FAMILY,
        latency.FAMILY,
        redundancy.FAMILY,
        demand_profile.FAMILY,
        deadline.FAMILY,
        tp_nvlink.FAMILY,
        allowed_gpus.FAMILY,
        allowed_quant.FAMILY,
        deployment.FAMILY,
        max_gpus.FAMILY,
        max_gpu_types.FAMILY,
        power.FAMILY,
        inventory.FAMILY,
        budget_capital.FAMILY,
        budget_monthly.FAMILY,
        budget_total.FAMILY,
    ]


def family(fid: str) -> Family:
    for f in registry():
        if f.id == fid:
            return f
    raise KeyError(fid)


def active_families(table: CandidateTable) -> list[Family]:
    """Families the requirement states (a family with nothing to say is not reported)."""
    return [f for f in registry() if f.active(table)]


def forbid_rows(ctx: FamilyContext, fid: str) -> None:
    """Shared by row-level families: rows and offerings marked ``forbidden_by`` ``fid`` are unusable
    while the family's literal is on."""
    assert ctx.lit is not None
    v = ctx.v
    for wc, r, row in v.serving_rows():
        if fid in row.forbidding_families:
            ctx.model.add_implication(ctx.lit, v.selected(wc.index, r).Not())
    for wc, r, trow in v.training_rows():
        if fid in trow.forbidding_families:
            for y in v.training_choices(wc.index, r):
                ctx.model.add_implication(ctx.lit, y.Not())
    for o in ctx.table.offerings:
        if any(f == fid for f, _ in o.forbidden_by):
            for var in v.unit_vars(o):
                ctx.model.add(var == 0).only_enforce_if(ctx.lit)
            if o.kind == "cloud":
                for wc, r, trow in v.training_rows():
                    yc = v.runs_on_cloud(wc.index, r)
                    if yc is not None and trow.cloud_offering == o.key:
                        ctx.model.add_implication(ctx.lit, yc.Not())


def single_shape_floor(ctx: FamilyContext, w: int, rates: list[int], demand: int, *, spare: int = 0) -> None:
    """For a workload served by one shape: a selected row needs ``spare + ceil(demand / rate)`` replicas.

    Implied by the family's capacity inequality once exactly one row is selected, but written per row
    it makes the LP relaxation pick whole replica counts of one shape (the convex hull of the
    per-row integer choices) instead of a fraction of the best rate's replica: the bound then closes
    these models in a handful of branches. A row with rate 0 cannot be selected at all.
    """
    assert ctx.lit is not None
    v = ctx.v
    for r, rate in enumerate(rates):
        sel = v.selected(w, r)
        if rate <= 0:
            ctx.model.add_implication(ctx.lit, sel.Not())
            continue
        xs = v.replica_vars(w, r)
        if not xs:
            continue
        need = spare + -(-demand // rate)
        ctx.model.add(sum(xs) >= need).only_enforce_if([ctx.lit, sel])


def one_shape_restriction(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable) -> None:
    """Restrict every mixed serving workload to one shape: a neighbourhood to look for an incumbent in.

    Never a rule of a plan (a mixed workload may use several shapes); a solution of the restricted
    model is a solution of the full one. Adds what the demand families add for an unmixed workload:
    exactly one row, and each enforced family's per-row replica floor.
    """
    literals = v.literals()
    for wc in table.workloads:
        if not (wc.is_serving and wc.allow_mixed):
            continue
        w = wc.index
        model.add_exactly_one([v.selected(w, r) for r in range(len(wc.rows))])
        s = v.scales[w]
        for f in registry():
            floor = f.floor(wc, s) if f.floor is not None and f.id in literals else None
            if floor is not None:
                rates, spare = floor
                ctx = FamilyContext(model=model, v=v, table=table, lit=literals[f.id])
                single_shape_floor(ctx, w, rates, s.demand, spare=spare)
