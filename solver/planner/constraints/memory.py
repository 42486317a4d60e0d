"""``memory``: every GPU holds its share of weights, KV cache / activations, optimizer state and
runtime overhead with the headroom kept free. Enforced while preparing candidates (rows that do not
fit never reach the model), so the family has no literal; the explanation reports its margin."""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext


def add(ctx: FamilyContext) -> None:
    """Nothing to add: the candidate table holds only rows that fit."""


def active(table: CandidateTable) -> bool:
    return True


FAMILY = Family(
    id="memory",
    title="memory fits",
    sentence="every GPU holds its share of the weights, KV cache or training state, and runtime overhead, "
    "with the fragmentation headroom kept free",
    add=add,
    active=active,
    relaxable=False,
)
