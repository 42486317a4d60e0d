"""Training rows: the fastest layout that fits each (GPU type, tp, pp, dp), and its cloud offering."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from clusterplan.physics import rules
from clusterplan.physics.layout import Layout, Recompute
from clusterplan.physics.memory import layers_per_stage
from clusterplan.physics.optimizer_memory import MEMORY_OPTIONS, MemoryPlan
from clusterplan.physics.reasons import (
    FrameworkLacks,
    LeftOutFeature,
    NoFabric,
    NoLayoutFits,
)

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import FrameworkSpec, GpuSpec, ModelArchitecture
    from clusterplan.physics.factors import Assumptions
    from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from clusterplan.candidates.offerings import fabric_exclusion, forbidden_for, gpu_type_of
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
from clusterplan.evaluation import evaluate, pricing
from clusterplan.evaluation.pinned import TRAINING_PP
from clusterplan.evaluation.uncertainty import NO_DERATE, Derate
from clusterplan.requirement.load import framework_name

MAX_TRAINING_GPUS = 32_768  # the largest published pretraining runs use 16-24k GPUs


def whole_node_dps(lo: int, hi: int, gpus_per_replica: int, node_gpus: int) -> list[int]:
    """DP degrees strictly between ``lo`` and ``hi`` whose GPUs fill whole servers of ``node_gpus``.

    ``gpus_per_replica x dp`` must be a multiple of ``node_gpus``: the smallest such step of dp is
    ``node_gpus / gcd(node_gpus, gpus_per_replica)``; a layout of part of a server is bought as the server.
    """
    step = node_gpus // math.gcd(node_gpus, gpus_per_replica)
    first = (lo // step + 1) * step
    return list(range(first, hi, step))


class Timed(Protocol):
    """Anything with a time to train: a candidate row, an estimate."""

    @property
    def time_to_train_s(self) -> float: ...


T = TypeVar("T", bound=Timed)


def fewest_meeting(
    lo: int,
    hi: int,
    gpus_per_replica: int,
    node_gpus: int,
    layout_row: Callable[[int], T | None],
    deadline_s: float,
) -> list[T]:
    """The row of the fewest whole servers that meets the deadline, between a DP that misses it (``lo``)
    and one that meets it (``hi``); empty when no whole-server DP lies between them.

    Bisection on dp: time to train falls as dp grows (each replica's share of the tokens shrinks while
    its step time stays nearly flat), so the first dp that meets the deadline is found in log2 of the
    gap's estimates, instead of a ladder of counts leaving up to half the GPUs idle (a 70B run that
    meets 30 days on 576 H100 was bought as 1,024). CP-SAT still chooses among the rows.
    """
    dps = whole_node_dps(lo, hi, gpus_per_replica, node_gpus)
    best: T | None = None
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


@dataclass
class _Walk:
    """One shape's walk up the DP degrees: its layouts, where it stands against the deadline, whether it is alive."""

    layouts: _Layouts
    replica: int  # GPUs of one data-parallel replica: tp x cp x pp
    max_dp: int
    beyond_deadline: int = 0  # layouts evaluated after the first that meets the deadline
    missed_dp: int | None = None  # the largest ladder DP that misses the deadline
    alive: bool = True

    def step(self, dp: int, node_gpus: int, deadline_s: float) -> list[TrainingRow]:
        """The row at ``dp`` and, when it is the first to meet the deadline, the fewest whole servers that do."""
        if self.beyond_deadline > EXTRA_DP_AFTER_DEADLINE or dp > self.max_dp:
            self.alive = False
            return []
        row = self.layouts.row(dp)
        if row is None:
            return []
        out = [row]
        meets = row.time_to_train_s <= deadline_s
        if meets and self.beyond_deadline == 0 and self.missed_dp is not None:
            out += fewest_meeting(self.missed_dp, dp, self.replica, node_gpus, self.layouts.row, deadline_s)
        if self.beyond_deadline or meets:
            self.beyond_deadline += 1
        else:
            self.missed_dp = dp
        return out


def _slower_and_larger(a: TrainingRow, b: TrainingRow) -> bool:
    """``b`` is dominated by ``a`` at the same count: no faster, no less memory per GPU, no narrower TP, no cheaper
    in the cloud, and forbidden by every family ``a`` is."""
    return (
        a.gpus == b.gpus
        and a.tp <= b.tp
        and a.time_to_train_s <= b.time_to_train_s
        and a.memory_gib <= b.memory_gib
        and a.cloud_cost_usd <= b.cloud_cost_usd
        and (a.cloud_offering is not None or b.cloud_offering is None)
        and a.forbidding_families <= b.forbidding_families
    )


