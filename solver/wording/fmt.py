"""Number formatting: the one home of how money, durations and rates are written.

Every renderer and every sentence-writing module (family wording, estimate output) formats through
these, so the same figure reads the same everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from clusterplan.plan import (
    Autoscaler,
    Costs,
    Design,
    DisaggregationNote,
    HardwareLine,
    PrecisionGate,
    QualityEvidence,
    ReplicaGroup,
    ServingPlan,
    TrainingPlan,
)


def usd(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1e6:
        return f"${x / 1e6:,.2f}M"
    if abs(x) >= 1e4:
        return f"${x / 1e3:,.1f}k"
    return f"${x:,.0f}" if abs(x) >= 100 else f"${x:,.2f}"


def monthly_parts(x: HardwareLine) -> str:
    """What an owned line's month is made of: 'energy $1,164 + colocation $1,877 + support $2,738' (cloud: '')."""
    if x.kind != "owned":
        return ""
    parts = [
        ("energy", x.energy_usd_per_month),
        ("colocation", x.colocation_usd_per_month),
        ("support", x.support_usd_per_month),
        ("operations", x.operations_usd_per_month),
    ]
    return " + ".join(f"{name} {usd(v)}" for name, v in parts if v or name == "energy")


def operations_line(c: Costs) -> str | None:
    """The fleet's operations a month: 'operations: 2 GPU types x $1,550 + 3 pools x $775 = $5,425/month'
    (None: the catalog charges none)."""
    total = c.gpu_type_operations_usd_per_month + c.pool_operations_usd_per_month
    if total <= 0:
        return None
    parts = []
    for n, one, word in ((c.gpu_types_operated, c.gpu_type_operations_usd_per_month, "GPU type"),
                         (c.pools, c.pool_operations_usd_per_month, "pool")):  # fmt: skip
        if one > 0:
            parts.append(f"{n} {word}{'' if n == 1 else 's'} x {usd(one / n)}")
    return f"operations: {' + '.join(parts)} = {usd(total)}/month"


def monthly_lines(design: Design) -> list[str]:
    """One sentence per owned hardware line (its monthly cost and what it is made of), then the operations of the
    design's GPU types and serving pools."""
    out = [
        f"owned {x.label} x {x.units}: {usd(x.monthly_usd)}/month = {monthly_parts(x)}"
        for x in design.hardware
        if x.kind == "owned"
    ]
    ops = operations_line(design.costs)
    out = [*out, ops] if ops is not None else out
    return out + [line for w in design.workloads if (line := autoscaler_line(w)) is not None]


def autoscaler_line(w: ServingPlan | TrainingPlan) -> str | None:
    """A demand profile's fleet: 'assistant: 1 replica every hour, 3 at the peak hour; 28 burst replica-hours a day
    on cloud:lambda:gpu_1x_gh200 at $2.29/replica-hour = $1,323/month' (None: flat demand)."""
    a = w.autoscaler if isinstance(w, ServingPlan) else None
    return None if a is None else autoscaler_words(w.workload, a)


def autoscaler_words(workload: str, a: Autoscaler) -> str:
    """:func:`autoscaler_line` of one autoscaler (the plan's, or a pinned design's in ``clusterplan estimate``)."""
    head = f"{workload} autoscaler: min {a.min_replicas}, max {a.max_replicas} replicas"
    if not a.burst_replica_hours_per_period:
        return head + " (no burst: every replica runs every hour)"
    period = "day" if a.period == "daily" else "week"
    return (
        f"{head}; {a.burst_replica_hours_per_period:,} burst replica-hours a {period} on {a.burst_offering} at "
        f"{usd_exact(a.burst_usd_per_replica_hour)}/replica-hour = {usd(a.burst_usd_per_month)}/month"
    )


def usd_exact(x: float | None, *, missing: str = "-") -> str:
    """Whole dollars from $100 up, cents below: a figure to compare to the cent, never abbreviated."""
    if x is None:
        return missing
    return f"${x:,.0f}" if abs(x) >= 100 else f"${x:,.2f}"


def usd_3sf(x: float | None) -> str:
    """Three significant figures below $100 (a price per GPU-hour divided by a TFLOPS figure is ~$0.003),
    whole dollars above: a ratio, never '$0.00'."""
    if x is None:
        return "-"
    return f"${x:,.0f}" if abs(x) >= 100 else f"${x:.3g}"


def usd_per_m(x: float | None) -> str:
    """A price per million tokens: cents from $0.10 up ($0.40, $2.40), two significant figures below ($0.030)."""
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"${x:,.0f}"
    return f"${x:,.2f}" if abs(x) >= 0.1 or x == 0 else f"${x:.2g}"


def usd_up(x: float) -> str:
    """Whole dollars, rounded up (a budget relaxation is never understated)."""
    return f"${math.ceil(x):,}"


def up_3sf(x: float) -> str:
    """Three significant figures, rounded up: a relaxed target is never understated, and overstated by
    at most 1%, under the ~3% step of the search that finds it (two figures could add 10% just above 1)."""
    if x <= 0:
        return "0"
    digits = 3 - math.floor(math.log10(x)) - 1
    scale = 10.0**digits
    return f"{math.ceil(x * scale - 1e-9) / scale:g}"


def rps(x: float) -> str:
    """A request rate: two decimals, or three significant figures below 0.01 (never '0.00' for a demand)."""
    if x >= 0.01 or x <= 0:
        return f"{x:,.2f}"
    return f"{x:.3g}"


