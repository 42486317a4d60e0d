"""How close clusterplan's performance model comes to published measurements.

Predicts every measurement in ``bench/data/measurements.yaml`` (the vendored copy of
``shared/calibration/measurements.yaml``) and ``bench/data/measurements-added.yaml`` from the catalog and the
physics, with the measurement's own settings (``bench/data/settings.yaml``) and the default efficiency factors
of its GPU class and serving engine (:mod:`clusterplan.physics.factors`). Prints one row per measurement
(predicted, measured, signed error) and, per kind (serving throughput, latency, training throughput, memory),
the median absolute percentage error and the worst case. Flagged rows depend on something the model does not
capture; they stay in the table and in the "all" figures, and are reported apart.

    python bench/accuracy.py                 # the table and the summary (in sample, seconds)
    python bench/accuracy.py --markdown docs/accuracy.md --write-errors   # leads with leave one source out (minutes)
    python bench/accuracy.py --loso          # print the leave-one-source-out figures
    python bench/accuracy.py --loso --framework-rate torchtune   # ... with that framework's achieved rate fitted
    python bench/accuracy.py --check-factors # each fitted factor against its unfitted value, out of source (tens
                                             # of minutes; writes bench/data/factor-check.json, --markdown reads it)
    python bench/accuracy.py --fit           # refit the named factors (prints values for factors.py)
    python bench/accuracy.py --json
    python bench/accuracy.py --write-errors  # catalog/model_error.yaml: the error the planner reads, out of source

Leave one source out (``leave_one_source_out``): the rows are grouped by the publication they cite (``source_of``);
for each, every factor fitted on measurement rows (``fitted_knobs``) is refit on the other sources' rows
(``refit``) and the held-out rows are predicted with those factors. ``docs/accuracy.md`` leads with these figures
and ``catalog/model_error.yaml`` holds their error.

Scenarios (how one measurement becomes one physics call) are documented in ``bench/data/settings.yaml``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import re
import statistics
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from clusterplan.catalog.load import Catalog, load_catalog, shipped_frameworks
from clusterplan.catalog.schema import GpuClass, GpuSpec, ModelArchitecture
from clusterplan.evaluation.evaluate import training_job
from clusterplan.physics import memory, params, serving, training
from clusterplan.physics.factors import ENGINE_FACTORS, Assumptions, engine_profiles
from clusterplan.physics.layout import Layout
from clusterplan.physics.optimizer_memory import MemoryPlan
from clusterplan.physics.step import decode_step_s
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.physics.types import ServingEstimate
from clusterplan.requirement.schema import FinetuneWorkload, MemoryOption, TrainingWorkload

ENGINES = engine_profiles()  # catalog/engines.yaml
REFERENCE_FRAMEWORK = "megatron-lm"  # training_mfu's framework: the others' achieved_rate is relative to it
# Frameworks whose achieved_rate is fitted; the others keep the reference's 1.0. None: a rate of its own for
# llm-foundry or torchtune (the two other frameworks with unflagged runs) made the training rows worse out of source
# (`--loso --framework-rate llm-foundry`: median 5.7% -> 7.0%, above 1,024 GPUs 6.7% -> 20.6%; torchtune 5.7% ->
# 6.9%): with one source each, the factor only decouples their rows from training_mfu and the Hopper share, which
# Megatron-LM's held-out rows then lose.
FRAMEWORK_RATE_FITTED: tuple[str, ...] = ()
ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
MEASUREMENT_FILES = (DATA / "measurements.yaml", DATA / "measurements-added.yaml")
SETTINGS_FILE = DATA / "settings.yaml"
ERRORS_FILE = ROOT / "catalog" / "model_error.yaml"  # read by clusterplan.evaluation.uncertainty
SHARED_COPY = ROOT.parent / "shared" / "calibration" / "measurements.yaml"
VENDORED_SHA256 = "a0456decdceada92f2bab92b042227f76cc7b47916bb459ab1352cd8348d5ff2"

Kind = Literal["serving throughput", "latency", "training throughput", "memory"]
KINDS: tuple[Kind, ...] = ("serving throughput", "latency", "training throughput", "memory")
Scenario = Literal[
    "static_batch", "saturated", "concurrency", "single_stream", "decode_step", "prefill", "training", "memory"
]
KIND_OF: dict[str, Kind] = {
    "static_batch": "serving throughput",
    "saturated": "serving throughput",
    "single_stream": "serving throughput",
    "decode_step": "latency",
    "prefill": "latency",
    "training": "training throughput",
    "memory": "memory",
}
TARGETS: dict[Kind, float] = {
    "serving throughput": 0.15,
    "latency": 0.15,
    "training throughput": 0.15,
    "memory": 0.10,
}
WORST_RATIO_TARGET = 1.5
# Serving split by architecture: dense serving throughput, and every serving row (throughput and latency) of a
# mixture-of-experts model. Both are also counted in their kinds above; the targets are the serving ones.
View = Literal["dense serving throughput", "MoE serving"]
VIEWS: tuple[View, ...] = ("dense serving throughput", "MoE serving")
VIEW_TARGET = 0.15


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


class Measurement(BaseModel):
    """One published measurement, as the calibration file writes it (free text kept verbatim)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: Literal["inference", "training", "memory"]
    model: str
    gpu: str
    gpu_count: int
    tp: int
    pp: int
    dp: int
    precision: str
    isl: int | None = None
    osl: int | None = None
    batch_or_concurrency: str
    engine: str
    metric: str
    value: float
    unit: str
    source: str
    notes: str = ""
    extra: dict[str, Any] = Field(default_factory=dict)


class TrainingSetting(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["full", "lora", "qlora"] = "full"
    zero: int = Field(3, ge=0, le=3)
    recompute: Literal["none", "selective", "full"] = "none"
    batch: int = Field(ge=1, description="micro-batch, sequences per GPU")
    grad_accum: int = Field(1, ge=1)
    seq_len: int = Field(ge=1)
    precision: Literal["bf16", "fp16", "fp8", "fp32"] = "bf16"
    lora_rank: int = Field(8, ge=1)
    memory_options: list[MemoryOption] = Field(
        default_factory=list, description="the run's memory options (clusterplan.physics.optimizer_memory)"
    )
    cp: int = Field(1, ge=1, description="context-parallel degree (each sequence over cp GPUs)")
    virtual_stages: int = Field(1, ge=1, description="interleaved pipeline chunks per stage")


class Setting(BaseModel):
    """A measurement's own settings in clusterplan's terms (see bench/data/settings.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario: Scenario
    engine: str
    gpu: str | None = None
    model: str | None = None
    quant: str = "fp16"
    kv: str = "fp16"
    weight_bits: float | None = Field(None, gt=0, description="bits per weight of a non-catalog format")
    batch: int = Field(1, ge=1)
    max_num_seqs: int | None = Field(
        None, ge=1, description="engine cap on concurrent sequences (saturated); unset: the engine's (engines.yaml)"
    )
    batch_rule: Literal["trtllm-bench"] | None = Field(
        None,
        description="the benchmark sized the engine's batch cap itself: trtllm-bench's max_batch_size from its own "
        "KV estimate (trtllm_bench_max_batch; per rank under attention DP), in place of max_num_seqs",
    )
    kv_reserved: Literal["full", "mean"] = Field(
        "full",
        description="KV a running sequence holds when the engine picks the batch: full input + output "
        "(TensorRT-LLM's no-evict scheduler) or the mean input + output/2 (vLLM's paged admission)",
    )
    input_tokens: float | None = None
    output_tokens: float | None = None
    statistic: Literal["itl", "throughput", "ttft"] | None = Field(None, description="concurrency: which figure")
    ep: int = Field(1, ge=1, description="expert-parallel degree per stage (MoE; physics/moe.py)")
    attention_dp: bool = Field(False, description="attention data-parallel over each stage's GPUs (MoE)")
    eplb: bool = Field(
        False,
        description="the run balanced its expert placement (EPLB): Assumptions moe_routing balanced; without it "
        "the routed load carries power-law routing's slowdown, the planner's default (physics/moe.py routing_ratio, "
        "routing_skew: a fact of the setup, not a fitted factor)",
    )
    per: Literal["gpu", "total"] = "total"
    flags: list[str] = Field(default_factory=list)
    training: TrainingSetting | None = None
    gqa_shared_kv_reads: bool | None = Field(
        None, description="the measured engine version's GQA decode kernel (a software fact, not a fitted factor)"
    )
    fp4_activations: Literal["fp4", "fp8"] | None = Field(
        None,
        description="activations an FP4 checkpoint's matmuls take on FP4-native GPUs: fp8 for MXFP4 weights with "
        "MXFP8 activations (gpt-oss on Blackwell; Assumptions.fp4_activations), a fact of the checkpoint",
    )
    fp8_weight_scaling: Literal["tensor", "block"] | None = Field(
        None,
        description="how the FP8 checkpoint scales its weights: block for 128x128 block scales (DeepSeek-R1's native "
        "FP8; Assumptions.fp8_weight_scaling), a fact of the checkpoint",
    )
    python_executor: bool | None = Field(
        None,
        description="TensorRT-LLM's PyTorch backend, whose executor prepares and updates every sequence in Python "
        "each step (v0.19 on, the default since v1.0); False: the TensorRT-engine C++ runtime of v0.5-v0.8 and "
        "FasterTransformer, with no per-sequence Python host time (a software fact, not a fitted factor)",
    )
    flash_attention: bool | None = Field(
        None,
        description="whether the measured framework ran a fused attention kernel (FlashAttention, 2022 on); "
        "Megatron-LM 2021 materialised the scores (a software fact, not a fitted factor)",
    )
    architecture: dict[str, Any] | None = Field(
        None, description="the model's shape when it is not a catalog model (clusterplan ModelArchitecture fields)"
    )
    not_expressible: str | None = Field(
        None,
        description="what of the run's layout the estimator cannot express yet (context parallelism, virtual "
        "pipeline stages): the point is kept with its settings and counted, not predicted",
    )
    single_card: bool = Field(
        False,
        description="one card in a desktop, not a dense deployment: no sustained-clock derate "
        "(sustained_clock_fraction describes dense racks)",
    )

    def switches(self) -> dict[str, Any]:
        """Assumptions that are facts of the measured setup, not fitted factors."""
        out: dict[str, Any] = {}
        if self.gqa_shared_kv_reads is not None:
            out["gqa_shared_kv_reads"] = self.gqa_shared_kv_reads
        if self.flash_attention is not None:
            out["flash_attention"] = self.flash_attention
        if self.fp4_activations is not None:
            out["fp4_activations"] = self.fp4_activations
        if self.fp8_weight_scaling is not None:
            out["fp8_weight_scaling"] = self.fp8_weight_scaling
        if self.python_executor is False:
            out["host_time_per_sequence_layer_s"] = 0.0
        if self.single_card:
            out["sustained_clock_fraction"] = 1.0
        if self.eplb:
            out["moe_routing"] = "balanced"
        return out


class Row(BaseModel):
    """One measurement against its prediction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: Kind
    scenario: Scenario
    engine: str
    gpu_class: str
    gpu: str
    model: str
    predicted: float
    measured: float
    unit: str
    flags: list[str] = Field(default_factory=list)
    detail: str = ""
    gpus: int = Field(1, description="GPUs of the measured run (the scale band)")
    moe: bool = Field(False, description="the model is a mixture of experts (the MoE serving view)")
    architecture: str = Field("", description="the GPU's catalog architecture (Ampere, Hopper, Blackwell)")
    precision: str = Field("", description="the weight precision the setting reads (serving), else ''")
    host_timed: bool = Field(
        True, description="the engine's per-sequence host time applies (False: a C++-runtime row, python_executor)"
    )

    @property
    def error(self) -> float:
        """Signed relative error, (predicted - measured) / measured."""
        return self.predicted / self.measured - 1.0

    @property
    def ratio(self) -> float:
        """How many times off, >= 1: max(p/m, m/p)."""
        if self.predicted <= 0:
            return math.inf
        r = self.predicted / self.measured
        return max(r, 1.0 / r)

    @property
    def flagged(self) -> bool:
        return bool(self.flags)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader when built: ~10x faster on 300+ rows


def _read_yaml(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as f:
        data = yaml.load(f, Loader=_LOADER) or {}  # a safe loader (C or Python)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return data


def load_measurements(paths: Iterable[Path] = MEASUREMENT_FILES) -> list[Measurement]:
    out: list[Measurement] = []
    for path in paths:
        if path.exists():
            out.extend(Measurement.model_validate(m) for m in _read_yaml(path).get("measurements", []))
    ids = [m.id for m in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"duplicate measurement ids: {sorted(dup)}")
    return out


def load_settings(path: Path = SETTINGS_FILE) -> dict[str, Setting]:
    return {k: Setting.model_validate(v) for k, v in _read_yaml(path).get("settings", {}).items()}


def shared_copy_warning() -> str | None:
    """A warning when ../shared's calibration file no longer matches the vendored copy."""
    if not SHARED_COPY.exists():
        return None
    digest = hashlib.sha256(SHARED_COPY.read_bytes()).hexdigest()
    if digest != VENDORED_SHA256:
        return (
            f"{SHARED_COPY} changed since bench/data/measurements.yaml was vendored "
            f"(sha256 {digest[:12]} != {VENDORED_SHA256[:12]}): re-vendor it"
        )
    return None


# ------------------------------------------------------------------------------------------------
# Measured values in clusterplan units
# ------------------------------------------------------------------------------------------------


def measured_value(m: Measurement) -> tuple[float, str]:
    """The measured value in SI-ish units: seconds, tokens/s, GiB."""
    unit = m.unit.strip()
    if unit.startswith("ms"):
        return m.value / 1e3, "s"
    if unit.startswith("GiB"):
        return m.value, "GiB"
    if unit.startswith("GB"):
        return m.value * 1e9 / 2**30, "GiB"
    if "tokens/s" in unit or "tok/s" in unit:
        return m.value, "tokens/s"
    if unit.startswith("TFLOP/s per GPU (Megatron-LM"):
        return m.value * 1e12 / megatron_flops_per_token(m), "tokens/s"
    if unit.startswith("TFLOP/s per GPU (Megatron-Core r0.8.0"):
        return m.value * 1e12 / megatron_core_flops_per_token(m), "tokens/s"
    raise ValueError(f"{m.id}: unit '{m.unit}' not understood")


def megatron_flops_per_token(m: Measurement) -> float:
    """FLOPs per token the Megatron-LM papers count, activation recomputation included:
    ``96·l·h²·(1 + s/(6h) + V/(16·l·h))`` per sequence token (Narayanan et al. 2021, arXiv:2104.04473 §5.1,
    eq. 3 divided by ``B·s``). Reads layers, hidden, vocab and seq_len from the measurement's ``extra``."""
    layers, h, v, s = (float(m.extra[k]) for k in ("layers", "hidden", "vocab", "seq_len"))
    return 96.0 * layers * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * layers * h))


