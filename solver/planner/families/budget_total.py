"""``budget_total``: all spending over the horizon (capital, months x recurring, cloud training runs) stays within budget.total.

lit => total_cents <= budget (in cents, rounded down)


"""

from __future__ import annotations

from clusterplan.candidates.table import CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner import scaling
from clusterplan.planner.families import Family, FamilyContext, Relaxing
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, budget_raised, within
from clusterplan.planner.families.goals import Goal

FIELD = "budget.total"  # the requirement field this family enforces


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.total_cents is not None
    limit = ctx.table.limits.budget_total_usd
    assert limit is not None
    ctx.model.add(ctx.v.total_cents <= scaling.cents_down(limit, what="budget.total")).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.budget_total_usd is not None


def margin(d: DesignFacts) -> Margin | None:
    limit = d.table.limits.budget_total_usd
    if limit is None:
        return None
    return Margin(
        limit - d.total_usd,
        "USD",
        f"${d.total_usd:,.0f} of ${limit:,.0f} over {d.table.limits.horizon_months:g} months",
    )


def check(d: DesignFacts) -> bool:
    return within(d.total_usd, d.table.limits.budget_total_usd)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    """The least budget.total that admits a design: the relaxed optimum (cents), rounded up to a dollar."""
    return budget_raised(r, FIELD, "USD")


FAMILY = Family(
    id="budget_total",
    title="total budget",
    sentence="all spending over the horizon (capital, months x recurring, cloud training runs) stays within budget.total",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_TOTAL, at=relaxation_at, field=FIELD),
    # Removing an upper bound on the total never lowers the least total.
    cannot_bind=(Goal.MIN_TOTAL,),
    spending_cap=True,
)
