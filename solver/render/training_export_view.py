"""Training and fine-tuning launch scripts for ``clusterplan export`` (no logic: every setting comes from a
:class:`clusterplan.design.export_training.TrainingLaunch`).

Megatron-LM: ``torchrun ... pretrain_gpt.py`` with the arguments of megatron/training/arguments.py (the layout's
``--tensor-model-parallel-size``, ``--context-parallel-size``, ``--pipeline-model-parallel-size``,
``--num-layers-per-virtual-pipeline-stage``, ``--recompute-granularity/--recompute-method/--recompute-num-layers``,
``--use-distributed-optimizer`` or Megatron-FSDP, ``--micro-batch-size``, ``--global-batch-size``, ``--seq-length``,
``--bf16``/``--fp8-format``); torchtune: ``tune run`` of a LoRA recipe with a shipped config and ``key=value``
overrides (its own command-line form); torchtitan: a TOML job config and ``torchrun -m torchtitan.train
--job.config_file``; DeepSpeed: ``ds_config.json``, a hostfile and the ``deepspeed`` launcher; PEFT: an Accelerate
config, a LoraConfig, a BitsAndBytesConfig (QLoRA) and TrainingArguments as JSON, under ``accelerate launch``. Every
option and key is in ``catalog/launchers.yaml``; the configs are the design layer's data
(:func:`~clusterplan.design.export_training.torchtitan_config` and its siblings), written here as TOML, JSON or YAML.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from clusterplan.catalog.launchers import load_launchers
from clusterplan.design.export_training import TrainingLaunch, deepspeed_config, peft_configs, torchtitan_config
from clusterplan.wording.reasons import render_reason
from clusterplan.wording.safe import file_slug, json_text, shell_comment, visible_lines

MASTER_PORT = 29500
_ZERO_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}  # Megatron-FSDP's --data-parallel-sharding-strategy


class Env(str):
    """A shell variable the user sets (written ``"$NAME"``, with ``suffix`` after it), not a literal."""

    suffix: str = ""

    @classmethod
    def of(cls, name: str, suffix: str = "") -> Env:
        env = cls(name)
        env.suffix = suffix
        return env


Arg = str | Env
NEEDS = {
    "NODE_RANK": "the rank of this node, 0 to {last}",
    "MASTER_ADDR": "the address of node 0",
    "DATA_PATH": "a Megatron-preprocessed dataset prefix (tools/preprocess_data.py)",
    "CHECKPOINT_DIR": "where checkpoints are written",
    "LOAD_DIR": "the base model's Megatron checkpoint",
    "LR": "the peak learning rate (not planned)",
    "TOKENIZER": "the model tokenizer folder (its Hugging Face repository files)",
    "TRAIN_SCRIPT": "your training script (see the comments above)",
}


def file_stem(n: int, workload: str, tool: str) -> str:
    """An exported file's stem, as export_view names the serving launches: ``N-WORKLOAD-TOOL``, names as safe slugs."""
    return f"{n}-{file_slug(workload, 'workload')}-{file_slug(tool, 'tool')}"


def _word(a: Arg) -> str:
    return f'"${a}{a.suffix}"' if isinstance(a, Env) else shlex.quote(a)


def join_lines(head: list[Arg], args: list[Arg], indent: str = "  ") -> str:
    """``head`` on the first line, then each option with its values on a continuation line of its own."""
    lines = [" ".join(_word(a) for a in head)]
    for a in args:
        starts_option = not isinstance(a, Env) and (a.startswith("-") or "=" in a)
        if starts_option or len(lines) == 1:
            lines.append(indent + _word(a))
        else:  # a value: on its option's line
            lines[-1] += " " + _word(a)
    return " \\\n".join(lines) + "\n"


