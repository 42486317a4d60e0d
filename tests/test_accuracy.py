"""The performance model against published measurements: accuracy may not regress.

``bench/accuracy.py`` predicts every measurement in ``bench/data/`` with the shipped factors. The levels below
are what the calibration reached (docs/accuracy.md); each test allows a small margin above them. Flagged
measurements (the model does not capture what they depend on) are held by a looser all-rows bound so they
cannot silently get worse either. When a physics change moves these numbers on purpose, rerun
``python bench/accuracy.py --markdown docs/accuracy.md`` and update the levels with the reason.
"""

from __future__ import annotations

import hashlib
import re
import statistics
import sys
import warnings

import pytest

from conftest import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import accuracy

# Reached by the calibration (unflagged rows): median absolute error and worst max(p/m, m/p), per kind.
# Re-measured 2026-11-23 after the NVIDIA NIM 1.8 rows (held out for scoring) were removed and the factors refit:
# latency lost its six closed-loop rows, where the 3.4 ms step overhead fitted best.
# Re-measured 2026-11-24 (issue #12): training gained 9 Megatron-LM weak-scaling runs (32-3,072 A100s, predicted
# 10-54% fast) and the torchtitan H100 runs (flagged: power-capped parts; CP / interleaved ones not expressible yet),
# so its median went from 3.5% to 12.6% and its worst from 1.27x (mpt13b) to 1.54x (the 1.7B GPT on 32 A100s);
# memory's median went from 6.2% to 5.9% with the torchtune 8B full rows modelled (8-bit paged AdamW, in-backward).
# Re-measured 2026-11-24 (issue #12, kernel efficiencies): GEMMs at the share of the plateau their M, N, K reach
# (physics/kernels.py, aiconfigurator-core's cuBLAS tables), the attention core at FlashAttention's own rate on the
# causal pairs, Megatron-LM 2021's materialised attention and fp16 gradient all-reduce, training_mfu refit 0.70 ->
# 0.78: training's median went from 9.5% to 4.1% and its worst from 1.54x (1.7B GPT, +53%) to 1.23x (mpt13b H100).
# Re-measured 2026-11-24 (issue #13): serving gained 216 MoE rows (TensorRT-LLM perf overview v1.0 and @03e27c7d; the
# 127 Blackwell ones flagged), so serving throughput's unflagged median went from 6.4% to 13.6% and its worst from 1.37x
# to 2.75x (gpt-oss-120b on 4 H100 DEP4, predicted 2.7x fast); dense serving alone is unchanged (REACHED_VIEW).
# Re-measured 2026-11-24 (issue #13, Blackwell): serving gained 50 dense B200/GB200 FP4 rows (the same two pages) and
# Blackwell its own compute share (0.84 -> 0.66) and FP4 its own matmul share (0.88 -> 0.69), both from
# aiconfigurator-core 0.12.0's GEMM tables; dense Blackwell went from +40% (worst 1.61x) to 11.7% (1.49x), so the 127
# Blackwell MoE rows lost their flag ("Blackwell is not calibrated") and are scored: they are 59% fast at the median
# (the MoE physics of task E), and serving throughput's unflagged median went from 13.7% to 28.5%, its worst from
# 2.75x to 5.52x (Qwen3-30B-A3B on one GB200 at 128/128, measured below the same page's B200).
# Re-measured 2026-11-24 (issue #12, Hopper at scale): training gained the Megatron-Core r0.8.0 H100 weak-scaling
# table (9 GPT runs, 48-6,144 H100s; 4 of them > 1,024 GPUs), predicted -30% to +25% (the > 1,024 band +5% to +12%
# fast). Network collectives at InfiniBand's own efficiency (0.9, not NVLink's 0.7), interleaved schedules syncing each
# chunk's gradients as its backward ends, and training's own Hopper fraction (0.72, fitted on the 13 H100 runs; serving
# keeps 0.84): training's median went from 4.1% to 4.5% and its worst from 1.23x (mpt13b H100) to 1.37x (the 32B GPT
# on 384 H100s, TP 8 PP 1, predicted 27% slow: 4 micro-batches leave its 16 GB fp32 reduce-scatter little backward to
# hide behind); per band <= 64 GPUs 5.6% / 1.23x -> 6.2% / 1.12x, 65-1,024 2.8% / 1.09x -> 5.1% / 1.37x,
# > 1,024 2.0% / 1.03x -> 3.0% / 1.04x.
# Re-measured 2026-11-24 (issue #13, MoE serving): TensorRT-LLM's host time per sequence per step (x86 25 us, Grace
# 40 us, overlapped with the GPU's step; none on its C++-runtime rows), trtllm-bench's own batch cap, attention at the
# KV cache's precision (not FP4), TensorRT-LLM's allgather MoE dispatch off NVL72 and its full-length KV for
# sliding-window / chunked layers, gpt-oss in MXFP4 on Hopper, Qwen3's 16-bit KV cache and 12 stale Qwen3-30B flags
# dropped: serving throughput's unflagged median went from 28.5% to 14.3% and its worst from 5.52x (Qwen3-30B-A3B on
# one GB200 at 128/128) to 2.47x (gpt-oss-20b on one GB200 at 1024/1024, predicted 59% slow: host-bound at Grace's
# 40 us, which that page's later software beats).
# Re-measured 2026-11-24 (issue #13, MoE serving, round two): MoE grouped GEMMs at a per-architecture, per-precision
# share (Blackwell NVFP4 0.76, Hopper MXFP4 0.60) and MLA attention at its kernels' precision (Hopper BF16 with an FP8
# cache), both from aiconfigurator-core 0.12.0's tables: serving throughput's unflagged median went from 14.3% to
# 12.5%; its worst from 2.47x to 2.51x (the same gpt-oss-20b GB200 host-bound row, 59% -> 60% slow).
# Re-measured 2026-11-24 (issue #13, MoE serving, round three): trtllm-bench sizes an NVFP4 engine from its packed
# safetensors element count (before TensorRT-LLM PR #13498; DeepSeek-R1's Blackwell caps 64 -> 96 per rank at
# 1024/8192) and gpt-oss's MXFP4 weights multiply at the FP8 rate on Blackwell (MXFP8 activations): serving
# throughput's unflagged median went from 12.5% to 12.0%; its worst from 2.51x to 2.61x (the same host-bound row,
# 60% -> 62% slow: its prefill at FP8, not FP4).
# Re-measured 2026-11-24 (issue #13, MoE serving, round four): a trtllm-bench run's batch is at most its dataset's
# request count (the perf overviews' num_requests table: 1,500 requests at 1000/2000, not the ~3,800 sequences the KV
# pool of 8 B200 holds): serving throughput's unflagged median stayed at 12.0% (11.97%); its worst went from 2.61x to
# 2.62x (the same host-bound gpt-oss-20b GB200 row, now at 3,000 sequences, not 3,232).
# Re-measured 2026-11-24 (issue #13, MoE serving, round six): Qwen3-30B-A3B FP4 with its FP8 KV cache (a 16-bit cache
# cannot reach the GB200 1024/32768 row's 4,925 tok/s at any batch: 4,675 at full bandwidth; bench/data/settings.yaml):
# serving throughput's unflagged median went from 12.0% to 12.3%; its worst stayed 2.62x (the same row).
# Re-measured 2026-11-24 (issue #13, MoE serving, round six): a chunked-attention layer (Llama 4) reads only its own
# chunk's keys while decoding (positions 8,192-9,216: 512 on average, not 8,192): serving throughput's unflagged median
# went from 12.3% to 12.1%; its worst stayed 2.62x.
REACHED_MEDIAN = {"serving throughput": 0.121, "latency": 0.078, "training throughput": 0.045, "memory": 0.059}
REACHED_WORST = {"serving throughput": 2.62, "latency": 1.39, "training throughput": 1.37, "memory": 1.16}
# Every row, flagged included.
# Training's 2.52x: torchtitan's flagged 8B CP 8 run at 256k tokens (H100 96 GB at 500 W, Float8); the model is
# ~1.3-1.9x fast on every torchtitan row (3.05x before the attention core had its own kernel rate).
# Serving's 5.52x: Qwen3-30B-A3B on one GB200 at 128/128 (measured below the same page's B200; 6.97x before the
# Blackwell shares).
# 2026-11-24 (issue #13, MoE serving): 2.47x, gpt-oss-20b on one GB200 at 1024/1024 (the flagged vLLM 0.5 row: 2.34x).
# 2026-11-24 (issue #13, MoE serving, round two): 2.51x, the same row.
# 2026-11-24 (issue #13, MoE serving, round three): 2.61x, the same row.
# 2026-11-24 (issue #13, MoE serving, round four): 2.62x, the same row (its batch at the dataset's 3,000 requests).
REACHED_WORST_ALL = {"serving throughput": 2.62, "latency": 1.39, "training throughput": 2.52, "memory": 11.31}
# Serving split by architecture (unflagged median, worst). MoE serving on H100/H200 (TensorRT-LLM perf overviews):
# Llama 4 Scout and Maverick within ~2% at the median; Qwen3-235B-A22B +76%, DeepSeek-R1 +87%, gpt-oss-20b +77%,
# gpt-oss-120b +13% (-48% to +175%) at the median: not met yet (27.0%, 2.75x), held here so it cannot get worse.
# 2026-11-24 (issue #13, Blackwell): dense serving gained the 50 B200/GB200 rows (6.4%, 1.37x -> 10.0%, 1.49x; the
# rest held apart below), MoE serving its 127 Blackwell rows (27.0%, 2.75x -> 51.2%, 5.52x).
# 2026-11-24 (issue #13, MoE serving; the changes above): MoE 51.2%, 5.52x -> 18.6%, 2.47x (216 rows, none flagged;
# not met yet: docs/accuracy.md MoE section, docs/model.md section 9); dense 10.0%, 1.49x -> 9.4%, 1.47x.
# 2026-11-24 (issue #13, MoE serving, round two; the shares above): MoE 18.6%, 2.47x -> 16.1%, 2.51x (125 -> 114 rows
# over 15%); dense unchanged.
# 2026-11-24 (issue #13, MoE serving, round three; trtllm-bench's packed NVFP4 count, gpt-oss's FP8 rate on Blackwell):
# MoE 16.1%, 2.51x -> 14.1%, 2.61x (114 -> 104 rows over 15%; the median target met, the worst not); dense unchanged.
# 2026-11-24 (issue #13, MoE serving, round four; the batch at most the dataset's requests): MoE 14.1%, 2.61x ->
# 14.1%, 2.62x (rows over 1.5x: 25 -> 21; over 15%: 104 -> 102); dense unchanged.
# 2026-11-24 (issue #13, MoE serving, round six; Qwen3-30B-A3B FP4's FP8 KV cache): MoE 14.1%, 2.62x -> 14.9%, 2.62x
# (rows over 1.5x: 21 -> 20: its long-context rows -19..-48% -> +3..+43%; its v1.0 5000/500, 2048/128, 2048/2048 and
# 1000/2000 rows -15..+58% -> +31..+99%; docs/model.md section 9); dense unchanged.
# 2026-11-24 (round six; Llama 4's chunked layers read their own chunk): MoE 14.9% -> 14.3%, 2.62x (rows over 1.5x
# 20 -> 19: Maverick on 8 H200 DEP8 at 8192/1024 -40% -> -25%); dense unchanged.
REACHED_VIEW = {"dense serving throughput": (0.094, 1.47), "MoE serving": (0.143, 2.62)}
# Dense serving throughput per architecture group (unflagged median, worst): Blackwell's factors may not buy their fit
# with Hopper's and Ampere's, which stay where the TensorRT-LLM refit of 2026-11-23 left them.
# 2026-11-24 (issue #13, MoE serving): Blackwell 11.7%, 1.49x -> 11.2%, 1.47x (attention at FP8, not FP4, on long
# prompts); other 6.4% -> 7.6% (Llama-3.1-8B on one H100 at 128/128: +6% -> -10%, host-bound at batch 3,885), 1.36x.
REACHED_DENSE = {"Blackwell": (0.112, 1.47), "other": (0.076, 1.36)}
MEDIAN_MARGIN = 0.02  # absolute: two percentage points
WORST_MARGIN = 1.05  # relative: 5 %


