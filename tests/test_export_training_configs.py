"""``clusterplan export`` for training plans on torchtitan, DeepSpeed and PEFT + Accelerate: config files that parse
(TOML, JSON, YAML) and carry the plan's own layout, batch, ZeRO stage, offload, precision and LoRA rank; every key
and launcher option one the tool accepts (``catalog/launchers.yaml``); a layout the framework cannot run refused
with a reason that names it; a hostile workload name carried as data, never as code."""

from __future__ import annotations

import json
import subprocess
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterplan.catalog.launchers import load_launchers
from clusterplan.catalog.load import Catalog
from clusterplan.design.export_training import Nodes, TrainingLaunch, _launch
from clusterplan.render import training_export_view as view
from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload
from conftest import EXAMPLES_DIR, run_cli
from test_export_training import _argv, _bash_n, _plan, _unknown, _values

LAUNCHERS = load_launchers()


def _launch_of(catalog: Catalog, framework: str, model: str = "llama-3.1-70b", **over: Any) -> TrainingLaunch:
    """A launch of ``framework`` for the 70B pretraining plan of test_export_training (``over`` its layout), or a
    fine-tune when ``method`` is given."""
    method = over.pop("method", None)
    plan = _plan(framework=framework, **over)
    doc: dict[str, Any] = dict(kind="training", name=plan.workload, tokens=1e12, deadline=2e6, sequence_length=8192,
                               global_batch_tokens=16_000_000)  # fmt: skip
    if method is not None:
        doc.update(kind="finetune", method=method, lora_rank=64, global_batch_tokens=65536, sequence_length=4096)
    w = FinetuneWorkload(**doc) if method is not None else TrainingWorkload(**doc)
    nodes = Nodes((8,) * (plan.gpus // 8) if plan.gpus >= 8 else (plan.gpus,))
    return _launch(catalog.models[model], catalog, w, plan, nodes)


def _keys(doc: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key of a nested document as ``SECTION.KEY`` (the launcher lists' form)."""
    out: list[str] = []
    for k, v in doc.items():
        if isinstance(v, dict) and k != "params":
            out += _keys(v, f"{prefix}{k}.")
        else:
            out.append(prefix + k)
    return out


def _files(x: TrainingLaunch) -> dict[str, str]:
    files = view.training_files([x])
    assert any(n.endswith("-launch.sh") for n in files), files.get("training.txt")
    return files


def _one(files: dict[str, str], suffix: str) -> str:
    (text,) = [t for n, t in files.items() if n.endswith(suffix)]
    return text


# ---------------------------------------------------------------------------------------------------------------
# torchtitan: the TOML job config
# ---------------------------------------------------------------------------------------------------------------

TITAN: dict[str, Any] = dict(
    zero_stage=2
)  # TP 4, CP 2, PP 4 x 5 virtual stages, DP 8 of the 70B plan; FSDP without resharding


def test_torchtitan_job_config_carries_the_plans_layout_and_batch(catalog: Catalog) -> None:
    x = _launch_of(catalog, "torchtitan", **TITAN)
    assert x.refusals == ()
    files = _files(x)
    doc = tomllib.loads(_one(files, "-job.toml"))
    par, train = doc["parallelism"], doc["training"]
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"]) == (4, 4, 2)
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (8, 1)
    assert par["fsdp_reshard_after_forward"] == "never"  # ZeRO 2: gradients and optimizer sharded, weights kept
    # 5 virtual stages: the looped schedule, 80 layers / (4 x 5) per stage
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B" and par["pipeline_parallel_layers_per_stage"] == 4
    # the plan splits the layers evenly: no stage a layer short for the embedding or the output head
    assert par["pipeline_parallel_first_stage_less_layers"] == par["pipeline_parallel_last_stage_less_layers"] == 0
    # 245 micro-batches of 1 per step through the pipeline; 1,960 sequences a step over DP 8, no accumulation
    assert par["pipeline_parallel_microbatch_size"] == 1 and train["local_batch_size"] == 245
    assert train["global_batch_size"] == x.global_batch_sequences == 245 * 8
    assert train["global_batch_size"] == train["local_batch_size"] * 8  # torchtitan's accumulation: 1 round
    assert train["seq_len"] == 8192 and train["steps"] == x.train_steps
    assert doc["activation_checkpoint"]["mode"] == "full" and train["mixed_precision_param"] == "bfloat16"
    assert doc["model"] == {"name": "llama3", "flavor": "70B"} and doc["optimizer"]["name"] == "AdamW"
    accepted = set(LAUNCHERS["torchtitan"].arguments)
    assert [k for k in _keys(doc) if k not in accepted] == []
    argv = _argv(_one(files, "-launch.sh"))
    module = argv.index("-m")
    assert _unknown(argv[1:module], LAUNCHERS["torchrun"].arguments) == []
    assert argv[module + 1 : module + 4] == ["torchtitan.train", "--job.config_file", "1-pretrain-torchtitan-job.toml"]
    assert [a for a in argv[module + 2 :: 2] if a[2:] not in accepted and a != "--job.config_file"] == []


def test_torchtitan_without_pipeline_accumulates_to_the_global_batch(catalog: Catalog) -> None:
    x = _launch_of(catalog, "torchtitan", zero_stage=3, pp=1, virtual_stages=1, recompute="selective", micro_batch=2)
    doc = tomllib.loads(_one(_files(x), "-job.toml"))
    train, par = doc["training"], doc["parallelism"]
    assert train["local_batch_size"] == 2 and par["fsdp_reshard_after_forward"] == "always"
    # global / (local x dp) rounds of gradient accumulation: the plan's micro-batches per step
    assert train["global_batch_size"] // (train["local_batch_size"] * 8) == x.micro_batches > 1
    assert "pipeline_parallel_schedule" not in par
    assert doc["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}


def test_torchtitan_pipelines_shard_with_fsdp_as_the_plans_zero_1(catalog: Catalog) -> None:
    """The planner books torchtitan's pipelined layouts as ZeRO 1 (FSDP2 under a pipeline schedule keeps each stage
    whole for the step): the job config shards over DP with torchtitan's default resharding, which does not
    reshard under PP."""
    x = _launch_of(catalog, "torchtitan", zero_stage=1)  # TP 4, CP 2, PP 4 x 5, DP 8
    assert x.refusals == ()
    par = tomllib.loads(_one(_files(x), "-job.toml"))["parallelism"]
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (8, 1)
    assert par["fsdp_reshard_after_forward"] == "default"


def test_torchtitan_refuses_what_it_cannot_run_naming_the_plans_value(catalog: Catalog) -> None:
    zero1 = _launch_of(catalog, "torchtitan", zero_stage=1, pp=1, virtual_stages=1, dp=32)  # ZeRO 1 with no PP
    assert [(r.feature, r.value.split()[0]) for r in zero1.refusals] == [("zero", "1")]
    ddp = _launch_of(catalog, "torchtitan", zero_stage=0)  # replicated DP 8 beside TP, CP and PP
    assert [r.feature for r in ddp.refusals] == ["zero"] and "DDP runs alone" in ddp.refusals[0].value
    no_flavor = _launch_of(catalog, "torchtitan", model="llama-2-13b", **TITAN)
    assert [(r.feature, r.value.split()[0]) for r in no_flavor.refusals] == [("model", "llama-2-13b")]
    for refused in (zero1, ddp, no_flavor):
        files = view.training_files([refused])
        assert files.keys() == {"training.txt"} and "torchtitan: cannot run the plan's" in files["training.txt"]


# ---------------------------------------------------------------------------------------------------------------
# DeepSpeed: ds_config.json, hostfile, launcher
# ---------------------------------------------------------------------------------------------------------------

DS: dict[str, Any] = dict(tp=1, pp=1, cp=1, virtual_stages=1, dp=32, gpus=32, recompute="full", recompute_layers=20)


@pytest.mark.parametrize("zero, offload", [(1, False), (2, True), (3, True), (0, False)])
def test_deepspeed_config_carries_the_plans_zero_stage_offload_and_batch(
    catalog: Catalog, zero: int, offload: bool
) -> None:
    memory = ["optimizer_offload"] if offload else []
    x = _launch_of(catalog, "deepspeed", zero_stage=zero, memory_options=memory, micro_batch=2, **DS)
    assert x.refusals == ()
    files = _files(x)
    ds = json.loads(_one(files, "-ds_config.json"))
    assert ds["zero_optimization"]["stage"] == zero
    assert ("offload_optimizer" in ds["zero_optimization"]) is offload
    if offload:
        assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert ds["train_micro_batch_size_per_gpu"] == 2 and ds["gradient_accumulation_steps"] == x.micro_batches
    # DeepSpeed asserts train_batch_size = micro-batch x accumulation x data-parallel GPUs
    assert ds["train_batch_size"] == 2 * x.micro_batches * 32 == x.global_batch_sequences
    assert ds["bf16"] == {"enabled": True} and ds["fp16"] == {"enabled": False}
    assert ds["activation_checkpointing"]["number_checkpoints"] == 20
    assert [k for k in _keys(ds) if k not in set(LAUNCHERS["deepspeed"].arguments)] == []
    hosts = [line.split() for line in _one(files, "-hostfile").splitlines() if not line.startswith("#")]
    assert [int(slots.removeprefix("slots=")) for _, slots in hosts] == [8, 8, 8, 8]
    argv = _argv(_one(files, "-launch.sh"))
    assert argv[0] == "deepspeed" and _unknown(argv, LAUNCHERS["deepspeed"].launcher_arguments) == []
    assert argv[argv.index("--num_nodes") + 1] == "4" and argv[argv.index("--deepspeed_config") + 1].endswith(
        "-ds_config.json"
    )


def test_deepspeed_with_tp_and_pp_runs_megatron_deepspeed_with_the_plans_layout(catalog: Catalog) -> None:
    x = _launch_of(catalog, "deepspeed", zero_stage=1, tp=2, cp=1, virtual_stages=1, dp=32, recompute_layers=10)
    assert x.refusals == () and x.megatron_deepspeed  # TP 2, PP 4, DP 32
    files = _files(x)
    argv = _argv(_one(files, "-launch.sh"))
    script = argv.index("pretrain_gpt.py")
    assert argv[0] == "deepspeed" and _unknown(argv[1:script], LAUNCHERS["deepspeed"].launcher_arguments) == []
    assert _unknown(argv[script + 1 :], LAUNCHERS["megatron-deepspeed"].arguments) == []
    v = _values(argv[script + 1 :])
    assert v["--tensor-model-parallel-size"] == "2" and v["--pipeline-model-parallel-size"] == "4"
    assert v["--zero-stage"] == "1"
    # DeepSpeed's pipeline model recomputes every layer (uniform, 1) where the plan recomputed 10 of a stage's 20
    assert v["--recompute-method"] == "uniform" and v["--recompute-num-layers"] == "1"
    assert "checkpoints every layer where the plan recomputed 10" in files["training.txt"]
    unpipelined = _launch_of(catalog, "deepspeed", zero_stage=3, tp=8, pp=1, cp=1, virtual_stages=1, dp=32)
    w = _values(_argv(_one(_files(unpipelined), "-launch.sh")))
    assert "--no-pipeline-parallel" in w and (w["--recompute-method"], w["--recompute-num-layers"]) == ("block", "10")
    assert v["--num-key-value-heads"] == "8" and v["--global-batch-size"] == str(x.global_batch_sequences)
    ds = json.loads(_one(files, "-ds_config.json"))
    assert v["--deepspeed_config"] == "1-pretrain-deepspeed-ds_config.json"
    # the pipeline engine's micro-batches are DeepSpeed's accumulation steps over DP 32
    assert ds["train_batch_size"] == ds["gradient_accumulation_steps"] * 32 * ds["train_micro_batch_size_per_gpu"]
    assert ds["zero_optimization"] == {"stage": 1}


def test_deepspeed_refuses_what_its_engines_cannot_run(catalog: Catalog) -> None:
    pipelined = _launch_of(catalog, "deepspeed", zero_stage=1)  # TP 4, CP 2, PP 4 x 5 virtual stages
    assert [r.feature for r in pipelined.refusals] == ["context", "pipeline"]
    assert pipelined.refusals[1].value == "4 (5 virtual stages each)"
    zero2 = _launch_of(catalog, "deepspeed", zero_stage=2, cp=1, virtual_stages=1, dp=16)
    assert [(r.feature, r.value.split()[0]) for r in zero2.refusals] == [("zero", "2")]
    lora = _launch_of(catalog, "deepspeed", method="qlora", zero_stage=0, **DS)
    assert [(r.feature, r.value.split()[0]) for r in lora.refusals] == [("method", "qlora")]
    assert view.training_files([lora]).keys() == {"training.txt"}


# ---------------------------------------------------------------------------------------------------------------
# PEFT + Accelerate: accelerate config, LoraConfig, BitsAndBytesConfig, TrainingArguments
# ---------------------------------------------------------------------------------------------------------------

PEFT: dict[str, Any] = dict(
    tp=1, pp=1, cp=1, virtual_stages=1, dp=16, gpus=16, recompute="full", recompute_layers=80, micro_batch=2
)


def test_peft_qlora_files_carry_the_plans_layout_rank_and_quantisation(catalog: Catalog) -> None:
    x = _launch_of(catalog, "peft", method="qlora", zero_stage=3, memory_options=["paged_optimizer"], **PEFT)
    assert x.refusals == ()
    files = _files(x)
    acc = yaml.safe_load(_one(files, "-accelerate.yaml"))
    assert acc["distributed_type"] == "FSDP" and acc["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"
    assert (acc["num_machines"], acc["num_processes"], acc["mixed_precision"]) == (2, 16, "bf16")
    assert acc["fsdp_config"]["fsdp_offload_params"] is False
    lora = json.loads(_one(files, "-lora.json"))
    assert (lora["r"], lora["lora_alpha"], lora["target_modules"]) == (64, 128, "all-linear")
    bnb = json.loads(_one(files, "-bnb.json"))
    assert bnb["load_in_4bit"] is True and bnb["bnb_4bit_quant_type"] == "nf4"
    assert bnb["bnb_4bit_compute_dtype"] == bnb["bnb_4bit_quant_storage"] == "bfloat16"  # FSDP shards the NF4 base
    args = json.loads(_one(files, "-training-args.json"))
    assert args["per_device_train_batch_size"] == 2 and args["gradient_accumulation_steps"] == x.micro_batches
    # 65,536 tokens = 16 sequences of 4,096: one round of DP 16 x micro-batch 2 covers them
    assert args["per_device_train_batch_size"] * args["gradient_accumulation_steps"] * 16 == x.global_batch_sequences
    assert args["max_steps"] == x.train_steps and args["gradient_checkpointing"] is True
    assert args["optim"] == "paged_adamw_32bit"
    for name, doc, launcher in (("accelerate", acc, "accelerate"), ("lora", lora, "peft-lora"),
                                ("bnb", bnb, "bitsandbytes"), ("args", args, "hf-training-args")):  # fmt: skip
        assert [k for k in _keys(doc) if k not in set(LAUNCHERS[launcher].arguments)] == [], name
    argv = _argv(_one(files, "-launch.sh"))
    assert argv[:2] == ["accelerate", "launch"]
    assert _unknown(argv, LAUNCHERS["accelerate"].launcher_arguments) == []
    assert argv[argv.index("--machine_rank") + 1] == "$NODE_RANK"


def test_peft_lora_on_ddp_has_no_quantisation_and_refuses_sharding_it_lacks(catalog: Catalog) -> None:
    x = _launch_of(catalog, "peft", method="lora", zero_stage=0, **PEFT)
    files = _files(x)
    assert yaml.safe_load(_one(files, "-accelerate.yaml"))["distributed_type"] == "MULTI_GPU"
    assert not any(n.endswith("-bnb.json") for n in files)
    full = _files(_launch_of(catalog, "peft", method="full", zero_stage=3, **PEFT))
    assert not any(n.endswith(("-lora.json", "-bnb.json")) for n in full)  # every weight trains: no adapter
    assert json.loads(_one(full, "-training-args.json"))["per_device_train_batch_size"] == 2
    zero1 = _launch_of(catalog, "peft", method="lora", zero_stage=1, **PEFT)
    assert [(r.feature, r.value.split()[0]) for r in zero1.refusals] == [("zero", "1")]
    tp = _launch_of(catalog, "peft", method="lora", zero_stage=3, **{**PEFT, "tp": 2, "dp": 8})
    assert [r.feature for r in tp.refusals] == ["tensor"]


# ---------------------------------------------------------------------------------------------------------------
# Names as data: the TOML, JSON and YAML carry a hostile name as its own value; scripts run none of it
# ---------------------------------------------------------------------------------------------------------------


def test_toml_strings_round_trip_any_name() -> None:
    for name in ('a"b\\c', "x\ny = 1", "tab\there", "\u202erl\u200b", "\x1b[2J\x7f", "[job]\n[model]"):
        text = view.toml_text({"job": {"description": name}})
        assert tomllib.loads(text) == {"job": {"description": name}}
        assert len(text.strip().splitlines()) == 2 and "\u202e" not in text and "\x1b" not in text


@pytest.mark.slow
def test_config_launches_run_no_injected_command(catalog: Catalog, tmp_path: Path) -> None:
    from clusterplan.design.export_targets import CloudTask
    from clusterplan.render.skypilot_view import task
    from test_export_safety import hostile_names, run_script, stub_path, write_checked

    mark = tmp_path / "owned"
    bin_path = stub_path(tmp_path)
    for stub in ("torchrun", "deepspeed", "accelerate"):  # the launchers only record that they ran
        (tmp_path / "bin" / stub).write_text(f'#!/bin/sh\necho "{stub} ran" >> "{tmp_path / "ran.log"}"\n')
        (tmp_path / "bin" / stub).chmod(0o755)
    bases = [
        _launch_of(catalog, "torchtitan", **TITAN),
        _launch_of(catalog, "deepspeed", zero_stage=2, memory_options=["optimizer_offload"], **DS),
        _launch_of(catalog, "peft", method="qlora", zero_stage=3, **PEFT),
        _launch_of(catalog, "deepspeed", zero_stage=1, cp=1, virtual_stages=1, dp=16),  # Megatron-DeepSpeed
    ]
    env = "export MASTER_ADDR=h NODE_RANK=0 SKYPILOT_NODE_RANK=0 SKYPILOT_NODE_IPS=h LR=1 TOKENIZER=t TRAIN_SCRIPT=t"
    env += " DATA_PATH=d CHECKPOINT_DIR=c\n"
    for i, name in enumerate(hostile_names(mark)):
        for j, base in enumerate(bases):
            x = replace(base, workload=name)
            files = view.training_files([x])
            out = write_checked(files, tmp_path / f"case{i}-{j}")
            toml = [t for n, t in files.items() if n.endswith(".toml")]
            if toml:
                assert tomllib.loads(toml[0])["job"]["description"] == name  # the name as data
            for fname, text in files.items():
                if fname.endswith(".json"):
                    json.loads(text)
                elif fname.endswith(".yaml"):
                    yaml.safe_load(text)
            (script,) = out.glob("*.sh")
            (out / "with-env.sh").write_text(env + f". ./{script.name}\n")
            assert run_script(out / "with-env.sh", out, bin_path).returncode == 0
            # the SkyPilot task writes the configs itself, then launches
            t = CloudTask(name=name, provider="aws", cloud="aws", region="us-east-1", gpu="h100-sxm",
                          accelerator="H100", gpus_per_node=8, num_nodes=x.nodes.count, copies=1, training=x)  # fmt: skip
            run = yaml.safe_load(yaml.safe_dump(task(t)))["run"]
            sky = tmp_path / f"sky{i}-{j}"
            sky.mkdir()
            (sky / "run.sh").write_text(env + run)
            assert run_script(sky / "run.sh", sky, bin_path).returncode == 0
            for fname in files:
                if not fname.endswith((".sh", ".txt")):
                    assert (sky / fname).read_text() == files[fname], fname  # written as exported
            assert not mark.exists(), f"{name!r} ran code:\n{files}"
    assert (tmp_path / "ran.log").read_text().count("ran") == 2 * len(bases) * len(hostile_names(mark))


# ---------------------------------------------------------------------------------------------------------------
# The command: the QLoRA example on PEFT, its files carrying the plan's own figures
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_qlora_example_on_peft_exports_files_that_carry_its_plan(tmp_path: Path) -> None:
    requirement = tmp_path / "peft.yaml"
    text = (EXAMPLES_DIR / "7b-qlora-finetune.yaml").read_text()
    requirement.write_text(text.replace("    method: qlora\n", "    method: qlora\n    framework: peft\n"))
    (w,) = json.loads(run_cli("solve", str(requirement), "--json").output)["designs"][0]["workloads"]
    assert w["framework"] == "peft"
    result = run_cli("export", str(requirement), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    args = json.loads((out / "1-domain-adapt-peft-training-args.json").read_text())
    assert args["per_device_train_batch_size"] == w["micro_batch"]
    # 64k tokens = 32 sequences of 2,000, in rounds of DP x micro-batch
    assert args["per_device_train_batch_size"] * args["gradient_accumulation_steps"] * w["dp"] == 32
    assert json.loads((out / "1-domain-adapt-peft-lora.json").read_text())["r"] == 16
    assert json.loads((out / "1-domain-adapt-peft-bnb.json").read_text())["bnb_4bit_quant_type"] == "nf4"
    acc = yaml.safe_load((out / "1-domain-adapt-peft-accelerate.yaml").read_text())
    assert acc["num_processes"] == w["gpus"]
    (script,) = out.glob("*-peft-launch.sh")
    _bash_n(script.read_text(), tmp_path)
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, check=False)
    assert checked.returncode == 0


@pytest.mark.slow
def test_a_plan_its_framework_cannot_launch_exits_1_naming_the_workload_and_the_part(tmp_path: Path) -> None:
    requirement = tmp_path / "ds.yaml"
    text = (EXAMPLES_DIR / "7b-qlora-finetune.yaml").read_text()
    requirement.write_text(text.replace("    method: qlora\n", "    method: qlora\n    framework: deepspeed\n"))
    result = run_cli("export", str(requirement), "-o", str(tmp_path / "out"))
    assert result.exit_code == 1, result.output
    assert "domain-adapt: DeepSpeed: cannot run the plan's method qlora" in result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.slow
def test_the_13b_example_on_deepspeed_exports_its_pipelined_plan_as_planned(tmp_path: Path) -> None:
    """The 13B pretraining on DeepSpeed is planned pipelined (PP with ZeRO 1): Megatron-DeepSpeed under the deepspeed
    launcher runs it, with a ds_config.json whose batch, stage and recompute are the plan's."""
    requirement = tmp_path / "ds.yaml"
    text = (EXAMPLES_DIR / "13b-train-then-serve.yaml").read_text()
    # held to RTX 6000 Ada workstations (4 GPUs each), where the 13B run pipelines (on one 8-GPU server it need not)
    text = text.replace("  - kind: training\n", "  - kind: training\n    framework: deepspeed\n")
    requirement.write_text(text + "constraints:\n  allowed_gpus: [rtx-6000-ada]\n")
    plan = json.loads(run_cli("solve", str(requirement), "--json").output)
    w = next(w for w in plan["designs"][0]["workloads"] if w.get("framework") == "deepspeed")
    files = _export_files(requirement, tmp_path / "out")
    ds = json.loads(_one(files, "-pretrain-deepspeed-ds_config.json"))
    assert ds["zero_optimization"]["stage"] == w["zero_stage"]
    assert ds["train_micro_batch_size_per_gpu"] == w["micro_batch"]
    assert ds["train_batch_size"] == ds["gradient_accumulation_steps"] * w["dp"] * w["micro_batch"]
    launch = next(t for n, t in files.items() if n.endswith("-deepspeed-launch.sh"))
    _bash_n(launch, tmp_path)
    argv = _argv(launch)
    v = _values(argv[argv.index("pretrain_gpt.py") + 1 :])
    assert (int(v["--tensor-model-parallel-size"]), int(v["--pipeline-model-parallel-size"])) == (w["tp"], w["pp"])
    hosts = [line for line in _one(files, "-pretrain-deepspeed-hostfile").splitlines() if not line.startswith("#")]
    assert sum(int(h.split("slots=")[1]) for h in hosts) == w["gpus"]


def _export_files(requirement: Path, folder: Path) -> dict[str, str]:
    result = run_cli("export", str(requirement), "-o", str(folder))
    assert result.exit_code == 0, result.output
    return {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir()}


@pytest.mark.slow
def test_the_70b_case_on_torchtitan_exports_its_pipelined_fsdp_plan(tmp_path: Path) -> None:
    """Pretraining the 70B case on torchtitan is planned pipelined with FSDP (ZeRO 1): the TOML job config has the
    plan's TP, PP, virtual stages, DP shard degree and batch."""
    from conftest import DATA

    requirement = tmp_path / "titan.yaml"
    text = (DATA / "cases" / "train-70b-2t-owned.yaml").read_text()
    requirement.write_text(text.replace("  - kind: training\n", "  - kind: training\n    framework: torchtitan\n"))
    (w,) = json.loads(run_cli("solve", str(requirement), "--json").output)["designs"][0]["workloads"]
    files = _export_files(requirement, tmp_path / "out")
    doc = tomllib.loads(_one(files, "-pretrain-torchtitan-job.toml"))
    par, train = doc["parallelism"], doc["training"]
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"]) == (w["tp"], w["pp"])
    assert (par["context_parallel_degree"], par["data_parallel_shard_degree"]) == (w["cp"], w["dp"])
    assert w["zero_stage"] == 1 and par["fsdp_reshard_after_forward"] == "default"
    if w["virtual_stages"] > 1:
        assert par["pipeline_parallel_layers_per_stage"] * w["pp"] * w["virtual_stages"] == 80
    assert par["pipeline_parallel_microbatch_size"] == w["micro_batch"]
    assert train["local_batch_size"] % par["pipeline_parallel_microbatch_size"] == 0
    assert train["global_batch_size"] == train["local_batch_size"] * w["dp"]
    assert train["seq_len"] == 8192 and doc["model"]["flavor"] == "70B"
    _bash_n(next(t for n, t in files.items() if n.endswith("-torchtitan-launch.sh")), tmp_path)


def test_two_workloads_whose_names_slug_alike_keep_a_config_each(catalog: Catalog) -> None:
    """Names that reduce to one file slug ("pre train", "pre/train") must not share a ds_config.json: each launch's
    files carry its number, and each script reads its own."""
    a = replace(_launch_of(catalog, "deepspeed", zero_stage=1, tp=1, pp=1, cp=1, virtual_stages=1, dp=32), number=1)
    a = replace(a, workload="pre train", plan=a.plan.model_copy(update={"workload": "pre train", "micro_batch": 1}))
    b = replace(a, workload="pre/train", number=2, plan=a.plan.model_copy(update={"workload": "pre/train",
                                                                            "micro_batch": 2}))  # fmt: skip
    files = view.training_files([a, b])
    configs = sorted(n for n in files if n.endswith("ds_config.json"))
    assert configs == ["1-pre-train-deepspeed-ds_config.json", "2-pre-train-deepspeed-ds_config.json"]
    assert [json.loads(files[n])["train_micro_batch_size_per_gpu"] for n in configs] == [1, 2]
    for n in (1, 2):
        (script,) = [t for name, t in files.items() if name.startswith(f"{n}-") and name.endswith("-launch.sh")]
        assert _values(_argv(script))["--deepspeed_config"] == configs[n - 1]
