"""The MoE kernel's share per architecture and weight precision (factors.moe_gemm_architecture_fraction)."""

from __future__ import annotations

import pytest

from clusterplan.catalog.load import Catalog, load_catalog
from clusterplan.physics import serving
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.types import ServingEstimate

A = Assumptions()
NO_SHARE = Assumptions(moe_gemm_architecture_fraction={})


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog([])


def _est(catalog: Catalog, model: str, gpu: str, quant: str, a: Assumptions) -> ServingEstimate:
    return serving.estimate_serving(
        catalog.model(model), catalog.gpu(gpu), tp=1, pp=1, quant=quant, kv_precision="fp8", batch=256,
        input_tokens=1000, output_tokens=1000, context_tokens=2000, assumptions=a,
    )  # fmt: skip


def test_the_share_is_per_architecture_and_weight_precision() -> None:
    # aiconfigurator-core 0.12.0 moe_perf (TensorRT-LLM 1.3.0rc20): B200/GB200 NVFP4 grouped GEMMs at 0.76 of H200
    # FP8's share of the roofline; H200's MXFP4 weight-only kernel at 0.60 of its BF16 one; FP8 and BF16 alike.
    assert A.moe_gemm_fraction("Blackwell", "fp4") == pytest.approx(0.76)
    assert A.moe_gemm_fraction("blackwell", "fp4") == pytest.approx(0.76)
    assert A.moe_gemm_fraction("Hopper", "fp4") == pytest.approx(0.60)
    assert A.moe_gemm_fraction("Blackwell", "fp8") == 1.0
    assert A.moe_gemm_fraction("Hopper", "fp8") == 1.0
    assert A.moe_gemm_fraction("Ampere", "fp4") == 1.0


def test_blackwell_fp4_experts_run_at_the_share(catalog: Catalog) -> None:
    with_share = _est(catalog, "llama-4-scout", "b200", "fp4", A)
    without = _est(catalog, "llama-4-scout", "b200", "fp4", NO_SHARE)
    assert with_share.step_model is not None and without.step_model is not None
    assert with_share.step_model.moe_gemm_efficiency == pytest.approx(without.step_model.moe_gemm_efficiency * 0.76)
    assert with_share.tpot_s > without.tpot_s * 1.05  # the expert weights are most of a Scout step


def test_hopper_fp8_and_dense_models_are_untouched(catalog: Catalog) -> None:
    hopper = _est(catalog, "llama-4-scout", "h200", "fp8", A)
    assert hopper.tpot_s == pytest.approx(_est(catalog, "llama-4-scout", "h200", "fp8", NO_SHARE).tpot_s)
    dense = _est(catalog, "llama-3.1-8b", "b200", "fp4", A)
    assert dense.tpot_s == pytest.approx(_est(catalog, "llama-3.1-8b", "b200", "fp4", NO_SHARE).tpot_s)


def test_mla_attention_runs_at_its_kernels_precision() -> None:
    # aiconfigurator-core 0.12.0 mla tables (TensorRT-LLM 1.3.0rc20): Hopper's MLA kernels multiply in BF16 with an
    # FP8 cache, Blackwell's decode kernel in FP8 (its prefill in BF16); unlisted: the cache's precision.
    assert A.mla_precision("Hopper", "decode", "fp8") == "bf16"
    assert A.mla_precision("hopper", "prefill", "fp8") == "bf16"
    assert A.mla_precision("Blackwell", "decode", "fp8") == "fp8"
    assert A.mla_precision("Blackwell", "prefill", "fp8") == "bf16"
    assert A.mla_precision("Ampere", "decode", "fp16") == "fp16"


def test_deepseek_decode_attention_on_hopper_is_16_bit(catalog: Catalog) -> None:
    plain = Assumptions(mla_attention_precision={})
    est = _est(catalog, "deepseek-r1", "h200", "fp8", A)
    fp8 = _est(catalog, "deepseek-r1", "h200", "fp8", plain)
    assert est.step_model is not None and fp8.step_model is not None
    # H200: FP8 at 2x the BF16 peak and fp8_matmul_fraction 0.88 of its share, so BF16 takes 2 x 0.88 as long
    ratio = est.step_model.attention_compute_per_seq_s / fp8.step_model.attention_compute_per_seq_s
    assert ratio == pytest.approx(2 * 0.88)
    assert est.prefill_s > fp8.prefill_s
    # a GQA model is untouched
    assert _est(catalog, "llama-4-scout", "h200", "fp8", A).tpot_s == pytest.approx(
        _est(catalog, "llama-4-scout", "h200", "fp8", plain).tpot_s
    )