@pytest.fixture(scope="module")
def rows() -> list[accuracy.Row]:
    return accuracy.evaluate()


@pytest.fixture(scope="module")
def summary(rows: list[accuracy.Row]) -> dict[str, accuracy.KindSummary]:
    return {k.kind: k for k in accuracy.summarise(rows)}


@pytest.fixture(scope="module")
def views(rows: list[accuracy.Row]) -> dict[str, accuracy.KindSummary]:
    return {k.kind: k for k in accuracy.summarise_views(rows)}


@pytest.mark.slow
def test_every_measurement_has_settings_and_a_prediction(rows: list[accuracy.Row]) -> None:
    measurements = accuracy.load_measurements()
    settings = accuracy.load_settings()
    waiting = [m for m in measurements if settings[m.id].not_expressible]  # counted per band, not predicted yet
    assert len(rows) + len(waiting) == len(measurements) >= 98  # 108 less the 10 NIM 1.8 rows held out for scoring
    assert set(settings) == {m.id for m in measurements}
    for r in rows:
        assert r.predicted > 0 and r.measured > 0, r.id
    assert {r.kind for r in rows} == set(accuracy.KINDS)


@pytest.mark.parametrize("kind", accuracy.KINDS)
def test_median_error_does_not_regress(summary: dict[str, accuracy.KindSummary], kind: str) -> None:
    k = summary[kind]
    assert k.median_abs_error_unflagged <= REACHED_MEDIAN[kind] + MEDIAN_MARGIN, (
        f"{kind}: median {k.median_abs_error_unflagged:.1%} over {REACHED_MEDIAN[kind]:.1%} reached"
    )


