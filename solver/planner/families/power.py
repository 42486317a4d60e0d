"""``power``: owned servers at full power (GPUs at TDP plus node overhead) fit ``constraints.max_power``.

    lit => sum_o power_w(o) * (bought[o] + from_inventory[o]) <= max_power

The cap is on *your* facility: cloud instances draw their provider's power and do not count.
"""

from __future__ import annotations

import math

from clusterplan.candidates.table import CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner import scaling
from clusterplan.planner.families import Family, FamilyContext, Relaxing
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, restores, within
from clusterplan.planner.families.goals import Goal


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.owned_power_w is not None
    cap = ctx.table.limits.max_power_w
    assert cap is not None
    ctx.model.add(ctx.v.owned_power_w <= scaling.watts_down(cap, what="max_power")).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.max_power_w is not None


def margin(d: DesignFacts) -> Margin | None:
    cap = d.table.limits.max_power_w
    if cap is None:
        return None
    used_w = d.owned_power_w
    return Margin(
        (cap - used_w) / 1000.0,
        "kW",
        f"{used_w / 1000:,.1f} of {cap / 1000:,.1f} kW (owned servers at full power)",
    )


def check(d: DesignFacts) -> bool:
    return within(d.owned_power_w, d.table.limits.max_power_w)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    """The relaxed optimum (W) in kW, rounded up to a tenth."""
    kw = math.ceil(r.value / 100) / 10
    return restores(r.fid, f"constraints.max_power >= {kw:,.1f}kW", kw, "kW")


FAMILY = Family(
    id="power",
    title="power cap",
    sentence="owned servers at full power (GPUs at TDP plus node overhead) fit within constraints.max_power",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_POWER, at=relaxation_at),
)
