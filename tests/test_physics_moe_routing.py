"""Unbalanced routing: the MoE kernel's time under power-law over balanced routing, by tokens and EP degree
(catalog/engines.yaml ``unbalanced``, catalog/kernels.yaml ``unbalanced_routing``, physics/moe.py ``routing_effect``
and ``routing_ratio``, Assumptions ``moe_routing``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from clusterplan.catalog.load import Catalog, shipped_kernels
from clusterplan.catalog.schema import UnbalancedRouting
from clusterplan.physics import moe, serving, step
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.types import ServingEstimate

TRT = Assumptions(engine="tensorrt-llm")
BALANCED = TRT.model_copy(update={"moe_routing": "balanced"})


def test_the_ratio_joins_the_tabulated_points_in_log_tokens() -> None:
    curve = ((128.0, 1.0), (512.0, 1.2), (2048.0, 1.6))
    assert moe.routing_ratio(curve, 128.0) == 1.0
    assert moe.routing_ratio(curve, 256.0) == pytest.approx(1.1)  # halfway in log between 128 and 512
    assert moe.routing_ratio(curve, 1024.0) == pytest.approx(1.4)
    assert moe.routing_ratio(curve, 8.0) == 1.0  # below the table: its first point
    assert moe.routing_ratio(curve, 1e6) == 1.6  # above: its last
    assert moe.routing_ratio((), 1024.0) == 1.0


def _curve(a: Assumptions, precision: str, ep: int) -> tuple[tuple[float, float], ...]:
    """The measured curve TensorRT-LLM's Hopper table gives a layout of ``ep`` EP ranks."""
    table = a.moe_unbalanced_routing("Hopper", precision)
    assert table is not None
    skew, curve = moe.routing_effect(table, ep)
    assert skew == 1.0  # measured ratios carry no static skew of their own
    return curve


def test_the_engine_tabulates_one_curve_per_kernel_and_ep_degree() -> None:
    # aiconfigurator-core 0.12.0 moe_perf (TensorRT-LLM 1.3.0rc20): Triton's MXFP4 kernel on Hopper at EP 1 is 1.52x
    # slower at 1,024 tokens under power-law routing; CUTLASS FP8 1.09 at EP 1, 1.23 at EP 8
    assert dict(_curve(TRT, "fp4", 1))[1024.0] == pytest.approx(1.52)
    assert dict(_curve(TRT, "fp8", 1))[1024.0] == pytest.approx(1.09)
    assert dict(_curve(TRT, "fp8", 8))[1024.0] == pytest.approx(1.23)
    # an EP degree the tables skip takes the largest below it; beyond them, the largest
    assert _curve(TRT, "fp8", 12) == _curve(TRT, "fp8", 8)
    assert _curve(TRT, "fp8", 72) == _curve(TRT, "fp8", 32)
    # block-scaled FP8 has its own kernel and curve
    assert dict(_curve(Assumptions(engine="tensorrt-llm", fp8_weight_scaling="block"), "fp8", 1))[512.0] == (
        pytest.approx(1.09)
    )
    assert Assumptions(engine="vllm").moe_unbalanced_routing("Hopper", "fp8") is None


def test_the_law_is_the_same_shape_read_by_the_same_reader() -> None:
    # kernels.yaml's law where no engine table applies: 1 + 0.12·log2(ep) of static skew, no curve
    law = shipped_kernels()["hopper"].unbalanced_routing
    assert law.skew_per_doubling == 0.12 and not law.by_ep
    assert moe.routing_effect(law, 1) == (1.0, ())
    assert moe.routing_effect(law, 8) == (1.0 + 0.12 * 3, ())
    assert moe.routing_effect(UnbalancedRouting(skew_per_doubling=0.5), 4) == (2.0, ())


def _est(catalog: Catalog, a: Assumptions, *, model: str, gpu: str, quant: str, ep: int = 1) -> ServingEstimate:
    layout = Layout(tp=ep, quant=quant, kv_precision="fp8", ep=ep, attention_dp=ep > 1)
    shape = serving.RequestShape(input_tokens=1024, output_tokens=1024, context_tokens=2048)
    return serving.estimate_serving(catalog.model(model), catalog.gpu(gpu), layout, shape, batch=630, assumptions=a)


def test_power_law_routing_slows_the_expert_gemms_at_the_tokens_they_receive(catalog: Catalog) -> None:
    # gpt-oss-20b on one H100 at 630 sequences: the MXFP4 kernel's 1.50x at 630 tokens on the experts' compute side
    skewed = _est(catalog, TRT, model="gpt-oss-20b", gpu="h100-sxm", quant="fp4")
    even = _est(catalog, BALANCED, model="gpt-oss-20b", gpu="h100-sxm", quant="fp4")
    m = skewed.step_model
    assert m is not None and even.step_model is not None
    ratio = moe.routing_ratio(m.expert_routing_curve, 630.0)
    assert ratio == pytest.approx(1.48 + (1.52 - 1.48) * 0.2995, rel=1e-3)  # log2(630/512) = 0.2995
    weights, compute = step.expert_parts_s(m, 630.0)
    even_weights, even_compute = step.expert_parts_s(even.step_model, 630.0)
    assert weights == pytest.approx(even_weights)  # the weights stream once either way
    gathered = 630.0 * m.expert_gathered_per_seq_s  # routing over every token the rank receives: not the GEMMs'
    assert compute - gathered == pytest.approx((even_compute - gathered) * ratio)
    assert skewed.decode_step_s > even.decode_step_s
    # a 1,024-token prompt's experts: the ratio at its 1,024 tokens
    assert skewed.prefill_busy_s > even.prefill_busy_s


def test_engines_without_a_curve_skew_only_across_ep_ranks(catalog: Catalog) -> None:
    vllm = Assumptions(engine="vllm")
    ep8 = _est(catalog, vllm, model="qwen3-235b-a22b", gpu="h200", quant="fp8", ep=8)
    assert ep8.step_model is not None
    assert ep8.step_model.expert_load_skew == pytest.approx(1.0 + 0.12 * 3)  # the architecture's law at EP 8
    assert ep8.step_model.expert_routing_curve == ()
    even = _est(catalog, vllm.model_copy(update={"moe_routing": "balanced"}), model="qwen3-235b-a22b", gpu="h200",
                quant="fp8", ep=8)  # fmt: skip
    assert even.step_model is not None and even.step_model.expert_load_skew == 1.0
    one = _est(catalog, vllm, model="qwen3-30b-a3b", gpu="h200", quant="fp8")
    assert one.step_model is not None and one.step_model.expert_load_skew == 1.0  # one rank: nothing to skew


def test_a_routing_table_is_one_form_or_the_other() -> None:
    tokens = [128, 256, 512]
    with pytest.raises(ValidationError, match="3 ratios for 2 tokens"):
        UnbalancedRouting(tokens=[128, 256], by_ep={1: [1.0, 1.1, 1.2]})
    with pytest.raises(ValidationError, match="ascend"):
        UnbalancedRouting(tokens=[256, 128, 512], by_ep={1: [1.0, 1.1, 1.2]})
    with pytest.raises(ValidationError, match="EP degree 1"):
        UnbalancedRouting(tokens=tokens, by_ep={2: [1.0, 1.1, 1.2]})
    with pytest.raises(ValidationError, match="exactly one form"):
        UnbalancedRouting(tokens=tokens, by_ep={1: [1.0, 1.1, 1.2]}, skew_per_doubling=0.1)
    with pytest.raises(ValidationError, match="exactly one form"):
        UnbalancedRouting()
