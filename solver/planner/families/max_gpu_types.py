"""``max_gpu_types``: the fleet runs on at most ``fleet.max_gpu_types`` distinct GPU types.

lit => sum_g used[g] <= max_gpu_types,  used[g] implied by every row, training run and unit of GPU type g
(structure: each GPU type is one more driver, image, spare pool and capacity plan to operate)
"""

from __future__ import annotations

from clusterplan.candidates.table import CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner.families import Family, FamilyContext, Relaxing
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, restores, within
from clusterplan.planner.families.goals import Goal


def add(ctx: FamilyContext) -> None:
    assert ctx.lit is not None and ctx.v.gpu_types_used is not None
    limit = ctx.table.limits.max_gpu_types
    assert limit is not None
    ctx.model.add(ctx.v.gpu_types_used <= limit).only_enforce_if(ctx.lit)


def active(table: CandidateTable) -> bool:
    return table.limits.max_gpu_types is not None


def margin(d: DesignFacts) -> Margin | None:
    cap = d.table.limits.max_gpu_types
    if cap is None:
        return None
    used = sorted(d.gpus_used())
    return Margin(float(cap - len(used)), "GPU types", f"{len(used)} of {cap} GPU types ({', '.join(used)})")


def check(d: DesignFacts) -> bool:
    return within(len(d.gpus_used()), d.table.limits.max_gpu_types)


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    return restores(r.fid, f"fleet.max_gpu_types >= {int(r.value)}", r.value, "GPU types")


FAMILY = Family(
    id="max_gpu_types",
    title="GPU type cap",
    sentence="the fleet runs on at most fleet.max_gpu_types distinct GPU types",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_GPU_TYPES, at=relaxation_at),
)
