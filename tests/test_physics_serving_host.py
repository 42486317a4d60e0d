"""Serving terms of issue #13's MoE accuracy work: the engine's host time per sequence, attention at the KV cache's
precision, TensorRT-LLM's allgather MoE dispatch, and trtllm-bench's own batch sizing (bench/accuracy.py)."""

from __future__ import annotations

import sys

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import ModelArchitecture
from clusterplan.physics import moe, params, serving, step
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.types import DecodeStepModel, ServingEstimate
from conftest import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import accuracy

TRT = Assumptions(engine="tensorrt-llm")


@pytest.fixture(scope="module")
def qwen30(catalog: Catalog) -> ModelArchitecture:
    return catalog.model("qwen3-30b-a3b")


def _est(
    catalog: Catalog, arch: ModelArchitecture, gpu: str, *, batch: int, quant: str = "fp4", kv: str = "fp8",
    tp: int = 1, ep: int = 1, dp: bool = False, i: float = 128.0, o: float = 128.0, a: Assumptions = TRT,
) -> ServingEstimate:  # fmt: skip
    layout = Layout(tp=tp, quant=quant, kv_precision=kv, ep=ep, attention_dp=dp)
    shape = serving.RequestShape(input_tokens=i, output_tokens=o, context_tokens=i + o)
    return serving.estimate_serving(arch, catalog.gpu(gpu), layout, shape, batch=batch, assumptions=a)


def test_host_time_bounds_a_step_and_overlaps_the_gpu() -> None:
    """A step takes the longer of the GPU's work and the host's ``h·n·share`` (overlap scheduler), then the overhead."""
    gpu_only = DecodeStepModel(
        pp=1, dense_weights_s=0.002, expert_weights_s=0.0, kv_per_seq_s=1e-6, compute_per_seq_s=1e-6,
        overhead_s=0.003,
    )  # fmt: skip
    host = gpu_only.model_copy(update={"host_per_seq_s": 25e-6})
    assert step.host_step_s(host, 2048) == pytest.approx(2048 * 25e-6)
    assert step.decode_step_s(host, 2048) == pytest.approx(2048 * 25e-6 + 0.003)  # host-bound: 51 ms + 3 ms
    assert step.decode_step_s(gpu_only, 2048) < 0.02
    assert step.decode_step_s(host, 4) == step.decode_step_s(gpu_only, 4)  # hidden behind the GPU's 2 ms
    shared = host.model_copy(update={"host_rank_share": 1 / 8})  # attention DP: each rank its own eighth
    assert step.host_step_s(shared, 2048) == pytest.approx(256 * 25e-6)
    assert step.decode_bound(host, 2048) == "host"


def test_grace_host_is_slower_than_x86(catalog: Catalog, qwen30: ModelArchitecture) -> None:
    """TensorRT-LLM's host time per sequence and decoder layer: 0.65 us on x86 (B200), 0.75 us on Grace (GB200), so
    the 48-layer Qwen3-30B-A3B spends 31.2 / 36.0 us a sequence — the v1.0 perf overview's 128/128 ceilings, 39,827
    and 24,107 tok/s; removing the term puts GB200 at ~2.9x its host-bound rate."""
    b200 = _est(catalog, qwen30, "b200", batch=2048)
    gb200 = _est(catalog, qwen30, "gb200", batch=2048)
    assert b200.step_model is not None and gb200.step_model is not None
    assert b200.step_model.host_per_seq_s == pytest.approx(48 * 0.65e-6)
    assert gb200.step_model.host_per_seq_s == pytest.approx(48 * 0.75e-6)
    assert b200.decode_step_s >= 2048 * 31.2e-6 and gb200.decode_step_s >= 2048 * 36.0e-6
    assert gb200.bound == "host" and 20_000 < gb200.output_tokens_per_s < 35_000
    off = _est(catalog, qwen30, "gb200", batch=2048, a=TRT.model_copy(update={"host_time_per_sequence_layer_s": 0.0}))
    assert off.output_tokens_per_s > 2.5 * gb200.output_tokens_per_s
    vllm = _est(catalog, qwen30, "b200", batch=2048, a=Assumptions(engine="vllm")).step_model
    assert vllm is not None and vllm.host_per_seq_s == 0.0


def test_host_time_grows_with_the_stage_depth(catalog: Catalog, qwen30: ModelArchitecture) -> None:
    """The later perf overview's Grace ceilings follow depth, not width: gpt-oss-20b (24 layers) reaches 56,528 tok/s
    on one GB200 at 1024/1024 with 3,000 sequences (<= 18 us a sequence), Qwen3-30B-A3B (48) needs ~34-40 us. A
    pipeline stage's rank steps its own layers only."""
    oss = catalog.model("gpt-oss-20b")
    shallow = _est(catalog, oss, "gb200", batch=2048).step_model
    deep = _est(catalog, qwen30, "gb200", batch=2048).step_model
    assert shallow is not None and deep is not None
    assert deep.host_per_seq_s == pytest.approx(2 * shallow.host_per_seq_s)  # 48 layers against 24
    staged = serving.estimate_serving(
        qwen30, catalog.gpu("gb200"), Layout(pp=2, quant="fp4", kv_precision="fp8"),
        serving.RequestShape(input_tokens=128, output_tokens=128, context_tokens=256), batch=2048, assumptions=TRT,
    ).step_model  # fmt: skip
    assert staged is not None and staged.host_per_seq_s == pytest.approx(deep.host_per_seq_s / 2)


