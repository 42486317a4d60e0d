"""The review's one-paragraph summary and its recommended actions, from the plan alone."""

from __future__ import annotations

from collections.abc import Sequence

from clusterplan.plan import Design, Plan, ServingPlan
from clusterplan.review.records import BindingRow
from clusterplan.whatif.sweep import (
    format_value,
)
from clusterplan.wording.fmt import usd


def _actions(design: Design) -> list[str]:
    out: list[str] = []
    for h in design.hardware:
        if h.kind == "owned":
            servers = f"{h.gpus_per_unit}-GPU {h.gpu} server"
            buy = f"buy {h.bought} {servers}{'s' if h.bought != 1 else ''}" if h.bought else ""
            inv = f"use {h.from_inventory} {servers}{'s' if h.from_inventory != 1 else ''} from inventory"
            inv = inv if h.from_inventory else ""
            out.extend(x for x in (buy, inv) if x)
        else:
            out.append(f"rent {h.units} x {h.label} ({h.gpus} {h.gpu} GPUs in all) at {usd(h.usd_per_hour)}/h each")
    return out


def summary_text(plan: Plan, binding: Sequence[BindingRow]) -> str:
    """One paragraph: what to buy or rent, what it costs, what bounds it (or, if nothing fits, why)."""
    name = plan.requirement.name
    if not plan.designs:
        inf = plan.infeasibility
        if inf is None:
            return f"No design for {name} was found or ruled out within the time limit; raise --time-limit."
        if inf.unplaceable:
            return f"No design meets {name}: " + "; ".join(inf.unplaceable) + "."
        if not inf.conflict:
            return f"No design meets {name}: {inf.text}."
        titles = ", ".join(f.title for f in inf.conflict)
        fixes = [r.change for r in inf.relaxations if r.restores_feasibility]
        text = f"No design meets {name}: these requirements cannot all hold: {titles}."
        if fixes:
            text += " Any one of these changes restores feasibility: " + "; ".join(fixes) + "."
        else:
            text += " No single relaxation restores feasibility on its own; relax several of them."
        return text
    d = plan.designs[0]
    c = d.costs
    parts = [f"For {name}, " + "; ".join(_actions(d)) + "."]
    money = f"It costs {usd(c.capital_usd)} up front and {usd(c.monthly_usd)} a month"
    if c.one_off_usd:
        money += f", plus {usd(c.one_off_usd)} of one-off cloud training"
    money += f": {usd(c.total_usd)} over {c.horizon_months:g} months"
    if c.usd_per_million_output_tokens is not None:
        money += f" ({usd(c.usd_per_million_output_tokens)} per million output tokens)"
    parts.append(money + ".")
    for w in d.workloads:
        if isinstance(w, ServingPlan):
            parts.append(
                f"{w.workload} gets {w.capacity_rps:,.2f} req/s within its targets for {w.demand_rps:,.2f} req/s at "
                f"peak ({w.headroom_pct:+.0f}% headroom)."
            )
        else:
            due = f" against a {format_value(w.deadline_s, 'duration')} deadline" if w.deadline_s else ""
            parts.append(f"{w.workload} trains in {format_value(w.time_to_train_s, 'duration')}{due}.")
    if binding:
        bounds = []
        for b in binding:
            save = (
                f" would save {usd(b.saving_usd)}" if b.saving_usd is not None and b.saving_usd > 0.5 else " would help"
            )
            bounds.append(f"relaxing {b.title}{save}")
        parts.append("It is bounded by " + ", ".join(b.title for b in binding) + ": " + "; ".join(bounds) + ".")
    else:
        parts.append("No stated constraint binds: this is the least-cost way to run the workloads as given.")
    if plan.status == "feasible" and plan.solver.gap is not None:
        parts.append(f"The solver's time limit stopped the proof of optimality (gap {plan.solver.gap:.2%}).")
    return " ".join(parts)
