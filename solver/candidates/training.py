"""Training rows: the fastest layout that fits each (GPU type, tp, pp, dp), and its cloud offering."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from clusterplan.physics.reasons import (
    NoLayoutFits,
)

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import ModelArchitecture
    from clusterplan.physics.factors import Assumptions
    from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from clusterplan.candidates.offerings import forbidden_for
from clusterplan.candidates.prune import prune_training_rows
from clusterplan.candidates.table import (
    DEADLINE,
    TP_DEGREES,
    TP_NVLINK,
    Exclusion,
    GpuType,
    Limits,
    Offering,
    TrainingRow,
    WorkloadCandidates,
    excluded,
    hard_reasons,
)


def _dp_ladder(max_dp: int) -> list[int]:
    out = []
    d = 1
    while d <= max_dp:
        out.append(d)
        d *= 2
    return out


MAX_TRAINING_GPUS = 4096


# Doubling DP past the first layout that meets the deadline buys speed nobody asked for with more
# GPUs (owned: more capital; cloud: the same GPU-hours or more). Two more doublings are kept, for
# instance-size rounding and for what-if sweeps that tighten the deadline; larger ones are not tried.
EXTRA_DP_AFTER_DEADLINE = 2


TRAINING_PP = (1, 2, 4, 8)


def training_candidates(
    index: int,
    w: TrainingWorkload | FinetuneWorkload,
    arch: ModelArchitecture,
    catalog: Catalog,
    gpus: dict[str, GpuType],
    offerings: Sequence[Offering],
    limits: Limits,
    assumptions: Assumptions,
) -> WorkloadCandidates:
    """Every parallel layout of one training/fine-tuning workload on every GPU type.

    Layouts: GPU x TP in {1,2,4,8} x PP in {1,2,4,8} x DP in powers of two (up to the sequences per
    optimizer step and 4,096 GPUs, and two doublings past the first DP that meets the deadline); per layout the fastest ZeRO stage, recompute policy and micro-batch
    that fit (:func:`clusterplan.design.evaluate.fastest_training_layout`). LoRA/QLoRA train few parameters: ZeRO 0 only. Layouts that miss
    the deadline are kept, forbidden by ``deadline``; TP wider than NVLink, forbidden by ``tp_nvlink``.
    """
    from clusterplan.design import evaluate, pricing
    from clusterplan.physics import rules

    rows: list[TrainingRow] = []
    excl: list[Exclusion] = []
    considered = 0
    method = getattr(w, "method", "full")
    recomputes = evaluate.recomputes_for(w)
    seqs_per_step = evaluate.sequences_per_step(w)
    for gid in sorted(gpus):
        spec = catalog.gpus[gid]
        g = gpus[gid]
        for tp in TP_DEGREES:
            for pp in TRAINING_PP:
                zero_stages = evaluate.zero_stages_for(pp, method)
                hard = hard_reasons(
                    rules.training_rule_reasons(
                        arch, spec, tp=tp, pp=pp, dp=1, zero_stage=0, precision=w.precision, method=method
                    )
                )
                considered += 1
                if hard:
                    excl.append(excluded(gid, hard[0]))
                    continue
                forbidden = forbidden_for(g, limits, tp=tp, quant=None)
                max_dp = max(1, min(MAX_TRAINING_GPUS // (tp * pp), seqs_per_step))
                beyond_deadline = 0  # layouts evaluated after the first that meets the deadline
                for dp in _dp_ladder(max_dp):
                    if beyond_deadline > EXTRA_DP_AFTER_DEADLINE:
                        break
                    considered += 1
                    est, last_reason = evaluate.fastest_training_layout(
                        arch,
                        spec,
                        w,
                        tp=tp,
                        pp=pp,
                        dp=dp,
                        zero_stages=zero_stages,
                        recomputes=recomputes,
                        assumptions=assumptions,
                    )
                    if est is None:
                        excl.append(excluded(gid, last_reason or NoLayoutFits(gpu=g.name)))
                        continue
                    n = tp * pp * dp
                    cloud, n_inst, cost, within = pricing.cheapest_training_cloud(
                        offerings, gid, tp, n, est.time_to_train_s
                    )
                    fb = list(forbidden)
                    if not within and not any(f == TP_NVLINK for f, _ in fb):
                        fb.append((TP_NVLINK, f"{g.name}: no cloud instance links {tp} GPUs with NVLink"))
                    if beyond_deadline or est.time_to_train_s <= w.deadline:
                        beyond_deadline += 1
                    if est.time_to_train_s > w.deadline:
                        fb.append(
                            (
                                DEADLINE,
                                f"{g.name} x{n} (TP {tp}, PP {pp}, DP {dp}) takes "
                                f"{est.time_to_train_s / 86400:.1f} d; deadline {w.deadline / 86400:.1f} d",
                            )
                        )
                    rows.append(
                        TrainingRow(
                            gpu_id=gid,
                            tp=tp,
                            pp=pp,
                            dp=dp,
                            zero_stage=est.zero_stage,
                            recompute=est.recompute,
                            micro_batch=est.micro_batch,
                            time_to_train_s=est.time_to_train_s,
                            tokens_per_s=est.tokens_per_s,
                            mfu=est.mfu,
                            memory_gib=est.memory.total_gib,
                            capacity_gib=est.memory.capacity_gib,
                            bound=est.bound,
                            forbidden_by=tuple(fb),
                            cloud_offering=cloud.key if cloud is not None else None,
                            cloud_instances=n_inst,
                            cloud_cost_usd=cost,
                        )
                    )
    pruned = prune_training_rows(rows)
    return WorkloadCandidates(
        index=index,
        name=w.name,
        kind=w.kind,
        rows=tuple(pruned),
        exclusions=tuple(excl),
        model_name=arch.name,
        deadline_s=w.deadline,
        tokens=w.tokens,
        considered=considered,
    )
