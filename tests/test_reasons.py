"""Reasons are data: physics and the candidate table return reason records; only rendering writes words.

Layers decide on a record's code and category (:mod:`clusterplan.physics.reasons`); the sentence comes
from :func:`clusterplan.wording.reasons.render_reason` at the boundary, unchanged from when physics
wrote it directly (the examples' ``solve --json`` and ``estimate`` outputs are byte-identical).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from clusterplan.candidates import offerings
from clusterplan.candidates.build import build_candidates
from clusterplan.candidates.offerings import forbidden_for
from clusterplan.candidates.table import (
    AVAILABILITY,
    HARDWARE,
    LATENCY,
    MEMORY,
    TP_NVLINK,
    GpuType,
    Limits,
    exclusion_family,
)
from clusterplan.physics import reasons as R
from clusterplan.physics.reasons import CATEGORY, Reason, ReasonCategory, ReasonCode
from clusterplan.wording.reasons import render_predicate, render_reason
from conftest import EXAMPLES_DIR, run_cli

# One record per code, with the sentence it renders to (the wording physics wrote before records).
EXAMPLES: dict[ReasonCode, tuple[Reason, str]] = {
    ReasonCode.TP_NEEDS_NVLINK: (
        R.TpNeedsNvlink(gpu="L40S", tp=4),
        "L40S: tensor parallel 4 needs NVLink; L40S has PCIe only",
    ),
    ReasonCode.TP_EXCEEDS_SCALE_UP_DOMAIN: (
        R.TpExceedsScaleUpDomain(gpu="MI300X", tp=16, link="infinity_fabric", domain_gpus=8),
        "MI300X: tensor parallel 16 needs a Infinity Fabric domain of 16 GPUs; MI300X links at most 8",
    ),
    ReasonCode.TP_EXCEEDS_NVLINK_DOMAIN: (
        R.TpExceedsNvlinkDomain(gpu="NVIDIA A100 PCIe 80GB", tp=8, domain_gpus=2),
        "NVIDIA A100 PCIe 80GB: tensor parallel 8 needs an NVLink domain of 8 GPUs; NVIDIA A100 PCIe 80GB links at most 2",
    ),
    ReasonCode.TP_CROSSES_NODES: (
        R.TpCrossesNodes(gpu="H100", tp=16, gpus_per_node=8),
        "H100: tensor parallel 16 would cross nodes (at most 8 GPUs per node)",
    ),
    ReasonCode.TP_SPLITS_ATTENTION_HEADS: (
        R.TpSplitsAttentionHeads(model="Llama 2 70B", tp=3, attention_heads=64),
        "Llama 2 70B: tensor parallel 3 does not divide its 64 attention heads",
    ),
    ReasonCode.TP_SPLITS_KV_HEADS: (
        R.TpSplitsKvHeads(model="M", tp=4, kv_heads=6),
        "M: tensor parallel 4 neither divides nor is a multiple of its 6 KV heads",
    ),
    ReasonCode.PP_EXCEEDS_LAYERS: (
        R.PpExceedsLayers(model="Llama 2 70B", pp=81, layers=80),
        "Llama 2 70B: pipeline parallel 81 exceeds its 80 layers",
    ),
    ReasonCode.CP_SPLITS_SEQUENCE: (
        R.CpSplitsSequence(cp=4, sequence_tokens=8196),
        "context parallel 4 needs sequences of a multiple of 8 tokens (2 x cp chunks); 8,196 is not",
    ),
    ReasonCode.EP_SPLITS_EXPERTS: (
        R.EpSplitsExperts(ep=8, experts=8, dp_cp=4, problem="ep_not_dividing_dp"),
        "expert parallel 8 is carved out of the data x context parallel ranks; 4 of them are not a multiple of it",
    ),
    ReasonCode.VIRTUAL_STAGES_SPLIT_LAYERS: (
        R.VirtualStagesSplitLayers(virtual_stages=3, pp=4, stage_layers=20),
        "3 virtual pipeline stages do not divide the 20 layers of each of the 4 pipeline stages",
    ),
    ReasonCode.FP8_UNSUPPORTED: (
        R.Fp8Unsupported(gpu="T4 16GB", gpu_architecture="Turing", use="kv_cache"),
        "T4 16GB: an fp8 KV cache needs native FP8 (Turing has none)",
    ),
    ReasonCode.BF16_UNSUPPORTED: (
        R.Bf16Unsupported(gpu="V100 SXM2 32GB", use="training"),
        "V100 SXM2 32GB: bf16 needs compute capability 8.0 or later; train in fp16 with loss scaling",
    ),
    ReasonCode.QLORA_UNSUPPORTED: (
        R.QloraUnsupported(gpu="V100 SXM2 32GB"),
        "V100 SXM2 32GB: QLoRA (bitsandbytes 4-bit) needs compute capability 7.5 or later",
    ),
    ReasonCode.ZERO_STAGE_UNKNOWN: (R.ZeroStageUnknown(zero_stage=4), "ZeRO stage 4 does not exist (0-3)"),
    ReasonCode.GLOBAL_BATCH_TOO_SMALL: (
        R.GlobalBatchTooSmall(
            global_batch_tokens=4096, sequences_per_step=1, sequence_tokens=4096, dp=8, micro_batch=1
        ),
        "global batch of 4,096 tokens is 1 sequences of 4,096; dp=8 x micro-batch 1 needs at least 8",
    ),
    ReasonCode.NO_TENSOR_THROUGHPUT: (
        R.NoTensorThroughput(gpu="X", precision="fp8"),
        "X: no tensor throughput listed for fp8",
    ),
    ReasonCode.WEIGHTS_DO_NOT_FIT: (
        R.WeightsDoNotFit(
            gpu="A10 24GB",
            model="Llama 3.1 405B",
            quant="bf16",
            tp=1,
            pp=1,
            weights_gib=756.0,
            fixed_gib=762.7,
            headroom_fraction=0.1,
            capacity_gib=22.5,
            context_tokens=16000,
        ),
        "does not fit in memory: Llama 3.1 405B at bf16 with tp=1, pp=1 needs 756.0 GiB of weights per GPU "
        "(762.7 GiB with runtime, activations and 10% headroom); A10 24GB has 22.5 GiB and no room for even one "
        "16,000-token sequence",
    ),
    ReasonCode.KV_CACHE_DOES_NOT_FIT: (
        R.KvCacheDoesNotFit(gpu="A100", batch=5000, context_tokens=8192, kv_cache_gib=1234.56, max_batch=12),
        "does not fit in memory: batch 5000 at 8,192 tokens needs 1,234.6 GiB of KV cache per GPU; "
        "A100 has room for at most 12 sequences",
    ),
    ReasonCode.TRAINING_DOES_NOT_FIT: (
        R.TrainingDoesNotFit(
            gpu="V100 SXM2 32GB",
            needed_gib=32.7,
            weights_gib=3.0,
            gradients_gib=6.1,
            optimizer_gib=18.2,
            activations_gib=0.3,
            runtime_gib=2.0,
            headroom_gib=3.2,
            capacity_gib=31.7,
        ),
        "does not fit in memory: needs 32.7 GiB per GPU (weights 3.0, gradients 6.1, optimizer 18.2, "
        "activations 0.3, runtime 2.0, headroom 3.2); V100 SXM2 32GB has 31.7 GiB",
    ),
    ReasonCode.MODEL_DOES_NOT_FIT: (
        R.ModelDoesNotFit(gpu="NVIDIA A10 24GB", model="M", quant="fp8", tp=2, pp=1),
        "NVIDIA A10 24GB: M does not fit at fp8, TP 2, PP 1",
    ),
    ReasonCode.NO_LAYOUT_FITS: (R.NoLayoutFits(gpu="NVIDIA T4 16GB"), "NVIDIA T4 16GB: no layout fits"),
    ReasonCode.MISSES_LATENCY_TARGETS: (
        R.MissesLatencyTargets(gpu="NVIDIA L4", best_ttft_s=1.234, best_tpot_s=0.0456, best_tp=2, best_quant="fp8"),
        "NVIDIA L4: even a lightly loaded replica misses the p95 targets (best: TTFT 1.23 s, TPOT 46 ms at TP 2, fp8)",
    ),
    ReasonCode.NOT_OBTAINABLE: (
        R.NotObtainable(gpu="Big 500GB"),
        "Big 500GB: no cloud instance in the allowed clouds and regions, and no purchase price in the catalog",
    ),
    ReasonCode.TIER_NOT_ALLOWED: (
        R.TierNotAllowed(gpu="NVIDIA H100 SXM5 80GB", offer="vast:8x-h100-sxm", tier="marketplace"),
        "vast:8x-h100-sxm: a marketplace offer; add marketplace to constraints.provider_tiers to plan it",
    ),
    ReasonCode.NO_FABRIC: (
        R.NoFabric(gpu="NVIDIA H100 SXM5 80GB", offer="lambda:gpu_8x_h100_sxm5", instances=2),
        "lambda:gpu_8x_h100_sxm5: no fabric (InfiniBand, RoCE or EFA) between instances: not used for training "
        "across 2 or more of them",
    ),
    ReasonCode.KV_STREAM_OVER_LINK: (
        R.KvStreamOverLink(gpu="NVIDIA RTX PRO 6000", link="tcp", stream_gb_per_s=6.5, link_gb_per_s=2.8125),
        "NVIDIA RTX PRO 6000: disaggregated: the prefill replica's KV stream, 6.5 GB/s at its rated rate, is more than "
        "the Ethernet (TCP) between the pools carries (2.8 GB/s); the pool pair is ruled out",
    ),
    ReasonCode.EP_NEEDS_FABRIC: (
        R.EpNeedsFabric(gpu="H100 NVL 94GB", ep=16, gpus_per_domain=2),
        "H100 NVL 94GB: expert parallelism 16 spans several instances (NVLink groups of 2 GPUs) and no offer has a "
        "fabric (InfiniBand, RoCE or EFA) between them for its all-to-all",
    ),
    ReasonCode.CONSUMER_LICENCE: (
        R.ConsumerLicence(gpu="NVIDIA GeForce RTX 4090 24GB"),
        "NVIDIA GeForce RTX 4090 24GB: a consumer (GeForce) card: NVIDIA's GeForce driver licence excludes datacenter "
        "deployment (section 2.1.3); set constraints.allow_consumer_gpus: true, or name it in allowed_gpus, to plan it",
    ),
    ReasonCode.FRAMEWORK_CANNOT_RUN: (
        R.FrameworkCannotRun(framework="torchtune", feature="pipeline", value="2 (20 virtual stages)"),
        "torchtune: cannot run the plan's pipeline parallel 2 (20 virtual stages)",
    ),
    ReasonCode.FRAMEWORK_LACKS: (
        R.FrameworkLacks(framework="torchtune", feature="pipeline", values="2, 4, 8, 16"),
        "torchtune: runs no pipeline parallel 2, 4, 8, 16; those layouts were not planned",
    ),
    ReasonCode.STATED: (R.Stated("anything at all"), "anything at all"),
}


@pytest.mark.parametrize("code", list(ReasonCode), ids=lambda c: c.value)
def test_every_reason_code_has_a_record_a_category_and_wording(code: ReasonCode) -> None:
    assert code in EXAMPLES, f"add an example of {code.value} here, with the sentence it renders to"
    record, sentence = EXAMPLES[code]
    assert record.code is code
    assert code in CATEGORY
    assert isinstance(record.category, ReasonCategory)
    assert render_reason(record) == sentence
    assert sentence.endswith(render_predicate(record))


def test_every_record_class_has_its_own_code() -> None:
    classes = [c for c in vars(R).values() if isinstance(c, type) and issubclass(c, Reason) and c is not Reason]
    codes = [c.code for c in classes]
    assert sorted(codes) == sorted(ReasonCode), "one record class per code"


def test_an_unworded_record_is_an_error_not_a_blank() -> None:
    class Unworded(Reason):
        code = ReasonCode.STATED

    with pytest.raises(TypeError, match="no wording"):
        render_reason(Unworded())


def test_categories_come_from_codes_never_from_words() -> None:
    # A GPU whose name says "memory", "GiB" and "fit": its link reason is still a link reason, filed
    # under hardware. Matching the sentence (as candidates did) filed it under memory.
    link = R.TpNeedsNvlink(gpu="Fit Memory 96GiB", tp=2)
    assert link.category is ReasonCategory.LINK
    assert exclusion_family(link) == HARDWARE
    kv = R.KvCacheDoesNotFit(gpu="X", batch=2, context_tokens=1, kv_cache_gib=1.0, max_batch=1)
    assert exclusion_family(kv) == MEMORY
    assert exclusion_family(EXAMPLES[ReasonCode.MISSES_LATENCY_TARGETS][0]) == LATENCY
    assert exclusion_family(EXAMPLES[ReasonCode.NOT_OBTAINABLE][0]) == AVAILABILITY
    for code, (record, _) in EXAMPLES.items():
        if code is not ReasonCode.STATED:
            assert (exclusion_family(record) == MEMORY) == (CATEGORY[code] is ReasonCategory.MEMORY), code


def test_the_candidate_tables_tp_rule_is_worded_where_every_reason_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tp_nvlink family's row sentences are reason records worded by clusterplan.wording: a change of
    wording there reaches them, and the words are the ones the plan has always shown."""
    limits = Limits()
    pcie = GpuType(id="a10", name="NVIDIA A10 24GB", nvlink_domain=1)
    bridged = GpuType(id="a100-pcie", name="NVIDIA A100 PCIe 80GB", nvlink_domain=2)
    assert forbidden_for(pcie, limits, tp=2, quant=None) == [
        (TP_NVLINK, "NVIDIA A10 24GB: tensor parallel 2 needs NVLink; NVIDIA A10 24GB has PCIe only")
    ]
    assert forbidden_for(bridged, limits, tp=8, quant=None) == [
        (TP_NVLINK, EXAMPLES[ReasonCode.TP_EXCEEDS_NVLINK_DOMAIN][1])
    ]
    monkeypatch.setattr(offerings, "render_reason", lambda r: f"{r.code.value} {r.tp}")
    assert forbidden_for(pcie, limits, tp=2, quant=None) == [(TP_NVLINK, "tp_needs_nvlink 2")]
    assert forbidden_for(bridged, limits, tp=8, quant=None) == [(TP_NVLINK, "tp_exceeds_nvlink_domain 8")]


