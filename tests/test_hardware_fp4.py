"""The hardware people deploy now and FP4 (catalog gpus.yaml, physics rules/memory/serving, the quality gate).

Holds: fp4 weights take NVFP4's 4.5 bits where FP4 tensor cores run them (Blackwell) and MXFP4's 4.25 bits
weight-only elsewhere, and only a GPU with an FP4 figure is credited FP4 compute; the quality gate admits
fp4 from int8_class, not at the default fp8_class; an NVL72 rack is one 72-GPU NVLink domain, so TP 16 is
tried and allowed on GB200 but ruled out on an 8-GPU HGX board, the rack hosts nine TP-8 groups (not
eight), and a serving requirement restricted to gb200 plans.
"""

from __future__ import annotations

import pytest

from clusterplan.candidates.build import build_candidates
from clusterplan.candidates.offerings import forbidden_for, gpu_type_of
from clusterplan.candidates.serving import serving_shapes
from clusterplan.candidates.table import TP_NVLINK, CandidateTable
from clusterplan.catalog.load import Catalog, load_catalog_text
from clusterplan.design.check import Unit, pack
from clusterplan.errors import CatalogInputError, InputError
from clusterplan.physics import memory, rules
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.reasons import TpExceedsScaleUpDomain
from clusterplan.physics.serving import RequestShape, estimate_serving, peak_tflops
from clusterplan.physics.types import ServingEstimate
from clusterplan.pipeline import PlanOptions, plan_table
from clusterplan.requirement.load import load_requirement_text
from clusterplan.requirement.schema import QUALITY_CLASSES, quality_class_of

GB200_70B = """
name: 70B on an NVL72 rack
model: llama-3.1-70b
workloads:
  - kind: serving
    name: chat
    requests_per_min: 600
    input_tokens: 1000
    output_tokens: 200
    p95_latency: 5s
budget: {horizon: 12}
deployment: owned
constraints:
  allowed_gpus: [gb200, b200]
"""


@pytest.fixture(scope="module")
def gb200_table(catalog: Catalog) -> CandidateTable:
    return build_candidates(load_requirement_text(GB200_70B, "req.yaml", catalog), catalog)


# ------------------------------------------------------------------------------------------------
# FP4: bytes, compute, the gate
# ------------------------------------------------------------------------------------------------


def test_fp4_weights_are_nvfp4_on_blackwell_and_mxfp4_elsewhere(catalog: Catalog) -> None:
    assert memory.weight_bytes_per_param("fp4", fp4_format="nvfp4") == 4.5 / 8  # E2M1 + an E4M3 scale per 16
    assert memory.weight_bytes_per_param("fp4", fp4_format="mxfp4") == 4.25 / 8  # E2M1 + an E8M0 scale per 32
    formats = {g: rules.fp4_format(catalog.gpu(g)) for g in ("b200", "gb200", "rtx-pro-6000", "h100-sxm", "mi355x")}
    assert formats == {
        "b200": "nvfp4",
        "gb200": "nvfp4",
        "rtx-pro-6000": "nvfp4",
        "h100-sxm": "mxfp4",
        "mi355x": "mxfp4",
    }


def test_only_a_gpu_with_fp4_tensor_cores_is_credited_fp4_compute(catalog: Catalog) -> None:
    b200, h100 = catalog.gpu("b200"), catalog.gpu("h100-sxm")
    assert rules.compute_precision_for_weights(b200, "fp4") == "fp4" and peak_tflops(b200, "fp4") == 9000
    assert rules.compute_precision_for_weights(h100, "fp4") == "bf16"
    assert peak_tflops(h100, "fp4") == h100.dense.bf16_tflops  # never an FP4 rate it does not have
    assert any("fp4 weight-only" in n for n in rules.serving_notes(h100, "fp4"))
    assert not rules.serving_notes(b200, "fp4")


def test_estimate_fp4_native_on_b200_and_weight_only_on_h100(catalog: Catalog) -> None:
    arch, a = catalog.model("llama-3.1-70b"), Assumptions()
    shape = RequestShape(input_tokens=1000, output_tokens=200, context_tokens=1200)

    def est(gpu: str, quant: str, kv: str) -> ServingEstimate:
        layout = Layout(tp=2, quant=quant, kv_precision=kv)
        return estimate_serving(arch, catalog.gpu(gpu), layout, shape, batch=8, assumptions=a)

    b200, b200_fp8, h100 = est("b200", "fp4", "fp8"), est("b200", "fp8", "fp8"), est("h100-sxm", "fp4", "bf16")
    assert (b200.compute_precision, h100.compute_precision) == ("fp4", "bf16")
    # Weights: 4.5 vs 4.25 bits on the quantized layers (embeddings stay 16-bit), about 0.56x of fp8.
    assert h100.memory.weights_gib < b200.memory.weights_gib < 0.6 * b200_fp8.memory.weights_gib
    assert b200.ttft_s < b200_fp8.ttft_s  # prefill is compute-bound: FP4 tensor cores are faster


