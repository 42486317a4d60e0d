"""Latency of a serving replica under load: a documented queueing model of continuous batching.

Model (stated in ``docs/model.md``):

* A replica holds up to ``B`` (its batch) sequences at once: ``B`` slots of an M/G/B queue with Poisson
  arrivals at ``λ`` requests/s. Its saturated rate ``μ`` (requests/s at batch ``B``, chunked prefill
  included) comes from :func:`clusterplan.physics.serving.estimate_serving`; utilisation ``ρ = λ/μ``.
* Waiting for a slot: Erlang C for ``B`` servers (Erlang 1917), each held as long as the running batch says at this
  load (``μ_slot = λ/n``, Little's law, below), ``P(W > t) = C·exp(-(Bμ_slot - λ)t)``, scaled by Allen-Cunneen's
  ``(c_a² + c_s²)/2`` for non-exponential service (Allen 1990, *Probability, Statistics and Queueing Theory*, §6).
* Running batch: Little's law ``n = λ·(TTFT + O·TPOT(n))`` solved by regula falsi; decode slows as
  ``n`` grows (the roofline step at ``n``), and prefill interleaved at rate ``λ`` takes a share ``λ·P_b``
  of the replica's time, stretching each step by ``1/(1 - λ·P_b)``.
* Waiting for the prompts ahead: one server (M/D/1, Pollaczek-Khinchine) that each queued prompt holds for its
  prefill and its tokens' share of the steps it fills; and the step in progress, uniform on ``(0, step(n))``.
* The decode phase: a busy period (Takács 1962) started by the request's own ``O - 1`` steps, each prompt that
  rides one of them adding ``P_b`` (and each sequence sharing them ``step(n+2) - step(n+1)`` a step); its mean and
  variance, its p95 by the gamma law of those two (Wilson-Hilferty 1931). p95 TPOT: that p95 over ``O - 1``.
* p95 TTFT: p95 slot wait + p95 prompt wait + the step in progress + prefill + the in-flight steps the prompt's
  chunks share (``ρ`` of the time). p95 end-to-end: TTFT and the decode phase, their means and variances added,
  the gamma p95 (a request of mean length: output-length spread is not in this figure).
* Means beside the p95s (to compare with benchmarks that report means): the waits' means, the decode phase's mean.
* Stable only at ``ρ`` at or below ``utilisation_ceiling``; at ``ρ >= 1`` the queue grows without bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from clusterplan.physics.factors import Assumptions
from clusterplan.physics.step import decode_stepper
from clusterplan.physics.types import LatencyAtLoad, ServingEstimate

P95_Z = 1.6448536269514722  # standard normal 95th percentile
ERLANG_TAIL_SIGMAS = 12.0  # servers this many standard deviations above the load never all fill
ERLANG_TAIL_SLACK = 20.0
BISECTION_STEPS = 40  # rate resolution 2^-40 of the ceiling
ROOT_STEPS = 200


@lru_cache(maxsize=256)  # latency_at_load asks twice per rate (p95 and mean wait): the recursion runs once
def erlang_c(servers: int, offered_load: float) -> float:
    """Probability an arrival waits in an M/M/c queue with ``c`` servers and offered load ``a = λ/μ``.

    Erlang B by the stable recursion ``B_k = a·B_{k-1} / (k + a·B_{k-1})``, then
    ``C = B_c / (1 - ρ·(1 - B_c))`` with ``ρ = a/c`` (Erlang 1917; Kleinrock 1975 vol. 1 §3.5).
    """
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    if servers > offered_load + ERLANG_TAIL_SIGMAS * math.sqrt(offered_load) + ERLANG_TAIL_SLACK:
        # All c servers busy needs a Poisson(a) count at least c: beyond a + 12 sqrt(a) + 20 that tail is
        # below 1e-25 (normal approximation to the Poisson tail), so C is 0 to double precision. Without
        # this the recursion below runs once per slot, millions of times for a tiny model's batch.
        return 0.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered_load * b / (k + offered_load * b)
    rho = offered_load / servers
    return b / (1.0 - rho * (1.0 - b))


def p95_wait_s(servers: int, arrival_per_s: float, service_rate_per_server: float, service_scv: float) -> float:
    """95th percentile wait for a server: ``ln(C/0.05) / (c·μ - λ) · (1 + c_s²)/2`` (0 when C <= 5 %).

    M/M/c waiting-time tail (Kleinrock 1975 §3.5) with the Allen-Cunneen variability factor for M/G/c.
    """
    return _wait(servers, arrival_per_s, service_rate_per_server, service_scv)[2]


def mean_wait_s(servers: int, arrival_per_s: float, service_rate_per_server: float, service_scv: float) -> float:
    """Mean wait for a server: ``C / (c·μ - λ) · (1 + c_s²)/2`` (M/M/c, Kleinrock 1975 §3.5; Allen-Cunneen)."""
    capacity = servers * service_rate_per_server
    if arrival_per_s <= 0:
        return 0.0
    if arrival_per_s >= capacity:
        return math.inf
    c = erlang_c(servers, arrival_per_s / service_rate_per_server)
    return c / (capacity - arrival_per_s) * (1.0 + service_scv) / 2.0


def stepper(est: ServingEstimate) -> Callable[[float], float]:
    """The decode step of ``est`` at a running batch ``n`` (clamped to ``[1, B]``), seconds; the fixed step without a
    step model.

    Each batch's step is remembered (by the clamped batch): one rate's search asks for the step at 1 and at ``B``
    (the root's bracket) and at ``n + 1`` twice (the root, then the decode phase), so a caller that asks at many rates
    keeps one stepper per estimate (:func:`latency_at_load`'s ``step_s``) and computes those once.
    :func:`clusterplan.physics.step.decode_stepper` is :func:`clusterplan.physics.step.decode_step_s` bit for bit, so
    a remembered step is the step.
    """
    if est.step_model is None:
        fixed_s = est.decode_step_s
        return lambda n: fixed_s
    at = decode_stepper(est.step_model)
    batch = float(est.batch)
    steps: dict[float, float] = {}

    def step_s(n: float) -> float:
        if n < 1.0:  # min(max(n, 1.0), batch), without the two calls (the root search asks thousands of times)
            n = 1.0
        elif n > batch:
            n = batch
        s = steps.get(n)
        if s is None:
            s = steps[n] = at(n)
        return s

    return step_s


def _running_batch(
    batch: float,
    prefill_s: float,
    arrival: float,
    output_tokens: float,
    stretch: float,
    step_s: Callable[[float], float],
) -> float:
    """Solve Little's law ``n = λ·(prefill + O·step(n+1)·stretch)`` for ``n`` in ``[0, B]`` (``batch``: ``B`` as a float;
    ``step_s``: :func:`stepper`).

    The excess ``g(n) - n`` is positive at 0 and decreasing past its root; regula falsi with the Illinois
    modification (Dowell & Jarratt 1971) brackets the root to ``1e-10·(1 + B)`` in a handful of steps.
    """

    def excess(n: float) -> float:
        return arrival * (prefill_s + output_tokens * step_s(n + 1.0) * stretch) - n

    f_hi = excess(batch)
    if f_hi >= 0:
        return batch
    lo, hi = 0.0, batch
    f_lo = excess(lo)
    if f_lo <= 0:
        return 0.0
    tol = 1e-10 * (1.0 + batch)
    side = 0
    for _ in range(ROOT_STEPS):
        mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        f_mid = excess(mid)
        if f_mid > 0:
            lo, f_lo = mid, f_mid
            if side == 1:
                f_hi /= 2.0
            side = 1
        else:
            hi, f_hi = mid, f_mid
            if side == -1:
                f_lo /= 2.0
            side = -1
        if hi - lo <= tol or f_mid == 0:
            break
    return hi


def _wait(
    servers: int, arrival_per_s: float, service_rate_per_server: float, service_scv: float
) -> tuple[float, float, float]:
    """A queue's wait as an atom at 0 and an exponential tail, ``P(W > t) = C·exp(-θt)``, and its 95th percentile:
    (C, θ in 1/s, p95 s).

    Erlang C for ``C`` and ``θ = (c·μ - λ) / ((1 + c_s²)/2)`` (Kleinrock 1975 §3.5, Allen-Cunneen); its mean is
    ``C/θ``, its variance ``C·(2 - C)/θ²`` (:func:`_tail_moments`) and its p95 ``ln(C/0.05) / (c·μ - λ) · (1 + c_s²)/2``
    (0 when C <= 5 %: :func:`p95_wait_s`).
    """
    capacity = servers * service_rate_per_server
    if arrival_per_s <= 0:
        return 0.0, math.inf, 0.0
    if arrival_per_s >= capacity:
        return 1.0, 0.0, math.inf
    c = erlang_c(servers, arrival_per_s / service_rate_per_server)
    p95 = 0.0 if c <= 0.05 else math.log(c / 0.05) / (capacity - arrival_per_s) * (1.0 + service_scv) / 2.0
    return c, (capacity - arrival_per_s) / ((1.0 + service_scv) / 2.0), p95


def _tail_moments(c: float, theta: float) -> tuple[float, float]:
    """(mean, variance) of a wait with ``P(W > t) = c·exp(-θt)``: ``c/θ`` and ``c·(2 - c)/θ²``."""
    if c <= 0 or math.isinf(theta):
        return 0.0, 0.0
    if theta <= 0:
        return math.inf, math.inf
    return c / theta, c * (2.0 - c) / (theta * theta)


def gamma_p95(mean: float, variance: float) -> float:
    """The 95th percentile of a positive, right-skewed time by the gamma law of its mean and variance, through
    Wilson & Hilferty's cube-root normal form (1931): ``m·(1 - 1/(9k) + z·sqrt(1/(9k)))³``, ``k = m²/var``."""
    if not math.isfinite(mean) or not math.isfinite(variance):
        return math.inf
    if variance <= 0 or mean <= 0:
        return max(mean, 0.0)
    h = variance / (9.0 * mean * mean)  # 1/(9k)
    return mean * max(1.0 - h + P95_Z * math.sqrt(h), 0.0) ** 3


@dataclass(frozen=True, slots=True)
class _Decode:
    """A request's decode phase at a load: its mean and variance, seconds and seconds²."""

    mean_s: float
    variance_s2: float


def _decode_phase(
    est: ServingEstimate, lam: float, output_tokens: float, step_at: Callable[[float], float], n: float, ttft_s: float
) -> _Decode:
    """The time a request decodes: a busy period of the replica's work (Takács 1962).

    Its own ``O - 1`` steps at the mean batch, ``x = (O-1)·step(n+1)``, are stretched by every prompt that runs
    beside them: each prompt arriving while its prompt queues and prefills or while it decodes (rate ``λ``) rides one
    of its steps and adds ``P_b`` (``ttft_s``: its TTFT after any slot wait, whose arrivals are admitted as sequences
    leave, the decode phase's own); so the decode phase is the busy period started by ``x + λ·P_b·TTFT`` with work
    ``P_b`` arriving
    at ``λ``: mean ``(x + ρ_b·TTFT)/(1 - ρ_b)``, ``ρ_b = λ·P_b``. Its variance is the busy period's,
    ``λ·T·E[S²]/(1 - λ·E[S])²`` over the request's time ``T`` in the replica, where a sequence that shares ``o`` of
    its steps also lengthens each by ``δ = step(n+2) - step(n+1)``: per arrival ``S = P_b + δ·o`` with ``o`` uniform
    on its steps (``E[S] = P_b + δ·(O-1)/2``), and as many sequences again (Poisson, Little's law) were decoding when
    it started: ``E[S²] = P_b² + P_b·δ·(O-1) + (2/3)·δ²·(O-1)²`` (shot noise of an M/G/∞ batch, uniform overlaps).
    """
    steps = max(output_tokens - 1.0, 0.0)
    rho_b = min(lam * est.prefill_busy_s, 0.999)
    step = step_at(n + 1.0)
    mean = (steps * step + rho_b * ttft_s) / (1.0 - rho_b)
    delta = max(step_at(n + 2.0) - step, 0.0) * steps
    p_b = est.prefill_busy_s
    second = p_b * p_b + p_b * delta + 2.0 / 3.0 * delta * delta
    # each arrival's mean work on it, P_b + δ·(O-1)/2, feeds back as a busy period's does: 1/(1 - λ·E[S])²
    feedback = min(lam * (p_b + delta / 2.0), 0.999)
    variance = lam * (ttft_s + mean) * second / (1.0 - feedback) ** 2
    return _Decode(mean, variance)


def _unstable(lam: float, rho: float, batch: int) -> LatencyAtLoad:
    """A replica past saturation: every latency unbounded."""
    return LatencyAtLoad(
        arrival_requests_per_s=lam,
        utilisation=rho,
        p95_ttft_s=math.inf,
        p95_tpot_s=math.inf,
        p95_e2e_s=math.inf,
        stable=False,
        p95_wait_s=math.inf,
        mean_running_batch=float(batch),
        mean_ttft_s=math.inf,
        mean_tpot_s=math.inf,
        mean_e2e_s=math.inf,
    )


def latency_at_load(
    est: ServingEstimate,
    arrival_requests_per_s: float,
    *,
    input_tokens: float,
    output_tokens: float,
    assumptions: Assumptions,
) -> LatencyAtLoad:
    """p95 and mean TTFT, TPOT and end-to-end latency of one replica receiving ``arrival_requests_per_s``.

    TTFT: the wait for a slot, then the wait for the prompts queued ahead (:func:`_wait` with one server:
    M/D/1, each prompt holding the step budget for ``P_b + step(n)·p/(budget - n)``, Pollaczek-Khinchine), its prefill and
    the decode steps its chunks share. The decode phase (:func:`_decode_phase`) and the end-to-end latency
    (TTFT + decode) as their means and variances, their p95s by :func:`gamma_p95`. A caller that asks at many rates
    keeps a :func:`loader` instead (the same figures, sooner).
    """
    at = loader(est, input_tokens=input_tokens, output_tokens=output_tokens, assumptions=assumptions)
    return at(arrival_requests_per_s)


def loader(
    est: ServingEstimate,
    *,
    input_tokens: float,
    output_tokens: float,
    assumptions: Assumptions,
) -> Callable[[float], LatencyAtLoad]:
    """:func:`latency_at_load` of ``est`` as a function of the arrival rate alone, for a caller that asks at many
    rates (a rate search): what does not depend on the rate (the estimate's and the assumptions' fields, the
    prompt's computed tokens, the engine's chunk size) is read once, and one :func:`stepper` keeps the decode steps
    of every rate."""
    steps_of = stepper(est)
    mu, batch, prefill_s = est.requests_per_s, est.batch, est.prefill_s
    slots = float(batch)
    busy_s, chunks = est.prefill_busy_s, est.prefill_chunks
    stable_below = assumptions.utilisation_ceiling + 1e-12
    scv = assumptions.service_time_scv
    chunk_tokens = assumptions.chunk_tokens
    # the prompt's tokens the replica computes (those the prefix cache does not hold), at least one
    computed = max(input_tokens * (1.0 - assumptions.prefix_cache_hit_rate), 1.0)
    steps = max(output_tokens - 1.0, 0.0)

    def at(arrival_requests_per_s: float) -> LatencyAtLoad:
        lam = max(arrival_requests_per_s, 0.0)
        rho = lam / mu if mu > 0 else math.inf
        stable = rho <= stable_below
        if rho >= 1.0 or mu <= 0:
            return _unstable(lam, rho, batch)
        share = min(lam * busy_s, 0.999)
        stretch = 1.0 / (1.0 - share)
        n = _running_batch(slots, prefill_s, lam, output_tokens, stretch, steps_of)
        step_n = steps_of(n)  # the decode step at the mean running batch
        slot_rate = lam / n if n > 0 else mu / batch  # a slot is held n / lam s at this load (Little's law)
        slot_c, slot_theta, wait = _wait(batch, lam, slot_rate, scv)
        interleave = min(rho, 1.0) * chunks * step_n
        # the prompts ahead hold the step budget (vLLM max_num_batched_tokens): each its prefill and its tokens' share
        # of the steps it fills beside the n decoding sequences, a queued step being filled to the budget
        budget_share = computed / max(chunk_tokens - n, 1.0)
        prompt_s = busy_s + budget_share * step_n if busy_s > 0 else 0.0
        queue_c, queue_theta, queued = _wait(1, lam, 1.0 / prompt_s, 0.0) if prompt_s > 0 else (0.0, math.inf, 0.0)
        if queue_theta <= 0:
            return _unstable(lam, rho, batch)
        slot_mean, slot_var = _tail_moments(slot_c, slot_theta)
        queue_mean, queue_var = _tail_moments(queue_c, queue_theta)
        # a prompt arriving mid-step waits for that step to end: uniform on (0, step(n)) while sequences decode
        busy = min(rho, 1.0)
        residual_p95 = step_n * max(1.0 - 0.05 / busy, 0.0) if busy > 0 else 0.0
        mean_ttft = slot_mean + queue_mean + busy * step_n / 2.0 + prefill_s + interleave
        ttft = wait + queued + residual_p95 + prefill_s + interleave
        # the prompts arriving while it waits for a slot are admitted as slots free, at the rate sequences leave: they
        # are the decode phase's arrivals already; those arriving while its prompt queues and prefills ride its steps
        decode = _decode_phase(est, lam, output_tokens, steps_of, n, mean_ttft - slot_mean)
        # the prompt wait's spread carries into the decode phase through the prompts that arrive during it
        e2e_var = slot_var + queue_var / (1.0 - share) ** 2 + decode.variance_s2
        mean_e2e = mean_ttft + decode.mean_s
        if steps > 0:
            tpot_mean = decode.mean_s / steps
            tpot_p95 = gamma_p95(decode.mean_s, decode.variance_s2) / steps
        else:
            tpot_mean = tpot_p95 = steps_of(min(n + 1.0, slots)) * stretch
        # a request at the p95 TTFT still decodes for the mean decode phase after it (the wait's tail, near saturation)
        e2e = max(gamma_p95(mean_e2e, e2e_var), ttft + decode.mean_s if steps > 0 else ttft)
        return LatencyAtLoad(
            arrival_requests_per_s=lam,
            utilisation=rho,
            p95_ttft_s=ttft,
            p95_tpot_s=tpot_p95,
            p95_e2e_s=e2e,
            stable=stable,
            p95_wait_s=wait,
            mean_running_batch=n,
            mean_ttft_s=mean_ttft,
            mean_tpot_s=tpot_mean,
            mean_e2e_s=mean_e2e,
        )

    return at


@dataclass(frozen=True, slots=True)
class LatencyTargets:
    """A replica's p95 targets, seconds: end-to-end, time to first token, time per output token (None: none)."""

    p95_latency_s: float | None = None
    p95_ttft_s: float | None = None
    p95_tpot_s: float | None = None

    @property
    def any(self) -> bool:
        """Whether any target is set."""
        return self.p95_latency_s is not None or self.p95_ttft_s is not None or self.p95_tpot_s is not None

    def met_by(self, lat: LatencyAtLoad) -> bool:
        """Whether ``lat`` meets every target set."""
        return (
            (self.p95_latency_s is None or lat.p95_e2e_s <= self.p95_latency_s)
            and (self.p95_ttft_s is None or lat.p95_ttft_s <= self.p95_ttft_s)
            and (self.p95_tpot_s is None or lat.p95_tpot_s <= self.p95_tpot_s)
        )


NO_TARGETS = LatencyTargets()


def max_rate_for_targets(
    est: ServingEstimate,
    targets: LatencyTargets,
    *,
    input_tokens: float,
    output_tokens: float,
    assumptions: Assumptions,
    steps: int = BISECTION_STEPS,
    at_load: Callable[[float], LatencyAtLoad] | None = None,
) -> float:
    """Largest arrival rate (requests/s) one replica takes with every p95 target met and ``ρ <= ceiling``.

    ``None`` targets are unconstrained. Returns 0.0 when the replica is infeasible or even an idle replica
    misses a target. Deterministic bisection over ``[0, ceiling·μ]`` with ``steps`` halvings, keeping the
    feasible end; the p95s are non-decreasing in the rate, so the answer is monotone in every target.
    ``at_load``: :func:`latency_at_load` of ``est`` at a rate, as the caller computes it (a memo shared by
    searches for other targets: the halvings visit the same rates).
    """
    if not est.feasible or est.requests_per_s <= 0:
        return 0.0
    if not targets.any:
        return assumptions.utilisation_ceiling * est.requests_per_s

    # the p95s at a rate: the caller's, else one loader for the halvings (the replica's decode steps shared)
    load = (
        at_load
        if at_load is not None
        else loader(est, input_tokens=input_tokens, output_tokens=output_tokens, assumptions=assumptions)
    )

    def ok(rate: float) -> bool:
        return targets.met_by(load(rate))

    return largest_rate(ok, assumptions.utilisation_ceiling * est.requests_per_s, steps)


def largest_rate(ok: Callable[[float], bool], ceiling_rps: float, steps: int) -> float:
    """The largest rate in ``[0, ceiling]`` with ``ok`` (non-increasing in the rate), by ``steps`` halvings keeping
    the feasible end (a replica's rate within its targets: :func:`max_rate_for_targets`, a prefill pool's); 0 when even an idle replica fails."""
    if ceiling_rps <= 0 or not ok(0.0):
        return 0.0
    if ok(ceiling_rps):
        return ceiling_rps
    return bisect_largest(ok, ceiling_rps, steps)


def bisect_largest(ok: Callable[[float], bool], failing: float, steps: int) -> float:
    """The largest rate on ``(0, failing)`` seen to hold ``ok`` (non-increasing in the rate) in ``steps`` halvings of
    ``[0, failing]`` keeping the feasible end; 0 when none tried did (neither end is tried: the caller knows them)."""
    lo, hi = 0.0, failing
    for _ in range(steps):
        mid = (lo + hi) / 2.0
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
