"""``clusterplan estimate --arrival``: the pinned serving configuration's replica run through the scheduler
simulation (:mod:`clusterplan.physics.schedule_sim`) under a benchmark's traffic.

The replica is the one ``estimate`` evaluated (:func:`clusterplan.evaluation.evaluate.serving_estimate`, the one
path): its step model, its prompt's unloaded and riding prefill time, its KV pool (the largest batch memory holds
at the workload's context), the engine's chunked-prefill budget and KV block, the configuration's batch as
``max_num_seqs``, the workload's prefix-cache hit rate and speculative decoding. Nothing is priced here.

``--arrival`` takes ``closed:C`` (C clients with a synchronized start), ``poisson:R/s``, ``gamma:R/s:cv=X``
(bursty; vLLM's ``--burstiness`` is ``1/X²``) or ``trace:FILE`` (CSV or JSON Lines,
:mod:`clusterplan.inputs.trace`), followed by any of ``:n=N`` (requests, default 1000 as ``--num-prompts``),
``:range=R`` (lengths uniform within ``±R`` of the workload's, vLLM's ``--random-range-ratio``; default 0) and
``:seed=S`` (default 0).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from clusterplan.catalog.load import Catalog
from clusterplan.design.estimate import EstimateResult, estimate_requirement, merge_config
from clusterplan.design.estimate_serving import workload_assumptions
from clusterplan.errors import ClusterplanError, FieldProblem, InputError, Location
from clusterplan.evaluation.simulated import sim_replica
from clusterplan.inputs.trace import read_trace
from clusterplan.physics import schedule_sim as sim
from clusterplan.requirement.schema import PinnedConfig, ServingWorkload

DEFAULT_REQUESTS = 1000  # vllm bench serve --num-prompts
MAX_REQUESTS = 200_000
_FIX = (
    "use --arrival closed:64, poisson:20/s, gamma:20/s:cv=2 or trace:FILE, optionally followed by :n=N:range=R:seed=S"
)
_RATE = re.compile(r"^(?P<rate>[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)(?:/s)?$", re.IGNORECASE)


class Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LatencyStats(Result):
    """Mean and percentiles of one latency over the simulated requests, seconds."""

    mean_s: float
    p50_s: float
    p90_s: float
    p95_s: float
    p99_s: float


class SimTarget(Result):
    """A workload target against the simulated p95."""

    name: str
    target_s: float
    p95_s: float
    met: bool


class SimulatedLoad(Result):
    """One replica's simulated benchmark run, in ``vllm bench serve``'s definitions."""

    arrival: str = Field(description="the --arrival given")
    definitions: str = Field(description="the benchmark tool whose definitions the statistics follow")
    tpot_includes_first_token: bool = Field(description="false: TPOT = (e2e - TTFT) / (output tokens - 1)")
    requests: int
    seed: int
    max_num_seqs: int
    chunk_tokens: int = Field(description="the step's token budget (max_num_batched_tokens)")
    kv_pool_tokens: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    goodput_requests_per_s: float = Field(description="requests meeting every workload target, per second")
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2e: LatencyStats
    preemptions: int
    mean_running: float = Field(description="time-averaged sequences decoding")
    targets: list[SimTarget]


@dataclass(frozen=True, slots=True)
class ArrivalPlan:
    """``--arrival`` read: the arrival process, the requests' count and lengths' spread, the seed, a trace."""

    arrival: sim.Arrival
    requests: int
    range_ratio: float
    seed: int
    trace: Path | None


def _bad(text: str, why: str) -> InputError:
    return InputError([FieldProblem(Location("command line"), "--arrival", f"{why}, got {text!r}")], fix=_FIX)


def parse_arrival(text: str) -> ArrivalPlan:
    """``--arrival`` as an :class:`ArrivalPlan`; a located error naming the flag when it does not parse."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.casefold()
    if kind == "trace":
        if not rest:
            raise _bad(text, "trace: needs a file")
        return ArrivalPlan(sim.Arrival("trace"), 0, 0.0, 0, Path(rest))
    if kind not in ("closed", "poisson", "gamma"):
        raise _bad(text, "the arrival must start with closed, poisson, gamma or trace")
    head, *extras = rest.split(":")
    keys = _keys(text, extras)
    requests, ratio, seed, cv = (
        int(keys.get("n", DEFAULT_REQUESTS)),
        keys.get("range", 0.0),
        int(keys.get("seed", 0)),
        keys.get("cv", 1.0),
    )
    if not 1 <= requests <= MAX_REQUESTS or not 0 <= ratio < 1 or cv <= 0:
        raise _bad(text, f"n must be 1-{MAX_REQUESTS:,}, range within [0, 1), cv above 0")
    if kind == "closed":
        if not head.isdigit() or int(head) < 1:
            raise _bad(text, "closed: needs the number of clients, e.g. closed:64")
        return ArrivalPlan(sim.Arrival("closed", concurrency=int(head)), requests, ratio, seed, None)
    match = _RATE.match(head)
    if match is None or float(match["rate"]) <= 0:
        raise _bad(text, f"{kind}: needs a rate in requests per second, e.g. {kind}:20/s")
    process: sim.ArrivalKind = "poisson" if kind == "poisson" else "gamma"
    return ArrivalPlan(sim.Arrival(process, rate_per_s=float(match["rate"]), cv=cv), requests, ratio, seed, None)