@pytest.mark.parametrize("kind", accuracy.KINDS)
def test_no_case_exceeds_the_worst_reached(rows: list[accuracy.Row], kind: str) -> None:
    mine = [r for r in rows if r.kind == kind]
    worse = [f"{r.id} {r.ratio:.2f}x" for r in mine if not r.flagged and r.ratio > REACHED_WORST[kind] * WORST_MARGIN]
    assert not worse, f"{kind}: beyond {REACHED_WORST[kind]}x: {worse}"
    worse_all = [f"{r.id} {r.ratio:.2f}x" for r in mine if r.ratio > REACHED_WORST_ALL[kind] * WORST_MARGIN]
    assert not worse_all, f"{kind} (flagged included): beyond {REACHED_WORST_ALL[kind]}x: {worse_all}"


def test_targets_that_were_met_stay_met(
    summary: dict[str, accuracy.KindSummary], views: dict[str, accuracy.KindSummary]
) -> None:
    # All four were met since NCCL latencies, the prefill sum and logits-vs-recompute; training's worst was 1.54x
    # with the large-run points of issue #12 until GEMMs and attention got their kernel efficiencies. Serving's worst
    # is the MoE rows' of issue #13 (2.75x), held by REACHED_WORST until the physics closes the gap; dense serving
    # alone stays met.
    for kind in ["latency", "training throughput", "memory"]:
        k = summary[kind]
        assert k.median_abs_error_unflagged <= k.target_median, kind
        assert k.worst_ratio_unflagged <= accuracy.WORST_RATIO_TARGET, kind
    dense = views["dense serving throughput"]
    assert dense.meets_target, dense


