"""``deadline``: the selected training/fine-tuning layout finishes before the workload's deadline.

Layouts that miss it are marked while preparing candidates:  lit => y[w,r] = 0 for those rows.
"""

from __future__ import annotations

import math

from clusterplan.candidates.table import DEADLINE, CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner.families import Family, FamilyContext, Relaxing, forbid_rows
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, within, worst
from clusterplan.planner.families.goals import Goal


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, DEADLINE)


def active(table: CandidateTable) -> bool:
    return any(not wc.is_serving and wc.deadline_s is not None for wc in table.workloads)


def _runs(d: DesignFacts) -> list[tuple[str, float, float]]:
    """(workload, time to train in s, deadline in s) of every training run with a deadline."""
    out = []
    for wc in d.table.workloads:
        tr = d.training_row(wc) if not wc.is_serving else None
        if tr is not None and wc.deadline_s is not None:
            out.append((wc.name, tr[1].time_to_train_s, wc.deadline_s))
    return out


def margin(d: DesignFacts) -> Margin | None:
    items = [
        ((deadline - t) / 86400.0, f"{name}: {t / 86400:,.1f} d of {deadline / 86400:,.1f} d")
        for name, t, deadline in _runs(d)
    ]
    w = worst(items)
    return None if w is None else Margin(w[0], "days", w[1])


def check(d: DesignFacts) -> bool:
    return all(within(t, deadline) for _, t, deadline in _runs(d))


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    """Each late run's deadline moved to its time to train, rounded up to a tenth of a day."""
    parts = []
    worst_days = 0.0
    for name, t, deadline in _runs(r.design):
        if t > deadline:
            days = math.ceil(t / 86400 * 10) / 10
            worst_days = max(worst_days, days)
            parts.append(f"{name}: deadline >= {days:g}d")
    return Relaxation(
        family=r.fid,
        change="; ".join(parts) or "deadline: any",
        value=worst_days or None,
        unit="days",
        restores_feasibility=True,
    )


FAMILY = Family(
    id="deadline",
    title="training deadline",
    sentence="each training or fine-tuning run finishes before its deadline",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_DEADLINE_RATIO, at=relaxation_at),
)
