"""The physics of one pinned design: memory, batch, rates, latencies (serving); time to train, MFU (training).

The planner's candidate rows (:mod:`clusterplan.candidates`), ``clusterplan estimate`` and the review
report evaluate a layout through these functions, so a design reads the same wherever it is shown.

* Batch policy: the largest concurrency the engine runs, ``min(KV pool / KV per sequence, engine cap)``
  (:func:`max_batch`, :func:`serving_batch`), under the workload's engine (:func:`serving_assumptions`).
* Rated point: the largest arrival rate one replica takes within its p95 targets, found by
  ``RATE_SEARCH_STEPS`` halvings (:func:`serving_rates`), and the p95 latencies at that rate.
* Training: :func:`training_point` for one fully pinned layout; :func:`fastest_training_layout` for
  the fastest (ZeRO, recompute, micro-batch) of one tp x pp x dp layout.
* Confidence: a :class:`clusterplan.evaluation.uncertainty.Derate` (``confidence:`` in the requirement) scales
  the rates, p95s and times here, before any candidate row or constraint sees them; by default none.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from clusterplan.evaluation.uncertainty import NO_DERATE, Derate
from clusterplan.physics import moe, optimizer_memory, queueing, serving
from clusterplan.physics.layout import Layout, Recompute
from clusterplan.physics.memo import HeldMemo
from clusterplan.physics.optimizer_memory import PLAIN, MemoryPlan
from clusterplan.physics.reasons import Reason, ReasonCategory, without

# The training physics (physics.training and what it imports) is imported by the functions that run it: a serving-only
# command does not pay for it (~10 ms of every solve's start).
if TYPE_CHECKING:
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
    from clusterplan.physics import training
    from clusterplan.physics.factors import Assumptions
    from clusterplan.physics.training_job import FrameworkRates, TrainingJob, TrainingSettings
    from clusterplan.physics.types import LatencyAtLoad, ServingEstimate, TrainingEstimate
    from clusterplan.plan import ReplicaGroup
    from clusterplan.requirement.schema import FinetuneWorkload, ServingWorkload, TrainingWorkload

RATE_SEARCH_STEPS = 8  # bisection steps of the latency-target rate: within 1/256 of saturation, rounded down
MICRO_BATCHES = (8, 4, 2, 1)  # tried largest first: memory grows with it, and so does efficiency


# ------------------------------------------------------------------------------------------------
# Serving
# ------------------------------------------------------------------------------------------------


def serving_assumptions(assumptions: Assumptions, w: ServingWorkload) -> Assumptions:
    """The assumptions one serving workload runs under: its engine (catalog/engines.yaml: memory policy, batch
    cap, chunked prefill, kernel factors) with the workload's overrides, headroom, speculative decoding and
    prefix-cache hit rate. The one place a workload's engine is resolved: the planner's rows, ``estimate``,
    ``export`` and the checker all evaluate through :func:`max_batch` and :func:`serving_estimate`, which call it.
    Memoised per (assumptions, workload): the physics memos downstream key the result by identity.
    """
    return _SERVING_ASSUMPTIONS.get_or_make(
        (id(assumptions), id(w)), (assumptions, w), _serving_assumptions, assumptions, w
    )


def _serving_assumptions(assumptions: Assumptions, w: ServingWorkload) -> Assumptions:
    """:func:`serving_assumptions`, made."""
    e = w.engine
    given = w.model_fields_set
    return assumptions.with_engine(
        e.name if e is not None else None,
        engine_memory_fraction=e.memory_fraction if e is not None else None,
        engine_max_batch=e.max_batch if e is not None else None,
        prefill_chunk_tokens=e.prefill_chunk_tokens if e is not None else None,
        engine_runtime_reserve_gib=e.runtime_reserve_gib if e is not None else None,
        serving_headroom_fraction=w.headroom if "headroom" in given else None,
        prefix_cache_hit_rate=w.prefix_cache_hit_rate if "prefix_cache_hit_rate" in given else None,
        speculative=w.speculative,
    )


# serving_assumptions per (assumptions, workload): a new copy each call would defeat the memos keyed by identity.
_SERVING_ASSUMPTIONS: HeldMemo[Assumptions] = HeldMemo()


def serving_batch(max_batch: int) -> int:
    """The batch policy (concurrency per replica): the largest the engine runs (:func:`max_batch`), at least 1.

    A larger cap never lowers the rate a replica takes within its targets (the running batch follows
    the load; the cap only adds room), so the engine's maximum dominates smaller caps for cost.
    """
    return max(1, max_batch)


def request_shape(w: ServingWorkload) -> serving.RequestShape:
    """What one request of ``w`` asks of a replica: its prompt and output tokens, and the context its KV reserves."""
    return serving.RequestShape(w.input_tokens, w.output_tokens, w.context_tokens)


def max_batch(
    arch: ModelArchitecture, spec: GpuSpec, w: ServingWorkload, layout: Layout, assumptions: Assumptions
) -> int:
    """Largest concurrency the engine runs: ``min(KV pool / KV per sequence, the engine's batch cap)``.

    The KV pool is the engine's memory policy (:func:`clusterplan.physics.memory.kv_pool_bytes`); the cap is
    its ``max_num_seqs`` / ``max_running_requests`` / ``max_batch_size`` (or the workload's). 0: not one sequence.
    ``layout.ep`` / ``layout.attention_dp``: an MoE model's layout (:func:`clusterplan.physics.moe.max_batch_by_memory`).
    """
    a = serving_assumptions(assumptions, w)
    by_memory = moe.max_batch_by_memory(arch, spec, layout, context_tokens=w.context_tokens, assumptions=a)
    return min(by_memory, a.batch_cap(spec.memory_gib, spec.name))


def serving_estimate(
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: ServingWorkload,
    layout: Layout,
    *,
    batch: int,
    assumptions: Assumptions,
) -> ServingEstimate:
    """One replica of ``layout`` at one batch under the workload's engine: memory, prefill, decode, rates, bound.

    ``layout.ep`` / ``layout.attention_dp``: an MoE model's expert-parallel degree and data-parallel attention per
    stage.
    """
    return serving.estimate_serving(
        arch, spec, layout, request_shape(w), batch=batch, assumptions=serving_assumptions(assumptions, w)
    )


def serving_reasons(
    arch: ModelArchitecture, spec: GpuSpec, w: ServingWorkload, layout: Layout, *, batch: int, assumptions: Assumptions
) -> list[Reason]:
    """:func:`serving_estimate`'s ``why_not`` alone (:func:`clusterplan.physics.serving.serving_reasons`): why a
    layout that holds not one sequence is ruled out, without estimating its speed."""
    return serving.serving_reasons(
        arch, spec, layout, request_shape(w), batch=batch, assumptions=serving_assumptions(assumptions, w)
    )


def replica_layout(g: ReplicaGroup) -> Layout:
    """The layout of one planned replica group: its TP and PP, weight and KV precision, EP and attention DP."""
    return Layout(tp=g.tp, pp=g.pp, quant=g.quant, kv_precision=g.kv_cache, ep=g.ep, attention_dp=g.attention_dp)


def group_batch(
    arch: ModelArchitecture, spec: GpuSpec, w: ServingWorkload, g: ReplicaGroup, assumptions: Assumptions
) -> int:
    """The batch the engine runs for one planned replica group, read at the group's own layout
    (:func:`replica_layout`: EP and attention DP included, as the planner's rows read it); the checker holds a
    plan's batch to it and ``export`` launches it. 0: not one sequence fits."""
    return max_batch(arch, spec, w, replica_layout(g), assumptions)


def moe_layouts(arch: ModelArchitecture, tp: int) -> list[tuple[int, bool]]:
    """(ep, attention_dp) layouts the planner tries for a stage of ``tp`` GPUs, as the serving recipes run them.

    Dense models and ``tp = 1``: ``(1, False)`` only. An MoE model also tries experts over every GPU of the stage
    with attention data-parallel (``ep = tp``): TensorRT-LLM's MoE benchmark recipe (``--ep`` with
    ``enable_attention_dp: true``, perf-overview 1.x), SGLang's ``--enable-dp-attention --ep-size``, vLLM's
    ``--data-parallel-size`` with ``--enable-expert-parallel``. EP with attention tensor-parallel is left to
    ``clusterplan estimate --ep``: one layout per TP degree keeps the candidate search small.
    """
    out = [(1, False)]
    if moe.is_moe(arch) and tp > 1 and moe.layout_problem(arch, tp, tp, True) is None:
        out.append((tp, True))
    return out


def rate_at_ceiling(est: ServingEstimate, assumptions: Assumptions, derate: Derate = NO_DERATE) -> float:
    """Requests/s one replica takes at the utilisation ceiling, no latency targets (x the derating's rate factor)."""
    return assumptions.utilisation_ceiling * est.requests_per_s * derate.rate_factor


@dataclass(frozen=True, slots=True)
class ServingRates:
    """A replica's rated operating point."""

    rate_rps: float  # requests/s within the p95 targets and the utilisation ceiling (0: never)
    rate_no_targets_rps: float  # requests/s at the utilisation ceiling
    rated: LatencyAtLoad  # p95s at rate_rps (at rate_no_targets_rps when the targets are out of reach)
    at_ceiling: LatencyAtLoad  # p95s at rate_no_targets_rps: the targets under which it takes its ceiling rate


def derated_targets(w: ServingWorkload, derate: Derate = NO_DERATE) -> queueing.LatencyTargets:
    """The workload's p95 targets as the undisturbed model must meet them at ``derate``'s confidence."""
    return queueing.LatencyTargets(derate.target(w.p95_latency), derate.target(w.p95_ttft), derate.target(w.p95_tpot))


def serving_rates(
    est: ServingEstimate,
    w: ServingWorkload,
    assumptions: Assumptions,
    derate: Derate = NO_DERATE,
    *,
    at_load: Callable[[float], LatencyAtLoad] | None = None,
) -> ServingRates:
    """The rate within targets (:func:`clusterplan.physics.queueing.max_rate_for_targets`, ``RATE_SEARCH_STEPS``
    halvings keeping the feasible end: 1/256 of saturation, well inside the model's accuracy) and the p95s there.

    ``derate`` (a requirement's ``confidence``): the search meets each target divided by the latency factor,
    the rates are scaled by the rate factor and the p95s by the latency factor (evaluation/uncertainty.py).
    ``at_load``: the p95s of ``est`` at a rate, memoised by the caller (the candidates of a sweep's points)."""
    tk = {"input_tokens": w.input_tokens, "output_tokens": w.output_tokens, "assumptions": assumptions}
    # the p95s at a rate: the caller's, else one loader for every rate (the replica's decode steps shared)
    load = at_load if at_load is not None else queueing.loader(est, **tk)  # type: ignore[arg-type]
    rate = queueing.max_rate_for_targets(
        est, derated_targets(w, derate), steps=RATE_SEARCH_STEPS, at_load=load, **tk,  # type: ignore[arg-type]
    )  # fmt: skip
    ceiling = rate_at_ceiling(est, assumptions)
    at = rate if rate > 0 else ceiling
    lat = load(at)
    top = lat if at == ceiling else load(ceiling)  # the search's first probe: memoised by the caller
    f = derate.rate_factor
    return ServingRates(
        rate_rps=rate * f, rate_no_targets_rps=ceiling * f, rated=derate.latency(lat), at_ceiling=derate.latency(top)
    )


# ------------------------------------------------------------------------------------------------
# Training and fine-tuning
# ------------------------------------------------------------------------------------------------


def sequences_per_step(w: TrainingWorkload | FinetuneWorkload) -> int:
    """Sequences in one optimizer step: global batch tokens / sequence length (at least 1)."""
    return max(1, int(w.global_batch_tokens // w.sequence_length))


def zero_stages_for(pp: int, method: str) -> tuple[int, ...]:
    """ZeRO stages tried: 0-3 without pipeline stages, 0-1 with them. LoRA/QLoRA train few parameters: replicated
    (0), or, without pipeline stages, the frozen base sharded too (3: FSDP, as torchtune's and PEFT's distributed
    recipes shard it, ``physics.training.adapter_state``)."""
    if method != "full":
        return (0, 3) if pp == 1 else (0,)
    return (0, 1, 2, 3) if pp == 1 else (0, 1)


def recomputes_for(w: TrainingWorkload | FinetuneWorkload, *, flash_attention: bool = True) -> list[Recompute]:
    """The workload's recompute policy if it names one, else none, selective and full (cheapest first).

    Selective recompute repeats the attention core, which FlashAttention's backward already recomputes: with
    ``flash_attention`` it equals none (same memory, same FLOPs), so the search tries none only.
    """
    if w.activation_recompute:
        return [w.activation_recompute]
    if w.recompute_layers is not None:
        return ["full"]  # a number of recomputed layers is full recompute of that many
    return ["none", "full"] if flash_attention else ["none", "selective", "full"]


def memory_plans_for(
    w: TrainingWorkload | FinetuneWorkload, *, forced: Sequence[str] = (), forbidden: Sequence[str] = ()
) -> list[MemoryPlan]:
    """The memory plans tried for a workload, plain first: its ``memory_options`` if it names them, else the
    options standard in its method's framework (``optimizer_memory.FRAMEWORK_DEFAULTS``); ``forced`` options
    (pinned by ``estimate``) are in every plan, ``forbidden`` in none."""
    allowed = w.memory_options if w.memory_options is not None else optimizer_memory.FRAMEWORK_DEFAULTS[w.kind]
    return optimizer_memory.memory_plans(
        allowed, optimizer=w.optimizer, precision=w.precision, forced=forced, forbidden=forbidden
    )


# Interleaved chunks per pipeline stage: the largest count leaving at least this many layers per chunk. The bubble
# (p-1)/(v·m) and the interleaving's extra activations (1 + (p-1)/(p·v), Korthikanti et al. 2022 §4.2.3) both fall
# as v grows, so the largest allowed count is the fastest that fits unless its p2p traffic shows; NeMo's recipes
# run 4 layers per chunk (Llama 3 70B: pp 4, vpp 5) down to 2 (Llama 3.1 405B: pp 8, vpp 8).
MIN_LAYERS_PER_CHUNK = 2


def virtual_stage_options(arch: ModelArchitecture, pp: int, pinned: int | None = None) -> tuple[int, ...]:
    """Virtual stages tried for ``pp`` stages: the pinned count, else 1 (plain 1F1B) and the largest divisor ``v``
    of the stage's layers with at least ``MIN_LAYERS_PER_CHUNK`` layers per chunk."""
    if pinned is not None:
        return (pinned,)
    if pp <= 1:
        return (1,)
    from clusterplan.physics.memory import layers_per_stage

    stage = layers_per_stage(arch.layers, pp)
    divisors = [v for v in range(2, stage // MIN_LAYERS_PER_CHUNK + 1) if stage % v == 0]
    return (1, divisors[-1]) if divisors else (1,)


def context_parallel_options(
    w: TrainingWorkload | FinetuneWorkload, tp: int, nvlink_domain: int, pinned: int | None = None
) -> tuple[int, ...]:
    """Context-parallel degrees tried: the pinned one, else 1 and each power of two whose ``tp x cp`` stays in the
    NVLink domain (Megatron-LM ranks TP then CP innermost, ``parallel_state`` order ``tp-cp-ep-dp-pp``, and the
    NeMo Llama 3 recipes keep TP x CP within one 8-GPU node: 70B tp 4 x cp 2 at 8k), with at least
    ``CP_MIN_TOKENS`` tokens per rank; beyond the domain only when the sequence is long enough that nothing
    else fits (``CP_MIN_TOKENS`` x 16 and longer: 128k runs use CP 16 across nodes)."""
    if pinned is not None:
        return (pinned,)
    seq = int(w.sequence_length)
    out = [1]
    for cp in (2, 4, 8, 16, 32):
        if seq % (2 * cp) or seq // cp < CP_MIN_TOKENS:
            break
        if tp * cp > nvlink_domain and seq < CP_MIN_TOKENS * 16:
            break
        out.append(cp)
    return tuple(out)


CP_MIN_TOKENS = 4096  # below 4k tokens per rank the ring's chunks are too small to hide the KV exchange

# The largest EP degree searched: Megatron-LM's DeepSeek-V3 recipe runs EP 64 (``examples/deepseek_v3``), DeepSeek-V3's
# own pretraining EP 64 across 8 nodes (arXiv:2412.19437 §3.2.1).
MAX_TRAINING_EP = 64


def expert_parallel_options(
    arch: ModelArchitecture, *, tp: int, dp_cp: int, nvlink_domain: int, pinned: int | Sequence[int] | str | None = None
) -> tuple[int, ...]:
    """EP degrees tried for a layout with ``dp_cp`` data x context ranks: 1 for a dense model; a pinned degree as
    pinned (its problems become reasons); else, of the degrees dividing both the routed experts and ``dp_cp``
    (Megatron-LM folds EP out of DP x CP) and allowed by a pinned list: 1, the largest whose ``tp x ep`` group
    stays in the NVLink domain (the recipes' default: Mixtral EP 8 in one node) and the largest up to
    ``MAX_TRAINING_EP`` (all-to-all over the network, as DeepSeek-V3's EP 64)."""
    if not moe.is_moe(arch):
        return (1,)
    if isinstance(pinned, int):
        return (pinned,)
    allowed = set(pinned) if isinstance(pinned, (list, tuple)) else None
    experts = moe.routed_experts(arch)
    valid = [e for e in range(1, min(experts, dp_cp, MAX_TRAINING_EP) + 1) if experts % e == 0 and dp_cp % e == 0]
    if allowed is not None:
        chosen = [e for e in valid if e in allowed]
        return tuple(chosen) if chosen else (min(allowed),)
    in_domain = [e for e in valid if tp * e <= nvlink_domain]
    return tuple(sorted({1, max(in_domain, default=1), max(valid, default=1)}))


@functools.lru_cache(maxsize=32)
def framework_rates(name: str) -> FrameworkRates:
    """The rates and overlaps of the shipped training framework called ``name`` (catalog/frameworks.yaml, id or
    alias); the reference framework's (Megatron-LM's) for a name the shipped catalog does not list."""
    from clusterplan.catalog.load import normalize_name, shipped_frameworks
    from clusterplan.physics.training_job import REFERENCE_RATES, FrameworkRates

    key = normalize_name(name)
    for spec in shipped_frameworks().values():
        if key in {normalize_name(n) for n in (spec.id, *spec.aliases)}:
            return FrameworkRates(
                achieved_rate=spec.achieved_rate, tp_comm_overlap=spec.tp_comm_overlap,
                dp_comm_overlap=spec.dp_comm_overlap,
            )  # fmt: skip
    return REFERENCE_RATES


_JOBS: HeldMemo[TrainingJob] = HeldMemo()  # training_job per workload (frozen): a layout search asks thousands of times


def training_job(w: TrainingWorkload | FinetuneWorkload) -> TrainingJob:
    """What the physics reads of a training or fine-tuning workload (:class:`TrainingJob`): pretraining trains
    every weight and has no adapters (rank 0); a fine-tune its method and LoRA rank; the rates of the framework it
    runs on (:func:`framework_rates`). Memoised per workload."""
    return _JOBS.get_or_make(id(w), (w,), _training_job, w)


def _training_job(w: TrainingWorkload | FinetuneWorkload) -> TrainingJob:
    """:func:`training_job`, built."""
    from clusterplan.physics.training_job import TrainingJob
    from clusterplan.requirement.load import framework_name

    method, rank = (w.method, w.lora_rank) if w.kind == "finetune" else ("full", 0)
    return TrainingJob(
        tokens=w.tokens, deadline_s=w.deadline, sequence_length=w.sequence_length,
        global_batch_tokens=w.global_batch_tokens, method=method, lora_rank=rank, precision=w.precision,
        optimizer=w.optimizer, framework=framework_rates(framework_name(w)),
    )  # fmt: skip


def training_point(
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    *,
    layout: Layout,
    settings: TrainingSettings,
    assumptions: Assumptions,
    derate: Derate = NO_DERATE,
) -> TrainingEstimate:
    """One fully pinned training layout, nodes as large as the GPU ships in (its time x ``derate``'s factor)."""
    from clusterplan.physics import training

    return derate.training(
        training.estimate_training(
            arch, spec, job=training_job(w), layout=layout, settings=settings,
            nodes_gpus_per_node=spec.max_gpus_per_node, assumptions=assumptions,
        )
    )  # fmt: skip


@dataclass(frozen=True)
class TrainingOptions:
    """What :func:`fastest_training_layout` searches for one tp x cp x pp x dp layout.

    ``zero_stages`` and ``recomputes`` tried (cheapest first); ``micro_batches`` (None: those of ``MICRO_BATCHES``
    the step's sequences allow); ``virtual_stages`` (None: :func:`virtual_stage_options`); ``recompute_layers``
    under full recompute (None: the fewest that fit); ``memory_plans`` (None: :func:`memory_plans_for`);
    ``expert_parallel`` degrees (None: :func:`expert_parallel_options` of the workload's ``expert_parallel``).
    """

    zero_stages: Sequence[int]
    recomputes: Sequence[Recompute]
    micro_batches: Sequence[int] | None = None
    virtual_stages: Sequence[int] | None = None
    recompute_layers: int | None = None
    memory_plans: Sequence[MemoryPlan] | None = None
    expert_parallel: Sequence[int] | None = None


def fastest_training_layout(
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    *,
    layout: Layout,
    dp: int,
    options: TrainingOptions,
    assumptions: Assumptions,
    derate: Derate = NO_DERATE,
) -> tuple[TrainingEstimate | None, Reason | None]:
    """The fastest (virtual stages, ZeRO, recompute, micro-batch) that fits one tp x cp x pp x dp layout, or the
    last reason. ``layout``: its ``tp``, ``cp`` and ``pp``; the rest is searched, over ``options``.

    Virtual stages: ``options.virtual_stages`` if given, else :func:`virtual_stage_options`; the first is searched
    as below, the others at its winner's settings. Micro-batches: ``options.micro_batches`` if given, else those of
    ``MICRO_BATCHES`` whose dp copies fit the sequences of one step (with pipeline stages the smallest of them
    only). Fastest first: for each recompute policy, the lowest ZeRO stage that fits some
    micro-batch, at the largest micro-batch that fits (memory grows with it, and so does efficiency); then
    the fastest of the recompute policies. Full recompute recomputes ``recompute_layers`` of each stage's layers
    if given, else the fewest that fit (memory falls and work grows linearly with them, Megatron-LM
    ``--recompute-num-layers``): a layout missing memory by a few GiB recomputes a few layers, not all.
    A handful of estimates per layout instead of every combination.
    Link reasons (TP over PCIe) are not reasons here: the tp_nvlink family decides those.
    Memory options (``memory_plans``, default :func:`memory_plans_for`): the plain layout first; each next plan
    only when nothing fits with the one before (they cost step time, never save it).
    Expert parallelism (``expert_parallel``, default :func:`expert_parallel_options` of the workload's
    ``expert_parallel``): each degree searched as above, the fastest kept.
    """
    tp, pp, cp = layout.tp, layout.pp, layout.cp
    eps = (
        tuple(options.expert_parallel)
        if options.expert_parallel is not None
        else expert_parallel_options(
            arch, tp=tp, dp_cp=dp * cp, nvlink_domain=training_nvlink_domain(spec), pinned=w.expert_parallel
        )
    )
    if len(eps) > 1:
        best: TrainingEstimate | None = None
        last_reason: Reason | None = None
        for one_ep in eps:
            found, reason = fastest_training_layout(
                arch, spec, w, layout=layout, dp=dp, options=replace(options, expert_parallel=(one_ep,)),
                assumptions=assumptions, derate=derate,
            )  # fmt: skip
            last_reason = reason if found is None else last_reason
            if found is not None and (best is None or found.time_to_train_s < best.time_to_train_s):
                best = found
        return best, last_reason
    ep = eps[0] if eps else 1
    plans = list(options.memory_plans) if options.memory_plans is not None else memory_plans_for(w)
    if len(plans) > 1:
        last: Reason | None = None
        for one in plans:
            found, last = fastest_training_layout(
                arch, spec, w, layout=layout, dp=dp,
                options=replace(options, memory_plans=[one], expert_parallel=(ep,)), assumptions=assumptions,
                derate=derate,
            )  # fmt: skip
            if found is not None:
                return found, last
        return None, last
    plan = plans[0] if plans else PLAIN
    vpps = tuple(options.virtual_stages) if options.virtual_stages else virtual_stage_options(arch, pp)
    at = replace(options, memory_plans=(plan,))
    first = Layout(tp=tp, pp=pp, cp=cp, ep=ep, virtual_stages=vpps[0])
    best, last_reason = _fastest_at(arch, spec, w, first, dp, at, assumptions, derate)
    for vpp in vpps[1:]:
        if best is None:
            break  # interleaving only adds activations (memory.pipeline_micro_batches_in_flight): nothing fits
        # The winner's ZeRO stage and micro-batch, interleaved; full recompute of more layers if they no longer fit.
        recs: list[Recompute] = [cast(Recompute, best.recompute)]
        if best.recompute != "full" and "full" in options.recomputes:
            recs.append("full")
        winner = replace(at, zero_stages=(best.zero_stage,), recomputes=recs, micro_batches=(best.micro_batch,))
        interleaved = Layout(tp=tp, pp=pp, cp=cp, ep=ep, virtual_stages=vpp)
        found, _ = _fastest_at(arch, spec, w, interleaved, dp, winner, assumptions, derate)
        if found is not None and found.time_to_train_s < best.time_to_train_s:
            best = found
    return best, last_reason


def training_nvlink_domain(spec: GpuSpec) -> int:
    """GPUs one NVLink domain links inside a server (1 on a PCIe-only GPU)."""
    return 1 if spec.scale_up == "pcie" else max(1, min(spec.scale_up_domain, spec.max_gpus_per_node))


def _fewest_recomputed(
    every: training.TrainingFit,
    fit: Callable[[int], training.TrainingFit],
    fits: Callable[[training.TrainingFit], bool],
) -> training.TrainingFit:
    """The fit with the fewest fully recomputed layers that still fits, from ``every`` (all of the stage's layers
    recomputed, and fitting).

    Memory is linear in the recomputed layers: each frees ``recompute_saving_bytes`` per micro-batch held, times
    the micro-batches in flight on a pipeline (or once, where the last stage's logits set the peak). The free
    memory at ``every`` bounds the answer between those two slopes; a bisection settles it (usually no step).
    """
    layers = every.recompute_layers
    per = every.recompute_saving_bytes
    if per <= 0:
        return every
    free = max(0.0, (every.mem.capacity_gib - every.mem.total_gib) * 2**30)
    lo = max(1, layers - math.floor(free / per))  # the flattest slope: no fewer layers can fit
    hi = max(lo, min(layers, layers - math.floor(free / (per * max(every.in_flight, 1.0)))))
    best = every
    if hi < layers:
        g = fit(hi)
        if fits(g):
            best = g
        else:
            lo, hi = hi + 1, layers
    while lo < hi:
        mid = (lo + hi) // 2
        g = fit(mid)
        if fits(g):
            hi, best = mid, g
        else:
            lo = mid + 1
    return best if best.recompute_layers == hi else fit(hi)


def _fastest_at(
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    shape: Layout,
    dp: int,
    options: TrainingOptions,
    assumptions: Assumptions,
    derate: Derate,
) -> tuple[TrainingEstimate | None, Reason | None]:
    """:func:`fastest_training_layout` at one virtual-stage count, memory plan and EP degree: ``shape``'s tp, cp,
    pp, virtual stages and EP degree, ``options``' first memory plan."""
    from clusterplan.physics import training
    from clusterplan.physics.training_job import TrainingSettings

    node, pp = spec.max_gpus_per_node, shape.pp
    job = training_job(w)
    memory_plan = options.memory_plans[0] if options.memory_plans else PLAIN
    zero_stages, recomputes, recompute_layers = options.zero_stages, options.recomputes, options.recompute_layers

    tp, cp, vpp, ep = shape.tp, shape.cp, shape.virtual_stages, shape.ep

    layouts: dict[tuple[Recompute, int | None], Layout] = {}
    settings_of: dict[tuple[int, int], TrainingSettings] = {}

    def setup(zero: int, rec: Recompute, mb: int, layers: int | None) -> tuple[Layout, TrainingSettings]:
        """The layout and settings of one try, each built once (the search tries each many times)."""
        layout = layouts.get((rec, layers))
        if layout is None:
            layout = Layout(tp=tp, pp=pp, cp=cp, ep=ep, virtual_stages=vpp, recompute=rec, recompute_layers=layers)
            layouts[rec, layers] = layout
        settings = settings_of.get((zero, mb))
        if settings is None:
            settings = TrainingSettings(dp=dp, zero_stage=zero, micro_batch=mb, memory_plan=memory_plan)
            settings_of[zero, mb] = settings
        return layout, settings

    fits: dict[tuple[int, Recompute, int, int | None], training.TrainingFit] = {}

    def fit(zero: int, rec: Recompute, mb: int, layers: int | None) -> training.TrainingFit:
        """The fit of one try, computed once (the friendliest probe below is tried again by the search)."""
        got = fits.get((zero, rec, mb, layers))
        if got is None:
            layout, settings = setup(zero, rec, mb, layers)
            got = fits[zero, rec, mb, layers] = training.training_fit(
                arch, spec, job=job, layout=layout, settings=settings, nodes_gpus_per_node=node,
                assumptions=assumptions,
            )  # fmt: skip
        return got

    def first_reason(f: training.TrainingFit) -> Reason | None:
        early = without(f.why_not, ReasonCategory.LINK)
        return early[0] if early else None

    def estimate(zero: int, rec: Recompute, mb: int) -> tuple[TrainingEstimate | None, Reason | None]:
        """The estimate and its first reason; no estimate when it does not fit (the reason is the same)."""
        # Rules, batch and memory come first in the estimate's reasons, and most settings tried fail
        # there: checking them alone skips the timing model (the first reason is the same).
        layers = recompute_layers
        f = fit(zero, rec, mb, layers)
        reason = first_reason(f)
        if reason is not None:
            return None, reason
        if rec == "full" and layers is None and f.recompute_layers > 1:
            f = _fewest_recomputed(f, lambda n: fit(zero, rec, mb, n), lambda g: first_reason(g) is None)
        layout, settings = setup(zero, rec, mb, f.recompute_layers if rec == "full" else None)
        est = training.estimate_training(
            arch, spec, job=job, layout=layout, settings=settings, nodes_gpus_per_node=node, assumptions=assumptions,
            fit=f,
        )  # fmt: skip
        est = derate.training(est)
        reasons = without(est.why_not, ReasonCategory.LINK)
        return est, reasons[0] if reasons else None

    micro_batches = options.micro_batches
    if micro_batches is not None:
        sizes = sorted(set(micro_batches), reverse=True)
    else:
        sizes = [mb for mb in MICRO_BATCHES if mb * dp <= sequences_per_step(w)] or [1]
        if pp > 1:
            # With pipeline stages the smallest micro-batch dominates: more micro-batches per step shrink the bubble
            # ((p-1)/(v·m)) and hold fewer activations in flight (Megatron-LM's PP recipes run micro-batch 1).
            sizes = sizes[-1:]
    # Memory only shrinks with a higher ZeRO stage, more recompute and a smaller micro-batch: if the friendliest
    # setting does not fit, nothing does (one fit where most small layouts of a large model stop).
    reason = first_reason(fit(max(zero_stages), recomputes[-1], sizes[-1], None))
    if reason is not None:
        return None, reason
    best: TrainingEstimate | None = None
    last_reason: Reason | None = None
    for rec in recomputes:
        for zero in zero_stages:
            found, reason = estimate(zero, rec, sizes[0])
            if reason is not None:
                last_reason = reason
                if len(sizes) == 1:
                    continue
                found, reason = estimate(zero, rec, sizes[-1])
                if reason is not None:
                    continue
                for mb in sizes[1:-1]:
                    est, reason = estimate(zero, rec, mb)
                    if reason is None:
                        found = est
                        break
            assert found is not None  # settings with a reason never reach here
            if best is None or found.time_to_train_s < best.time_to_train_s:
                best = found
            if zero == zero_stages[0] and found.micro_batch == sizes[0]:
                # Nothing later can beat it: more recompute only adds work, and it already has the
                # lowest ZeRO stage and the largest micro-batch.
                return best, last_reason
            break
    return best, last_reason
