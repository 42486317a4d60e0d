"""``clusterplan export`` for training and fine-tuning: one design's training layout as a framework runs it.

The framework is the one the plan assumed (:attr:`TrainingPlan.framework`, the workload's ``framework`` or its
method's default: Megatron-LM's ``pretrain_gpt.py`` under ``torchrun`` for pretraining and full fine-tunes,
torchtune's LoRA recipes ``lora_finetune_single_device`` / ``lora_finetune_distributed`` for LoRA and QLoRA;
torchtitan's ``torchtitan.train`` with a TOML job config; DeepSpeed's launcher with a configuration JSON; PEFT under
``accelerate launch`` with an Accelerate config, a LoraConfig, a BitsAndBytesConfig for QLoRA and the Trainer's
arguments); a plan on another framework is refused by reason code (no launch is written for it yet). The configs of
torchtitan, DeepSpeed and PEFT are built here as data (:func:`torchtitan_config`, :func:`deepspeed_config`,
:func:`peft_configs`), every name in them from ``catalog/launchers.yaml``; the renderer only writes them out. A record,
:class:`TrainingLaunch`, carries everything the plan chose, in the plan's terms: TP, CP, PP, virtual stages,
recompute, ZeRO stage, micro-batch, the global batch as the physics ran it (whole rounds of ``dp x micro-batch``,
:func:`clusterplan.physics.training.step_batch`), sequence length, precision, optimizer, memory options, and the
nodes the design's hardware lines give the run. What the framework cannot run as planned is a reason code
(:class:`~clusterplan.physics.reasons.FrameworkCannotRun`) on the record, never a silently different launch: the
renderer (:mod:`clusterplan.render.training_export_view`) writes no config for a refused record, only its reasons.

Which framework runs what, and which layouts each cannot run (the frameworks' own sources):
* Megatron-LM (megatron/training/arguments.py): TP, CP, PP, interleaved stages, EP, selective or block recompute,
  the distributed optimizer (ZeRO-1) and Megatron-FSDP (``optim_grads`` ZeRO-2, ``optim_grads_params`` ZeRO-3);
  its optimizers are ``adam`` (AdamW) and ``sgd``: no Adafactor, no 8-bit or paged optimizer, no optimizer step in
  the backward pass.
* torchtune's LoRA recipes (recipes/lora_finetune_distributed.py): data parallel (FSDP2) and context parallel only;
  the recipe asserts ``tensor_parallel_dim == 1`` and has no pipeline schedule; every layer is checkpointed when
  activation checkpointing is on; training in bf16 or fp32.
* torchtitan (torchtitan/config/job_config.py, parallelize.py): FSDP2 (``data_parallel_shard_degree``, resharding
  after forward or not: ZeRO 3 or 2; beside pipeline stages its schedule keeps each stage whole for the step: ZeRO 1,
  resharding ``default``), TP, CP, PP with 1F1B or Interleaved1F1B, EP; its DDP (``data_parallel_replicate_degree``
  alone) runs with no other parallelism, so a replicated data-parallel layout beside TP, CP or PP is refused, and so
  is ZeRO 1 without PP; its models are named flavors (a shape is Python there).
* DeepSpeed (ds_config.json, deepspeed launcher): ZeRO 0-3 with optimizer offload over plain data parallelism, the
  user's training script; with TP or PP, Megatron-DeepSpeed's ``pretrain_gpt.py`` (megatron/arguments.py), whose
  pipeline runs DeepSpeed's pipeline engine (1F1B, ZeRO 0 or 1, no interleaving); no CP or EP; LoRA and QLoRA under
  DeepSpeed run through PEFT (framework ``peft``).
* PEFT + Accelerate: DDP or FSDP (ZeRO 0 or 3), no tensor, pipeline or context parallelism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from clusterplan.catalog.launchers import load_launchers
from clusterplan.design.export import model_repo
from clusterplan.evaluation import evaluate
from clusterplan.physics.reasons import FrameworkCannotRun, FrameworkFeature
from clusterplan.physics.training import step_batch
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.plan import TrainingPlan
from clusterplan.requirement.load import framework_name
from clusterplan.wording.safe import file_slug

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import ModelArchitecture
    from clusterplan.plan import Design, HardwareLine
    from clusterplan.requirement.load import ResolvedRequirement
    from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload

Framework = Literal["megatron-lm", "torchtune", "torchtitan", "deepspeed", "peft"]
FRAMEWORK_NAME: dict[Framework, str] = {
    "megatron-lm": "Megatron-LM", "torchtune": "torchtune", "torchtitan": "torchtitan", "deepspeed": "DeepSpeed",
    "peft": "PEFT + Accelerate",
}  # fmt: skip
# Megatron-LM's --optimizer choices for the planner's optimizers (adam is AdamW: decoupled weight decay).
MEGATRON_OPTIMIZER = {"adamw": "adam", "sgd": "sgd"}
# Memory options each framework has a form of (physics/optimizer_memory.py names them).
MEGATRON_MEMORY_OPTIONS: frozenset[str] = frozenset()
TORCHTUNE_MEMORY_OPTIONS = frozenset({"activation_offload", "optimizer_offload"})


@dataclass(frozen=True)
class Nodes:
    """The machines one training run spans: GPUs on each, in launch order (``torchrun --nnodes``)."""

    gpus: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def uniform(self) -> bool:
        return len(set(self.gpus)) <= 1


@dataclass(frozen=True)
class TrainingLaunch:
    """One training or fine-tuning workload of a design, as its framework launches it (the plan's layout)."""

    workload: str
    framework: Framework
    method: Literal["full", "lora", "qlora"]
    model_id: str
    model: str  # Hugging Face repository (or the catalog id)
    arch: ModelArchitecture
    plan: TrainingPlan
    nodes: Nodes
    sequence_length: int
    requested_batch_tokens: float  # the requirement's global_batch_tokens
    micro_batches: int  # per optimizer step (gradient accumulation)
    global_batch_sequences: int  # micro_batches x dp x micro_batch: the global batch as the plan ran it
    train_samples: int  # sequences to train on: tokens / sequence length, rounded up
    train_steps: int  # optimizer steps: train_samples / global batch, rounded up
    precision: str
    optimizer: str
    lora_rank: int
    layers_per_virtual_stage: int | None  # Megatron: layers / (pp x virtual stages); None without interleaving
    recompute_layers_per_chunk: int | None  # Megatron block recompute: layers per model chunk (virtual stage)
    # torchtune: (base config, model builder) for the plan's GPU count; torchtitan: (model.name, model.flavor)
    recipe: tuple[str, str] | None = None
    single_device: bool = False  # torchtune: the single-device recipe (one GPU and its config ships)
    refusals: tuple[FrameworkCannotRun, ...] = field(default_factory=tuple)
    number: int = 1  # the launch's number in the export (its files' prefix, after the serving launches')

    @property
    def framework_name(self) -> str:
        return FRAMEWORK_NAME[self.framework]

    @property
    def megatron_deepspeed(self) -> bool:
        """DeepSpeed with tensor or pipeline parallelism: Megatron-DeepSpeed's pretrain_gpt.py runs it."""
        return self.framework == "deepspeed" and (self.plan.tp > 1 or self.plan.pp > 1)


def export_training(
    resolved: ResolvedRequirement, catalog: Catalog, chosen: Design, first: int = 1
) -> list[TrainingLaunch]:
    """The training and fine-tuning launches of one design (none when it trains nothing), numbered from ``first``
    (after the serving launches: every file of a launch carries its number, so no two launches share a file)."""
    req = resolved.requirement
    by_name = {w.name: (i, w) for i, w in enumerate(req.workloads)}
    out: list[TrainingLaunch] = []
    for wp in chosen.workloads:
        if not isinstance(wp, TrainingPlan):
            continue
        i, w = by_name[wp.workload]
        assert w.kind != "serving"
        x = _launch(resolved.model_for(i), catalog, w, wp, _nodes(chosen.hardware, wp))
        out.append(replace(x, number=first + len(out)))
    return out


def _nodes(hardware: list[HardwareLine], wp: TrainingPlan) -> Nodes:
    """The machines the run takes: its cloud line's instances, or the design's owned servers of its GPU, largest
    first, until the layout's GPUs are placed (a run on owned servers shares them with serving in turn)."""
    if wp.deployment == "cloud":
        lines = [h for h in hardware if h.kind == "cloud" and h.trains == wp.workload]
    else:
        lines = sorted((h for h in hardware if h.kind == "owned" and h.gpu == wp.gpu), key=lambda h: -h.gpus_per_unit)
    placed: list[int] = []
    left = wp.gpus
    for h in lines:
        for _ in range(h.units):
            if left <= 0:
                break
            placed.append(min(h.gpus_per_unit, left))
            left -= placed[-1]
    if left > 0:  # no line holds it (a plan read back without its hardware): one node per GPU count named
        placed.append(left)
    return Nodes(tuple(placed))


def _launch(
    arch: ModelArchitecture, catalog: Catalog, w: TrainingWorkload | FinetuneWorkload, wp: TrainingPlan, nodes: Nodes
) -> TrainingLaunch:
    method: Literal["full", "lora", "qlora"] = w.method if w.kind == "finetune" else "full"
    # The framework the plan assumed (its layouts are that framework's); a plan written before frameworks were
    # data names none: the method's default, as the requirement resolves it.
    named = wp.framework or framework_name(w)
    spec = catalog.find_framework(named)
    assumed: str = spec.id if spec is not None else named  # an alias (nemo, titan, accelerate) as its framework's id
    framework: Framework = assumed if assumed in FRAMEWORK_NAME else "megatron-lm"
    job = evaluate.training_job(w)
    batch = step_batch(job, TrainingSettings(dp=wp.dp, zero_stage=wp.zero_stage, micro_batch=wp.micro_batch))
    sequences = batch.micro_batches * wp.dp * wp.micro_batch
    samples = math.ceil(w.tokens / w.sequence_length)
    cat_model = catalog.models.get(arch.name) or next((m for m in catalog.models.values() if m.name == arch.name), None)
    model_id = cat_model.id if cat_model is not None else arch.name
    repo = model_repo(cat_model.source, cat_model.id) if cat_model is not None else arch.name
    vpp = max(wp.virtual_stages, 1)
    per_chunk = None
    if wp.recompute == "full":
        stage_layers = arch.layers // max(wp.pp, 1)
        per_chunk = math.ceil((wp.recompute_layers or stage_layers) / vpp)
    recipe: tuple[str, str] | None = None
    single = False
    refusals: list[FrameworkCannotRun] = []
    if framework == "torchtune":
        row = load_launchers()["torchtune-lora"].models.get(model_id)
        # One GPU runs the single-device recipe where its config ships, else the distributed one as one process.
        single = row is not None and row[0] is not None and nodes.count == 1 and wp.gpus == 1
        config = None if row is None else row[0] if single else row[1]
        builder = None if row is None else row[2] if method == "lora" else row[3]
        if config is not None and builder is not None:
            recipe = (config, builder)
        refusals = _torchtune_refusals(wp, w.precision, model_id, recipe is not None)
    elif framework == "megatron-lm":
        refusals = _megatron_refusals(wp, w.optimizer)
    else:
        titan = load_launchers()["torchtitan"].models.get(model_id)
        recipe = (str(titan[0]), str(titan[1])) if framework == "torchtitan" and titan else None
        refusals = _config_refusals(framework, wp, (method, w.precision, w.optimizer), model_id, recipe is not None)
    if assumed not in FRAMEWORK_NAME:
        refusals = [
            FrameworkCannotRun(framework=assumed, feature="launcher", value=" and ".join(FRAMEWORK_NAME.values()))
        ]
    return TrainingLaunch(
        workload=wp.workload, framework=framework, method=method, model_id=model_id, model=repo, arch=arch, plan=wp,
        nodes=nodes, sequence_length=round(w.sequence_length), requested_batch_tokens=w.global_batch_tokens,
        micro_batches=batch.micro_batches, global_batch_sequences=sequences, train_samples=samples,
        train_steps=math.ceil(samples / sequences), precision=w.precision, optimizer=w.optimizer,
        lora_rank=w.lora_rank if w.kind == "finetune" else 0,
        layers_per_virtual_stage=arch.layers // (wp.pp * vpp) if vpp > 1 else None,
        recompute_layers_per_chunk=per_chunk, recipe=recipe, single_device=single, refusals=tuple(refusals),
    )  # fmt: skip


def _refuse(framework: Framework, feature: FrameworkFeature, value: str) -> FrameworkCannotRun:
    return FrameworkCannotRun(framework=FRAMEWORK_NAME[framework], feature=feature, value=value)


def _megatron_refusals(wp: TrainingPlan, optimizer: str) -> list[FrameworkCannotRun]:
    out = [_refuse("megatron-lm", "memory_option", o) for o in wp.memory_options if o not in MEGATRON_MEMORY_OPTIONS]
    if optimizer not in MEGATRON_OPTIMIZER:
        out.append(_refuse("megatron-lm", "optimizer", optimizer))
    return out


def _torchtune_refusals(wp: TrainingPlan, precision: str, model_id: str, has_recipe: bool) -> list[FrameworkCannotRun]:
    out: list[FrameworkCannotRun] = []
    if wp.pp > 1:
        stages = f" ({wp.virtual_stages} virtual stages each)" if wp.virtual_stages > 1 else ""
        out.append(_refuse("torchtune", "pipeline", f"{wp.pp}{stages}"))
    if wp.tp > 1:
        out.append(_refuse("torchtune", "tensor", str(wp.tp)))
    if wp.ep > 1:
        out.append(_refuse("torchtune", "expert", str(wp.ep)))
    out += [_refuse("torchtune", "memory_option", o) for o in wp.memory_options if o not in TORCHTUNE_MEMORY_OPTIONS]
    if precision not in ("bf16", "fp32"):
        out.append(_refuse("torchtune", "precision", precision))
    if not has_recipe:  # no shipped LoRA config of this model for one GPU (single device) or several
        where = f"on {wp.gpus} GPU" + ("s" if wp.gpus > 1 else "")
        out.append(_refuse("torchtune", "model", f"{model_id} {where} (no LoRA config for it)"))
    return out


# ---------------------------------------------------------------------------------------------------------------
# torchtitan, DeepSpeed, PEFT + Accelerate: what each cannot run, and its config as data
# ---------------------------------------------------------------------------------------------------------------


def _config_refusals(
    framework: Framework, wp: TrainingPlan, job: tuple[str, str, str], model_id: str, has_model: bool
) -> list[FrameworkCannotRun]:
    """What torchtitan, DeepSpeed or PEFT cannot run of the plan (``job``: method, precision, optimizer), each a
    reason code naming the plan's value; names the launcher data has no entry for are refused, never guessed."""
    method, precision, optimizer = job
    if framework == "torchtitan":
        s = load_launchers()["torchtitan"].settings
        out = [_refuse(framework, "memory_option", o) for o in wp.memory_options if o not in s["memory_options"]]
        if wp.zero_stage == 1 and wp.pp == 1:  # FSDP2 acts as ZeRO 1 only under a pipeline schedule
            out.append(_refuse(framework, "zero", "1 without PP (FSDP2 shards gradients too: ZeRO 2 or 3)"))
        elif wp.zero_stage == 0 and wp.dp > 1 and wp.tp * wp.pp * wp.cp > 1:
            out.append(_refuse(framework, "zero", "0 (replicated) beside TP, CP or PP: its DDP runs alone"))
        if wp.ep > 1 and not (wp.cp <= wp.ep <= (wp.dp if wp.zero_stage >= 1 else 1) * wp.cp):
            out.append(_refuse(framework, "expert", f"{wp.ep} (dp2ep: CP <= EP <= FSDP x CP)"))
        if optimizer not in s["optimizers"]:
            out.append(_refuse(framework, "optimizer", optimizer))
        if precision not in s["mixed_precision_param"]:
            out.append(_refuse(framework, "precision", precision))
        if not has_model:
            out.append(_refuse(framework, "model", f"{model_id} (no torchtitan model flavor for it)"))
        return out
    out = []
    if wp.cp > 1:
        out.append(_refuse(framework, "context", str(wp.cp)))
    if wp.ep > 1:
        out.append(_refuse(framework, "expert", str(wp.ep)))
    if framework == "deepspeed":
        return out + _deepspeed_refusals(wp, method, precision, optimizer)
    if wp.tp > 1:
        out.append(_refuse(framework, "tensor", str(wp.tp)))
    if wp.pp > 1:
        out.append(_refuse(framework, "pipeline", str(wp.pp)))
    acc = load_launchers()["accelerate"].settings
    if wp.gpus > 1 and str(wp.zero_stage) not in acc["distributed_type"]:
        out.append(_refuse(framework, "zero", f"{wp.zero_stage} (DDP or FSDP: ZeRO 0 or 3)"))
    if "optimizer_offload" in wp.memory_options and wp.zero_stage != 3:
        out.append(_refuse(framework, "memory_option", "optimizer_offload (FSDP offload: ZeRO 3)"))
    known = {"optimizer_offload", "adamw8bit", "paged_optimizer"}
    out += [_refuse(framework, "memory_option", o) for o in wp.memory_options if o not in known]
    if optimizer not in load_launchers()["hf-training-args"].settings["optim"]:
        out.append(_refuse(framework, "optimizer", optimizer))
    if precision not in acc["mixed_precision"]:
        out.append(_refuse(framework, "precision", precision))
    return out


def _deepspeed_refusals(wp: TrainingPlan, method: str, precision: str, optimizer: str) -> list[FrameworkCannotRun]:
    """DeepSpeed: plain data parallelism runs the user's script; TP or PP run Megatron-DeepSpeed's pretrain_gpt.py
    (Megatron's adam or sgd; DeepSpeed's pipeline engine: ZeRO 0 or 1, no interleaving)."""
    s = load_launchers()["deepspeed"].settings
    out = [_refuse("deepspeed", "memory_option", o) for o in wp.memory_options if o not in s["memory_options"]]
    if method != "full":
        out.append(_refuse("deepspeed", "method", f"{method} (LoRA under DeepSpeed runs through PEFT: peft)"))
    if precision not in (*s["precision"], "fp32"):
        out.append(_refuse("deepspeed", "precision", precision))
    if wp.tp > 1 or wp.pp > 1:  # Megatron-DeepSpeed
        if wp.pp > 1 and wp.zero_stage >= 2:
            out.append(
                _refuse("deepspeed", "zero", f"{wp.zero_stage} beside PP {wp.pp} (its pipeline engine: ZeRO 0 or 1)")
            )
        if wp.virtual_stages > 1:
            out.append(_refuse("deepspeed", "pipeline", f"{wp.pp} ({wp.virtual_stages} virtual stages each)"))
        if optimizer not in MEGATRON_OPTIMIZER:
            out.append(_refuse("deepspeed", "optimizer", f"{optimizer} (Megatron-DeepSpeed: adam or sgd)"))
    return out


def _output_dir(x: TrainingLaunch) -> str:
    return f"./{file_slug(x.workload, 'workload')}-{x.framework}"


def torchtitan_config(x: TrainingLaunch) -> dict[str, dict[str, Any]]:
    """torchtitan's job config (TOML sections and keys of job_config.py): the plan's layout, batch and precision.
    Batch: without pipeline stages each GPU runs ``micro_batch`` sequences and torchtitan accumulates gradients to
    the global batch (``global_batch_size / (local_batch_size x data-parallel degree)`` rounds); with them the local
    batch is the step's micro-batches, which the schedule splits into pipeline micro-batches of ``micro_batch``."""
    assert x.recipe is not None
    s = load_launchers()["torchtitan"].settings
    p = x.plan
    model: dict[str, Any] = {"name": x.recipe[0], "flavor": x.recipe[1]}
    if x.precision == "fp8":
        model["converters"] = [s["fp8_converter"]]
    sharded = p.zero_stage >= 1  # FSDP2 (ZeRO 1: beside pipeline stages, whole for the step)
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": 1 if sharded else p.dp, "data_parallel_shard_degree": p.dp if sharded else 1,
        "tensor_parallel_degree": p.tp, "pipeline_parallel_degree": p.pp, "context_parallel_degree": p.cp,
        "expert_parallel_degree": p.ep,
    }  # fmt: skip
    if sharded:
        parallelism["fsdp_reshard_after_forward"] = s["reshard_after_forward"][str(p.zero_stage)]
    if p.pp > 1:
        parallelism["pipeline_parallel_schedule"] = s["interleaved_schedule" if p.virtual_stages > 1 else "schedule"]
        parallelism["pipeline_parallel_microbatch_size"] = p.micro_batch
        for end in ("first", "last"):  # torchtitan's default gives the end stages a layer less; the plan does not
            parallelism[f"pipeline_parallel_{end}_stage_less_layers"] = s["stage_less_layers"]
        if x.layers_per_virtual_stage is not None:
            parallelism["pipeline_parallel_layers_per_stage"] = x.layers_per_virtual_stage
    training: dict[str, Any] = {
        "local_batch_size": p.micro_batch * (x.micro_batches if p.pp > 1 else 1),
        "global_batch_size": x.global_batch_sequences, "seq_len": x.sequence_length, "steps": x.train_steps,
        "mixed_precision_param": s["mixed_precision_param"][x.precision],
        "enable_cpu_offload": "optimizer_offload" in p.memory_options,
    }  # fmt: skip
    checkpoint: dict[str, Any] = {"mode": s["recompute"][p.recompute]}
    if p.recompute == "selective":
        checkpoint["selective_ac_option"] = s["selective_ac_option"]
    optimizer = {
        "name": s["optimizers"][x.optimizer],
        "early_step_in_backward": "optimizer_in_backward" in p.memory_options,
    }
    return {
        "job": {"dump_folder": _output_dir(x), "description": x.workload}, "model": model, "optimizer": optimizer,
        "training": training, "parallelism": parallelism, "activation_checkpoint": checkpoint,
    }  # fmt: skip