@pytest.mark.parametrize("view", accuracy.VIEWS)
def test_serving_views_do_not_regress(views: dict[str, accuracy.KindSummary], view: str) -> None:
    median, worst = REACHED_VIEW[view]
    v = views[view]
    assert v.median_abs_error_unflagged <= median + MEDIAN_MARGIN, f"{view}: median {v.median_abs_error_unflagged:.1%}"
    assert v.worst_ratio_unflagged <= worst * WORST_MARGIN, f"{view}: worst {v.worst_ratio_unflagged:.2f}x"


@pytest.mark.parametrize("group", list(REACHED_DENSE))
def test_dense_serving_per_architecture_does_not_regress(rows: list[accuracy.Row], group: str) -> None:
    dense = [r for r in accuracy.view_rows(rows, "dense serving throughput") if not r.flagged]
    mine = [r for r in dense if (r.architecture == "Blackwell") == (group == "Blackwell")]
    median, worst = REACHED_DENSE[group]
    assert len(mine) >= 40, group  # 50 B200/GB200 rows; 43 Hopper, Ampere and Ada ones
    got = statistics.median(abs(r.error) for r in mine)
    assert got <= median + MEDIAN_MARGIN, f"{group}: median {got:.1%}"
    assert max(r.ratio for r in mine) <= min(worst * WORST_MARGIN, accuracy.WORST_RATIO_TARGET), group
    if group == "Blackwell":  # every cell of both pages, FP4 on B200 and GB200
        assert {r.gpu for r in mine} == {"b200", "gb200"} and {r.precision for r in mine} == {"fp4"}


def test_blackwell_matmul_shares_come_from_the_kernel_tables() -> None:
    from clusterplan.physics.factors import Assumptions

    a = Assumptions()
    # aiconfigurator-core 0.12.0, TensorRT-LLM 1.3.0rc20 GEMM tables (M >= 4096, N, K 4096-16384, median share of
    # peak): B200/GB200 BF16 0.647/0.610, FP8 0.498/0.464, NVFP4 0.386/0.369; H200/H100 BF16 0.797/0.795, FP8
    # 0.616/0.601.
    blackwell_vs_hopper = ((0.647 + 0.610) / (0.797 + 0.795) + (0.498 + 0.464) / (0.616 + 0.601)) / 2.0
    fp4_vs_fp8 = (0.386 + 0.369) / (0.498 + 0.464)
    hopper = a.compute_fraction("Hopper", "bf16")
    assert a.compute_fraction("Blackwell", "bf16") == pytest.approx(hopper * blackwell_vs_hopper, rel=0.01)
    assert a.compute_fraction("blackwell", "fp4") == pytest.approx(
        a.compute_fraction("Blackwell", "fp8") * fp4_vs_fp8, rel=0.02
    )
    assert a.compute_fraction("Hopper", "fp8") == pytest.approx(0.84 * 0.88)  # Hopper unchanged


