"""Number formatting shared by the renderers."""

from __future__ import annotations

from clusterplan.plan import ReplicaGroup, ServingPlan, TrainingPlan


def usd(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1e6:
        return f"${x / 1e6:,.2f}M"
    if abs(x) >= 1e4:
        return f"${x / 1e3:,.1f}k"
    return f"${x:,.0f}" if abs(x) >= 100 else f"${x:,.2f}"


def seconds(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 86400:
        return f"{x / 86400:,.1f} d"
    if x >= 3600:
        return f"{x / 3600:,.1f} h"
    if x >= 1:
        return f"{x:,.2f} s"
    return f"{x * 1000:,.0f} ms"


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


def layout(w: ServingPlan | TrainingPlan) -> str:
    if isinstance(w, ServingPlan):
        return "; ".join(group_layout(g) for g in w.groups)
    return (
        f"{w.gpus}x {w.gpu} TP{w.tp} PP{w.pp} DP{w.dp} ZeRO-{w.zero_stage} recompute {w.recompute} "
        f"mb {w.micro_batch} ({w.deployment})"
    )


def group_layout(g: ReplicaGroup) -> str:
    where = "+".join(k for k, n in (("cloud", g.cloud_replicas), ("owned", g.owned_replicas)) if n)
    return f"{g.replicas}x [{g.gpu} TP{g.tp} PP{g.pp} {g.quant} batch {g.batch}] ({where})"
