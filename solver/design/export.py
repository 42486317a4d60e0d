"""``clusterplan export``: one design of a plan as the engines run it, and what their benchmark will measure.

For each replica group of each serving workload of the chosen design: the engine settings a launch needs, read from
the group's own layout (TP/PP, expert parallelism and attention data-parallelism, weight and KV precision, memory
fraction, batch cap, chunked prefill, context, speculative decoding, prefix caching) and the checkpoint served (a
chat service serves the catalog's instruct/chat checkpoint, ``models.yaml`` ``chat_checkpoint``). Per workload:
what the benchmark client the export writes (``vllm bench serve`` and its SGLang and TensorRT-LLM counterparts)
will report, in that tool's own definitions (:class:`BenchExpected`). Every figure comes from
:mod:`clusterplan.evaluation.evaluate` (one path per design): the engine is resolved by
``evaluate.serving_assumptions``, the batch by ``evaluate.group_batch`` (the checker's); every replica's latencies by
the scheduler simulation the planner checks its designs with (``evaluation/simulated.py``: an aggregated replica's
``poisson_run``, a pool replica's ``pool_run`` in its role), each at the replica's share of the requirement's average
request rate. A disaggregated design's benchmark figures pair each request's TTFT on the prefill replica (queue,
prefill and the KV transfer) with its time on the decode replica, as the planner's check pairs them
(:class:`ThroughPools`). Rendering (command lines, files) is :mod:`clusterplan.render.export_view`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from clusterplan.catalog.engine_args import engine_arguments
from clusterplan.errors import ClusterplanError
from clusterplan.evaluation import evaluate, pools, simulated
from clusterplan.physics import disagg, queueing
from clusterplan.physics import schedule_sim as sim
from clusterplan.physics.factors import SpeculativeDecoding
from clusterplan.plan import ReplicaGroup, ServingPlan

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
    from clusterplan.physics.factors import Assumptions
    from clusterplan.physics.types import ServingEstimate
    from clusterplan.plan import Plan
    from clusterplan.requirement.load import ResolvedRequirement
    from clusterplan.requirement.schema import ServingWorkload

BENCH_MIN_PROMPTS = 200  # never fewer prompts than this
BENCH_MIN_ARRIVALS_S = 60.0  # the arrivals span at least a minute
# The arrivals span at least this many mean request lifetimes (end-to-end latency): requests arriving in the first
# lifetime meet a filling replica and the last lifetime drains, so about 1/10 of the run is not steady state.
BENCH_LIFETIMES = 10.0
_HF_CONFIG = re.compile(r"https://huggingface\.co/([^/]+/[^/]+)/")


class Expected(BaseModel):
    """One replica's figures at its share of the requirement's average rate, its latencies simulated
    (evaluation/simulated.py, Poisson arrivals, 1,000 requests, seed 0; a pool's replica in its role): a prefill
    replica's TTFT and end-to-end are its queue, prefill and KV transfer; a decode replica's are from the KV's
    arrival, its TTFT 0 (the first token came from the prefill pool). The utilisation and the saturated rate are the
    analytical model's ratio and rate. None: not given for this role (a prefill replica's output tokens and TPOT)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_rate_rps: float = Field(description="requests/s one replica receives (its share of the average rate)")
    output_tokens_per_s: float | None = Field(description="output tokens/s one replica delivers at that rate")
    utilisation: float = Field(description="arrivals over the replica's saturated rate")
    mean_ttft_s: float | None = Field(description="None: not modelled (a prefill pool's mean wait)")
    p95_ttft_s: float
    mean_tpot_s: float | None
    p95_tpot_s: float | None
    mean_e2e_s: float | None
    p95_e2e_s: float
    saturated_output_tokens_per_s: float | None = Field(description="one replica kept full at its batch cap")


