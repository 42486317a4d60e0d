"""``clusterplan export`` beyond the engines' launch commands: training and fine-tuning launches (Megatron-LM under
torchrun, torchtune's LoRA recipes), SkyPilot tasks for cloud launches, Kubernetes manifests of the serving groups.

Every option, config key and task field emitted is in the launcher's accepted list (``catalog/launchers.yaml``, read
from each tool's source); each carries the plan's layout; a layout the framework cannot run is refused by code."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterplan.catalog.launchers import load_launchers
from clusterplan.catalog.load import Catalog
from clusterplan.design.export_training import Nodes, TrainingLaunch, _launch
from clusterplan.physics.reasons import FrameworkCannotRun
from clusterplan.plan import TrainingPlan
from clusterplan.render import training_export_view as view
from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from conftest import DATA, EXAMPLES_DIR, run_cli

CASES = DATA / "cases"  # users' cases the export must handle (copies of the reported requirement files)
LAUNCHERS = load_launchers()


def _plan(**over: Any) -> TrainingPlan:
    fields: dict[str, Any] = dict(
        kind="training", workload="pretrain", model="Llama 3.1 70B", gpu="h100-sxm", gpu_name="H100", tp=4, pp=4,
        dp=8, zero_stage=1, recompute="full", micro_batch=1, gpus=256, cp=2, ep=1, virtual_stages=5,
        recompute_layers=10, deployment="owned", time_to_train_s=1e6, deadline_s=2e6, tokens_per_s=1e5, mfu=0.4,
        memory_gib_per_gpu=70.0, gpu_memory_gib=79.0, cloud_instance=None, cloud_instances=0, cloud_cost_usd=0.0,
    )  # fmt: skip
    fields.update(over)
    return TrainingPlan(**fields)


def _training(catalog: Catalog, plan: TrainingPlan, **over: Any) -> TrainingLaunch:
    doc: dict[str, Any] = dict(kind="training", name=plan.workload, tokens=1e12, deadline=2e6, sequence_length=8192,
                               global_batch_tokens=16_000_000)  # fmt: skip
    doc.update(over)
    w = FinetuneWorkload(**doc) if doc["kind"] == "finetune" else TrainingWorkload(**doc)
    nodes = Nodes((8,) * (plan.gpus // 8) if plan.gpus >= 8 else (plan.gpus,))
    return _launch(catalog.models["llama-3.1-70b"], catalog, w, plan, nodes)


def _options(argv: list[str]) -> list[str]:
    """The option names of an argument list (``--flag`` tokens)."""
    return [a for a in argv if a.startswith("--")]


def _unknown(argv: list[str], accepted: list[str]) -> list[str]:
    return [o for o in _options(argv) if o not in set(accepted)]


def _values(argv: list[str]) -> dict[str, str]:
    """``--flag value`` pairs (a flag followed by another flag is a switch: value '')."""
    out: dict[str, str] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            out[a] = "" if nxt.startswith("--") else nxt
    return out


# ---------------------------------------------------------------------------------------------------------------
# Megatron-LM: the plan's layout in its own arguments, each one in its accepted list
# ---------------------------------------------------------------------------------------------------------------


def test_the_accepted_lists_carry_their_source_and_the_arguments_the_layout_needs() -> None:
    megatron = LAUNCHERS["megatron-lm"]
    assert "Megatron-LM" in megatron.source and megatron.as_of
    for flag in ("--tensor-model-parallel-size", "--context-parallel-size", "--pipeline-model-parallel-size",
                 "--num-layers-per-virtual-pipeline-stage", "--recompute-granularity", "--recompute-method",
                 "--recompute-num-layers", "--use-distributed-optimizer", "--micro-batch-size", "--global-batch-size",
                 "--seq-length", "--bf16", "--fp8-format"):  # fmt: skip
        assert flag in megatron.arguments
    assert "--tensor-parallel-size" not in megatron.arguments  # vLLM's name, not Megatron's


def test_an_invented_argument_is_caught_by_the_list_check(catalog: Catalog) -> None:
    argv = [str(a) for a in view.megatron_args(_training(catalog, _plan()))]
    assert _unknown(argv, LAUNCHERS["megatron-lm"].arguments) == []
    assert _unknown([*argv, "--tensor-parallel-degree", "2"], LAUNCHERS["megatron-lm"].arguments) == [
        "--tensor-parallel-degree"
    ]


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"zero_stage": 2, "pp": 1, "virtual_stages": 1, "recompute": "selective", "recompute_layers": 0},
        {"zero_stage": 3, "pp": 1, "virtual_stages": 1, "recompute": "none", "recompute_layers": 0, "tp": 1},
        {"zero_stage": 0, "cp": 1, "kind": "finetune", "workload": "tune"},
    ],
)
def test_every_megatron_argument_emitted_is_one_megatron_accepts(catalog: Catalog, over: dict[str, Any]) -> None:
    kind = {"kind": "finetune", "method": "full"} if over.get("kind") == "finetune" else {"precision": "fp8"}
    x = _training(catalog, _plan(**over), **kind)
    argv = [str(a) for a in view.megatron_args(x)]
    assert _unknown(argv, LAUNCHERS["megatron-lm"].arguments) == []
    assert _unknown([str(a) for a in view.torchrun_args(x)], LAUNCHERS["torchrun"].arguments) == []


def test_megatron_carries_the_plans_layout(catalog: Catalog) -> None:
    # TP 4, CP 2, PP 4 x 5 virtual stages over Llama 3.1 70B's 80 layers: 4 layers per virtual stage; 10 layers of
    # each stage fully recomputed, 2 per model chunk (Megatron's block recompute counts a chunk's layers)
    x = _training(catalog, _plan(), precision="fp8")
    v = _values([str(a) for a in view.megatron_args(x)])
    assert v["--tensor-model-parallel-size"] == "4" and v["--context-parallel-size"] == "2"
    assert v["--pipeline-model-parallel-size"] == "4" and v["--num-layers-per-virtual-pipeline-stage"] == "4"
    assert v["--recompute-granularity"] == "full" and v["--recompute-method"] == "block"
    assert v["--recompute-num-layers"] == "2"
    assert "--use-distributed-optimizer" in v and "--sequence-parallel" in v
    assert v["--micro-batch-size"] == "1" and v["--seq-length"] == "8192"
    assert v["--bf16"] == "" and v["--fp8-format"] == "hybrid"
    assert v["--num-query-groups"] == "8"  # GQA: 8 KV heads
    # 16M tokens = 1,954 sequences of 8,192 (rounded up), in whole rounds of dp 8 x micro-batch 1: 245 rounds
    assert x.micro_batches == 245 and v["--global-batch-size"] == str(245 * 8)
    assert int(v["--global-batch-size"]) % (8 * 1) == 0  # Megatron asserts it divides by dp x micro-batch


def test_zero_stages_map_to_the_distributed_optimizer_and_megatron_fsdp(catalog: Catalog) -> None:
    def values(zero: int) -> dict[str, str]:
        plan = _plan(zero_stage=zero, pp=1, virtual_stages=1, recompute="none", recompute_layers=0)
        return _values([str(a) for a in view.megatron_args(_training(catalog, plan))])

    assert "--use-distributed-optimizer" not in values(0) and "--use-megatron-fsdp" not in values(0)
    assert values(2)["--data-parallel-sharding-strategy"] == "optim_grads"
    assert values(3)["--data-parallel-sharding-strategy"] == "optim_grads_params"


def test_megatron_refuses_what_it_has_no_form_of(catalog: Catalog) -> None:
    x = _training(catalog, _plan(memory_options=["adamw8bit"]), optimizer="adafactor")
    assert {(r.feature, r.value) for r in x.refusals} == {("memory_option", "adamw8bit"), ("optimizer", "adafactor")}
    assert view.training_files([x]).keys() == {"training.txt"}  # no launch written for a refused layout
    assert "cannot run the plan's optimizer adafactor" in view.training_files([x])["training.txt"]


# ---------------------------------------------------------------------------------------------------------------
# torchtune: LoRA and QLoRA, with a refusal where the recipe cannot run the plan
# ---------------------------------------------------------------------------------------------------------------


def _finetune(catalog: Catalog, method: str = "qlora", **over: Any) -> TrainingLaunch:
    fields: dict[str, Any] = dict(kind="finetune", workload="tune", pp=1, tp=1, cp=1, dp=2, zero_stage=0,
                                  virtual_stages=1, recompute="full", recompute_layers=80, gpus=2, micro_batch=2)  # fmt: skip
    fields.update(over)
    return _training(catalog, _plan(**fields), kind="finetune", method=method, lora_rank=64, global_batch_tokens=65536,
                     sequence_length=4096)  # fmt: skip


def test_torchtune_refuses_pipeline_stages_it_has_no_schedule_for(catalog: Catalog) -> None:
    # the QLoRA 70B budget case's layout: PP 2 with 20 virtual stages on two L40S
    x = _finetune(catalog, pp=2, virtual_stages=20, dp=1)
    assert x.refusals == (
        FrameworkCannotRun(framework="torchtune", feature="pipeline", value="2 (20 virtual stages each)"),
    )
    assert "-launch.sh" not in "".join(view.training_files([x]))
    tp = _finetune(catalog, tp=2, dp=1)
    assert [r.feature for r in tp.refusals] == ["tensor"]


def test_torchtune_overrides_carry_the_plan_and_are_keys_its_recipe_reads(catalog: Catalog) -> None:
    x = _finetune(catalog)
    assert x.refusals == ()
    tt = LAUNCHERS["torchtune-lora"]
    overrides = dict(o.split("=", 1) for o in view.torchtune_overrides(x))
    for key in overrides:
        top, _, sub = key.partition(".")
        assert top in tt.arguments, key
        if top == "model":
            assert sub in tt.model_arguments, key
    assert overrides["model._component_"] == "torchtune.models.llama3_1.qlora_llama3_1_70b"
    assert overrides["model.lora_rank"] == "64" and overrides["batch_size"] == "2"
    # 65,536 tokens = 16 sequences of 4,096; dp 2 x micro-batch 2 per round: 4 rounds (gradient accumulation)
    assert overrides["gradient_accumulation_steps"] == "4" and overrides["data_parallel_shard_dim"] == "2"
    assert overrides["tensor_parallel_dim"] == "1" and overrides["enable_activation_checkpointing"] == "True"
    launcher, recipe = view.torchtune_args(x)
    assert recipe == ["lora_finetune_distributed", "--config", "llama3_1/70B_lora"]
    assert _unknown([str(a) for a in launcher], LAUNCHERS["torchrun"].arguments) == []


# ---------------------------------------------------------------------------------------------------------------
# The command on the examples: files that parse, carrying the plan
# ---------------------------------------------------------------------------------------------------------------


def _export(path: Path, folder: Path, *options: str) -> dict[str, str]:
    result = run_cli("export", str(path), "-o", str(folder), *options)
    assert result.exit_code == 0, result.output
    return {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir()}


def _bash_n(text: str, tmp_path: Path) -> None:
    """The script parses, and run without its variables or its launcher it stops at the first one missing."""
    script = tmp_path / "check.sh"
    script.write_text(text, encoding="utf-8")
    sh = shutil.which("bash") or "sh"
    checked = subprocess.run([sh, "-n", str(script)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    ran = subprocess.run([sh, str(script)], capture_output=True, text=True, check=False, env={"PATH": "/nonexistent"})
    assert ran.returncode != 0
    assert ": set " in ran.stderr or "not found" in ran.stderr, ran.stderr  # a variable's message, or no launcher


def _argv(script: str) -> list[str]:
    """The command of a launch script: its last line, continuation lines joined (variables kept as written)."""
    body = script.split("set -eu\n", 1)[1]
    command = [line for line in body.replace("\\\n", " ").splitlines() if not line.startswith(":")][-1]
    return shlex.split(command)


@pytest.mark.slow
@pytest.mark.parametrize(
    "path, framework",
    [
        (EXAMPLES_DIR / "13b-train-then-serve.yaml", "megatron-lm"),
        (EXAMPLES_DIR / "7b-qlora-finetune.yaml", "torchtune"),
        (CASES / "train-70b-2t-owned.yaml", "megatron-lm"),
    ],
)
def test_export_of_a_training_design_writes_a_launch_that_parses(path: Path, framework: str, tmp_path: Path) -> None:
    files = _export(path, tmp_path / "out")
    launch = next(text for name, text in files.items() if name.endswith(f"-{framework}-launch.sh"))
    _bash_n(launch, tmp_path)
    argv = _argv(launch)
    if framework == "megatron-lm":
        script = argv.index("pretrain_gpt.py")
        assert _unknown(argv[script + 1 :], LAUNCHERS["megatron-lm"].arguments) == []
        assert _unknown(argv[1:script], LAUNCHERS["torchrun"].arguments) == []
        v = _values(argv[script + 1 :])
        layout = next(line for line in files["training.txt"].splitlines() if "TP " in line)
        assert f"TP {v['--tensor-model-parallel-size']}, PP {v['--pipeline-model-parallel-size']}" in layout
    else:
        assert argv[:2] == ["tune", "run"]
    for name, text in files.items():
        if name.endswith(".yaml"):
            assert list(yaml.safe_load_all(text)), name


@pytest.mark.slow
def test_the_qlora_budget_case_is_planned_in_a_layout_torchtune_runs_and_exports(tmp_path: Path) -> None:
    """The 70B QLoRA case was planned PP 2 with 20 virtual stages, which torchtune cannot run (export exit 1); its
    framework's layouts are data parallel only (one GPU, or FSDP sharding the NF4 base over several), and the plan
    exports as torchtune's distributed LoRA recipe (no single-device config of a 70B ships)."""
    case = CASES / "qlora-70b-budget.yaml"
    plan = json.loads(run_cli("solve", str(case), "--json").output)
    for design in plan["designs"]:
        (w,) = design["workloads"]
        assert w["framework"] == "torchtune" and w["tp"] == 1 and w["pp"] == 1 and w["virtual_stages"] == 1
        assert w["zero_stage"] in (0, 3)  # replicated, or torchtune's FSDP
    result = run_cli("export", str(case), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    (script,) = (tmp_path / "out").glob("*-torchtune-launch.sh")
    assert "lora_finetune_distributed --config llama3_1/70B_lora" in script.read_text()


@pytest.mark.slow
def test_a_cloud_fine_tune_gets_a_skypilot_task_on_the_cloud_and_gpu_the_plan_priced(tmp_path: Path) -> None:
    files = _export(EXAMPLES_DIR / "7b-qlora-finetune.yaml", tmp_path / "out")
    name = next(n for n in files if n.endswith("-skypilot.yaml"))
    task = yaml.safe_load(files[name])
    sky = LAUNCHERS["skypilot"]
    assert set(task) <= set(sky.arguments)
    assert {f"resources.{k}" for k in task["resources"]} <= set(sky.arguments)
    # the plan: one RunPod 1 x L40S instance, on demand
    assert task["resources"] == {"cloud": "runpod", "accelerators": "L40S:1", "use_spot": False}
    assert task["num_nodes"] == 1 and "tune run lora_finetune_single_device" in task["run"]


@pytest.mark.slow
def test_kubernetes_manifests_scale_between_the_average_and_the_peak_with_n_plus_k(tmp_path: Path) -> None:
    files = _export(EXAMPLES_DIR / "7b-chat-serving.yaml", tmp_path / "out")
    docs = list(yaml.safe_load_all(files["serving-k8s.yaml"]))
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"}
    plan = yaml.safe_load(run_cli("solve", str(EXAMPLES_DIR / "7b-chat-serving.yaml"), "--json").output)
    workload = plan["designs"][0]["workloads"][0]
    group = workload["groups"][0]
    hpa = by_kind["HorizontalPodAutoscaler"]["spec"]
    assert hpa["maxReplicas"] == group["replicas"]  # the plan's count: peak demand plus the spare
    # the average demand at the rate that meets the p95 targets, plus the N+1 spare, never above the maximum
    needed = -(-workload["average_rps"] // group["rate_rps"])
    assert hpa["minReplicas"] == min(group["replicas"], needed + workload["redundancy"])
    assert by_kind["PodDisruptionBudget"]["spec"]["maxUnavailable"] == workload["redundancy"] == 1
    container = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == str(group["tp"] * group["pp"])
    assert container["command"][:2] == ["vllm", "serve"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm"])
def test_the_service_reaches_the_port_and_interface_the_engine_listens_on(engine: str, tmp_path: Path) -> None:
    files = _export(EXAMPLES_DIR / "7b-chat-serving.yaml", tmp_path / "out", "--engine", engine)
    docs = {d["kind"]: d for d in yaml.safe_load_all(files["serving-k8s.yaml"])}
    container = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    argv = container["command"]
    listens = int(argv[argv.index("--port") + 1])
    assert container["ports"][0]["containerPort"] == listens
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] == listens
    # a pod bound to loopback is unreachable from its Service (SGLang and trtllm-serve default to it)
    assert "--host" not in argv or argv[argv.index("--host") + 1] == "0.0.0.0"


def test_a_multi_node_cloud_run_reads_skypilots_node_rank_and_asks_for_the_variables_it_needs(
    catalog: Catalog, tmp_path: Path
) -> None:
    from clusterplan.design.export_targets import CloudTask
    from clusterplan.render.skypilot_view import task

    for x in (_training(catalog, _plan(deployment="cloud")), _finetune(catalog, gpus=16, dp=16)):
        assert x.nodes.count > 1 and x.refusals == ()
        t = CloudTask(name=x.workload, provider="aws", cloud="aws", region="us-east-1", gpu="h100-sxm",
                      accelerator="H100", gpus_per_node=8, num_nodes=x.nodes.count, copies=1, training=x)  # fmt: skip
        out = yaml.safe_load(yaml.safe_dump(task(t)))
        assert out["resources"] == {"cloud": "aws", "region": "us-east-1", "accelerators": "H100:8", "use_spot": False}
        assert out["num_nodes"] == x.nodes.count
        assert out["run"].startswith('export NODE_RANK="$SKYPILOT_NODE_RANK"')
        _bash_n(out["run"], tmp_path)
        if x.framework == "megatron-lm":
            assert out["envs"] == {"LR": None, "DATA_PATH": None, "CHECKPOINT_DIR": None}
        else:
            assert "--rdzv-endpoint" in out["run"] and "envs" not in out


def test_a_replica_wider_than_one_machine_gets_no_deployment(catalog: Catalog) -> None:
    from clusterplan.design.export import export_design
    from clusterplan.design.export_targets import Scaling
    from clusterplan.render.k8s_view import k8s_file
    from clusterplan.requirement.load import load_requirement
    from conftest import example, shared_plan

    path = example("70b-serving")
    planned = export_design(load_requirement(path, catalog), catalog, shared_plan(path, catalog, top=1, explain=False))
    launch = planned[0].model_copy(update={"tp": 8, "pp": 2, "replicas": 2})
    wide = k8s_file([Scaling(launch, 2, 1, 0, 1.0, gpus_per_node=8)])
    assert list(yaml.safe_load_all(wide)) == [] and "spans 16 GPUs" in wide
    fits = k8s_file([Scaling(launch, 2, 1, 0, 1.0, gpus_per_node=16)])
    assert [d["kind"] for d in yaml.safe_load_all(fits)] == ["Deployment", "Service", "HorizontalPodAutoscaler"]


@pytest.mark.slow
def test_training_skypilot_and_kubernetes_files_run_no_injected_command(catalog: Catalog, tmp_path: Path) -> None:
    """The training launch, SkyPilot task and Kubernetes manifest carry a hostile workload name only in comments and
    slugs: no file name leaves its folder, no control character is written, no script runs what the name holds."""
    from clusterplan.design.export_targets import CloudTask
    from clusterplan.render.skypilot_view import skypilot_files
    from test_export_safety import hostile_names, run_script, stub_path, write_checked

    mark = tmp_path / "owned"
    bin_path = stub_path(tmp_path)
    for stub in ("torchrun", "tune"):  # the training launchers only record that they ran
        (tmp_path / "bin" / stub).write_text(f'#!/bin/sh\necho "{stub} ran" >> "{tmp_path / "ran.log"}"\n')
        (tmp_path / "bin" / stub).chmod(0o755)
    base = _training(catalog, _plan(deployment="cloud"))
    for i, name in enumerate(hostile_names(mark)):
        x = replace(base, workload=name)
        t = CloudTask(name=name, provider="aws", cloud="aws", region="us-east-1", gpu="h100-sxm", accelerator="H100",
                      gpus_per_node=8, num_nodes=x.nodes.count, copies=1, training=x)  # fmt: skip
        files = view.training_files([x]) | skypilot_files([t])
        out = write_checked(files, tmp_path / f"case{i}")
        for fname, text in files.items():
            if fname.endswith(".yaml"):
                assert yaml.safe_load(text)["name"] == name  # the name survives as data, not as YAML structure
        for script in sorted(out.glob("*.sh")):
            env = "MASTER_ADDR=h NODE_RANK=0 LR=1 DATA_PATH=d CHECKPOINT_DIR=c TOKENIZER=t"
            wrapped = out / "with-env.sh"
            wrapped.write_text(f"export {env}\n. ./{script.name}\n")
            run_script(wrapped, out, bin_path)
            assert not mark.exists(), f"{name!r} ran code from {script.name}:\n{script.read_text()}"


def test_export_writes_the_framework_the_plan_assumed(catalog: Catalog) -> None:
    """The framework comes from the plan, not from the method: a plan on torchtitan gets torchtitan's launch (an
    alias names its framework), one on a framework export has no launch for a refusal naming the frameworks it
    writes; a plan that names none (written before frameworks were data) takes its method's default."""
    titan = _training(catalog, _plan(framework="torchtitan", zero_stage=2))
    assert titan.framework == "torchtitan" and titan.refusals == ()
    assert _training(catalog, _plan(framework="titan", zero_stage=2)).framework == "torchtitan"  # an alias
    unknown = _training(catalog, _plan(framework="colossalai"))
    assert [(r.feature, r.framework) for r in unknown.refusals] == [("launcher", "colossalai")]
    assert _training(catalog, _plan(framework="")).framework == "megatron-lm"
    assert _training(catalog, _plan(framework="megatron-lm")).refusals == ()
