"""Named efficiency factors and defaults, per hardware class (and engine where it matters).

Every factor has a default per GPU class with the source it comes from; a requirement's
``assumptions:`` block overrides any of them. No factor is keyed to a model-and-GPU pair.
The defaults the planner used are listed in every explanation.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationInfo,
    field_validator,
    model_validator,
)

from clusterplan.catalog.schema import GpuClass


class PerClass(BaseModel):
    """A factor's value for each GPU class."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    datacenter: float = Field(gt=0, le=1.5)
    workstation: float = Field(gt=0, le=1.5)
    consumer: float = Field(gt=0, le=1.5)

    def of(self, gpu_class: GpuClass) -> float:
        value: float = getattr(self, gpu_class)
        return value


class PerClassOverride(BaseModel):
    """Override for some classes; missing classes keep their default."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    datacenter: float | None = Field(None, gt=0, le=1.5)
    workstation: float | None = Field(None, gt=0, le=1.5)
    consumer: float | None = Field(None, gt=0, le=1.5)


def _pc(dc: float, ws: float, co: float) -> PerClass:
    return PerClass(datacenter=dc, workstation=ws, consumer=co)


Engine = Literal["vllm", "tensorrt-llm", "exllamav2", "llama.cpp"]
DEFAULT_ENGINE: Engine = "vllm"
ENGINE_FACTORS = ("memory_bandwidth_efficiency", "compute_efficiency", "decode_step_overhead_s", "moe_gemm_efficiency")

# MoE grouped-GEMM efficiency: the roofline of an MoE layer's expert GEMMs (each touched expert's weights read once,
# 2·k·P_e FLOPs per token, at the dense factors) over the measured kernel time, median over aiconfigurator-core
# 0.12.0's H200 moe_perf tables (systems/data/h200_sxm/moe/<engine>/<version>/moe_perf.parquet, balanced routing,
# 8-1024 tokens, every shape): vLLM 0.24.0 Triton fused MoE bf16 0.61 (fp8 block-scaled Triton 0.66); TensorRT-LLM
# 1.3.0rc23 bf16 0.62, fp8 0.71. Read 2026-11-24. No workstation or consumer table: the datacenter value.
_MOE_GEMM = {"vllm": 0.62, "tensorrt-llm": 0.66}


class EngineProfile(BaseModel):
    """The serving-kernel factors of one engine family, per GPU class, with the data they were fitted to."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    description: str
    memory_bandwidth_efficiency: PerClass
    compute_efficiency: PerClass
    decode_step_overhead_s: PerClass
    moe_gemm_efficiency: PerClass = Field(
        default_factory=lambda: _pc(_MOE_GEMM["vllm"], _MOE_GEMM["vllm"], _MOE_GEMM["vllm"]),
        description="MoE expert GEMMs' share of the dense roofline (grouped GEMM at few tokens per expert)",
    )
    fitted_to: str = Field(description="the measurements the values come from (docs/model.md section 9)")


# Fitted by ``python bench/accuracy.py --fit`` against bench/data/measurements*.yaml (docs/model.md section 9 and
# docs/accuracy.md). A class without measurements for an engine keeps a value derived as its comment says.
# TensorRT-LLM datacenter fit (decode a roofline per kernel kind, prefill weight stream plus FLOPs, NCCL all-reduce
# latencies; docs/model.md section 3): memory bandwidth 0.92 (the search's upper bound), compute 0.720, step
# overhead 3.21 ms (refit 2026-11-23 without the NVIDIA NIM 1.8 rows, which are held out for scoring).
_TRT_DC = (0.92, 0.72, 0.00321)
# Classes without data scale the datacenter compute fit by the provisional class ratios (0.55/0.60, 0.50/0.60).
_CE_WS, _CE_CO = round(_TRT_DC[1] * 0.55 / 0.60, 2), round(_TRT_DC[1] * 0.50 / 0.60, 2)
# Single-stream consumer fits (ExLlamaV2 0.860, llama.cpp 0.861): a consumer card streams weights at ~0.86.
_MBW_CO = 0.86
_MBW_WS = 0.89  # no workstation data: between the datacenter (0.92) and consumer (0.86) fits