def deepspeed_config(x: TrainingLaunch) -> dict[str, Any]:
    """DeepSpeed's configuration JSON: the plan's batch (``train_batch_size`` = micro-batch x accumulation x
    data-parallel GPUs, as DeepSpeed asserts), ZeRO stage, optimizer offload, precision and recompute."""
    s = load_launchers()["deepspeed"].settings
    p = x.plan
    zero: dict[str, Any] = {"stage": p.zero_stage}
    if "optimizer_offload" in p.memory_options:
        zero["offload_optimizer"] = {"device": s["offload_device"], "pin_memory": True}
    out: dict[str, Any] = {
        "train_batch_size": x.global_batch_sequences, "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": x.micro_batches, "steps_per_print": s["steps_per_print"],
    }  # fmt: skip
    for precision, section in s["precision"].items():
        out[section] = {"enabled": x.precision == precision}
    out["zero_optimization"] = zero
    if p.recompute == "full":
        layers = p.recompute_layers or x.arch.layers
        out["activation_checkpointing"] = {"partition_activations": False, "number_checkpoints": layers}
    return out


def peft_configs(x: TrainingLaunch) -> dict[str, dict[str, Any]]:
    """PEFT under Accelerate: ``accelerate`` (the config file: DDP, FSDP or one GPU, the nodes and processes),
    ``lora`` (LoraConfig: the plan's rank), ``bnb`` (QLoRA's BitsAndBytesConfig, absent for LoRA) and
    ``training_args`` (TrainingArguments: micro-batch, accumulation, steps, precision, recompute, optimizer)."""
    launchers = load_launchers()
    acc, lora, bnb = (
        launchers["accelerate"].settings,
        launchers["peft-lora"].settings,
        launchers["bitsandbytes"].settings,
    )
    p = x.plan
    kind = acc["single_gpu"] if p.gpus == 1 else acc["distributed_type"][str(p.zero_stage)]
    accelerate: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE", "distributed_type": kind, "mixed_precision": acc["mixed_precision"][x.precision],
        "num_machines": x.nodes.count, "num_processes": p.gpus, "machine_rank": 0, "main_training_function": "main",
        "rdzv_backend": "static", "same_network": True, "use_cpu": False,
    }  # fmt: skip
    if kind == "FSDP":
        accelerate["fsdp_config"] = {
            "fsdp_sharding_strategy": acc["fsdp_sharding_strategy"], "fsdp_auto_wrap_policy": acc["fsdp_auto_wrap_policy"],
            "fsdp_state_dict_type": acc["fsdp_state_dict_type"], "fsdp_offload_params": "optimizer_offload" in p.memory_options,
            "fsdp_cpu_ram_efficient_loading": True, "fsdp_sync_module_states": True, "fsdp_use_orig_params": False,
        }  # fmt: skip
    out: dict[str, dict[str, Any]] = {"accelerate": accelerate}
    if x.method == "full":  # every weight trains: no adapter
        out["training_args"] = _training_args(x)
        return out
    out["lora"] = {
        "peft_type": lora["peft_type"], "task_type": lora["task_type"], "r": x.lora_rank,
        "lora_alpha": lora["alpha_per_rank"] * x.lora_rank, "lora_dropout": lora["lora_dropout"],
        "target_modules": lora["target_modules"], "bias": lora["bias"],
    }  # fmt: skip
    if x.method == "qlora":
        dtype = bnb["compute_dtype"][x.precision]
        out["bnb"] = {
            "quant_method": bnb["quant_method"], "load_in_4bit": True, "bnb_4bit_quant_type": bnb["bnb_4bit_quant_type"],
            "bnb_4bit_compute_dtype": dtype, "bnb_4bit_use_double_quant": bnb["bnb_4bit_use_double_quant"],
            "bnb_4bit_quant_storage": dtype,
        }  # fmt: skip
    out["training_args"] = _training_args(x)
    return out


def _training_args(x: TrainingLaunch) -> dict[str, Any]:
    """TrainingArguments of the plan: micro-batch, accumulation, steps, precision, recompute and optimizer."""
    p = x.plan
    return {
        "output_dir": _output_dir(x), "per_device_train_batch_size": p.micro_batch,
        "gradient_accumulation_steps": x.micro_batches, "max_steps": x.train_steps,
        "bf16": x.precision == "bf16", "fp16": x.precision == "fp16", "gradient_checkpointing": p.recompute != "none",
        "optim": _hf_optim(x.optimizer, p.memory_options),
    }  # fmt: skip


def _hf_optim(optimizer: str, memory_options: list[str]) -> str:
    """TrainingArguments.optim for the plan's optimizer and its 8-bit or paged state (bitsandbytes)."""
    s = load_launchers()["hf-training-args"].settings
    eight, paged = "adamw8bit" in memory_options, "paged_optimizer" in memory_options
    if eight or paged:
        return str(s["optim_paged_8bit"] if eight and paged else s["optim_8bit"] if eight else s["optim_paged"])
    return str(s["optim"][optimizer])