def megatron_core_flops_per_token(m: Measurement) -> float:
    """FLOPs per token Megatron-Core r0.8.0 counts for its throughput and MFU, no recompute, multi-head attention,
    GELU MLP: ``12·l·h²·(2 + s/h + f/h) + 6·h·V`` (``num_floating_point_operations``,
    megatron/training/training.py:73 at tag core_r0.8.0, divided by ``B·s``). Reads layers, hidden, ffn, vocab and
    seq_len from the measurement's ``extra``."""
    layers, h, f, v, s = (float(m.extra[k]) for k in ("layers", "hidden", "ffn", "vocab", "seq_len"))
    return 12.0 * layers * h * h * (2.0 + s / h + f / h) + 6.0 * h * v


# ------------------------------------------------------------------------------------------------
# Predictions
# ------------------------------------------------------------------------------------------------


def assumptions_for(setting: Setting, base: Assumptions | None = None) -> Assumptions:
    """The default factors of the measurement's engine (training frameworks use the class defaults)."""
    data = base.model_dump(exclude_unset=True) if base is not None else {}
    if setting.engine in ENGINES:
        data["engine"] = setting.engine
    data.update(setting.switches())
    return Assumptions.model_validate(data)


def _scale_weights(est: ServingEstimate, quant: str, weight_bits: float | None, a: Assumptions) -> ServingEstimate:
    """Stream the weights at ``weight_bits`` instead of the catalog precision's bytes (EXL2, GGUF formats)."""
    if weight_bits is None or est.step_model is None:
        return est
    factor = (weight_bits / 8.0) / memory.weight_bytes_per_param(quant, int4_group_size=a.int4_group_size)
    step = est.step_model.model_copy(
        update={
            "dense_weights_s": est.step_model.dense_weights_s * factor,
            "head_weights_s": est.step_model.head_weights_s * factor,
            "expert_weights_s": est.step_model.expert_weights_s * factor,
        }
    )
    return est.model_copy(update={"step_model": step, "decode_step_s": decode_step_s(step, est.batch)})


# trtllm-bench's bytes per element by quantisation (tensorrt_llm/bench/build/tuning.py BYTES_PER_ELEM; others 2).
TRTLLM_BENCH_BYTES = {"fp8": 1.0, "fp4": 0.5}
# Safetensors elements per NVFP4 weight: two 4-bit values packed in one U8 element plus one FP8 block scale per 16
# (ModelOpt NVFP4 checkpoints: ``weight`` U8 [out, in/2], ``weight_scale`` F8_E4M3 [out, in/16]).
NVFP4_ELEMENTS_PER_WEIGHT = 1.0 / 2.0 + 1.0 / 16.0


def trtllm_bench_param_count(arch: ModelArchitecture, quant: str) -> float:
    """The ``param_count`` trtllm-bench sizes the engine with: the checkpoint's safetensors element count
    (``ModelConfig.get_param_count``: ``sum(metadata.parameter_count.values())``). An NVFP4 checkpoint packs its
    linear weights two to a U8 element, so the count is about half the parameters and the bench's engine size
    (``param_count * 0.5`` bytes) half the checkpoint's — the bug TensorRT-LLM PR #13498 fixed on 2026-04-27
    ("NVFP4 engine size underestimated by ~2x": DeepSeek-V3.2-NVFP4 183.70 GB counted against 386.54 on disk).
    Embeddings and output head stay 16-bit (one element each); every other weight counts as packed.
    """
    if quant != "fp4":
        return float(params.total_params(arch))
    embeddings = params.embedding_params(arch)
    return (params.total_params(arch) - embeddings) * NVFP4_ELEMENTS_PER_WEIGHT + embeddings


def trtllm_bench_max_batch(
    arch: ModelArchitecture, gpu: GpuSpec, *, tp: int, pp: int, isl: float, osl: float, quant: str, kv: str,
    kv_fraction: float = 0.9,
) -> int:  # fmt: skip
    """trtllm-bench's ``max_batch_size`` for a run it sized (``tensorrt_llm/bench/build/tuning.py``
    ``calc_engine_setting`` and ``finetune_setting``, read at 04cba882): KV bytes per token
    ``2·l·max(tp, kv_heads)·head_dim·b_kv``; requests ``(tp·pp·memory - N·b_w) · fraction / (bytes · (isl + osl))``
    in GiB; capped at 4096, divided by ``pp``, rounded up (to 32 under 256, 128 under 1024, else 256; at least
    64). ``head_dim``: the config's, else ``hidden / heads`` (the bench's ModelConfig; MLA models get no latent
    reading). ``kv_fraction``: ``--kv_cache_free_gpu_mem_fraction``, 0.90 by default. ``N``: the checkpoint's
    element count (:func:`trtllm_bench_param_count`; an NVFP4 checkpoint's packed count, as every release before
    PR #13498 read it).
    """
    b_w = TRTLLM_BENCH_BYTES.get(quant, 2.0)
    b_kv = TRTLLM_BENCH_BYTES.get(kv, 2.0)
    head_dim = arch.head_dim or arch.hidden_size // arch.attention_heads
    per_token_gib = 2 * arch.layers * max(tp, arch.kv_heads) * head_dim * b_kv / 1024**3
    engine_gib = trtllm_bench_param_count(arch, quant) * b_w / 1024**3
    cache_gib = (gpu.memory_gib * tp * pp - engine_gib) * kv_fraction
    requests = cache_gib / (per_token_gib * (isl + osl))
    raw = min(requests, 4096.0) / pp
    if raw < 256:
        return max(64, 32 * math.ceil(raw / 32))
    if raw < 1024:
        return 128 * math.ceil(raw / 128)
    return 256 * math.ceil(raw / 256)


