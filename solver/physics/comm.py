"""Collective communication times and the link a group of GPUs talks over.

Ring collectives (Patarasuk & Yuan 2009; NCCL's ring algorithm): an all-reduce of ``M`` bytes over ``N``
GPUs moves ``2(N-1)/N · M`` bytes through each GPU's slowest link; an all-gather or reduce-scatter of a
``M``-byte result moves ``(N-1)/N · M``. Time = ``α + volume / (bandwidth · efficiency)``
(GenZ ``collective_times.py``; llm-analysis ``get_latency_fwd_per_tp_comm``).

Bandwidths in the catalog are bidirectional per GPU; a ring sends in one direction, so the usable
bandwidth is half the bidirectional figure (NVLink 900 GB/s bidirectional -> 450 GB/s per direction,
as Calculon's ``h100_80g_nvl8.json`` uses). The inter-node figure in the assumptions is already per
direction per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clusterplan.catalog_schema import GpuSpec
from clusterplan.physics.factors import Assumptions
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
    at 1 for them.
    """
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
