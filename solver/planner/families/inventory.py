"""``inventory``: servers taken from inventory (free of capital cost) are ones you own.

    lit => from_inventory[o] <= inventory_units[o]      for every owned offering o

Inventory costs nothing to buy, so a cost-minimising plan uses it before buying. Switched off,
the model may pretend to own more: the least such pretence is how many more GPUs you would need
(an infeasible requirement's relaxation). A plan's explanation never prices such pretended hardware
as free: its trade (``trade_of``) is the servers the design buys, which would save their purchase
price had they been in inventory already; a design that buys nothing has no trade.
"""

from __future__ import annotations

from clusterplan.candidates.table import CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner.families import Family, FamilyContext, Relaxing
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, TradeRead, restores
from clusterplan.planner.families.goals import Goal


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None
    for o in ctx.table.offerings:
        if o.kind == "owned":
            ctx.model.add(ctx.v.from_inventory(o) <= o.inventory_units).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return any(o.inventory_units for o in table.offerings)


def _gpus(d: DesignFacts, counts: tuple[tuple[str, int], ...]) -> int:
    return sum(n * d.table.offering(key).gpus_per_unit for key, n in counts)


def margin(d: DesignFacts) -> Margin | None:
    have = sum(o.inventory_units * o.gpus_per_unit for o in d.table.offerings if o.kind == "owned")
    used = _gpus(d, d.from_inventory)
    return Margin(float(have - used), "GPUs", f"{used} of {have} owned GPUs used; {_gpus(d, d.bought)} bought")


def check(d: DesignFacts) -> bool:
    return all(n <= d.table.offering(key).inventory_units for key, n in d.from_inventory)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    """How many more GPUs would have to be owned already (the relaxed optimum), and of which types."""
    extra = int(r.value)
    t = r.design.table
    gpus = sorted({t.offering(key).gpu_id for key, n in r.design.from_inventory if n})
    return restores(
        r.fid, f"have {extra} more GPU(s) ({', '.join(gpus)}) in constraints.inventory (already owned)", extra, "GPUs"
    )


def trade_of(d: DesignFacts) -> TradeRead | None:
    """The servers the design buys: had they been in inventory, their purchase price is saved."""
    t = d.table
    gpus: dict[str, int] = {}
    capital = 0.0
    for key, n in d.bought:
        o = t.offering(key)
        if n and o.capital_usd:
            gpus[o.gpu_id] = gpus.get(o.gpu_id, 0) + n * o.gpus_per_unit
            capital += n * o.capital_usd  # the purchase price the plan pays (evaluation.pricing's capital)
    if not gpus:
        return None
    what = ", ".join(f"{n}x {g}" for g, n in sorted(gpus.items()))
    return TradeRead(change=f"constraints.inventory + {what} (what this design buys)", saving_usd=capital)


FAMILY = Family(
    id="inventory",
    title="inventory",
    sentence="only GPUs you already own (constraints.inventory) come free of capital cost",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_INVENTORY_EXTRA, at=relaxation_at),
    # Switched off it invents free hardware: a plan's explanation reads the trade off the design instead.
    cannot_bind=tuple(Goal),
    trade_of=trade_of,
)
