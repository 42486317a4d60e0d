"""What a training or fine-tuning run asks of the physics, and how one optimizer step runs around its layout.

Two values the training physics (:mod:`clusterplan.physics.training`, :mod:`~clusterplan.physics.training_comm`)
take whole instead of the requirement's workload schema and a handful of loose arguments, so the physics imports
nothing from the layers above it: a :class:`TrainingJob` (method, precision, optimizer, sequence and batch sizes,
tokens and deadline), built from a workload by :func:`clusterplan.evaluation.evaluate.training_job`; and
:class:`TrainingSettings` (data-parallel copies, ZeRO stage, micro-batch and memory plan), beside the
:class:`~clusterplan.physics.layout.Layout` of one model copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clusterplan.physics.optimizer_memory import PLAIN, MemoryPlan

Method = Literal["full", "lora", "qlora"]


@dataclass(frozen=True)
class FrameworkRates:
    """What a training framework (catalog/frameworks.yaml) does to a step's time, beside the layouts it runs.

    ``achieved_rate``: the share of the reference framework's (Megatron-LM's, on whose runs ``training_mfu`` is
    fitted) achieved GEMM and attention rate it reaches, 1.0 where no fair published run of it says otherwise;
    ``tp_comm_overlap``: it pipelines tensor-parallel collectives with the GEMMs they feed where the GPU's kernels
    can (Megatron-LM ``--tp-comm-overlap``, torchtitan async TP); ``dp_comm_overlap``: it overlaps data-parallel
    gradient reduction and parameter gathers with compute (Megatron-LM ``--overlap-grad-reduce`` /
    ``--overlap-param-gather``, FSDP2 prefetch, DeepSpeed ``overlap_comm``).
    """

    achieved_rate: float = 1.0
    tp_comm_overlap: bool = True
    dp_comm_overlap: bool = True


REFERENCE_RATES = FrameworkRates()  # Megatron-LM's: the runs training_mfu is fitted on


@dataclass(frozen=True)
class TrainingJob:
    """One training or fine-tuning run as the physics reads it.

    ``method``: ``full`` (every weight trains), ``lora`` or ``qlora`` (a frozen base plus adapters of rank
    ``lora_rank``; 0 for pretraining, which has none); ``precision``: the compute precision; ``optimizer``: sets the
    optimizer state's bytes per parameter; ``sequence_length`` and ``global_batch_tokens``: tokens per sequence and
    per optimizer step; ``tokens``: tokens to train on; ``deadline_s``: the wall-clock time allowed, seconds;
    ``framework``: the rates and overlaps of the framework it runs on (:class:`FrameworkRates`).
    """

    tokens: float
    deadline_s: float
    sequence_length: float = 4096.0
    global_batch_tokens: float = 4_194_304.0
    method: Method = "full"
    lora_rank: int = 0
    precision: str = "bf16"
    optimizer: str = "adamw"
    framework: FrameworkRates = REFERENCE_RATES


@dataclass(frozen=True)
class TrainingSettings:
    """How one optimizer step runs around a layout: ``dp`` data-parallel copies of the model, ZeRO stage
    ``zero_stage`` (0-3), ``micro_batch`` sequences per micro-batch per GPU, and the memory options of
    ``memory_plan`` (:mod:`clusterplan.physics.optimizer_memory`)."""

    dp: int = 1
    zero_stage: int = 0
    micro_batch: int = 1
    memory_plan: MemoryPlan = PLAIN
