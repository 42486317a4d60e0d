"""Disaggregated prefill/decode serving: a prefill pool and a decode pool, each sized for the demand.

The model (DistServe, Zhong et al., OSDI'24, arXiv:2401.09670 §3-4; Splitwise, Patel et al., ISCA'24,
arXiv:2311.18677 §IV; Mooncake, Qin et al., FAST'25, arXiv:2407.00079 §4), in the form NVIDIA's
aiconfigurator and the Dynamo planner size worker pools (``ai-dynamo/aiconfigurator``
``sdk/queueing/disagg.py``; Dynamo planner: prefill replicas = prompt tokens/s needed / tokens/s per
prefill worker, decode replicas = output tokens/s needed / tokens/s per decode worker at the ITL target):

* A **prefill replica** runs prompts only: one forward pass per prompt (prompts shorter than a chunk share a
  pass, vLLM ``max_num_batched_tokens``), the weights streamed once per pass. Service time per request
  :func:`prefill_service_s`; arrivals Poisson, one prompt in service at a time: an M/G/1 queue
  (:func:`clusterplan.physics.queueing.p95_wait_s` with one server).
* **TTFT** = p95 wait on the prefill pool + the prompt's prefill + the KV transfer
  (:func:`kv_transfer_s`): the prompt's KV cache (``input_tokens x KV bytes per token``) over the link
  between the pools, each prefill GPU sending its own shard on its own NIC (GPUDirect RDMA, one NIC per GPU
  in HGX nodes; DistServe §4.3 and Splitwise §IV-C transfer layer by layer; Mooncake's transfer engine
  drives every NIC at once). Achievable fraction: the catalog's ``link_efficiency``.
* A **decode replica** only decodes: no prefill shares its steps (the interference chunked prefill adds in an
  aggregated replica is gone), so its saturated rate is ``B / (O · step(B))`` and its TPOT the decode step
  at the running batch, through the aggregated queueing model with the prefill removed
  (:func:`decode_only`).
* Targets: the prefill pool meets the TTFT budget, the decode pool the TPOT target and the rest of the
  end-to-end target (:func:`budgets`); meeting both meets the end-to-end target (the p95s add).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.physics import memory
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.moe import experts_touched
from clusterplan.physics.queueing import p95_wait_s
from clusterplan.physics.types import ServingEstimate
from clusterplan.units import BYTES_PER_GB

KvLink = Literal["nvlink", "rdma", "tcp"]

# Without a p95_ttft, the share of p95_latency the prefill pool's TTFT may take; the decode pool gets the
# rest. An even split: the model's own choice, stated in the plan's assumptions (docs/model.md §disaggregation).
TTFT_SHARE_OF_E2E = 0.5
# TCP between pools (no RDMA fabric): 100 Gb/s Ethernet per node shared by its 8 GPUs, GB/s per GPU
# (catalog reference hardware-facts.md: instances without a fabric list 100 Gb/s Ethernet).
TCP_GB_PER_S_PER_GPU = 12.5 / 8


@dataclass(frozen=True, slots=True)
class Budgets:
    """What each pool must meet, seconds (None: no target)."""

    ttft_s: float | None  # prefill pool: p95 wait + prefill + KV transfer
    decode_e2e_s: float | None  # decode pool: p95 wait for a slot + every output token
    tpot_s: float | None  # decode pool: p95 TPOT


def budgets(p95_latency_s: float | None, p95_ttft_s: float | None, p95_tpot_s: float | None) -> Budgets:
    """Split the targets between the pools: TTFT to prefill (``p95_ttft``, at most ``TTFT_SHARE_OF_E2E`` of the
    end-to-end target when both are given), the end-to-end remainder and the TPOT target to decode."""
    ttft = p95_ttft_s
    if p95_latency_s is not None:
        share = TTFT_SHARE_OF_E2E * p95_latency_s
        ttft = share if ttft is None else min(ttft, share)
    decode_e2e = None if p95_latency_s is None or ttft is None else p95_latency_s - ttft
    return Budgets(ttft_s=ttft, decode_e2e_s=decode_e2e, tpot_s=p95_tpot_s)


def kv_bytes(arch: ModelArchitecture, tokens: float, kv_precision: str) -> float:
    """KV cache of ``tokens`` tokens over the whole model, bytes: ``2 · layers · kv_heads · head_dim · bytes`` each;
    a hybrid's linear-attention layers add their fixed state (vLLM/SGLang hand the Mamba-style state over with it)."""
    per_token = memory.kv_bytes_per_token_per_gpu(arch, tp=1, pp=1, kv_precision=kv_precision)
    if not arch.linear_layer_count:
        return tokens * per_token
    return tokens * per_token + memory.kv_bytes_per_sequence_per_gpu(arch, 0.0, tp=1, pp=1, kv_precision=kv_precision)


