"""Hardware and layout rules: what a GPU can run at all. Each broken rule is one reason record.

Rules here are yes/no facts (precision support, link topology, divisibility); whether memory fits is
decided by :mod:`clusterplan.physics.memory` and reported by the estimators alongside these reasons.
"""

from __future__ import annotations

from typing import Literal

from clusterplan.catalog.load import shipped_kernels
from clusterplan.catalog.schema import ArchitectureKernels, GpuSpec, ModelArchitecture, kernels_for
from clusterplan.physics.memo import HeldMemo
from clusterplan.physics.reasons import (
    Bf16Unsupported,
    Fp8Unsupported,
    PpExceedsLayers,
    QloraUnsupported,
    Reason,
    TpCrossesNodes,
    TpExceedsScaleUpDomain,
    TpNeedsNvlink,
    TpSplitsAttentionHeads,
    TpSplitsKvHeads,
    ZeroStageUnknown,
)

_WEIGHT_ONLY = {"int8", "int4"}
Fp4Format = Literal["nvfp4", "mxfp4"]
# bitsandbytes' 4-bit kernels (QLoRA) need Turing or later.
QLORA_MIN_COMPUTE_CAPABILITY = 7.5


def _cc(gpu: GpuSpec) -> float | None:
    if gpu.compute_capability is None:
        return None
    try:
        return float(gpu.compute_capability)
    except ValueError:
        return None


def supports_precision(gpu: GpuSpec, precision: str) -> bool:
    """Native tensor-core support for a compute/storage precision.

    fp8 needs native FP8 tensor cores (Hopper, Ada, Blackwell, MI300X); bf16 needs Ampere or later on
    NVIDIA (compute capability >= 8.0; T4 and V100 run fp16 only). fp16 and fp32 run everywhere.
    """
    if precision in ("fp16", "fp32"):
        return True
    if precision == "bf16":
        cc = _cc(gpu)
        if gpu.vendor == "nvidia" and cc is not None and cc < 8.0:
            return False
        return "bf16" in gpu.native_precisions or gpu.dense.bf16_tflops is not None
    if precision == "fp8":
        return "fp8" in gpu.native_precisions
    return precision in gpu.native_precisions


def half_precision(gpu: GpuSpec) -> str:
    """The 16-bit compute precision a GPU runs: bf16 where native, else fp16."""
    return "bf16" if supports_precision(gpu, "bf16") else "fp16"


def compute_precision_for_weights(gpu: GpuSpec, quant: str, fp4_activations: str = "fp4") -> str:
    """Precision the matmuls run at: fp8 and fp4 only when native; int8/int4 (and fp4 without FP4 tensor
    cores) are weight-only and dequantise to 16-bit (vLLM's Marlin FP4 / MXFP4 kernels on Hopper and Ampere).

    ``fp4_activations`` ``fp8``: FP4 weights meet FP8 activations, so a GPU with FP4 tensor cores multiplies at
    its FP8 rate — MXFP4 checkpoints on Blackwell (gpt-oss: "The activation can be in either bf16 (Hopper) or
    mxfp8 (Blackwell)", TensorRT-LLM ``examples/models/core/gpt_oss/README.md`` MoE support matrix, PR #6908).
    """
    if quant == "fp4" and fp4_activations == "fp8" and supports_precision(gpu, "fp4"):
        return "fp8"
    if quant in ("fp8", "fp4") and supports_precision(gpu, quant):
        return quant
    if quant in ("bf16", "fp16"):
        return quant if supports_precision(gpu, quant) else "fp16"
    return half_precision(gpu)


def architecture_kernels(gpu: GpuSpec) -> ArchitectureKernels:
    """The kernel fits of a GPU's architecture (catalog/kernels.yaml): the row the GPU's catalog gave it (a user
    catalog's overrides included), else, for a row no catalog resolved (a hand-built one), the shipped row.
    Memoised per GPU row (a training search asks some 12,000 times)."""
    return _KERNELS.get_or_make(id(gpu), (gpu,), _architecture_kernels, gpu)


