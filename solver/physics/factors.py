"""Named efficiency factors and defaults, per hardware class (and engine where it matters).

Every factor has a default per GPU class with the source it comes from; a requirement's
``assumptions:`` block overrides any of them. No factor is keyed to a model-and-GPU pair.
The defaults the planner used are listed in every explanation.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from clusterplan.catalog.schema import (
    ClassFactors,
    EngineSpec,
    GpuClass,
    GpuSpec,
    HostCpu,
    MemoryPolicy,
    ModelArchitecture,
    MoeTokenCost,
    SpeculativeMethod,
    UnbalancedRouting,
)
from clusterplan.physics import params


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


DEFAULT_ENGINE = "vllm"
ENGINE_FACTORS = ("memory_bandwidth_efficiency", "compute_efficiency", "decode_step_overhead_s", "moe_gemm_efficiency")
# Fused attention on an architecture attention_kernel_efficiency does not list (provisional: below FA2 on A100).
ATTENTION_KERNEL_DEFAULT = 0.45
SPECULATIVE_COST_FRACTION = {"draft": 0.1, "eagle": 0.05, "mtp": 0.03}  # see SpeculativeDecoding.cost_fraction


def engine_profiles() -> dict[str, EngineSpec]:
    """The shipped serving engines (catalog/engines.yaml): memory policy, batch caps and fitted kernel factors."""
    from clusterplan.catalog.load import shipped_engines

    return shipped_engines()


@functools.lru_cache(maxsize=64)
def engine_profile(name: str) -> EngineSpec:
    """One shipped engine by id or alias (validated names only: :class:`Assumptions` checks them); memoised,
    since every memory and step evaluation asks for it."""
    return _find_engine(engine_profiles(), name) or engine_profiles()[DEFAULT_ENGINE]


def _find_engine(engines: Mapping[str, EngineSpec], name: str) -> EngineSpec | None:
    """The engine of ``engines`` called ``name`` (its id or an alias, any case), or None."""
    from clusterplan.catalog.load import normalize_name

    key = normalize_name(name)
    for spec in engines.values():
        if key in {normalize_name(n) for n in (spec.id, *spec.aliases)}:
            return spec
    return None


# The rows _catalog_engine found, per catalog's engine table (by identity: each Assumptions holds its own copy, never
# changed once set) and name. A solve asks for its engine's row some 14,000 times (every memory and step evaluation).
_FOUND: dict[int, tuple[Mapping[str, EngineSpec], dict[str, EngineSpec | None]]] = {}
_FOUND_TABLES = 32  # tables remembered before the memo starts again (one per requirement resolved)


def _catalog_engine(engines: Mapping[str, EngineSpec], name: str) -> EngineSpec | None:
    """:func:`_find_engine`, memoised per table and name."""
    entry = _FOUND.get(id(engines))
    if entry is None or entry[0] is not engines:
        if len(_FOUND) >= _FOUND_TABLES:
            _FOUND.clear()
        entry = _FOUND[id(engines)] = (engines, {})
    found = entry[1]
    if name not in found:
        found[name] = _find_engine(engines, name)
    return found[name]


def _engine_default(name: str, engine: str | EngineSpec) -> PerClass:
    """An engine factor's value per class: the given engine row's, or the shipped row of that name."""
    spec = engine if isinstance(engine, EngineSpec) else engine_profile(engine)
    figure: ClassFactors = getattr(spec, name)
    return PerClass(**figure.model_dump())


class SpeculativeDecoding(BaseModel):
    """Speculative decoding as the engines run it: a cheap proposer drafts ``draft_tokens``, the model verifies
    them in one step and keeps ``acceptance_length`` tokens per step on average (the bonus token included).

    vLLM ``--speculative-config {method: draft_model | eagle | deepseek_mtp, num_speculative_tokens}``; SGLang
    ``--speculative-algorithm EAGLE --speculative-num-draft-tokens``; TensorRT-LLM ``speculative_config``
    (Draft-Target, Eagle, MTP). Mean acceptance length as in EAGLE (Li et al. 2024, arXiv:2401.15077, tau).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    method: SpeculativeMethod = Field(
        description="draft (a small draft model), eagle (EAGLE-style heads) or mtp (DeepSeek multi-token prediction)"
    )
    draft_tokens: int = Field(ge=1, le=16, description="tokens proposed per step (num_speculative_tokens)")
    acceptance_length: float = Field(
        ge=1, le=17, description="mean tokens kept per verification step, the bonus token included (EAGLE's tau)"
    )
    cost_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="one proposal's cost (weights streamed, FLOPs) as a fraction of one target forward; default by "
        "method: draft 0.1 (an 8B draft for a 70B target), eagle 0.05 (one decoder layer + head), mtp 0.03 "
        "(one of DeepSeek-V3's 61 layers)",
    )
    draft_model: str | None = Field(None, max_length=200, description="the draft model's name (export only)")

    @model_validator(mode="after")
    def _bounds(self) -> SpeculativeDecoding:
        if self.acceptance_length > self.draft_tokens + 1:
            raise ValueError(
                f"acceptance_length ({self.acceptance_length:g}) cannot exceed draft_tokens + 1 "
                f"({self.draft_tokens + 1}): a step keeps at most every draft and the bonus token"
            )
        return self

    @property
    def cost(self) -> float:
        """One proposal's cost as a fraction of a target forward (given or the method's default)."""
        return self.cost_fraction if self.cost_fraction is not None else SPECULATIVE_COST_FRACTION[self.method]

    def _own_mtp(self, arch: ModelArchitecture) -> bool:
        return self.method == "mtp" and self.cost_fraction is None and arch.mtp_layers > 0

    def cost_for(self, arch: ModelArchitecture) -> float:
        """One proposal's cost on ``arch``: given; for ``mtp`` on a model that ships MTP modules, one module's
        parameters over the main model's (each draft token runs one module, DeepSeek-V3 §2.2); else :attr:`cost`."""
        if not self._own_mtp(arch):
            return self.cost
        return params.mtp_params(arch) / arch.mtp_layers / params.total_params(arch)

    def held_fraction(self, arch: ModelArchitecture) -> float:
        """The proposer's weights held beside the model's, as a fraction of them: for ``mtp`` on a model that ships
        MTP modules every module (MiniMax-M2.5 ships 3, all loaded for 3 draft tokens); else :meth:`cost_for`."""
        if not self._own_mtp(arch):
            return self.cost
        return params.mtp_params(arch) / params.total_params(arch)

    def kv_fraction(self, arch: ModelArchitecture) -> float:
        """The proposer's KV cache beside the model's: for ``mtp`` on a model that ships MTP modules, one
        full-attention layer per module over the model's softmax-attention layers; else :attr:`cost`."""
        if not self._own_mtp(arch):
            return self.cost
        return arch.mtp_layers / max(arch.softmax_layer_count, 1)


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

    # The catalog's engine rows these assumptions run under (a user catalog's overrides included), set by
    # :meth:`with_catalog_engines`; None: the shipped rows.
    _engines: dict[str, EngineSpec] | None = PrivateAttr(None)

    engine: str = Field(
        DEFAULT_ENGINE,
        max_length=200,
        description="serving engine (catalog/engines.yaml: vllm, sglang, tensorrt-llm, exllamav2, llama.cpp) whose "
        "memory policy, batch cap, chunked prefill and kernel factors (memory_bandwidth_efficiency, "
        "compute_efficiency, decode_step_overhead_s) apply; a serving workload's `engine:` wins, factors given "
        "explicitly win",
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
        default_factory=lambda: _pc(0.78, 0.69, 0.85),
        description="achieved fraction of dense peak a large GEMM reaches in training (the plateau: smaller GEMMs "
        "reach the share physics/kernels.py gives their M, N, K; the attention core runs at "
        "attention_kernel_efficiency), before exposed communication. Fitted by bench/accuracy.py: datacenter 0.78 on "
        "17 llm-foundry, torchtune and Megatron-LM A100/H100 runs (with the Hopper fraction), consumer 0.85 on two "
        "torchtune RTX 4090 runs at desktop clocks; workstation has no usable data: the datacenter fit x the "
        "provisional ratio 0.40/0.45",
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
        0.10,
        ge=0,
        lt=0.5,
        description="training: fraction of GPU memory kept free for fragmentation (seeds: 10-15%); serving "
        "uses the engine's memory policy and the workload's headroom instead",
    )
    runtime_overhead_gib: float = Field(
        2.0,
        ge=0,
        description="training: CUDA context, NCCL buffers and framework "
        "per GPU, GiB (aiconfigurator 'other' 3.5 GiB; vidur/CUDA 650 MB); serving uses the engine's reserve",
    )
    inter_node_bandwidth_gb_per_s: float = Field(
        50.0, gt=0, description="per-GPU inter-node network, GB/s (400 Gb/s InfiniBand/EFA per GPU)"
    )
    int4_group_size: int = Field(128, ge=8, description="weights per int4 quantisation group (GPTQ/AWQ)")
    decode_step_overhead_s: PerClass = Field(
        default_factory=lambda: _engine_default("decode_step_overhead_s", DEFAULT_ENGINE),
        description="fixed cost of one engine step (scheduling, sampling, kernel launches), seconds; per engine "
        "(catalog/engines.yaml), fitted by bench/accuracy.py",
    )
    moe_gemm_efficiency: PerClass = Field(
        default_factory=lambda: _engine_default("moe_gemm_efficiency", DEFAULT_ENGINE),
        description="share of the dense roofline an MoE layer's expert GEMMs reach (grouped GEMM, few tokens per "
        "expert); per engine, from aiconfigurator-core 0.12.0's measured H200 MoE kernel tables (factors.py)",
    )
    host_time_per_sequence_layer_s: float | None = Field(
        None,
        ge=0,
        le=0.01,
        description="host (CPU) time per running sequence and decoder layer per engine step on one rank's executor, "
        "seconds (request bookkeeping, input preparation, sampling and response handling in Python, growing with the "
        "stage's depth); the step takes the "
        "longer of it and the GPU's work (overlap scheduler); unset: the engine's per host CPU "
        "(catalog/engines.yaml host_time_per_sequence_layer_s, GPU host_cpu)",
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
        description="static max/mean load of EP ranks beyond routing noise and moe_routing (1: none beyond them; "
        "physics/moe.py load_imbalance adds the balls-into-bins term)",
    )
    moe_routing: Literal["power_law", "balanced"] = Field(
        "power_law",
        description="how a serving replica's tokens spread over its experts: power_law (a few hot experts, as a "
        "router does without expert rebalancing; aiconfigurator-core 0.12.0 predicts with it) slows the MoE's "
        "compute side by the engine's tabulated kernel ratio (catalog/engines.yaml moe_routed_token_s unbalanced: "
        "TensorRT-LLM), else by the GPU architecture's law across EP ranks (catalog/kernels.yaml unbalanced_routing); "
        "balanced: an EPLB-balanced placement, "
        "no slowdown",
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
    prefill_chunk_tokens: int | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description="tokens scheduled per engine step (vLLM max_num_batched_tokens, TensorRT-LLM max_num_tokens); "
        "sizes the activation buffer and the prefill chunks; unset: the engine's (catalog/engines.yaml)",
    )
    engine_memory_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="the engine's memory fraction (vLLM gpu_memory_utilization, SGLang mem_fraction_static, "
        "TensorRT-LLM kv_cache_free_gpu_mem_fraction); unset: the engine's default",
    )
    engine_max_batch: int | None = Field(
        None, ge=1, le=1_000_000, description="cap on concurrent sequences per replica; unset: the engine's default"
    )
    engine_runtime_reserve_gib: float | None = Field(
        None, ge=0, le=64, description="per-GPU memory outside the engine's profiled peak, GiB; unset: the engine's"
    )
    serving_headroom_fraction: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="share of each serving GPU's memory kept free beyond the engine's own policy (a serving "
        "workload's `headroom:`); 0: the engine decides alone",
    )
    prefix_cache_hit_rate: float = Field(
        0.0, ge=0, lt=1, description="share of prompt tokens found in the prefix cache (not recomputed); 0: none"
    )
    speculative: SpeculativeDecoding | None = Field(
        None, description="speculative decoding (a serving workload's `speculative:`); None: off"
    )
    service_time_scv: float = Field(
        1.0,
        ge=0,
        le=10,
        description="squared coefficient of variation of a request's service time in the "
        "queueing model (1: exponential-like output lengths; Allen-Cunneen)",
    )
    architecture_compute_fraction: dict[str, float] = Field(
        default_factory=lambda: {"Hopper": 0.84, "Blackwell": 0.66, "CDNA 3 (gfx942)": 0.58, "CDNA 4 (gfx950)": 0.58},
        description="share of the class compute factors (compute_efficiency, training_mfu) an architecture "
        "reaches, by catalog architecture name; unlisted architectures 1.0. Fitted by bench/accuracy.py: H100/H200 "
        "serving and training against the A100 ones (0.839). Blackwell (B200, B300, GB200, GB300): Hopper's 0.84 x "
        "0.79, the share of peak B200/GB200 GEMMs reach against H100/H200's in aiconfigurator-core 0.12.0's "
        "TensorRT-LLM 1.3.0rc20 tables (systems/data/*/gemm/trtllm/1.3.0rc20/gemm_perf.parquet, M >= 4096, N and K "
        "4096-16384, median: BF16 0.63 vs 0.80, FP8 0.48 vs 0.61); 50 dense B200/GB200 perf-overview rows agree "
        "(docs/model.md section 9). AMD CDNA 3 (MI300X, MI325X): Hopper's 0.84 x 0.70, the share of peak a BF16 "
        "torch.matmul reaches on them against H100 SXM in the Maximum Achievable Matmul FLOPS table (MAMF-TABLE: "
        "MI300X 51.4% and MI325X 60.4% of 1,300 TFLOPS, mean 55.9%, against H100 SXM 80.3%); CDNA 4 (MI355X) "
        "carries CDNA 3's, provisional (no fair public CDNA 4 matmul measurement read)",
    )
    architecture_training_fraction: dict[str, float] = Field(
        default_factory=lambda: {"Hopper": 0.72, "Blackwell": 0.57, "CDNA 3 (gfx942)": 0.50, "CDNA 4 (gfx950)": 0.50},
        description="training's own share of training_mfu an architecture reaches, by catalog architecture name, "
        "in place of architecture_compute_fraction (which serving keeps); unlisted architectures use "
        "architecture_compute_fraction. Hopper 0.72 fitted by bench/accuracy.py on the 13 unflagged H100 training "
        "runs (llm-foundry 8-64 GPUs, Megatron-Core 48-6,144 GPUs; least mean absolute log error): below serving's "
        "0.84 because the memory-bound work between a training step's GEMMs (norms, activations, dropout, residual "
        "adds), which the plateau absorbs, weighs ~2x more at H100's FLOP:byte ratio than at A100's; Blackwell "
        "0.57 = Hopper's 0.72 x 0.79, the share of peak B200/GB200 GEMMs reach against H100/H200's in "
        "aiconfigurator-core 0.12.0's TensorRT-LLM GEMM tables (as architecture_compute_fraction; provisional: no "
        "fair public Blackwell training measurement is in bench/data); AMD CDNA 3 and 4 0.50 = Hopper's 0.72 x 0.70, "
        "the CDNA-over-H100 share of peak BF16 matmuls reach (MAMF-TABLE, as architecture_compute_fraction; "
        "provisional: no fair public MI300X training measurement is in bench/data)",
    )
    moe_gemm_architecture_fraction: dict[str, dict[str, float]] = Field(
        default_factory=lambda: {"Blackwell": {"fp4": 0.79, "fp8": 0.97}, "Hopper": {"fp4": 0.86}},
        description="share of the engine's moe_gemm_efficiency (fitted on Hopper's FP8 and BF16 grouped GEMMs) an "
        "architecture's MoE kernel reaches at a weight precision, by catalog architecture name then precision; "
        "unlisted 1.0. Fitted with the kernel's per-routed-token and per-layer costs (catalog/engines.yaml "
        "moe_routed_token_s) by bench/moe_kernel_fit.py on aiconfigurator-core 0.12.0, systems/data/{h100_sxm,"
        "h200_sxm,b200_sxm,gb200}/moe/trtllm/1.3.0rc20/moe_perf.parquet, CUTLASS, balanced routing, TP 1, EP 1-32, "
        "layers of >= 100 us on the roofline: share of this module's roofline Hopper FP8 0.829 and BF16 0.876 (the "
        "engine's 0.85), Blackwell NVFP4 0.671 (0.79), FP8 0.826 (0.97), BF16 0.852 (1.0); Hopper MXFP4 weight-only "
        "(w4a16_mxfp4, moe_torch_flow: gpt-oss's Triton kernel on Hopper) 0.731 (0.86) on the rows it pads (engines.yaml "
        "row_tile_max, "
        "moe.row_tile_padding), its weight stream apart (moe_weight_stream_fraction); one share of 0.477 (0.61) on "
        "the real rows left EP 4 at 768-2,048 tokens 1.8-3x slower than the fit",
    )
    moe_weight_stream_fraction: dict[str, dict[str, float]] = Field(
        default_factory=lambda: {"Hopper": {"fp4": 0.71}},
        description="share of the engine's moe_gemm_efficiency an architecture's MoE kernel streams its weights at, "
        "where it differs from its GEMMs' (moe_gemm_architecture_fraction), by catalog architecture name then "
        "precision; unlisted: the GEMMs' share. Hopper FP4: TensorRT-LLM's Triton MXFP4 kernel (w4a16, dequantised "
        "to BF16 in the GEMM) reaches 0.604 of this model's weight stream and 0.731 of its BF16 FLOPs on the padded "
        "rows (0.71 and 0.86 of 0.85), fitted together with its per-layer time by bench/moe_kernel_fit.py on "
        "aiconfigurator-core 0.12.0 systems/data/{h100_sxm,h200_sxm}/moe/trtllm/1.3.0rc20/moe_perf.parquet "
        "(w4a16_mxfp4, moe_torch_flow, balanced; median |log residual| 0.119 with one share, 0.069 with two, 0.018 "
        "with the per-layer time)",
    )
    moe_block_scale_compute_fraction: dict[str, float] = Field(
        default_factory=lambda: {"Hopper": 0.60},
        description="share of the per-tensor FP8 grouped GEMM's compute rate an MoE kernel on FP8 weights with "
        "128x128 block scales reaches (fp8_weight_scaling 'block'), by catalog architecture name; the weight stream "
        "is unchanged; unlisted 1.0. aiconfigurator-core 0.12.0, systems/data/{h200_sxm,b200_sxm}/moe/trtllm/"
        "1.3.0rc20/moe_perf.parquet (CUTLASS kernels), balanced routing, layers of >= 100 us on the roofline, the "
        "same shape and token count measured both ways, median of fp8_block's share of this module's roofline over "
        "fp8's: H200 compute-bound 0.60 (313 pairs; fp8_block 0.49, fp8 0.74), weight-bound 0.98 (708); B200 "
        "compute-bound 0.98 (242). Hopper's WGMMA has no block scaling: the kernel promotes partial sums to CUDA "
        "cores every 128-deep slice to apply the scales (DeepSeek-V3, arXiv:2412.19437 §3.3.2)",
    )
    mla_block_scale_bmm_fraction: dict[str, float] = Field(
        default_factory=lambda: {"Hopper": 0.075},
        description="share of the FP8 matmul rate MLA's absorbed projections (W_UK, W_UV: one small batched GEMM per "
        "head in the decode step) reach with FP8 block scales (fp8_weight_scaling 'block'), by catalog "
        "architecture name; unlisted 1.0. aiconfigurator-core 0.12.0, systems/data/{h200_sxm,b200_sxm}/mla_bmm/"
        "trtllm/1.3.0rc20/mla_bmm_perf.parquet, 128 heads, 64-2,048 tokens: H200's FP8 block-scaling kernel "
        "(trtllm_fp8_block_scaling_bmm_out) 49-109 TFLOPS, median 79 against this module's H200 FP8 rate of "
        "1,053 (its BF16 kernel 143-353); B200 dequantises to BF16 (trtllm_bmm_out_dequant_bf16) at the BF16 "
        "kernel's speed",
    )
    decode_gemm_knee_tokens: dict[str, dict[str, float]] = Field(
        default_factory=lambda: {"Blackwell": {"fp4": 445.0, "fp8": 388.0}},
        description="tokens M0 at which an architecture's dense GEMMs reach half their large-M share of peak at a "
        "matmul precision (share(M) / share(M >= 4096) ~ M / (M + M0)), by catalog architecture name then precision; "
        "unlisted: the reference architecture's. bench/gemm_knee_fit.py on aiconfigurator-core 0.12.0, systems/data/"
        "{h100_sxm,h200_sxm,b200_sxm,gb200}/gemm/trtllm/1.3.0rc20/gemm_perf.parquet, N and K 4096-16384, M "
        "128-2048, least squares in log: H100/H200 FP8 218/180, B200/GB200 NVFP4 441/450, FP8 379/396, BF16 "
        "156/168 (H100/H200 153/98: not listed). A decode step's linear layers run at M = the sequences a GPU "
        "multiplies, far below where architecture_compute_fraction was read (M >= 4096)",
    )
    decode_gemm_knee_reference_tokens: float = Field(
        199.0,
        ge=0,
        description="M0 of decode_gemm_knee_tokens for the architecture the compute factors were fitted on (Hopper "
        "FP8, H100/H200 218/180): its decode rows absorb their own ramp, so a listed architecture's linear-layer "
        "FLOP time is multiplied by (M + M0) / (M + 199) only: 1.54 at 256 sequences and 1.34 at 531 on Blackwell "
        "NVFP4",
    )
    mla_attention_precision: dict[str, dict[str, str]] = Field(
        default_factory=lambda: {"Hopper": {"prefill": "bf16", "decode": "bf16"}, "Blackwell": {"prefill": "bf16"}},
        description="precision MLA's attention kernels multiply in, by catalog architecture name then phase (prefill: "
        "the multi-head form; decode: the absorbed form), whatever the KV cache's; unlisted: the cache's "
        "(attention_precision). aiconfigurator-core 0.12.0, systems/data/{h200_sxm,b200_sxm}/mla/trtllm/1.3.0rc20/ "
        "{generation,context}_mla_perf.parquet, 128 heads, context >= 1k (decode: batch >= 64), median TFLOPS "
        "with an FP8 cache vs a 16-bit one: H200 decode 675 vs 608 (0.68 of BF16 peak, 0.34 of FP8's), prefill 512 "
        "vs 513; B200 decode 2,228 vs 1,281 (an FP8 kernel), prefill 994 vs 993",
    )
    network_link_efficiency: float = Field(
        0.90,
        gt=0,
        le=1,
        description="achieved fraction of the per-GPU inter-node network bandwidth in training collectives and "
        "pipeline sends (NCCL on InfiniBand: 'for NDR @ 400Gbps you should see 46-48GB/s per NIC', "
        "NVIDIA/nccl-tests#290; Calculon IB 0.9); NVLink and serving keep link_efficiency",
    )
    attention_kernel_efficiency: dict[str, float] = Field(
        default_factory=lambda: {"Ampere": 0.60, "Ada Lovelace": 0.60, "Hopper": 0.35, "Blackwell": 0.55},
        description="achieved share of dense BF16 peak of the fused attention kernel (FlashAttention) in training, "
        "forward and backward, on the FLOPs it executes (causal: half the pairs; backward recomputes the scores), by "
        "catalog architecture name; unlisted architectures 0.45. Ampere: FlashAttention-2 fwd+bwd 50-73% of A100 peak (Dao 2023, arXiv:2307.08691 §4.1); Ada "
        "inherits it (same sm80 kernels, provisional); Hopper: FlashAttention-2, the kernel llm-foundry and "
        "PyTorch SDPA's flash backend run, 35% of H100 peak (Shah et al. 2024, arXiv:2407.08608 §1; FlashAttention-3 "
        "reaches 75% forward: set 0.55 for a framework on FA3/cuDNN); Blackwell provisional (no fair measurement)",
    )
    fp8_matmul_fraction: float = Field(
        0.88,
        gt=0,
        le=1,
        description="achieved FP8 matmul rate as a share of the BF16 one, relative to their datasheet peaks "
        "(H100 SXM maximum achievable matmul FLOPS: FP8 70.9% of peak, BF16 80.3%; stas00/ml-engineering)",
    )
    fp4_matmul_fraction: float = Field(
        0.69,
        gt=0,
        le=1,
        description="achieved FP4 (NVFP4) matmul rate as a share of the BF16 one, relative to their datasheet peaks: "
        "fp8_matmul_fraction x 0.785, NVFP4's share of peak against FP8's on B200/GB200 in aiconfigurator-core "
        "0.12.0's TensorRT-LLM 1.3.0rc20 GEMM tables (median 0.38 vs 0.48 at M >= 4096; B300/GB300's tables reach "
        "0.58 of FP8's share against their 1.5x FP4 peak: provisional there)",
    )
    fp4_activations: Literal["fp4", "fp8"] = Field(
        "fp4",
        description="activations an FP4-weight model's matmuls take on GPUs with FP4 tensor cores: fp4 (NVFP4 "
        "W4A4, ModelOpt checkpoints) or fp8 (MXFP4 weights with MXFP8 activations at the FP8 rate: gpt-oss on "
        "Blackwell, TensorRT-LLM examples/models/core/gpt_oss/README.md); a fact of the checkpoint, not fitted",
    )
    fp8_weight_scaling: Literal["tensor", "block"] = Field(
        "tensor",
        description="how an FP8 checkpoint scales its weights: one scale per tensor (ModelOpt FP8) or one per "
        "128x128 block (DeepSeek-V3/R1's native FP8: config.json quantization_config weight_block_size [128, 128]); "
        "a fact of the checkpoint, not fitted. Block scales slow the MoE GEMMs' compute on Hopper "
        "(moe_block_scale_compute_fraction)",
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

    @field_validator("engine", mode="before")
    @classmethod
    def _known_engine(cls, value: Any) -> Any:
        """An engine id or alias of catalog/engines.yaml, stored as its id."""
        if not isinstance(value, str):
            return value
        from clusterplan.catalog.load import normalize_name
        from clusterplan.errors import did_you_mean

        key = normalize_name(value)
        for spec in engine_profiles().values():
            if key in {normalize_name(n) for n in (spec.id, *spec.aliases)}:
                return spec.id
        hint = did_you_mean(value, list(engine_profiles()))
        raise ValueError(
            f"unknown engine {value!r}; "
            + (hint if hint else "expected one of " + ", ".join(sorted(engine_profiles())))
        )

    @model_validator(mode="wrap")
    @classmethod
    def _engine_defaults(cls, data: Any, handler: ModelWrapValidatorHandler[Assumptions]) -> Assumptions:
        """Factors not given default to the chosen engine's (they still count as not overridden)."""
        if not isinstance(data, dict) or data.get("engine", DEFAULT_ENGINE) == DEFAULT_ENGINE:
            return handler(data)
        try:
            engine = cls._known_engine(data["engine"])
        except ValueError:
            return handler(data)  # the field validator reports it, located
        profile = engine_profile(str(engine))
        filled = {name: _engine_default(name, profile.id) for name in ENGINE_FACTORS if name not in data}
        result = handler({**data, **filled})
        result.__pydantic_fields_set__.difference_update(filled)
        return result

    @property
    def engine_spec(self) -> EngineSpec:
        """The engine's profile: the catalog's row (:meth:`with_catalog_engines`), else the shipped one."""
        return self._engine_row(self.engine)

    def _engine_row(self, name: str) -> EngineSpec:
        """The row of engine ``name`` in the catalog these assumptions run under (the shipped one if unbound)."""
        engines = (self.__pydantic_private__ or {}).get("_engines")  # self._engines: pydantic's __getattr__, ~10x
        found = _catalog_engine(engines, name) if engines is not None else None
        return found if found is not None else engine_profile(name)

    def engine_factor(self, name: str, gpu: GpuSpec) -> float:
        """An engine factor (one of ENGINE_FACTORS) on one GPU: the requirement's where it set one, else the
        engine's value measured on this GPU (catalog/engines.yaml ``measured``: a `clusterplan calibrate` overlay),
        else the GPU class's."""
        if name not in self.model_fields_set:
            measured = self.engine_spec.measured.get(gpu.id)
            value = getattr(measured, name, None) if measured is not None else None
            if value is not None:
                return float(value)
        per_class: PerClass = getattr(self, name)
        return per_class.of(gpu.gpu_class)

    def training_mfu_on(self, gpu: GpuSpec) -> float:
        """``training_mfu`` on one GPU: the requirement's where it set it, else the catalog GPU row's measured
        value (a `clusterplan calibrate` overlay of a step-time log), else the GPU class's."""
        if "training_mfu" not in self.model_fields_set and gpu.measured_training_mfu is not None:
            return gpu.measured_training_mfu
        return self.training_mfu.of(gpu.gpu_class)

    def with_catalog_engines(self, engines: Mapping[str, EngineSpec]) -> Assumptions:
        """These assumptions under a catalog's engine rows (``--catalog`` overrides included): the engine's memory
        policy, caps and kernel rows come from ``engines``, and so does every engine factor the requirement did
        not set. requirement/load.py calls it for every requirement it resolves: the one place a catalog's
        engines reach the physics."""
        result = self.model_copy()
        result._engines = dict(engines)
        spec = result.engine_spec
        filled = {name: _engine_default(name, spec) for name in ENGINE_FACTORS if name not in self.model_fields_set}
        result = result.model_copy(update=filled)
        result.__pydantic_fields_set__.difference_update(filled)
        return result

    @property
    def chunk_tokens(self) -> int:
        """Tokens per engine step: the override, else the engine's chunked-prefill size."""
        return (
            self.prefill_chunk_tokens
            if self.prefill_chunk_tokens is not None
            else self.engine_spec.prefill_chunk_tokens
        )

    def memory_policy(self, tp: int) -> tuple[MemoryPolicy, float, float]:
        """(policy, memory fraction at ``tp``, runtime reserve GiB): the engine's, with any override."""
        spec = self.engine_spec
        fraction = self.engine_memory_fraction if self.engine_memory_fraction is not None else spec.fraction_at(tp)
        reserve = self.engine_runtime_reserve_gib
        return spec.memory_policy, fraction, spec.runtime_reserve_gib if reserve is None else reserve

    def host_per_sequence_layer_s(self, host_cpu: HostCpu) -> float:
        """Host time per running sequence and decoder layer per step on one rank (the override, else the engine's)."""
        if self.host_time_per_sequence_layer_s is not None:
            return self.host_time_per_sequence_layer_s
        return self.engine_spec.host_time_per_sequence_layer_s.of(host_cpu)

    def batch_cap(self, memory_gib: float, gpu_name: str) -> int:
        """The engine's cap on concurrent sequences on one GPU type (the override, else its default there)."""
        return (
            self.engine_max_batch
            if self.engine_max_batch is not None
            else self.engine_spec.batch_cap(memory_gib, gpu_name)
        )

    def with_engine(self, engine: str | None, **settings: Any) -> Assumptions:
        """These assumptions for a serving workload: its engine (factors not set explicitly follow it) and its
        engine settings (``None`` values keep the current ones). One function: every command resolves here."""
        update: dict[str, Any] = {k: v for k, v in settings.items() if v is not None}
        if engine is not None:
            engine = self._engine_row(engine).id
        filled: dict[str, Any] = {}
        if engine is not None and engine != self.engine:
            update["engine"] = engine
            row = self._engine_row(engine)
            filled = {name: _engine_default(name, row) for name in ENGINE_FACTORS if name not in self.model_fields_set}
        if not update:
            return self
        result = self.model_copy(update={**update, **filled})
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
            if value is None or (isinstance(value, str | dict | BaseModel) and not isinstance(value, PerClass)):
                continue
            out[name] = value.of(gpu_class) if isinstance(value, PerClass) else value
        return out

    def compute_fraction(self, architecture: str, precision: str) -> float:
        """Multiplier on a class's compute factor for one architecture (name, any case) and matmul precision."""
        fraction = _by_architecture(self.architecture_compute_fraction, architecture)
        return (1.0 if fraction is None else fraction) * self.matmul_precision_share(precision)

    def matmul_precision_share(self, precision: str) -> float:
        """Low-precision matmuls reach a smaller share of their (2x, 4x) peaks than BF16 ones (fp8/fp4 fractions)."""
        if precision == "fp8":
            return self.fp8_matmul_fraction
        if precision == "fp4":
            return self.fp4_matmul_fraction
        return 1.0

    def moe_gemm_fraction(self, architecture: str, weight_precision: str) -> float:
        """Share of ``moe_gemm_efficiency`` an architecture's MoE kernel reaches at a weight precision (1 unlisted)."""
        table = _by_architecture(self.moe_gemm_architecture_fraction, architecture) or {}
        return table.get(weight_precision, 1.0)

    def moe_weight_fraction(self, architecture: str, weight_precision: str) -> float:
        """Share of ``moe_gemm_efficiency`` an architecture's MoE kernel streams its weights at (its GEMMs' unlisted)."""
        table = _by_architecture(self.moe_weight_stream_fraction, architecture) or {}
        share = table.get(weight_precision)
        return self.moe_gemm_fraction(architecture, weight_precision) if share is None else share

    def moe_token_costs(self, architecture: str, weight_precision: str) -> tuple[float, float]:
        """(per token routed to a rank, per routed token the rank's MoE receives) seconds per MoE layer: the
        engine's kernel work beside the expert GEMMs' FLOPs (catalog/engines.yaml moe_routed_token_s; 0 unlisted)."""
        kernel = self._moe_kernel(architecture, weight_precision)
        return (0.0, 0.0) if kernel is None else (kernel.rank_s, kernel.batch_s)

    def moe_layer_s(self, architecture: str, weight_precision: str) -> float:
        """The engine's MoE kernels' fixed time per MoE layer on one architecture and precision, s (0 unlisted)."""
        kernel = self._moe_kernel(architecture, weight_precision)
        return 0.0 if kernel is None else kernel.layer_s

    def moe_row_tile_max(self, architecture: str, weight_precision: str) -> int:
        """The engine's MoE kernel's largest padded row tile on one architecture and precision (0: no padding)."""
        kernel = self._moe_kernel(architecture, weight_precision)
        return 0 if kernel is None else kernel.row_tile_max

    def moe_unbalanced_routing(self, architecture: str, weight_precision: str) -> UnbalancedRouting | None:
        """The engine's measured MoE routing ratios on one architecture and weight precision (catalog/engines.yaml
        ``unbalanced``), None where it tabulates none (physics/moe.py serving_routing then reads the architecture's
        law, catalog/kernels.yaml)."""
        kernel = self._moe_kernel(architecture, weight_precision)
        return None if kernel is None else kernel.unbalanced

    def _moe_kernel(self, architecture: str, weight_precision: str) -> MoeTokenCost | None:
        """The engine's MoE kernel row for one architecture and weight precision (``fp8_block`` for block-scaled
        FP8 checkpoints where listed, else the precision's); None unlisted."""
        table = _by_architecture(self.engine_spec.moe_routed_token_s, architecture) or {}
        block = weight_precision == "fp8" and self.fp8_weight_scaling == "block"
        return (table.get("fp8_block") if block else None) or table.get(weight_precision)

    def moe_compute_fraction(self, architecture: str, weight_precision: str) -> float:
        """Share of the MoE GEMMs' compute rate left on one architecture by the checkpoint's FP8 block scales (1 else)."""
        return self._block_scale_share(self.moe_block_scale_compute_fraction, architecture, weight_precision)

    def decode_gemm_knees(self, architecture: str, precision: str) -> tuple[float, float]:
        """(reference, this architecture's) M0 of the dense GEMMs' share at a matmul precision; (0, 0): no ramp."""
        knee = (_by_architecture(self.decode_gemm_knee_tokens, architecture) or {}).get(precision)
        return (0.0, 0.0) if knee is None else (self.decode_gemm_knee_reference_tokens, knee)

    def mla_bmm_fraction(self, architecture: str, weight_precision: str) -> float:
        """Share of the FP8 rate MLA's absorbed per-head projections reach with the checkpoint's FP8 block scales."""
        return self._block_scale_share(self.mla_block_scale_bmm_fraction, architecture, weight_precision)

    def _block_scale_share(self, table: Mapping[str, float], architecture: str, weight_precision: str) -> float:
        """``table``'s share on one architecture when FP8 weights carry block scales (``fp8_weight_scaling``), else 1."""
        if weight_precision != "fp8" or self.fp8_weight_scaling != "block":
            return 1.0
        fraction = _by_architecture(table, architecture)
        return 1.0 if fraction is None else fraction

    def mla_precision(self, architecture: str, phase: str, cache_precision: str) -> str:
        """Precision MLA's ``phase`` (prefill, decode) attention multiplies in on one architecture (else the cache's)."""
        table = _by_architecture(self.mla_attention_precision, architecture) or {}
        return table.get(phase, cache_precision)

    def training_compute_fraction(self, architecture: str, precision: str) -> float:
        """:meth:`compute_fraction` for training: the architecture's ``architecture_training_fraction`` when listed."""
        fraction = _by_architecture(self.architecture_training_fraction, architecture)
        if fraction is None:
            return self.compute_fraction(architecture, precision)
        return fraction * self.matmul_precision_share(precision)

    def attention_fraction(self, architecture: str) -> float:
        """Share of dense BF16 peak the fused attention kernel reaches on one architecture (name, any case)."""
        fraction = _by_architecture(self.attention_kernel_efficiency, architecture)
        return ATTENTION_KERNEL_DEFAULT if fraction is None else fraction

    def overridden(self) -> list[str]:
        """Names of the factors a requirement set explicitly."""
        return sorted(self.model_fields_set)


_Entry = TypeVar("_Entry")


def _by_architecture(table: Mapping[str, _Entry], architecture: str) -> _Entry | None:
    """The entry of a per-architecture table for a catalog architecture name, any case; None when unlisted."""
    wanted = architecture.casefold()
    return next((value for name, value in table.items() if name.casefold() == wanted), None)
