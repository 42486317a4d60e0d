"""Training rows: the fastest layout that fits each (GPU type, tp, pp, dp), and its cloud offering."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clusterplan.physics.reasons import (
    NoFabric,
    NoLayoutFits,
)

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
    from clusterplan.physics.factors import Assumptions
    from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from clusterplan.candidates.offerings import fabric_exclusion, forbidden_for
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
from clusterplan.design.uncertainty import NO_DERATE, Derate


def _dp_ladder(max_dp: int) -> list[int]:
    out = []
    d = 1
    while d <= max_dp:
        out.append(d)
        d *= 2
    return out


MAX_TRAINING_GPUS = 4096


def whole_node_dps(lo: int, hi: int, gpus_per_replica: int, node_gpus: int) -> list[int]:
    """DP degrees strictly between ``lo`` and ``hi`` whose GPUs fill whole servers of ``node_gpus``.

    ``gpus_per_replica x dp`` must be a multiple of ``node_gpus``: the smallest such step of dp is
    ``node_gpus / gcd(node_gpus, gpus_per_replica)``; a layout of part of a server is bought as the server.
    """
    step = node_gpus // math.gcd(node_gpus, gpus_per_replica)
    first = (lo // step + 1) * step
    return list(range(first, hi, step))


def _fewest_meeting(
    lo: int,
    hi: int,
    gpus_per_replica: int,
    node_gpus: int,
    layout_row: Callable[[int], TrainingRow | None],
    deadline_s: float,
) -> list[TrainingRow]:
    """The row of the fewest whole servers that meets the deadline, between a DP that misses it (``lo``)
    and one that meets it (``hi``); empty when no whole-server DP lies between them.

    Bisection on dp: time to train falls as dp grows (each replica's share of the tokens shrinks while
    its step time stays nearly flat), so the first dp that meets the deadline is found in log2 of the
    gap's estimates, instead of a ladder of counts leaving up to half the GPUs idle (a 70B run that
    meets 30 days on 576 H100 was bought as 1,024). CP-SAT still chooses among the rows.
    """
    dps = whole_node_dps(lo, hi, gpus_per_replica, node_gpus)
    best: TrainingRow | None = None
    a, b = 0, len(dps)  # dps[:a] miss (or do not fit), dps[b:] meet
    while a < b:
        mid = (a + b) // 2
        row = layout_row(dps[mid])
        if row is not None and row.time_to_train_s <= deadline_s:
            best, b = row, mid
        else:
            a = mid + 1
    return [best] if best is not None else []


# Doubling DP past the first layout that meets the deadline buys speed nobody asked for with more
# GPUs (owned: more capital; cloud: the same GPU-hours or more). Two more doublings are kept, for
# instance-size rounding and for what-if sweeps that tighten the deadline; larger ones are not tried.
EXTRA_DP_AFTER_DEADLINE = 2


TRAINING_PP = (1, 2, 4, 8)


@dataclass
class _Layouts:
    """The layouts of one (GPU type, tp, pp): each DP degree estimated into a row on demand."""

    arch: ModelArchitecture
    spec: GpuSpec
    g: GpuType
    w: TrainingWorkload | FinetuneWorkload
    tp: int
    pp: int
    zero_stages: tuple[int, ...]
    recomputes: list[str]
    assumptions: Assumptions
    offerings: Sequence[Offering]
    forbidden: list[tuple[str, str]]
    derate: Derate = NO_DERATE
    evaluated: int = 0
    exclusions: list[Exclusion] = field(default_factory=list)

    def row(self, dp: int) -> TrainingRow | None:
        """The fastest settings of tp x pp x dp as a row (None: nothing fits; the reason is kept)."""
        from clusterplan.design import evaluate, pricing

        self.evaluated += 1
        est, last_reason = evaluate.fastest_training_layout(
            self.arch,
            self.spec,
            self.w,
            tp=self.tp,
            pp=self.pp,
            dp=dp,
            zero_stages=self.zero_stages,
            recomputes=self.recomputes,
            assumptions=self.assumptions,
            derate=self.derate,
        )
        if est is None:
            self.exclusions.append(excluded(self.g.id, last_reason or NoLayoutFits(gpu=self.g.name)))
            return None
        n = self.tp * self.pp * dp
        for o in self.offerings:
            no_fabric = fabric_exclusion(o, self.g.name, n) if o.gpu_id == self.g.id else None
            if no_fabric is not None:
                self.exclusions.append(no_fabric)
        cloud, n_inst, cost, within = pricing.cheapest_training_cloud(
            self.offerings, self.g.id, self.tp, n, est.time_to_train_s
        )
        fb = list(self.forbidden)
        if not within and not any(f == TP_NVLINK for f, _ in fb):
            fb.append((TP_NVLINK, f"{self.g.name}: no cloud instance links {self.tp} GPUs with NVLink"))
        if est.time_to_train_s > self.w.deadline:
            fb.append(
                (
                    DEADLINE,
                    f"{self.g.name} x{n} (TP {self.tp}, PP {self.pp}, DP {dp}) takes "
                    f"{est.time_to_train_s / 86400:.1f} d; deadline {self.w.deadline / 86400:.1f} d",
                )
            )
        return TrainingRow(
            gpu_id=self.g.id,
            tp=self.tp,
            pp=self.pp,
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
            memory_options=tuple(est.memory_options),
        )


def _one_per_offer(exclusions: list[Exclusion]) -> list[Exclusion]:
    """Fabric exclusions once per offer (the fewest instances any layout needed); the others as they are."""
    seen: dict[str, Exclusion] = {}
    out: list[Exclusion] = []
    for e in exclusions:
        if isinstance(e.reason, NoFabric):
            first = seen.get(e.reason.offer)
            if first is None or e.reason.instances < first.reason.instances:  # type: ignore[attr-defined]
                seen[e.reason.offer] = e
            continue
        out.append(e)
    return out + [seen[k] for k in sorted(seen)]


def training_candidates(
    index: int,
    w: TrainingWorkload | FinetuneWorkload,
    arch: ModelArchitecture,
    catalog: Catalog,
    gpus: dict[str, GpuType],
    offerings: Sequence[Offering],
    limits: Limits,
    assumptions: Assumptions,
    derate: Derate = NO_DERATE,
) -> WorkloadCandidates:
    """Every parallel layout of one training/fine-tuning workload on every GPU type.

    Layouts: GPU x TP in {1,2,4,8} x PP in {1,2,4,8} x DP in powers of two (up to the sequences per
    optimizer step and 4,096 GPUs, and two doublings past the first DP that meets the deadline), plus,
    between the last DP that misses the deadline and the first that meets it, the fewest whole servers
    that meet it (:func:`_fewest_meeting`); per layout the fastest ZeRO stage, recompute policy and micro-batch
    that fit (:func:`clusterplan.design.evaluate.fastest_training_layout`). LoRA/QLoRA train few parameters: ZeRO 0 only. Layouts that miss
    the deadline are kept, forbidden by ``deadline``; TP wider than NVLink, forbidden by ``tp_nvlink``.
    Times are the derated ones at a requirement's ``confidence`` (``derate``).
    """
    from clusterplan.design import evaluate
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

                layouts = _Layouts(
                    arch, spec, g, w, tp, pp, zero_stages, recomputes, assumptions, offerings, forbidden, derate
                )
                beyond_deadline = 0  # layouts evaluated after the first that meets the deadline
                missed_dp: int | None = None  # the largest ladder DP that misses the deadline
                for dp in _dp_ladder(max_dp):
                    if beyond_deadline > EXTRA_DP_AFTER_DEADLINE:
                        break
                    row = layouts.row(dp)
                    if row is None:
                        continue
                    rows.append(row)
                    meets = row.time_to_train_s <= w.deadline
                    if meets and beyond_deadline == 0 and missed_dp is not None:
                        rows.extend(
                            _fewest_meeting(missed_dp, dp, tp * pp, spec.max_gpus_per_node, layouts.row, w.deadline)
                        )
                    if beyond_deadline or meets:
                        beyond_deadline += 1
                    else:
                        missed_dp = dp
                considered += layouts.evaluated
                excl.extend(layouts.exclusions)
    pruned = prune_training_rows(rows)
    excl = _one_per_offer(excl)
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