def test_the_quality_gate_refuses_fp4_at_the_default_and_admits_it_from_int8_class(catalog: Catalog) -> None:
    assert quality_class_of("fp4") == "int8_class"
    assert "fp4" not in QUALITY_CLASSES["fp8_class"] and "fp4" in QUALITY_CLASSES["any"]
    base = GB200_70B.replace("deployment: owned", "deployment: cloud")
    default = load_requirement_text(base, "req.yaml", catalog).requirement
    assert "fp4" not in default.allowed_precisions()
    wider = load_requirement_text(base + "quality: {max_loss: int8_class}\n", "req.yaml", catalog).requirement
    assert "fp4" in wider.allowed_precisions()
    with pytest.raises(InputError) as info:
        load_requirement_text(base + "  quantizations: [fp4]\n", "req.yaml", catalog)
    assert "req.yaml:" in str(info.value) and "max_loss: int8_class" in str(info.value)
    assert {q.precision for q in catalog.quality_for("llama-3.1-70b", "fp4")} == {"fp4"}


# ------------------------------------------------------------------------------------------------
# Rack-scale NVLink: NVL72 is one 72-GPU domain
# ------------------------------------------------------------------------------------------------


def test_tp16_is_allowed_on_nvl72_and_not_on_an_hgx_board(catalog: Catalog) -> None:
    gb200, b200 = catalog.gpu("gb200"), catalog.gpu("b200")
    assert (16, 1) in serving_shapes(gpu_type_of(gb200)) and (64, 1) in serving_shapes(gpu_type_of(gb200))
    assert all(tp <= 8 for tp, _ in serving_shapes(gpu_type_of(b200)))
    arch = catalog.model("llama-3.1-70b")
    assert rules.serving_rule_reasons(arch, gb200, 16, 1, "fp8", "fp8") == []
    assert any(
        isinstance(r, TpExceedsScaleUpDomain) for r in rules.serving_rule_reasons(arch, b200, 16, 1, "fp8", "fp8")
    )


def test_an_nvl72_rack_hosts_nine_tp8_groups_and_four_tp16(gb200_table: CandidateTable) -> None:
    rack = next(o for o in gb200_table.offerings if o.kind == "owned" and o.gpu_id == "gb200")
    assert (rack.gpus_per_unit, rack.tp_domain, rack.domain_gpus) == (72, 64, 72)
    assert [rack.tp_capacity(t) for t in (1, 8, 16, 64)] == [72, 72, 64, 64]
    assert pack([8] * 9, [Unit(72, 72)]) and not pack([8] * 10, [Unit(72, 72)])
    assert pack([16] * 4, [Unit(72, 72)]) and not pack([16] * 5, [Unit(72, 72)])


def test_a_requirement_restricted_to_gb200_plans_and_tp16_is_not_forbidden_there(
    catalog: Catalog, gb200_table: CandidateTable
) -> None:
    gpus = {g: gpu_type_of(catalog.gpu(g)) for g in ("gb200", "b200")}
    assert not forbidden_for(gpus["gb200"], gb200_table.limits, tp=16, quant="fp8")
    assert [f for f, _ in forbidden_for(gpus["b200"], gb200_table.limits, tp=16, quant="fp8")] == [TP_NVLINK]
    (wc,) = gb200_table.workloads
    assert not [r for r in wc.serving_rows() if r.gpu_id == "b200" and r.tp > 8]
    plan = plan_table(gb200_table, PlanOptions(top=1, explain=False))
    assert plan.designs, plan.status
    assert {h.gpu for h in plan.designs[0].hardware} <= {"gb200", "b200"}


def test_an_fp4_figure_not_listed_native_is_refused_located() -> None:
    row = (
        "gpus:\n"
        "  - {id: my-card, name: My card, vendor: nvidia, architecture: Blackwell, gpu_class: datacenter,\n"
        "     memory_gb: 96, memory_gib: 95, bandwidth_gb_per_s: 1600, native_precisions: [bf16],\n"
        "     dense: {bf16_tflops: 500, fp4_tflops: 2000}, scale_up: pcie, scale_up_bandwidth_gb_per_s: 128,\n"
        "     scale_up_domain: 1, pcie_gen: 5, pcie_bandwidth_gb_per_s: 128, tdp_w: 600,\n"
        "     source: https://example.invalid/card, as_of: 2026-11}\n"
    )
    with pytest.raises(CatalogInputError) as info:
        load_catalog_text(row, "mine.yaml")
    assert "mine.yaml:4:6: gpus[0].dense" in str(info.value) and "'fp4' is not listed" in str(info.value)
    load_catalog_text(row.replace("native_precisions: [bf16]", "native_precisions: [bf16, fp4]"), "mine.yaml")
