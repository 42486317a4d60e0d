"""``budget_monthly``: recurring spend per month (cloud serving instances; owned servers' electricity, colocation and support) stays within budget.monthly.

    lit => monthly_cents <= budget (in cents, rounded down)

One-off cloud training runs are not monthly spend; they count in the total.
"""

from __future__ import annotations

from clusterplan.candidates.table import CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner import scaling
from clusterplan.planner.families import Family, FamilyContext, Relaxing
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, budget_raised, within
from clusterplan.planner.families.goals import Goal

FIELD = "budget.monthly"  # the requirement field this family enforces


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.monthly_cents is not None
    limit = ctx.table.limits.budget_monthly_usd
    assert limit is not None
    ctx.model.add(ctx.v.monthly_cents <= scaling.cents_down(limit, what="budget.monthly")).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.budget_monthly_usd is not None


def margin(d: DesignFacts) -> Margin | None:
    limit = d.table.limits.budget_monthly_usd
    if limit is None:
        return None
    return Margin(limit - d.monthly_usd, "USD/month", f"${d.monthly_usd:,.0f} of ${limit:,.0f} per month")


def check(d: DesignFacts) -> bool:
    return within(d.monthly_usd, d.table.limits.budget_monthly_usd)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    """The least budget.monthly that admits a design: the relaxed optimum (cents), rounded up to a dollar."""
    return budget_raised(r, FIELD, "USD/month")


FAMILY = Family(
    id="budget_monthly",
    title="monthly budget",
    sentence="recurring spend per month (cloud serving instances; owned servers' electricity, colocation and support) "
    "stays within budget.monthly",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_MONTHLY, at=relaxation_at, field=FIELD),
    spending_cap=True,
)