def test_a_candidate_ruled_out_for_memory_is_classified_memory_by_code(tmp_path: Path, catalog) -> None:  # type: ignore[no-untyped-def]
    from clusterplan.requirement.load import load_requirement

    doc = {
        "name": "fit",
        "model": "llama-3.1-70b",
        "workloads": [
            {"kind": "serving", "name": "chat", "requests_per_min": 60, "input_tokens": 500, "output_tokens": 100}
        ],
        "deployment": "cloud",
    }
    f = tmp_path / "r.yaml"
    f.write_text(yaml.safe_dump(doc), encoding="utf-8")
    table = build_candidates(load_requirement(f, catalog), catalog)
    (wc,) = table.workloads
    # 70B at 16-bit on one 24 GB A10 does not fit: that exclusion is memory, by its code.
    a10 = [e for e in wc.exclusions if e.gpu_id == "a10" and isinstance(e.reason, R.WeightsDoNotFit)]
    assert a10, "expected 70B to not fit on a single A10"
    assert all(e.family == MEMORY for e in a10)
    assert all(e.reason.category is ReasonCategory.MEMORY for e in a10)
    # Every exclusion is filed under the category its record's code implies.
    assert all(e.family == exclusion_family(e.reason) for e in wc.exclusions)
    assert any(e.family == MEMORY for e in wc.exclusions)
    assert render_reason(a10[0].reason).startswith("does not fit in memory: Llama 3.1 70B at ")


