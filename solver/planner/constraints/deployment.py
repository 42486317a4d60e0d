"""``deployment``: cloud only or owned only, as the requirement's ``deployment`` says.

lit => every unit of the excluded kind is 0 (and training rows on it are unselected)
"""

from __future__ import annotations

from clusterplan.candidates import DEPLOYMENT, CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext, forbid_rows


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, DEPLOYMENT)


def active(table: CandidateTable) -> bool:
    return table.limits.deployment != "either"


FAMILY = Family(
    id="deployment",
    title="deployment",
    sentence="GPUs come only from the deployment the requirement names (cloud or owned)",
    add=add,
    active=active,
)
