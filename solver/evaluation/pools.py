"""The rated point of one prefill replica and one decode replica of a disaggregated design.

The one path for disaggregated pools (the candidate rows, the checker): the physics is
:mod:`clusterplan.physics.disagg`; the replica's estimate is :func:`clusterplan.evaluation.evaluate.serving_estimate`
at the batch policy's batch, as for an aggregated replica. Rates and p95s are derated like
:func:`clusterplan.evaluation.evaluate.serving_rates`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterplan.evaluation.evaluate import RATE_SEARCH_STEPS, serving_assumptions
from clusterplan.evaluation.uncertainty import NO_DERATE, Derate
from clusterplan.physics import disagg, queueing

if TYPE_CHECKING:
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
    from clusterplan.physics.factors import Assumptions
    from clusterplan.physics.types import LatencyAtLoad, ServingEstimate
    from clusterplan.requirement.schema import ServingWorkload


@dataclass(frozen=True, slots=True)
class PoolRates:
    """One pool replica's rated point: requests/s within its share of the targets and at the ceiling, the p95s there."""

    rate_rps: float  # 0: it misses its targets even idle
    rate_no_targets_rps: float
    p95_ttft_s: float  # prefill: wait + prefill + KV transfer; decode: wait for a slot + first step
    p95_tpot_s: float  # decode only (0 for prefill)
    p95_e2e_s: float  # prefill: = p95 TTFT; decode: wait + every output token
    ttft_s: float  # unloaded
    tpot_s: float  # unloaded (decode)
    kv_transfer_s: float = 0.0  # prefill: the prompt's KV cache to the decode pool
    kv_stream_gb_per_s: float = 0.0  # prefill: the KV stream at the rated rate (the targets', else the ceiling's)
    kv_link_gb_per_s: float = 0.0  # prefill: what the link between the pools carries from this replica

    @property
    def kv_stream_fits(self) -> bool:
        """The link between the pools carries this replica's KV stream at its rated rate (decode: nothing to send)."""
        return self.kv_stream_gb_per_s <= self.kv_link_gb_per_s or self.kv_link_gb_per_s == 0.0


def kv_link(spec: GpuSpec) -> disagg.KvLink:
    """The link a pool's KV cache crosses: RDMA between nodes of datacenter GPUs (HGX/DGX nodes carry one
    InfiniBand/RoCE/EFA NIC per GPU), TCP between workstation and consumer machines (Ethernet only). Pools are
    sized apart and so planned on separate nodes: NVLink between them is never assumed."""
    return "rdma" if spec.gpu_class == "datacenter" else "tcp"


def targets(w: ServingWorkload, derate: Derate = NO_DERATE) -> disagg.Budgets:
    """Each pool's share of the workload's p95 targets (as the undisturbed model must meet them)."""
    return disagg.budgets(derate.target(w.p95_latency), derate.target(w.p95_ttft), derate.target(w.p95_tpot))


@dataclass(frozen=True, slots=True)
class PrefillReplica:
    """What a prefill replica's rates read that its targets do not change (a retargeted build keeps it): the prompt's
    KV transfer, its service time, the ceiling rate, the link between the pools, and the p95 TTFT at a rate."""

    transfer_s: float
    service_s: float
    ceiling_rps: float
    link_gb_per_s: float
    at: Callable[[float], disagg.PrefillAtLoad]


def prefill_replica(
    est: ServingEstimate, arch: ModelArchitecture, spec: GpuSpec, w: ServingWorkload, assumptions: Assumptions
) -> PrefillReplica:
    """``est``'s layout as a prefill replica (:class:`PrefillReplica`), under the workload's engine."""
    assumptions = serving_assumptions(assumptions, w)  # the workload's engine (chunk size, factors)
    transfer = disagg.kv_transfer_s(
        arch, spec, input_tokens=w.input_tokens, kv_precision=est.kv_precision, senders=est.tp * est.pp,
        assumptions=assumptions, link=kv_link(spec),
    )  # fmt: skip
    service = disagg.prefill_service_s(est, input_tokens=w.input_tokens, assumptions=assumptions)
    ceiling = assumptions.utilisation_ceiling / service if service > 0 else 0.0
    link = disagg.kv_link_gb_per_s(spec, kv_link(spec), est.tp * est.pp, assumptions)

    def at(rate: float) -> disagg.PrefillAtLoad:
        return disagg.prefill_at_load(est, rate, service_s=service, transfer_s=transfer, assumptions=assumptions)

    return PrefillReplica(transfer, service, ceiling, link, at)


