"""Which field the review's small what-if sweep varies, and over which values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusterplan.plan import Infeasibility, Plan
from clusterplan.planner.families import family
from clusterplan.review.records import WHATIF_FACTORS, WhatIf
from clusterplan.whatif.sweep import (
    Axis,
    Base,
    first_workload,
    parse_value,
    resolve_field,
)

INFEASIBLE_DEMAND_FACTORS = (0.125, 0.25, 0.5, 0.75, 1.0)


def _spread(lo: float, hi: float, n: int = len(WHATIF_FACTORS)) -> list[float]:
    return [float(f"{lo + (hi - lo) * i / (n - 1):.4g}") for i in range(n)]


def early_axis(base: Base, choice: WhatIf) -> tuple[Axis, str] | None:
    """The axis and objective :func:`choose_axis` picks when the plan has a design, where the plan does not decide
    them (a budget axis takes its figure from the design where the file gives none: None), so that the sweep can
    start before the plan; the caller keeps it only where ``choose_axis`` of the plan picks the same."""
    if choice == "budget":
        return None
    return _choose(base, None, None, choice)


def choose_axis(base: Base, plan: Plan, choice: WhatIf) -> tuple[Axis, str] | None:
    """The axis and objective of the report's what-if sweep, or None when there is none to make.

    auto: demand for serving (none where it is a demand profile), the deadline for training; when the requirement is
    infeasible, the budget
    in the conflict from the value given to past its least relaxation (so the plot shows where it becomes
    feasible), or else demand below the value given.
    """
    total = plan.designs[0].costs.total_usd if plan.designs else None
    return _choose(base, plan.infeasibility, total, choice)


def _choose(
    base: Base, inf: Infeasibility | None, design_total_usd: float | None, choice: WhatIf
) -> tuple[Axis, str] | None:
    data = base.data
    first = first_workload(data, ("serving",))
    serving = first is not None
    # a demand profile is 24 or 168 hourly rates, not one figure a sweep can scale (whatif/vary.py refuses it)
    scalable = serving and data["workloads"][first].get("profile") is None
    training = first_workload(data, ("training", "finetune")) is not None
    if choice == "auto" and inf is not None:
        for r in inf.relaxations:
            relaxing = family(r.family).relaxation
            raised = relaxing.field if relaxing is not None else None
            if raised is not None and r.value is not None and r.restores_feasibility:
                target = resolve_field(raised, data, base.catalog)
                given = _value_at(data, target.keys, target.quantity, target.field) or 0.0
                return Axis(target=target, values=_spread(given, r.value * 1.5)), "min_cost"
        if scalable:
            target = resolve_field("demand", data, base.catalog)
            given = _value_at(data, target.keys, target.quantity, "demand") or 0.0
            return Axis(
                target=target, values=[float(f"{given * f:.4g}") for f in INFEASIBLE_DEMAND_FACTORS]
            ), "min_cost"
    if choice == "auto":
        choice = "demand" if scalable else ("deadline" if training else "none")
    if choice == "none":
        return None
    if choice == "budget":
        target = resolve_field("budget", data, base.catalog)
        ref = _value_at(data, target.keys, "money", "budget")
        if ref is None:
            ref = design_total_usd
        if ref is None:
            return None
        values = [round(ref * f, -2) for f in WHATIF_FACTORS]
        return Axis(target=target, values=values), ("max_throughput" if serving else "min_cost")
    target = resolve_field(choice, data, base.catalog)
    ref = _value_at(data, target.keys, target.quantity, choice)
    if ref is None:
        return None
    return Axis(target=target, values=[float(f"{ref * f:.4g}") for f in WHATIF_FACTORS]), "min_cost"


def _value_at(data: dict[str, Any], keys: Sequence[str | int], quantity: Any, field: str) -> float | None:
    node: Any = data
    for k in keys:
        if isinstance(k, int):
            node = node[k] if isinstance(node, list) and k < len(node) else None
        else:
            node = node.get(k) if isinstance(node, dict) else None
        if node is None:
            return None
    return parse_value(str(node), quantity, field=field)
