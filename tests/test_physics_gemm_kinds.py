"""A decode step's matmuls as a roofline per kind of GEMM (step.matmuls_s): the linear layers at the weights'
precision, the 16-bit LM head and the routed experts each keep their own ``max(weights, FLOPs)``."""

from __future__ import annotations

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.physics import serving, step
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.types import DecodeStepModel, ServingEstimate

TRT = Assumptions(engine="tensorrt-llm")

# Llama 4 Scout's shape on one B200 at 531 sequences: attention and shared-expert GEMMs compute-bound, the 16 routed
# experts (top-1, all touched) weight-bound (numbers of the order estimate_serving builds; docs/model.md section 3)
SCOUT_LIKE = DecodeStepModel(
    pp=1, dense_weights_s=0.00072, expert_weights_s=0.00048, moe_experts=16, experts_per_token=1,
    kv_per_seq_s=1.6e-5, compute_per_seq_s=6.8e-6, head_weights_s=0.00029, head_compute_per_seq_s=1.7e-6,
    expert_compute_per_seq_s=2.4e-6, moe_gemm_efficiency=0.585, overhead_s=0.00321,
)  # fmt: skip


def test_each_gemm_kind_keeps_its_own_roofline() -> None:
    """Compute-bound attention GEMMs no longer hide under the experts' weight stream: the step adds them."""
    n = 531.0
    expert_w, expert_c = step.expert_parts_s(SCOUT_LIKE, n)
    assert expert_w > expert_c  # the routed experts stream their weights
    assert n * SCOUT_LIKE.compute_per_seq_s > SCOUT_LIKE.dense_weights_s  # the linear layers multiply
    want = n * SCOUT_LIKE.compute_per_seq_s + n * SCOUT_LIKE.head_compute_per_seq_s + expert_w
    assert step.matmuls_s(SCOUT_LIKE, n) == pytest.approx(want, rel=1e-12)
    weights, flops = step.matmul_parts_s(SCOUT_LIKE, n)  # the kinds summed: the single roofline of before
    assert step.matmuls_s(SCOUT_LIKE, n) > max(weights, flops) + 3e-3
    # at one sequence every kind streams its weights, as the single roofline said
    assert step.matmuls_s(SCOUT_LIKE, 1.0) == pytest.approx(step.matmul_parts_s(SCOUT_LIKE, 1.0)[0])


SHAPE = serving.RequestShape(input_tokens=1000, output_tokens=1000, context_tokens=2000)


def _est(catalog: Catalog, model: str, gpu: str, quant: str, *, batch: int = 512) -> ServingEstimate:
    layout = Layout(quant=quant, kv_precision="fp8")
    return serving.estimate_serving(catalog.model(model), catalog.gpu(gpu), layout, SHAPE, batch=batch, assumptions=TRT)


def test_lm_head_streams_and_multiplies_at_16_bit(catalog: Catalog) -> None:
    """The LM head stays 16-bit under FP8 and NVFP4 (ModelOpt leaves ``*lm_head*`` unquantised): its bytes and its
    FLOPs' rate are the same whatever the linear layers' precision, which do gain FP4's rate."""
    fp4, fp8 = _est(catalog, "llama-4-scout", "b200", "fp4"), _est(catalog, "llama-4-scout", "b200", "fp8")
    assert fp4.step_model is not None and fp8.step_model is not None
    arch = catalog.model("llama-4-scout")
    bw = catalog.gpu("b200").bandwidth_gb_per_s * 1e9 * TRT.memory_bandwidth_efficiency.of("datacenter")
    assert fp4.step_model.head_weights_s == pytest.approx(arch.vocab_size * arch.hidden_size * 2.0 / bw)
    assert fp4.step_model.head_compute_per_seq_s == pytest.approx(fp8.step_model.head_compute_per_seq_s)
    assert fp4.step_model.compute_per_seq_s < 0.8 * fp8.step_model.compute_per_seq_s


def test_a_dense_mlp_is_one_kind_with_the_attention_projections(catalog: Catalog) -> None:
    """A dense model's MLP shares its attention projections' intensity: one kind, so splitting them would change
    nothing, and the step is still the single roofline over the linear layers plus the head's."""
    est = _est(catalog, "llama-3.3-70b", "b200", "fp4", batch=300)
    m = est.step_model
    assert m is not None and m.expert_weights_s == 0.0 and m.expert_compute_per_seq_s == 0.0
    n = 300.0
    linear = max(m.dense_weights_s, n * m.compute_per_seq_s * step.linear_ramp(m, n))
    assert step.matmuls_s(m, n) == pytest.approx(linear + max(m.head_weights_s, n * m.head_compute_per_seq_s))


def test_blackwell_decode_gemms_ramp_up_later_than_hoppers(catalog: Catalog) -> None:
    """At a few hundred sequences Blackwell's FP4 GEMMs sit further below their large-M rate than Hopper FP8's, on
    which the compute factors were read (factors decode_gemm_knee_tokens): the linear layers' FLOP time takes
    (n + 445) / (n + 199); Hopper, the reference, keeps its own."""
    n = 256.0
    flat = Assumptions(engine="tensorrt-llm", decode_gemm_knee_tokens={})
    for gpu, want in (("b200", (n + 445.0) / (n + 199.0)), ("h200", 1.0)):
        ramped = _est(catalog, "llama-3.3-70b", gpu, "fp4" if gpu == "b200" else "fp8", batch=256).step_model
        layout = Layout(quant="fp4" if gpu == "b200" else "fp8", kv_precision="fp8")
        plain = serving.estimate_serving(
            catalog.model("llama-3.3-70b"), catalog.gpu(gpu), layout, SHAPE, batch=256, assumptions=flat
        ).step_model
        assert ramped is not None and plain is not None
        assert step.linear_ramp(ramped, n) == pytest.approx(want)
        assert step.linear_ramp(plain, n) == 1.0
        linear_ramped = max(ramped.dense_weights_s, n * ramped.compute_per_seq_s * want)
        head = max(ramped.head_weights_s, n * ramped.head_compute_per_seq_s)
        assert step.matmuls_s(ramped, n) == pytest.approx(linear_ramped + head)