def test_moe_serving_has_its_own_points_and_section(rows: list[accuracy.Row]) -> None:
    moe_rows = accuracy.view_rows(rows, "MoE serving")
    clean = [r for r in moe_rows if not r.flagged]
    assert len(clean) >= 8 and len({r.model for r in clean}) >= 2 and len({r.gpu for r in clean}) >= 2
    assert all(r.moe for r in moe_rows) and not any(r.moe for r in accuracy.view_rows(rows, "dense serving throughput"))
    # Counted in the serving totals too.
    assert {r.id for r in moe_rows if r.kind == "serving throughput"} <= {
        r.id for r in rows if r.kind == "serving throughput"
    }
    text = "\n".join(accuracy.moe_section(rows))
    assert "## Mixture-of-experts serving" in text and "| llama-4-maverick | h200 (Hopper) |" in text
    assert {"llama-4-maverick", "qwen3-235b-a22b", "deepseek-r1", "gpt-oss-120b"} <= {r.model for r in clean}


def test_trtllm_bench_batch_never_exceeds_the_dataset(rows: list[accuracy.Row]) -> None:
    # The perf overviews' datasets: 1,500 requests at 1000/2000 (v1.0 page), 1,000 at 1024/32768 (the later page).
    assert accuracy.trtllm_bench_requests(1000, 2000) == 1500
    assert accuracy.trtllm_bench_requests(1024, 32768) == 1000
    assert accuracy.trtllm_bench_requests(777, 1) is None
    by_id = {r.id: r for r in rows}
    # 8 B200 hold ~3,800 such sequences in KV, but the run has 1,500 requests: it decodes 1,500 at once.
    assert by_id["inf-trt10-maverick-b200-tp8-1000-2000"].detail.startswith("batch 1500 ")
    assert by_id["inf-trt10-maverick-b200-tp8-1000-2000"].ratio < 1.5


def test_routing_skew_follows_the_kernel_tables() -> None:
    from clusterplan.catalog.load import shipped_kernels
    from clusterplan.physics import moe

    law = shipped_kernels()["hopper"].unbalanced_routing
    assert moe.routing_effect(law, 1) == (1.0, ())
    # aiconfigurator-core 0.12.0 H200 medians: EP 2 1.19, 8 1.36, 64 1.69 (power-law over balanced routing)
    for ep, table in ((2, 1.19), (8, 1.36), (64, 1.69)):
        assert moe.routing_effect(law, ep)[0] == pytest.approx(table, rel=0.07)
    # a run without EPLB keeps the planner's default, power-law routing; one with it, balanced
    setting = accuracy.Setting(scenario="saturated", engine="tensorrt-llm", ep=8)
    assert "moe_routing" not in setting.switches()
    assert setting.model_copy(update={"eplb": True}).switches()["moe_routing"] == "balanced"


def test_training_is_reported_per_scale_band(rows: list[accuracy.Row]) -> None:
    measurements, settings = accuracy.load_measurements(), accuracy.load_settings()
    bands = {b.band: b for b in accuracy.band_summary(rows, measurements, settings)}
    assert list(bands) == ["<=64 GPUs", "65-1,024", ">1,024"]
    assert all(b.cases >= 3 for b in bands.values())  # every band holds unflagged runs
    for band in bands.values():  # issue #12's targets hold in every band, not only overall
        assert band.median_abs_error <= 0.10 and band.worst_ratio <= accuracy.WORST_RATIO_TARGET, band.band
    # Every point is expressible: the CP 2-8 (8B, 405B) and interleaved 405B runs are predicted, not waiting.
    assert sum(b.not_expressible for b in bands.values()) == 0
    predicted = {r.id for r in rows}
    assert {
        "trn-titan-llama31-405b-h100-512gpu-cp8-256k",
        "trn-titan-llama31-405b-h100-512gpu-pp8-interleaved",
    } <= predicted
    big = next(m for m in measurements if m.id == "trn-megatron-gpt1008b-a100-3072gpu-2k")
    # 163 TFLOP/s per GPU over the paper's 96·l·h²·(1 + s/6h + V/16lh) FLOPs per token
    assert accuracy.measured_value(big)[0] == pytest.approx(20.0, rel=0.01)


def test_megatron_core_h100_table_is_read_and_converted_with_its_own_count(rows: list[accuracy.Row]) -> None:
    """The Megatron-LM README's H100 weak-scaling table (images/model_table.png, Megatron-Core r0.8.0), 9 rows."""
    table = [m for m in accuracy.load_measurements() if m.id.startswith("trn-mcore-")]
    assert len(table) == 9 and sum(m.gpu_count > 1024 for m in table) == 4
    for m in table:
        # Read off the image twice over: per-GPU TFLOP/s over the 989 TFLOP/s BF16 dense peak is the stated MFU.
        assert m.value / 989.4 == pytest.approx(m.extra["mfu_percent"] / 100, abs=0.006), m.id
        assert m.tp * m.pp * m.dp == m.gpu_count, m.id
    big = next(m for m in table if m.gpu_count == 6144)
    # core_r0.8.0 num_floating_point_operations per token: 12·l·h²·(2 + s/h + 4) + 6·h·V (MHA, GELU MLP 4h)
    layers, h, s, v = 112, 18432, 4096, 131072
    flops = 12 * layers * h * h * (2 + s / h + 4) + 6 * h * v
    assert accuracy.megatron_core_flops_per_token(big) == pytest.approx(flops)
    assert accuracy.measured_value(big) == (pytest.approx(459.9e12 / flops), "tokens/s")
    predicted = {r.id for r in rows if not r.flagged}
    assert {m.id for m in table} <= predicted  # every row predicted, none flagged


