"""Dominance pruning: drop rows another row beats on every figure the model uses."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from clusterplan.candidates.table import ServingRow, TrainingRow


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
