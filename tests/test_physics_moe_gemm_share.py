"""The MoE kernel's share per architecture and weight precision (factors.moe_gemm_architecture_fraction)."""

from __future__ import annotations

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.physics import disagg, serving, step
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.types import ServingEstimate

A = Assumptions()
NO_SHARE = Assumptions(moe_gemm_architecture_fraction={})
DEP8 = Layout(tp=8, quant="fp8", kv_precision="fp8", ep=8, attention_dp=True)  # experts and attention DP over 8


def _est(catalog: Catalog, model: str, gpu: str, quant: str, a: Assumptions) -> ServingEstimate:
    layout, shape = Layout(quant=quant, kv_precision="fp8"), serving.RequestShape(1000, 1000, 2000)
    return serving.estimate_serving(catalog.model(model), catalog.gpu(gpu), layout, shape, batch=256, assumptions=a)


def test_the_share_is_per_architecture_and_weight_precision() -> None:
    # aiconfigurator-core 0.12.0 moe_perf (TensorRT-LLM 1.3.0rc20), fitted with the kernel's time per routed token and
    # per layer: B200/GB200 NVFP4 grouped GEMMs at 0.79 of Hopper FP8/BF16's share of the roofline, FP8 at 0.97;
    # H100/H200's MXFP4 weight-only (Triton) kernel multiplies its padded rows at 0.86 and streams its weights at 0.71
    # (moe_weight_stream_fraction); Hopper FP8 and BF16 are the engine's own.
    assert A.moe_gemm_fraction("Blackwell", "fp4") == pytest.approx(0.79)
    assert A.moe_gemm_fraction("blackwell", "fp4") == pytest.approx(0.79)
    assert A.moe_gemm_fraction("Hopper", "fp4") == pytest.approx(0.86)
    assert A.moe_weight_fraction("Hopper", "fp4") == pytest.approx(0.71)
    assert A.moe_weight_fraction("Blackwell", "fp4") == pytest.approx(0.79)  # unlisted: the GEMMs' share
    assert A.moe_gemm_fraction("Blackwell", "fp8") == pytest.approx(0.97)
    assert A.moe_gemm_fraction("Hopper", "fp8") == 1.0
    assert A.moe_gemm_fraction("Ampere", "fp4") == 1.0


def test_blackwell_fp4_experts_run_at_the_share(catalog: Catalog) -> None:
    with_share = _est(catalog, "llama-4-scout", "b200", "fp4", A)
    without = _est(catalog, "llama-4-scout", "b200", "fp4", NO_SHARE)
    assert with_share.step_model is not None and without.step_model is not None
    assert with_share.step_model.moe_gemm_efficiency == pytest.approx(without.step_model.moe_gemm_efficiency * 0.79)
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


def test_fp8_block_scales_slow_hoppers_expert_compute_not_its_weight_stream(catalog: Catalog) -> None:
    # aiconfigurator-core 0.12.0 moe_perf (TensorRT-LLM 1.3.0rc20, CUTLASS): FP8 block-scaled grouped GEMMs reach 0.60
    # of per-tensor FP8's share when compute-bound on H200, the same share when weight-bound, ~1.0 on B200.
    block = Assumptions(engine="tensorrt-llm", fp8_weight_scaling="block")
    tensor = Assumptions(engine="tensorrt-llm")
    assert block.moe_compute_fraction("Hopper", "fp8") == pytest.approx(0.60)
    assert block.moe_compute_fraction("Hopper", "fp4") == 1.0  # block scales of an FP8 checkpoint only
    assert block.moe_compute_fraction("Blackwell", "fp8") == 1.0
    assert tensor.moe_compute_fraction("Hopper", "fp8") == 1.0

    def step(a: Assumptions, gpu: str, batch: int) -> tuple[float, float, float]:
        est = serving.estimate_serving(
            catalog.model("deepseek-r1"), catalog.gpu(gpu), DEP8, serving.RequestShape(1024, 1024, 2048),
            batch=batch, assumptions=a,
        )  # fmt: skip
        assert est.step_model is not None
        return est.step_model.expert_compute_per_seq_s, est.step_model.expert_weights_s, est.prefill_busy_s

    (c_block, w_block, p_block), (c_tensor, w_tensor, p_tensor) = step(block, "h200", 3000), step(tensor, "h200", 3000)
    assert c_block == pytest.approx(c_tensor / 0.60)
    assert w_block == w_tensor  # the bytes streamed are the same
    assert p_block > p_tensor  # the prompt's expert GEMMs too
    assert step(block, "b200", 3000) == step(tensor, "b200", 3000)


