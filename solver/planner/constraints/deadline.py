"""``deadline``: the selected training/fine-tuning layout finishes before the workload's deadline.

Layouts that miss it are marked while preparing candidates:  lit => y[w,r] = 0 for those rows.
"""

from __future__ import annotations

from clusterplan.candidates import DEADLINE, CandidateTable
from clusterplan.planner.constraints import Family, FamilyContext, forbid_rows


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, DEADLINE)


def active(table: CandidateTable) -> bool:
    return any(not wc.is_serving and wc.deadline_s is not None for wc in table.workloads)


FAMILY = Family(
    id="deadline",
    title="training deadline",
    sentence="each training or fine-tuning run finishes before its deadline",
    add=add,
    active=active,
)