def test_flagged_rows_say_why(rows: list[accuracy.Row]) -> None:
    for r in rows:
        for flag in r.flags:
            assert len(flag) > 20, f"{r.id}: a flag must say what the model does not capture"


def test_vendored_copy_matches_its_provenance_header() -> None:
    text = (ROOT / "bench" / "data" / "measurements.yaml").read_bytes()
    header_end = text.index(b"# Published measurements")  # the shared file's own first line
    assert hashlib.sha256(text[header_end:]).hexdigest() == accuracy.VENDORED_SHA256
    warning = accuracy.shared_copy_warning()
    if warning:
        warnings.warn(warning, stacklevel=1)


def test_added_measurements_cite_a_versioned_source() -> None:
    added = accuracy.load_measurements([ROOT / "bench" / "data" / "measurements-added.yaml"])
    assert added
    for m in added:
        assert m.source.startswith("https://"), m.id
        versioned = "/blob/" in m.source or "/1.0.0/" in m.source or re.search(r"arxiv\.org/abs/\d+\.\d+v\d", m.source)
        assert versioned, f"{m.id}: cite a commit or a versioned page"


def test_factors_are_per_class_engine_or_architecture_never_per_case(rows: list[accuracy.Row]) -> None:
    ids = {r.id for r in rows}
    models = {r.model for r in rows}
    knobs = accuracy.knobs_with_data(rows)
    for knob in knobs:
        assert knob.path[0] in (
            "engines",
            "training_mfu",
            "architecture_compute_fraction",
            "architecture_training_fraction",
        ), knob.label
        assert not set(knob.path) & (ids | models), knob.label
    engine_knobs = [k for k in knobs if k.path[0] == "engines"]
    assert engine_knobs  # engines.<engine>.<factor>.<class>: per engine and GPU class, never per case
    for knob in engine_knobs:
        assert knob.path[1] in accuracy.ENGINES and knob.path[3] in accuracy.CLASSES, knob.label


def test_a_trtllm_bench_dataset_runs_in_waves(rows: list[accuracy.Row], monkeypatch: pytest.MonkeyPatch) -> None:
    # 1,000 uniform requests (the later page's 1024/32768 dataset) at 312 a wave: three full waves and one of 64, each
    # wave batch / rps long (step.saturated_rates); a dataset that fits is one (last) wave.
    assert accuracy.trtllm_bench_waves_s(1000, 312, wave_rps=2.0, tail_rps=0.5) == pytest.approx(3 * 156 + 128)
    assert accuracy.trtllm_bench_waves_s(312, 312, wave_rps=2.0, tail_rps=2.0) == pytest.approx(156)
    row = {r.id: r for r in rows}["inf-trt12-dsr1-h200-dep8-1024-32768"]
    assert row.detail.endswith("last wave 64")
    # the small last wave decodes 32,768 tokens at 64 sequences: without the dataset's waves the row would read the
    # steady rate of 312, an eighth faster (when the waves came in, 598b23a: +58% -> +39%)
    m = next(m for m in accuracy.load_measurements() if m.id == row.id)
    s = accuracy.load_settings()[row.id]
    monkeypatch.setitem(accuracy.TRTLLM_BENCH_REQUESTS, (1024, 32768), 10**9)  # a dataset too big to end in a tail
    steady, _ = accuracy.predict(m, s, accuracy.load_catalog(), accuracy.assumptions_for(s))
    assert steady > 1.1 * row.predicted


# ------------------------------------------------------------------------------------------------
# Leave one source out (docs/accuracy.md 'Out of source'; catalog/model_error.yaml)
# ------------------------------------------------------------------------------------------------


def _cited(url: str) -> accuracy.Measurement:
    m = accuracy.load_measurements()[0]
    return m.model_copy(update={"source": url + " (a note after the address)"})


