"""``allowed_gpus``: only GPUs in ``constraints.allowed_gpus`` and not in ``excluded_gpus``.

lit => sel[w,r] = 0 and y[w,r] = 0 for rows on other GPUs
"""

from __future__ import annotations

from clusterplan.candidates.table import ALLOWED_GPUS, CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner.families import Family, FamilyContext, Relaxing, forbid_rows
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, restores
from clusterplan.planner.families.goals import Goal


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, ALLOWED_GPUS)


def active(table: CandidateTable) -> bool:
    return table.limits.allowed_gpus is not None


def margin(d: DesignFacts) -> Margin | None:
    return Margin(None, "", "only allowed GPU types are used")


def check(d: DesignFacts) -> bool:
    allowed = d.table.limits.allowed_gpus
    return allowed is None or d.gpus_used() <= allowed


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    """The GPU types the relaxed design uses that the requirement does not allow."""
    allowed = r.design.table.limits.allowed_gpus or frozenset()
    used = sorted(r.design.unit_gpus() - allowed)
    return restores(r.fid, f"allow {', '.join(used) or 'more GPU types'} in constraints.allowed_gpus")


FAMILY = Family(
    id="allowed_gpus",
    title="allowed GPUs",
    sentence="only the GPU types constraints.allowed_gpus permits (and excluded_gpus does not exclude)",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_TOTAL, at=relaxation_at),
    layout_rule=True,
)
