"""``clusterplan export`` for training and fine-tuning: one design's training layout as a framework runs it.

The framework is the one the plan assumed (:attr:`TrainingPlan.framework`, the workload's ``framework`` or its
method's default: Megatron-LM's ``pretrain_gpt.py`` under ``torchrun`` for pretraining and full fine-tunes,
torchtune's LoRA recipes ``lora_finetune_single_device`` / ``lora_finetune_distributed`` for LoRA and QLoRA); a plan
on another framework is refused by reason code (no launch is written for it yet). A record,
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from clusterplan.catalog.launchers import load_launchers
from clusterplan.design.export import model_repo
from clusterplan.evaluation import evaluate
from clusterplan.physics.reasons import FrameworkCannotRun, FrameworkFeature
from clusterplan.physics.training import step_batch
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.plan import TrainingPlan
from clusterplan.requirement.load import framework_name

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import ModelArchitecture
    from clusterplan.plan import Design, HardwareLine
    from clusterplan.requirement.load import ResolvedRequirement
    from clusterplan.requirement.schema import FinetuneWorkload, TrainingWorkload

Framework = Literal["megatron-lm", "torchtune"]
FRAMEWORK_NAME: dict[Framework, str] = {"megatron-lm": "Megatron-LM", "torchtune": "torchtune"}
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
    recipe: tuple[str, str] | None = None  # torchtune: (base config, model builder) for the plan's GPU count
    single_device: bool = False  # torchtune: the single-device recipe (one GPU and its config ships)
    refusals: tuple[FrameworkCannotRun, ...] = field(default_factory=tuple)

    @property
    def framework_name(self) -> str:
        return FRAMEWORK_NAME[self.framework]


def export_training(resolved: ResolvedRequirement, catalog: Catalog, chosen: Design) -> list[TrainingLaunch]:
    """The training and fine-tuning launches of one design (none when it trains nothing)."""
    req = resolved.requirement
    by_name = {w.name: (i, w) for i, w in enumerate(req.workloads)}
    out: list[TrainingLaunch] = []
    for wp in chosen.workloads:
        if not isinstance(wp, TrainingPlan):
            continue
        i, w = by_name[wp.workload]
        assert w.kind != "serving"
        out.append(_launch(resolved.model_for(i), catalog, w, wp, _nodes(chosen.hardware, wp)))
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
    method = w.method if w.kind == "finetune" else "full"
    # The framework the plan assumed (its layouts are that framework's); a plan written before frameworks were
    # data names none: the method's default, as the requirement resolves it.
    assumed = wp.framework or framework_name(w)
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
    else:
        refusals = _megatron_refusals(wp, w.optimizer)
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
