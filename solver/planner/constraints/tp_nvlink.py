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

from clusterplan.candidates import TP_NVLINK, CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext, forbid_rows
from clusterplan.planner.constraints.structure import add_capacity


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, TP_NVLINK)
    add_capacity(ctx.model, ctx.v, ctx.table, min_t=2, enforce=ctx.lit)


def active(table: CandidateTable) -> bool:
    for wc in table.workloads:
        for row in wc.rows:
            if row.tp > 1 or TP_NVLINK in row.forbidding_families:
                return True
    return False


FAMILY = Family(
    id="tp_nvlink",
    title="tensor parallel within NVLink",
    sentence="tensor-parallel groups stay inside one NVLink domain of one instance or server",
    add=add,
    active=active,
)