def _walk_counts(walks: list[_Walk], node_gpus: int, deadline_s: float) -> list[TrainingRow]:
    """Every shape of one GPU type, counts in powers of two from the smallest replica up.

    At each count, a shape whose layout is dominated by another shape's with the same replica size (tp x cp x pp,
    hence the same DP degree and micro-batches per step) at that count (slower and using more memory per GPU,
    :func:`_slower_and_larger`) stops: its larger counts are not estimated (more replicas scale both alike, so the
    faster, leaner one stays ahead). Shapes of different replica sizes are never compared: their DP degrees differ,
    and with them the micro-batches per step and the pipeline bubble, so their order can flip as the count grows.
    Shapes that do not fit at a count keep walking (more ZeRO shards may make them fit). Each surviving shape keeps
    the ladder and bisection of :class:`_Walk`.
    """
    rows: list[TrainingRow] = []
    if not walks:
        return rows
    count = min(w.replica for w in walks)
    top = max(w.replica * w.max_dp for w in walks)
    while count <= top and any(w.alive for w in walks):
        at_count: list[tuple[_Walk, TrainingRow]] = []
        for w in walks:
            if not w.alive or count % w.replica:
                continue
            dp = count // w.replica
            if dp & (dp - 1):
                continue  # the ladder is powers of two of dp
            got = w.step(dp, node_gpus, deadline_s)
            rows += got
            if got:
                at_count.append((w, got[0]))
        for w, r in at_count:
            if any(
                o is not w and o.replica == w.replica and _slower_and_larger(q, r) and not _slower_and_larger(r, q)
                for o, q in at_count
            ):
                w.alive = False
        count *= 2
    return rows