# trtllm-bench throughput runs a fixed dataset: every request is queued at once and the run ends with the last one,
# so no more sequences run together than the dataset holds. ``$num_requests`` per ISL/OSL, TensorRT-LLM perf overview
# v1.0 (docs/source/performance/perf-overview.md @00f37686, "Preparing a Dataset") and the later page
# (docs/source/developer-guide/perf-overview.md @03e27c7d, same section; it lists no 1000/1000 count, and its
# 1000/1000 rows take the v1.0 page's 3,000, the count both pages give their 1K/1K rows). Read 2026-11-24.
TRTLLM_BENCH_REQUESTS: dict[tuple[int, int], int] = {
    (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500, (2048, 128): 3000,
    (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000,
    (1024, 1024): 3000, (8192, 1024): 1500, (1024, 8192): 1500, (32768, 1024): 1000, (1024, 32768): 1000,
}  # fmt: skip


def trtllm_bench_requests(isl: float, osl: float) -> int | None:
    """The number of requests in the perf overview's trtllm-bench dataset for ``isl``/``osl`` (None: not listed).

    The run queues them all at once (infinite request rate) and ends when the last finishes, so the batch it
    decodes is at most this count however much KV memory is free: 1,500 requests of 1000/2000 on 8 B200 run
    1,500 sequences, not the ~3,800 their KV pool would hold.
    """
    return TRTLLM_BENCH_REQUESTS.get((int(isl), int(osl)))


def trtllm_bench_waves_s(requests: int, batch: int, wave_rps: float, tail_rps: float) -> float:
    """Seconds a trtllm-bench run of ``requests`` uniform requests takes when at most ``batch`` run together.

    Every request is queued at once and all have the same input and output lengths, so they run in
    ``ceil(requests / batch)`` waves that start and end together: full waves of ``batch`` at the saturated rate
    ``wave_rps`` (one wave: ``batch / rps = batch·P_b + O·t(batch)``, step.saturated_rates) and a last wave of
    the remainder at its own ``tail_rps``. A small last wave pays nearly a full wave's weight stream per step:
    1,000 requests of 1024/32768 on 8 H200 at 312 a wave run 3 waves of 312 and one of 64.
    """
    tail = trtllm_bench_last_wave(requests, batch)
    return (requests - tail) / wave_rps + tail / tail_rps


def trtllm_bench_last_wave(requests: int, batch: int) -> int:
    """Requests in the last of ``ceil(requests / batch)`` waves: the remainder, or a full ``batch``."""
    return requests - (math.ceil(requests / batch) - 1) * batch


def _lengths(m: Measurement, s: Setting) -> tuple[float, float]:
    """(input, output) tokens per request: the setting's reading, else the measurement's isl/osl."""
    isl = s.input_tokens if s.input_tokens is not None else float(m.isl or 0)
    osl = s.output_tokens if s.output_tokens is not None else float(m.osl or 1)
    return isl, osl


def _serving(
    m: Measurement, s: Setting, arch: ModelArchitecture, gpu: GpuSpec, a: Assumptions, *, batch: int
) -> ServingEstimate:
    isl, osl = _lengths(m, s)
    context = isl + osl if s.kv_reserved == "full" else isl + osl / 2.0
    layout = Layout(tp=m.tp, pp=m.pp, quant=s.quant, kv_precision=s.kv, ep=s.ep, attention_dp=s.attention_dp)
    shape = serving.RequestShape(input_tokens=isl, output_tokens=osl, context_tokens=max(context, 1.0))
    est = serving.estimate_serving(arch, gpu, layout, shape, batch=batch, assumptions=a)
    return _scale_weights(est, s.quant, s.weight_bits, a)


def _training_workload(t: TrainingSetting, dp: int, framework: str) -> TrainingWorkload | FinetuneWorkload:
    """The run as a workload on its own framework (the setting's ``engine``), so its rates and overlaps apply."""
    tokens_per_step = t.batch * t.grad_accum * dp * t.seq_len
    if t.method == "full" and t.precision != "fp16":
        return TrainingWorkload(
            kind="training", tokens=1e12, deadline=1e9, sequence_length=t.seq_len,
            global_batch_tokens=tokens_per_step, precision=t.precision, activation_recompute=t.recompute,
            framework=framework,
        )  # fmt: skip
    precision: Literal["bf16", "fp16"] = "fp16" if t.precision == "fp16" else "bf16"
    return FinetuneWorkload(
        kind="finetune", method=t.method, lora_rank=t.lora_rank, tokens=1e12, deadline=1e9,
        sequence_length=t.seq_len, global_batch_tokens=tokens_per_step, precision=precision,
        activation_recompute=t.recompute, framework=framework,
    )  # fmt: skip


def model_of(m: Measurement, s: Setting, catalog: Catalog) -> ModelArchitecture:
    """The setting's inline architecture, else the catalog model the setting or the measurement names."""
    if s.architecture is not None:
        return ModelArchitecture.model_validate(s.architecture)
    return catalog.model(s.model or m.model)


def _max_batch_by_memory(
    m: Measurement, s: Setting, arch: ModelArchitecture, gpu: GpuSpec, a: Assumptions, cache: dict[str, int] | None
) -> int:
    """Sequences the replica's KV memory holds (a probe at batch 1). Memory reads no fitted factor, so a fit may
    keep it per measurement in ``cache`` while it varies the efficiency factors."""
    if cache is not None and m.id in cache:
        return cache[m.id]
    held = _serving(m, s, arch, gpu, a, batch=1).max_batch_by_memory
    if cache is not None:
        cache[m.id] = held
    return held


def predict(
    m: Measurement, s: Setting, catalog: Catalog, a: Assumptions, memory_cache: dict[str, int] | None = None,
    framework_rate: float | None = None,
) -> tuple[float, str]:  # fmt: skip
    """The model's figure for one measurement, in the units of :func:`measured_value`, and a short detail
    (``memory_cache``: :func:`_max_batch_by_memory`; ``framework_rate``: the training framework's achieved rate in
    place of catalog/frameworks.yaml's, for fitting)."""
    gpu = catalog.gpu(s.gpu or m.gpu)
    arch = model_of(m, s, catalog)
    gpus = m.gpu_count
    per = gpus if s.per == "gpu" else 1

    if s.scenario in ("static_batch", "prefill", "decode_step", "single_stream"):
        est = _serving(m, s, arch, gpu, a, batch=s.batch)
        fit = "" if est.batch <= est.max_batch_by_memory else f"; memory holds {est.max_batch_by_memory}"
        if s.scenario == "static_batch":
            return est.output_tokens_per_s / per, f"batch {est.batch}, {est.bound}{fit}"
        if s.scenario == "prefill":
            # A static batch's context phase: the first prompt's prefill, then the others' compute back to back.
            ttft = est.prefill_s + (est.batch - 1) * est.prefill_busy_s
            return ttft, f"prefill {est.prefill_s * 1e3:.1f} ms at batch 1{fit}"
        if s.scenario == "decode_step":
            return est.decode_step_s, f"step {est.decode_step_s * 1e3:.2f} ms, {est.bound}"
        return 1.0 / est.decode_step_s, f"step {est.decode_step_s * 1e3:.2f} ms{fit}"

    if s.scenario == "saturated":
        by_memory = _max_batch_by_memory(m, s, arch, gpu, a, memory_cache)
        cap = s.max_num_seqs if s.max_num_seqs is not None else a.batch_cap(gpu.memory_gib, gpu.name)
        isl, osl = _lengths(m, s)
        requests = trtllm_bench_requests(isl, osl) if s.batch_rule == "trtllm-bench" else None
        if s.batch_rule == "trtllm-bench":
            cap = trtllm_bench_max_batch(arch, gpu, tp=m.tp, pp=m.pp, isl=isl, osl=osl, quant=s.quant, kv=s.kv)
            cap *= m.tp if s.attention_dp else 1  # every attention-DP rank schedules up to max_batch_size
            cap = min(cap, requests) if requests is not None else cap  # the dataset's size bounds the batch
        batch = max(1, min(by_memory, cap))
        est = _serving(m, s, arch, gpu, a, batch=batch)
        detail = f"batch {batch} (memory {by_memory}), {est.bound}"
        if requests is not None and requests > batch and est.requests_per_s > 0:
            # A fixed dataset of uniform requests runs in waves of `batch`; the last holds the remainder
            # (trtllm_bench_waves_s).
            tail = trtllm_bench_last_wave(requests, batch)
            tail_est = _serving(m, s, arch, gpu, a, batch=tail)
            total_s = trtllm_bench_waves_s(requests, batch, est.requests_per_s, tail_est.requests_per_s)
            return requests * osl / total_s / per, f"{detail}, last wave {tail}"
        return est.output_tokens_per_s / per, detail

    if s.scenario == "concurrency":
        # Closed loop: s.batch clients, each sending its next request when the last finishes. The replica runs
        # min(clients, memory maximum) sequences; the other clients wait, and Little's law on the loop gives the
        # wait: clients = requests/s x (wait + TTFT + (O - 1) x TPOT).
        by_memory = _max_batch_by_memory(m, s, arch, gpu, a, memory_cache)
        running = max(1, min(s.batch, by_memory))
        est = _serving(m, s, arch, gpu, a, batch=running)
        _, osl = _lengths(m, s)
        service = est.ttft_s + max(osl - 1.0, 0.0) * est.tpot_s
        wait = max(0.0, s.batch / est.requests_per_s - service) if s.batch > running else 0.0
        detail = f"running {running} of {s.batch} (memory {by_memory}), wait {wait:.1f} s"
        if s.statistic == "itl":
            return est.tpot_s, detail
        if s.statistic == "ttft":
            return wait + est.ttft_s, detail
        return est.output_tokens_per_s / per, detail

    t = s.training
    if t is None:
        raise ValueError(f"{m.id}: scenario {s.scenario} needs a training block")
    dp = gpus // (m.tp * m.pp * t.cp)
    job = training_job(_training_workload(t, dp, s.engine))
    if framework_rate is not None:  # a fit's value in place of the catalog's (FactorSet.framework_rate)
        job = replace(job, framework=replace(job.framework, achieved_rate=framework_rate))
    est_t = training.estimate_training(
        arch, gpu, job=job,
        layout=Layout(tp=m.tp, pp=m.pp, cp=t.cp, virtual_stages=t.virtual_stages, recompute=t.recompute),
        settings=TrainingSettings(dp=dp, zero_stage=t.zero, micro_batch=t.batch,
                                  memory_plan=MemoryPlan.of(t.memory_options)),
        nodes_gpus_per_node=min(gpus, gpu.max_gpus_per_node), assumptions=a,
    )  # fmt: skip
    if s.scenario == "training":
        return (
            est_t.tokens_per_s / per,
            f"MFU {est_t.mfu:.1%}, comm {est_t.exposed_comm_time_s / est_t.step_time_s:.0%}",
        )
    mem = est_t.memory
    used = mem.total_gib - mem.headroom_gib - mem.runtime_overhead_gib
    return used, (
        f"w {mem.weights_gib:.1f} g {mem.gradients_gib:.1f} o {mem.optimizer_gib:.1f} a {mem.activations_gib:.1f}"
    )


def evaluate(
    catalog: Catalog | None = None,
    base: Assumptions | None = None,
    measurements: list[Measurement] | None = None,
    settings: dict[str, Setting] | None = None,
    factors: FactorSet | None = None,
    memory_cache: dict[str, int] | None = None,
) -> list[Row]:
    """Every measurement against its prediction (``factors`` replaces the shipped defaults, for fitting;
    ``memory_cache``: :func:`_max_batch_by_memory`)."""
    catalog = catalog or load_catalog()
    measurements = measurements if measurements is not None else load_measurements()
    settings = settings if settings is not None else load_settings()
    missing = [m.id for m in measurements if m.id not in settings]
    if missing:
        raise ValueError(f"no settings for: {', '.join(missing)} (add them to {SETTINGS_FILE.name})")
    rows: list[Row] = []
    for m in measurements:
        s = settings[m.id]
        if s.not_expressible:
            continue  # counted by band_summary, predicted once the estimator can express it
        measured, unit = measured_value(m)
        gpu = catalog.gpu(s.gpu or m.gpu)
        a_row = factors.assumptions(s, gpu.host_cpu) if factors is not None else assumptions_for(s, base)
        rate = factors.framework_rate.get(s.engine) if factors is not None else None
        predicted, detail = predict(m, s, catalog, a_row, memory_cache, framework_rate=rate)
        kind = KIND_OF.get(s.scenario) or ("serving throughput" if s.statistic == "throughput" else "latency")
        row = Row(
            id=m.id, kind=kind, scenario=s.scenario, engine=s.engine, gpu_class=gpu.gpu_class,
            gpu=gpu.id, model=model_of(m, s, catalog).name if s.architecture else catalog.model(s.model or m.model).id,
            predicted=predicted, measured=measured, unit=unit, flags=s.flags, detail=detail, gpus=m.gpu_count,
            moe=model_of(m, s, catalog).moe_experts > 1, architecture=gpu.architecture,
            precision=s.quant if s.scenario != "training" else "", host_timed=s.python_executor is not False,
        )  # fmt: skip
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------
# Fitting the named factors
# ------------------------------------------------------------------------------------------------

CLASSES: tuple[GpuClass, ...] = ("datacenter", "workstation", "consumer")


class FactorSet(BaseModel):
    """The fitted factors as plain numbers: the engine profiles' per-class values and the global ones."""

    model_config = ConfigDict(extra="forbid")

    engines: dict[str, dict[str, dict[str, float]]] = Field(description="engine -> factor -> class -> value")
    training_mfu: dict[str, float]
    architecture_compute_fraction: dict[str, float]
    architecture_training_fraction: dict[str, float]
    host_time: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="engine -> host CPU -> host_time_per_sequence_layer_s (catalog/engines.yaml; TensorRT-LLM's)",
    )
    framework_rate: dict[str, float] = Field(
        default_factory=dict,
        description="training framework -> achieved_rate, its share of the reference framework's (Megatron-LM's) "
        "achieved compute rate (catalog/frameworks.yaml)",
    )

    @classmethod
    def shipped(cls) -> FactorSet:
        """The defaults in clusterplan.physics.factors."""
        a = Assumptions()
        return cls(
            engines={
                name: {f: getattr(profile, f).model_dump() for f in ENGINE_FACTORS} for name, profile in ENGINES.items()
            },
            training_mfu=a.training_mfu.model_dump(),
            architecture_compute_fraction=dict(a.architecture_compute_fraction),
            architecture_training_fraction=dict(a.architecture_training_fraction),
            host_time={
                name: profile.host_time_per_sequence_layer_s.model_dump()
                for name, profile in ENGINES.items()
                if any(profile.host_time_per_sequence_layer_s.model_dump().values())
            },
            framework_rate={spec.id: spec.achieved_rate for spec in shipped_frameworks().values()},
        )

    def assumptions(self, setting: Setting, host_cpu: str | None = None) -> Assumptions:
        data: dict[str, Any] = {
            "training_mfu": self.training_mfu,
            "architecture_compute_fraction": self.architecture_compute_fraction,
            "architecture_training_fraction": self.architecture_training_fraction,
        }
        if setting.engine in self.engines:
            data["engine"] = setting.engine
            data.update(self.engines[setting.engine])
            host = self.host_time.get(setting.engine, {})
            if host_cpu in host:
                data["host_time_per_sequence_layer_s"] = host[host_cpu]
        data.update(setting.switches())
        return Assumptions.model_validate(data)


class Knob(BaseModel):
    """One fitted number: where it lives in a FactorSet and its search range."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: tuple[str, ...]
    lo: float = Field(gt=0)
    hi: float = Field(gt=0)

    def get(self, fs: FactorSet) -> float:
        node: Any = fs.model_dump()
        for key in self.path:
            node = node[key]
        return float(node)

    def set(self, fs: FactorSet, value: float) -> FactorSet:
        data = fs.model_dump()
        node = data
        for key in self.path[:-1]:
            node = node[key]
        node[self.path[-1]] = value
        return FactorSet.model_validate(data)

    @property
    def label(self) -> str:
        return ".".join(self.path)


# An architecture without rows of its own among the fitting sources takes Hopper's fitted share times the share of
# peak its matmuls reach against Hopper's in kernel tables no measurement row feeds (_borrow; physics/factors.py
# architecture_compute_fraction was made so). Blackwell: aiconfigurator-core 0.12.0's TensorRT-LLM 1.3.0rc20 GEMM
# tables, B200/GB200 against H100/H200 (M >= 4096, N and K 4096-16384, median: BF16 0.63 vs 0.80, FP8 0.48 vs 0.61).
KERNEL_SHARE_OF_HOPPER: dict[str, float] = {"Blackwell": 0.79}


def knobs_with_data(rows: list[Row], frameworks: Iterable[str] = FRAMEWORK_RATE_FITTED) -> list[Knob]:
    """Every factor some unflagged measurement depends on: per engine and GPU class, per training class, Hopper and
    Blackwell, and the achieved rate of each training framework of ``frameworks`` with unflagged runs."""
    clean = [r for r in rows if not r.flagged]
    out: list[Knob] = []
    for engine in ENGINES:
        for cls in CLASSES:
            mine = [r for r in clean if r.engine == engine and r.gpu_class == cls]
            if not mine:
                continue
            # Streaming kernels reach at most ~92% of datasheet HBM/GDDR bandwidth; the step overhead trades off
            # against bandwidth along a flat ridge, so the bound keeps the fit on the physical side of it.
            out.append(Knob(path=("engines", engine, "memory_bandwidth_efficiency", cls), lo=0.3, hi=0.92))
            out.append(Knob(path=("engines", engine, "decode_step_overhead_s", cls), lo=1e-5, hi=0.02))
            if any(r.scenario not in ("single_stream", "decode_step") for r in mine):
                out.append(Knob(path=("engines", engine, "compute_efficiency", cls), lo=0.15, hi=0.95))
            if any(r.moe for r in mine):  # grouped-GEMM efficiency of the expert layers (1 for dense models)
                out.append(Knob(path=("engines", engine, "moe_gemm_efficiency", cls), lo=0.1, hi=1.0))
    for cls in CLASSES:
        if any(r.kind == "training throughput" and r.gpu_class == cls for r in clean):
            out.append(Knob(path=("training_mfu", cls), lo=0.1, hi=1.0))
    out.append(Knob(path=("architecture_compute_fraction", "Hopper"), lo=0.4, hi=1.0))
    if any(r.architecture == "Blackwell" for r in clean):  # its own share, so a refit keeps it off the class factors
        out.append(Knob(path=("architecture_compute_fraction", "Blackwell"), lo=0.3, hi=1.0))
    if any(r.kind == "training throughput" and _family(r.gpu) == "Hopper" for r in clean):
        out.append(Knob(path=("architecture_training_fraction", "Hopper"), lo=0.4, hi=1.0))
    # A framework's achieved rate against the reference's (training_mfu is fitted with Megatron-LM's at 1.0), where
    # unflagged runs of it exist; only those that help out of source ship (catalog/frameworks.yaml achieved_rate).
    for framework in sorted({r.engine for r in clean if r.kind == "training throughput"} - {REFERENCE_FRAMEWORK}):
        if framework in frameworks:
            out.append(Knob(path=("framework_rate", framework), lo=0.5, hi=1.5))
    return out


def fit_loss(rows: list[Row]) -> float:
    """Mean absolute log error over the unflagged rows that are not memory (factors do not change memory)."""
    clean = [r for r in rows if not r.flagged and r.kind != "memory"]
    return sum(abs(math.log(r.predicted / r.measured)) for r in clean) / max(len(clean), 1)


def fit(start: FactorSet | None = None, sweeps: int = 4, steps: int = 24) -> tuple[FactorSet, list[Knob]]:
    """Coordinate descent, golden-section search on log(value) per knob, minimising :func:`fit_loss`."""
    catalog = load_catalog()
    measurements, settings = load_measurements(), load_settings()
    fs = start or FactorSet.shipped()

    def loss(candidate: FactorSet) -> float:
        return fit_loss(evaluate(catalog, measurements=measurements, settings=settings, factors=candidate))

    knobs = knobs_with_data(evaluate(catalog, measurements=measurements, settings=settings, factors=fs))
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(sweeps):
        for knob in knobs:
            lo, hi = math.log(knob.lo), math.log(knob.hi)
            c, d = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
            fc, fd = loss(knob.set(fs, math.exp(c))), loss(knob.set(fs, math.exp(d)))
            for _ in range(steps):
                if fc < fd:
                    hi, d, fd = d, c, fc
                    c = hi - ratio * (hi - lo)
                    fc = loss(knob.set(fs, math.exp(c)))
                else:
                    lo, c, fc = c, d, fd
                    d = lo + ratio * (hi - lo)
                    fd = loss(knob.set(fs, math.exp(d)))
            best = math.exp((lo + hi) / 2.0)
            if loss(knob.set(fs, best)) < loss(fs):
                fs = knob.set(fs, best)
    return fs, knobs


# ------------------------------------------------------------------------------------------------
# Leave one source out: fit on every publication but one, score that one
# ------------------------------------------------------------------------------------------------

GITHUB_FILE = re.compile(r"https?://github\.com/([^/]+/[^/]+)/(?:blob|raw|tree)/[^/]+/(?:.*/)?([^/]+)$")
ARXIV = re.compile(r"https?://arxiv\.org/(?:abs|pdf)/([0-9]+\.[0-9]+)(?:v[0-9]+)?")


def source_of(m: Measurement) -> str:
    """The publication a measurement comes from, the unit left out together.

    Rule: the cited document is the first word of ``source`` (its URL), query and fragment dropped. A file in a
    GitHub repository is one document in every version and folder: repository and file name, commit and path
    dropped (TensorRT-LLM's perf overview moved from ``docs/source/performance/`` to ``developer-guide/`` between
    the v1.0 page and the later one: one source). An arXiv paper is one document in every version. Anything else
    is its URL without the scheme (one blog post, one pull request).
    """
    url = m.source.split()[0].split("#")[0].split("?")[0]
    found = GITHUB_FILE.match(url)
    if found:
        return f"github.com/{found[1]}: {found[2]}"
    paper = ARXIV.match(url)
    if paper:
        return f"arXiv:{paper[1]}"
    return url.split("://", 1)[-1].rstrip("/")


def knob_rows(knob: Knob, rows: list[Row], fs: FactorSet, host_of: dict[str, str]) -> set[str]:
    """The rows whose prediction can move with ``knob`` (by how the factor enters the physics, not by probing):
    an engine factor its engine's serving rows on that GPU class, a host time its engine's rows on that host CPU,
    ``training_mfu`` the training rows of its class, ``architecture_training_fraction`` the training rows of its
    architecture, ``architecture_compute_fraction`` the serving rows of its architecture and its training rows
    where no training fraction is listed. Memory rows read no fitted factor."""
    group, *rest = knob.path
    timed = [r for r in rows if r.kind != "memory"]
    serving = [r for r in timed if r.kind != "training throughput"]
    training_rows = [r for r in timed if r.kind == "training throughput"]
    if group == "engines":
        return {r.id for r in serving if r.engine == rest[0] and r.gpu_class == rest[2]}
    if group == "host_time":
        return {r.id for r in serving if r.engine == rest[0] and host_of[r.gpu] == rest[1] and r.host_timed}
    if group == "training_mfu":
        return {r.id for r in training_rows if r.gpu_class == rest[0]}
    if group == "architecture_training_fraction":
        return {r.id for r in training_rows if r.architecture == rest[0]}
    if group == "framework_rate":
        return {r.id for r in training_rows if r.engine == rest[0]}
    own = rest[0] in fs.architecture_training_fraction
    return {r.id for r in (serving if own else timed) if r.architecture == rest[0]}


HOST_TIME_BOUNDS_S = (5e-8, 5e-6)  # 0.05-5 us per sequence and layer: Python bookkeeping, a wide bound either side


def fitted_knobs(rows: list[Row], frameworks: Iterable[str] = FRAMEWORK_RATE_FITTED) -> list[Knob]:
    """Every factor fitted on these measurement rows: :func:`knobs_with_data` and TensorRT-LLM's host time per host
    CPU (catalog/engines.yaml; fitted on the perf-overview rows by hand until now). The kernel-table factors
    (bench/gemm_knee_fit.py, bench/moe_kernel_fit.py, physics/kernels.py's GEMM shape fit) read no measurement
    row, so leaving a source out cannot move them."""
    clean = [r for r in rows if not r.flagged]
    out = knobs_with_data(rows, frameworks)
    hosts = {r.gpu: load_catalog([]).gpu(r.gpu).host_cpu for r in clean}
    for host in sorted({hosts[r.gpu] for r in clean if r.engine == "tensorrt-llm"}):
        out.append(Knob(path=("host_time", "tensorrt-llm", host), lo=HOST_TIME_BOUNDS_S[0], hi=HOST_TIME_BOUNDS_S[1]))
    return out


def knob_family(knob: Knob) -> str:
    """The factor a knob is one value of: ``compute_efficiency`` for every engine and class, and so on."""
    if knob.path[0] == "engines":
        return knob.path[2]
    if knob.path[0] == "host_time":
        return "host_time_per_sequence_layer_s"
    return knob.path[0]


# Each factor's value with nothing fitted: the roofline (1.0), no fixed step or host time, no architecture share.
UNFITTED: dict[str, float | None] = {
    "memory_bandwidth_efficiency": 1.0,
    "compute_efficiency": 1.0,
    "decode_step_overhead_s": 1e-9,  # PerClass values are > 0: a nanosecond, nothing
    "moe_gemm_efficiency": 1.0,
    "host_time_per_sequence_layer_s": 0.0,
    "training_mfu": 1.0,
    "architecture_compute_fraction": 1.0,
    "architecture_training_fraction": None,  # not listed: training takes architecture_compute_fraction
    "framework_rate": 1.0,  # the reference framework's rate
}


def unfit(fs: FactorSet, knob: Knob) -> FactorSet:
    """``fs`` with ``knob`` at its family's unfitted value (:data:`UNFITTED`)."""
    value = UNFITTED[knob_family(knob)]
    if value is not None:
        return knob.set(fs, value)
    data = fs.model_dump()
    data[knob.path[0]].pop(knob.path[1], None)
    return FactorSet.model_validate(data)


class FitData:
    """What a refit reads: the rows, their measurements and settings, each row's memory probe."""

    def __init__(self, catalog: Catalog, measurements: list[Measurement], settings: dict[str, Setting]) -> None:
        self.catalog = catalog
        self.by_id = {m.id: m for m in measurements}
        self.settings = settings
        self.memory: dict[str, int] = {}
        self.sources = {m.id: source_of(m) for m in measurements}

    def predict(self, ids: Iterable[str], fs: FactorSet) -> dict[str, Row]:
        mine = [self.by_id[i] for i in ids]
        rows = evaluate(self.catalog, measurements=mine, settings=self.settings, factors=fs, memory_cache=self.memory)
        return {r.id: r for r in rows}


def _loss(rows: Iterable[Row]) -> float:
    logs = [abs(math.log(r.predicted / r.measured)) for r in rows if not r.flagged and r.predicted > 0]
    return sum(logs) / max(len(logs), 1)


def refit(
    data: FitData, knobs: list[Knob], fs: FactorSet, ids: set[str], *, sweeps: int = 2, steps: int = 7
) -> FactorSet:
    """Coordinate descent as :func:`fit`, on the rows ``ids`` only, from the middle of each knob's range (never
    from the shipped values, which saw every row): each knob is searched over its whole bounded range
    (golden section on its log) on the rows it moves (:func:`knob_rows`), so a row outside ``ids`` cannot reach it."""
    start = data.predict(ids, fs)
    host_of = {g: data.catalog.gpu(g).host_cpu for g in {r.gpu for r in start.values()}}
    moved = {k.label: knob_rows(k, list(start.values()), fs, host_of) & ids for k in knobs}
    for knob in knobs:
        fs = knob.set(fs, math.sqrt(knob.lo * knob.hi))
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(sweeps):
        for knob in knobs:
            mine = moved[knob.label]
            if not mine:
                continue

            def loss(x: float, knob: Knob = knob, mine: set[str] = mine, at: FactorSet = fs) -> float:
                return _loss(data.predict(mine, knob.set(at, math.exp(x))).values())

            lo, hi = math.log(knob.lo), math.log(knob.hi)
            c, d = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
            fc, fd = loss(c), loss(d)
            for _ in range(steps):
                if fc < fd:
                    hi, d, fd = d, c, fc
                    c = hi - ratio * (hi - lo)
                    fc = loss(c)
                else:
                    lo, c, fc = c, d, fd
                    d = lo + ratio * (hi - lo)
                    fd = loss(d)
            if fc == fd == loss(math.log(knob.lo)) == loss(math.log(knob.hi)):
                moved[knob.label] = set()  # its rows do not answer to it here: fitted to nothing, it is borrowed
                continue
            fs = knob.set(fs, math.exp(c if fc < fd else d))
    return _borrow(fs, [k for k in knobs if not moved[k.label]], knobs)


def _borrow(fs: FactorSet, idle: list[Knob], knobs: list[Knob]) -> FactorSet:
    """A knob none of the fitting rows moves takes the value its factor was fitted to on the datacenter class (the
    class with data); an architecture's share, Hopper's fitted share times the kernel tables' ratio of the two
    (:data:`KERNEL_SHARE_OF_HOPPER`, as the shipped share was made, not fitted on its rows); else its unfitted
    value (:data:`UNFITTED`): a source alone on its class or architecture is predicted with what the others say,
    never with its own rows."""
    for knob in idle:
        ratio = KERNEL_SHARE_OF_HOPPER.get(knob.path[-1]) if knob.path[0].startswith("architecture_") else None
        twin = (*knob.path[:-1], "Hopper" if ratio is not None else "datacenter")
        donors = [k for k in knobs if k.path == twin and k not in idle]
        fs = knob.set(fs, donors[0].get(fs) * (ratio or 1.0)) if donors else unfit(fs, knob)
    return fs


def components(knobs: list[Knob], moved: dict[str, set[str]]) -> list[list[Knob]]:
    """Knobs that share a row are fitted together, and so are one factor's values for several GPU classes (a class
    left without rows borrows its datacenter value, :func:`_borrow`); others never move each other's fit."""
    groups: list[tuple[list[Knob], set[str]]] = []
    for knob in knobs:
        rows = set(moved[knob.label]) | {"factor: " + ".".join(knob.path[:-1])}
        joined = [g for g in groups if g[1] & rows]
        merged = [knob] + [k for g in joined for k in g[0]]
        for g in joined:
            rows |= g[1]
            groups.remove(g)
        groups.append((sorted(merged, key=lambda k: knobs.index(k)), rows))
    return [g[0] for g in groups]


class OutOfSource(BaseModel):
    """Every row predicted with factors fitted on the other sources only, and the factors each source got."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: list[Row]
    refit_rows: list[Row] = Field(description="every row with the factors refit on all sources (same procedure)")
    sources: dict[str, str] = Field(description="row id -> source (source_of)")
    factors: dict[str, dict[str, float]] = Field(description="held-out source -> knob label -> value fitted without it")


def leave_one_source_out(
    data: FitData, rows: list[Row], knobs: list[Knob], fs: FactorSet, *, only: set[str] | None = None,
    in_sample: bool = True, sweeps: int = 2, steps: int = 7,
) -> OutOfSource:  # fmt: skip
    """For each source: refit every knob group that moves one of its rows on the other sources' rows, and predict
    its rows with them. Rows no knob moves keep ``fs``'s prediction (nothing fitted reaches them). ``only``: the
    rows wanted; groups and sources without one are skipped (their rows keep ``fs``'s prediction)."""
    host_of = {r.gpu: data.catalog.gpu(r.gpu).host_cpu for r in rows}
    moved = {k.label: knob_rows(k, rows, fs, host_of) for k in knobs}
    groups = components(knobs, moved)
    every = {r.id for r in rows}
    out: dict[str, Row] = {r.id: r for r in rows}
    out.update(data.predict(every if only is None else only, fs))  # rows no refit reaches: ``fs`` as given
    refit_all: dict[str, Row] = {r.id: r for r in rows}
    fitted: dict[str, dict[str, float]] = {}
    for group in groups:
        reach = set().union(*(moved[k.label] for k in group))
        if only is not None and not reach & only:
            continue
        whole = refit(data, group, fs, reach, sweeps=sweeps, steps=steps) if in_sample else None
        if whole is not None:
            refit_all.update(data.predict(reach, whole))
        clean_sources = {data.sources[i] for i in reach if not data.settings[i].flags}
        for source in sorted({data.sources[i] for i in reach}):
            held = {i for i in reach if data.sources[i] == source}
            if only is not None and not held & only:
                continue
            without = reach - held
            # A source whose rows here are all flagged never entered the loss: its refit is the whole one.
            if source in clean_sources:
                mine = refit(data, group, fs, without, sweeps=sweeps, steps=steps)
            else:
                whole = whole or refit(data, group, fs, reach, sweeps=sweeps, steps=steps)
                mine = whole
            out.update(data.predict(held, mine))
            fitted.setdefault(source, {}).update({k.label: k.get(mine) for k in group})
    order = [r.id for r in rows]
    return OutOfSource(
        rows=[out[i] for i in order], refit_rows=[refit_all[i] for i in order],
        sources={i: data.sources[i] for i in every}, factors=fitted,
    )  # fmt: skip


def check_factors(
    data: FitData, rows: list[Row], knobs: list[Knob], fs: FactorSet, base: OutOfSource
) -> list[FactorCheck]:
    """Per fitted factor: the out-of-source error of the rows it moves, fitted (``base``: the figures' own
    leave-one-source-out) and left at its unfitted value (:data:`UNFITTED`, the other factors refit without it, each
    source still left out, with the same search as the figures: a coarser one flipped two verdicts of five)."""
    out: list[FactorCheck] = []
    host_of = {r.gpu: data.catalog.gpu(r.gpu).host_cpu for r in rows}
    for family in dict.fromkeys(knob_family(k) for k in knobs):
        mine = [k for k in knobs if knob_family(k) == family]
        moved = set().union(*(knob_rows(k, rows, fs, host_of) for k in mine))
        clean = [r for r in rows if r.id in moved and not r.flagged]
        if not clean:
            continue
        bare = fs
        for knob in mine:
            bare = unfit(bare, knob)
        rest = [k for k in knobs if k not in mine]
        only = {r.id for r in clean}
        without = leave_one_source_out(data, rows, rest, bare, only=only, in_sample=False)
        fitted = {r.id: r for r in base.rows}
        unfitted = {r.id: r for r in without.rows}
        f_med, f_worst, _ = _median_worst([fitted[r.id] for r in clean])
        u_med, u_worst, _ = _median_worst([unfitted[r.id] for r in clean])
        check = FactorCheck(
            factor=family, knobs=[k.label for k in mine], cases=len(clean), fitted_median=f_med,
            fitted_worst=f_worst, unfitted_median=u_med, unfitted_worst=u_worst,
            sources=len({data.sources[r.id] for r in clean}),
        )  # fmt: skip
        out.append(check)
    return out


class FactorCheck(BaseModel):
    """Whether a fitted factor earns its place out of source: its rows' error fitted and unfitted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    factor: str
    knobs: list[str]
    cases: int = Field(description="unflagged rows the factor moves")
    fitted_median: float
    fitted_worst: float
    unfitted_median: float
    unfitted_worst: float
    sources: int = Field(description="sources those rows come from")

    @property
    def judged(self) -> bool:
        """Whether leaving sources out can tell: with every row in one source, that source left out leaves the factor
        unfitted in both arms, and the others' rows do not move it."""
        return self.sources > 1

    @property
    def helps(self) -> bool:
        """Fitted, the held-out median is lower and the worst no worse (within 1%)."""
        return self.fitted_median < self.unfitted_median and self.fitted_worst <= self.unfitted_worst * 1.01


MFU_RULE = 0.40  # the seeds' rule of thumb: every run at 40% of the GPU's dense BF16 peak, 6 FLOPs per parameter


def mfu_rule(m: Measurement, s: Setting, catalog: Catalog) -> float:
    """Training tokens/s (per GPU or in total, as the measurement) the flat 40%-MFU rule gives: 0.4 x dense BF16
    peak x GPUs / (6 x parameters)."""
    gpu = catalog.gpu(s.gpu or m.gpu)
    peak = (gpu.tflops("bf16") or gpu.tflops("fp16") or 0.0) * 1e12
    per_gpu = MFU_RULE * peak / (6.0 * params.total_params(model_of(m, s, catalog)))
    return per_gpu if s.per == "gpu" else per_gpu * m.gpu_count


class GroupFigure(BaseModel):
    """One group's unflagged rows: in-sample (shipped factors) and out-of-source median and worst."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str
    cases: int
    in_median: float
    in_worst: float
    out_median: float
    out_worst: float
    out_worst_id: str
    rule_median: float | None = None
    rule_worst: float | None = None
    closer_than_rule: int | None = Field(None, description="rows the out-of-source model is closer on than the rule")


def group_figures(
    shipped: list[Row], held: list[Row], key: Any, rule: dict[str, float] | None = None
) -> list[GroupFigure]:
    """Unflagged rows grouped by ``key(row)`` (None: left out), in-sample beside out-of-source (and the rule's)."""
    by_id = {r.id: r for r in held}
    groups: dict[str, list[Row]] = {}
    for r in shipped:
        name = key(r)
        if name is not None and not r.flagged:
            groups.setdefault(name, []).append(r)
    out: list[GroupFigure] = []
    for name, mine in groups.items():
        theirs = [by_id[r.id] for r in mine]
        in_med, in_worst, _ = _median_worst(mine)
        out_med, out_worst, worst_id = _median_worst(theirs)
        extra: dict[str, Any] = {}
        if rule is not None:
            ruled = [r.model_copy(update={"predicted": rule[r.id]}) for r in mine]
            r_med, r_worst, _ = _median_worst(ruled)
            closer = sum(1 for r, x in zip(theirs, ruled, strict=True) if r.ratio < x.ratio)
            extra = {"rule_median": r_med, "rule_worst": r_worst, "closer_than_rule": closer}
        figure = GroupFigure(
            group=name, cases=len(mine), in_median=in_med, in_worst=in_worst, out_median=out_med,
            out_worst=out_worst, out_worst_id=worst_id, **extra,
        )  # fmt: skip
        out.append(figure)
    return out


def _band(gpus: int) -> str:
    return next(label for label, lo, hi in BANDS if lo <= gpus <= hi)


def _figure_rows(figures: list[GroupFigure], rule: bool = False) -> list[str]:
    head = "| group | cases | in-sample median | in-sample worst | out-of-source median | out-of-source worst |"
    line = "|---|---:|---:|---:|---:|---|"
    if rule:
        head += " 40%-MFU rule median | rule worst | model closer than the rule |"
        line += "---:|---:|---:|"
    out = [head, line]
    for f in figures:
        cells = (
            f"| {f.group} | {f.cases} | {f.in_median:.1%} | {f.in_worst:.2f}x | {f.out_median:.1%} | "
            f"{f.out_worst:.2f}x (`{f.out_worst_id}`) |"
        )
        if rule and f.rule_median is not None and f.rule_worst is not None:
            cells += f" {f.rule_median:.1%} | {f.rule_worst:.2f}x | {f.closer_than_rule} of {f.cases} |"
        out.append(cells)
    return out


def out_of_source_section(
    shipped: list[Row], held: OutOfSource, rule: dict[str, float], checks: list[FactorCheck]
) -> list[str]:
    """docs/accuracy.md's lead: the leave-one-source-out figures beside the in-sample ones, and the factor check."""
    out = [
        "## Out of source (leave one source out)",
        "",
        "How well the model predicts a publication it was not fitted on. The measurements are grouped by source: "
        "the document each row cites (`source_of` in `bench/accuracy.py`: the URL; a file of a GitHub repository "
        "in every version and folder is one source, as is an arXiv paper in every version). For each source, every "
        "factor fitted on measurement rows (`fitted_knobs`: the engines' `memory_bandwidth_efficiency`, "
        "`compute_efficiency`, `decode_step_overhead_s` and `moe_gemm_efficiency` per GPU class, TensorRT-LLM's "
        "`host_time_per_sequence_layer_s` per host CPU, `training_mfu` per class, `architecture_compute_fraction` "
        "and `architecture_training_fraction` per architecture) is refit on the other sources' unflagged rows "
        "(`refit`: coordinate descent from the middle of each factor's bounded range, least mean absolute log "
        "error; a class with no other rows takes its factor's datacenter value, and an architecture with none "
        "Hopper's share times the ratio of the two in the kernel tables, as the shipped share was made: Blackwell, "
        "whose rows are all in one source, 0.79), and the held-out rows are predicted with those factors. Factors "
        "read off kernel tables (`bench/gemm_knee_fit.py`, "
        "`bench/moe_kernel_fit.py`, the GEMM shape fit) read no measurement row and stay as shipped. *In-sample* "
        "is the shipped factors on every row (the tables further down). Unflagged rows only.",
        "",
        "### Per kind",
        "",
    ]
    out += _figure_rows(group_figures(shipped, held.rows, lambda r: r.kind))
    out += ["", "### Per GPU generation", ""]
    out += _figure_rows(group_figures(shipped, held.rows, lambda r: f"{r.kind}, {r.architecture}"))
    out += ["", "### Per engine or framework", ""]
    out += _figure_rows(group_figures(shipped, held.rows, lambda r: f"{r.kind}, {r.engine}"))
    out += ["", "### Per source", ""]
    out += _figure_rows(group_figures(shipped, held.rows, lambda r: f"{r.kind}, {held.sources[r.id]}"))
    out += [
        "",
        "### Training throughput by scale, against the flat 40%-MFU rule",
        "",
        f"The rule: every run at {MFU_RULE:.0%} of its GPUs' dense BF16 peak, 6 FLOPs per parameter and token "
        "(`mfu_rule`). *Closer*: the out-of-source prediction's ratio to the measurement is smaller than the rule's.",
        "",
    ]
    training_rows = [r for r in shipped if r.kind == "training throughput"]
    out += _figure_rows(
        group_figures(training_rows, held.rows, lambda r: "all", rule)
        + group_figures(training_rows, held.rows, lambda r: _band(r.gpus), rule),
        rule=True,
    )
    out += [
        "",
        "### Does each fitted factor earn its place out of source?",
        "",
        "Each factor's rows (unflagged rows it moves), out of source, with the factor fitted (the figures above) and "
        "with it left at its unfitted value (the roofline 1.0 for an efficiency or share, no fixed step or host time, "
        "no training share of its own) while every other factor is refit without it, each source still left out, "
        "with the same search as the figures (2 sweeps, 7 golden-section steps). *Helps*: a lower median and a worst "
        "no more than 1% higher. A factor whose rows all come from one source cannot be judged so: that source left "
        "out, the factor is unfitted in both arms. From `python bench/accuracy.py --check-factors` "
        "(`bench/data/factor-check.json`).",
        "",
        "| factor | values | cases | sources | fitted: median | fitted: worst | unfitted: median | unfitted: worst | "
        "helps out of source |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in checks:
        verdict = ("yes" if c.helps else "**no**") if c.judged else "cannot tell (one source)"
        out.append(
            f"| `{c.factor}` | {', '.join(c.knobs)} | {c.cases} | {c.sources} | {c.fitted_median:.1%} | "
            f"{c.fitted_worst:.2f}x | {c.unfitted_median:.1%} | {c.unfitted_worst:.2f}x | {verdict} |"
        )
    idle = [c.factor for c in checks if c.judged and not c.helps]
    alone = [c.factor for c in checks if not c.judged]
    if checks:
        out += ["", "Factors that do not help out of source: " + (", ".join(f"`{f}`" for f in idle) or "none") + "."]
        if alone:
            out += ["", "Factors one source alone moves: " + ", ".join(f"`{f}`" for f in alone) + "."]
    else:
        out += ["", "Not run yet: `python bench/accuracy.py --check-factors` writes `bench/data/factor-check.json`."]
    out += ["", "### Factors fitted without each source", ""]
    out += ["| source left out | factors fitted on the others |", "|---|---|"]
    for source, values in sorted(held.factors.items()):
        out.append(f"| {source} | " + ", ".join(f"{k} {v:.4g}" for k, v in values.items()) + " |")
    return out


def out_of_source(
    measurements: list[Measurement], settings: dict[str, Setting], rows: list[Row], *, check: bool = True,
    frameworks: Iterable[str] = FRAMEWORK_RATE_FITTED,
) -> tuple[OutOfSource, dict[str, float], list[FactorCheck]]:  # fmt: skip
    """The leave-one-source-out rows, the 40%-MFU rule's training figures and (``check``) the per-factor check;
    ``frameworks``: the training frameworks whose achieved rate is fitted (:data:`FRAMEWORK_RATE_FITTED`)."""
    catalog = load_catalog()
    data = FitData(catalog, measurements, settings)
    fs = FactorSet.shipped()
    knobs = fitted_knobs(rows, frameworks)
    held = leave_one_source_out(data, rows, knobs, fs, in_sample=False)
    by_id = {m.id: m for m in measurements}
    rule = {r.id: mfu_rule(by_id[r.id], settings[r.id], catalog) for r in rows if r.kind == "training throughput"}
    checks = check_factors(data, rows, knobs, fs, held) if check else read_checks()
    return held, rule, checks


CHECK_FILE = DATA / "factor-check.json"  # written by --check-factors (minutes), read by --markdown


def framework_rate_section(
    measurements: list[Measurement], settings: dict[str, Setting], rows: list[Row], rule: dict[str, float]
) -> list[str]:
    """Per training framework with unflagged runs besides the reference: the training rows out of source with the
    shipped factors and with that framework's achieved rate fitted too (``--framework-rate``), all and per scale
    band. A rate ships in catalog/frameworks.yaml only where it helps (:data:`FRAMEWORK_RATE_FITTED`)."""
    data = FitData(load_catalog(), measurements, settings)
    fs = FactorSet.shipped()
    training_rows = [r for r in rows if r.kind == "training throughput"]
    only = {r.id for r in training_rows}
    host_of = {r.gpu: data.catalog.gpu(r.gpu).host_cpu for r in rows}

    def held(frameworks: tuple[str, ...]) -> list[Row]:
        knobs = [k for k in fitted_knobs(rows, frameworks) if knob_rows(k, rows, fs, host_of) & only]
        return leave_one_source_out(data, rows, knobs, fs, only=only, in_sample=False).rows

    def cells(out: list[Row]) -> list[str]:
        figures = group_figures(training_rows, out, lambda r: "all", rule)
        figures += group_figures(training_rows, out, lambda r: _band(r.gpus), rule)
        return [f"{f.out_median:.1%} / {f.out_worst:.2f}x, {f.closer_than_rule} of {f.cases}" for f in figures]

    bands = ["all"] + [label for label, _, _ in BANDS]
    fitted = tuple(FRAMEWORK_RATE_FITTED)
    out = [
        "",
        "### Does a training framework earn an achieved rate of its own?",
        "",
        "`training_mfu` is fitted with Megatron-LM's rate as the reference (catalog/frameworks.yaml `achieved_rate` "
        "1.0). For each other framework with unflagged training runs, the training rows out of source (median / "
        "worst, runs closer than the 40%-MFU rule) with the shipped factors and with that framework's achieved rate "
        "fitted beside them (`python bench/accuracy.py --loso --framework-rate FRAMEWORK`). A rate ships only where it "
        f"helps; shipped: {', '.join(fitted) or 'none'}.",
        "",
        "| factors | " + " | ".join(bands) + " |",
        "|---|" + "---:|" * len(bands),
        "| shipped | " + " | ".join(cells(held(fitted))) + " |",
    ]
    clean = {r.engine for r in training_rows if not r.flagged} - {REFERENCE_FRAMEWORK, *fitted}
    for framework in sorted(clean):
        out.append(f"| + `{framework}` rate | " + " | ".join(cells(held((*fitted, framework)))) + " |")
    return out


def read_checks(path: Path = CHECK_FILE) -> list[FactorCheck]:
    """The last --check-factors run (none: an empty list)."""
    if not path.exists():
        return []
    return [FactorCheck.model_validate(c) for c in json.loads(path.read_text(encoding="utf-8"))["checks"]]


def write_checks(checks: list[FactorCheck], as_of: str, path: Path = CHECK_FILE) -> None:
    body = {
        "as_of": as_of,
        "command": "python bench/accuracy.py --check-factors",
        "checks": [c.model_dump() for c in checks],
    }
    path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------------
# Summary
# ------------------------------------------------------------------------------------------------


class KindSummary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind | View
    cases: int
    flagged: int
    median_abs_error: float = Field(description="all cases, fraction")
    worst_ratio: float = Field(description="all cases, max(p/m, m/p)")
    worst_id: str
    median_abs_error_unflagged: float
    worst_ratio_unflagged: float
    worst_id_unflagged: str
    target_median: float

    @property
    def meets_target(self) -> bool:
        return self.median_abs_error_unflagged <= self.target_median and self.worst_ratio_unflagged <= 1.5


def _median_worst(rows: list[Row]) -> tuple[float, float, str]:
    if not rows:
        return 0.0, 1.0, "-"
    worst = max(rows, key=lambda r: r.ratio)
    return statistics.median(abs(r.error) for r in rows), worst.ratio, worst.id


def summarise(rows: list[Row]) -> list[KindSummary]:
    out: list[KindSummary] = []
    for kind in KINDS:
        mine = [r for r in rows if r.kind == kind]
        if not mine:
            continue
        clean = [r for r in mine if not r.flagged]
        med, worst, worst_id = _median_worst(mine)
        med_c, worst_c, worst_id_c = _median_worst(clean)
        summary = KindSummary(
            kind=kind, cases=len(mine), flagged=len(mine) - len(clean), median_abs_error=med,
            worst_ratio=worst, worst_id=worst_id, median_abs_error_unflagged=med_c,
            worst_ratio_unflagged=worst_c, worst_id_unflagged=worst_id_c, target_median=TARGETS[kind],
        )  # fmt: skip
        out.append(summary)
    return out


def view_rows(rows: list[Row], view: View) -> list[Row]:
    """The rows of one view: dense models' serving throughput, or every serving row of an MoE model."""
    if view == "dense serving throughput":
        return [r for r in rows if r.kind == "serving throughput" and not r.moe]
    return [r for r in rows if r.kind in ("serving throughput", "latency") and r.moe]


def summarise_views(rows: list[Row]) -> list[KindSummary]:
    """Serving split into dense and MoE (each also counted in its kind's line), against the serving targets."""
    out: list[KindSummary] = []
    for view in VIEWS:
        mine = view_rows(rows, view)
        if not mine:
            continue
        clean = [r for r in mine if not r.flagged]
        med, worst, worst_id = _median_worst(mine)
        med_c, worst_c, worst_id_c = _median_worst(clean)
        summary = KindSummary(
            kind=view, cases=len(mine), flagged=len(mine) - len(clean), median_abs_error=med, worst_ratio=worst,
            worst_id=worst_id, median_abs_error_unflagged=med_c, worst_ratio_unflagged=worst_c,
            worst_id_unflagged=worst_id_c, target_median=VIEW_TARGET,
        )  # fmt: skip
        out.append(summary)
    return out


BANDS: tuple[tuple[str, int, int], ...] = (("<=64 GPUs", 1, 64), ("65-1,024", 65, 1024), (">1,024", 1025, 10**9))


class BandSummary(BaseModel):
    """Training throughput in one scale band: the unflagged rows' error, and the points not expressible yet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    band: str
    cases: int = Field(description="unflagged training-throughput rows predicted")
    flagged: int
    median_abs_error: float
    worst_ratio: float
    worst_id: str
    not_expressible: int = Field(description="measurements kept whose layout the estimator cannot express yet")


def band_summary(rows: list[Row], measurements: list[Measurement], settings: dict[str, Setting]) -> list[BandSummary]:
    """Training throughput per scale band (<=64 GPUs, 65-1,024, >1,024), unflagged rows."""
    out: list[BandSummary] = []
    for label, lo, hi in BANDS:
        mine = [r for r in rows if r.kind == "training throughput" and lo <= r.gpus <= hi]
        clean = [r for r in mine if not r.flagged]
        med, worst, worst_id = _median_worst(clean)
        waiting = sum(
            1
            for m in measurements
            if settings[m.id].not_expressible and settings[m.id].scenario == "training" and lo <= m.gpu_count <= hi
        )
        band = BandSummary(
            band=label, cases=len(clean), flagged=len(mine) - len(clean), median_abs_error=med,
            worst_ratio=worst, worst_id=worst_id, not_expressible=waiting,
        )  # fmt: skip
        out.append(band)
    return out


def band_table(bands: list[BandSummary]) -> str:
    lines = [
        f"{'training by scale':<20} {'cases':>5} {'flag':>4} {'median*':>8} {'worst*':>7} {'not yet':>7}  worst case*"
    ]
    for b in bands:
        lines.append(
            f"{b.band:<20} {b.cases:>5} {b.flagged:>4} {b.median_abs_error:>8.1%} {b.worst_ratio:>6.2f}x "
            f"{b.not_expressible:>7}  {b.worst_id}"
        )
    lines.append(
        "not yet: measurements whose layout (context parallel, virtual pipeline stages) is not expressible yet"
    )
    return "\n".join(lines)


ERROR_QUANTILES = (0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95)


ERRORS_HOW = (
    "bench/accuracy.py --write-errors: bench/data/measurements.yaml and measurements-added.yaml, each row predicted "
    "out of source (leave one source out: the fitted factors refit on every other source, docs/accuracy.md 'Out of "
    "source'), unflagged rows; serving throughput of dense models only"
)


def error_table(rows: list[Row], as_of: str, how: str = ERRORS_HOW) -> dict[str, Any]:
    """Per kind, the distribution of ln(predicted / measured) over the unflagged rows (the planner's model error).

    ``bias`` is the mean and ``spread`` the sample standard deviation (the normal fit
    :mod:`clusterplan.evaluation.uncertainty` uses); ``quantiles`` are empirical (linear interpolation between rows).
    """
    kinds: dict[str, Any] = {}
    for kind in KINDS:
        # Serving throughput: dense models only; the MoE rows are far off yet (docs/accuracy.md, MoE section) and
        # would widen every serving plan's interval. They enter once MoE serving meets its targets.
        clean = [r for r in rows if r.kind == kind and not r.flagged and not (kind == "serving throughput" and r.moe)]
        logs = [math.log(r.predicted / r.measured) for r in clean]
        if len(logs) < 2:
            continue
        cuts = statistics.quantiles(logs, n=100, method="inclusive")  # cuts[k - 1]: the k-th percentile
        kinds[kind.replace(" ", "_")] = {
            "cases": len(logs),
            "bias": round(statistics.mean(logs), 4),
            "spread": round(statistics.stdev(logs), 4),
            "median_abs_error": round(statistics.median(abs(r.error) for r in clean), 4),
            "quantiles": {f"p{round(q * 100):02d}": round(cuts[round(q * 100) - 1], 4) for q in ERROR_QUANTILES},
            "rows": [r.id for r in clean],
        }
    return {
        "as_of": as_of,
        "source": how,
        "statistic": "ln(predicted / measured)",
        "kinds": kinds,
    }


ERRORS_HEADER = (
    "# The performance model's own measured error, per kind of figure: the distribution of ln(predicted / measured)\n"
    "# over the unflagged rows of docs/accuracy.md, each predicted out of source: with the fitted factors refit on\n"
    "# every other source (leave one source out), so the interval is the error on a publication the fit never saw.\n"
    "# Written by `python bench/accuracy.py --write-errors`; do not edit by hand. Read by\n"
    "# clusterplan.evaluation.uncertainty (docs/model.md, 'Uncertainty').\n"
)


def write_errors(path: Path, rows: list[Row], as_of: str) -> None:
    body = yaml.safe_dump({"model_error": error_table(rows, as_of)}, sort_keys=False, width=120)
    path.write_text(ERRORS_HEADER + body, encoding="utf-8")


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e3:,.2f} ms"
    if unit == "GiB":
        return f"{value:,.1f} GiB"
    return f"{value:,.0f} tok/s" if value >= 100 else f"{value:,.1f} tok/s"


def text_table(rows: list[Row], summary: list[KindSummary]) -> str:
    lines = [f"{'id':<48} {'engine':<13} {'predicted':>14} {'measured':>14} {'error':>8}  detail"]
    for kind in KINDS:
        mine = [r for r in rows if r.kind == kind]
        if not mine:
            continue
        lines.append(f"-- {kind}")
        for r in mine:
            flag = " *" if r.flagged else ""
            lines.append(
                f"{r.id:<48} {r.engine:<13} {_fmt(r.predicted, r.unit):>14} {_fmt(r.measured, r.unit):>14} "
                f"{r.error:>+8.1%}{flag}  {r.detail}"
            )
    lines.append("")
    lines.append(
        f"{'kind':<20} {'cases':>5} {'flag':>4} {'median':>8} {'worst':>7}  {'median*':>8} {'worst*':>7}  worst case*"
    )
    for k in summary + summarise_views(rows):
        lines.append(
            f"{k.kind:<20} {k.cases:>5} {k.flagged:>4} {k.median_abs_error:>8.1%} {k.worst_ratio:>6.2f}x  "
            f"{k.median_abs_error_unflagged:>8.1%} {k.worst_ratio_unflagged:>6.2f}x  {k.worst_id_unflagged}"
        )
    lines.append("* flagged: depends on something the model does not capture; starred columns leave them out")
    return "\n".join(lines)


def _md_value(value: float, unit: str) -> str:
    return _fmt(value, unit).replace(" tok/s", "").replace(" ms", "").replace(" GiB", "")


UNIT_HEADER = {"s": "ms", "tokens/s": "tokens/s", "GiB": "GiB"}


def _family(gpu: str) -> str:
    """Hopper or Blackwell, for the MoE section's breakdown (the catalog's architecture of the GPU)."""
    return load_catalog([]).gpu(gpu).architecture


def _median_errors(rows: list[Row]) -> str:
    """A group's median signed and median absolute error, as two table cells."""
    return f"{statistics.median(r.error for r in rows):+.1%} | {statistics.median(abs(r.error) for r in rows):.1%}"


def dense_by_architecture(rows: list[Row]) -> list[str]:
    """Dense serving throughput per GPU architecture and weight precision (the error the class factors leave)."""
    dense = view_rows(rows, "dense serving throughput")
    out = ["", "## Dense serving by architecture", ""]
    out.append(
        "Dense serving throughput, unflagged, per GPU architecture and the precision its matmuls run at "
        "(`architecture_compute_fraction`, `fp8_matmul_fraction`, `fp4_matmul_fraction`; `docs/model.md` section 9)."
    )
    out += [
        "",
        "| architecture | GPUs | precision | cases | median signed error | median abs error | worst |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in dense:
        if not r.flagged:
            groups.setdefault((r.architecture, r.precision), []).append(r)
    for (architecture, precision), mine in sorted(groups.items()):
        gpus = ", ".join(sorted({r.gpu for r in mine}))
        worst = max(mine, key=lambda r: r.ratio)
        out.append(
            f"| {architecture} | {gpus} | {precision} | {len(mine)} | {_median_errors(mine)} | "
            f"{worst.ratio:.2f}x (`{worst.id}`) |"
        )
    return out


def moe_section(rows: list[Row]) -> list[str]:
    """Mixture-of-experts serving on its own: its summary, its error per model and GPU, and its rows."""
    moe_rows = view_rows(rows, "MoE serving")
    out = ["", "## Mixture-of-experts serving", ""]
    a = Assumptions(engine="tensorrt-llm")
    shares = (
        f"Blackwell NVFP4 {a.moe_gemm_fraction('Blackwell', 'fp4'):.2f}, FP8 {a.moe_gemm_fraction('Blackwell', 'fp8'):.2f}, "
        f"Hopper MXFP4 {a.moe_gemm_fraction('Hopper', 'fp4'):.2f} of the rows Triton's kernel pads, its weights at "
        f"{a.moe_weight_fraction('Hopper', 'fp4'):.2f}"
    )
    out.append(
        "MoE layers run at the dense factors times `moe_gemm_efficiency` (grouped GEMM; per engine, "
        "`catalog/engines.yaml`) times the architecture's share at the weights' precision "
        f"(`moe_gemm_architecture_fraction`: {shares}), plus TensorRT-LLM's time per routed token and layer and "
        "fixed time per layer (`moe_routed_token_s`), all fitted together by `bench/moe_kernel_fit.py` on "
        "aiconfigurator-core 0.12.0's measured H100/H200/B200/GB200 MoE kernel tables, with the "
        "expert-load imbalance of `physics/moe.py` under expert parallelism and the dispatch/combine all-to-alls "
        "at `moe_all_to_all_efficiency` of the link. Under attention DP the dense MLPs and shared experts run "
        "data-parallel too (whole on every GPU), as TensorRT-LLM does; without balanced expert placement (EPLB) "
        "the routed load is unbalanced: TensorRT-LLM's expert GEMMs take the kernel tables' power-law over balanced "
        "latency at the tokens the layer receives and its EP degree (`unbalanced` in `moe_routed_token_s`, "
        "`moe.routing_ratio`; Hopper FP8 at EP 8 and 1,024 tokens 1.23, gpt-oss's MXFP4 kernel at EP 1 1.52), other "
        "engines `moe.routing_skew` across EP ranks. TensorRT-LLM moves an attention-DP layer's tokens by allgather and reduce-scatter (every "
        "rank gathers every token; all-to-all only on a rack-scale NVLink domain), its PyTorch executor spends "
        "`host_time_per_sequence_layer_s` of CPU per running sequence and decoder layer per step (x86 0.65 us, Grace "
        "0.75 us), overlapped "
        "with the GPU's step, its KV pool reserves the full context for sliding-window and chunked layers, and "
        "attention runs at the KV cache's precision, never FP4 (MLA's kernels at their own: BF16 on Hopper, "
        "`mla_attention_precision`); gpt-oss's MXFP4 weights meet MXFP8 activations on Blackwell and multiply at the "
        "FP8 rate (`fp4_activations`). Each run's batch cap is "
        "trtllm-bench's own (`trtllm_bench_max_batch`, per rank under attention DP; an NVFP4 checkpoint sized by its "
        "packed safetensors element count, as trtllm-bench did before TensorRT-LLM PR #13498), and a dataset of "
        "uniform requests runs in waves of that batch, the last holding the remainder (`trtllm_bench_waves_s`). A "
        "prompt's tokens ride the running step's collectives (bytes, not latency). DeepSeek-R1's native FP8 "
        "checkpoint is block-scaled: on Hopper its expert GEMMs compute at 0.60 of per-tensor FP8's rate "
        "(`moe_block_scale_compute_fraction`) and MLA's absorbed projections at 0.075 of the FP8 rate "
        "(`mla_block_scale_bmm_fraction`), from aiconfigurator-core 0.12.0's H200 tables. The later "
        "perf-overview page "
        "states each layout (DEPn: attention DP, experts over n GPUs); the v1.0 page states none, read the same "
        "way, and neither states the KV-cache precision: `bench/data/settings.yaml` says which readings and why. "
        "Blackwell rows were flagged until the same pages' dense B200/GB200 rows were calibrated (the Blackwell "
        "compute share and the FP4 matmul share, from aiconfigurator-core 0.12.0's GEMM tables); they are scored "
        "with the others now. Targets as for serving: "
        "median <= 15%, worst <= 1.5x. These rows are also counted in the serving throughput line of the summary; "
        "`catalog/model_error.yaml` takes serving throughput from dense models only until this section meets "
        "its targets."
    )
    out.append("")
    if not moe_rows:
        out.append("No MoE measurement is in the set yet.")
        return out
    (summary,) = [v for v in summarise_views(rows) if v.kind == "MoE serving"]
    met = "met" if summary.meets_target else "**not met**"
    out.append(
        f"{summary.cases} MoE case(s), {summary.flagged} flagged; unflagged median "
        f"{summary.median_abs_error_unflagged:.1%}, worst {summary.worst_ratio_unflagged:.2f}x "
        f"(`{summary.worst_id_unflagged}`): {met}."
    )
    out += [
        "",
        "| model | GPU | cases | median signed error | median abs error | worst |",
        "|---|---|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in moe_rows:
        groups.setdefault((r.model, r.gpu), []).append(r)
    for (model, gpu), mine in sorted(groups.items()):
        out.append(
            f"| {model} | {gpu} ({_family(gpu)}) | {len(mine)} | {_median_errors(mine)} | "
            f"{max(r.ratio for r in mine):.2f}x |"
        )
    out += [
        "",
        "| measurement | model | GPU | predicted | measured | unit | error | detail |",
        "|---|---|---|---:|---:|---|---:|---|",
    ]
    for r in moe_rows:
        dagger = " †" if r.flagged else ""
        out.append(
            f"| `{r.id}`{dagger} | {r.model} | {r.gpu} | {_md_value(r.predicted, r.unit)} | "
            f"{_md_value(r.measured, r.unit)} | {UNIT_HEADER[r.unit]} | {r.error:+.1%} | {r.detail} |"
        )
    return out


def markdown(
    rows: list[Row], summary: list[KindSummary], measurements: list[Measurement], bands: list[BandSummary] | None = None,
    lead: list[str] | None = None,
) -> str:  # fmt: skip
    """The report docs/accuracy.md holds: summary, training by scale band, one table per kind, flagged cases,
    sources."""
    by_id = {m.id: m for m in measurements}
    out = [
        "# Accuracy of the performance model against published measurements",
        "",
        "Generated by `python bench/accuracy.py --markdown docs/accuracy.md`; do not edit by hand. Each row is one "
        "published measurement (`bench/data/measurements.yaml`, vendored from `shared/calibration/`, and "
        "`bench/data/measurements-added.yaml`), predicted from the catalog and `clusterplan.physics` with the "
        "measurement's own settings (`bench/data/settings.yaml`) and the shipped default factors of its GPU class "
        "and serving engine (`docs/model.md` section 9). Error = predicted / measured - 1.",
        "",
        "Flagged rows (†) depend on something the model does not capture; they stay in the tables and in the "
        "*all* columns. The *unflagged* columns are the ones the targets and `tests/test_accuracy.py` hold. "
        "The last two summary lines split serving by architecture (dense serving throughput; every serving row "
        "of a mixture-of-experts model); their rows are counted in the lines above too.",
        "",
        *([*lead, ""] if lead else []),
        "## In sample: the shipped factors on every row",
        "",
        "The factors were fitted on these same rows, so these figures overstate how well the model predicts a "
        "publication it has not seen; the out-of-source figures above are the ones to quote.",
        "",
        "| kind | cases | flagged | median abs error, unflagged | worst, unflagged | median, all | worst, all "
        "| target (median / worst) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for k in summary + summarise_views(rows):
        met = "met" if k.meets_target else "**not met**"
        out.append(
            f"| {k.kind} | {k.cases} | {k.flagged} | {k.median_abs_error_unflagged:.1%} | "
            f"{k.worst_ratio_unflagged:.2f}x (`{k.worst_id_unflagged}`) | {k.median_abs_error:.1%} | "
            f"{k.worst_ratio:.2f}x | {k.target_median:.0%} / {WORST_RATIO_TARGET}x: {met} |"
        )
    if bands:
        out += [
            "",
            "## Training throughput by scale",
            "",
            "| GPUs | cases, unflagged | flagged | median abs error, unflagged | worst, unflagged | not expressible yet |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for b in bands:
            worst = f"{b.worst_ratio:.2f}x (`{b.worst_id}`)" if b.cases else "-"
            out.append(
                f"| {b.band} | {b.cases} | {b.flagged} | {b.median_abs_error:.1%} | {worst} | {b.not_expressible} |"
            )
    for kind in KINDS:
        mine = [r for r in rows if r.kind == kind]
        if not mine:
            continue
        out += ["", f"## {kind.capitalize()}", ""]
        out.append("| measurement | engine | GPU | model | scenario | predicted | measured | unit | error | detail |")
        out.append("|---|---|---|---|---|---:|---:|---|---:|---|")
        for r in mine:
            dagger = " †" if r.flagged else ""
            out.append(
                f"| `{r.id}`{dagger} | {r.engine} | {r.gpu} | {r.model} | {r.scenario} | "
                f"{_md_value(r.predicted, r.unit)} | {_md_value(r.measured, r.unit)} | {UNIT_HEADER[r.unit]} | "
                f"{r.error:+.1%} | {r.detail} |"
            )
    out += dense_by_architecture(rows)
    out += moe_section(rows)
    out += ["", "## Flagged cases", ""]
    for r in rows:
        if r.flagged:
            out.append(f"- `{r.id}` ({r.error:+.1%}): " + "; ".join(r.flags))
    out += ["", "## Sources", ""]
    sources: dict[str, list[str]] = {}
    for r in rows:
        sources.setdefault(by_id[r.id].source.split(" ")[0], []).append(r.id)
    for url, ids in sources.items():
        out.append(f"- {url}: {len(ids)} measurement{'s' if len(ids) > 1 else ''}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="rows and summary as JSON")
    parser.add_argument("--markdown", type=Path, help="write the Markdown report to this file")
    parser.add_argument("--fit", action="store_true", help="refit the named factors and print them")
    parser.add_argument(
        "--write-errors",
        nargs="?",
        const=ERRORS_FILE,
        type=Path,
        help=f"write the per-kind error distribution the planner reads (default {ERRORS_FILE.relative_to(ROOT)})",
    )
    parser.add_argument("--as-of", default=None, help="date written into --write-errors (default: today, UTC)")
    parser.add_argument(
        "--check-factors",
        action="store_true",
        help=f"refit without each factor, out of source, and write {CHECK_FILE.relative_to(ROOT)} (--markdown reads it)",
    )
    parser.add_argument(
        "--loso", action="store_true", help="print the leave-one-source-out figures (--markdown and --write-errors do)"
    )
    parser.add_argument(
        "--framework-rate",
        action="append",
        default=None,
        metavar="FRAMEWORK",
        help="also fit this training framework's achieved rate (repeatable; to test one before it ships in "
        "catalog/frameworks.yaml)",
    )
    args = parser.parse_args(argv)
    warning = shared_copy_warning()
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if args.fit:
        before = fit_loss(evaluate())
        fitted, knobs = fit()
        rows = evaluate(factors=fitted)
        print(f"fit: mean |log error| {before:.4f} -> {fit_loss(rows):.4f} over unflagged non-memory rows")
        for knob in knobs:
            print(f"  {knob.label:<55} {knob.get(fitted):.4g}")
        print()
        print(text_table(rows, summarise(rows)))
        return 0
    measurements = load_measurements()
    settings = load_settings()
    rows = evaluate(measurements=measurements, settings=settings)
    summary = summarise(rows)
    bands = band_summary(rows, measurements, settings)
    lead: list[str] = []
    as_of = args.as_of or datetime.datetime.now(datetime.UTC).date().isoformat()
    if args.write_errors or args.markdown or args.loso or args.check_factors:
        frameworks = tuple(args.framework_rate or FRAMEWORK_RATE_FITTED)
        held, rule, checks = out_of_source(
            measurements, settings, rows, check=args.check_factors, frameworks=frameworks
        )
        if args.check_factors:
            write_checks(checks, as_of)
            print(f"wrote {CHECK_FILE}", file=sys.stderr)
        lead = out_of_source_section(rows, held, rule, checks)
        lead += framework_rate_section(measurements, settings, rows, rule)
        if args.loso:
            print("\n".join(lead))
    if args.write_errors:
        write_errors(args.write_errors, held.rows, as_of)
        print(f"wrote {args.write_errors}", file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(markdown(rows, summary, measurements, bands, lead), encoding="utf-8")
        print(f"wrote {args.markdown}")
    if args.loso:
        return 0
    if args.json:
        print(
            json.dumps(
                {
                    "rows": [{**r.model_dump(), "error": r.error, "ratio": r.ratio} for r in rows],
                    "summary": [k.model_dump() for k in summary],
                    "training_by_scale": [b.model_dump() for b in bands],
                },
                indent=2,
            )
        )
    else:
        print(text_table(rows, summary))
        print()
        print(band_table(bands))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