def test_mla_absorbed_projections_with_fp8_block_scales_run_at_their_kernels_rate(catalog: Catalog) -> None:
    # aiconfigurator-core 0.12.0 mla_bmm (TensorRT-LLM 1.3.0rc20): H200's FP8 block-scaling BMM 49-109 TFLOPS (median 79)
    # against an FP8 rate of ~1,053; B200 dequantises to BF16 and keeps the dense rate.
    ds = catalog.model("deepseek-r1")
    assert serving.mla_absorbed_flops_per_token(ds, 61) == pytest.approx(2 * 61 * 128 * 512 * (128 + 128))
    assert serving.mla_absorbed_flops_per_token(catalog.model("llama-4-scout"), 48) == 0.0
    block = Assumptions(engine="tensorrt-llm", fp8_weight_scaling="block")
    assert block.mla_bmm_fraction("Hopper", "fp8") == pytest.approx(0.075)
    assert block.mla_bmm_fraction("Blackwell", "fp8") == 1.0
    assert Assumptions().mla_bmm_fraction("Hopper", "fp8") == 1.0

    def parts(a: Assumptions, gpu: str) -> tuple[float, float]:
        est = serving.estimate_serving(
            ds, catalog.gpu(gpu), DEP8, serving.RequestShape(1024, 1024, 2048), batch=512, assumptions=a
        )
        assert est.step_model is not None
        return est.step_model.compute_per_seq_s, est.step_model.attention_compute_per_seq_s

    tensor = Assumptions(engine="tensorrt-llm", fp8_weight_scaling="tensor")
    (dense_b, attn_b), (dense_t, attn_t) = parts(block, "h200"), parts(tensor, "h200")
    # the absorbed FLOPs leave the dense matmuls and run 1/0.075 times as long beside the latent attention
    assert dense_b < dense_t and attn_b - attn_t == pytest.approx((dense_t - dense_b) / 0.075)
    assert parts(block, "b200") == parts(tensor, "b200")


