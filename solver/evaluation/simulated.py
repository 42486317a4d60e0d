"""A planned design's replicas run through the scheduler simulation (:mod:`clusterplan.physics.schedule_sim`): the
planner searches with the analytical latency model (:mod:`clusterplan.physics.queueing`), then checks each returned
design's aggregated replica groups by simulation at the load each replica receives at peak demand, and records
every p95 target a simulated replica misses (:class:`clusterplan.plan.SimulatedMiss`).

The replica is the one the plan describes, evaluated through :func:`clusterplan.evaluation.evaluate.serving_estimate`
(the one path); :func:`sim_replica` is also what ``estimate --arrival`` runs. Arrivals are Poisson at the replica's
share of peak demand (demand split over replicas in proportion to their rates, as the odds and the checker split
it), :data:`VERIFY_REQUESTS` requests of the workload's lengths, seed 0. Disaggregated pools are not simulated.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from clusterplan.evaluation import evaluate
from clusterplan.physics import schedule_sim as sim
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.types import ServingEstimate

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.plan import Design, ReplicaGroup, ServingPlan, SimulatedMiss
    from clusterplan.requirement.load import ResolvedRequirement
    from clusterplan.requirement.schema import ServingWorkload

SimFigure = Literal["p95_latency", "p95_ttft", "p95_tpot"]
VERIFY_REQUESTS = 1000  # vllm bench serve's --num-prompts default
VERIFY_SEED = 0
_Seen = dict[tuple[object, ...], list["SimulatedMiss"]]


def sim_replica(est: ServingEstimate, w: ServingWorkload, a: Assumptions, max_seqs: int) -> sim.SimReplica:
    """The replica ``est`` describes, as the scheduler simulation runs it: its step model, its prompt's unloaded and
    riding prefill time per computed token, its KV pool (the batch memory holds at the workload's context), the
    engine's token budget and KV block, ``max_seqs`` as ``max_num_seqs``, the prefix-cache hit rate and the
    speculative acceptance (``a``: the workload's assumptions, :func:`evaluate.serving_assumptions`)."""
    # the prompt's computed tokens, as physics/serving.py _prefill_work counts them (a prefix-cache hit skipped)
    if est.step_model is None:
        raise ValueError("a serving estimate without its step model cannot be simulated")
    computed = max(w.input_tokens - w.input_tokens * a.prefix_cache_hit_rate, 1.0)
    return sim.SimReplica(
        step_model=est.step_model,
        prefill_token_busy_s=est.prefill_busy_s / computed,
        prefill_token_alone_s=est.prefill_s / computed,
        chunk_tokens=a.chunk_tokens,
        max_seqs=max(max_seqs, 1),
        kv_pool_tokens=int(est.max_batch_by_memory * w.context_tokens),
        kv_block_tokens=a.engine_spec.kv_block_tokens,
        prefix_hit_rate=a.prefix_cache_hit_rate,
        acceptance_length=a.speculative.acceptance_length if a.speculative is not None else 1.0,
    )


def design_misses(
    design: Design, resolved: ResolvedRequirement, catalog: Catalog, seen: _Seen | None = None
) -> list[SimulatedMiss]:
    """Each p95 target of a serving workload that one of the design's aggregated replica groups misses simulated
    (``seen``: the misses of groups already simulated at the same load, shared by the designs of one plan)."""
    from clusterplan.plan import ServingPlan

    out: list[SimulatedMiss] = []
    for w in design.workloads:
        if isinstance(w, ServingPlan) and w.groups:
            out += _workload_misses(w, resolved, catalog, {} if seen is None else seen)
    return out


def _workload_misses(
    w: ServingPlan, resolved: ResolvedRequirement, catalog: Catalog, seen: _Seen
) -> list[SimulatedMiss]:
    """The misses of one serving workload's aggregated groups, each simulated at its share of peak demand."""
    names = [x.name for x in resolved.requirement.workloads]
    i = names.index(w.workload)
    sw = resolved.requirement.workloads[i]
    assert sw.kind == "serving"
    targets = sim.Targets(ttft_s=sw.p95_ttft, tpot_s=sw.p95_tpot, e2e_s=sw.p95_latency)
    if all(t is None for t in (targets.ttft_s, targets.tpot_s, targets.e2e_s)):
        return []
    total = w.capacity_rps  # demand splits over replicas in proportion to their rates (uncertainty._peak_p95s)
    out: list[SimulatedMiss] = []
    for g in w.groups:
        if g.role != "aggregated" or total <= 0 or g.rate_rps <= 0:
            continue
        load = w.demand_rps * g.rate_rps / total
        key = (w.workload, g.gpu, g.tp, g.pp, g.quant, g.kv_cache, g.ep, g.attention_dp, g.batch, load)
        if key not in seen:  # the designs of one plan often share a group at the same load
            seen[key] = _group_misses(g, sw, load, targets, resolved, catalog)
        out += seen[key]
    return out


def _group_misses(
    g: ReplicaGroup,
    sw: ServingWorkload,
    load: float,
    targets: sim.Targets,
    resolved: ResolvedRequirement,
    catalog: Catalog,
) -> list[SimulatedMiss]:
    """One replica group simulated under Poisson arrivals at ``load``; the p95 targets it misses."""
    from clusterplan.plan import SimulatedMiss

    req = resolved.requirement
    i = [x.name for x in req.workloads].index(sw.name)
    a = evaluate.serving_assumptions(req.assumptions, sw)
    est = evaluate.serving_estimate(
        resolved.model_for(i), catalog.gpus[g.gpu], sw, evaluate.replica_layout(g), batch=g.batch,
        assumptions=req.assumptions,
    )  # fmt: skip
    arrival = sim.Arrival("poisson", rate_per_s=load)
    lengths = sim.Lengths(max(1, round(sw.input_tokens)), max(1, round(sw.output_tokens)))
    run = sim.simulate(
        sim_replica(est, sw, a, g.batch), sim.draw_requests(arrival, lengths, VERIFY_REQUESTS, VERIFY_SEED), arrival
    )
    label = f"{g.gpu} TP{g.tp}" + (f" PP{g.pp}" if g.pp > 1 else "") + f" {g.quant}"
    # (figure, target, simulated, planned): an aggregated group's planned p95s are all set (a prefill pool's TPOT
    # is None, but pools are not simulated here)
    figures: tuple[tuple[SimFigure, float | None, float, float | None], ...] = (
        ("p95_latency", targets.e2e_s, run.e2e.p95_s, g.p95_latency_s),
        ("p95_ttft", targets.ttft_s, run.ttft.p95_s, g.p95_ttft_s),
        ("p95_tpot", targets.tpot_s, run.tpot.p95_s, g.p95_tpot_s),
    )
    out: list[SimulatedMiss] = []
    for figure, target, simulated, planned in figures:
        if target is not None and planned is not None and math.isfinite(simulated) and simulated > target:
            out.append(
                SimulatedMiss(
                    workload=sw.name,
                    figure=figure,
                    group=label,
                    load_rps=load,
                    requests=run.requests,
                    simulated_s=simulated,
                    planned_s=planned,
                    target_s=target,
                )
            )
    return out


def with_simulation(designs: list[Design], resolved: ResolvedRequirement, catalog: Catalog) -> list[Design]:
    """Each design with the targets its replicas miss simulated (:func:`design_misses`)."""
    seen: _Seen = {}
    return [d.model_copy(update={"simulation_misses": design_misses(d, resolved, catalog, seen)}) for d in designs]
