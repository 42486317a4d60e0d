"""``budget_capital``: up-front purchases (owned servers) stay within budget.capital.

    lit => capital_cents <= budget (in cents, rounded down)

Cloud spend is not capital.
"""

from __future__ import annotations

from clusterplan.candidates.table import CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner import scaling
from clusterplan.planner.families import Family, FamilyContext, Relaxing
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, budget_raised, within
from clusterplan.planner.families.goals import Goal

FIELD = "budget.capital"  # the requirement field this family enforces


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.capital_cents is not None
    limit = ctx.table.limits.budget_capital_usd
    assert limit is not None
    ctx.model.add(ctx.v.capital_cents <= scaling.cents_down(limit, what="budget.capital")).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.budget_capital_usd is not None


def margin(d: DesignFacts) -> Margin | None:
    limit = d.table.limits.budget_capital_usd
    if limit is None:
        return None
    return Margin(limit - d.capital_usd, "USD", f"${d.capital_usd:,.0f} of ${limit:,.0f}")


def check(d: DesignFacts) -> bool:
    return within(d.capital_usd, d.table.limits.budget_capital_usd)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    """The least budget.capital that admits a design: the relaxed optimum (cents), rounded up to a dollar."""
    return budget_raised(r, FIELD, "USD")


FAMILY = Family(
    id="budget_capital",
    title="capital budget",
    sentence="up-front purchases (owned servers) stay within budget.capital",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_CAPITAL, at=relaxation_at, field=FIELD),
    spending_cap=True,
)