def prefill_rates(
    est: ServingEstimate,
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: ServingWorkload,
    assumptions: Assumptions,
    derate: Derate = NO_DERATE,
    *,
    replica: PrefillReplica | None = None,
) -> PoolRates:
    """A prefill replica (``est``'s layout): prompts/s within the TTFT budget (KV transfer over RDMA included).
    ``replica``: :func:`prefill_replica` of ``est`` as the caller keeps it (its p95s at a rate memoised)."""
    rep = replica if replica is not None else prefill_replica(est, arch, spec, w, assumptions)
    ceiling, transfer = rep.ceiling_rps, rep.transfer_s
    budget = targets(w, derate).ttft_s
    rate = (
        ceiling
        if budget is None
        else queueing.largest_rate(lambda r: rep.at(r).p95_ttft_s <= budget, ceiling, RATE_SEARCH_STEPS)
    )
    p95 = rep.at(rate if rate > 0 else ceiling).p95_ttft_s * derate.latency_factor
    f = derate.rate_factor
    unloaded = est.prefill_s + transfer
    # The stream the link must carry: the row's rated rate, the targets' where there are targets (the latency family
    # holds each replica to it), else the ceiling's.
    stream = disagg.kv_stream_gb_per_s(
        arch,
        input_tokens=w.input_tokens,
        kv_precision=est.kv_precision,
        rate_rps=(rate if budget is not None else ceiling),
    )
    return PoolRates(rate * f, ceiling * f, p95, 0.0, p95, unloaded, 0.0, transfer, stream, rep.link_gb_per_s)


def prefill_ceiling_rps(
    est: ServingEstimate, w: ServingWorkload, assumptions: Assumptions, derate: Derate = NO_DERATE
) -> float:
    """Prompts/s a prefill replica takes at the utilisation ceiling (no targets), x the derating's rate factor."""
    assumptions = serving_assumptions(assumptions, w)  # the workload's engine (chunk size, factors)
    service = disagg.prefill_service_s(est, input_tokens=w.input_tokens, assumptions=assumptions)
    return (assumptions.utilisation_ceiling / service if service > 0 else 0.0) * derate.rate_factor


def decode_ceiling_rps(
    est: ServingEstimate, w: ServingWorkload, assumptions: Assumptions, derate: Derate = NO_DERATE
) -> float:
    """Requests/s a decode replica takes at the utilisation ceiling (no targets), x the derating's rate factor."""
    assumptions = serving_assumptions(assumptions, w)  # the workload's engine (chunk size, factors)
    dec = disagg.decode_only(est, output_tokens=w.output_tokens)
    return assumptions.utilisation_ceiling * dec.requests_per_s * derate.rate_factor


