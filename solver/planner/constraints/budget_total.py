"""``budget_total``: all spending over the horizon (capital, months x recurring, cloud training runs) stays within budget.total.

lit => total_cents <= budget (in cents, rounded down)


"""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner import scaling
from clusterplan.planner.constraints import Family, FamilyContext


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.total_cents is not None
    limit = ctx.table.limits.budget_total_usd
    assert limit is not None
    ctx.model.add(ctx.v.total_cents <= scaling.cents_down(limit, what="budget.total")).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.budget_total_usd is not None


FAMILY = Family(
    id="budget_total",
    title="total budget",
    sentence="all spending over the horizon (capital, months x recurring, cloud training runs) stays within budget.total",
    add=add,
    active=active,
)
