"""Collective communication times and the link a group of GPUs talks over.

Ring collectives (Patarasuk & Yuan 2009; NCCL's ring algorithm): an all-reduce of ``M`` bytes over ``N``
GPUs moves ``2(N-1)/N · M`` bytes through each GPU's slowest link; an all-gather or reduce-scatter of a
``M``-byte result moves ``(N-1)/N · M``. Time = ``α + volume / (bandwidth · efficiency)``
(GenZ ``collective_times.py``; llm-analysis ``get_latency_fwd_per_tp_comm``).

Bandwidths in the catalog are bidirectional per GPU; a ring sends in one direction, so the usable
bandwidth is half the bidirectional figure (NVLink 900 GB/s bidirectional -> 450 GB/s per direction,
as Calculon's ``h100_80g_nvl8.json`` uses). The inter-node figure in the assumptions is already per
direction per GPU.

All-reduces follow NCCL's own cost model (``src/graph/tuning.cc``): a ring all-reduce takes ``2(n-1)`` steps, each
paying a per-hop latency, after a base latency, and NCCL picks whichever protocol is fastest for the message: LL
(low latency, a quarter of the bandwidth), LL128 (92 %, NVLink only) or Simple (full bandwidth, the longest hops).
Small decode messages ride LL at ``6.6 + 2(n-1)·0.6`` µs over NVLink; a prefill's megabytes ride LL128 or Simple,
whose start-up grows by 1.9-3.4 µs per hop: 25 µs on 4 GPUs and 41 µs on 8 instead of a flat few microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clusterplan.catalog.schema import GpuSpec
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.memo import HeldMemo
from clusterplan.units import BYTES_PER_GB

LinkKind = Literal["nvlink", "infinity_fabric", "pcie", "network", "none"]


@dataclass(frozen=True)
class Link:
    """The slowest link a collective crosses: kind, one-direction bandwidth (GB/s) and start-up latency (s)."""

    kind: LinkKind
    bandwidth_gb_per_s: float
    latency_s: float

    def describe(self) -> str:
        names = {
            "nvlink": "NVLink",
            "infinity_fabric": "Infinity Fabric",
            "pcie": "PCIe",
            "network": "inter-node network",
            "none": "no link",
        }
        return f"{names[self.kind]} {self.bandwidth_gb_per_s:,.0f} GB/s"


NO_LINK = Link("none", float("inf"), 0.0)


def unidirectional_gb_per_s(bidirectional_gb_per_s: float) -> float:
    """One direction of a full-duplex link: ``bidir / 2`` GB/s (NVIDIA quotes NVLink/PCIe bidirectional)."""
    return bidirectional_gb_per_s / 2.0


def link_for_group(
    gpu: GpuSpec,
    *,
    group_size: int,
    spans_nodes: bool,
    assumptions: Assumptions,
    members_per_node: int = 1,
) -> Link:
    """The slowest link among ``group_size`` GPUs that talk in one collective.

    Inside one node: NVLink/Infinity Fabric when the group fits in the scale-up domain, else PCIe.
    Across nodes: the per-GPU inter-node network (or PCIe if that is slower). When ``members_per_node`` GPUs
    of the group share each node, NCCL runs one ring per NIC (multi-rail): each ring crosses the network
    on a different GPU's NIC, so a ring collective moves at ``min(intra-node link, m x per-GPU network)``.
    NCCL's maintainers: "DGX-1 can get 48 GB/s because we have 4 IB adapters instead of 1" (100 Gb/s each;
    NVIDIA/nccl-tests#29); 3 nodes of 8 A100 with 4 HDR NICs reach 85-96 GB/s bus bandwidth against the
    100 GB/s of their 4 NICs (NVIDIA/nccl-tests#119); "for NDR @ 400Gbps you should see 46-48GB/s per NIC"
    (NVIDIA/nccl-tests#290). Point-to-point sends (pipeline stages) use one NIC: leave ``members_per_node``
    at 1 for them. Memoised.
    """
    key = (id(gpu), id(assumptions), group_size, spans_nodes, members_per_node)
    return _LINKS.get_or_make(
        key, (gpu, assumptions), _link_for_group, gpu, group_size, spans_nodes, assumptions, members_per_node
    )


# link_for_group per (GPU, assumptions, group): a training search asks some 30,000 times for a few dozen.
_LINKS: HeldMemo[Link] = HeldMemo()


def _link_for_group(
    gpu: GpuSpec, group_size: int, spans_nodes: bool, assumptions: Assumptions, members_per_node: int
) -> Link:
    """:func:`link_for_group`, computed."""
    if group_size <= 1:
        return NO_LINK
    if gpu.scale_up != "pcie" and group_size <= gpu.scale_up_domain and not spans_nodes:
        kind: LinkKind = "nvlink" if gpu.scale_up == "nvlink" else "infinity_fabric"
        return Link(kind, unidirectional_gb_per_s(gpu.scale_up_bandwidth_gb_per_s), assumptions.scale_up_latency_s)
    pcie = Link("pcie", unidirectional_gb_per_s(gpu.pcie_bandwidth_gb_per_s), assumptions.pcie_latency_s)
    if not spans_nodes:
        return pcie
    network = Link("network", assumptions.inter_node_bandwidth_gb_per_s, assumptions.network_latency_s)
    per_rail = network if network.bandwidth_gb_per_s <= pcie.bandwidth_gb_per_s else pcie
    rails = max(1, min(members_per_node, group_size))
    if rails == 1:
        return per_rail
    if gpu.scale_up != "pcie" and rails <= gpu.scale_up_domain:
        intra = unidirectional_gb_per_s(gpu.scale_up_bandwidth_gb_per_s)
    else:
        intra = pcie.bandwidth_gb_per_s
    return Link("network", min(intra, rails * per_rail.bandwidth_gb_per_s), assumptions.network_latency_s)


def ring_allreduce_s(message_bytes: float, n: int, link: Link, efficiency: float) -> float:
    """All-reduce of ``message_bytes`` over ``n`` GPUs: ``α + 2(n-1)/n · M / (B · eff)`` seconds.

    Source: ring all-reduce (Patarasuk & Yuan 2009); GenZ ``collective_times.py``.
    """
    if n <= 1 or message_bytes <= 0:
        return 0.0
    volume = 2.0 * (n - 1) / n * message_bytes
    return link.latency_s + volume / (link.bandwidth_gb_per_s * BYTES_PER_GB * efficiency)


@dataclass(frozen=True)
class NcclProtocol:
    """One NCCL protocol of the ring algorithm: latencies (s) and the share of the link bandwidth it reaches."""

    name: str
    base_latency_s: float
    hop_latency_s: dict[LinkKind, float]
    bandwidth_fraction: float


# NCCL src/graph/tuning.cc (NVIDIA/nccl@b6475625, 2.19-era): baseLat (Ring row) and hwLat (Ring, NVLink and PCI
# rows), in us; LL moves 8-byte lines carrying 4 bytes of data with a flag (busBw / 4), LL128 120 of every 128 bytes
# (busBw x 0.92). NCCL enables LL128 only over NVLink (``typeIntra <= PATH_NVB``); Infinity Fabric (RCCL) is taken
# like NVLink. Inside one node only: across nodes NCCL switches to trees and NVLS, which this table does not model.
NCCL_RING_PROTOCOLS: tuple[NcclProtocol, ...] = (
    NcclProtocol("LL", 6.6e-6, {"nvlink": 0.6e-6, "infinity_fabric": 0.6e-6, "pcie": 1.0e-6}, 0.25),
    NcclProtocol("LL128", 14.0e-6, {"nvlink": 1.9e-6, "infinity_fabric": 1.9e-6}, 0.92),
    NcclProtocol("Simple", 8.4e-6, {"nvlink": 3.4e-6, "infinity_fabric": 3.4e-6, "pcie": 5.7e-6}, 1.0),
)


def nccl_allreduce_terms(n: int, link: Link, efficiency: float) -> list[tuple[float, float]]:
    """``(latency_s, seconds_per_message_byte)`` of a ring all-reduce over ``n`` GPUs, one pair per NCCL protocol.

    ``latency = baseLat + 2(n-1)·hwLat`` and ``per byte = 2(n-1)/n / (B · eff · protocol share)`` (NCCL
    ``tuning.cc``: ``ncclTopoTuneModel`` latencies and bus bandwidths, ``ncclTopoGetAlgoTime``). Empty when ``n <= 1``.
    Across nodes (``network``) one plain ring term, ``(α, 2(n-1)/n / (B · eff))``, as :func:`ring_allreduce_s`.
    """
    if n <= 1 or link.kind == "none":
        return []
    steps = 2 * (n - 1)
    bw_bytes_per_s = link.bandwidth_gb_per_s * BYTES_PER_GB * efficiency
    if link.kind == "network":
        return [(link.latency_s, steps / n / bw_bytes_per_s)]
    out: list[tuple[float, float]] = []
    for proto in NCCL_RING_PROTOCOLS:
        hop = proto.hop_latency_s.get(link.kind)
        if hop is None:
            continue
        out.append((proto.base_latency_s + steps * hop, steps / n / (bw_bytes_per_s * proto.bandwidth_fraction)))
    return out


# nccl_allreduce_terms per (link, GPUs, efficiency): a training search times some 7,000 TP all-reduces over a few links.
_ALLREDUCE_TERMS: HeldMemo[tuple[tuple[float, float], ...]] = HeldMemo()


def nccl_allreduce_s(message_bytes: float, n: int, link: Link, efficiency: float) -> float:
    """All-reduce of ``message_bytes`` over ``n`` GPUs as NCCL times it: the fastest protocol's
    ``baseLat + 2(n-1)·hwLat + 2(n-1)/n · M / (B · eff · share)`` seconds.

    Source: NCCL ``src/graph/tuning.cc`` (NVIDIA/nccl@b6475625); ring volume Patarasuk & Yuan 2009.
    """
    if message_bytes <= 0:
        return 0.0
    terms = _ALLREDUCE_TERMS.get_or_make((id(link), n, efficiency), (link,), _allreduce_terms, n, link, efficiency)
    return min((lat + message_bytes * per_byte for lat, per_byte in terms), default=0.0)


def _allreduce_terms(n: int, link: Link, efficiency: float) -> tuple[tuple[float, float], ...]:
    """:func:`nccl_allreduce_terms`, as the memo keeps them."""
    return tuple(nccl_allreduce_terms(n, link, efficiency))


def ring_allgather_s(total_bytes: float, n: int, link: Link, efficiency: float) -> float:
    """All-gather (or reduce-scatter) whose full result is ``total_bytes``: ``α + (n-1)/n · M / (B · eff)``.

    Source: ring all-gather (NCCL); ZeRO paper (Rajbhandari et al. 2020, arXiv:1910.02054 §7) volume accounting.
    """
    if n <= 1 or total_bytes <= 0:
        return 0.0
    volume = (n - 1) / n * total_bytes
    return link.latency_s + volume / (link.bandwidth_gb_per_s * BYTES_PER_GB * efficiency)


def p2p_s(message_bytes: float, link: Link, efficiency: float) -> float:
    """Point-to-point send (pipeline stage hop): ``α + M / (B · eff)`` seconds."""
    if message_bytes <= 0 or link.kind == "none":
        return 0.0
    return link.latency_s + message_bytes / (link.bandwidth_gb_per_s * BYTES_PER_GB * efficiency)


def hierarchical_allgather_s(
    total_bytes: float, n: int, members_per_node: int, intra: Link, network: Link, efficiency: float
) -> float:
    """All-gather (or reduce-scatter) of a ``total_bytes`` result over ``n`` GPUs, ``k = members_per_node`` on each
    node: inside each node over NVLink first, then among the ``n/k`` nodes, each GPU moving its ``1/k`` share on
    its own NIC: ``(k-1)/k · M / B_intra + (n/k - 1)/(n/k) · M / (k · B_net)`` plus both start-ups.

    NCCL's hierarchical (NVLink-then-network) collectives: PAT / tree-of-rings, and Megatron-LM's
    ``--num-distributed-optimizer-instances`` partial reduce-scatter (intra-node first). Falls back to one ring
    (:func:`ring_allgather_s`) when the group sits in one node or has one member per node.
    """
    if n <= 1 or total_bytes <= 0:
        return 0.0
    k = max(1, min(members_per_node, n))
    if k <= 1 or network.kind != "network" or intra.kind == "none":
        return ring_allgather_s(total_bytes, n, network if network.kind != "none" else intra, efficiency)
    nodes = max(1, n // k)
    inside = ring_allgather_s(total_bytes, k, intra, efficiency)
    across = ring_allgather_s(total_bytes / k, nodes, network, efficiency)
    return inside + across


def exposed_s(comm_s: float, window_s: float, *, floor_s: float = 0.0) -> float:
    """What a collective leaves on the critical path when it runs beside ``window_s`` of independent compute:
    ``max(floor, comm - window)`` (the part of the communication the compute cannot cover; ``floor``: the piece
    that can never overlap, such as the last gradient bucket or the first chunk of a pipelined all-gather)."""
    return max(min(floor_s, comm_s), comm_s - max(window_s, 0.0), 0.0)


def all_to_all_terms(n: int, link: Link, efficiency: float) -> tuple[float, float]:
    """``(latency_s, seconds_per_byte_sent)`` of one all-to-all over ``n`` GPUs (MoE dispatch or combine).

    Each GPU sends its remote share straight to its peers (DeepEP; NCCL's all-to-all is ``n - 1`` sends in
    parallel), so the time is ``α + bytes sent per GPU / (B · eff)`` over the slowest link: NVLink inside the
    scale-up domain, the per-GPU network across it. ``efficiency``: the achieved share of the link
    (``Assumptions.moe_all_to_all_efficiency``). ``(0, 0)`` when ``n <= 1``.
    """
    if n <= 1 or link.kind == "none":
        return 0.0, 0.0
    return link.latency_s, 1.0 / (link.bandwidth_gb_per_s * BYTES_PER_GB * efficiency)


def all_to_all_s(bytes_sent_per_gpu: float, n: int, link: Link, efficiency: float) -> float:
    """One all-to-all in which every GPU sends ``bytes_sent_per_gpu`` to its ``n - 1`` peers, seconds."""
    if bytes_sent_per_gpu <= 0:
        return 0.0
    latency, per_byte = all_to_all_terms(n, link, efficiency)
    return latency + bytes_sent_per_gpu * per_byte
