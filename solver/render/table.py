"""The default human rendering: rich tables of the ranked designs and "Why this one"."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clusterplan.plan import Design, Plan, ServingPlan, TrainingPlan
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


def render(plan: Plan, console: Console) -> None:
    p = console.print
    s = plan.solver
    head = f"[bold]{plan.requirement.name}[/bold]  status: [bold]{plan.status.upper()}[/bold]  objective: {s.objective}"
    if s.status == "feasible" and s.gap is not None:
        head += f"  (time limit: best bound {s.best_bound:,.0f}, gap {s.gap:.2%})"
    p(head)
    note = odds.confidence_note(plan.confidence)
    if note:
        console.print(note, markup=False)
    for w in plan.warnings:
        console.print(f"warning: {render_warning(w)}", markup=False, style="yellow")
    if plan.designs:
        _designs(plan, console)
        _detail(plan.designs[0], console)
        for line in precision_lines(plan.precision, plan.designs[0]):
            console.print(line, markup=False)
        for line in disaggregation_lines(plan.disaggregation):
            console.print(line, markup=False)
    if plan.simulation_rejected:
        console.print(simulated.REJECTED_HEADING, markup=False)
        for r in plan.simulation_rejected:
            for line in simulated.rejection(r):
                console.print(f"  {line}", markup=False)
    if plan.explanation is not None:
        _why(plan, console)
    if plan.infeasibility is not None:
        _infeasible(plan, console)
    if plan.status == "unknown":
        console.print(
            f"No answer within the time limit ({s.time_limit_s:g} s for the whole command): neither a design "
            "nor a proof that none exists. Raise --time-limit.",
            markup=False,
        )


def _designs(plan: Plan, console: Console) -> None:
    t = Table(title="Designs, best first", title_justify="left", show_lines=True)
    for col in ("#", "GPUs", "layout", "capital", "monthly", "total", "$/M tok", "headroom", "within model error"):
        t.add_column(col, overflow="fold")
    for d in plan.designs:
        heads = [f"{w.workload} {w.headroom_pct:+.0f}%" for w in d.workloads if isinstance(w, ServingPlan)]
        t.add_row(
            "\n".join([str(d.rank), *(["(time limit)"] if d.cut_short else []), *d.labels]),
            escape(d.summary),
            escape("\n".join([*(f"{w.workload}: {layout(w)}" for w in d.workloads), *also_runs_as(d)])),
            usd(d.costs.capital_usd),
            usd(d.costs.monthly_usd),
            usd(d.costs.total_usd),
            usd(d.costs.usd_per_million_output_tokens),
            "\n".join(heads) or "-",
            escape(odds.cell(d)),
        )
    console.print(t)


def _detail(d: Design, console: Console) -> None:
    t = Table(title="Design 1 in detail", title_justify="left")
    columns = (
        "workload",
        "replicas / layout",
        "throughput",
        "TTFT idle / mean / p95 at load",
        "TPOT full batch / mean / p95 at load",
        "e2e mean / p95",
        "mem/GPU",
    )
    for col in columns:
        t.add_column(col, overflow="fold")
    for w in d.workloads:
        if isinstance(w, ServingPlan):
            for g in w.groups:
                t.add_row(
                    escape(w.workload),
                    escape(group_layout(g)),
                    f"{g.rate_rps * g.replicas:,.2f} req/s ({w.demand_rps:,.2f} at peak)",
                    f"{seconds(g.ttft_s)} / {seconds(g.mean_ttft_s)} / {seconds(g.p95_ttft_s)}",
                    f"{seconds(g.tpot_s)} / {seconds(g.mean_tpot_s)} / {seconds(g.p95_tpot_s)}",
                    f"{seconds(g.mean_latency_s)} / {seconds(g.p95_latency_s)}",
                    f"{g.memory_gib_per_gpu:,.1f}/{g.gpu_memory_gib:,.0f} GiB",
                )
        elif isinstance(w, TrainingPlan):
            t.add_row(
                escape(w.workload),
                escape(layout(w)),
                f"{w.tokens_per_s:,.0f} tok/s, MFU {w.mfu:.0%}",
                "-",
                "-",
                f"{seconds(w.time_to_train_s)} of {seconds(w.deadline_s)}",
                f"{w.memory_gib_per_gpu:,.1f}/{w.gpu_memory_gib:,.0f} GiB",
            )
    console.print(t)
    h = Table(title="Hardware", title_justify="left")
    for col in ("kind", "what", "units", "GPUs", "buy", "from inventory", "$/h", "capital", "monthly", "for"):
        h.add_column(col, overflow="fold")
    for x in d.hardware:
        h.add_row(
            x.kind,
            escape(x.label),
            str(x.units),
            str(x.gpus),
            str(x.bought) if x.kind == "owned" else "-",
            str(x.from_inventory) if x.kind == "owned" else "-",
            f"{x.usd_per_hour:,.2f}" if x.kind == "cloud" else "-",
            usd(x.capital_usd),
            usd(x.monthly_usd),
            escape(x.purpose),
        )
    console.print(h)
    for line in monthly_lines(d):
        console.print(f"  {line}", markup=False)
    if d.odds:
        console.print("Chance of meeting each target (the model's measured error, catalog/model_error.yaml):")
        for o in d.odds:
            console.print(f"  - {odds.sentence(o)}", markup=False)
    if d.simulation_misses:
        console.print(simulated.HEADING, markup=False)
        for m in d.simulation_misses:
            console.print(f"  - {simulated.sentence(m)}", markup=False)
    c = d.costs
    console.print(
        f"cost: capital {usd(c.capital_usd)}, monthly {usd(c.monthly_usd)}, one-off {usd(c.one_off_usd)}, "
        f"total {usd(c.total_usd)} over {c.horizon_months:g} months"
        + (f" (with {usd(c.unused_commitment_usd)} of commitment beyond it)" if c.unused_commitment_usd else "")
        + f"; {d.gpus_total} GPUs in use",
        markup=False,
    )
    if d.provisional:
        console.print(provisional.HEADING, markup=False)
        for f in d.provisional:
            console.print(f"  - {provisional.line(f)}", markup=False)


def _why(plan: Plan, console: Console) -> None:
    e = plan.explanation
    assert e is not None
    console.print("\n[bold]Why this one[/bold]")
    if not e.complete:
        console.print(INCOMPLETE_NOTE, markup=False)
    t = Table(title="Constraints at the optimum", title_justify="left")
    for col in ("constraint", "status", "margin", "detail", "to what (if relaxed)"):
        t.add_column(col, overflow="fold")
    for chk in e.constraints:
        relaxed = render_relaxed(chk)
        t.add_row(chk.title, chk.status, margin(chk.margin, chk.unit), escape(chk.detail), escape(relaxed))
    console.print(t)
    if e.lost_gpus:
        console.print("Cheaper GPU types that lost:")
        for lost in e.lost_gpus:
            console.print(f"  - [{lost.workload}] {lost.reason}", markup=False)
    for m in e.mixes:
        console.print(f"Mix: {m.text}", markup=False)
    for n in e.notes:
        console.print(f"note: {n}", markup=False)
    console.print("assumptions: " + "; ".join(e.assumptions), markup=False, style="dim")


def _infeasible(plan: Plan, console: Console) -> None:
    inf = plan.infeasibility
    assert inf is not None
    console.print("\n[bold red]No design meets the requirement[/bold red]")
    for c in inf.causes:
        console.print(f"  - {c}", markup=False)
    for u in inf.unplaceable:
        console.print(f"  - {u}", markup=False)
    if inf.conflict:
        console.print("These constraints conflict (a minimal set; dropping any one of them removes the conflict):")
        for f in inf.conflict:
            console.print(f"  - {f.title}: {f.sentence}", markup=False)
        console.print("Least relaxations (each alone, everything else unchanged):")
        for r in inf.relaxations:
            console.print(f"  - {r.change}", markup=False)
    elif not inf.unplaceable and not inf.causes:
        console.print(inf.text, markup=False)
