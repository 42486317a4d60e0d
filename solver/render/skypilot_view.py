"""SkyPilot task YAML for a design's cloud-hosted launches (``sky launch TASK.yaml``), no logic: the cloud,
accelerators and node count come from :class:`clusterplan.design.export_targets.CloudTask`, the run command from
the serving or training launch it carries.

Fields as SkyPilot's task schema names them (sky/utils/schemas.py: ``name``, ``num_nodes``, ``envs``, ``run``,
``resources.cloud``, ``resources.region``, ``resources.accelerators``, ``resources.use_spot``); on-demand,
because the plan priced on-demand instances. A demand profile's burst replicas are a SkyServe service
(``service.readiness_probe``, ``service.replica_policy.min_replicas`` / ``max_replicas`` /
``target_qps_per_replica``, ``resources.ports``; docs.skypilot.co serving/service-yaml-spec and autoscaling). A training run's script reads SkyPilot's node rank and the first
node's address (``SKYPILOT_NODE_RANK``, ``SKYPILOT_NODE_IPS``).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from clusterplan.design.export_targets import CloudTask
from clusterplan.render.export_view import launch_argv, replica_port, trtllm_options
from clusterplan.render.training_export_view import NEEDS, config_files, file_stem, launch_script
from clusterplan.wording.safe import shell_comment, visible_lines

OPTIONS_FILE = "extra-llm-api-options.yaml"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the run script) as YAML literal blocks, as SkyPilot's own examples write them."""


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


_Dumper.add_representer(str, _str)

_NODE_ENV = 'export NODE_RANK="$SKYPILOT_NODE_RANK"\nexport MASTER_ADDR="$(echo "$SKYPILOT_NODE_IPS" | head -n1)"\n'


def task(t: CloudTask) -> dict[str, Any]:
    """One task: resources, nodes, the variables the launch needs and its run script."""
    resources: dict[str, Any] = {"cloud": t.cloud}
    if t.region is not None:
        resources["region"] = t.region
    resources |= {"accelerators": f"{t.accelerator}:{t.gpus_per_node}", "use_spot": False}
    out: dict[str, Any] = {"name": t.name, "num_nodes": t.num_nodes, "resources": resources}
    if t.training is not None:
        tx = t.training
        script = launch_script(tx)
        needs = [n for n in NEEDS if f"${{{n}:?" in script and n not in ("NODE_RANK", "MASTER_ADDR")]
        if needs:
            out["envs"] = dict.fromkeys(needs)  # null: given at launch (sky launch --env NAME=value)
        # the configs the launch reads, written first (a quoted here-document: nothing in them is expanded)
        configs = "".join(f"cat > {name} <<'EOF'\n{text}EOF\n" for name, text in config_files(tx).items())
        out["run"] = (_NODE_ENV if tx.nodes.count > 1 else "") + configs + script.split("\n", 1)[1]
    else:
        x = t.serving
        assert x is not None
        options = ""
        if x.engine == "tensorrt-llm":  # trtllm-serve reads its KV-cache options from a file: written first
            options = f"cat > {OPTIONS_FILE} <<'EOF'\n{json.dumps(trtllm_options(x), indent=2)}\nEOF\n"
        out["run"] = options + " ".join(shlex.quote(a) for a in launch_argv(x, OPTIONS_FILE)) + "\n"
        if t.max_replicas is not None:  # a SkyServe service: its replicas between the autoscaler's bounds
            resources["ports"] = replica_port(x, 0)
            policy: dict[str, float | None] = {"min_replicas": t.min_replicas, "max_replicas": t.max_replicas}
            policy["target_qps_per_replica"] = round(t.target_qps_per_replica or 0.0, 3)
            out["service"] = {"readiness_probe": "/health", "replica_policy": policy}
    return out


def skypilot_files(tasks: list[CloudTask]) -> dict[str, str]:
    """File name -> task YAML, one per cloud-hosted launch SkyPilot can place (``skypilot.txt``: those it cannot)."""
    files: dict[str, str] = {}
    skipped: list[str] = []
    for n, t in enumerate(tasks, start=1):
        if t.cloud is None or t.accelerator is None:
            what = f"cloud '{t.provider}'" if t.cloud is None else f"GPU '{t.gpu}'"
            skipped.append(f"{t.name}: SkyPilot has no name for the {what}; launch it with the provider's own tools")
            continue
        copies = f"; launch it {t.copies} times (one replica each)" if t.copies > 1 else ""
        if t.max_replicas is not None:
            copies = f"; a service of {t.min_replicas} to {t.max_replicas} replicas: sky serve up this file"
        head = (
            shell_comment(
                f"{t.name}: {t.num_nodes} node(s) x {t.gpus_per_node} {t.accelerator} on {t.provider}{copies}. "
                "sky launch this file"
            )
            + "\n"
        )
        files[f"{file_stem(n, t.name, 'skypilot')}.yaml"] = head + yaml.dump(task(t), Dumper=_Dumper, sort_keys=False)
    if skipped:
        files["skypilot.txt"] = "\n".join(skipped) + "\n"
    return {name: visible_lines(text) for name, text in files.items()}
