"""Where ``clusterplan export``'s launches run: Kubernetes autoscaling bounds for each serving replica group, and
the cloud each cloud-hosted launch asks SkyPilot for.

Inputs are the records the engines' and frameworks' exports already built (:class:`~clusterplan.design.export.Launch`,
:class:`~clusterplan.design.export_training.TrainingLaunch`) and the design's own figures (its replica groups,
redundancy and hardware lines); nothing is re-estimated. Rendering is :mod:`clusterplan.render.k8s_view` and
:mod:`clusterplan.render.skypilot_view`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterplan.catalog.launchers import load_launchers
from clusterplan.plan import ServingPlan

if TYPE_CHECKING:
    from clusterplan.design.export import Launch
    from clusterplan.design.export_training import TrainingLaunch
    from clusterplan.plan import Design, HardwareLine, ReplicaGroup

# A group's average demand is a whole number of replicas above this tolerance (float noise in the share).
_CEIL_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Scaling:
    """One serving replica group's autoscaling bounds, in the plan's figures.

    ``max_replicas``: the plan's count (peak demand with every target met, plus the N+k spares); ``min_replicas``:
    the replicas the group's share of the average demand needs at their rated rate, plus the same ``redundancy``
    spares (never above the maximum), or, under a demand profile, the replicas the plan holds every hour (its
    autoscaler's minimum: the burst above it is rented by the hour); ``target_rps_per_replica``: the rate one replica
    takes with the p95 targets met, which the autoscaler holds each replica to.
    """

    launch: Launch
    max_replicas: int
    min_replicas: int
    redundancy: int
    target_rps_per_replica: float
    gpus_per_node: int  # the largest machine of the replica's GPU in the design: a pod runs on one
    profile: bool = False  # min_replicas is a demand profile's base (held every hour), not the average's need

    @property
    def gpus_per_replica(self) -> int:
        return self.launch.tp * self.launch.pp

    @property
    def spans_nodes(self) -> bool:
        """One replica needs more GPUs than one machine holds (a pipeline over nodes): no single pod runs it."""
        return self.gpus_per_replica > self.gpus_per_node


@dataclass(frozen=True)
class CloudTask:
    """One launch on a cloud, as SkyPilot is asked for it: ``copies`` tasks of ``num_nodes`` nodes with
    ``gpus_per_node`` GPUs each. ``cloud`` and ``accelerator`` are SkyPilot's names (None: it has none for the
    provider or GPU, and the task is not written)."""

    name: str
    provider: str
    cloud: str | None
    region: str | None
    gpu: str
    accelerator: str | None
    gpus_per_node: int
    num_nodes: int
    copies: int
    serving: Launch | None = None
    training: TrainingLaunch | None = None
    # a SkyServe service (a demand profile's replicas on this offer): its replica_policy bounds and per-replica rate
    min_replicas: int | None = None
    max_replicas: int | None = None
    target_qps_per_replica: float | None = None


def _groups(chosen: Design, launches: list[Launch]) -> Iterator[tuple[ServingPlan, ReplicaGroup, Launch]]:
    """Each serving launch beside the plan's replica group it was built from (export_design's order)."""
    groups = [(wp, g) for wp in chosen.workloads if isinstance(wp, ServingPlan) for g in wp.groups]
    assert len(groups) == len(launches), "one launch per replica group"
    for (wp, g), x in zip(groups, launches, strict=True):
        assert x.workload == wp.workload and x.role == g.role
        yield wp, g, x


def serving_scaling(chosen: Design, launches: list[Launch]) -> list[Scaling]:
    """The autoscaling bounds of every serving replica group of the design."""
    out: list[Scaling] = []
    for wp, g, x in _groups(chosen, launches):
        rate = g.rate_rps or g.rate_no_targets_rps  # with the p95 targets met (no targets: the utilisation ceiling)
        average_rps = x.expected.request_rate_rps * g.replicas  # the group's share of the average demand
        needed = math.ceil(average_rps / rate - _CEIL_TOLERANCE) if rate > 0 else g.replicas
        low = min(g.replicas, max(needed, 1) + wp.redundancy)
        if wp.autoscaler is not None:  # a demand profile: the replicas held every hour; the burst is rented above
            low = g.replicas - g.burst_replicas
        node = max((h.gpus_per_unit for h in chosen.hardware if h.gpu == g.gpu), default=x.tp * x.pp)
        out.append(Scaling(x, g.replicas, low, wp.redundancy, rate, node, profile=wp.autoscaler is not None))
    return out


def _cloud(line: HardwareLine) -> tuple[str | None, str | None, str | None]:
    sky = load_launchers()["skypilot"]
    region = line.region if line.region and line.region != "global" else None
    return sky.clouds.get(line.provider), region, sky.accelerators.get(line.gpu)


def cloud_tasks(chosen: Design, launches: list[Launch], training: list[TrainingLaunch]) -> list[CloudTask]:
    """The design's cloud-hosted launches: each training run on its cloud line's instances, each serving replica
    group's cloud replicas (one task per replica)."""
    out: list[CloudTask] = []
    for t in training:
        line = next((h for h in chosen.hardware if h.kind == "cloud" and h.trains == t.workload), None)
        if line is None:
            continue
        cloud, region, accelerator = _cloud(line)
        out.append(
            CloudTask(
                name=t.workload, provider=line.provider, cloud=cloud, region=region, gpu=line.gpu,
                accelerator=accelerator, gpus_per_node=t.nodes.gpus[0], num_nodes=t.nodes.count, copies=1,
                training=t,
            )
        )  # fmt: skip
    serving_lines = [h for h in chosen.hardware if h.kind == "cloud" and h.trains is None]
    for wp, g, x in _groups(chosen, launches):
        line = next((h for h in serving_lines if h.gpu == g.gpu), None)
        name = x.workload if x.role == "aggregated" else f"{x.workload}-{x.role}"
        burst = wp.autoscaler.burst_offering if wp.autoscaler is not None and g.burst_replicas else None
        held = g.cloud_replicas
        if burst is not None and line is not None and line.offering == burst:
            held = 0  # the base rents the burst's own offer: one service from the base to the peak (below)
        if held and line is not None:
            cloud, region, accelerator = _cloud(line)
            out.append(
                CloudTask(
                    name=name, provider=line.provider, cloud=cloud, region=region, gpu=g.gpu, accelerator=accelerator,
                    gpus_per_node=x.tp * x.pp, num_nodes=1, copies=held, serving=x,
                )
            )  # fmt: skip
        if burst is not None:
            out.append(_burst_service(name, x, g, burst, g.cloud_replicas - held))
    return out


def _burst_service(name: str, x: Launch, g: ReplicaGroup, offering: str, base: int) -> CloudTask:
    """A demand profile's burst as a SkyServe service on the offer the plan rents it on: from ``base`` replicas (the
    base's own, where it rents that offer; else 0) to ``base`` + the burst, each held to its rate within the targets."""
    sky = load_launchers()["skypilot"]
    provider = offering.split(":")[1]
    return CloudTask(
        name=f"{name}-burst" if not base else name, provider=provider, cloud=sky.clouds.get(provider), region=None,
        gpu=g.gpu, accelerator=sky.accelerators.get(g.gpu), gpus_per_node=x.tp * x.pp, num_nodes=1, copies=1,
        serving=x, min_replicas=base, max_replicas=base + g.burst_replicas,
        target_qps_per_replica=g.rate_rps or g.rate_no_targets_rps,
    )  # fmt: skip