class BenchExpected(BaseModel):
    """What the workload's benchmark command reports if the plan is right, in the tool's own definitions
    (``vllm bench serve``, vllm/benchmarks/serve.py ``calculate_metrics``; SGLang's ``bench_serving`` and
    TensorRT-LLM's ``benchmark_serving`` compute the same): TTFT from sending a request to its first token; TPOT
    per request ``(latency - TTFT) / (output tokens - 1)`` (the first token excluded), its mean over requests; ITL
    each gap between streamed chunks; E2EL from sending to the last token; request throughput completed requests
    over the run (first send to last completion); output throughput output tokens over the same. Arrivals are
    open-loop Poisson at ``--request-rate`` (burstiness 1), the queueing model's arrival process. Through a
    disaggregated design's pools (:class:`ThroughPools`), a request's TTFT is its prefill replica's (queue, prefill
    and the KV transfer) and its end-to-end that plus its time on the decode replica; TPOT and ITL are the decode
    replica's. None: a figure the model does not give (the ITL under speculative decoding)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_rate_rps: float = Field(description="--request-rate: the requirement's average, all replicas")
    num_prompts: int
    arrivals_s: float = Field(description="num_prompts / request_rate: how long requests keep arriving, s")
    request_throughput_rps: float = Field(description="completed / (arrivals + the last request's lifetime)")
    output_throughput_tokens_per_s: float
    mean_ttft_s: float | None
    p95_ttft_s: float
    mean_tpot_s: float | None
    p95_tpot_s: float | None
    mean_itl_s: float | None
    mean_e2el_s: float | None
    p95_e2el_s: float
    max_utilisation: float = Field(description="the busiest replica's arrivals over its saturated rate")


class Launch(BaseModel):
    """One replica group: the engine settings of one replica and how many to start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str
    workload_index: int = Field(0, description="the workload's place among the design's serving workloads, from 0")
    role: Literal["aggregated", "prefill", "decode"] = Field(
        "aggregated", description="aggregated replicas, or one pool of a disaggregated design (launched as such)"
    )
    engine: str = Field(description="engine id (catalog/engines.yaml)")
    engine_version: str = Field(description="the release whose argument parsers the flags are checked against")
    model: str = Field(description="Hugging Face repository served")
    planned_model: str = Field(description="the checkpoint the catalog's architecture was read from")
    gpu: str
    gpu_name: str
    gpus_per_node: int = Field(description="GPUs in one server of this GPU type (catalog max_gpus_per_node)")
    servers_per_replica: int = Field(
        1, description="servers one replica's stage spans (Layout.servers): more than 1 only under wide EP"
    )
    replicas: int
    tp: int
    pp: int
    ep: int = Field(description="expert-parallel degree of each stage (1: experts tensor-parallel)")
    attention_dp: bool = Field(description="attention data-parallel over each stage's GPUs (one rank per GPU)")
    quant: str
    kv_cache: str
    memory_fraction: float = Field(description="the engine's memory fraction (its own meaning: memory_policy)")
    memory_policy: str
    max_batch: int = Field(description="cap on concurrent sequences per replica (all attention-DP ranks)")
    prefill_chunk_tokens: int
    max_model_len: int = Field(description="context reserved per sequence, tokens")
    speculative: SpeculativeDecoding | None = None
    speculative_flag: str | None = Field(
        None,
        description="the engine's own name for the speculative method (vLLM method, SGLang algorithm, TensorRT-LLM "
        "decoding type); for mtp, per model family from engines.yaml mtp_methods",
    )
    prefix_cache_hit_rate: float = 0.0
    shared_prefix_tokens: int = Field(
        0, description="prompt tokens every benchmark request shares, so the prefix cache hits at the planned rate"
    )
    input_tokens: int
    output_tokens: int
    average_rate_rps: float = Field(description="the requirement's average request rate, all replicas")
    peak_rate_rps: float
    num_prompts: int
    expected: Expected
    bench: BenchExpected = Field(description="what the workload's benchmark reports (the same for its groups)")
    targets: dict[str, float] = Field(description="p95 targets in seconds: latency, ttft, tpot (those given)")

    @property
    def dp_ranks(self) -> int:
        """Attention data-parallel ranks per replica: one per GPU of a stage under attention DP, else 1."""
        return self.tp if self.attention_dp else 1

    @property
    def rank_batch(self) -> int:
        """Sequences each attention-DP rank schedules (the replica's cap over its ranks)."""
        return max(1, self.max_batch // self.dp_ranks)


def model_repo(source: str, fallback: str) -> str:
    """The Hugging Face repository a catalog model's config came from, else ``fallback``."""
    found = _HF_CONFIG.match(source)
    return found.group(1) if found else fallback


def export_design(
    resolved: ResolvedRequirement, catalog: Catalog, plan: Plan, *, design: int = 1, engine: str | None = None
) -> list[Launch]:
    """The launches of design ``design`` (1-based) of ``plan``; ``engine`` re-evaluates under another engine."""
    if not plan.designs:
        raise ClusterplanError(
            "the requirement has no feasible design to export",
            fix="run `clusterplan solve FILE` to see what conflicts and how to relax it",
        )
    if not 1 <= design <= len(plan.designs):
        raise ClusterplanError(
            f"design {design} does not exist: the plan has {len(plan.designs)}",
            fix=f"pass --design between 1 and {len(plan.designs)}",
        )
    req = resolved.requirement
    chosen = plan.designs[design - 1]
    by_name = {w.name: (i, w) for i, w in enumerate(req.workloads)}
    out: list[Launch] = []
    for wp in chosen.workloads:
        if not isinstance(wp, ServingPlan):
            continue
        i, w = by_name[wp.workload]
        assert w.kind == "serving"
        if engine is not None:
            settings = w.engine.model_copy(update={"name": engine}) if w.engine is not None else None
            from clusterplan.requirement.schema import EngineSettings

            w = w.model_copy(update={"engine": settings or EngineSettings(name=engine)})
        served = len({x.workload for x in out})
        out += [x.model_copy(update={"workload_index": served}) for x in _launches(resolved, catalog, i, w, wp)]
    return out


def _checkpoints(catalog: Catalog, arch: ModelArchitecture) -> tuple[str, str]:
    """(served, planned): the chat checkpoint the catalog names for ``arch``, else the planned one, and the
    repository the architecture was read from."""
    row = catalog.models.get(arch.name) or next((m for m in catalog.models.values() if m.name == arch.name), None)
    planned = model_repo(row.source, row.id) if row is not None else arch.name
    served = (row.chat_checkpoint if row is not None else None) or arch.chat_checkpoint or planned
    return served, planned


def _engine_version(engine: str, workload: str) -> str:
    """The engine release whose arguments export writes (catalog/engine_args.yaml); refuses an engine without."""
    known = engine_arguments()
    if engine not in known:
        raise ClusterplanError(
            f"{workload}: export writes vLLM, SGLang and TensorRT-LLM commands, not {engine}'s",
            fix="pass --engine " + ", --engine ".join(sorted(known)),
        )
    return known[engine].version


_SPEC_FLAGS = {  # the non-MTP methods' names per engine (vLLM SpeculativeConfig.method, SGLang
    # --speculative-algorithm, TensorRT-LLM speculative_config.decoding_type), read from each engine's parser
    "vllm": {"draft": "draft_model", "eagle": "eagle"},
    "sglang": {"draft": "STANDALONE", "eagle": "EAGLE"},
    "tensorrt-llm": {"draft": "Draft_Target", "eagle": "Eagle"},
}


def _speculative_flag(catalog: Catalog, a: Assumptions, arch: ModelArchitecture, workload: str) -> str | None:
    """The engine's name for the workload's speculative method; for mtp, the model family's drafter as the engine
    names it (engines.yaml ``mtp_methods`` by Hugging Face model_type); refuses a family the engine has none for."""
    spec = a.speculative
    if spec is None:
        return None
    if spec.method != "mtp":
        return _SPEC_FLAGS.get(a.engine, {}).get(spec.method)
    methods = catalog.engines[a.engine].mtp_methods if a.engine in catalog.engines else {}
    family = arch.hf_model_type or ""
    if family not in methods:
        raise ClusterplanError(
            f"{workload}: {a.engine} loads no multi-token-prediction drafter for {arch.name} "
            f"(model_type {family or 'unknown'}); it does for {', '.join(sorted(methods)) or 'no model'}",
            fix="set speculative.method to eagle or draft, drop speculative decoding, or pick another engine",
        )
    return methods[family]


def _launches(
    resolved: ResolvedRequirement, catalog: Catalog, index: int, w: ServingWorkload, wp: ServingPlan
) -> list[Launch]:
    arch = resolved.model_for(index)
    req = resolved.requirement
    a = evaluate.serving_assumptions(req.assumptions, w)
    version = _engine_version(a.engine, w.name)
    served, planned = _checkpoints(catalog, arch)
    # Each side (aggregated, or a pool) takes the whole demand: its groups share it by their rated rates.
    weights: dict[str, float] = {}
    for g in wp.groups:
        weights[g.role] = weights.get(g.role, 0.0) + g.replicas * _rated(g)
    targets = {
        k: v for k, v in (("latency", w.p95_latency), ("ttft", w.p95_ttft), ("tpot", w.p95_tpot)) if v is not None
    }
    groups: list[tuple[ReplicaGroup, int, Expected]] = []
    runs: list[tuple[ReplicaGroup, sim.SimResult]] = []  # each pool group's replica simulated in its role
    for g in wp.groups:
        spec = catalog.gpus[g.gpu]
        batch = evaluate.serving_batch(evaluate.group_batch(arch, spec, w, g, req.assumptions))
        layout = evaluate.replica_layout(g)  # the design's own layout: EP and attention DP as planned
        est = evaluate.serving_estimate(arch, spec, w, layout, batch=batch, assumptions=req.assumptions)
        share = w.requests_per_s * _rated(g) / (weights[g.role] or 1.0)
        expected = _expected(est, arch, spec, w, req.assumptions, g.role, share, batch)
        if g.role != "aggregated":  # the group as launched: the batch cap of the engine exported
            run = simulated.pool_run(g.model_copy(update={"batch": batch}), w, share, resolved, catalog)
            runs.append((g, run))
            expected = _pool_simulated(expected, run, g.role)
        groups.append((g, batch, expected))
    bench = bench_expected(
        w, [(g.role, g.replicas, e) for g, _, e in groups], speculative=a.speculative is not None,
        pools=through_pools(runs),
    )  # fmt: skip
    spec_flag = _speculative_flag(catalog, a, arch, w.name)
    launches: list[Launch] = []
    for g, batch, expected in groups:
        policy, fraction, _ = a.memory_policy(g.tp)
        spec = catalog.gpus[g.gpu]
        # a replica over several servers (wide EP) is launched on each of them: render/export_view.py, per engine
        servers = evaluate.replica_layout(g).servers(min(spec.scale_up_domain, spec.max_gpus_per_node))
        launches.append(
            Launch(
                workload=w.name, engine=a.engine, engine_version=version, model=served, planned_model=planned,
                gpu=g.gpu, gpu_name=g.gpu_name, gpus_per_node=catalog.gpus[g.gpu].max_gpus_per_node,
                servers_per_replica=servers,
                replicas=g.replicas, tp=g.tp, pp=g.pp, ep=g.ep,
                attention_dp=g.attention_dp, quant=g.quant, kv_cache=g.kv_cache, memory_fraction=fraction,
                memory_policy=policy, max_batch=batch, prefill_chunk_tokens=a.chunk_tokens,
                max_model_len=math.ceil(w.context_tokens), speculative=a.speculative,
                speculative_flag=spec_flag,
                prefix_cache_hit_rate=a.prefix_cache_hit_rate, input_tokens=round(w.input_tokens),
                shared_prefix_tokens=round(a.prefix_cache_hit_rate * w.input_tokens),
                output_tokens=round(w.output_tokens), average_rate_rps=w.requests_per_s,
                peak_rate_rps=w.requests_per_s * w.peak_to_average, num_prompts=bench.num_prompts,
                expected=expected, bench=bench, targets=targets, role=g.role,
            )
        )  # fmt: skip
    return launches


def _rated(g: ReplicaGroup) -> float:
    """The rate a group's replica is planned at: within its targets, or its ceiling where it has none (0)."""
    return g.rate_rps if g.rate_rps > 0 else g.rate_no_targets_rps


def _expected(
    est: ServingEstimate,
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: ServingWorkload,
    base: Assumptions,
    role: str,
    share: float,
    batch: int,
) -> Expected:
    """What one replica of ``role`` should show at ``share`` requests/s: an aggregated replica's scheduler simulated
    (:func:`_simulated`, the planner's check at the average rate instead of the peak); a pool replica's utilisation
    and saturated rate from the pool model of a prefill replica (TTFT incl. the KV transfer) or a decode-only one
    (evaluation/pools.py), its latencies then replaced by its simulation (:func:`_pool_simulated`)."""
    if role == "prefill":
        p = pools.prefill_at(est, arch, spec, w, base, share)
        return Expected(
            request_rate_rps=share, output_tokens_per_s=None, utilisation=p.utilisation, mean_ttft_s=None,
            p95_ttft_s=p.p95_ttft_s, mean_tpot_s=None, p95_tpot_s=None, mean_e2e_s=None, p95_e2e_s=p.p95_ttft_s,
            saturated_output_tokens_per_s=None,
        )  # fmt: skip
    if role == "decode":
        dec = disagg.decode_only(est, output_tokens=w.output_tokens)
        lat = pools.decode_at_load(dec, w, base)(share)
        saturated = dec.output_tokens_per_s
    else:
        a = evaluate.serving_assumptions(base, w)  # the workload's engine, as _launches resolves it
        lat = queueing.latency_at_load(
            est, share, input_tokens=w.input_tokens, output_tokens=w.output_tokens, assumptions=a
        )
        if share > 0:
            return _simulated(est, w, a, batch, share, lat.utilisation)
        saturated = est.output_tokens_per_s
    return Expected(
        request_rate_rps=share, output_tokens_per_s=share * w.output_tokens, utilisation=lat.utilisation,
        mean_ttft_s=lat.mean_ttft_s, p95_ttft_s=lat.p95_ttft_s, mean_tpot_s=lat.mean_tpot_s,
        p95_tpot_s=lat.p95_tpot_s, mean_e2e_s=lat.mean_e2e_s, p95_e2e_s=lat.p95_e2e_s,
        saturated_output_tokens_per_s=saturated,
    )  # fmt: skip


def _simulated(
    est: ServingEstimate, w: ServingWorkload, a: Assumptions, batch: int, share: float, utilisation: float
) -> Expected:
    """One aggregated replica at ``share`` requests/s as the planner's simulation runs it
    (:func:`clusterplan.evaluation.simulated.poisson_run`: Poisson arrivals, the workload's lengths, seed 0), its
    figures in ``vllm bench serve``'s definitions (TPOT without the first token). ``utilisation``: arrivals over the
    saturated rate (the queueing model's ratio, not a simulated figure)."""

    def finite(x: float) -> float | None:
        return x if math.isfinite(x) else None

    run = simulated.poisson_run(est, w, a, batch, share)
    return Expected(
        request_rate_rps=share, output_tokens_per_s=share * w.output_tokens, utilisation=utilisation,
        mean_ttft_s=run.ttft.mean_s, p95_ttft_s=run.ttft.p95_s, mean_tpot_s=finite(run.tpot.mean_s),
        p95_tpot_s=finite(run.tpot.p95_s), mean_e2e_s=run.e2e.mean_s, p95_e2e_s=run.e2e.p95_s,
        saturated_output_tokens_per_s=est.output_tokens_per_s,
    )  # fmt: skip


def _pool_simulated(analytical: Expected, run: sim.SimResult, role: str) -> Expected:
    """A pool replica's figures with its latencies simulated (:func:`clusterplan.evaluation.simulated.pool_run`,
    ``vllm bench serve``'s definitions): a prefill replica's TTFT (queue, prefill and the KV transfer, which is also
    its end-to-end: it emits no further token); a decode replica's TTFT (0: the first token came from the prefill
    pool), TPOT and end-to-end from the KV's arrival. Its rate, utilisation and saturated rate stay ``analytical``'s."""

    def finite(x: float) -> float | None:
        return x if math.isfinite(x) else None

    decode = role == "decode"
    return analytical.model_copy(
        update={
            "mean_ttft_s": run.ttft.mean_s, "p95_ttft_s": run.ttft.p95_s,
            "mean_tpot_s": finite(run.tpot.mean_s) if decode else None,
            "p95_tpot_s": finite(run.tpot.p95_s) if decode else None,
            "mean_e2e_s": run.e2e.mean_s, "p95_e2e_s": run.e2e.p95_s,
        }
    )  # fmt: skip


class ThroughPools(BaseModel):
    """A disaggregated workload's requests as its benchmark sees them through the router: request ``i``'s TTFT on
    the prefill replica (queue, prefill and the KV transfer) plus its TTFT and its time on the decode replica, the
    same seeded requests paired as the planner's check pairs them (``evaluation/simulated.py``: the slowest prefill
    group's replica, by p95 TTFT, with each decode group's). Means over requests (decode groups weighted by the
    requests they receive); p95s the largest decode group's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean_ttft_s: float
    p95_ttft_s: float
    mean_e2e_s: float
    p95_e2e_s: float


def through_pools(runs: list[tuple[ReplicaGroup, sim.SimResult]]) -> ThroughPools | None:
    """The benchmark's TTFT and end-to-end through a disaggregated workload's pools (:class:`ThroughPools`) from
    each pool group's simulated replica; None without both a prefill and a decode group."""
    prefill = [r for g, r in runs if g.role == "prefill"]
    decode = [(g.replicas * max(g.rate_rps, g.rate_no_targets_rps), r) for g, r in runs if g.role == "decode"]
    if not prefill or not decode:
        return None
    first = prefill[0]
    for r in prefill[1:]:  # the slowest prefill replica, as the planner's check takes it
        if r.ttft.p95_s > first.ttft.p95_s:
            first = r
    ttft, e2e = [], []
    for weight, r in decode:
        ttft.append((weight, sim.distribution([p + d for p, d in zip(first.ttft_s, r.ttft_s, strict=True)])))
        e2e.append((weight, sim.distribution([p + d for p, d in zip(first.ttft_s, r.e2e_s, strict=True)])))
    total = sum(weight for weight, _ in decode) or 1.0
    return ThroughPools(
        mean_ttft_s=sum(weight * d.mean_s for weight, d in ttft) / total, p95_ttft_s=max(d.p95_s for _, d in ttft),
        mean_e2e_s=sum(weight * d.mean_s for weight, d in e2e) / total, p95_e2e_s=max(d.p95_s for _, d in e2e),
    )  # fmt: skip


def bench_expected(
    w: ServingWorkload,
    groups: list[tuple[str, int, Expected]],
    *,
    speculative: bool,
    pools: ThroughPools | None = None,
) -> BenchExpected:
    """The workload's benchmark at its average rate, from its groups' (role, replicas, per-replica figures).

    Aggregated: a request is served by one replica, so the run's mean is the replicas' means weighted by the
    requests each receives, and its p95 at most the largest replica p95. Disaggregated: a request's first token
    leaves the decode pool after its prefill and KV transfer, so its TTFT and end-to-end are the pools' paired
    (``pools``, :func:`through_pools`: simulated); TPOT and ITL are the decode pool's. Request throughput:
    ``N / (N/λ + T)``, the run ending one request lifetime ``T`` (the mean end-to-end latency, else its p95) after
    the last arrival (vllm/benchmarks/serve.py: completed / duration).
    """
    lam = w.requests_per_s
    by_role: dict[str, list[tuple[int, Expected]]] = {}
    for role, n, e in groups:
        by_role.setdefault(role, []).append((n, e))
    agg = by_role.get("aggregated", [])
    if agg:
        served = agg
        first_p95 = max(e.p95_ttft_s for _, e in agg)
        e2e_p95 = max(e.p95_e2e_s for _, e in agg)
        means = [_weighted(agg, lambda e: e.mean_ttft_s), _weighted(agg, lambda e: e.mean_e2e_s)]
    else:
        assert pools is not None, "a disaggregated workload has a prefill and a decode pool"
        served = by_role.get("decode", [])
        first_p95, e2e_p95 = pools.p95_ttft_s, pools.p95_e2e_s
        means = [pools.mean_ttft_s, pools.mean_e2e_s]
    tpot_mean = _weighted(served, lambda e: e.mean_tpot_s)
    lifetime = means[1] if means[1] is not None else e2e_p95
    finite = math.isfinite(lifetime)
    window = max(BENCH_MIN_ARRIVALS_S, BENCH_LIFETIMES * lifetime) if finite else BENCH_MIN_ARRIVALS_S
    prompts = max(BENCH_MIN_PROMPTS, math.ceil(lam * window))
    arrivals = prompts / lam if lam > 0 else 0.0
    throughput = prompts / (arrivals + lifetime) if finite and arrivals + lifetime > 0 else 0.0
    return BenchExpected(
        request_rate_rps=lam, num_prompts=prompts, arrivals_s=arrivals, request_throughput_rps=throughput,
        output_throughput_tokens_per_s=throughput * w.output_tokens, mean_ttft_s=means[0], p95_ttft_s=first_p95,
        mean_tpot_s=tpot_mean, p95_tpot_s=max((e.p95_tpot_s or 0.0 for _, e in served), default=None),
        mean_itl_s=None if speculative else tpot_mean, mean_e2el_s=means[1], p95_e2el_s=e2e_p95,
        max_utilisation=max((e.utilisation for _, _, e in groups), default=0.0),
    )  # fmt: skip


def _weighted(groups: list[tuple[int, Expected]], figure: Callable[[Expected], float | None]) -> float | None:
    """The request-weighted mean of one per-replica figure over ``groups`` (None if any replica lacks it)."""
    values = [(n * e.request_rate_rps, figure(e)) for n, e in groups]
    total = sum(r for r, _ in values)
    if not values or total <= 0 or any(v is None for _, v in values):
        return None
    return sum(r * v for r, v in values if v is not None) / total