ENGINES: dict[str, EngineProfile] = {
    "vllm": EngineProfile(
        description="continuous batching with paged KV cache and chunked prefill (vLLM, SGLang, TGI); the "
        "production default",
        memory_bandwidth_efficiency=_pc(_TRT_DC[0], _MBW_WS, _MBW_CO),
        compute_efficiency=_pc(_TRT_DC[1], _CE_WS, _CE_CO),
        decode_step_overhead_s=_pc(_TRT_DC[2], _TRT_DC[2], _TRT_DC[2]),
        fitted_to="no vLLM measurement in the set survives (the one vLLM 0.5 row is flagged for CPU overhead); "
        "taken from the TensorRT-LLM fit, which vLLM 0.6 matches in throughput on H100 (vLLM blog 2024-09-05)",
    ),
    "tensorrt-llm": EngineProfile(
        description="NVIDIA TensorRT-LLM and FasterTransformer: fused kernels built per model and batch",
        memory_bandwidth_efficiency=_pc(_TRT_DC[0], _MBW_WS, _MBW_CO),
        compute_efficiency=_pc(_TRT_DC[1], _CE_WS, _CE_CO),
        decode_step_overhead_s=_pc(_TRT_DC[2], _TRT_DC[2], _TRT_DC[2]),
        moe_gemm_efficiency=_pc(_MOE_GEMM["tensorrt-llm"], _MOE_GEMM["tensorrt-llm"], _MOE_GEMM["tensorrt-llm"]),
        fitted_to="datacenter: 61 unflagged H100/H200/A100/L40S measurements, TensorRT-LLM 0.5 to 1.0 and "
        "FasterTransformer (static-batch and in-flight throughput, TTFT, decode steps); "
        "workstation and consumer: no data (see the module comment)",
    ),
    "exllamav2": EngineProfile(
        description="ExLlamaV2: single-stream quantised (GPTQ, EXL2) kernels for consumer GPUs",
        memory_bandwidth_efficiency=_pc(_TRT_DC[0], _MBW_WS, 0.86),
        compute_efficiency=_pc(_TRT_DC[1], _CE_WS, _CE_CO),
        decode_step_overhead_s=_pc(0.00075, 0.00075, 0.00075),
        fitted_to="consumer: 4 unflagged RTX 4090 / 3090 Ti single-stream measurements (ExLlamaV2 README); "
        "memory bandwidth 0.860, step overhead 0.75 ms; other classes: TensorRT-LLM's values, no data",
    ),
    "llama.cpp": EngineProfile(
        description="llama.cpp CUDA backend: GGUF weights, single stream",
        memory_bandwidth_efficiency=_pc(_TRT_DC[0], _MBW_WS, 0.86),
        compute_efficiency=_pc(_TRT_DC[1], _CE_WS, _CE_CO),
        decode_step_overhead_s=_pc(0.0019, 0.0019, 0.0019),
        fitted_to="consumer: 3 llama-bench tg128 measurements on RTX 4090 / 3090 Ti (F16, Q8_0, Q4_0); memory "
        "bandwidth 0.861, step overhead 1.9 ms; other classes: TensorRT-LLM's bandwidth, no data",
    ),
}


def _engine_default(name: str, engine: str) -> PerClass:
    profile = ENGINES.get(engine, ENGINES[DEFAULT_ENGINE])
    value: PerClass = getattr(profile, name)
    return value