def decode_rates(
    est: ServingEstimate,
    w: ServingWorkload,
    assumptions: Assumptions,
    derate: Derate = NO_DERATE,
    *,
    replica: tuple[ServingEstimate, Callable[[float], LatencyAtLoad]] | None = None,
) -> PoolRates:
    """A decode replica (``est``'s layout at its batch, no prefill in its steps): requests/s within the TPOT
    target and the end-to-end remainder (:func:`clusterplan.physics.disagg.budgets`). ``replica``: the decode-only
    replica (:func:`clusterplan.physics.disagg.decode_only` of ``est``) and its p95s at a rate, as the caller keeps
    them (:func:`decode_at_load`, memoised)."""
    assumptions = serving_assumptions(assumptions, w)  # the workload's engine (chunk size, factors)
    if replica is None:
        dec = disagg.decode_only(est, output_tokens=w.output_tokens)
        at = decode_at_load(dec, w, assumptions)
    else:
        dec, at = replica
    b = targets(w, derate)
    tk = {"input_tokens": 0.0, "output_tokens": w.output_tokens, "assumptions": assumptions}
    rate = queueing.max_rate_for_targets(
        dec, queueing.LatencyTargets(p95_latency_s=b.decode_e2e_s, p95_tpot_s=b.tpot_s), steps=RATE_SEARCH_STEPS,
        at_load=at, **tk,  # type: ignore[arg-type]
    )  # fmt: skip
    ceiling = assumptions.utilisation_ceiling * dec.requests_per_s
    lat = derate.latency(at(rate if rate > 0 else ceiling))
    f = derate.rate_factor
    return PoolRates(rate * f, ceiling * f, lat.p95_ttft_s, lat.p95_tpot_s, lat.p95_e2e_s, dec.ttft_s, dec.tpot_s)


def decode_at_load(
    dec: ServingEstimate,
    w: ServingWorkload,
    assumptions: Assumptions,
) -> Callable[[float], LatencyAtLoad]:
    """The p95s of a decode-only replica (:func:`clusterplan.physics.disagg.decode_only`) at a rate: nothing to prefill."""
    assumptions = serving_assumptions(assumptions, w)
    return queueing.loader(dec, input_tokens=0.0, output_tokens=w.output_tokens, assumptions=assumptions)


def design_p95_e2e_s(prefill: PoolRates, decode: PoolRates) -> float:
    """A disaggregated design's p95 end-to-end latency: the prefill pool's p95 TTFT + the decode pool's p95 (they add)."""
    return prefill.p95_ttft_s + decode.p95_e2e_s if math.isfinite(prefill.p95_ttft_s) else math.inf


@dataclass(frozen=True, slots=True)
class PoolAtLoad:
    """One pool replica's p95s at the load it receives (the checker's and the odds' view of a planned pool)."""

    utilisation: float
    stable: bool
    p95_ttft_s: float
    p95_tpot_s: float
    p95_e2e_s: float


def pool_at_load(
    est: ServingEstimate,
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: ServingWorkload,
    role: str,
    load_rps: float,
    assumptions: Assumptions,
) -> PoolAtLoad:
    """The p95s of one ``role`` ("prefill" or "decode") replica of ``est``'s layout receiving ``load_rps``."""
    ceiling = assumptions.utilisation_ceiling
    if role == "prefill":
        transfer = disagg.kv_transfer_s(
            arch, spec, input_tokens=w.input_tokens, kv_precision=est.kv_precision, senders=est.tp * est.pp,
            assumptions=assumptions, link=kv_link(spec),
        )  # fmt: skip
        service = disagg.prefill_service_s(est, input_tokens=w.input_tokens, assumptions=assumptions)
        p = disagg.prefill_at_load(est, load_rps, service_s=service, transfer_s=transfer, assumptions=assumptions)
        stable = p.utilisation <= ceiling + 1e-12
        return PoolAtLoad(p.utilisation, stable, p.p95_ttft_s, 0.0, p.p95_ttft_s)
    dec = disagg.decode_only(est, output_tokens=w.output_tokens)
    lat = queueing.latency_at_load(
        dec, load_rps, input_tokens=0.0, output_tokens=w.output_tokens, assumptions=assumptions
    )
    return PoolAtLoad(lat.utilisation, lat.stable, lat.p95_ttft_s, lat.p95_tpot_s, lat.p95_e2e_s)


def prefill_at(
    est: ServingEstimate,
    arch: ModelArchitecture,
    spec: GpuSpec,
    w: ServingWorkload,
    assumptions: Assumptions,
    rate_rps: float,
) -> disagg.PrefillAtLoad:
    """A prefill replica receiving ``rate_rps`` prompts/s: its p95 TTFT (wait, prefill, KV transfer), as
    :func:`prefill_rates` rates it (``clusterplan export``'s expectations)."""
    return prefill_replica(est, arch, spec, w, assumptions).at(rate_rps)