def test_a_source_is_the_cited_document_in_every_version() -> None:
    """Two commits and two folders of one repository file are one source, as are two versions of one paper; two
    files of one repository, or two pull requests, are two."""
    perf = "https://github.com/NVIDIA/TensorRT-LLM/blob/{}/docs/source/{}/perf-overview.md"
    one = accuracy.source_of(_cited(perf.format("00f37686", "performance")))
    assert one == accuracy.source_of(_cited(perf.format("03e27c7d", "developer-guide")))
    other = "https://github.com/NVIDIA/TensorRT-LLM/blob/138f96d4/docs/source/performance.md"
    assert accuracy.source_of(_cited(other)) != one
    paper = accuracy.source_of(_cited("https://arxiv.org/abs/2104.04473v5"))
    assert paper == accuracy.source_of(_cited("https://arxiv.org/abs/2104.04473"))
    prs = {accuracy.source_of(_cited(f"https://github.com/ggml-org/llama.cpp/pull/{n}")) for n in (4766, 4812)}
    assert len(prs) == 2


def _llama_cpp_with_a_leaky_source() -> tuple[accuracy.FitData, list[accuracy.Row], list[accuracy.Knob]]:
    """The llama.cpp rows (their own knob group) and a synthetic source: copies of them measured 3x faster, which
    would drag the llama.cpp factors to their bounds if its rows entered its own fit."""
    catalog = accuracy.load_catalog()
    settings = accuracy.load_settings()
    real = [
        m for m in accuracy.load_measurements() if settings[m.id].engine == "llama.cpp" and not settings[m.id].flags
    ]
    fake = [
        m.model_copy(update={"id": m.id + "-synthetic", "value": m.value * 3, "source": "https://example.org/fast"})
        for m in real
    ]
    settings = {**settings, **{f.id: settings[m.id] for f, m in zip(fake, real, strict=True)}}
    data = accuracy.FitData(catalog, real + fake, settings)
    rows = accuracy.evaluate(catalog, measurements=real + fake, settings=settings, factors=accuracy.FactorSet.shipped())
    knobs = [k for k in accuracy.fitted_knobs(rows) if k.path[:2] == ("engines", "llama.cpp")]
    return data, rows, knobs


def test_a_held_out_source_never_moves_its_own_factors() -> None:
    data, rows, knobs = _llama_cpp_with_a_leaky_source()
    fs = accuracy.FactorSet.shipped()
    held = accuracy.leave_one_source_out(data, rows, knobs, fs)
    real = {r.id for r in rows if not r.id.endswith("-synthetic")}
    alone = accuracy.refit(data, knobs, fs, real)  # the fit that never saw the synthetic source
    assert held.factors["example.org/fast"] == {k.label: k.get(alone) for k in knobs}
    expected = data.predict({r.id for r in rows} - real, alone)
    for r in held.rows:
        if r.id.endswith("-synthetic"):
            assert r.predicted == pytest.approx(expected[r.id].predicted, rel=1e-12)
            assert r.predicted < r.measured / 2  # still predicted at the real rows' speed, not its own
    # And the synthetic rows do pull the factor when they are fitted on: the check above has teeth.
    leaked = accuracy.refit(data, knobs, fs, {r.id for r in rows})
    assert [k.get(leaked) for k in knobs] != [k.get(alone) for k in knobs]


def test_a_class_without_other_rows_borrows_its_datacenter_value() -> None:
    """A factor none of the fitting rows moves is never fitted on the held-out rows: its class takes the datacenter
    value fitted on the others, else the unfitted value."""
    fs = accuracy.FactorSet.shipped()
    dc = accuracy.Knob(path=("training_mfu", "datacenter"), lo=0.1, hi=1.0)
    consumer = accuracy.Knob(path=("training_mfu", "consumer"), lo=0.1, hi=1.0)
    fitted = dc.set(fs, 0.61)
    assert consumer.get(accuracy._borrow(fitted, [consumer], [dc, consumer])) == pytest.approx(0.61)
    overhead = accuracy.Knob(path=("engines", "llama.cpp", "decode_step_overhead_s", "consumer"), lo=1e-5, hi=0.02)
    assert overhead.get(accuracy._borrow(fs, [overhead], [overhead])) == pytest.approx(1e-9)


def test_an_architecture_without_other_rows_takes_hoppers_share_times_the_kernel_ratio() -> None:
    """Every Blackwell row is in one source: left out, Blackwell's share is Hopper's as the others fit it times the
    kernel tables' Blackwell-over-Hopper ratio (how the shipped share was made), not the roofline's 1.0."""
    fs = accuracy.FactorSet.shipped()
    hopper = accuracy.Knob(path=("architecture_compute_fraction", "Hopper"), lo=0.4, hi=1.0)
    blackwell = accuracy.Knob(path=("architecture_compute_fraction", "Blackwell"), lo=0.3, hi=1.0)
    fitted = hopper.set(fs, 0.77)
    borrowed = accuracy._borrow(fitted, [blackwell], [hopper, blackwell])
    assert blackwell.get(borrowed) == pytest.approx(0.77 * accuracy.KERNEL_SHARE_OF_HOPPER["Blackwell"])
    # the shipped share is the same product, to its two digits
    shipped = fs.architecture_compute_fraction
    assert shipped["Blackwell"] == pytest.approx(
        shipped["Hopper"] * accuracy.KERNEL_SHARE_OF_HOPPER["Blackwell"], abs=0.005
    )
    # with Hopper idle too, nothing is borrowed: the roofline
    assert blackwell.get(accuracy._borrow(fitted, [hopper, blackwell], [hopper, blackwell])) == pytest.approx(1.0)


