"""``budget_monthly``: recurring spend per month (cloud serving instances, owned servers' electricity) stays within budget.monthly.

    lit => monthly_cents <= budget (in cents, rounded down)

One-off cloud training runs are not monthly spend; they count in the total.
"""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner import scaling
from clusterplan.planner.constraints import Family, FamilyContext


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.monthly_cents is not None
    limit = ctx.table.limits.budget_monthly_usd
    assert limit is not None
    ctx.model.add(ctx.v.monthly_cents <= scaling.cents_down(limit, what="budget.monthly")).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.budget_monthly_usd is not None


FAMILY = Family(
    id="budget_monthly",
    title="monthly budget",
    sentence="recurring spend per month (cloud serving instances, owned servers' electricity) stays within budget.monthly",
    add=add,
    active=active,
)
