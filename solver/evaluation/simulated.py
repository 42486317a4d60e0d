"""A planned design's replicas run through the scheduler simulation (:mod:`clusterplan.physics.schedule_sim`): the
planner searches with the analytical latency model (:mod:`clusterplan.physics.queueing`), then checks each returned
design's replica groups (aggregated, and each pool of a disaggregated design) by simulation at the load each replica receives at peak demand, and records
every p95 target a simulated replica misses (:class:`clusterplan.plan.SimulatedMiss`), with the largest load per
replica at which the simulation meets every target (:func:`held_rate_rps`). The pipeline gives that load to the
latency family as a cap on the row and searches again (``pipeline.simulation_searched``); ``export`` takes its
expected figures of an aggregated replica from :func:`poisson_run` at the average rate.

The replica is the one the plan describes, evaluated through :func:`clusterplan.evaluation.evaluate.serving_estimate`
(the one path); :func:`sim_replica` is also what ``estimate --arrival`` runs. Arrivals are Poisson at the replica's
share of peak demand (demand split over replicas in proportion to their rates, as the odds and the checker split
it), :data:`VERIFY_REQUESTS` requests of the workload's lengths, seed 0.

A disaggregated design's pools are simulated as the engines run them (:mod:`clusterplan.physics.schedule_sim`'s
roles), each pool replica at its share of its side's peak demand (the aggregated replicas and that pool's):

* a **prefill** replica runs prompts only; its TTFT (queue + prefill + the KV transfer
  :func:`clusterplan.physics.disagg.kv_transfer_s` prices) is checked against the prefill pool's share of the targets
  (:func:`clusterplan.physics.disagg.budgets`: ``p95_ttft``, at most half of ``p95_latency``), as the pool was sized;
* a **decode** replica receives the requests with their KV computed; its TPOT is checked against ``p95_tpot``, and
  the end-to-end latency (request ``i``'s TTFT on the prefill replica plus its time on the decode replica, the
  same seeded requests paired) against ``p95_latency``. The prefill replica is taken at the load it will carry: its
  peak load, or its held load where it misses there (each pool is held apart, so a slow prefill pool does not
  hold the decode pool).
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from clusterplan.evaluation import evaluate
from clusterplan.physics import disagg, queueing
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
HELD_STEPS = 7  # bisections of the held load: within 1/128 of the load the replica missed at
RUN_MEMO_RUNS = 1024  # simulated runs a process remembers (~17 KiB each: a 1,000-request run's two latency arrays)
_Seen = dict[tuple[object, ...], list["SimulatedMiss"]]


@dataclass(frozen=True, slots=True)
class HeldLoad:
    """A planned replica group whose simulation missed a target at its peak load, and the largest load per replica
    at which the simulation meets every target (0: none tried did), requests/s."""

    workload: str
    group: ReplicaGroup
    held_rps: float


def sim_replica(
    est: ServingEstimate,
    w: ServingWorkload,
    a: Assumptions,
    max_seqs: int,
    role: sim.Role = "aggregated",
    kv_transfer_s: float = 0.0,
) -> sim.SimReplica:
    """The replica ``est`` describes, as the scheduler simulation runs it: its step model, its prompt's unloaded and
    riding prefill time per computed token, its KV pool (the batch memory holds at the workload's context), the
    engine's token budget and KV block, ``max_seqs`` as ``max_num_seqs``, the prefix-cache hit rate and the
    speculative acceptance (``a``: the workload's assumptions, :func:`evaluate.serving_assumptions`). A prefill
    pool's replica (``role``) prices a prompt-only step as :func:`disagg.prefill_service_s` does (the prompts'
    compute alone, plus one weight pass) and sends each prompt's KV in ``kv_transfer_s``."""
    # the prompt's computed tokens, as physics/serving.py _prefill_work counts them (a prefix-cache hit skipped)
    if est.step_model is None:
        raise ValueError("a serving estimate without its step model cannot be simulated")
    computed = max(w.input_tokens - w.input_tokens * a.prefix_cache_hit_rate, 1.0)
    prefill = role == "prefill"
    return sim.SimReplica(
        step_model=est.step_model,
        prefill_token_busy_s=est.prefill_busy_s / computed,
        prefill_token_alone_s=(est.prefill_alone_busy_s if prefill else est.prefill_s) / computed,
        chunk_tokens=a.chunk_tokens,
        max_seqs=max(max_seqs, 1),
        kv_pool_tokens=int(est.max_batch_by_memory * w.context_tokens),
        kv_block_tokens=a.engine_spec.kv_block_tokens,
        prefix_hit_rate=a.prefix_cache_hit_rate,
        acceptance_length=a.speculative.acceptance_length if a.speculative is not None else 1.0,
        role=role,
        prefill_pass_s=disagg.prefill_pass_s(est, input_tokens=w.input_tokens, assumptions=a) if prefill else 0.0,
        kv_transfer_s=kv_transfer_s if prefill else 0.0,
    )


def design_misses(
    design: Design, resolved: ResolvedRequirement, catalog: Catalog, seen: _Seen | None = None
) -> list[SimulatedMiss]:
    """Each p95 target of a serving workload that one of the design's replica groups (aggregated, or a pool's) misses simulated
    (``seen``: the misses of groups already simulated at the same load, shared by the designs of one plan)."""
    return [m for _, _, misses in _group_results(design, resolved, catalog, seen) for m in misses]


def held_loads(
    design: Design, resolved: ResolvedRequirement, catalog: Catalog, seen: _Seen | None = None
) -> list[HeldLoad]:
    """Each replica group of ``design`` (each pool apart) whose simulation misses a target at its peak load, with the
    load per replica the simulation holds every target at (what the planner's latency family then allows it)."""
    out: list[HeldLoad] = []
    for workload, g, misses in _group_results(design, resolved, catalog, seen):
        if misses and misses[0].held_rps is not None:
            out.append(HeldLoad(workload, g, misses[0].held_rps))
    return out


def _group_results(
    design: Design, resolved: ResolvedRequirement, catalog: Catalog, seen: _Seen | None
) -> list[tuple[str, ReplicaGroup, list[SimulatedMiss]]]:
    """(workload, group, its misses) of each group of the design's serving workloads with a target, each
    simulated at its share of peak demand (a pool's group: of its side's, :func:`_pool_results`)."""
    from clusterplan.plan import ServingPlan

    cache: _Seen = {} if seen is None else seen
    out: list[tuple[str, ReplicaGroup, list[SimulatedMiss]]] = []
    for w in design.workloads:
        if not isinstance(w, ServingPlan) or not w.groups:
            continue
        sw = next(x for x in resolved.requirement.workloads if x.name == w.workload)
        assert sw.kind == "serving"
        targets = sim.Targets(ttft_s=sw.p95_ttft, tpot_s=sw.p95_tpot, e2e_s=sw.p95_latency)
        if all(t is None for t in (targets.ttft_s, targets.tpot_s, targets.e2e_s)):
            continue
        total = w.capacity_rps  # demand splits over replicas in proportion to their rates (uncertainty._peak_p95s)
        for g in w.groups:
            if g.role != "aggregated" or total <= 0 or g.rate_rps <= 0:
                continue
            load = w.demand_rps * g.rate_rps / total
            key = (w.workload, g.gpu, g.tp, g.pp, g.quant, g.kv_cache, g.ep, g.attention_dp, g.batch, load)
            if key not in cache:  # the designs of one plan often share a group at the same load
                cache[key] = _group_misses(g, sw, load, targets, resolved, catalog)
            out.append((w.workload, g, cache[key]))
        out += _pool_results(w, sw, targets, _Sim(resolved, catalog, cache))
    return out


@dataclass(frozen=True, slots=True)
class _Sim:
    """What simulating a design's groups needs: the requirement, the catalog, the runs already made, and each pool
    group's replica as evaluated once (its estimate, assumptions, role and KV transfer: the same at every load)."""

    resolved: ResolvedRequirement
    catalog: Catalog
    cache: _Seen
    replicas: dict[tuple[object, ...], _PoolReplica] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _PoolReplica:
    """One replica of a pool group as :func:`poisson_run` takes it."""

    est: ServingEstimate
    assumptions: Assumptions
    role: sim.Role
    kv_transfer_s: float


def _pool_results(
    w: ServingPlan, sw: ServingWorkload, targets: sim.Targets, ctx: _Sim
) -> list[tuple[str, ReplicaGroup, list[SimulatedMiss]]]:
    """(workload, group, its misses) of each pool group: the prefill pool's first (its TTFT against its share of
    the targets), then the decode pool's (TPOT, and end-to-end with the slowest prefill replica's TTFTs)."""
    out: list[tuple[str, ReplicaGroup, list[SimulatedMiss]]] = []
    budget = disagg.budgets(targets.e2e_s, targets.ttft_s, targets.tpot_s)
    prefill_ttfts: tuple[float, ...] = ()
    planned_ttft_s = 0.0
    for g in w.groups:
        if g.role != "prefill" or (load := _pool_load(w, g)) <= 0:
            continue
        key = ("prefill", w.workload, *_shape(g), load)
        if key not in ctx.cache:
            ctx.cache[key] = _prefill_misses(g, sw, load, budget.ttft_s, ctx)
        misses = ctx.cache[key]
        out.append((w.workload, g, misses))
        # the prefill replica as it will run: at its peak load, or held where it misses there
        held = misses[0].held_rps if misses and misses[0].held_rps else None
        run = _pool_run(g, sw, held if held is not None else load, ctx)
        if not prefill_ttfts or run.ttft.p95_s > distribution_p95(prefill_ttfts):
            prefill_ttfts, planned_ttft_s = run.ttft_s, g.p95_ttft_s
    for g in w.groups:
        if g.role != "decode" or (load := _pool_load(w, g)) <= 0:
            continue
        key = ("decode", w.workload, *_shape(g), load, prefill_ttfts)
        if key not in ctx.cache:
            ctx.cache[key] = _decode_misses(g, sw, load, targets, prefill_ttfts, planned_ttft_s, ctx)
        out.append((w.workload, g, ctx.cache[key]))
    return out


def distribution_p95(values: tuple[float, ...]) -> float:
    """The p95 of ``values``, as ``vllm bench serve`` computes it."""
    return sim.distribution(values).p95_s


def _shape(g: ReplicaGroup) -> tuple[object, ...]:
    return (g.gpu, g.tp, g.pp, g.quant, g.kv_cache, g.ep, g.attention_dp, g.batch)


def _pool_load(w: ServingPlan, g: ReplicaGroup) -> float:
    """Requests/s one replica of pool group ``g`` receives at peak: demand split in proportion to the rates over the
    replicas serving its side (its pool's and the aggregated ones, as the latency family counts a side)."""
    side = sum(x.rate_rps * x.replicas for x in w.groups if x.role in (g.role, "aggregated"))
    return w.demand_rps * g.rate_rps / side if side > 0 and g.rate_rps > 0 else 0.0


def _pool_run(g: ReplicaGroup, sw: ServingWorkload, load: float, ctx: _Sim) -> sim.SimResult:
    """One replica of pool group ``g`` under Poisson arrivals at ``load`` (:func:`poisson_run` in its role); a
    prefill replica's requests leave after the KV transfer :func:`disagg.kv_transfer_s` prices, as the pool model."""
    key = (sw.name, g.role, *_shape(g))
    if (replica := ctx.replicas.get(key)) is None:  # evaluated once: the held bisection runs it at 8 loads
        replica = ctx.replicas[key] = _pool_replica(g, sw, ctx)
    return poisson_run(
        replica.est, sw, replica.assumptions, g.batch, load, role=replica.role, kv_transfer_s=replica.kv_transfer_s
    )


def _pool_replica(g: ReplicaGroup, sw: ServingWorkload, ctx: _Sim) -> _PoolReplica:
    """One replica of pool group ``g`` evaluated (:func:`evaluate.serving_estimate`, the one path), with its KV
    transfer if it prefills."""
    from clusterplan.evaluation import pools

    req = ctx.resolved.requirement
    i = [x.name for x in req.workloads].index(sw.name)
    a = evaluate.serving_assumptions(req.assumptions, sw)
    spec = ctx.catalog.gpus[g.gpu]
    arch = ctx.resolved.model_for(i)
    est = evaluate.serving_estimate(
        arch, spec, sw, evaluate.replica_layout(g), batch=g.batch, assumptions=req.assumptions
    )
    transfer = 0.0
    if g.role == "prefill":
        transfer = disagg.kv_transfer_s(
            arch, spec, input_tokens=sw.input_tokens, kv_precision=est.kv_precision, senders=est.tp * est.pp,
            assumptions=a, link=pools.kv_link(spec),
        )  # fmt: skip
    return _PoolReplica(est, a, "prefill" if g.role == "prefill" else "decode", transfer)


def pool_run(
    g: ReplicaGroup, sw: ServingWorkload, load_rps: float, resolved: ResolvedRequirement, catalog: Catalog
) -> sim.SimResult:
    """One replica of pool group ``g`` at ``load_rps`` as the planner's check runs it (:func:`_pool_run`):
    ``export``'s expected figures of a pool (at its share of the average rate)."""
    return _pool_run(g, sw, load_rps, _Sim(resolved, catalog, {}))


def _label(g: ReplicaGroup) -> str:
    """``h200 TP2 fp8``, ``mi300x TP2 fp8 prefill pool``: the group a miss names."""
    text = f"{g.gpu} TP{g.tp}" + (f" PP{g.pp}" if g.pp > 1 else "") + f" {g.quant}"
    return text if g.role == "aggregated" else f"{text} {g.role} pool"


def _prefill_misses(
    g: ReplicaGroup, sw: ServingWorkload, load: float, budget_s: float | None, ctx: _Sim
) -> list[SimulatedMiss]:
    """A prefill pool replica at ``load``: its p95 TTFT against the pool's share of the targets, and the load it
    meets it at."""
    from clusterplan.plan import SimulatedMiss

    if budget_s is None:
        return []
    run = _pool_run(g, sw, load, ctx)
    if run.ttft.p95_s <= budget_s:
        return []
    held = _held(lambda x: _pool_run(g, sw, x, ctx).ttft.p95_s > budget_s, load)
    return [
        SimulatedMiss(
            workload=sw.name, figure="p95_ttft", group=_label(g), load_rps=load, requests=run.requests,
            simulated_s=run.ttft.p95_s, planned_s=g.p95_ttft_s, target_s=budget_s, held_rps=held,
        )
    ]  # fmt: skip


def _decode_figures(
    run: sim.SimResult, targets: sim.Targets, prefill_ttfts: tuple[float, ...]
) -> list[tuple[SimFigure, float, float]]:
    """(figure, simulated p95, target) of each target a decode replica's ``run`` misses: its TPOT, and the
    end-to-end latency of each request paired with its TTFT on the prefill replica."""
    out: list[tuple[SimFigure, float, float]] = []
    if targets.e2e_s is not None and prefill_ttfts:
        e2e = distribution_p95(tuple(t + e for t, e in zip(prefill_ttfts, run.e2e_s, strict=True)))
        if e2e > targets.e2e_s:
            out.append(("p95_latency", e2e, targets.e2e_s))
    if targets.tpot_s is not None and run.tpot.p95_s > targets.tpot_s:
        out.append(("p95_tpot", run.tpot.p95_s, targets.tpot_s))
    return out


def _decode_misses(
    g: ReplicaGroup,
    sw: ServingWorkload,
    load: float,
    targets: sim.Targets,
    prefill_ttfts: tuple[float, ...],
    planned_ttft_s: float,
    ctx: _Sim,
) -> list[SimulatedMiss]:
    """A decode pool replica at ``load``: the targets it misses (:func:`_decode_figures`), and the load it meets
    them all at (the prefill replica's TTFTs held as they are)."""
    from clusterplan.plan import SimulatedMiss

    run = _pool_run(g, sw, load, ctx)
    missed = _decode_figures(run, targets, prefill_ttfts)
    if not missed:
        return []
    held = _held(lambda x: bool(_decode_figures(_pool_run(g, sw, x, ctx), targets, prefill_ttfts)), load)
    planned = {"p95_latency": planned_ttft_s + g.p95_latency_s, "p95_tpot": g.p95_tpot_s or 0.0}
    return [
        SimulatedMiss(
            workload=sw.name, figure=figure, group=_label(g), load_rps=load, requests=run.requests,
            simulated_s=simulated, planned_s=planned[figure], target_s=target, held_rps=held,
        )
        for figure, simulated, target in missed
    ]  # fmt: skip


def poisson_run(
    est: ServingEstimate,
    w: ServingWorkload,
    a: Assumptions,
    batch: int,
    load_rps: float,
    *,
    role: sim.Role = "aggregated",
    kv_transfer_s: float = 0.0,
) -> sim.SimResult:
    """One replica (``est`` at its ``batch`` cap, in its pool's ``role``) under Poisson arrivals at ``load_rps``:
    :data:`VERIFY_REQUESTS` requests of the workload's lengths, seed :data:`VERIFY_SEED`. The planner's check and
    ``export``'s expected figures both run this (one simulation per design); a run made before in this process is
    given back from :data:`RUN_MEMO` (exactly: the same floats)."""
    arrival = sim.Arrival("poisson", rate_per_s=load_rps)
    lengths = sim.Lengths(max(1, round(w.input_tokens)), max(1, round(w.output_tokens)))
    replica = sim_replica(est, w, a, batch, role, kv_transfer_s)
    key = run_key(replica, arrival, lengths)
    if (known := RUN_MEMO.get(key)) is not None:
        return known
    requests = sim.draw_requests(arrival, lengths, VERIFY_REQUESTS, VERIFY_SEED)
    run = sim.simulate(replica, requests, arrival)
    RUN_MEMO.put(key, run)
    return run


def run_key(replica: sim.SimReplica, arrival: sim.Arrival, lengths: sim.Lengths) -> str:
    """What decides a :func:`poisson_run`'s result, as one exact value: every field of the replica (its step model's
    every field too), the arrivals, the lengths, :data:`VERIFY_REQUESTS` and :data:`VERIFY_SEED`. ``repr`` writes a
    float so that it reads back to the same bits (and tells 0.0 from -0.0, 1 from 1.0): equal keys, equal runs."""
    fields = tuple(
        value.model_dump() if isinstance(value, BaseModel) else value
        for value in (getattr(replica, f.name) for f in dataclasses.fields(replica))
    )
    return repr((fields, arrival, lengths, VERIFY_REQUESTS, VERIFY_SEED))


class RunMemo:
    """The simulated runs already made in this process, least recently used first out past ``runs`` of them: the
    trade checks and each re-search round simulate the same replica at the same load again (a 70B ``solve`` made 117
    runs, 54 of them different). Per process (a process pool's or Ray's worker keeps its own), lock-guarded for
    threads. A run's two per-request latency tuples are kept as arrays (8 bytes a value, not 32) and given back as
    tuples of the same floats."""

    def __init__(self, runs: int) -> None:
        self.runs = runs
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[sim.SimResult, array[float], array[float]]] = OrderedDict()

    def get(self, key: str) -> sim.SimResult | None:
        """The run stored under ``key`` (now the most recently used), or None."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                return None
            self._kept.move_to_end(key)
        run, ttft, e2e = kept
        return dataclasses.replace(run, ttft_s=tuple(ttft), e2e_s=tuple(e2e))

    def put(self, key: str, run: sim.SimResult) -> None:
        """Remember ``run`` under ``key``, forgetting the least recently used past :attr:`runs`."""
        kept = (dataclasses.replace(run, ttft_s=(), e2e_s=()), array("d", run.ttft_s), array("d", run.e2e_s))
        with self._lock:
            self._kept[key] = kept
            self._kept.move_to_end(key)
            while len(self._kept) > max(self.runs, 0):
                self._kept.popitem(last=False)

    def new_lock(self) -> None:
        """A lock of its own (a forked worker's: the parent's may have been held by a thread as it forked)."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        """Forget every run."""
        with self._lock:
            self._kept.clear()


RUN_MEMO = RunMemo(RUN_MEMO_RUNS)
os.register_at_fork(after_in_child=RUN_MEMO.new_lock)


def _missed(run: sim.SimResult, targets: sim.Targets) -> list[tuple[SimFigure, float, float]]:
    """(figure, simulated p95, target) of each target ``run`` misses."""
    figures: tuple[tuple[SimFigure, float | None, float], ...] = (
        ("p95_latency", targets.e2e_s, run.e2e.p95_s),
        ("p95_ttft", targets.ttft_s, run.ttft.p95_s),
        ("p95_tpot", targets.tpot_s, run.tpot.p95_s),
    )
    return [(f, s, t) for f, t, s in figures if t is not None and math.isfinite(s) and s > t]


def held_rate_rps(run_at: Callable[[float], sim.SimResult], missed_rps: float, targets: sim.Targets) -> float:
    """The largest per-replica load at which the simulated p95s meet every target, bisected on
    ``(0, missed_rps)`` in :data:`HELD_STEPS` steps: always a load simulated and seen to pass (0: none passed, the
    replica misses its targets even at ``missed_rps / 2**HELD_STEPS``). ``run_at``: the replica at a load."""
    return _held(lambda x: bool(_missed(run_at(x), targets)), missed_rps)


def _held(misses_at: Callable[[float], bool], missed_rps: float) -> float:
    """The largest load on ``(0, missed_rps)`` seen not to miss, bisected in :data:`HELD_STEPS` steps (0: none)."""
    return queueing.bisect_largest(lambda x: not misses_at(x), missed_rps, HELD_STEPS)


def _group_misses(
    g: ReplicaGroup,
    sw: ServingWorkload,
    load: float,
    targets: sim.Targets,
    resolved: ResolvedRequirement,
    catalog: Catalog,
) -> list[SimulatedMiss]:
    """One replica group simulated under Poisson arrivals at ``load``; the p95 targets it misses, each with the
    load the replica holds every target at (:func:`held_rate_rps`)."""
    from clusterplan.plan import SimulatedMiss

    req = resolved.requirement
    i = [x.name for x in req.workloads].index(sw.name)
    a = evaluate.serving_assumptions(req.assumptions, sw)
    est = evaluate.serving_estimate(
        resolved.model_for(i), catalog.gpus[g.gpu], sw, evaluate.replica_layout(g), batch=g.batch,
        assumptions=req.assumptions,
    )  # fmt: skip
    run = poisson_run(est, sw, a, g.batch, load)
    missed = _missed(run, targets)
    if not missed:
        return []
    held = held_rate_rps(lambda x: poisson_run(est, sw, a, g.batch, x), load, targets)
    label = _label(g)
    # an aggregated group's planned p95s are all set (a prefill pool's TPOT is None: pools are checked apart)
    planned = {"p95_latency": g.p95_latency_s, "p95_ttft": g.p95_ttft_s, "p95_tpot": g.p95_tpot_s}
    return [
        SimulatedMiss(
            workload=sw.name, figure=figure, group=label, load_rps=load, requests=run.requests, simulated_s=simulated,
            planned_s=planned[figure] or 0.0, target_s=target, held_rps=held,
        )
        for figure, simulated, target in missed
    ]  # fmt: skip


def with_simulation(designs: list[Design], resolved: ResolvedRequirement, catalog: Catalog) -> list[Design]:
    """Each design with the targets its replicas miss simulated (:func:`design_misses`)."""
    seen: _Seen = {}
    return [d.model_copy(update={"simulation_misses": design_misses(d, resolved, catalog, seen)}) for d in designs]