def megatron_args(x: TrainingLaunch) -> list[Arg]:
    """``pretrain_gpt.py``'s arguments: the model's shape, the plan's layout, batch, precision, data and steps."""
    p, m = x.plan, x.arch
    args: list[Arg] = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden_size)]
    args += ["--num-attention-heads", str(m.attention_heads), "--ffn-hidden-size", str(m.ffn_size)]
    if m.kv_heads < m.attention_heads:
        args += ["--group-query-attention", "--num-query-groups", str(m.kv_heads)]
    if m.head_dim is not None:
        args += ["--kv-channels", str(m.head_dim)]
    if m.kv_lora_rank is not None:
        args += ["--multi-latent-attention", "--kv-lora-rank", str(m.kv_lora_rank)]
        args += ["--q-lora-rank", str(m.q_lora_rank)] if m.q_lora_rank is not None else []
        for flag, v in (("--qk-head-dim", m.qk_nope_head_dim), ("--qk-pos-emb-head-dim", m.qk_rope_head_dim)):
            args += [flag, str(v)] if v is not None else []
        args += ["--v-head-dim", str(m.v_head_dim)] if m.v_head_dim is not None else []
    if m.moe_experts > 1:
        args += ["--num-experts", str(m.moe_experts), "--moe-router-topk", str(m.experts_per_token)]
        args += ["--moe-ffn-hidden-size", str(m.moe_intermediate_size)] if m.moe_intermediate_size else []
    args += ["--seq-length", str(x.sequence_length), "--max-position-embeddings", str(max(x.sequence_length, 1))]
    args += ["--position-embedding-type", "rope", "--normalization", "RMSNorm", "--disable-bias-linear"]
    args += ["--untie-embeddings-and-output-weights"] + (["--swiglu"] if m.gated_mlp else [])
    args += [
        "--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp),
        "--context-parallel-size", str(p.cp),
    ]  # fmt: skip
    args += ["--expert-model-parallel-size", str(p.ep)] if p.ep > 1 else []
    args += ["--sequence-parallel"] if p.tp > 1 else []
    if x.layers_per_virtual_stage is not None:
        args += ["--num-layers-per-virtual-pipeline-stage", str(x.layers_per_virtual_stage)]
    if p.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif p.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "block"]
        args += ["--recompute-num-layers", str(x.recompute_layers_per_chunk)]
    if p.zero_stage == 1:
        args += ["--use-distributed-optimizer"]
    elif p.zero_stage in _ZERO_SHARDING:
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", _ZERO_SHARDING[p.zero_stage]]
    args += ["--micro-batch-size", str(p.micro_batch), "--global-batch-size", str(x.global_batch_sequences)]
    args += ["--train-samples", str(x.train_samples)]
    args += {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp8": ["--bf16", "--fp8-format", "hybrid"]}.get(x.precision, [])
    args += ["--optimizer", {"adamw": "adam"}.get(x.optimizer, x.optimizer), "--lr", Env.of("LR")]
    args += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", x.model]
    args += ["--data-path", Env.of("DATA_PATH"), "--split", "99,1,0", "--save", Env.of("CHECKPOINT_DIR")]
    if x.method == "full" and x.plan.kind == "finetune":
        args += ["--load", Env.of("LOAD_DIR"), "--finetune"]
    return args


def _nproc(x: TrainingLaunch) -> Arg:
    return str(x.nodes.gpus[0]) if x.nodes.uniform else Env.of("NPROC_PER_NODE")


def torchrun_args(x: TrainingLaunch) -> list[Arg]:
    """torchrun's options: one node standalone, else static rendezvous on node 0."""
    nproc = _nproc(x)
    if x.nodes.count == 1:
        return ["--standalone", "--nproc-per-node", nproc]
    return [
        "--nnodes", str(x.nodes.count), "--nproc-per-node", nproc, "--node-rank", Env.of("NODE_RANK"),
        "--master-addr", Env.of("MASTER_ADDR"), "--master-port", str(MASTER_PORT),
    ]  # fmt: skip


def torchtune_overrides(x: TrainingLaunch) -> list[str]:
    """``key=value`` overrides of the shipped LoRA config: the plan's builder, rank, batch, steps and memory."""
    assert x.recipe is not None
    p = x.plan
    out = [f"model._component_={x.recipe[1]}", f"model.lora_rank={x.lora_rank}"]
    out += [f"batch_size={p.micro_batch}", f"gradient_accumulation_steps={x.micro_batches}"]
    out += ["epochs=1", f"max_steps_per_epoch={x.train_steps}", f"tokenizer.max_seq_len={x.sequence_length}"]
    out += [f"dtype={x.precision}", f"enable_activation_checkpointing={p.recompute != 'none'}"]
    out += [f"enable_activation_offloading={'activation_offload' in p.memory_options}"]
    if p.gpus > 1:
        out += [f"data_parallel_shard_dim={p.dp}", f"context_parallel_dim={p.cp}", "tensor_parallel_dim=1"]
        out += [f"fsdp_cpu_offload={'optimizer_offload' in p.memory_options}"]
    out += [f"output_dir=./{file_slug(x.workload, 'workload')}-torchtune"]
    return out


def torchtune_args(x: TrainingLaunch) -> tuple[list[Arg], list[Arg]]:
    """``tune run``'s launcher options (torchrun's) and the recipe with its config."""
    if x.single_device:
        return [], ["lora_finetune_single_device", "--config", x.recipe[0] if x.recipe else ""]
    launcher: list[Arg] = ["--nproc_per_node", _nproc(x)]
    if x.nodes.count > 1:  # tune run hands torchrun a c10d rendezvous on node 0
        launcher = [
            "--nnodes", str(x.nodes.count), *launcher, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", Env.of("MASTER_ADDR", f":{MASTER_PORT}"),
        ]  # fmt: skip
    return launcher, ["lora_finetune_distributed", "--config", x.recipe[0] if x.recipe else ""]


def layout_line(x: TrainingLaunch) -> str:
    p = x.plan
    vpp = f" x {p.virtual_stages} virtual stages" if p.virtual_stages > 1 else ""
    recompute = {"none": "no recompute", "selective": "selective recompute"}.get(
        p.recompute, f"full recompute of {p.recompute_layers} layers per stage"
    )
    return (
        f"TP {p.tp}, PP {p.pp}{vpp}, CP {p.cp}, EP {p.ep}, DP {p.dp}; ZeRO {p.zero_stage}; {recompute}; "
        f"micro-batch {p.micro_batch}; {x.precision}"
    )


def _header(x: TrainingLaunch, what: str) -> list[str]:
    p = x.plan
    nodes = (
        f"{x.nodes.count} node(s) x {x.nodes.gpus[0]} GPUs"
        if x.nodes.uniform
        else "nodes of " + ", ".join(str(g) for g in x.nodes.gpus) + " GPUs (set NPROC_PER_NODE on each)"
    )
    tokens = x.global_batch_sequences * x.sequence_length
    rounded = (
        f" (the requirement's {x.requested_batch_tokens:,.0f} tokens rounded up to whole rounds of DP {p.dp} x "
        f"micro-batch {p.micro_batch}, as the plan ran it)"
        if tokens > x.requested_batch_tokens * 1.001
        else ""
    )
    return [
        "#!/bin/sh",
        shell_comment(f"{x.workload}: {what} of {x.arch.name} on {p.gpus} x {p.gpu_name}, {nodes}"),
        f"# the plan's layout: {layout_line(x)}",
        f"# global batch: {x.global_batch_sequences:,} sequences of {x.sequence_length:,} tokens = {tokens:,} tokens"
        f"{rounded}; {x.micro_batches} micro-batches per step, {x.train_steps:,} steps",
    ]


def _needs(names: list[str], last_rank: int) -> list[str]:
    # no quote characters in the messages: bash reads a single quote inside "${VAR:?...}" as quoting
    return [f': "${{{n}:?set {n}: {NEEDS[n].format(last=last_rank)}}}"' for n in names]


def megatron_script(x: TrainingLaunch) -> str:
    """The launch script: run on every node (Megatron-LM's pretrain_gpt.py from its repository root)."""
    head = _header(x, "Megatron-LM pretrain_gpt.py")
    envs = ["LR", "DATA_PATH", "CHECKPOINT_DIR"]
    envs += ["LOAD_DIR"] if x.plan.kind == "finetune" else []
    envs = (["NODE_RANK", "MASTER_ADDR"] if x.nodes.count > 1 else []) + envs
    where = "# run it from Megatron-LM's repository root" + (" on every node" if x.nodes.count > 1 else "")
    where += (
        "\n# the model's shape is the catalog's (layers, widths, heads); RMSNorm, RoPE, SwiGLU, no biases and untied"
        "\n# embeddings are assumed: check them, and the rotary base, against the model's config"
    )
    body = join_lines(["torchrun", *torchrun_args(x), "pretrain_gpt.py"], megatron_args(x))
    return "\n".join([*head, where, "set -eu", *_needs(envs, x.nodes.count - 1)]) + "\n" + body


def torchtune_script(x: TrainingLaunch) -> str:
    """``tune run`` of the LoRA recipe with the plan's overrides (the config's dataset is torchtune's example)."""
    method = "QLoRA" if x.method == "qlora" else "LoRA"
    head = _header(x, f"torchtune {method}")
    config = x.recipe[0] if x.recipe else ""
    notes = [
        f"# first: tune download {x.model} (to the checkpoint_dir the config {config} names); the config trains on",
        "# torchtune's example dataset: set dataset._component_ to yours",
    ]
    envs = ["MASTER_ADDR"] if x.nodes.count > 1 else []
    launcher, recipe = torchtune_args(x)
    body = join_lines(["tune", "run", *launcher, *recipe], list(torchtune_overrides(x)))
    return "\n".join([*head, *notes, "set -eu", *_needs(envs, x.nodes.count - 1)]) + "\n" + body


def training_notes(x: TrainingLaunch) -> list[str]:
    """What the run should log if the plan is right, or why no launch was written."""
    p = x.plan
    lines = [f"{x.workload}: {x.framework_name} on {p.gpus} x {p.gpu_name} ({layout_line(x)})"]
    if x.refusals:
        lines += [f"  not exported: {render_reason(r)}" for r in x.refusals]
        lines.append(f"  {x.framework_name} would run a different layout than the one planned and priced")
        return lines
    step_s = x.global_batch_sequences * x.sequence_length / p.tokens_per_s
    lines += [
        f"  expected: {p.tokens_per_s:,.0f} tokens/s over all GPUs (MFU {p.mfu:.0%}), {step_s:,.2f} s per step of "
        f"{x.global_batch_sequences:,} sequences; {x.train_steps:,} steps in {p.time_to_train_s / 86400:,.1f} days",
        f"  memory: {p.memory_gib_per_gpu:,.1f} GiB of {p.gpu_memory_gib:,.1f} GiB per GPU",
    ]
    if p.deadline_s is not None:
        lines.append(f"  deadline: {p.deadline_s / 86400:,.1f} days")
    # full recompute checkpoints every layer (Megatron-DeepSpeed's pipeline model too)
    every_layer = x.framework in ("torchtune", "torchtitan", "peft") or (x.megatron_deepspeed and p.pp > 1)
    if every_layer and p.recompute == "full" and p.recompute_layers < x.arch.layers // max(p.pp, 1):
        lines.append(
            f"  {x.framework_name} checkpoints every layer where the plan recomputed {p.recompute_layers} per stage: "
            "slower than planned, never short of memory"
        )
    return lines


def training_files(launches: list[TrainingLaunch]) -> dict[str, str]:
    """File name -> text: a launch script per exportable workload, and ``training.txt`` (what to expect, or why
    a workload was not exported)."""
    files: dict[str, str] = {}
    notes: list[str] = []
    for x in launches:
        if not x.refusals:
            files[f"{file_stem(x.number, x.workload, x.framework)}-launch.sh"] = launch_script(x)
            files |= config_files(x)
        notes += [*training_notes(x), ""]
    if notes:
        files["training.txt"] = "\n".join(notes)
    return {name: visible_lines(text) for name, text in files.items()}


# ---------------------------------------------------------------------------------------------------------------
# torchtitan, DeepSpeed, PEFT + Accelerate: config files beside the launch script
# ---------------------------------------------------------------------------------------------------------------


def config_name(x: TrainingLaunch, what: str) -> str:
    """A config file's name: the launch's stem, numbered as its launch script is (two workloads whose names
    slug alike keep a file each), and what the file holds."""
    return f"{file_stem(x.number, x.workload, x.framework)}-{what}"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(i) for i in v) + "]"
    # a TOML basic string: JSON's escapes are TOML's (\" \\ \n \uXXXX), nothing invisible left raw
    return json_text(json.dumps(str(v), ensure_ascii=False))


