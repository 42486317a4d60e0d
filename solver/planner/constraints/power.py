"""``power``: owned servers at full power (GPUs at TDP plus node overhead) fit ``constraints.max_power``.

    lit => sum_o power_w(o) * (bought[o] + from_inventory[o]) <= max_power

The cap is on *your* facility: cloud instances draw their provider's power and do not count.
"""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner import scaling
from clusterplan.planner.constraints import Family, FamilyContext


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.owned_power_w is not None
    cap = ctx.table.limits.max_power_w
    assert cap is not None
    ctx.model.add(ctx.v.owned_power_w <= scaling.watts_down(cap, what="max_power")).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.max_power_w is not None


FAMILY = Family(
    id="power",
    title="power cap",
    sentence="owned servers at full power (GPUs at TDP plus node overhead) fit within constraints.max_power",
    add=add,
    active=active,
)