def test_a_factor_one_source_moves_is_not_judged() -> None:
    """Leaving its one source out leaves such a factor unfitted in both arms: the check says it cannot tell."""
    one = accuracy.FactorCheck(
        factor="host_time_per_sequence_layer_s", knobs=[], cases=3, fitted_median=0.2, fitted_worst=3.0,
        unfitted_median=0.2, unfitted_worst=3.0, sources=1,
    )  # fmt: skip
    assert not one.judged and not one.helps
    assert one.model_copy(update={"sources": 2}).judged


def test_the_flat_mfu_rule_is_forty_percent_of_bf16_peak() -> None:
    catalog = accuracy.load_catalog()
    settings = accuracy.load_settings()
    m = next(m for m in accuracy.load_measurements() if m.id == "trn-foundry-mpt7b-h100-8gpu-2k")
    s = settings[m.id]
    gpu = catalog.gpu(s.gpu or m.gpu)
    n = accuracy.params.total_params(accuracy.model_of(m, s, catalog))
    per_gpu = 0.4 * (gpu.tflops("bf16") or 0.0) * 1e12 / (6 * n)
    expected = per_gpu if s.per == "gpu" else per_gpu * m.gpu_count
    assert accuracy.mfu_rule(m, s, catalog) == pytest.approx(expected)


@pytest.mark.slow
def test_each_factor_moves_only_the_rows_it_is_said_to() -> None:
    """knob_rows decides which rows a refit scores a factor on (and so which sources are held out from it): every row
    a factor really moves must be in its set, or a source could leak through a row it was not told about."""
    catalog = accuracy.load_catalog()
    settings = accuracy.load_settings()
    desktop = ("exllamav2", "llama.cpp", "torchtune")  # few rows: all of them, and every eighth of the others
    measurements = [
        m for i, m in enumerate(accuracy.load_measurements()) if i % 8 == 0 or settings[m.id].engine in desktop
    ]
    fs = accuracy.FactorSet.shipped()
    base = {r.id: r for r in accuracy.evaluate(catalog, measurements=measurements, settings=settings, factors=fs)}
    host_of = {r.gpu: catalog.gpu(r.gpu).host_cpu for r in base.values()}
    everything = accuracy.fitted_knobs(accuracy.evaluate(catalog, settings=settings, factors=fs))
    for knob in everything:
        said = accuracy.knob_rows(knob, list(base.values()), fs, host_of)
        nudged = accuracy.evaluate(catalog, measurements=measurements, settings=settings, factors=knob.set(fs, knob.lo))
        moved = {r.id for r in nudged if abs(r.predicted / base[r.id].predicted - 1) > 1e-9}
        assert moved <= said, (knob.label, sorted(moved - said))
        assert moved, knob.label  # the sample holds a row of every factor


def test_model_error_is_the_out_of_source_error() -> None:
    from clusterplan.evaluation.uncertainty import model_error

    assert "out of source" in model_error().source


def test_a_framework_rate_moves_only_its_own_training_rows() -> None:
    """--framework-rate fits a training framework's achieved rate (catalog/frameworks.yaml): it moves that
    framework's rows and no other's, and it is fitted only when asked (none ships: none helped out of source)."""
    catalog = accuracy.load_catalog()
    settings = accuracy.load_settings()
    training = [m for m in accuracy.load_measurements() if settings[m.id].scenario == "training"]
    fs = accuracy.FactorSet.shipped()
    base = {r.id: r for r in accuracy.evaluate(catalog, measurements=training, settings=settings, factors=fs)}
    assert not [k for k in accuracy.knobs_with_data(list(base.values())) if k.path[0] == "framework_rate"]
    knob = next(
        k for k in accuracy.knobs_with_data(list(base.values()), ("torchtune",)) if k.path[0] == "framework_rate"
    )
    assert knob.label == "framework_rate.torchtune"
    slower = accuracy.evaluate(catalog, measurements=training, settings=settings, factors=knob.set(fs, 0.5))
    moved = {r.id for r in slower if abs(r.predicted / base[r.id].predicted - 1) > 1e-9}
    said = accuracy.knob_rows(knob, list(base.values()), fs, {})
    assert moved and moved == said == {r.id for r in base.values() if r.engine == "torchtune"}