_KERNELS: HeldMemo[ArchitectureKernels] = HeldMemo()  # architecture_kernels per GPU row


def _architecture_kernels(gpu: GpuSpec) -> ArchitectureKernels:
    """:func:`architecture_kernels`, computed."""
    if gpu.kernels is not None:
        return gpu.kernels
    shipped = kernels_for(shipped_kernels().values(), gpu.architecture)
    if shipped is None:  # pragma: no cover - the shipped kernels.yaml has a default row (load.py cross-check)
        raise LookupError(f"no kernels row for architecture {gpu.architecture!r}")
    return shipped


def fp4_format(gpu: GpuSpec) -> Fp4Format:
    """The FP4 weight format a GPU serves: NVFP4 where NVIDIA FP4 tensor cores run it (Blackwell), else MXFP4.

    NVFP4: E2M1 values with an FP8 E4M3 scale per 16 (NVIDIA, "Introducing NVFP4", 2025-06); MXFP4: an E8M0
    scale per 32 (OCP Microscaling Formats v1.0), native on CDNA 4 and the weight-only format gpt-oss ships in.
    """
    return "nvfp4" if gpu.vendor == "nvidia" and supports_precision(gpu, "fp4") else "mxfp4"


def default_kv_precision(gpu: GpuSpec, quant: str) -> str:
    """KV-cache precision that follows the weights: fp8 with fp8 weights, and with fp4 where FP4 runs natively
    (NVIDIA's NVFP4 checkpoints quantize the KV cache to FP8: ``kv_cache_quant_algo: FP8`` in their
    ``hf_quant_config.json``); otherwise the GPU's 16-bit format."""
    if quant == "fp8" or (quant == "fp4" and supports_precision(gpu, "fp4")):
        return "fp8"
    return half_precision(gpu)


_SHORT_NAMES: dict[str, str] = {}  # short_name per GPU name: a layout search names its GPU some 50,000 times


def short_name(gpu: GpuSpec) -> str:
    """A GPU's name without the vendor word, for messages: 'NVIDIA L40S 48GB' -> 'L40S 48GB'."""
    name = gpu.name
    short = _SHORT_NAMES.get(name)
    if short is None:
        if len(_SHORT_NAMES) >= 4096:
            _SHORT_NAMES.clear()
        short = _SHORT_NAMES[name] = _without_vendor(name)
    return short


def _without_vendor(name: str) -> str:
    """:func:`short_name` of a name, computed."""
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "AMD Instinct ", "AMD ", "Intel "):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _parallel_rules(
    arch: ModelArchitecture, gpu: GpuSpec, tp: int, pp: int, expert_parallel_only: bool = False
) -> list[Reason]:
    """``expert_parallel_only``: the stage has no tensor-parallel collective (``Layout.expert_parallel_only``), so
    it is not held to one NVLink domain or one server where the GPU has a scale-up link: its all-to-all crosses the
    network between servers (physics/moe.py ``all_to_all_link_terms``), and it splits no attention head."""
    reasons: list[Reason] = []
    name = short_name(gpu)
    if tp > 1 and not (expert_parallel_only and gpu.scale_up != "pcie"):
        if gpu.scale_up == "pcie":
            reasons.append(TpNeedsNvlink(gpu=name, tp=tp))
        elif tp > gpu.scale_up_domain:
            link: Literal["nvlink", "infinity_fabric"] = "nvlink" if gpu.scale_up == "nvlink" else "infinity_fabric"
            reasons.append(TpExceedsScaleUpDomain(gpu=name, tp=tp, link=link, domain_gpus=gpu.scale_up_domain))
        if tp > gpu.max_gpus_per_node:
            reasons.append(TpCrossesNodes(gpu=name, tp=tp, gpus_per_node=gpu.max_gpus_per_node))
    split = 1 if expert_parallel_only else tp  # attention data-parallel: every GPU holds every head
    if arch.attention_heads % split:
        reasons.append(TpSplitsAttentionHeads(model=arch.name, tp=tp, attention_heads=arch.attention_heads))
    elif arch.kv_heads % split and split % arch.kv_heads:
        reasons.append(TpSplitsKvHeads(model=arch.name, tp=tp, kv_heads=arch.kv_heads))
    if pp > arch.layers:
        reasons.append(PpExceedsLayers(model=arch.name, pp=pp, layers=arch.layers))
    return reasons


