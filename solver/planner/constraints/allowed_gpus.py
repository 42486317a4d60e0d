"""``allowed_gpus``: only GPUs in ``constraints.allowed_gpus`` and not in ``excluded_gpus``.

lit => sel[w,r] = 0 and y[w,r] = 0 for rows on other GPUs
"""

from __future__ import annotations

from clusterplan.candidates import ALLOWED_GPUS, CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext, forbid_rows


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, ALLOWED_GPUS)


def active(table: CandidateTable) -> bool:
    return table.limits.allowed_gpus is not None


FAMILY = Family(
    id="allowed_gpus",
    title="allowed GPUs",
    sentence="only the GPU types constraints.allowed_gpus permits (and excluded_gpus does not exclude)",
    add=add,
    active=active,
)
