"""One serving replica's scheduler simulated step by step, driven by the tabulated step time.

The analytical model (:mod:`clusterplan.physics.queueing`) prices a replica at a mean operating point; a benchmark
measures the distribution that the engine's scheduler produces. This module runs that scheduler, one engine step
at a time, as vLLM V1 (``v1/core/sched/scheduler.py``), SGLang and TensorRT-LLM's in-flight batching do:

* **continuous batching with chunked prefill**: each step first gives every running (decoding) sequence its token,
  then fills the rest of the token budget (``max_num_batched_tokens``, the engine's ``prefill_chunk_tokens``) with
  prompt chunks, first-come first-served: a prompt partly prefilled continues before a new one starts;
* **the batch cap**: at most ``max_num_seqs`` sequences run (decoding or prefilling);
* **KV blocks**: a request is admitted only when the KV pool has the blocks of its prompt (whole blocks of
  ``kv_block_tokens``); decoding grows each sequence one token a step; when the pool runs out the most recently
  admitted sequence is preempted (vLLM's recompute preemption): its blocks are freed and it goes back to the front
  of the queue, to prefill its prompt and the tokens it had generated again;
* **prefix-cache hits**: a request computes only ``1 - hit rate`` of its prompt (vLLM automatic prefix caching,
  SGLang RadixAttention); its KV still takes the whole prompt's blocks;
* **speculative decoding**: a verification step keeps ``acceptance_length`` tokens on average (EAGLE's tau), so a
  request needs ``ceil((output - 1) / tau)`` decode steps; the step's time is the verification's.

A step with ``n`` decoding sequences and ``k`` prompt tokens takes
``decode_step_s(model, n) · tau + k · prefill_token_busy_s`` (:func:`clusterplan.physics.step.decode_step_s`: the
step model's time per kept token, times the tokens a step keeps; a prompt's tokens riding a running step cost
the replica their share of the prompt's busy time), and ``k · prefill_token_alone_s`` when nothing decodes (a lone
prompt of ``p`` computed tokens takes the unloaded prefill time). The step model is evaluated at the workload's mean
context, so a step's time depends on how many sequences run, not on how long each one is.

A replica has a **role**, as disaggregated engines run pools (vLLM's ``kv_role`` kv_producer/kv_consumer, SGLang
``--disaggregation-mode prefill|decode``, Dynamo's prefill and decode workers):

* ``aggregated``: the above;
* ``prefill``: prompts only. A step packs queued prompts into the token budget (at most ``max_num_seqs`` of them) and
  takes ``k · prefill_token_alone_s + prefill_pass_s`` (the prompts' compute, plus the weights streamed once per
  pass: :func:`clusterplan.physics.disagg.prefill_service_s`'s terms); a request's first token is sampled there and
  leaves after its KV cache crosses to the decode pool (``kv_transfer_s``, :func:`clusterplan.physics.disagg.
  kv_transfer_s`): its TTFT is queue + prefill + transfer, and it is done;
* ``decode``: requests arrive with their KV computed and their first token emitted. A request is admitted when the
  KV pool has the blocks of its prompt and first token (no compute: the blocks are allocated on arrival), then
  decodes; preemption recomputes its prompt here as above. Its TTFT in this pool is 0 (the first token came from the
  prefill pool), so its TPOT is its time in this pool over ``output - 1``: the slot wait and the decode steps, as
  ``vllm bench serve`` measures a disaggregated deployment whose prefill pool returns the first token.

Time runs forward event by event: a stretch of decode-only steps with the same sequences is taken in one move, up
to the next completion, arrival or KV exhaustion; a step with prompt tokens is taken alone. Thousands of requests
take a few thousand moves.

Statistics, in the definitions of ``vllm bench serve`` (``vllm/benchmarks/serve.py``; SGLang's ``bench_serving``
and genai-perf/aiperf use the same ones):

* **TTFT**: from a request's arrival (send) to its first output token, queueing and the prefill steps included;
* **TPOT**: ``(e2e - TTFT) / (output_tokens - 1)`` per request, over requests of more than one output token: the
  first token is **excluded**;
* **ITL**: every gap between two consecutive output chunks of a request (one engine step; under speculative
  decoding a chunk holds the tokens one verification step kept), all requests' gaps pooled;
* **E2E latency**: arrival to last token;
* **duration**: first arrival to last completion; request throughput = requests / duration, output throughput =
  output tokens / duration;
* **goodput**: requests meeting every given target (TTFT, TPOT, E2E; vLLM's ``--goodput``) per second of duration.

Arrivals: closed-loop concurrency (``C`` clients starting together, each sending its next request when the last
one ends: ``vllm bench serve --max-concurrency``, SGLang ``bench_serving --max-concurrency``, genai-perf
``--concurrency``), Poisson at a rate, Gamma-distributed gaps (vLLM's ``--burstiness b``: shape ``b``, CV
``1/sqrt(b)``), or a trace's arrival times. Lengths: fixed, or uniform within ``[L·(1 - r), L·(1 + r)]`` (vLLM's
random dataset ``--random-range-ratio r``).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Literal

from clusterplan.physics.step import decode_step_s
from clusterplan.physics.types import DecodeStepModel

ArrivalKind = Literal["closed", "poisson", "gamma", "trace"]
Role = Literal["aggregated", "prefill", "decode"]
PERCENTILES = (50, 90, 95, 99)
_NO_CHUNKS: dict[int, int] = {}  # a step without prompt tokens (read only)


@dataclass(frozen=True, slots=True)
class SimReplica:
    """What the scheduler of one replica runs on: its step model and the engine's scheduling settings."""

    step_model: DecodeStepModel  # per kept token (speculative decoding folded in, physics/step.py)
    prefill_token_busy_s: float  # replica seconds per computed prompt token riding a running step
    prefill_token_alone_s: float  # seconds per computed prompt token when nothing decodes
    chunk_tokens: int  # the step's token budget (max_num_batched_tokens)
    max_seqs: int  # max_num_seqs: sequences running at once
    kv_pool_tokens: int  # the KV pool, in tokens of context
    kv_block_tokens: int  # paging granularity
    prefix_hit_rate: float = 0.0  # share of each prompt found in the prefix cache
    acceptance_length: float = 1.0  # tokens a decode step keeps (speculative decoding's tau; 1 without)
    role: Role = "aggregated"  # a disaggregated pool's replica: prefill or decode only (module docstring)
    prefill_pass_s: float = 0.0  # a prompt-only step's fixed time (weights, per-layer kernels, overhead), seconds
    kv_transfer_s: float = 0.0  # prefill role: a prompt's KV cache to the decode pool, seconds

    def step_s(self, n: int, k: int) -> float:
        """One engine step with ``n`` decoding sequences and ``k`` computed prompt tokens, seconds."""
        if n <= 0:
            return k * self.prefill_token_alone_s + (self.prefill_pass_s if k else 0.0)
        return decode_step_s(self.step_model, n) * self.acceptance_length + k * self.prefill_token_busy_s


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request: when it is sent (ignored in a closed loop) and its prompt and output tokens."""

    arrival_s: float
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Arrival:
    """How requests arrive: ``closed`` (``concurrency`` clients), ``poisson`` / ``gamma`` (``rate_per_s``, gamma's
    gaps with coefficient of variation ``cv``), or ``trace`` (the requests' own arrival times)."""

    kind: ArrivalKind
    concurrency: int = 0
    rate_per_s: float = 0.0
    cv: float = 1.0


@dataclass(frozen=True, slots=True)
class Lengths:
    """Prompt and output lengths: ``input_tokens`` and ``output_tokens`` each uniform within ``±range_ratio``."""

    input_tokens: int
    output_tokens: int
    range_ratio: float = 0.0


@dataclass(frozen=True, slots=True)
class Targets:
    """The latency targets a request must meet to count in goodput (None: not a target), seconds."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean and percentiles of one latency, seconds."""

    mean_s: float
    p50_s: float
    p90_s: float
    p95_s: float
    p99_s: float


@dataclass(frozen=True, slots=True)
class SimResult:
    """A simulated run's statistics (definitions in the module docstring)."""

    requests: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    goodput_requests_per_s: float
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2e: Distribution
    preemptions: int
    mean_running: float  # time-averaged sequences decoding
    ttft_s: tuple[float, ...]  # each request's TTFT, in the order given
    e2e_s: tuple[float, ...] = ()  # each request's end-to-end latency, in the order given


@dataclass(slots=True)
class _Req:
    """A request's state in the scheduler."""

    arrival_s: float
    prompt: int  # prompt tokens (KV it needs to start)
    to_compute: int  # prompt tokens still to prefill in this admission
    output: int
    emitted: int = 0  # output tokens so far
    first_s: float = -1.0
    done_s: float = -1.0
    admitted: int = -1  # admission order (preemption takes the latest)
    start_tick: int = 0
    finish_tick: int = 0
    kv_tokens: int = 0  # KV held at start_tick


@dataclass(slots=True)
class _State:
    """The replica's scheduler state."""

    now: float = 0.0
    tick: int = 0  # decode steps taken
    kv_used: float = 0.0
    admissions: int = 0
    preemptions: int = 0
    waiting: deque[int] = field(default_factory=deque)
    prefilling: list[int] = field(default_factory=list)
    finishes: list[tuple[int, int]] = field(default_factory=list)  # (finish tick, id) heap, lazy
    latest: list[tuple[int, int]] = field(default_factory=list)  # (-admission, id) heap, lazy
    decoding: set[int] = field(default_factory=set)
    itl: list[tuple[float, int]] = field(default_factory=list)  # (gap s, count)
    decode_s: dict[int, float] = field(default_factory=dict)  # the decode part of a step, by sequences running
    busy_seq_s: float = 0.0


def draw_requests(arrival: Arrival, lengths: Lengths, count: int, seed: int) -> list[SimRequest]:
    """``count`` requests with seeded lengths and arrival times (all 0 for a closed loop)."""
    rng = random.Random(seed)
    r = lengths.range_ratio

    def length(mean: int) -> int:
        if r <= 0:
            return max(1, mean)
        return max(1, rng.randint(math.floor(mean * (1 - r)), math.ceil(mean * (1 + r))))

    gaps = arrival.kind in ("poisson", "gamma") and count > 0
    # gaps Gamma(shape = 1/cv², mean 1/rate): vLLM's --burstiness is the shape; Poisson is shape 1
    shape = 1.0 if arrival.kind == "poisson" else 1.0 / (arrival.cv * arrival.cv) if gaps else 0.0
    scale = 1.0 / (arrival.rate_per_s * shape) if gaps else 0.0
    sent_at = arrival.kind != "closed"
    fixed = r <= 0  # fixed lengths draw nothing
    fixed_in, fixed_out = max(1, lengths.input_tokens), max(1, lengths.output_tokens)
    t = 0.0
    out: list[SimRequest] = []
    for _ in range(count):
        if gaps:
            t += rng.gammavariate(shape, scale)
        if fixed:
            out.append(SimRequest(t if sent_at else 0.0, fixed_in, fixed_out))
        else:
            out.append(SimRequest(t if sent_at else 0.0, length(lengths.input_tokens), length(lengths.output_tokens)))
    return out


def simulate(
    replica: SimReplica, requests: Sequence[SimRequest], arrival: Arrival, targets: Targets | None = None
) -> SimResult:
    """Run ``requests`` through one replica's scheduler; statistics as ``vllm bench serve`` reports them.

    Closed loop: the first ``arrival.concurrency`` requests are sent at 0, and each completion sends the next one
    at that moment (the requests' own arrival times are ignored). Otherwise each request is sent at its
    ``arrival_s``.
    """
    reqs = _new_reqs(replica, requests)
    if not reqs:
        raise ValueError("no requests to simulate")
    s = _State()
    total = len(reqs)
    closed = arrival.kind == "closed"
    order = sorted(range(total), key=lambda i: reqs[i].arrival_s) if not closed else list(range(total))
    # an open loop's send times, in sending order (a closed loop's are set as its clients send)
    arrivals = [reqs[i].arrival_s for i in order] if not closed else []
    waiting, prefilling, decoding = s.waiting, s.prefilling, s.decoding
    sent = 0
    if closed:
        sent = min(max(arrival.concurrency, 1), total)
        for i in range(sent):
            _send(reqs[i], 0.0)
            waiting.append(i)
    done = 0
    while done < total:
        if not closed:
            while sent < total and arrivals[sent] <= s.now:
                waiting.append(order[sent])
                sent += 1
        if not waiting and not prefilling and not decoding:
            s.now = max(s.now, reqs[order[sent]].arrival_s)  # idle until the next request
            continue
        finished = _step(replica, s, reqs, arrivals[sent] if not closed and sent < total else math.inf)
        if not finished:
            continue
        done += len(finished)
        if closed:
            for _ in finished:
                if sent < total:
                    _send(reqs[sent], s.now)
                    waiting.append(sent)
                    sent += 1
    return _result(reqs, s, targets or Targets())


def _send(r: _Req, t: float) -> None:
    """A closed loop's client sends ``r`` at ``t`` (a decode pool's request: its first token out then)."""
    r.arrival_s = t
    if r.emitted:
        r.first_s = t


def _new_reqs(replica: SimReplica, requests: Sequence[SimRequest]) -> list[_Req]:
    """Each request's scheduler state; a prefix-cache hit leaves only the rest of its prompt to compute. A prefill
    pool's request ends at its first token; a decode pool's arrives with its prompt computed and its first token
    out."""
    hit = replica.prefix_hit_rate
    if replica.role == "decode":
        return [
            _Req(r.arrival_s, r.input_tokens, 0, max(1, r.output_tokens), emitted=1, first_s=r.arrival_s)
            for r in requests
        ]
    prefill = replica.role == "prefill"
    return [
        _Req(
            r.arrival_s, r.input_tokens, max(1, r.input_tokens - math.floor(r.input_tokens * hit)),
            1 if prefill else max(1, r.output_tokens),
        )
        for r in requests
    ]  # fmt: skip


def _blocks(replica: SimReplica, tokens: float) -> int:
    """KV tokens of ``tokens`` rounded up to whole blocks."""
    block = replica.kv_block_tokens
    return math.ceil(tokens / block) * block


def _schedule(replica: SimReplica, s: _State, reqs: list[_Req]) -> dict[int, int]:
    """This step's prompt tokens per request: partly prefilled prompts first, then the queue, FCFS, within the
    token budget left by the decoding sequences, the batch cap and the KV pool."""
    decoding, prefilling, waiting = s.decoding, s.prefilling, s.waiting
    budget = replica.chunk_tokens - len(decoding)
    chunks: dict[int, int] = {}
    for i in prefilling:
        if budget <= 0:
            break
        take = min(reqs[i].to_compute, budget)
        chunks[i] = take
        budget -= take
    pool, max_seqs = replica.kv_pool_tokens, replica.max_seqs
    while waiting and budget > 0 and len(decoding) + len(prefilling) < max_seqs:
        i = waiting[0]
        r = reqs[i]
        need = _blocks(replica, r.prompt + r.emitted)
        if s.kv_used + need > pool and (decoding or prefilling):
            break  # no blocks: it waits (a prompt larger than the pool still runs alone)
        waiting.popleft()
        s.kv_used += need
        r.kv_tokens = need
        r.admitted = s.admissions
        s.admissions += 1
        if r.to_compute <= 0:  # a decode pool's request: its KV arrived computed, it decodes from this step
            _start_decode(replica, s, r, i)
            budget -= 1
            continue
        prefilling.append(i)
        take = min(r.to_compute, budget)
        chunks[i] = take
        budget -= take
    return chunks


def _step(replica: SimReplica, s: _State, reqs: list[_Req], next_arrival: float) -> list[int]:
    """One engine step, or a stretch of identical decode-only steps; returns the requests it completed."""
    # nothing queued or part-prefilled: no prompt tokens this step (_schedule would find none)
    chunks = _schedule(replica, s, reqs) if s.waiting or s.prefilling else _NO_CHUNKS
    n = len(s.decoding)
    k = sum(chunks.values()) if chunks else 0
    tau = replica.acceptance_length
    if n:
        decode_s = s.decode_s.get(n)
        if decode_s is None:  # a step's decode part depends on n alone: evaluated once per n
            decode_s = s.decode_s[n] = replica.step_s(n, 0)
        dt = decode_s + k * replica.prefill_token_busy_s
    else:
        dt = k * replica.prefill_token_alone_s + (replica.prefill_pass_s if k else 0.0)  # step_s(0, k)
    steps = 1
    if not chunks and n:  # integer min/max written out: the same steps, without the builtins' calls
        finishes = s.finishes
        _drop_stale(s, reqs)
        steps = finishes[0][0] - s.tick if finishes else 1
        if next_arrival < math.inf:
            until = math.ceil((next_arrival - s.now) / dt)
            steps = min(steps, until if until > 1 else 1)
        room = replica.kv_pool_tokens - s.kv_used
        fits = math.floor(room / (n * tau)) if room > 0 else 1
        steps = steps if steps < fits else fits
        steps = steps if steps > 1 else 1
    s.now += steps * dt
    s.busy_seq_s += steps * dt * n
    if n:
        s.tick += steps
        s.kv_used += steps * n * tau
        s.itl.append((dt, steps * n))
    elif not chunks:  # nothing could run (cannot happen: a lone request is always admitted)
        if next_arrival == math.inf:
            raise RuntimeError("the scheduler simulation stalled: nothing runs and nothing arrives")
        s.now = max(s.now, next_arrival)
    finished = _finish_prefills(replica, s, reqs, chunks) if chunks else []
    if s.finishes and s.finishes[0][0] <= s.tick:  # the heap's least finish tick: none due, none to finish
        finished += _finish_decodes(replica, s, reqs)
    while s.kv_used > replica.kv_pool_tokens and len(s.decoding) > 1:
        _preempt(replica, s, reqs)
    return finished


def _finish_prefills(replica: SimReplica, s: _State, reqs: list[_Req], chunks: dict[int, int]) -> list[int]:
    """Prompts whose last chunk ran: a first token (on the first admission) and the decode steps they need."""
    finished: list[int] = []
    for i, take in chunks.items():
        r = reqs[i]
        r.to_compute = to_compute = r.to_compute - take
        if to_compute > 0:
            continue
        s.prefilling.remove(i)
        if r.emitted == 0:
            r.emitted = 1  # the prefill step samples the first token
            r.first_s = s.now + replica.kv_transfer_s  # a prefill pool's: once its KV reached the decode pool
        if r.output <= r.emitted:
            r.done_s = r.first_s
            s.kv_used -= r.kv_tokens  # a prefill pool's blocks: freed as the transfer is issued
            finished.append(i)
            continue
        _start_decode(replica, s, r, i)
    return finished


def _start_decode(replica: SimReplica, s: _State, r: _Req, i: int) -> None:
    """Sequence ``i`` decodes from the next step: the steps its remaining tokens take, scheduled to finish."""
    r.start_tick = tick = s.tick
    r.finish_tick = finish = tick + math.ceil((r.output - r.emitted) / replica.acceptance_length)
    s.decoding.add(i)
    heappush(s.finishes, (finish, i))
    heappush(s.latest, (-r.admitted, i))


def _finish_decodes(replica: SimReplica, s: _State, reqs: list[_Req]) -> list[int]:
    """Sequences whose last decode step ran: done, their KV blocks (prompt and grown part) freed."""
    finished: list[int] = []
    finishes, decoding, tick, now, tau = s.finishes, s.decoding, s.tick, s.now, replica.acceptance_length
    _drop_stale(s, reqs)
    while finishes and finishes[0][0] <= tick:
        _, i = heappop(finishes)
        r = reqs[i]
        decoding.discard(i)
        r.emitted = r.output
        r.done_s = now
        s.kv_used -= r.kv_tokens + (tick - r.start_tick) * tau
        finished.append(i)
        _drop_stale(s, reqs)
    return finished


def _drop_stale(s: _State, reqs: list[_Req]) -> None:
    """Pop the finish entries of sequences no longer decoding (preempted, or readmitted since) off the heap's top."""
    finishes, decoding = s.finishes, s.decoding
    while finishes:
        tick, i = finishes[0]
        if i in decoding and reqs[i].finish_tick == tick:
            return
        heappop(finishes)


def _preempt(replica: SimReplica, s: _State, reqs: list[_Req]) -> None:
    """Recompute preemption of the latest admitted decoding sequence: blocks freed, back to the queue's front."""
    while s.latest:
        admitted, i = heapq.heappop(s.latest)
        if i in s.decoding and reqs[i].admitted == -admitted:
            break
    else:
        return
    r = reqs[i]
    tau = replica.acceptance_length
    steps = s.tick - r.start_tick
    s.kv_used -= r.kv_tokens + steps * tau
    s.decoding.discard(i)
    r.emitted = min(r.output - 1, r.emitted + math.floor(steps * tau))
    r.to_compute = r.prompt + r.emitted  # the prompt and the tokens generated so far, prefilled again
    s.preemptions += 1
    s.waiting.appendleft(i)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile of sorted values, as ``vllm bench serve`` computes it."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def distribution(values: Sequence[float]) -> Distribution:
    """Mean and p50/p90/p95/p99 of ``values`` (all 0 when empty)."""
    v = sorted(values)
    mean = sum(v) / len(v) if v else 0.0
    p50, p90, p95, p99 = (_percentile(v, q) for q in PERCENTILES)
    return Distribution(mean_s=mean, p50_s=p50, p90_s=p90, p95_s=p95, p99_s=p99)


def _weighted_distribution(pairs: list[tuple[float, int]]) -> Distribution:
    """:func:`distribution` of values given as (value, count) runs, without expanding them."""
    pairs = _sorted_runs(pairs)
    total = sum(c for _, c in pairs)
    if not total:
        return distribution([])
    mean = sum(v * c for v, c in pairs) / total
    ends = list(itertools.accumulate(c for _, c in pairs))  # the index one past each run's last value

    def nth(index: int) -> float:  # the index-th value (0-based) of the sorted runs
        return pairs[min(bisect.bisect_right(ends, index), len(pairs) - 1)][0]

    def at(q: float) -> float:
        pos = (total - 1) * q / 100.0
        lo, frac = math.floor(pos), pos - math.floor(pos)
        return nth(lo) + (nth(min(lo + 1, total - 1)) - nth(lo)) * frac

    p50, p90, p95, p99 = (at(q) for q in PERCENTILES)
    return Distribution(mean_s=mean, p50_s=p50, p90_s=p90, p95_s=p95, p99_s=p99)


def _sorted_runs(pairs: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """``sorted(p for p in pairs if p[1] > 0)``, the same list, sorting the few distinct values rather than every
    run (a run's steps take one of a few dozen step times). Runs with a NaN (which orders against nothing, so
    sorting the values apart would not give the pairs' order) are sorted as pairs. (0.0 and -0.0 merge into one
    value here; the statistics cannot tell them apart: an interpolation and a sum from 0 both give 0.0.)"""
    counts: dict[float, list[int]] = {}
    for value, count in pairs:
        if count > 0:
            counts.setdefault(value, []).append(count)
    if any(math.isnan(value) for value in counts):
        return sorted(p for p in pairs if p[1] > 0)
    return [(value, count) for value in sorted(counts) for count in sorted(counts[value])]


def _result(reqs: list[_Req], s: _State, targets: Targets) -> SimResult:
    """The run's statistics in ``vllm bench serve``'s definitions (module docstring)."""
    ttft = [r.first_s - r.arrival_s for r in reqs]
    e2e = [r.done_s - r.arrival_s for r in reqs]
    tpot = [(e - t) / (r.output - 1) for r, t, e in zip(reqs, ttft, e2e, strict=True) if r.output > 1]
    start = min(r.arrival_s for r in reqs)
    duration = max(max(r.done_s for r in reqs) - start, 1e-12)
    good = _good(reqs, ttft, e2e, targets)
    return SimResult(
        requests=len(reqs),
        duration_s=duration,
        requests_per_s=len(reqs) / duration,
        output_tokens_per_s=sum(r.output for r in reqs) / duration,
        goodput_requests_per_s=good / duration,
        ttft=distribution(ttft),
        tpot=distribution(tpot),
        itl=_weighted_distribution(s.itl),
        e2e=distribution(e2e),
        preemptions=s.preemptions,
        mean_running=s.busy_seq_s / duration,
        ttft_s=tuple(ttft),
        e2e_s=tuple(e2e),
    )


def _good(reqs: list[_Req], ttft: list[float], e2e: list[float], targets: Targets) -> int:
    """The requests meeting every given target (vLLM ``--goodput``: TTFT, TPOT, E2E; a one-token request's TPOT
    is 0)."""
    ttft_s, tpot_s, e2e_s = targets.ttft_s, targets.tpot_s, targets.e2e_s
    if ttft_s is None and tpot_s is None and e2e_s is None:
        return len(reqs)
    good = 0
    for r, t, e in zip(reqs, ttft, e2e, strict=True):
        tpot = (e - t) / (r.output - 1) if r.output > 1 else 0.0
        good += (ttft_s is None or t <= ttft_s) and (tpot_s is None or tpot <= tpot_s) and (e2e_s is None or e <= e2e_s)
    return good
