"""Dominance pruning: drop rows another row beats on every figure the model uses."""

from __future__ import annotations

import bisect
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
        (not a.forbidden_by or a.forbidding_families <= b.forbidding_families)  # none: a subset of any
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
    """``a`` is at least as good as ``b``: same GPU type, no more GPUs, TP no wider, forbidden by no family ``b`` is
    not, no slower, no dearer in the cloud, and rentable wherever ``b`` is."""
    return (
        a.gpu_id == b.gpu_id
        and a.gpus <= b.gpus
        and a.tp <= b.tp
        and a.forbidding_families <= b.forbidding_families
        and a.time_to_train_s <= b.time_to_train_s
        and a.cloud_cost_usd <= b.cloud_cost_usd
        and (a.cloud_offering is not None or b.cloud_offering is None)
    )


class _Staircase:
    """The (time, cost) points of some rows, only those no other of them beats on both: times rising, costs
    falling. ``beaten(t, c)``: some point has time <= t and cost <= c (one bisection)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.costs: list[float] = []

    def beaten(self, time_s: float, cost_usd: float) -> bool:
        i = bisect.bisect_right(self.times, time_s) - 1  # the cheapest point no slower than time_s is the last such
        return i >= 0 and self.costs[i] <= cost_usd

    def add(self, time_s: float, cost_usd: float) -> None:
        if self.beaten(time_s, cost_usd):
            return
        i = bisect.bisect_left(self.times, time_s)
        j = i
        while j < len(self.costs) and self.costs[j] >= cost_usd:  # points no faster and no cheaper: beaten now
            j += 1
        self.times[i:j] = [time_s]
        self.costs[i:j] = [cost_usd]


def prune_training_rows(rows: Sequence[TrainingRow]) -> list[TrainingRow]:
    """Drop layouts another layout of the same GPU beats on GPUs, TP width, time and cloud cost
    (:func:`_training_dominates`); of two layouts that beat each other the first in the order below is kept.

    The rows are visited in order of (GPU, GPUs, TP, time, cost, ...): a row can be beaten only by one before it,
    or by one after it equal on those four figures. Rows before it are looked up in staircases of (time, cost)
    per TP width and per kind (forbidding families, rentable or not; a handful each): a row is beaten when some
    kind no stricter than its own holds, at some width no wider, a point no slower and no dearer. Rows equal on
    the four figures are compared pairwise. The kept set and its order are those of comparing every pair in that
    order (``tests/test_candidates_prune.py`` holds the two to each other on random rows), in O(n log n) per kind
    and width instead of O(n^2) (some 1.15M comparisons for a 456-row table).
    """
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
    # Per GPU type: per kind (families, rentable), per TP width, the staircase of the rows visited so far.
    stairs: dict[tuple[frozenset[str], bool], dict[int, _Staircase]] = {}
    start = 0
    while start < len(ordered):
        first = ordered[start]
        if start == 0 or first.gpu_id != ordered[start - 1].gpu_id:
            stairs = {}
        four = (first.gpu_id, first.gpus, first.tp, first.time_to_train_s, first.cloud_cost_usd)
        end = start + 1
        while end < len(ordered) and _four(ordered[end]) == four:
            end += 1
        group = ordered[start:end]
        kinds = [(r.forbidding_families, r.cloud_offering is not None) for r in group]
        for i, r in enumerate(group):
            families, rentable = kinds[i]
            if _beaten_before(stairs, families, rentable, r):
                continue
            # Beaten within the group: by one before it, or by one after it that it does not beat back.
            if any(_kind_beats(kinds[j], kinds[i]) for j in range(i)):
                continue
            if any(
                _kind_beats(kinds[j], kinds[i]) and not _kind_beats(kinds[i], kinds[j])
                for j in range(i + 1, len(group))
            ):
                continue
            kept.append(r)
        for r, kind in zip(group, kinds, strict=True):
            stairs.setdefault(kind, {}).setdefault(r.tp, _Staircase()).add(r.time_to_train_s, r.cloud_cost_usd)
        start = end
    return sorted(kept, key=lambda r: (r.gpu_id, r.tp, r.pp, r.dp, r.zero_stage, r.recompute, r.micro_batch))


def _four(r: TrainingRow) -> tuple[object, ...]:
    """The figures a training row is ordered and beaten on, with its GPU type."""
    return (r.gpu_id, r.gpus, r.tp, r.time_to_train_s, r.cloud_cost_usd)


def _kind_beats(a: tuple[frozenset[str], bool], b: tuple[frozenset[str], bool]) -> bool:
    """A row of kind ``a`` (forbidding families, rentable) can beat one of kind ``b``: no family ``b`` lacks, and
    rentable wherever ``b`` is."""
    return a[0] <= b[0] and (a[1] or not b[1])


def _beaten_before(
    stairs: dict[tuple[frozenset[str], bool], dict[int, _Staircase]],
    families: frozenset[str],
    rentable: bool,
    r: TrainingRow,
) -> bool:
    """Some row already visited (no more GPUs: the order) beats ``r``: of a kind that can, TP no wider, no slower
    and no dearer."""
    for kind, by_tp in stairs.items():
        if not _kind_beats(kind, (families, rentable)):
            continue
        for tp, stair in by_tp.items():
            if tp <= r.tp and stair.beaten(r.time_to_train_s, r.cloud_cost_usd):
                return True
    return False


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