def seconds(x: float | None) -> str:
    """A duration in the largest unit that keeps it readable: ms, s, h or d."""
    if x is None:
        return "-"
    if math.isinf(x):
        return "unbounded"
    if x >= 86400:
        return f"{x / 86400:,.1f} d"
    if x >= 3600:
        return f"{x / 3600:,.1f} h"
    if x >= 1:
        return f"{x:,.2f} s"
    return f"{x * 1000:,.1f} ms" if x < 0.1 else f"{x * 1000:,.0f} ms"


def margin(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "USD":
        return usd(value)
    if unit == "USD/month":
        return f"{usd(value)}/mo"
    if unit.startswith("%"):
        return f"{value:+.1f}%"
    return f"{value:,.2f} {unit}" if abs(value) < 100 else f"{value:,.0f} {unit}"


def also_runs_as(d: Design) -> list[str]:
    """The design's other layouts on the same hardware, one line each (the designs table's layout cell)."""
    return [f"also runs as: {text}" for text in d.also_runs_as]


def layout(w: ServingPlan | TrainingPlan) -> str:
    if isinstance(w, ServingPlan):
        return "; ".join(group_layout(g) for g in w.groups)
    cp = f" CP{w.cp}" if w.cp > 1 else ""
    cp += f" EP{w.ep}" if w.ep > 1 else ""
    vpp = f" VPP{w.virtual_stages}" if w.virtual_stages > 1 else ""
    rec = w.recompute
    if rec == "full" and w.recompute_layers:
        rec = f"full ({w.recompute_layers} layers/stage)"
    return (
        f"{w.gpus}x {w.gpu} TP{w.tp}{cp} PP{w.pp}{vpp} DP{w.dp} ZeRO-{w.zero_stage} recompute {rec} "
        f"mb {w.micro_batch} ({w.deployment})"
        + (f" [{', '.join(w.memory_options)}]" if w.memory_options else "")
        + (f" on {w.framework}" if w.framework else "")
    )


def moe_layout(ep: int, attention_dp: bool, servers: int = 1) -> str:
    """`` EP8 attention-DP`` for an MoE layout (`` EP16 attention-DP over 2 servers`` where a stage spans servers);
    empty for the dense one."""
    over = f" over {servers} servers" if servers > 1 else ""
    return (f" EP{ep}" if ep > 1 else "") + (" attention-DP" if attention_dp else "") + over


def group_layout(g: ReplicaGroup) -> str:
    where = "+".join(k for k, n in (("cloud", g.cloud_replicas), ("owned", g.owned_replicas)) if n)
    moe = moe_layout(g.ep, g.attention_dp, g.servers_per_stage)
    pool = "" if g.role == "aggregated" else f"{g.role} "
    return f"{g.replicas}x {pool}[{g.gpu} TP{g.tp} PP{g.pp}{moe} {g.quant} batch {g.batch}] ({where})"


def disaggregation_lines(notes: Sequence[DisaggregationNote]) -> list[str]:
    """Per workload that may go either way: the best disaggregated design against the best aggregated one."""
    out = []
    for n in notes:
        pools = (
            "none"
            if n.disaggregated_total_usd is None
            else f"{n.disaggregated_design}: {usd(n.disaggregated_total_usd)}"
        )
        agg = "none" if n.aggregated_total_usd is None else f"{usd(n.aggregated_total_usd)} ({n.aggregated_design})"
        verdict = ""
        if n.saving_usd is not None and n.aggregated_total_usd:
            share = abs(n.saving_usd) / n.aggregated_total_usd * 100.0
            word = "saves" if n.saving_usd > 0 else "costs"
            verdict = f"; disaggregation {word} {usd(abs(n.saving_usd))} ({share:.1f}%)"
        out.append(f"{n.workload}: disaggregated: {pools} vs best aggregated {agg}; design 1 is {n.chosen}{verdict}")
    return out


# Said under "Why this one" when the command's time limit stopped the explanation part way.
INCOMPLETE_NOTE = "The time limit stopped this explanation part way: some parts below are missing. Raise --time-limit."


def pct(x: float) -> str:
    """A published quality delta in percent, three significant figures."""
    return f"{x:.3g}%"


def _evidence(q: QualityEvidence) -> str:
    return f"{q.method}: {pct(q.loss_pct)}{'†' if q.provisional else ''} on {q.metric} ({q.source})"


def precision_lines(gates: list[PrecisionGate], design: Design) -> list[str]:
    """One line per serving workload: the precision design 1 serves, what the quality gate allows, and why."""
    out: list[str] = []
    serving = {w.workload: w for w in design.workloads if isinstance(w, ServingPlan)}
    for g in gates:
        w = serving.get(g.workload)
        if w is None:
            continue
        chosen = sorted({x.quant for x in w.groups})
        gate = f"quality.max_loss {g.max_loss}{'' if g.from_requirement else ' (default)'}"
        parts = [f"{g.workload} serves {', '.join(chosen)}; {gate} allows {', '.join(g.allowed)}"]
        for q in g.evidence:
            if q.precision in chosen:
                parts.append(f"{q.precision} published loss {_evidence(q)}")
        refused = [q for q in g.evidence if q.precision not in g.allowed]
        if refused:
            parts.append("not allowed: " + ", ".join(f"{q.precision} ({pct(q.loss_pct)})" for q in refused))
        out.append("precision: " + "; ".join(parts))
    return out