def toml_text(doc: dict[str, dict[str, Any]]) -> str:
    """A TOML document of tables of scalars and lists (torchtitan's job config form)."""
    parts = [
        f"[{table}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items()) for table, keys in doc.items()
    ]
    return "\n".join(parts)


def _json(doc: dict[str, Any]) -> str:
    return json_text(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n"


def config_files(x: TrainingLaunch) -> dict[str, str]:
    """File name -> text: the configs the launch script reads (none for Megatron-LM and torchtune)."""
    if x.framework == "torchtitan":
        head = shell_comment(f"{x.workload}: torchtitan job config, the plan's layout ({layout_line(x)})") + "\n"
        return {config_name(x, "job.toml"): head + toml_text(torchtitan_config(x))}
    if x.framework == "deepspeed":
        files = {config_name(x, "ds_config.json"): _json(deepspeed_config(x))}
        if x.nodes.count > 1:
            hosts = [f"node{i} slots={g}" for i, g in enumerate(x.nodes.gpus)]
            note = "# one line per node, in node-rank order: put each node's host name in place of nodeN"
            files[config_name(x, "hostfile")] = "\n".join([note, *hosts]) + "\n"
        return files
    if x.framework == "peft":
        c = peft_configs(x)
        head = shell_comment(f"{x.workload}: Accelerate config, the plan's layout ({layout_line(x)})") + "\n"
        files = {config_name(x, "accelerate.yaml"): head + yaml.safe_dump(c["accelerate"], sort_keys=False)}
        if "lora" in c:
            files[config_name(x, "lora.json")] = _json(c["lora"])
        if "bnb" in c:
            files[config_name(x, "bnb.json")] = _json(c["bnb"])
        files[config_name(x, "training-args.json")] = _json(c["training_args"])
        return files
    return {}


def torchtitan_script(x: TrainingLaunch) -> str:
    """``torchrun -m torchtitan.train --job.config_file`` on every node, with the tokenizer and learning rate."""
    s = load_launchers()["torchtitan"].settings
    head = _header(x, f"torchtitan {s['module']}")
    notes = [
        "# run it from torchtitan's repository root" + (" on every node" if x.nodes.count > 1 else ""),
        f"# with {config_name(x, 'job.toml')} beside it; the config trains on torchtitan's default dataset: set",
        "# training.dataset (and training.dataset_path) to yours",
    ]
    envs = (["NODE_RANK", "MASTER_ADDR"] if x.nodes.count > 1 else []) + ["LR", "TOKENIZER"]
    args: list[Arg] = [s["config_option"], config_name(x, "job.toml"), "--model.tokenizer_path", Env.of("TOKENIZER")]
    args += ["--optimizer.lr", Env.of("LR")]
    body = join_lines(["torchrun", *torchrun_args(x), "-m", s["module"]], args)
    return "\n".join([*head, *notes, "set -eu", *_needs(envs, x.nodes.count - 1)]) + "\n" + body


def deepspeed_args(x: TrainingLaunch) -> list[Arg]:
    """The ``deepspeed`` launcher's options: one node, or every node started on its own (``--no_ssh``) with the
    hostfile giving the world and node 0 the rendezvous."""
    args: list[Arg] = []
    if x.nodes.count > 1:
        args += ["--hostfile", config_name(x, "hostfile"), "--num_nodes", str(x.nodes.count), "--no_ssh"]
        args += ["--node_rank", Env.of("NODE_RANK"), "--master_addr", Env.of("MASTER_ADDR")]
        args += ["--master_port", str(MASTER_PORT)]
    if x.nodes.uniform:
        args += ["--num_gpus", str(x.nodes.gpus[0])]
    return args


def megatron_deepspeed_args(x: TrainingLaunch) -> list[Arg]:
    """Megatron-DeepSpeed ``pretrain_gpt.py``'s arguments: the model's shape (Llama-style, as its llama2 example
    writes it), TP and PP, recompute, batch, precision, data, and the DeepSpeed config with its ZeRO stage."""
    p, m = x.plan, x.arch
    args: list[Arg] = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden_size)]
    args += ["--ffn-hidden-size", str(m.ffn_size), "--num-attention-heads", str(m.attention_heads)]
    args += ["--num-key-value-heads", str(m.kv_heads)] if m.kv_heads < m.attention_heads else []
    args += ["--kv-channels", str(m.head_dim)] if m.head_dim is not None else []
    args += ["--seq-length", str(x.sequence_length), "--max-position-embeddings", str(max(x.sequence_length, 1))]
    args += ["--use-rotary-position-embeddings", "--normalization", "rmsnorm", "--disable-bias-linear"]
    args += ["--untie-embeddings-and-output-weights", "--no-query-key-layer-scaling"]
    args += ["--attention-dropout", "0", "--hidden-dropout", "0"] + (["--swiglu"] if m.gated_mlp else [])
    args += ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp)]
    # without stages, Megatron's own model (GPTModel); with them, DeepSpeed's pipeline (GPTModelPipe)
    args += ["--no-pipeline-parallel"] if p.pp == 1 else []
    if p.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif p.recompute == "full":
        args += ["--deepspeed-activation-checkpointing", "--recompute-granularity", "full"]
        if p.pp == 1:  # Megatron's block recompute: the plan's layers of the stage
            args += ["--recompute-method", "block", "--recompute-num-layers", str(p.recompute_layers or m.layers)]
        else:  # GPTModelPipe checkpoints every interval of layers ('uniform' only): every layer
            args += ["--recompute-method", "uniform", "--recompute-num-layers", "1"]
    args += ["--micro-batch-size", str(p.micro_batch), "--global-batch-size", str(x.global_batch_sequences)]
    args += ["--train-samples", str(x.train_samples)]
    args += {"bf16": ["--bf16"], "fp16": ["--fp16"]}.get(x.precision, [])
    args += ["--optimizer", {"adamw": "adam"}.get(x.optimizer, x.optimizer), "--lr", Env.of("LR")]
    args += ["--cpu-optimizer"] if "optimizer_offload" in p.memory_options else []
    args += ["--tokenizer-type", "HFTokenizer", "--tokenizer-model", x.model]
    args += ["--data-path", Env.of("DATA_PATH"), "--split", "99,1,0", "--save", Env.of("CHECKPOINT_DIR")]
    if x.plan.kind == "finetune":
        args += ["--load", Env.of("LOAD_DIR"), "--finetune"]
    args += ["--deepspeed", "--deepspeed_config", config_name(x, "ds_config.json"), "--zero-stage", str(p.zero_stage)]
    return args


