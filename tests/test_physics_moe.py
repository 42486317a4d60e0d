"""MoE layouts (physics/moe.py): expert parallelism, attention data-parallelism, all-to-all, imbalance."""

from __future__ import annotations

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.physics import memory, moe, serving
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.types import ServingEstimate

A = Assumptions()


@pytest.fixture(scope="module")
def mixtral(catalog: Catalog) -> ModelArchitecture:
    return catalog.model("mixtral-8x7b")


@pytest.fixture(scope="module")
def h100(catalog: Catalog) -> GpuSpec:
    return catalog.gpu("h100-sxm")


def _est(
    arch: ModelArchitecture, gpu: GpuSpec, *, tp: int, ep: int = 1, dp: bool = False, batch: int = 64
) -> ServingEstimate:
    layout = Layout(tp=tp, ep=ep, attention_dp=dp)
    return serving.estimate_serving(
        arch, gpu, layout, serving.RequestShape(1000, 200, 1200), batch=batch, assumptions=A
    )


def test_ep_divides_expert_weights_per_gpu(mixtral: ModelArchitecture) -> None:
    # EP8 over 8 GPUs: each holds one whole expert per layer, 1/8 of the expert weights.
    all_experts = mixtral.moe_experts * moe.expert_params(mixtral)
    ep8 = moe.expert_params_per_gpu_per_layer(mixtral, moe.MoeLayout(tp=8, ep=8))
    assert ep8 == pytest.approx(all_experts / 8)
    assert moe.expert_params_per_gpu_per_layer(mixtral, moe.MoeLayout(tp=8, ep=4)) == pytest.approx(all_experts / 8)
    assert moe.expert_params_per_gpu_per_layer(mixtral, moe.MoeLayout(tp=4, ep=4)) == pytest.approx(all_experts / 4)


def test_dense_layout_is_todays_memory(mixtral: ModelArchitecture, h100: GpuSpec) -> None:
    assert moe.serving_weight_bytes_per_gpu(mixtral, moe.MoeLayout(tp=4), pp=1, quant="bf16") == (
        memory.serving_weight_bytes_per_gpu(mixtral, tp=4, pp=1, quant="bf16")
    )


def test_attention_dp_replicates_attention_and_splits_kv(mixtral: ModelArchitecture, h100: GpuSpec) -> None:
    tp_layout, dp_layout = moe.MoeLayout(tp=8, ep=8), moe.MoeLayout(tp=8, ep=8, attention_dp=True)
    w_tp = moe.serving_weight_bytes_per_gpu(mixtral, tp_layout, pp=1, quant="bf16")
    w_dp = moe.serving_weight_bytes_per_gpu(mixtral, dp_layout, pp=1, quant="bf16")
    extra = mixtral.layers * (memory.attention_params_per_gpu(mixtral, 1) - memory.attention_params_per_gpu(mixtral, 8))
    assert w_dp - w_tp == pytest.approx(extra * 2.0)  # attention weights whole on every GPU
    # KV: a GPU holds 1/8 of the sequences, each with every KV head.
    dp = Layout(tp=8, ep=8, attention_dp=True)
    kv_dp = moe.serving_memory(mixtral, h100, dp, batch=64, context_tokens=1200, assumptions=A).kv_cache_gib
    per_token_all_heads = memory.kv_bytes_per_token_per_gpu(mixtral, tp=1, pp=1, kv_precision="bf16")
    assert kv_dp == pytest.approx(8 * 1200 * per_token_all_heads / 2**30)
    assert moe.sequences_per_gpu(64, dp_layout) == 8
    # The stage holds tp times the per-GPU batch.
    per_gpu = moe.max_batch_by_memory(mixtral, h100, dp, context_tokens=1200, assumptions=A)
    assert per_gpu % 8 == 0 and per_gpu > 0


def test_all_to_all_reported_and_zero_without_ep(mixtral: ModelArchitecture, h100: GpuSpec) -> None:
    tp8 = _est(mixtral, h100, tp=8)
    ep8 = _est(mixtral, h100, tp=8, ep=8, dp=True)
    assert tp8.all_to_all_s == 0.0
    assert ep8.all_to_all_s > 0.0
    assert ep8.step_model is not None and ep8.step_model.all_to_alls == 2 * mixtral.layers
    assert ep8.feasible and ep8.ep == 8 and ep8.attention_dp


def test_ep_across_nvlink_domains_pays_the_network(mixtral: ModelArchitecture, h100: GpuSpec) -> None:
    wide = mixtral.model_copy(update={"moe_experts": 64})
    _, inside_per_byte, inside = moe.all_to_all_link_terms(h100, 8, A)
    _, across_per_byte, across = moe.all_to_all_link_terms(h100, 16, A)
    assert inside.kind == "nvlink" and across.kind == "network"
    # 8 of 15 peers sit across the domain, at 50 GB/s per GPU against 450 GB/s NVLink.
    assert across_per_byte > 4 * inside_per_byte
    e8 = _est(wide, h100, tp=8, ep=8, dp=True)
    e16 = _est(wide, h100, tp=16, ep=16, dp=True)
    assert e16.all_to_all_s > 2 * e8.all_to_all_s