def test_the_moe_kernel_spends_time_per_routed_token(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    # aiconfigurator-core 0.12.0 moe_perf (TensorRT-LLM 1.3.0rc20, CUTLASS): beside its GEMMs the kernel costs a time
    # per token routed to the rank and per routed token it receives; Qwen3-30B-A3B's 768-wide experts at FP4 spend
    # more of a prompt there than in their FLOPs. Block-scaled FP8 has its own entry on Hopper only. Balanced routing:
    # the kernel's own terms, no unbalanced-routing ratio on top (tests/test_physics_moe_routing.py).
    trt = Assumptions(engine="tensorrt-llm", moe_routing="balanced")
    assert trt.moe_token_costs("Blackwell", "fp4") == (9.0e-9, 7.9e-10)
    assert trt.moe_token_costs("hopper", "fp8") == (6.6e-9, 7.3e-10)
    block = trt.model_copy(update={"fp8_weight_scaling": "block"})
    assert block.moe_token_costs("Hopper", "fp8") == (1.92e-8, 3.3e-10)
    assert block.moe_token_costs("Blackwell", "fp8") == trt.moe_token_costs("Blackwell", "fp8")
    assert trt.moe_token_costs("Ampere", "bf16") == (0.0, 0.0)
    assert Assumptions(engine="vllm").moe_token_costs("Blackwell", "fp4") == (0.0, 0.0)  # not read for vLLM

    qwen = catalog.model("qwen3-30b-a3b")

    def est(a: Assumptions) -> ServingEstimate:
        return serving.estimate_serving(
            qwen, catalog.gpu("b200"), Layout(quant="fp4", kv_precision="fp8"), serving.RequestShape(2048, 128, 2176),
            batch=512, assumptions=a,
        )  # fmt: skip

    with_cost = est(trt)
    assert with_cost.step_model is not None
    layers, k = 48, 8  # Qwen3-30B-A3B: 48 MoE layers, 8 of 128 experts a token
    assert with_cost.step_model.expert_routed_per_seq_s == pytest.approx(layers * k * 9.0e-9)
    assert with_cost.step_model.expert_gathered_per_seq_s == pytest.approx(layers * k * 7.9e-10)
    m = with_cost.step_model  # the decode step's FLOPs side carries them too (one GPU: no EP imbalance)
    m0 = m.model_copy(update={"expert_routed_per_seq_s": 0.0, "expert_gathered_per_seq_s": 0.0})
    per_seq = m.expert_routed_per_seq_s + m.expert_gathered_per_seq_s
    assert step.matmul_parts_s(m, 1000)[1] == pytest.approx(step.matmul_parts_s(m0, 1000)[1] + 1000 * per_seq)
    spec = trt.engine_spec.model_copy(update={"moe_routed_token_s": {}})
    monkeypatch.setattr(Assumptions, "engine_spec", property(lambda self: spec))
    without = est(trt)
    added = with_cost.prefill_busy_s - without.prefill_busy_s
    assert added == pytest.approx(2048 * layers * k * (9.0e-9 + 7.9e-10))  # ~7.7 ms of a 2,048-token prompt
    assert added > 0.5 * without.prefill_busy_s
    assert with_cost.output_tokens_per_s < 0.85 * without.output_tokens_per_s


def test_the_moe_kernels_fixed_time_is_paid_once_a_layer_per_forward(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # aiconfigurator-core 0.12.0 moe_perf under CUDA graphs: a layer never takes less than its kernels' fixed time
    # (routing, permute, quantise, finalize, the GEMMs' prologue and tail), whatever its tokens and weights; the fit
    # bounds it by the group's fastest one-token layer (Blackwell NVFP4: 26 us). vLLM reads no kernel rows.
    trt = Assumptions(engine="tensorrt-llm")
    assert trt.moe_layer_s("Blackwell", "fp4") == pytest.approx(2.6e-5)
    assert trt.moe_layer_s("Ampere", "bf16") == 0.0
    assert Assumptions(engine="vllm").moe_layer_s("Blackwell", "fp4") == 0.0

    def est(model: str, a: Assumptions) -> ServingEstimate:
        return serving.estimate_serving(
            catalog.model(model), catalog.gpu("b200"), Layout(quant="fp4", kv_precision="fp8"),
            serving.RequestShape(2048, 128, 2176), batch=64, assumptions=a,
        )  # fmt: skip

    qwen = est("qwen3-30b-a3b", trt)
    m = qwen.step_model
    assert m is not None
    assert m.expert_layers_s == pytest.approx(48 * 2.6e-5)  # Qwen3-30B-A3B: 48 MoE layers
    m0 = m.model_copy(update={"expert_layers_s": 0.0})
    for n in (1.0, 64.0, 4096.0):  # the same at every batch: not a time per token
        assert step.matmuls_s(m, n) - step.matmuls_s(m0, n) == pytest.approx(m.expert_layers_s)
    # a prompt alone pays it in each chunk's forward; riding a running step, it adds nothing to the step's
    rows = trt.engine_spec.moe_routed_token_s
    zeroed = {arch: {p: row.model_copy(update={"layer_s": 0.0}) for p, row in by.items()} for arch, by in rows.items()}
    spec = trt.engine_spec.model_copy(update={"moe_routed_token_s": zeroed})
    monkeypatch.setattr(Assumptions, "engine_spec", property(lambda self: spec))
    without = est("qwen3-30b-a3b", trt)
    assert without.step_model is not None and without.step_model.expert_layers_s == 0.0
    assert qwen.prefill_s - without.prefill_s == pytest.approx(48 * 2.6e-5)  # 2,048 tokens: one 8,192-token chunk
    assert qwen.prefill_busy_s == pytest.approx(without.prefill_busy_s)
    # a prefill-only replica's pass pays it too: a 2,048-token prompt is a quarter of one 8,192-token pass
    service = disagg.prefill_service_s(qwen, input_tokens=2048, assumptions=trt)
    assert service - disagg.prefill_service_s(without, input_tokens=2048, assumptions=trt) == pytest.approx(
        0.25 * 48 * 2.6e-5
    )
    dense = est("llama-3.1-8b", trt).step_model
    assert dense is not None and dense.expert_layers_s == 0.0
