"""Markdown for pasting into a design document."""

from __future__ import annotations

from clusterplan.plan import Plan, ServingPlan, TrainingPlan
from clusterplan.wording import odds, provisional, simulated
from clusterplan.wording.fmt import (
    INCOMPLETE_NOTE,
    also_runs_as,
    disaggregation_lines,
    group_layout,
    layout,
    margin,
    monthly_lines,
    precision_lines,
    seconds,
    usd,
)
from clusterplan.wording.reasons import render_relaxed, render_warning
from clusterplan.wording.safe import visible_lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def render(plan: Plan) -> str:
    out: list[str] = [f"# {plan.requirement.name}", ""]
    s = plan.solver
    line = f"Status: **{plan.status}** (objective {s.objective}"
    if s.gap is not None and s.status == "feasible":
        line += f"; time limit hit, gap {s.gap:.2%}"
    out += [line + ").", ""]
    note = odds.confidence_note(plan.confidence)
    if note:
        out += [note, ""]
    out += [f"> **Warning:** {render_warning(w)}" for w in plan.warnings] + ([""] if plan.warnings else [])
    if plan.designs:
        out += [
            "## Designs, best first",
            "",
            "| # | GPUs | layout | capital | monthly | total | $/M tok | within model error |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for d in plan.designs:
            lay = "<br>".join([*(f"{w.workload}: {layout(w)}" for w in d.workloads), *also_runs_as(d)])
            tags = "".join(f"<br>{t}" for t in d.labels)
            out.append(
                f"| {d.rank}{' (time limit)' if d.cut_short else ''}{tags} | {_cell(d.summary)} | {_cell(lay)} | {usd(d.costs.capital_usd)} | "
                f"{usd(d.costs.monthly_usd)} | {usd(d.costs.total_usd)} | "
                f"{usd(d.costs.usd_per_million_output_tokens)} | {_cell(odds.cell(d))} |"
            )
        d = plan.designs[0]
        out += ["", "## Design 1", ""]
        for w in d.workloads:
            if isinstance(w, ServingPlan):
                out.append(
                    f"- **{w.workload}** ({w.model}): {w.demand_rps:,.2f} req/s at peak, capacity "
                    f"{w.capacity_rps:,.2f} req/s ({w.headroom_pct:+.0f}%)"
                )
                for g in w.groups:
                    out.append(
                        f"  - {group_layout(g)}: TTFT {seconds(g.ttft_s)}, TPOT {seconds(g.tpot_s)}, "
                        f"at rated load TTFT mean {seconds(g.mean_ttft_s)} / p95 {seconds(g.p95_ttft_s)}, "
                        f"TPOT mean {seconds(g.mean_tpot_s)} / p95 {seconds(g.p95_tpot_s)}, "
                        f"e2e mean {seconds(g.mean_latency_s)} / p95 {seconds(g.p95_latency_s)}, "
                        f"{g.memory_gib_per_gpu:,.1f}/{g.gpu_memory_gib:,.0f} GiB per GPU"
                    )
            elif isinstance(w, TrainingPlan):
                out.append(
                    f"- **{w.workload}** ({w.model}): {layout(w)}, {seconds(w.time_to_train_s)} "
                    f"(deadline {seconds(w.deadline_s)}), MFU {w.mfu:.0%}"
                )
        if d.odds:
            out += ["", "Chance of meeting each target (the model's measured error, `catalog/model_error.yaml`):", ""]
            out += [f"- {odds.sentence(o)}" for o in d.odds]
        if d.simulation_misses:
            out += ["", simulated.HEADING, ""]
            out += [f"- {simulated.sentence(m)}" for m in d.simulation_misses]
        out += [
            "",
            "| kind | what | units | GPUs | buy | $/h | capital | monthly |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for x in d.hardware:
            out.append(
                f"| {x.kind} | {_cell(x.label)} | {x.units} | {x.gpus} | "
                f"{x.bought if x.kind == 'owned' else '-'} | "
                f"{f'{x.usd_per_hour:,.2f}' if x.kind == 'cloud' else '-'} | {usd(x.capital_usd)} | "
                f"{usd(x.monthly_usd)} |"
            )
        out += [""] + [f"- {line}" for line in monthly_lines(d)]
        out += [f"- {line}" for line in precision_lines(plan.precision, d)]
        if d.rank == 1:
            out += [f"- {line}" for line in disaggregation_lines(plan.disaggregation)]
        if d.rank == 1 and plan.simulation_rejected:
            out += ["", simulated.REJECTED_HEADING, ""]
            lines = [line for r in plan.simulation_rejected for line in simulated.rejection(r)]
            out += [f"  - {x.strip()}" if x.startswith("  ") else f"- {x}" for x in lines]
        if d.provisional:
            out += ["", provisional.HEADING, ""] + [f"- {provisional.line(f)}" for f in d.provisional]
    e = plan.explanation
    if e is not None:
        out += [
            "",
            "## Why this one",
            "",
            *([INCOMPLETE_NOTE, ""] if not e.complete else []),
            "| constraint | status | margin | detail | to what (if relaxed) |",
            "|---|---|---|---|---|",
        ]
        for c in e.constraints:
            relaxed = render_relaxed(c)
            out.append(
                f"| {c.title} | {c.status} | {margin(c.margin, c.unit)} | {_cell(c.detail)} | {_cell(relaxed)} |"
            )
        if e.lost_gpus:
            out += ["", "Cheaper GPU types that lost:", ""]
            out += [f"- [{x.workload}] {x.reason}" for x in e.lost_gpus]
        if e.mixes:
            out += [""] + [f"- {m.text}" for m in e.mixes]
        if e.notes:
            out += ["", "Notes:", ""] + [f"- {n}" for n in e.notes]
        out += ["", "<details><summary>Assumptions</summary>", ""] + [f"- {a}" for a in e.assumptions]
        out += ["", "</details>"]
    inf = plan.infeasibility
    if inf is not None:
        out += ["", "## No design meets the requirement", ""]
        out += [f"- {c}" for c in inf.causes]
        out += [f"- {u}" for u in inf.unplaceable]
        if inf.conflict:
            out += ["Conflicting constraints (minimal):", ""] + [f"- **{f.title}**: {f.sentence}" for f in inf.conflict]
            out += ["", "Least relaxations, each alone:", ""]
            out += [f"- {r.change}" for r in inf.relaxations]
        elif not inf.unplaceable and not inf.causes:
            out.append(inf.text)
    if plan.status == "unknown":
        out += [
            "",
            f"No answer within the time limit ({s.time_limit_s:g} s for the whole command): neither a design nor a "
            "proof that none exists.",
        ]
    return visible_lines("\n".join(out) + "\n")