def test_estimates_keep_records_and_serialise_sentences(catalog) -> None:  # type: ignore[no-untyped-def]
    from clusterplan.physics import serving
    from clusterplan.physics.factors import Assumptions
    from clusterplan.physics.layout import Layout

    est = serving.estimate_serving(
        catalog.model("llama-3.1-70b"),
        catalog.gpu("l40s"),
        Layout(tp=4, quant="fp8", kv_precision="fp8"),
        serving.RequestShape(input_tokens=500, output_tokens=100, context_tokens=1000),
        batch=8,
        assumptions=Assumptions(),
    )
    assert [r.code for r in est.why_not] == [ReasonCode.TP_NEEDS_NVLINK]
    assert est.why_not[0].category is ReasonCategory.LINK
    data = est.model_dump(mode="json")
    assert "why_not" not in data and "reasons" not in data  # the physics keeps codes; words come at the edge
    # ... which is estimate's output: the sentences under 'reasons', right after 'feasible', where they have always been
    res = run_cli(
        "estimate", str(EXAMPLES_DIR / "70b-serving.yaml"), "--gpu", "l40s", "--count", "4", "--tp", "4",
        "--quant", "fp8", "--json",
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    serving_json = json.loads(res.stdout)["serving"]
    assert list(serving_json)[:3] == ["feasible", "reasons", "gpu_id"]
    assert serving_json["reasons"] == ["L40S 48GB: tensor parallel 4 needs NVLink; L40S 48GB has PCIe only"]