def test_load_imbalance_shrinks_with_batch() -> None:
    assert moe.load_imbalance(64, 2, 1) == 1.0
    small, large = moe.load_imbalance(8, 2, 8), moe.load_imbalance(4096, 2, 8)
    assert small > large > 1.0
    assert moe.load_imbalance(1, 2, 8) <= 8.0
    assert moe.load_imbalance(4096, 2, 8, skew=1.3) == pytest.approx(1.3 * large)


def test_grouped_gemm_efficiency_slows_moe_only(mixtral: ModelArchitecture, h100: GpuSpec, catalog: Catalog) -> None:
    slow = Assumptions(moe_gemm_efficiency=0.5)
    fast = Assumptions(moe_gemm_efficiency=1.0)

    def step(arch: ModelArchitecture, a: Assumptions) -> float:
        shape = serving.RequestShape(500, 100, 600)
        est: ServingEstimate = serving.estimate_serving(arch, h100, Layout(tp=4), shape, batch=32, assumptions=a)
        return est.decode_step_s

    assert step(mixtral, slow) > step(mixtral, fast)
    dense = catalog.model("llama-3.1-8b")
    assert step(dense, slow) == step(dense, fast)


def test_layout_problems(mixtral: ModelArchitecture, catalog: Catalog) -> None:
    assert moe.layout_problem(mixtral, 8, 8, True) is None
    assert moe.layout_problem(mixtral, 8, 3, False) == "ep_not_divisor"
    assert moe.layout_problem(mixtral, 16, 16, False) == "ep_exceeds_experts"
    assert moe.layout_problem(catalog.model("llama-3.1-8b"), 8, 8, False) == "ep_without_experts"


def test_wide_ep_across_four_servers_runs_and_exposes_the_network_all_to_all(catalog: Catalog) -> None:
    """EP 32 with attention DP over four 8-GPU H200 servers: no TP collective, so no rule refuses it, and every
    decode step pays 2 all-to-alls per MoE layer over the per-GPU network, hand-checked here."""
    r1, h200 = catalog.model("deepseek-r1"), catalog.gpu("h200")
    layout = Layout(tp=32, ep=32, attention_dp=True, quant="fp8", kv_precision="fp8")
    assert layout.expert_parallel_only and moe.server_groups(layout, h200) == (8, 4)
    est = serving.estimate_serving(r1, h200, layout, serving.RequestShape(1500, 1500, 8192), batch=2048, assumptions=A)
    assert est.feasible and est.step_model is not None, est.why_not
    # DeepEP sends a token once per destination rank: 32·(1 - (31/32)^8) ranks, 31/32 of them remote; bf16 hidden.
    ranks = 32 * (1 - (31 / 32) ** 8)
    bytes_per_token = 7168 * 2 * ranks * 31 / 32
    assert moe.dispatch_bytes_per_token(r1, 32) == pytest.approx(bytes_per_token)
    # each GPU sends its 1/32 of the tokens; 24 of its 31 peers sit on other servers, over 50 GB/s x 0.80.
    per_seq_s = bytes_per_token / 32 * (24 / 31) / (50e9 * 0.80)
    assert est.step_model.all_to_all_per_seq_s == pytest.approx(per_seq_s)
    assert est.step_model.all_to_alls == 2 * 58  # DeepSeek-R1: 58 MoE layers, dispatch and combine
    exposed = est.step_model.all_to_alls * (20e-6 + 2048 * per_seq_s)
    assert est.all_to_all_s == pytest.approx(exposed, rel=1e-6)
    assert est.decode_step_s > est.all_to_all_s > 0.01


def test_wide_ep_over_an_nvl72_rack_splits_no_attention_head(catalog: Catalog) -> None:
    """EP 72 with attention DP on a GB200 NVL72 rack: 128 heads do not divide by 72, but no head is split (each GPU
    runs whole attention), and the all-to-all stays on NVLink inside the rack's domain."""
    r1, gb200 = catalog.model("deepseek-r1"), catalog.gpu("gb200")
    layout = Layout(tp=72, ep=72, attention_dp=True, quant="fp8", kv_precision="fp8")
    est = serving.estimate_serving(r1, gb200, layout, serving.RequestShape(1500, 1500, 8192), batch=512, assumptions=A)
    assert est.feasible, est.why_not
    assert moe.all_to_all_link_terms(gb200, 72, A)[2].kind == "nvlink"
    assert moe.server_groups(layout, gb200) == (72, 1)