def _megatron_deepspeed_script(x: TrainingLaunch) -> str:
    head = _header(x, "Megatron-DeepSpeed pretrain_gpt.py under the deepspeed launcher")
    where = "# run it from Megatron-DeepSpeed's repository root" + (" on every node" if x.nodes.count > 1 else "")
    where += f" with {config_name(x, 'ds_config.json')}" + (" and the hostfile" if x.nodes.count > 1 else "")
    where += (
        " beside it\n# the model's shape is the catalog's; RMSNorm, rotary embeddings, SwiGLU, no biases and untied"
        "\n# embeddings are assumed: check them against the model's config"
    )
    envs = ["LR", "DATA_PATH", "CHECKPOINT_DIR"] + (["LOAD_DIR"] if x.plan.kind == "finetune" else [])
    envs = (["NODE_RANK", "MASTER_ADDR"] if x.nodes.count > 1 else []) + envs
    body = join_lines(["deepspeed", *deepspeed_args(x), "pretrain_gpt.py"], megatron_deepspeed_args(x))
    return "\n".join([*head, where, "set -eu", *_needs(envs, x.nodes.count - 1)]) + "\n" + body


def deepspeed_script(x: TrainingLaunch) -> str:
    """The ``deepspeed`` launcher running the user's training script with the plan's configuration JSON, or, with
    TP or PP, Megatron-DeepSpeed's ``pretrain_gpt.py``."""
    if x.megatron_deepspeed:
        return _megatron_deepspeed_script(x)
    head = _header(x, "DeepSpeed")
    offload = (
        "; build DeepSpeedCPUAdam (deepspeed.ops.adam): ZeRO-Offload steps on the CPU"
        if ("optimizer_offload" in x.plan.memory_options)
        else ""
    )
    notes = [
        "# TRAIN_SCRIPT: yours, with deepspeed.add_config_arguments(parser); it passes the model, its optimizer and",
        f"# the learning rate to deepspeed.initialize{offload}",
        f"# run it on every node with {config_name(x, 'ds_config.json')}"
        + (" and the hostfile" if x.nodes.count > 1 else "")
        + " beside it",
    ]
    envs = (["NODE_RANK", "MASTER_ADDR"] if x.nodes.count > 1 else []) + ["TRAIN_SCRIPT"]
    tail: list[Arg] = [Env.of("TRAIN_SCRIPT"), "--deepspeed", "--deepspeed_config", config_name(x, "ds_config.json")]
    body = join_lines(["deepspeed"], [*deepspeed_args(x), *tail])
    return "\n".join([*head, *notes, "set -eu", *_needs(envs, x.nodes.count - 1)]) + "\n" + body