def _keys(text: str, extras: list[str]) -> dict[str, float]:
    """The ``key=value`` suffixes of ``--arrival`` (n, range, seed, cv)."""
    keys: dict[str, float] = {}
    for item in extras:
        key, eq, value = item.partition("=")
        if not eq or key not in ("n", "range", "seed", "cv"):
            raise _bad(text, f"unknown part {item!r} (known: n=, range=, seed=, cv=)")
        try:
            keys[key] = float(value)
        except ValueError:
            raise _bad(text, f"{key}= needs a number") from None
    return keys


def _requests(plan: ArrivalPlan, w: ServingWorkload) -> list[sim.SimRequest]:
    """The requests to replay: the trace's, or drawn at the workload's lengths."""
    if plan.trace is not None:
        return [sim.SimRequest(r.arrival_s, r.input_tokens, r.output_tokens) for r in read_trace(plan.trace)]
    lengths = sim.Lengths(round(w.input_tokens), round(w.output_tokens), plan.range_ratio)
    return sim.draw_requests(plan.arrival, lengths, plan.requests, plan.seed)


def simulate_file(
    path: Path, catalog: Catalog, overrides: PinnedConfig | None, arrival: str
) -> tuple[EstimateResult, SimulatedLoad | None]:
    """``estimate`` of the file's pinned configuration and its replica simulated under ``arrival`` (None when the
    configuration cannot run: the estimate says why)."""
    from clusterplan.stdin import load_requirement_arg

    plan = parse_arrival(arrival)  # a bad --arrival is refused before any work
    resolved = load_requirement_arg(path, catalog)
    req = resolved.requirement
    result = estimate_requirement(req, list(resolved.models), catalog, overrides)
    w = req.workloads[result.config.workload_index]
    if not isinstance(w, ServingWorkload) or result.serving is None:
        raise ClusterplanError(
            f"--arrival simulates a serving workload; '{w.name}' is {result.config.kind}",
            fix="drop --arrival, or pick a serving workload with --workload",
        )
    if not result.feasible or result.serving.max_batch_by_memory < 1:
        return result, None
    w, a = workload_assumptions(req, w, merge_config(req.config, overrides).engine)
    assert result.serving is not None
    replica = sim_replica(result.serving, w, a, result.config.batch or 1)
    requests = _requests(plan, w)
    targets = sim.Targets(ttft_s=w.p95_ttft, tpot_s=w.p95_tpot, e2e_s=w.p95_latency)
    run = sim.simulate(replica, requests, plan.arrival, targets)
    return result, _simulated(arrival, plan, replica, run, targets)


def _simulated(
    arrival: str, plan: ArrivalPlan, replica: sim.SimReplica, run: sim.SimResult, targets: sim.Targets
) -> SimulatedLoad:
    """The run as the command's output record."""
    checks = [
        SimTarget(name=name, target_s=limit, p95_s=value, met=value <= limit)
        for name, limit, value in (
            ("p95 latency", targets.e2e_s, run.e2e.p95_s),
            ("p95 time to first token", targets.ttft_s, run.ttft.p95_s),
            ("p95 time per output token", targets.tpot_s, run.tpot.p95_s),
        )
        if limit is not None
    ]
    return SimulatedLoad(
        arrival=arrival, definitions="vllm bench serve", tpot_includes_first_token=False, requests=run.requests,
        seed=plan.seed, max_num_seqs=replica.max_seqs, chunk_tokens=replica.chunk_tokens,
        kv_pool_tokens=replica.kv_pool_tokens, duration_s=run.duration_s, requests_per_s=run.requests_per_s,
        output_tokens_per_s=run.output_tokens_per_s, goodput_requests_per_s=run.goodput_requests_per_s,
        ttft=LatencyStats(**asdict(run.ttft)), tpot=LatencyStats(**asdict(run.tpot)),
        itl=LatencyStats(**asdict(run.itl)), e2e=LatencyStats(**asdict(run.e2e)), preemptions=run.preemptions,
        mean_running=run.mean_running, targets=checks,
    )  # fmt: skip
