"""``deployment``: cloud only or owned only, as the requirement's ``deployment`` says.

lit => every unit of the excluded kind is 0 (and training rows on it are unselected)
"""

from __future__ import annotations

from clusterplan.candidates.table import DEPLOYMENT, CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner.families import Family, FamilyContext, Relaxing, forbid_rows
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, restores
from clusterplan.planner.families.goals import Goal


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, DEPLOYMENT)


def active(table: CandidateTable) -> bool:
    return table.limits.deployment != "either"


def margin(d: DesignFacts) -> Margin | None:
    return Margin(None, "", f"deployment: {d.table.limits.deployment}")


def check(d: DesignFacts) -> bool:
    """Cloud only: no owned server, replica or training run; owned only: no cloud instance, replica or run."""
    kinds = {"cloud" for _, n in d.instances if n} | {"owned" for n in d.owned_units().values() if n}
    kinds |= {a.where for a in d.training}
    kinds |= {w for a in d.serving for w, n in (("cloud", a.cloud_replicas), ("owned", a.owned_replicas)) if n}
    deployment = d.table.limits.deployment
    return deployment == "either" or kinds <= {deployment}


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    return restores(r.fid, "deployment: either")


FAMILY = Family(
    id="deployment",
    title="deployment",
    sentence="GPUs come only from the deployment the requirement names (cloud or owned)",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_TOTAL, at=relaxation_at),
)