def serving_rule_reasons(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    tp: int,
    pp: int,
    quant: str,
    kv_precision: str,
    expert_parallel_only: bool = False,
) -> list[Reason]:
    """Why a serving layout cannot run on this GPU at all (empty when it can)."""
    reasons = _parallel_rules(arch, gpu, tp, pp, expert_parallel_only)
    name = short_name(gpu)
    if quant == "fp8" and not supports_precision(gpu, "fp8"):
        reasons.append(Fp8Unsupported(gpu=name, gpu_architecture=gpu.architecture, use="weights"))
    if quant == "bf16" and not supports_precision(gpu, "bf16"):
        reasons.append(Bf16Unsupported(gpu=name, use="weights"))
    if kv_precision == "fp8" and not supports_precision(gpu, "fp8"):
        reasons.append(Fp8Unsupported(gpu=name, gpu_architecture=gpu.architecture, use="kv_cache"))
    if kv_precision == "bf16" and not supports_precision(gpu, "bf16"):
        reasons.append(Bf16Unsupported(gpu=name, use="kv_cache"))
    return reasons


def serving_notes(gpu: GpuSpec, quant: str) -> list[str]:
    """Assumptions a serving estimate applied that a reader should see (not reasons to reject)."""
    notes: list[str] = []
    if quant in _WEIGHT_ONLY or (quant == "fp4" and not supports_precision(gpu, "fp4")):
        notes.append(
            f"{quant} weight-only: weights are dequantised and multiplied at {compute_precision_for_weights(gpu, quant)}"
        )
    return notes


def training_rule_reasons(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    tp: int,
    pp: int,
    dp: int,
    zero_stage: int,
    precision: str,
    method: str = "full",
) -> list[Reason]:
    """Why a training layout cannot run on this GPU at all (empty when it can); memoised (a fresh list each call).
    No rule reads ``dp`` (:func:`_training_rule_reasons` does not take it): it is not in the memo's key."""
    key = (id(arch), id(gpu), tp, pp, zero_stage, precision, method)
    found = _TRAINING_RULES.get_or_make(
        key, (arch, gpu), _training_rule_reasons, arch, gpu, tp, pp, zero_stage, precision, method
    )
    return list(found)


# training_rule_reasons per (model, GPU) and layout: a search asks some 17,000 times for a few thousand.
_TRAINING_RULES: HeldMemo[tuple[Reason, ...]] = HeldMemo()


def _training_rule_reasons(
    arch: ModelArchitecture, gpu: GpuSpec, tp: int, pp: int, zero_stage: int, precision: str, method: str
) -> tuple[Reason, ...]:
    """:func:`training_rule_reasons`, computed (no rule reads the data-parallel degree)."""
    reasons = _parallel_rules(arch, gpu, tp, pp)
    name = short_name(gpu)
    if precision == "fp8" and not supports_precision(gpu, "fp8"):
        reasons.append(Fp8Unsupported(gpu=name, gpu_architecture=gpu.architecture, use="training"))
    if precision == "bf16" and not supports_precision(gpu, "bf16"):
        reasons.append(Bf16Unsupported(gpu=name, use="training"))
    if method == "qlora" and gpu.vendor == "nvidia":
        cc = _cc(gpu)
        if cc is not None and cc < QLORA_MIN_COMPUTE_CAPABILITY:
            reasons.append(QloraUnsupported(gpu=name, min_compute_capability=QLORA_MIN_COMPUTE_CAPABILITY))
    if zero_stage not in (0, 1, 2, 3):
        reasons.append(ZeroStageUnknown(zero_stage=zero_stage))
    return tuple(reasons)
