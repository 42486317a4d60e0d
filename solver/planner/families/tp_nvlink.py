"""``tp_nvlink``: tensor-parallel groups stay inside one NVLink (or Infinity Fabric) domain.

Two parts, both behind the literal:

1. rows whose TP degree exceeds the GPU's NVLink domain (PCIe-only GPUs: 1) are unusable;
2. nested packing: for each GPU type g, deployment (cloud/owned) and TP size t >= 2, the GPUs in TP
   groups of size >= t fit in the units whose TP domain is >= t:

       lit => sum_{rows with tp >= t} tp*pp * x  <=  sum_{units with domain >= t} cap_t(unit) * count

   TP groups and domains are powers of two, so with these inequalities for every t a largest-first
   assignment places every group inside one domain (the t = 1 inequality is in ``structure``).
"""

from __future__ import annotations

from clusterplan.candidates.table import TP_NVLINK, CandidateTable, ServingRow, TrainingRow
from clusterplan.plan import Relaxation
from clusterplan.planner.families import Family, FamilyContext, Relaxing, forbid_rows
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, restores
from clusterplan.planner.families.goals import Goal
from clusterplan.planner.families.structure import add_capacity


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, TP_NVLINK)
    add_capacity(ctx.model, ctx.v, ctx.table, min_t=2, enforce=ctx.lit)


def active(table: CandidateTable) -> bool:
    for wc in table.workloads:
        for row in wc.rows:
            group = row.nvlink_group if isinstance(row, ServingRow) else row.tp
            if group > 1 or TP_NVLINK in row.forbidding_families:
                return True
    return False


def margin(d: DesignFacts) -> Margin | None:
    return Margin(None, "", "every tensor-parallel group sits inside one NVLink domain")


def check(d: DesignFacts) -> bool:
    """No row in use is marked for TP beyond NVLink, none has TP above its GPU's NVLink domain, and a
    cloud training run's TP fits its instance's domain. (Packing the groups into the units bought is
    the enumerator's part: the facts do not say which group sits on which unit.)"""
    t = d.table
    for wc in t.workloads:
        serving_rows = [r for _, r in d.serving_rows(wc)]
        for sr in serving_rows:
            g = t.gpus.get(sr.gpu_id)
            if TP_NVLINK in sr.forbidding_families or (g is not None and sr.nvlink_group > g.nvlink_domain):
                return False
        rows: list[TrainingRow] = []
        tr = d.training_row(wc)
        if tr is not None:
            a, trow = tr
            rows.append(trow)
            cloud = t.offering(trow.cloud_offering) if trow.cloud_offering is not None else None
            if a.where == "cloud" and cloud is not None and trow.tp > cloud.tp_domain:
                return False
        for r in rows:
            g = t.gpus.get(r.gpu_id)
            if TP_NVLINK in r.forbidding_families or (g is not None and r.tp > g.nvlink_domain):
                return False
    return True


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    return restores(r.fid, "tensor parallelism across PCIe or nodes (slow; not recommended)")


FAMILY = Family(
    id="tp_nvlink",
    title="tensor parallel within NVLink",
    sentence="tensor-parallel groups stay inside one NVLink domain of one instance or server",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_TOTAL, at=relaxation_at),
    layout_rule=True,
)
