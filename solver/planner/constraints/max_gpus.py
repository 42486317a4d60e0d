"""``max_gpus``: GPUs in use at any one time stay within ``constraints.max_gpus``.

lit => G <= max_gpus,  G = owned GPUs + cloud serving GPUs + cloud training GPUs
(sequential schedule: cloud workloads run one after another, so the largest of them counts)
"""

from __future__ import annotations

from clusterplan.candidates import CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.gpus_in_use is not None
    limit = ctx.table.limits.max_gpus
    assert limit is not None
    ctx.model.add(ctx.v.gpus_in_use <= limit).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.max_gpus is not None


FAMILY = Family(
    id="max_gpus",
    title="GPU count cap",
    sentence="GPUs in use at any one time stay within constraints.max_gpus",
    add=add,
    active=active,
)