def test_attention_runs_at_the_kv_precision_not_fp4(catalog: Catalog, qwen30: ModelArchitecture) -> None:
    """NVFP4 covers the linear layers: decode attention over an FP8 cache costs the same with FP4 or FP8 weights."""
    fp4 = _est(catalog, qwen30, "b200", batch=64, quant="fp4", i=8000, o=500)
    fp8 = _est(catalog, qwen30, "b200", batch=64, quant="fp8", i=8000, o=500)
    assert fp4.step_model is not None and fp8.step_model is not None
    assert fp4.step_model.attention_compute_per_seq_s == pytest.approx(fp8.step_model.attention_compute_per_seq_s)
    assert fp4.step_model.compute_per_seq_s < fp8.step_model.compute_per_seq_s  # the matmuls do gain FP4's rate
    assert serving.attention_precision(catalog.gpu("b200"), "fp8") == "fp8"
    assert serving.attention_precision(catalog.gpu("b200"), "bf16") == "bf16"
    assert serving.attention_precision(catalog.gpu("a100-80gb"), "fp8") in ("bf16", "fp16")


def test_trtllm_moe_dispatch_is_allgather_off_the_rack(catalog: Catalog, qwen30: ModelArchitecture) -> None:
    """Under attention DP TensorRT-LLM gathers every token on every EP rank (allgather + reducescatter) unless the
    NVLink domain is rack-scale (MNNVL all-to-all): ``hidden x 2 B x (ep - 1)`` per token per direction."""
    h = qwen30.hidden_size
    assert moe.dispatch_bytes_per_token(qwen30, 8, "allgather") == pytest.approx(h * 2.0 * 7)
    assert moe.dispatch_bytes_per_token(qwen30, 8) < moe.dispatch_bytes_per_token(qwen30, 8, "allgather")
    assert moe.dispatch_method(catalog.gpu("b200"), "allgather", "all_to_all") == "allgather"
    assert moe.dispatch_method(catalog.gpu("gb200"), "allgather", "all_to_all") == "all_to_all"
    trt = _est(catalog, qwen30, "h200", batch=1024, quant="fp8", tp=8, ep=8, dp=True)
    sgl = _est(catalog, qwen30, "h200", batch=1024, quant="fp8", tp=8, ep=8, dp=True, a=Assumptions(engine="sglang"))
    assert trt.step_model is not None and sgl.step_model is not None
    assert trt.step_model.all_to_all_per_seq_s > 1.5 * sgl.step_model.all_to_all_per_seq_s


def test_trtllm_bench_max_batch_by_hand(catalog: Catalog) -> None:
    """trtllm-bench's own max_batch_size (bench/build/tuning.py): Llama-3.1-8B FP8 on one H100 at 128/128 holds
    ~4,000 requests in its KV estimate, capped at 4,096; at 20,000/2,000 about 45, rounded up to the minimum 64."""
    llama8 = catalog.model("llama-3.1-8b")
    h100 = catalog.gpu("h100-sxm")

    def cap(isl: float, osl: float) -> int:
        return accuracy.trtllm_bench_max_batch(llama8, h100, tp=1, pp=1, isl=isl, osl=osl, quant="fp8", kv="fp8")

    assert cap(128, 128) == 4096
    # (79.6 GiB - 8.03e9 B) x 0.9 / (2 x 32 x 8 x 128 B x 22,000) = 45.4 requests -> 64
    assert cap(20000, 2000) == 64
    # 1,000/1,000: 64.9 GiB / (64 KiB x 2,000) = 532 requests -> 128 x ceil(532 / 128) = 640
    assert cap(1000, 1000) == 640


