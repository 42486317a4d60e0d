"""Kubernetes manifests of a design's serving replica groups for ``clusterplan export`` (no logic: counts and
rates come from :class:`clusterplan.design.export_targets.Scaling`, the command from
:func:`clusterplan.render.export_view.launch_argv`).

The form: plain core objects, one set per replica group (a prefill or decode pool is a group of its own): an
``apps/v1`` Deployment (the engine's container, the replica's GPUs as ``nvidia.com/gpu``), a ``v1`` Service, an
``autoscaling/v2`` HorizontalPodAutoscaler between the replicas the average demand needs and the plan's count at
peak (both with the N+k spares), and a ``policy/v1`` PodDisruptionBudget letting at most k replicas go at once.
Chosen over llm-d and the vLLM production-stack Helm values because it runs on any cluster with the NVIDIA
device plugin, needs no operator, gateway or chart version, and serves every engine the plan may choose (both of
those serve vLLM only); their routers can sit in front of these Services.

The autoscaler scales on requests per second per pod, a Pods metric a metrics adapter serves (for vLLM the rate
of ``vllm:request_success_total``); its target is the rate one replica takes with the p95 targets met.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from clusterplan.catalog.launchers import load_launchers
from clusterplan.design.export_targets import Scaling
from clusterplan.render.export_view import launch_argv, replica_port, trtllm_options
from clusterplan.wording.safe import visible

RATE_METRIC = "requests_per_second"
# What the autoscaler's minimum stands for: the average demand's replicas, or a demand profile's base held every hour
FLOOR = {
    False: "at the average demand",
    True: "held every hour (the demand profile's base; the rest rented by the hour)",
}
_SHM = "dshm"  # NCCL's shared memory between the replica's GPU processes


class _NoAliases(yaml.SafeDumper):
    """Every mapping written out in full (a label set repeated, never ``&id001`` / ``*id001``)."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _name(s: Scaling) -> str:
    """A DNS-1123 name for the group: workload, pool role, GPU and engine (a pool may hold groups of two GPUs)."""
    x = s.launch
    raw = "-".join(p for p in (x.workload, "" if x.role == "aggregated" else x.role, x.gpu, x.engine) if p)
    return re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:63].strip("-") or "serving"


def manifests(s: Scaling) -> list[dict[str, Any]]:
    """The Deployment, Service and HorizontalPodAutoscaler of one replica group, its PodDisruptionBudget with
    spares, and TensorRT-LLM's options as a ConfigMap."""
    x = s.launch
    name = _name(s)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": x.role}
    gpus = str(s.gpus_per_replica)
    port = replica_port(x, 0)  # every pod listens where the launch command puts replica 0
    container: dict[str, Any] = {
        "name": "engine",
        "image": load_launchers()["kubernetes"].images.get(x.engine, x.engine),
        "command": launch_argv(x, f"/config/{name}-llm-api-options.yaml"),
        "ports": [{"containerPort": port, "name": "http"}],
        "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 10},
        "volumeMounts": [{"name": _SHM, "mountPath": "/dev/shm"}],
    }
    pod: dict[str, Any] = {"containers": [container], "volumes": [{"name": _SHM, "emptyDir": {"medium": "Memory"}}]}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": s.min_replicas, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }  # fmt: skip
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": port, "targetPort": port}]},
    }  # fmt: skip
    metric = {"name": RATE_METRIC}
    target = {"type": "AverageValue", "averageValue": f"{round(s.target_rps_per_replica * 1000)}m"}
    hpa = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": s.min_replicas, "maxReplicas": s.max_replicas,
            "metrics": [{"type": "Pods", "pods": {"metric": metric, "target": target}}],
        },
    }  # fmt: skip
    out: list[dict[str, Any]] = [deployment, service, hpa]
    if s.redundancy:  # N+k: at most k replicas may be drained at once (none spare: no budget to give)
        out.append({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"maxUnavailable": s.redundancy, "selector": {"matchLabels": labels}},
        })  # fmt: skip
    if x.engine == "tensorrt-llm":  # trtllm-serve reads its KV-cache and speculative options from a file
        options = f"{name}-llm-api-options.yaml"
        out.insert(0, {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {options: json.dumps(trtllm_options(x), indent=2) + "\n"},
        })  # fmt: skip
        pod["volumes"].append({"name": "config", "configMap": {"name": name}})
        container["volumeMounts"].append({"name": "config", "mountPath": "/config"})
    return out


def k8s_file(scalings: list[Scaling]) -> str:
    """One multi-document YAML of every serving replica group, each group's plan figures as a comment."""
    parts = [
        "# Kubernetes manifests of the design's serving replica groups (clusterplan export). Apply with\n"
        "# kubectl apply -f; the autoscaler reads the Pods metric "
        f"'{RATE_METRIC}' (requests/s per pod) from a metrics adapter.\n"
    ]
    for s in scalings:
        x = s.launch
        parts.append(
            f"# {visible(x.workload)} ({x.role}): {s.max_replicas} replica(s) at peak (N+{s.redundancy}), {s.min_replicas} "
            f"{FLOOR[s.profile]}; {s.gpus_per_replica} x {x.gpu_name} each; {s.target_rps_per_replica:,.3g} req/s "
            "per replica with the p95 targets met\n"
            + (
                f"# not written: one replica spans {s.gpus_per_replica} GPUs, more than the {s.gpus_per_node} of one "
                "machine, and a Deployment's pod runs on one node; run it as a LeaderWorkerSet\n"
                if s.spans_nodes
                else yaml.dump_all(manifests(s), Dumper=_NoAliases, sort_keys=False, explicit_start=True)
            )
        )
    return "".join(parts)
