"""The physics of one pinned design: memory, batch, rates, latencies (serving); time to train, MFU (training).

The planner's candidate rows (:mod:`clusterplan.candidates`), ``clusterplan estimate`` and the review
report evaluate a layout through these functions, so a design reads the same wherever it is shown.

* Batch policy: the largest concurrency whose KV cache fits (:func:`serving_batch`); no other cap.
* Rated point: the largest arrival rate one replica takes within its p95 targets, found by
  ``RATE_SEARCH_STEPS`` halvings (:func:`serving_rates`), and the p95 latencies at that rate.
* Training: :func:`training_point` for one fully pinned layout; :func:`fastest_training_layout` for
  the fastest (ZeRO, recompute, micro-batch) of one tp x pp x dp layout.
* Confidence: a :class:`clusterplan.design.uncertainty.Derate` (``confidence:`` in the requirement) scales
  the rates, p95s and times here, before any candidate row or constraint sees them; by default none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterplan.design.uncertainty import NO_DERATE, Derate
from clusterplan.physics import optimizer_memory, queueing, serving, training
from clusterplan.physics.optimizer_memory import PLAIN, MemoryPlan
from clusterplan.physics.reasons import Reason, ReasonCategory, without

if TYPE_CHECKING:
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
    from clusterplan.physics.factors import Assumptions
    from clusterplan.physics.types import LatencyAtLoad, ServingEstimate, TrainingEstimate
    from clusterplan.requirement.schema import FinetuneWorkload, ServingWorkload, TrainingWorkload

RATE_SEARCH_STEPS = 8  # bisection steps of the latency-target rate: within 1/256 of saturation, rounded down
MICRO_BATCHES = (8, 4, 2, 1)  # tried largest first: memory grows with it, and so does efficiency


# ------------------------------------------------------------------------------------------------
# Serving
# ------------------------------------------------------------------------------------------------


def serving_batch(max_batch_by_memory: int) -> int:
    """The batch policy (concurrency cap per replica): the largest whose KV cache fits, at least 1.

    A larger cap never lowers the rate a replica takes within its targets (the running batch follows
    the load; the cap only adds room), so the memory maximum dominates smaller caps for cost.
    """
    return max(1, max_batch_by_memory)


def max_batch(
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: ServingWorkload,
    *,
    tp: int,
    pp: int,
    quant: str,
    kv_precision: str,
    assumptions: Assumptions,
) -> int:
    """Largest concurrency whose KV cache fits beside the weights (0: not even one sequence)."""
    return serving.max_batch_by_memory(
        arch, spec, tp=tp, pp=pp, quant=quant, kv_precision=kv_precision,
        context_tokens=w.context_tokens, assumptions=assumptions,
    )  # fmt: skip


def serving_estimate(
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: ServingWorkload,
    *,
    tp: int,
    pp: int,
    quant: str,
    kv_precision: str,
    batch: int,
    assumptions: Assumptions,
) -> ServingEstimate:
    """One replica (tp x pp GPUs) at one batch: memory, prefill, decode, saturated rates, bound."""
    return serving.estimate_serving(
        arch, spec, tp=tp, pp=pp, quant=quant, kv_precision=kv_precision, batch=batch,
        input_tokens=w.input_tokens, output_tokens=w.output_tokens, context_tokens=w.context_tokens,
        assumptions=assumptions,
    )  # fmt: skip


def rate_at_ceiling(est: ServingEstimate, assumptions: Assumptions, derate: Derate = NO_DERATE) -> float:
    """Requests/s one replica takes at the utilisation ceiling, no latency targets (x the derating's rate factor)."""
    return assumptions.utilisation_ceiling * est.requests_per_s * derate.rate_factor


@dataclass(frozen=True, slots=True)
class ServingRates:
    """A replica's rated operating point."""

    rate_rps: float  # requests/s within the p95 targets and the utilisation ceiling (0: never)
    rate_no_targets_rps: float  # requests/s at the utilisation ceiling
    rated: LatencyAtLoad  # p95s at rate_rps (at rate_no_targets_rps when the targets are out of reach)


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
    the rates are scaled by the rate factor and the p95s by the latency factor (design/uncertainty.py).
    ``at_load``: the p95s of ``est`` at a rate, memoised by the caller (the candidates of a sweep's points)."""
    tk = {"input_tokens": w.input_tokens, "output_tokens": w.output_tokens, "assumptions": assumptions}
    rate = queueing.max_rate_for_targets(
        est, p95_latency_s=derate.target(w.p95_latency), p95_ttft_s=derate.target(w.p95_ttft),
        p95_tpot_s=derate.target(w.p95_tpot), steps=RATE_SEARCH_STEPS, at_load=at_load,
        **tk,  # type: ignore[arg-type]
    )  # fmt: skip
    ceiling = rate_at_ceiling(est, assumptions)
    at = rate if rate > 0 else ceiling
    lat = at_load(at) if at_load is not None else queueing.latency_at_load(est, at, **tk)  # type: ignore[arg-type]
    f = derate.rate_factor
    return ServingRates(rate_rps=rate * f, rate_no_targets_rps=ceiling * f, rated=derate.latency(lat))


# ------------------------------------------------------------------------------------------------
# Training and fine-tuning
# ------------------------------------------------------------------------------------------------


def sequences_per_step(w: TrainingWorkload | FinetuneWorkload) -> int:
    """Sequences in one optimizer step: global batch tokens / sequence length (at least 1)."""
    return max(1, int(w.global_batch_tokens // w.sequence_length))


def zero_stages_for(pp: int, method: str) -> tuple[int, ...]:
    """ZeRO stages tried: 0-3 without pipeline stages, 0-1 with them; LoRA/QLoRA train few parameters: 0."""
    if method != "full":
        return (0,)
    return (0, 1, 2, 3) if pp == 1 else (0, 1)


def recomputes_for(w: TrainingWorkload | FinetuneWorkload) -> list[str]:
    """The workload's recompute policy if it names one, else none, selective and full (cheapest first)."""
    return [w.activation_recompute] if w.activation_recompute else ["none", "selective", "full"]


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


def training_point(
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    *,
    tp: int,
    pp: int,
    dp: int,
    zero_stage: int,
    recompute: str,
    micro_batch: int,
    assumptions: Assumptions,
    derate: Derate = NO_DERATE,
    memory_plan: MemoryPlan = PLAIN,
) -> TrainingEstimate:
    """One fully pinned training layout, nodes as large as the GPU ships in (its time x ``derate``'s factor)."""
    return derate.training(
        training.estimate_training(
            arch, spec, workload=w, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, recompute=recompute,
            micro_batch=micro_batch, nodes_gpus_per_node=spec.max_gpus_per_node, assumptions=assumptions,
            memory_plan=memory_plan,
        )
    )  # fmt: skip


def fastest_training_layout(
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    *,
    tp: int,
    pp: int,
    dp: int,
    zero_stages: Sequence[int],
    recomputes: Sequence[str],
    assumptions: Assumptions,
    micro_batches: Sequence[int] | None = None,
    derate: Derate = NO_DERATE,
    memory_plans: Sequence[MemoryPlan] | None = None,
) -> tuple[TrainingEstimate | None, Reason | None]:
    """The fastest (ZeRO, recompute, micro-batch) that fits one tp x pp x dp layout, or the last reason.

    Micro-batches: ``micro_batches`` if given, else those of ``MICRO_BATCHES`` whose dp copies fit the
    sequences of one step. Fastest first: for each recompute policy, the lowest ZeRO stage that fits some
    micro-batch, at the largest micro-batch that fits (memory grows with it, and so does efficiency); then
    the fastest of the recompute policies. A handful of estimates per layout instead of every combination.
    Link reasons (TP over PCIe) are not reasons here: the tp_nvlink family decides those.
    Memory options (``memory_plans``, default :func:`memory_plans_for`): the plain layout first; each next plan
    only when nothing fits with the one before (they cost step time, never save it).
    """
    # Memory options (physics/optimizer_memory.py): one search per plan, the first that fits wins.
    plans = list(memory_plans) if memory_plans is not None else memory_plans_for(w)
    if len(plans) > 1:
        last: Reason | None = None
        for one in plans:
            found, last = fastest_training_layout(
                arch, spec, w, tp=tp, pp=pp, dp=dp, zero_stages=zero_stages, recomputes=recomputes,
                assumptions=assumptions, micro_batches=micro_batches, derate=derate, memory_plans=[one],
            )  # fmt: skip
            if found is not None:
                return found, last
        return None, last
    plan = plans[0] if plans else PLAIN
    node = spec.max_gpus_per_node

    def estimate(zero: int, rec: str, mb: int) -> tuple[TrainingEstimate | None, Reason | None]:
        """The estimate and its first reason; no estimate when it does not fit (the reason is the same)."""
        args = (arch, spec)
        layout = dict(tp=tp, pp=pp, dp=dp, zero_stage=zero, micro_batch=mb, nodes_gpus_per_node=node)
        # Rules, batch and memory come first in the estimate's reasons, and most settings tried fail
        # there: checking them alone skips the timing model (the first reason is the same).
        fit = training.training_fit(
            *args,
            workload=w, recompute=rec, assumptions=assumptions, memory_plan=plan, **layout,  # type: ignore[arg-type]
        )  # fmt: skip
        early = without(fit.why_not, ReasonCategory.LINK)
        if early:
            return None, early[0]
        est = training.estimate_training(
            *args,
            workload=w, recompute=rec, assumptions=assumptions, fit=fit, memory_plan=plan, **layout,  # type: ignore[arg-type]
        )  # fmt: skip
        est = derate.training(est)
        reasons = without(est.why_not, ReasonCategory.LINK)
        return est, reasons[0] if reasons else None

    if micro_batches is not None:
        sizes = sorted(set(micro_batches), reverse=True)
    else:
        sizes = [mb for mb in MICRO_BATCHES if mb * dp <= sequences_per_step(w)] or [1]
    friendly_checked = False
    best: TrainingEstimate | None = None
    last_reason: Reason | None = None
    for rec in recomputes:
        for zero in zero_stages:
            found, reason = estimate(zero, rec, sizes[0])
            if reason is not None:
                last_reason = reason
                if not friendly_checked:
                    # Memory only shrinks with a higher ZeRO stage, more recompute and a smaller
                    # micro-batch: if the friendliest setting does not fit, nothing does.
                    friendly_checked = True
                    _, reason = estimate(max(zero_stages), recomputes[-1], sizes[-1])
                    if reason is not None:
                        return None, reason
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