class Assumptions(BaseModel):
    """Efficiency factors and defaults. Each field documents its unit and source.

    ``bench/accuracy.py`` fits the efficiency factors per GPU class and serving engine against the published
    measurements in ``bench/data/`` and ``docs/model.md`` (section 9) records each fitted value and its data.

    A per-class factor may be overridden in a requirement's ``assumptions:`` block by one number (all
    classes) or by a mapping of some classes (the others keep their default)::

        assumptions:
          memory_bandwidth_efficiency: {consumer: 0.6}
          compute_efficiency: 0.5
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    engine: Engine = Field(
        DEFAULT_ENGINE,
        description="serving engine whose kernel factors (memory_bandwidth_efficiency, compute_efficiency, "
        "decode_step_overhead_s) are the defaults: vllm (continuous batching, the production default), "
        "tensorrt-llm, exllamav2 or llama.cpp; factors given explicitly win",
    )
    memory_bandwidth_efficiency: PerClass = Field(
        default_factory=lambda: _engine_default("memory_bandwidth_efficiency", DEFAULT_ENGINE),
        description="achieved fraction of peak memory bandwidth while a serving step streams weights and KV cache "
        "(aiconfigurator mem-BW x0.8; kv-planner MBU 0.75)",
    )
    compute_efficiency: PerClass = Field(
        default_factory=lambda: _engine_default("compute_efficiency", DEFAULT_ENGINE),
        description="achieved fraction of dense tensor throughput in inference matmuls (a decode step's roofline; "
        "in prefill their time adds to the weight stream's, Calculon's no_overlap mode)",
    )
    training_mfu: PerClass = Field(
        default_factory=lambda: _pc(0.70, 0.62, 0.77),
        description="achieved fraction of dense peak on the FLOPs training executes (recompute included), before "
        "exposed communication. Fitted by bench/accuracy.py: datacenter 0.70 on 10 llm-foundry and torchtune "
        "A100/H100 runs (with the Hopper fraction), consumer 0.77 on one torchtune RTX 4090 QLoRA run at desktop "
        "clocks; workstation has no usable data: the datacenter fit x the provisional ratio 0.40/0.45",
    )
    link_efficiency: float = Field(
        0.70, gt=0, le=1, description="achieved fraction of link bandwidth (Calculon NVLink 0.65, IB 0.9)"
    )
    utilisation_ceiling: float = Field(
        0.80, gt=0, lt=1, description="highest utilisation a replica is planned at, queueing stays bounded below it"
    )
    sustained_clock_fraction: PerClass = Field(
        default_factory=lambda: _pc(1.0, 0.90, 0.80),
        description="thermal derate of tensor-core clocks in dense sustained deployments, applied to compute "
        "(seeds 002: consumer cards lose 15-25% in dense racks)",
    )
    memory_headroom_fraction: float = Field(
        0.10, ge=0, lt=0.5, description="fraction of GPU memory kept free for fragmentation (seeds: 10-15%)"
    )
    runtime_overhead_gib: float = Field(
        2.0,
        ge=0,
        description="CUDA context, NCCL buffers and framework "
        "per GPU, GiB (aiconfigurator 'other' 3.5 GiB; vidur/CUDA 650 MB)",
    )
    inter_node_bandwidth_gb_per_s: float = Field(
        50.0, gt=0, description="per-GPU inter-node network, GB/s (400 Gb/s InfiniBand/EFA per GPU)"
    )
    int4_group_size: int = Field(128, ge=8, description="weights per int4 quantisation group (GPTQ/AWQ)")
    decode_step_overhead_s: PerClass = Field(
        default_factory=lambda: _engine_default("decode_step_overhead_s", DEFAULT_ENGINE),
        description="fixed cost of one engine step (scheduling, sampling, kernel launches), seconds; per engine "
        "(ENGINES), fitted by bench/accuracy.py",
    )
    moe_gemm_efficiency: PerClass = Field(
        default_factory=lambda: _engine_default("moe_gemm_efficiency", DEFAULT_ENGINE),
        description="share of the dense roofline an MoE layer's expert GEMMs reach (grouped GEMM, few tokens per "
        "expert); per engine, from aiconfigurator-core 0.12.0's measured H200 MoE kernel tables (factors.py)",
    )
    moe_all_to_all_efficiency: float = Field(
        0.80,
        gt=0,
        le=1,
        description="achieved share of link bandwidth in MoE dispatch/combine all-to-alls (DeepEP V2 README, "
        "deepseek-ai/DeepEP@0297fc80: EP8 over B200 NVLink 726/740 GB/s of 900 GB/s per direction; "
        "EP 8x2 over CX7 RDMA 90/81 GB/s logical)",
    )
    moe_expert_load_skew: float = Field(
        1.0,
        ge=1,
        le=8,
        description="static max/mean load of EP ranks beyond routing noise (1: experts placed to balance load, "
        "as DeepSeek's EPLB does; physics/moe.py load_imbalance adds the balls-into-bins term)",
    )
    scale_up_latency_s: float = Field(
        8e-6,
        ge=0,
        description="start-up latency of a point-to-point send or a data-parallel collective over NVLink/Infinity "
        "Fabric, seconds (llm-analysis floors a TP all-reduce at 8 us); TP all-reduces use NCCL's protocol "
        "latencies (physics/comm.py NCCL_RING_PROTOCOLS)",
    )
    pcie_latency_s: float = Field(
        15e-6,
        ge=0,
        description="start-up latency of a point-to-point send or a data-parallel collective over PCIe, seconds "
        "(assumption between NVLink 8-10 us and network 20 us); TP all-reduces use NCCL's protocol latencies",
    )
    network_latency_s: float = Field(
        20e-6, ge=0, description="start-up latency of one collective across nodes, seconds (Calculon IB 20 us)"
    )
    dp_comm_overlap: float = Field(
        0.75,
        ge=0,
        le=1,
        description="fraction of data-parallel gradient reduction and ZeRO parameter gathers "
        "hidden behind backward compute (bucketed overlap, PyTorch DDP / Megatron --overlap-grad-reduce)",
    )
    tp_comm_overlap: float = Field(
        0.0,
        ge=0,
        le=1,
        description="fraction of tensor-parallel all-reduces hidden behind compute "
        "(0: Megatron default, no TP comm overlap)",
    )
    prefill_chunk_tokens: int = Field(
        8192,
        ge=1,
        description="tokens scheduled per engine step (vLLM max_num_batched_tokens); sizes the "
        "activation buffer of a serving replica",
    )
    service_time_scv: float = Field(
        1.0,
        ge=0,
        le=10,
        description="squared coefficient of variation of a request's service time in the "
        "queueing model (1: exponential-like output lengths; Allen-Cunneen)",
    )
    architecture_compute_fraction: dict[str, float] = Field(
        default_factory=lambda: {"Hopper": 0.84, "Blackwell": 0.84},
        description="share of the class compute factors (compute_efficiency, training_mfu) an architecture "
        "reaches, by catalog architecture name; unlisted architectures 1.0. Fitted by bench/accuracy.py: H100/H200 "
        "serving and training against the A100 ones (0.839); Blackwell (B200, B300, GB200, GB300) has its own entry, "
        "inherited from Hopper and provisional: no fair public Blackwell measurement is in bench/data",
    )
    fp8_matmul_fraction: float = Field(
        0.88,
        gt=0,
        le=1,
        description="achieved FP8 matmul rate as a share of the BF16 one, relative to their datasheet peaks "
        "(H100 SXM maximum achievable matmul FLOPS: FP8 70.9% of peak, BF16 80.3%; stas00/ml-engineering)",
    )
    gqa_shared_kv_reads: bool = Field(
        True,
        description="decode attention reads each KV head once for its group of query heads (vLLM, TensorRT-LLM "
        "XQA since 2024); False: once per query head, as TensorRT-LLM up to 0.6 did for GQA models",
    )
    flash_attention: bool = Field(
        True,
        description="attention scores are never materialised (FlashAttention); drops the 5as/h term of "
        "Korthikanti et al. activations even without recompute",
    )

    @field_validator(
        "memory_bandwidth_efficiency",
        "compute_efficiency",
        "training_mfu",
        "sustained_clock_fraction",
        "decode_step_overhead_s",
        "moe_gemm_efficiency",
        mode="before",
    )
    @classmethod
    def _partial_per_class(cls, value: Any, info: ValidationInfo) -> Any:
        """One number sets every class; a mapping of some classes keeps the defaults of the others."""
        if isinstance(value, bool):
            return value
        name = info.field_name or ""
        if name in ENGINE_FACTORS:
            default: Any = _engine_default(name, str(info.data.get("engine", DEFAULT_ENGINE)))
        else:
            factory = cls.model_fields[name].default_factory
            default = factory() if factory is not None else None  # type: ignore[call-arg]
        if isinstance(value, int | float):
            return {"datacenter": value, "workstation": value, "consumer": value}
        if isinstance(value, dict) and isinstance(default, PerClass):
            return {**default.model_dump(), **value}
        if isinstance(value, PerClassOverride) and isinstance(default, PerClass):
            return {**default.model_dump(), **value.model_dump(exclude_none=True)}
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _engine_defaults(cls, data: Any, handler: ModelWrapValidatorHandler[Assumptions]) -> Assumptions:
        """Factors not given default to the chosen engine's (they still count as not overridden)."""
        if not isinstance(data, dict) or data.get("engine", DEFAULT_ENGINE) == DEFAULT_ENGINE:
            return handler(data)
        profile = ENGINES.get(str(data["engine"]))
        if profile is None:
            return handler(data)  # the Literal rejects it with the allowed names
        filled = {name: getattr(profile, name) for name in ENGINE_FACTORS if name not in data}
        result = handler({**data, **filled})
        result.__pydantic_fields_set__.difference_update(filled)
        return result

    def used(self, gpu_class: GpuClass) -> dict[str, float | int | bool]:
        """The value of every numeric factor for one GPU class (what an explanation lists).

        ``engine`` is not a number: its effect is the three engine factors listed here, and a requirement
        that chose an engine shows it in :meth:`overridden`.
        """
        out: dict[str, float | int | bool] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, str | dict):
                continue
            out[name] = value.of(gpu_class) if isinstance(value, PerClass) else value
        return out

    def compute_fraction(self, architecture: str, precision: str) -> float:
        """Multiplier on a class's compute factor for one architecture (name, any case) and matmul precision."""
        by_name = {name.casefold(): value for name, value in self.architecture_compute_fraction.items()}
        fraction = by_name.get(architecture.casefold(), 1.0)
        # FP4 matmuls get FP8's achieved share of peak too: no fair public FP4 GEMM sweep was found (provisional).
        return fraction * (self.fp8_matmul_fraction if precision in ("fp8", "fp4") else 1.0)

    def overridden(self) -> list[str]:
        """Names of the factors a requirement set explicitly."""
        return sorted(self.model_fields_set)
