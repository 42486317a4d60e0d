"""``allowed_quant``: serving weights only in the precisions ``constraints.quantizations`` lists.

lit => sel[w,r] = 0 for rows at other precisions
"""

from __future__ import annotations

from clusterplan.candidates import ALLOWED_QUANT, CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext, forbid_rows


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, ALLOWED_QUANT)


def active(table: CandidateTable) -> bool:
    return table.limits.quantizations is not None


FAMILY = Family(
    id="allowed_quant",
    title="allowed quantizations",
    sentence="serving weights use only the precisions constraints.quantizations lists",
    add=add,
    active=active,
)
