"""Hand-written GPUs and architectures for the physics tests (independent of the shipped catalog).

Figures from shared/reference/hardware-facts.md (dense tensor throughput) and the models' Hugging Face
configs as listed in shared/calibration/measurements.yaml.
"""

from __future__ import annotations

from typing import Any

from clusterplan.catalog.schema import DenseThroughput, GpuSpec, ModelArchitecture

_PROV: dict[str, Any] = {"source": "test", "as_of": "2026-11"}


def gpu(**kw: Any) -> GpuSpec:
    return GpuSpec(**{**_PROV, **kw})


H100 = gpu(
    id="h100-sxm", name="H100 SXM", vendor="nvidia", architecture="hopper", compute_capability="9.0",
    gpu_class="datacenter", memory_gb=80, memory_gib=79.6, bandwidth_gb_per_s=3350,
    dense=DenseThroughput(bf16_tflops=989.5, fp16_tflops=989.5, fp8_tflops=1979, int8_tops=1979, fp32_tflops=67),
    native_precisions=["fp32", "bf16", "fp16", "fp8", "int8"], scale_up="nvlink",
    scale_up_bandwidth_gb_per_s=900, scale_up_domain=8, pcie_gen=5, pcie_bandwidth_gb_per_s=128, tdp_w=700,
)  # fmt: skip

A100 = gpu(
    id="a100-sxm-80gb", name="A100 SXM 80GB", vendor="nvidia", architecture="ampere", compute_capability="8.0",
    gpu_class="datacenter", memory_gb=80, memory_gib=79.2, bandwidth_gb_per_s=2039,
    dense=DenseThroughput(bf16_tflops=312, fp16_tflops=312, int8_tops=624, fp32_tflops=19.5),
    native_precisions=["fp32", "bf16", "fp16", "int8", "int4"], scale_up="nvlink",
    scale_up_bandwidth_gb_per_s=600, scale_up_domain=8, pcie_gen=4, pcie_bandwidth_gb_per_s=64, tdp_w=400,
)  # fmt: skip

RTX4090 = gpu(
    id="rtx-4090", name="RTX 4090", vendor="nvidia", architecture="ada", compute_capability="8.9",
    gpu_class="consumer", memory_gb=24, memory_gib=23.6, bandwidth_gb_per_s=1008,
    dense=DenseThroughput(bf16_tflops=165.2, fp16_tflops=165.2, fp8_tflops=330.3, int8_tops=660.6, fp32_tflops=82.6),
    native_precisions=["fp32", "bf16", "fp16", "fp8", "int8", "int4"], scale_up="pcie",
    scale_up_bandwidth_gb_per_s=64, scale_up_domain=1, pcie_gen=4, pcie_bandwidth_gb_per_s=64, tdp_w=450,
)  # fmt: skip

L40S = gpu(
    id="l40s", name="L40S", vendor="nvidia", architecture="ada", compute_capability="8.9",
    gpu_class="datacenter", memory_gb=48, memory_gib=44.4, bandwidth_gb_per_s=864,
    dense=DenseThroughput(bf16_tflops=362, fp16_tflops=362, fp8_tflops=733, int8_tops=733, fp32_tflops=91.6),
    native_precisions=["fp32", "bf16", "fp16", "fp8", "int8"], scale_up="pcie",
    scale_up_bandwidth_gb_per_s=64, scale_up_domain=1, pcie_gen=4, pcie_bandwidth_gb_per_s=64, tdp_w=350,
)  # fmt: skip

T4 = gpu(
    id="t4", name="T4", vendor="nvidia", architecture="turing", compute_capability="7.5",
    gpu_class="datacenter", memory_gb=16, memory_gib=15.0, bandwidth_gb_per_s=320,
    dense=DenseThroughput(fp16_tflops=65, int8_tops=130, fp32_tflops=8.1),
    native_precisions=["fp32", "fp16", "int8", "int4"], scale_up="pcie",
    scale_up_bandwidth_gb_per_s=32, scale_up_domain=1, pcie_gen=3, pcie_bandwidth_gb_per_s=32, tdp_w=70,
)  # fmt: skip

LLAMA2_7B = ModelArchitecture(
    name="Llama-2-7B", layers=32, hidden_size=4096, attention_heads=32, kv_heads=32, ffn_size=11008,
    vocab_size=32000, max_context=4096, published_params=6.74e9,
)  # fmt: skip
LLAMA2_13B = ModelArchitecture(
    name="Llama-2-13B", layers=40, hidden_size=5120, attention_heads=40, kv_heads=40, ffn_size=13824,
    vocab_size=32000, max_context=4096, published_params=13.0e9,
)  # fmt: skip
LLAMA2_70B = ModelArchitecture(
    name="Llama-2-70B", layers=80, hidden_size=8192, attention_heads=64, kv_heads=8, ffn_size=28672,
    vocab_size=32000, max_context=4096, published_params=68.98e9,
)  # fmt: skip
LLAMA31_8B = ModelArchitecture(
    name="Llama-3.1-8B", layers=32, hidden_size=4096, attention_heads=32, kv_heads=8, ffn_size=14336,
    vocab_size=128256, max_context=131072, published_params=8.03e9,
)  # fmt: skip
MIXTRAL = ModelArchitecture(
    name="Mixtral-8x7B", layers=32, hidden_size=4096, attention_heads=32, kv_heads=8, ffn_size=14336,
    vocab_size=32000, moe_experts=8, experts_per_token=2, max_context=32768, published_params=46.7e9,
)  # fmt: skip
GPTJ = ModelArchitecture(
    name="GPT-J-6B", layers=28, hidden_size=4096, attention_heads=16, kv_heads=16, head_dim=256, ffn_size=16384,
    vocab_size=50400, gated_mlp=False, max_context=2048, published_params=6.05e9,
)  # fmt: skip


def test_fixture_parameter_counts_match_published() -> None:
    from clusterplan.physics import params

    for arch in (LLAMA2_7B, LLAMA2_13B, LLAMA2_70B, LLAMA31_8B, MIXTRAL):
        assert arch.published_params is not None
        assert abs(params.total_params(arch) / arch.published_params - 1) < 0.02, arch.name