def accelerate_args(x: TrainingLaunch) -> list[Arg]:
    """``accelerate launch``'s options: the config file, and on several nodes this node's rank and node 0's address."""
    args: list[Arg] = ["--config_file", config_name(x, "accelerate.yaml")]
    if x.nodes.count > 1:
        args += ["--machine_rank", Env.of("NODE_RANK"), "--main_process_ip", Env.of("MASTER_ADDR")]
        args += ["--main_process_port", str(MASTER_PORT)]
    return args


def peft_script(x: TrainingLaunch) -> str:
    """``accelerate launch`` of the user's PEFT training script, handed the TrainingArguments JSON."""
    method = {"qlora": "QLoRA", "lora": "LoRA"}.get(x.method, "full fine-tune")
    head = _header(x, f"PEFT {method} under Accelerate")
    lora, bnb = config_name(x, "lora.json"), config_name(x, "bnb.json")
    notes = [
        f"# TRAIN_SCRIPT: yours (Trainer or TRL SFTTrainer); it reads {config_name(x, 'training-args.json')} with",
        "# HfArgumentParser.parse_json_file"
        + (f", LoraConfig(**json.load({lora}))" if x.method != "full" else "")
        + (f" and BitsAndBytesConfig.from_dict(json.load({bnb}))" if x.method == "qlora" else ""),
        f"# and loads {x.model}; run it"
        + (" on every node" if x.nodes.count > 1 else "")
        + " with those files beside it",
    ]
    envs = (["NODE_RANK", "MASTER_ADDR"] if x.nodes.count > 1 else []) + ["TRAIN_SCRIPT"]
    tail: list[Arg] = [Env.of("TRAIN_SCRIPT"), config_name(x, "training-args.json")]
    body = join_lines(["accelerate", "launch"], [*accelerate_args(x), *tail])
    return "\n".join([*head, *[shell_comment(n[2:]) for n in notes], "set -eu", *_needs(envs, x.nodes.count - 1)]) + (
        "\n" + body
    )


def launch_script(x: TrainingLaunch) -> str:
    """The launch script of a launch its framework runs as planned."""
    scripts = {
        "megatron-lm": megatron_script, "torchtune": torchtune_script, "torchtitan": torchtitan_script,
        "deepspeed": deepspeed_script, "peft": peft_script,
    }  # fmt: skip
    return scripts[x.framework](x)
