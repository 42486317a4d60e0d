"""``max_gpus``: GPUs in use at any one time stay within ``constraints.max_gpus``.

lit => G <= max_gpus,  G = owned GPUs + cloud serving GPUs + cloud training GPUs
(sequential schedule: cloud workloads run one after another, so the largest of them counts)
"""

from __future__ import annotations

from clusterplan.candidates.table import CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner.families import Family, FamilyContext, Relaxing
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, restores, within
from clusterplan.planner.families.goals import Goal


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.gpus_in_use is not None
    limit = ctx.table.limits.max_gpus
    assert limit is not None
    ctx.model.add(ctx.v.gpus_in_use <= limit).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.max_gpus is not None


def margin(d: DesignFacts) -> Margin | None:
    cap = d.table.limits.max_gpus
    if cap is None:
        return None
    return Margin(float(cap - d.gpus_in_use), "GPUs", f"{d.gpus_in_use} of {cap} GPUs")


def check(d: DesignFacts) -> bool:
    return within(d.gpus_in_use, d.table.limits.max_gpus)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    return restores(r.fid, f"constraints.max_gpus >= {int(r.value)}", r.value, "GPUs")


FAMILY = Family(
    id="max_gpus",
    title="GPU count cap",
    sentence="GPUs in use at any one time stay within constraints.max_gpus",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_GPUS, at=relaxation_at),
)
