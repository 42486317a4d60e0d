"""Hardware and layout rules: what a GPU can run at all. Each broken rule is one readable sentence.

Rules here are yes/no facts (precision support, link topology, divisibility); whether memory fits is
decided by :mod:`clusterplan.physics.memory` and reported by the estimators alongside these reasons.
"""

from __future__ import annotations

from clusterplan.catalog_schema import GpuSpec, ModelArchitecture

_WEIGHT_ONLY = {"int8", "int4"}


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


def compute_precision_for_weights(gpu: GpuSpec, quant: str) -> str:
    """Precision the matmuls run at: fp8 only when native; int8/int4 weight-only dequantise to 16-bit."""
    if quant == "fp8" and supports_precision(gpu, "fp8"):
        return "fp8"
    if quant in ("bf16", "fp16"):
        return quant if supports_precision(gpu, quant) else "fp16"
    return half_precision(gpu)


def short_name(gpu: GpuSpec) -> str:
    """A GPU's name without the vendor word, for messages: 'NVIDIA L40S 48GB' -> 'L40S 48GB'."""
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "AMD Instinct ", "AMD ", "Intel "):
        if gpu.name.startswith(prefix):
            return gpu.name[len(prefix) :]
    return gpu.name


def _parallel_rules(arch: ModelArchitecture, gpu: GpuSpec, tp: int, pp: int) -> list[str]:
    reasons: list[str] = []
    name = short_name(gpu)
    if tp > 1:
        if gpu.scale_up == "pcie":
            reasons.append(f"{name}: tensor parallel {tp} needs NVLink; {name} has PCIe only")
        elif tp > gpu.scale_up_domain:
            link = "NVLink" if gpu.scale_up == "nvlink" else "Infinity Fabric"
            reasons.append(
                f"{name}: tensor parallel {tp} needs a {link} domain of {tp} GPUs; "
                f"{name} links at most {gpu.scale_up_domain}"
            )
        if tp > gpu.max_gpus_per_node:
            reasons.append(
                f"{name}: tensor parallel {tp} would cross nodes (at most {gpu.max_gpus_per_node} GPUs per node)"
            )
    if arch.attention_heads % tp:
        reasons.append(f"{arch.name}: tensor parallel {tp} does not divide its {arch.attention_heads} attention heads")
    elif arch.kv_heads % tp and tp % arch.kv_heads:
        reasons.append(
            f"{arch.name}: tensor parallel {tp} neither divides nor is a multiple of its {arch.kv_heads} KV heads"
        )
    if pp > arch.layers:
        reasons.append(f"{arch.name}: pipeline parallel {pp} exceeds its {arch.layers} layers")
    return reasons


def serving_rules(arch: ModelArchitecture, gpu: GpuSpec, tp: int, pp: int, quant: str, kv_precision: str) -> list[str]:
    """Why a serving layout cannot run on this GPU at all (empty when it can)."""
    reasons = _parallel_rules(arch, gpu, tp, pp)
    name = short_name(gpu)
    if quant == "fp8" and not supports_precision(gpu, "fp8"):
        reasons.append(f"{name}: fp8 weights need native FP8 tensor cores ({gpu.architecture} has none)")
    if quant == "bf16" and not supports_precision(gpu, "bf16"):
        reasons.append(f"{name}: bf16 needs compute capability 8.0 or later; use fp16")
    if kv_precision == "fp8" and not supports_precision(gpu, "fp8"):
        reasons.append(f"{name}: an fp8 KV cache needs native FP8 ({gpu.architecture} has none)")
    if kv_precision == "bf16" and not supports_precision(gpu, "bf16"):
        reasons.append(f"{name}: a bf16 KV cache needs compute capability 8.0 or later; use fp16")
    return reasons


def serving_notes(gpu: GpuSpec, quant: str) -> list[str]:
    """Assumptions a serving estimate applied that a reader should see (not reasons to reject)."""
    notes: list[str] = []
    if quant in _WEIGHT_ONLY:
        notes.append(
            f"{quant} weight-only: weights are dequantised and multiplied at {compute_precision_for_weights(gpu, quant)}"
        )
    return notes


def training_rules(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    *,
    tp: int,
    pp: int,
    dp: int,
    zero_stage: int,
    precision: str,
    method: str = "full",
) -> list[str]:
    """Why a training layout cannot run on this GPU at all (empty when it can)."""
    reasons = _parallel_rules(arch, gpu, tp, pp)
    name = short_name(gpu)
    if precision == "fp8" and not supports_precision(gpu, "fp8"):
        reasons.append(f"{name}: fp8 training needs native FP8 tensor cores ({gpu.architecture} has none)")
    if precision == "bf16" and not supports_precision(gpu, "bf16"):
        reasons.append(f"{name}: bf16 needs compute capability 8.0 or later; train in fp16 with loss scaling")
    if method == "qlora" and gpu.vendor == "nvidia":
        cc = _cc(gpu)
        if cc is not None and cc < 7.5:
            reasons.append(f"{name}: QLoRA (bitsandbytes 4-bit) needs compute capability 7.5 or later")
    if zero_stage not in (0, 1, 2, 3):
        reasons.append(f"ZeRO stage {zero_stage} does not exist (0-3)")
    return reasons