def kv_link_gb_per_s(gpu: GpuSpec, link: KvLink, senders: int, assumptions: Assumptions) -> float:
    """Achieved bandwidth of the KV transfer from one prefill replica of ``senders`` GPUs, GB/s.

    NVLink (both pools in one node): the GPU's scale-up bandwidth, one direction, per sender. RDMA
    (InfiniBand/RoCE/EFA between nodes): the per-GPU network of the assumptions, one NIC per sender. TCP:
    :data:`TCP_GB_PER_S_PER_GPU` per sender. Times ``link_efficiency`` (Calculon: NVLink 0.65, IB 0.9).
    """
    if link == "nvlink" and gpu.scale_up != "pcie":
        per = gpu.scale_up_bandwidth_gb_per_s / 2.0
    elif link == "tcp":
        per = TCP_GB_PER_S_PER_GPU
    else:
        per = assumptions.inter_node_bandwidth_gb_per_s
    return max(1, senders) * per * assumptions.link_efficiency


def kv_transfer_s(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    input_tokens: float,
    kv_precision: str,
    senders: int,
    assumptions: Assumptions,
    link: KvLink = "rdma",
) -> float:
    """The prompt's KV cache from the prefill to the decode replica, seconds: bytes / achieved bandwidth + latency."""
    bw = kv_link_gb_per_s(gpu, link, senders, assumptions) * BYTES_PER_GB
    return kv_bytes(arch, input_tokens, kv_precision) / bw + assumptions.network_latency_s


def kv_stream_gb_per_s(arch: ModelArchitecture, *, input_tokens: float, kv_precision: str, rate_rps: float) -> float:
    """The KV stream a prefill replica sends at ``rate_rps`` prompts/s, GB/s: ``rate x input tokens x KV bytes per
    token / 1e9`` (each prompt's whole KV cache crosses to the decode pool once; DistServe §4.3, Splitwise §IV-C)."""
    return rate_rps * kv_bytes(arch, input_tokens, kv_precision) / BYTES_PER_GB


def prefill_passes(input_tokens: float, chunk_tokens: int) -> float:
    """Forward passes a prompt takes on a prefill-only replica: whole chunks for a long prompt, a share of one
    pass for a short one (prompts are packed into a chunk, vLLM ``max_num_batched_tokens``)."""
    if input_tokens <= chunk_tokens:
        return input_tokens / chunk_tokens
    return float(math.ceil(input_tokens / chunk_tokens))


def prefill_service_s(est: ServingEstimate, *, input_tokens: float, assumptions: Assumptions) -> float:
    """Busy time one prompt costs a prefill-only replica, seconds: its FLOPs and TP all-reduces in forwards of
    its own (``prefill_alone_busy_s``, per pipeline stage; no decode step to ride) plus its share of the weight
    stream, the MoE kernels' fixed time per layer and the step overhead per pass."""
    if est.step_model is None:
        return est.prefill_s
    per_pass = prefill_pass_s(est, input_tokens=input_tokens, assumptions=assumptions)
    return est.prefill_alone_busy_s + prefill_passes(input_tokens, assumptions.chunk_tokens) * per_pass


def prefill_pass_s(est: ServingEstimate, *, input_tokens: float, assumptions: Assumptions) -> float:
    """One prompt-only forward pass's fixed time, seconds: the weights streamed once, the MoE experts a chunk of
    these prompts touches, the MoE kernels' fixed time per layer and the step overhead (0 without a step model)."""
    m = est.step_model
    if m is None:
        return 0.0
    touched = experts_touched(m.moe_experts, m.experts_per_token, min(input_tokens, assumptions.chunk_tokens))
    return m.dense_weights_s + m.head_weights_s + m.expert_weights_s * touched + m.expert_layers_s + m.overhead_s


@dataclass(frozen=True, slots=True)
class PrefillAtLoad:
    arrival_requests_per_s: float
    utilisation: float
    p95_wait_s: float
    p95_ttft_s: float  # wait + prefill + KV transfer


def prefill_at_load(
    est: ServingEstimate, rate_rps: float, *, service_s: float, transfer_s: float, assumptions: Assumptions
) -> PrefillAtLoad:
    """p95 TTFT of one prefill replica receiving ``rate_rps`` prompts/s (M/G/1, Allen-Cunneen)."""
    mu = 1.0 / service_s if service_s > 0 else math.inf
    rho = rate_rps / mu if mu > 0 else math.inf
    wait = p95_wait_s(1, rate_rps, mu, assumptions.service_time_scv) if rho < 1 else math.inf
    return PrefillAtLoad(rate_rps, rho, wait, wait + est.prefill_s + transfer_s)


def decode_only(est: ServingEstimate, *, output_tokens: float) -> ServingEstimate:
    """``est`` as a decode-only replica: no prefill in its steps; saturated at ``B / (O · step(B))`` requests/s."""
    step = est.decode_step_s
    rps = est.batch / (output_tokens * step) if step > 0 and output_tokens > 0 else 0.0
    return est.model_copy(
        update={
            "prefill_s": 0.0,
            "prefill_busy_s": 0.0,
            "prefill_alone_busy_s": 0.0,
            "ttft_s": step,
            "tpot_s": step,
            "e2e_s": output_tokens * step,
            "requests_per_s": rps,
            "output_tokens_per_s": rps * output_tokens,
        }
    )
