"""Dominance pruning: drop rows another row beats on every figure the model uses."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from clusterplan.candidates.table import CandidateTable, Offering, ServingRow, TrainingRow


def _serving_key(r: ServingRow) -> tuple[object, ...]:
    return (r.gpu_id, r.tp, r.pp, r.quant, r.batch)


def _dominates(a: ServingRow, b: ServingRow, *, keep_latency: bool = False) -> bool:
    """``a`` (in ``gpus_b // gpus_a`` copies) is at least as good as ``b`` for every purpose of the model.

    Same GPU type; TP groups no wider (so the copies pack wherever ``b`` does: sizes are powers of
    two); forbidden by no family ``b`` is not; the copies together reach at least ``b``'s rate with
    and without latency targets (and, for the min-latency objective, no higher p95). Replacing
    every ``b`` replica by the copies keeps a solution feasible at no more GPUs, hence no more cost.
    """
    if a.gpu_id != b.gpu_id or a.gpus > b.gpus or a.tp > b.tp:
        return False
    copies = b.gpus // a.gpus
    return (
        a.forbidding_families <= b.forbidding_families
        and copies * a.rate_rps >= b.rate_rps
        and copies * a.rate_nolat_rps >= b.rate_nolat_rps
        and (not keep_latency or a.p95_e2e_s <= b.p95_e2e_s)
    )


def prune_serving_rows(
    rows: Sequence[ServingRow], *, cross_shape: bool, keep_latency: bool = False
) -> list[ServingRow]:
    """Drop dominated rows: within a shape (GPU, TP, PP, quant) always; across shapes of one GPU type
    when ``cross_shape`` (valid when a workload uses one shape, or has no redundancy: with mixed shapes
    and N+k, swapping replicas can change which replica is the largest).

    Deterministic: rows are visited in a fixed order and of two equal rows the first one is kept.
    """
    ordered = sorted(
        rows,
        key=lambda r: (r.gpu_id, r.gpus, r.tp, r.pp, r.quant, -r.rate_rps, -r.rate_nolat_rps, r.p95_e2e_s, r.batch),
    )
    by_gpu: dict[str, list[ServingRow]] = defaultdict(list)
    for r in ordered:
        by_gpu[r.gpu_id].append(r)
    kept: list[ServingRow] = []
    for gpu_id in sorted(by_gpu):
        survivors: list[ServingRow] = []
        for r in by_gpu[gpu_id]:
            if any(
                (cross_shape or s.shape == r.shape) and _dominates(s, r, keep_latency=keep_latency) for s in survivors
            ):
                continue
            survivors = [
                s
                for s in survivors
                if not ((cross_shape or s.shape == r.shape) and _dominates(r, s, keep_latency=keep_latency))
            ]
            survivors.append(r)
        kept.extend(survivors)
    return sorted(kept, key=_serving_key)


def _training_dominates(a: TrainingRow, b: TrainingRow) -> bool:
    return (
        a.gpu_id == b.gpu_id
        and a.gpus <= b.gpus
        and a.tp <= b.tp
        and a.forbidding_families <= b.forbidding_families
        and a.time_to_train_s <= b.time_to_train_s
        and a.cloud_cost_usd <= b.cloud_cost_usd
        and (a.cloud_offering is not None or b.cloud_offering is None)
    )


def prune_training_rows(rows: Sequence[TrainingRow]) -> list[TrainingRow]:
    """Drop layouts another layout of the same GPU beats on GPUs, TP width, time and cloud cost."""
    ordered = sorted(
        rows,
        key=lambda r: (
            r.gpu_id,
            r.gpus,
            r.tp,
            r.time_to_train_s,
            r.cloud_cost_usd,
            r.pp,
            r.zero_stage,
            r.recompute,
            r.micro_batch,
        ),
    )
    kept: list[TrainingRow] = []
    for r in ordered:
        if any(_training_dominates(s, r) for s in kept):
            continue
        kept = [s for s in kept if not _training_dominates(r, s)]
        kept.append(r)
    return sorted(kept, key=lambda r: (r.gpu_id, r.tp, r.pp, r.dp, r.zero_stage, r.recompute, r.micro_batch))


def _offering_cost_usd(o: Offering, horizon_months: float) -> float | None:
    """One unit over the horizon: instance-hours (cloud; None: a spot offer kept for training only), or capital plus
    energy (owned; None: cannot be bought)."""
    if (o.kind != "cloud" and not o.purchasable) or not o.serves:
        return None
    return o.horizon_usd(horizon_months)


def _standalone_usd(
    row: ServingRow, demand_rps: float, with_targets: bool, offerings: Sequence[tuple[Offering, float]]
) -> float:
    """What serving the whole demand with replicas of ``row`` alone costs at most: its replica count on the
    cheapest allowed offering of its GPU that hosts its TP groups (inf: none). ``offerings``: the allowed
    offerings of the row's GPU type that can be had, each with its cost over the horizon (:func:`_offering_cost_usd`)."""
    rates = [row.rate_nolat_rps, *([row.rate_rps] if with_targets else [])]
    if min(rates) <= 0:
        return math.inf
    gpus = max(math.ceil(demand_rps / r - 1e-9) for r in rates) * row.gpus
    best = math.inf
    for o, cost in offerings:
        usable = o.tp_capacity(row.tp)
        if usable > 0:
            best = min(best, math.ceil(gpus / usable) * cost)
    return best


def _least_usd(row: ServingRow, demand_rps: float, per_gpu_usd: dict[str, float]) -> float:
    """What serving the whole demand with ``row`` costs at least: fractional replicas at its ceiling rate (no
    targets) on the cheapest GPU-slot of its type over the horizon, any offering, allowed or not."""
    if row.rate_nolat_rps <= 0 or row.gpu_id not in per_gpu_usd:
        return math.inf
    return max(1.0, demand_rps / row.rate_nolat_rps) * row.gpus * per_gpu_usd[row.gpu_id]


def prune_pool_rows(table: CandidateTable) -> CandidateTable:
    """Drop prefill and decode rows that cannot be in a design as cheap as one the table already holds.

    A disaggregated design costs at least the least cost of its prefill row plus that of its decode row (each
    serving the whole demand, :func:`_least_usd`); the cheapest design costs at most the cheapest one-row
    aggregated design or the cheapest pair of one-row pools (:func:`_standalone_usd`). A pool row whose least
    cost plus the least of the other pool exceeds that bound is never in the cheapest design (nor in a
    relaxed one: the least cost ignores the targets). Applied only where cost is all that can rule a row in:
    one workload, a serving one, and no budget, GPU, power or inventory limit (each could make a dearer
    row the only feasible one).
    """
    lim = table.limits
    limited = (
        lim.budget_capital_usd,
        lim.budget_monthly_usd,
        lim.budget_total_usd,
        lim.max_gpus,
        lim.max_power_w,
    )
    if len(table.workloads) != 1 or any(x is not None for x in limited) or lim.inventory:
        return table
    wc = table.workloads[0]
    if not wc.has_pools:
        return table
    h = lim.horizon_months
    per_gpu: dict[str, float] = {}
    for o in table.offerings:
        cost = _offering_cost_usd(o, h)
        if cost is not None:
            per_gpu[o.gpu_id] = min(per_gpu.get(o.gpu_id, math.inf), cost / o.gpus_per_unit)
    rows = wc.serving_rows()
    d, t = wc.demand_rps, wc.targets.any

    # Per GPU type, its allowed offerings that can be had and their cost, in the table's order.
    usable: dict[str, list[tuple[Offering, float]]] = {}
    for o in table.offerings:
        cost = _offering_cost_usd(o, h)
        if not o.forbidden_by and cost is not None:
            usable.setdefault(o.gpu_id, []).append((o, cost))

    def cheapest(role: str) -> float:
        allowed = [r for r in rows if r.role == role and not r.forbidden_by]
        return min((_standalone_usd(r, d, t, usable.get(r.gpu_id, [])) for r in allowed), default=math.inf)

    bound = min(cheapest("both"), cheapest("prefill") + cheapest("decode"))
    if not math.isfinite(bound):
        return table
    least = {
        role: min((_least_usd(r, d, per_gpu) for r in rows if r.role == role), default=math.inf)
        for role in ("prefill", "decode")
    }
    other = {"prefill": "decode", "decode": "prefill"}
    kept = tuple(
        r for r in rows if r.role == "both" or _least_usd(r, d, per_gpu) + least[other[r.role]] <= bound * (1 + 1e-9)
    )
    return replace(table, workloads=(replace(wc, rows=kept),))
