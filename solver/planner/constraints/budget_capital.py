"""``budget_capital``: up-front purchases (owned servers) stay within budget.capital.

    lit => capital_cents <= budget (in cents, rounded down)

Cloud spend is not capital.
"""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner import scaling
from clusterplan.planner.constraints import Family, FamilyContext


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.capital_cents is not None
    limit = ctx.table.limits.budget_capital_usd
    assert limit is not None
    ctx.model.add(ctx.v.capital_cents <= scaling.cents_down(limit, what="budget.capital")).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.budget_capital_usd is not None


FAMILY = Family(
    id="budget_capital",
    title="capital budget",
    sentence="up-front purchases (owned servers) stay within budget.capital",
    add=add,
    active=active,
)