def test_trtllm_bench_counts_packed_nvfp4_elements(catalog: Catalog) -> None:
    """trtllm-bench sized the engine from the checkpoint's safetensors element count until TensorRT-LLM PR #13498
    (2026-04-27): an NVFP4 checkpoint packs two weights per U8 element plus an FP8 scale per 16, so DeepSeek-R1's
    671e9 parameters count as ~378e9 and the engine as 176 GiB, not 312. On 4 B200 at 1,024/8,192 the KV estimate
    (MLA read as 128 heads of 56: 7.51 GiB a request) is (716.2 - 176.1) x 0.9 / 7.51 = 64.8 requests -> 96 per rank;
    with the full count it was 48 -> 64 (the round-two cap that left the DeepSeek-R1 Blackwell rows -29 %)."""
    ds = catalog.model("deepseek-r1")
    b200 = catalog.gpu("b200")
    total = params.total_params(ds)
    emb = params.embedding_params(ds)
    assert accuracy.trtllm_bench_param_count(ds, "fp4") == pytest.approx((total - emb) * (1 / 2 + 1 / 16) + emb)
    assert accuracy.trtllm_bench_param_count(ds, "fp8") == total
    cap = accuracy.trtllm_bench_max_batch(ds, b200, tp=4, pp=1, isl=1024, osl=8192, quant="fp4", kv="fp8")
    assert cap == 96


def test_trtllm_reserves_full_kv_for_window_layers(catalog: Catalog) -> None:
    """TensorRT-LLM's KV pool keeps every layer at the full context unless kv_cache_config.max_attention_window is
    given; vLLM keeps a sliding-window layer's window only. gpt-oss alternates 128-token windows and full layers,
    so TensorRT-LLM holds half as many sequences at 8k tokens (and attention still reads the window)."""
    oss = catalog.model("gpt-oss-20b")
    assert moe.kv_reserved_arch(oss, TRT).attention_window is None
    assert moe.kv_reserved_arch(oss, Assumptions()).attention_window == oss.attention_window
    trt = _est(catalog, oss, "b200", batch=64, i=8000, o=192)
    vllm = _est(catalog, oss, "b200", batch=64, i=8000, o=192, a=Assumptions(engine="vllm"))
    assert trt.max_batch_by_memory < 0.6 * vllm.max_batch_by_memory
    assert trt.step_model is not None and vllm.step_model is not None
    assert trt.step_model.kv_per_seq_s == pytest.approx(vllm.step_model.kv_per_seq_s)  # the same window read


def test_mxfp4_weights_with_fp8_activations_multiply_at_the_fp8_rate(catalog: Catalog) -> None:
    """gpt-oss on Blackwell: MXFP4 weights meet MXFP8 activations (TensorRT-LLM's gpt-oss MoE support matrix), so the
    matmuls run at B200's FP8 rate, half its FP4 one; a prompt's compute-bound prefill takes longer. Hopper keeps
    dequantising FP4 to 16-bit either way, and NVFP4 (W4A4) checkpoints keep the FP4 rate."""
    from clusterplan.physics.rules import compute_precision_for_weights

    b200, h200 = catalog.gpu("b200"), catalog.gpu("h200")
    assert compute_precision_for_weights(b200, "fp4", "fp8") == "fp8"
    assert compute_precision_for_weights(b200, "fp4") == "fp4"
    assert compute_precision_for_weights(h200, "fp4", "fp8") == compute_precision_for_weights(h200, "fp4")
    oss = catalog.model("gpt-oss-120b")
    w4a4 = _est(catalog, oss, "b200", batch=64, i=8192, o=128)
    w4a8 = _est(catalog, oss, "b200", batch=64, i=8192, o=128, a=TRT.model_copy(update={"fp4_activations": "fp8"}))
    assert w4a8.prefill_busy_s > 1.3 * w4a4.prefill_busy_s  # the MoE kernel's per-token time does not double
    assert w4a4.step_model is not None and w4a8.step_model is not None
    assert w4a8.step_model.expert_compute_per_seq_s > 1.5 * w4a4.step_model.expert_compute_per_seq_s
    assert w4a8.max_batch_by_memory == w4a4.max_batch_by_memory  # the weights' bytes are the checkpoint's either way


def test_a_prompt_adds_bytes_to_the_steps_collectives_not_their_latency(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At saturation a prompt rides the running step's forward (TensorRT-LLM ``_prepare_tp_inputs`` flattens context
    and generation tokens into one input): its TP all-reduces and MoE dispatches add bytes to the step's
    collectives, whose latency the decode step already pays. A collective latency of 1 s moves the decode step, not
    a prompt's share of replica time."""
    qwen235 = catalog.model("qwen3-235b-a22b")

    def est() -> ServingEstimate:
        return _est(catalog, qwen235, "b200", batch=256, tp=8, ep=8, dp=True, i=1000, o=1000)

    before = est()
    slow_allreduce = serving.nccl_allreduce_terms
    slow_a2a = moe.all_to_all_link_terms
    monkeypatch.setattr(
        serving, "nccl_allreduce_terms", lambda *a, **k: [(lat + 1.0, pb) for lat, pb in slow_allreduce(*a, **k)]
    )
    monkeypatch.setattr(
        moe, "all_to_all_link_terms", lambda *a, **k: (lambda t: (t[0] + 1.0, t[1], t[2]))(slow_a2a(*a, **k))
    )
    after = est()
    assert after.decode_step_s > before.decode_step_s + 1.0
    assert after.prefill_busy_s == pytest.approx(before.prefill_busy_s)
