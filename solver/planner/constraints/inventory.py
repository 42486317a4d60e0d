"""``inventory``: servers taken from inventory (free of capital cost) are ones you own.

    lit => from_inventory[o] <= inventory_units[o]      for every owned offering o

Inventory costs nothing to buy, so a cost-minimising plan uses it before buying. Switched off,
the model may pretend to own more: the least such pretence is how many more GPUs you would need.
"""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None
    for o in ctx.table.offerings:
        if o.kind == "owned":
            ctx.model.add(ctx.v.from_inventory(o) <= o.inventory_units).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return any(o.inventory_units for o in table.offerings)


FAMILY = Family(
    id="inventory",
    title="inventory",
    sentence="only GPUs you already own (constraints.inventory) come free of capital cost",
    add=add,
    active=active,
)