@dataclass
class _Layouts:
    """The layouts of one (GPU type, tp, cp, pp): each DP degree estimated into a row on demand."""

    arch: ModelArchitecture
    spec: GpuSpec
    g: GpuType
    w: TrainingWorkload | FinetuneWorkload
    tp: int
    pp: int
    zero_stages: tuple[int, ...]
    recomputes: list[Recompute]
    assumptions: Assumptions
    offerings: Sequence[Offering]  # this GPU type's (the others' are never read)
    forbidden: list[tuple[str, str]]
    derate: Derate = NO_DERATE
    cp: int = 1
    virtual_stages: tuple[int, ...] | None = None  # pinned by the workload, else the search's options
    recompute_layers: int | None = None  # pinned by the workload, else the fewest that fit
    expert_parallel: tuple[int, ...] | None = None  # (1,) where the framework runs no EP, else the search's options
    memory_plans: tuple[MemoryPlan, ...] | None = None  # the workload's plans the framework has a form of
    evaluated: int = 0
    exclusions: list[Exclusion] = field(default_factory=list)

    def row(self, dp: int) -> TrainingRow | None:
        """The fastest settings of tp x cp x pp x dp as a row (None: nothing fits; the reason is kept)."""
        self.evaluated += 1
        options = evaluate.TrainingOptions(
            zero_stages=self.zero_stages, recomputes=self.recomputes, virtual_stages=self.virtual_stages,
            recompute_layers=self.recompute_layers, expert_parallel=self.expert_parallel,
            memory_plans=self.memory_plans,
        )  # fmt: skip
        est, last_reason = evaluate.fastest_training_layout(
            self.arch, self.spec, self.w, layout=Layout(tp=self.tp, pp=self.pp, cp=self.cp), dp=dp, options=options,
            assumptions=self.assumptions, derate=self.derate,
        )  # fmt: skip
        if est is None:
            self.exclusions.append(excluded(self.g.id, last_reason or NoLayoutFits(gpu=self.g.name)))
            return None
        n = self.tp * self.cp * self.pp * dp
        for o in self.offerings:
            no_fabric = fabric_exclusion(o, self.g.name, n)
            if no_fabric is not None:
                self.exclusions.append(no_fabric)
        cloud, n_inst, cost, within = pricing.cheapest_training_cloud(
            self.offerings, self.g.id, self.tp, n, est.time_to_train_s, interruptible=self.w.interruptible
        )
        fb = list(self.forbidden)
        if not within and not any(f == TP_NVLINK for f, _ in fb):
            fb.append((TP_NVLINK, f"{self.g.name}: no cloud instance links {self.tp} GPUs with NVLink"))
        if est.time_to_train_s > self.w.deadline:
            fb.append(
                (
                    DEADLINE,
                    f"{self.g.name} x{n} ({_layout_words(self.tp, self.cp, self.pp, dp, est.ep)}) takes "
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
            cp=self.cp,
            virtual_stages=est.virtual_stages,
            recompute_layers=est.recompute_layers,
            memory_options=tuple(est.memory_options),
            ep=est.ep,
        )


def _layout_words(tp: int, cp: int, pp: int, dp: int, ep: int = 1) -> str:
    words = f"TP {tp}, CP {cp}, PP {pp}, DP {dp}" if cp > 1 else f"TP {tp}, PP {pp}, DP {dp}"
    return words + (f", EP {ep}" if ep > 1 else "")


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


@dataclass(frozen=True)
class FrameworkSpace:
    """The layout space a training framework runs (catalog/frameworks.yaml), and what it leaves out, as reasons."""

    tps: tuple[int, ...]
    pps: tuple[int, ...]
    interleaving: bool
    context_parallel: bool
    expert_parallel: bool
    zero_stages: frozenset[int]
    recomputes: list[Recompute]
    recompute_layers: bool  # full recompute of a chosen number of a stage's layers; False: every layer
    left_out: tuple[FrameworkLacks, ...]
    no_memory_options: tuple[str, ...] = ()  # memory options it has no form of
    pipeline_zero_stages: frozenset[int] | None = None  # what its sharding amounts to beside pipeline stages
    replicated_alone: bool = False  # its replicated data parallelism (DDP) runs with no TP, CP or PP beside it

    def runs(self, tp: int, pp: int, virtual_stages: int, cp: int, ep: int) -> bool:
        """Whether the framework runs a layout of these degrees."""
        return (
            tp in self.tps and pp in self.pps and (virtual_stages <= 1 or self.interleaving)
            and (cp <= 1 or self.context_parallel) and (ep <= 1 or self.expert_parallel)
        )  # fmt: skip

    def zeros(self, pp: int, method: str, *, tp: int = 1, cp: int = 1) -> tuple[int, ...]:
        """The ZeRO stages tried at ``pp`` stages: the physics' (:func:`evaluate.zero_stages_for`) it runs; beside
        pipeline stages, its ``pipeline_zero_stages`` where it lists them (torchtitan's FSDP2 is ZeRO 1 there); no
        replicated copies beside TP, CP or PP where its DDP runs alone."""
        runs = self.pipeline_zero_stages if pp > 1 and self.pipeline_zero_stages is not None else self.zero_stages
        alone = self.replicated_alone and tp * cp * pp > 1
        return tuple(z for z in evaluate.zero_stages_for(pp, method) if z in runs and not (alone and z == 0))


def framework_space(spec: FrameworkSpec, recomputes: list[Recompute], method: str) -> FrameworkSpace:
    """What the search tries under ``spec``: TP, PP, interleaving, CP, EP, ZeRO stages and recompute policies it
    runs, and a :class:`FrameworkLacks` for each part of the default space it does not."""
    left: list[FrameworkLacks] = []

    def lacks(feature: LeftOutFeature, values: Sequence[object]) -> None:
        if values:
            left.append(FrameworkLacks(spec.name, feature, ", ".join(str(v) for v in values)))

    tps = TP_DEGREES if spec.tensor_parallel else (1,)
    lacks("tensor", [t for t in TP_DEGREES if t not in tps])
    pps = TRAINING_PP if spec.pipeline_parallel else (1,)
    lacks("pipeline", [p for p in TRAINING_PP if p not in pps])
    if spec.pipeline_parallel and not spec.interleaved_pipeline:
        lacks("interleaving", ["virtual stages"])
    if not spec.context_parallel:
        lacks("context", ["degrees above 1"])
    if not spec.expert_parallel:
        lacks("expert", ["degrees above 1"])
    searched = {z for p in pps for z in evaluate.zero_stages_for(p, method)}
    piped = spec.pipeline_zero_stages
    runs = set(spec.zero_stages) | (set(piped) if piped is not None and len(pps) > 1 else set())
    lacks("zero", sorted(searched - runs))
    kept = [r for r in recomputes if r in spec.recompute]
    lacks("recompute", [r for r in recomputes if r not in kept])
    return FrameworkSpace(
        tps=tps, pps=pps, interleaving=spec.interleaved_pipeline, context_parallel=spec.context_parallel,
        expert_parallel=spec.expert_parallel, zero_stages=frozenset(spec.zero_stages), recomputes=kept,
        recompute_layers=spec.recompute_layers, left_out=tuple(left),
        no_memory_options=tuple(o for o in MEMORY_OPTIONS if o not in spec.memory_options),
        pipeline_zero_stages=frozenset(piped) if piped is not None else None, replicated_alone=spec.replicated_alone,
    )  # fmt: skip


def training_candidates(
    index: int,
    w: TrainingWorkload | FinetuneWorkload,
    arch: ModelArchitecture,
    catalog: Catalog,
    offerings: Sequence[Offering],
    limits: Limits,
    assumptions: Assumptions,
    derate: Derate = NO_DERATE,
) -> WorkloadCandidates:
    """Every parallel layout of one training/fine-tuning workload on every GPU type.

    Layouts: GPU x TP in {1,2,4,8} x PP in {1,2,4,8,16} x DP in powers of two (up to the sequences per
    optimizer step and 4,096 GPUs, and two doublings past the first DP that meets the deadline), plus,
    between the last DP that misses the deadline and the first that meets it, the fewest whole servers
    that meet it (:func:`fewest_meeting`); per layout the fastest ZeRO stage, recompute policy and micro-batch
    that fit (:func:`clusterplan.evaluation.evaluate.fastest_training_layout`). Only the degrees, stages, recompute
    policies and memory options the workload's framework runs are tried (:func:`framework_space`); what it leaves
    out is a ``framework_lacks`` exclusion. LoRA/QLoRA: ZeRO 0, or 3 (FSDP) without pipeline stages. Layouts that miss
    the deadline are kept, forbidden by ``deadline``; TP wider than NVLink, forbidden by ``tp_nvlink``.
    Times are the derated ones at a requirement's ``confidence`` (``derate``). Every GPU type of the catalog is
    tried (:func:`clusterplan.candidates.offerings.gpu_type_of`); ``limits`` forbids those it does not allow.
    """
    rows: list[TrainingRow] = []
    considered = 0
    method = getattr(w, "method", "full")
    framework = catalog.framework(framework_name(w))
    space = framework_space(framework, evaluate.recomputes_for(w, flash_attention=assumptions.flash_attention), method)
    excl: list[Exclusion] = [excluded("", r) for r in space.left_out]
    recomputes = space.recomputes
    seqs_per_step = evaluate.sequences_per_step(w)
    pinned_cp, pinned_vpp, pinned_layers = w.context_parallel, w.virtual_stages, w.recompute_layers
    if not space.context_parallel:
        pinned_cp = 1
    eps = None if space.expert_parallel else (1,)
    plans = tuple(evaluate.memory_plans_for(w, forbidden=space.no_memory_options))
    for gid in sorted(catalog.gpus):
        spec = catalog.gpus[gid]
        g = gpu_type_of(spec)
        offers = [o for o in offerings if o.gpu_id == g.id]  # each row reads its own GPU type's offerings only
        walks: list[_Walk] = []
        for tp in space.tps:
            for pp in space.pps:
                zero_stages = space.zeros(pp, method)
                if not zero_stages or not recomputes:
                    continue
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
                vpps = evaluate.virtual_stage_options(arch, pp, pinned_vpp if space.interleaving else 1)
                # A framework that checkpoints every layer under full recompute: all of the stage's layers.
                layers = pinned_layers if space.recompute_layers else layers_per_stage(arch.layers, pp)
                for cp in evaluate.context_parallel_options(w, tp, g.nvlink_domain, pinned_cp):
                    replica = tp * cp * pp
                    zeros = space.zeros(pp, method, tp=tp, cp=cp)
                    if not zeros:
                        continue
                    layouts = _Layouts(
                        arch, spec, g, w, tp, pp, zeros, recomputes, assumptions, offers, forbidden, derate,
                        cp=cp, virtual_stages=vpps, recompute_layers=layers, expert_parallel=eps, memory_plans=plans,
                    )  # fmt: skip
                    walks.append(_Walk(layouts, replica, max(1, min(MAX_TRAINING_GPUS // replica, seqs_per_step))))
        rows += _walk_counts(walks, spec.max_gpus_per_node, w.deadline)
        for walk in walks:
            considered += walk.layouts.evaluated
            excl.extend(walk.layouts.exclusions)
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
        framework=framework.id,
    )
