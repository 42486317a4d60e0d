"""The requirement format: what a user asks clusterplan to plan. Pydantic v2, ``extra="forbid"``.

Every numeric field names its unit in its description and accepts human units (``5s``, ``$1.2M``,
``150k``). ``clusterplan schema`` writes the JSON Schema of :class:`Requirement` to
``specs/requirement.schema.json``; ``specs/requirement.md`` documents every field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from clusterplan.catalog.schema import (
    MAX_CONTEXT_TOKENS,
    GpuClass,
    Label,
    ModelArchitecture,
    OwnedCosts,
    OwnedFigure,
    Precision,
    ProviderTier,
)
from clusterplan.physics.factors import Assumptions, SpeculativeDecoding
from clusterplan.physics.optimizer_memory import MemoryOption
from clusterplan.units import Count, Money, Months, Rate, StatedDuration, StatedPower, Tokens

Quantization = Literal["bf16", "fp16", "fp8", "int8", "fp4", "int4"]
KvPrecision = Literal["bf16", "fp16", "fp8", "int8"]
Deployment = Literal["cloud", "owned", "either"]
# auto: on demand, or a 1- or 3-year commitment where it costs less over the horizon (paid for whole terms), and spot
# for workloads marked interruptible; on_demand: on-demand prices only; spot: spot prices only (every workload must
# be interruptible).
Pricing = Literal["auto", "on_demand", "spot"]
# The quality a requirement gives up for speed, as the most lossy precision class it accepts (quality.max_loss):
# none: 16-bit only; fp8_class: + FP8 (published loss about 0-0.5%); int8_class: + INT8 and FP4 (1-3%);
# any: + weight-only INT4 (AWQ/GPTQ). The evidence per model family is catalog/quality.yaml. FP4 (NVFP4 /
# MXFP4) sits in int8_class: its published worst-task losses are 1.3% (DeepSeek-R1, NVIDIA's FP4 checkpoint)
# and 2.7% (Nemotron 3 Nano), beyond fp8_class's 0.5% and inside int8_class's 1-3% (catalog/quality.yaml).
MaxLoss = Literal["none", "fp8_class", "int8_class", "any"]
DEFAULT_PROVIDER_TIERS: tuple[ProviderTier, ...] = ("hyperscaler", "gpu_cloud")
# The quality gate, one home: the weight precisions each class admits ('bf16' stands for the GPU's 16-bit).
# Ordered from the least to the most lossy; a class admits its own precision and every one before it.
QUALITY_CLASSES: dict[MaxLoss, tuple[str, ...]] = {
    "none": ("bf16",),
    "fp8_class": ("bf16", "fp8"),
    "int8_class": ("bf16", "fp8", "int8", "fp4"),
    "any": ("bf16", "fp8", "int8", "fp4", "int4"),
}
DEFAULT_MAX_LOSS: MaxLoss = "fp8_class"


def quality_class_of(precision: str) -> MaxLoss:
    """The least lossy class that admits ``precision`` (fp16 counts as bf16)."""
    p = "bf16" if precision in ("bf16", "fp16") else precision
    return next(c for c, ps in QUALITY_CLASSES.items() if p in ps)


# Ranges of the figures a requirement gives (docs/guarantees.md sections 1 and 2). A p95 target of
# 1e-308 s sent the conflict analysis into 39 s of search and then an OverflowError; no engine answers
# within a millisecond, and a target of a day or more is no latency target.
MIN_LATENCY_S = 1e-3
MAX_LATENCY_S = 86_400.0
MAX_REQUEST_TOKENS = float(MAX_CONTEXT_TOKENS)  # prompt, output, context or sequence: a model's longest context
MAX_PEAK_TO_AVERAGE = 100.0  # peak demand over average demand
MAX_BATCH_TOKENS = 1e10  # tokens per optimizer step (Llama 3 405B trained at 1.6e7)
Name = Label  # at most MAX_LABEL_CHARS characters


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class InlineModel(ModelArchitecture):
    """An architecture written into the requirement."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class HfConfigModel(Strict):
    """Read the architecture from a local Hugging Face ``config.json`` (no network)."""

    hf_config: str = Field(max_length=4096, description="path to config.json, relative to the requirement file")
    name: Name | None = Field(None, description="display name; defaults to the config's model_type")


def _model_kind(value: Any) -> str:
    if isinstance(value, str):
        return "name"
    if isinstance(value, dict) and "hf_config" in value:
        return "hf_config"
    if isinstance(value, HfConfigModel):
        return "hf_config"
    return "inline"


ModelRef = Annotated[
    Annotated[str, Tag("name"), Field(description="catalog model name, e.g. 'llama-3.1-70b'")]
    | Annotated[InlineModel, Tag("inline")]
    | Annotated[HfConfigModel, Tag("hf_config")],
    Discriminator(_model_kind),
]


class EngineSettings(Strict):
    """The serving engine a workload runs on, and any of its settings to override (catalog/engines.yaml)."""

    name: str | None = Field(
        None,
        max_length=200,
        description="engine id or alias: vllm, sglang, tensorrt-llm (trtllm), exllamav2, llama.cpp; unset: "
        "assumptions.engine (default vllm)",
    )
    memory_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="the engine's memory fraction (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, "
        "TensorRT-LLM kv_cache_free_gpu_mem_fraction), 0-1; unset: the engine's default",
    )
    max_batch: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="cap on concurrent sequences per replica (vLLM --max-num-seqs, SGLang --max-running-requests, "
        "TensorRT-LLM max_batch_size); unset: the engine's default",
    )
    prefill_chunk_tokens: int | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description="tokens per engine step (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size, "
        "TensorRT-LLM max_num_tokens); unset: the engine's default",
    )
    runtime_reserve_gib: float | None = Field(
        None, ge=0, le=64, description="per-GPU memory outside the engine's profiled peak, GiB; unset: the engine's"
    )

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        """``engine: trtllm`` is ``engine: {name: trtllm}``."""
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _known(self) -> EngineSettings:
        if self.name is not None:
            Assumptions._known_engine(self.name)  # raises with the allowed names
        return self


HOURS_PER_PERIOD = {"daily": 24, "weekly": 168}  # hourly rates a daily or a weekly profile lists
MAX_PROFILE_RPS = 1e9  # requests/s in one hour: far above any fleet, below the planner's integer range


class DemandProfile(Strict):
    """Hourly demand over a day or a week, repeated over the horizon (the fleet is sized over it: a base that runs
    every hour and a burst tier rented on demand for the hours above it; planner/families/demand_profile.py)."""

    kind: Literal["daily", "weekly"] = Field(description="daily: 24 hourly rates; weekly: 168 (Monday 00:00 first)")
    requests_per_s_by_hour: list[Annotated[float, Field(ge=0, le=MAX_PROFILE_RPS)]] = Field(
        description="average requests/s in each hour of the period, hour 0 first (or give trace)"
    )
    trace: str | None = Field(
        None,
        max_length=4096,
        description="a request trace (CSV arrival_s,input_tokens,output_tokens or JSON Lines, arrival_s from hour 0 "
        "of the period), relative to the requirement file: the hourly rates are read from it instead",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_source(cls, data: Any) -> Any:
        """Rates or a trace: a trace is read into rates when the requirement is loaded (requirement/load.py)."""
        if isinstance(data, dict) and data.get("trace") is not None and data.get("requests_per_s_by_hour") is not None:
            raise ValueError("give either requests_per_s_by_hour or trace, not both")
        return data

    @model_validator(mode="after")
    def _length(self) -> DemandProfile:
        hours = HOURS_PER_PERIOD[self.kind]
        got = len(self.requests_per_s_by_hour)
        if got != hours:
            raise ValueError(
                f"a {self.kind} profile lists {hours} hourly rates (hour 0 to {hours - 1}), this one {got}"
            )
        if max(self.requests_per_s_by_hour) <= 0:
            raise ValueError("every hourly rate is 0: give the requests/s of at least one hour")
        return self

    @property
    def average_rps(self) -> float:
        """The period's average, requests/s."""
        return sum(self.requests_per_s_by_hour) / len(self.requests_per_s_by_hour)

    @property
    def peak_rps(self) -> float:
        return max(self.requests_per_s_by_hour)


class ServingWorkload(Strict):
    kind: Literal["serving"]
    name: Name = Field("serving", description="label used in plans and explanations")
    model: ModelRef | None = Field(None, description="overrides the requirement's model for this workload")
    tokens_per_sec: Rate | None = Field(None, gt=0, description="average output tokens per second, all users")
    requests_per_min: Rate | None = Field(None, gt=0, description="average requests per minute")
    input_tokens: Tokens = Field(512, ge=1, le=MAX_REQUEST_TOKENS, description="prompt tokens per request (mean)")
    output_tokens: Tokens = Field(256, ge=1, le=MAX_REQUEST_TOKENS, description="generated tokens per request (mean)")
    p95_latency: StatedDuration | None = Field(
        None,
        ge=MIN_LATENCY_S,
        le=MAX_LATENCY_S,
        description="95th percentile end-to-end latency, seconds (1 ms to 1 day)",
    )
    p95_ttft: StatedDuration | None = Field(
        None,
        ge=MIN_LATENCY_S,
        le=MAX_LATENCY_S,
        description="95th percentile time to first token, seconds (1 ms to 1 day)",
    )
    p95_tpot: StatedDuration | None = Field(
        None,
        ge=MIN_LATENCY_S,
        le=MAX_LATENCY_S,
        description="95th percentile time per output token, seconds (1 ms to 1 day)",
    )
    max_context: Tokens | None = Field(
        None,
        ge=1,
        le=2 * MAX_REQUEST_TOKENS,
        description="longest prompt+output a request may reach, tokens; defaults to input_tokens + output_tokens",
    )
    peak_to_average: float = Field(1.0, ge=1, le=MAX_PEAK_TO_AVERAGE, description="peak demand over average demand")
    redundancy: int = Field(0, ge=0, le=64, description="spare replicas (N+k) so losing k still meets demand")
    allow_mixed: bool | None = Field(
        None,
        description="allow different GPU types for this workload's replicas; defaults to constraints.allow_mixed",
    )
    kv_cache_precision: KvPrecision | None = Field(
        None, description="KV-cache precision; default follows the weights (fp8 weights -> fp8 KV, else bf16)"
    )
    # -- the serving engine and what it runs (evaluation/evaluate.serving_assumptions) --
    engine: EngineSettings | None = Field(
        None, description="the serving engine and any setting to override: `vllm` or {name: trtllm, max_batch: 512}"
    )
    headroom: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="share of each GPU's memory kept free beyond the engine's own memory policy, 0-0.5 "
        "(default 0: the engine's policy alone decides the KV pool)",
    )
    speculative: SpeculativeDecoding | None = Field(
        None, description="speculative decoding: {method: draft | eagle | mtp, draft_tokens, acceptance_length}"
    )
    prefix_cache_hit_rate: float = Field(
        0.0, ge=0, lt=1, description="share of prompt tokens served from the prefix cache, 0-1 (default 0)"
    )
    # Disaggregated prefill/decode serving (physics/disagg.py): separate prefill and decode pools.
    disaggregation: Literal["auto", "off", "required"] = Field(
        "auto",
        description="auto: the planner chooses aggregated replicas or separate prefill and decode pools, whichever "
        "is cheaper; off: aggregated replicas only; required: prefill and decode pools only",
    )

    profile: DemandProfile | None = Field(
        None,
        description="hourly demand over a day or a week ({kind: daily, requests_per_s_by_hour: [24 rates]}); instead "
        "of tokens_per_sec / requests_per_min and peak_to_average, which it sets (its average and peak over average)",
    )

    interruptible: bool = Field(
        False,
        description="the workload tolerates losing its cloud instances at short notice (it checkpoints and resumes, or "
        "retries requests): spot capacity may be planned for it; default false: never on spot",
    )

    @field_validator("disaggregation", mode="before")
    @classmethod
    def _off(cls, value: Any) -> Any:
        """YAML 1.1 reads an unquoted ``off`` as false: it means the switch's ``off``."""
        return "off" if value is False else value

    @model_validator(mode="before")
    @classmethod
    def _from_profile(cls, data: Any) -> Any:
        """A profile states the demand: its average is the workload's requests/s and its peak over that average its
        peak_to_average, so every command reads the same two figures. Given beside them, it is a conflict."""
        if not isinstance(data, dict) or data.get("profile") is None:
            return data
        stated = [k for k in ("tokens_per_sec", "requests_per_min", "peak_to_average") if data.get(k) is not None]
        if stated:
            raise ValueError(
                f"give either profile or {' / '.join(stated)}: the profile sets the average demand and its peak"
            )
        try:
            profile = DemandProfile.model_validate(data["profile"])
        except ValueError:
            return data  # the profile's own (located) errors are reported by its field
        ratio = profile.peak_rps / profile.average_rps
        if ratio > MAX_PEAK_TO_AVERAGE:
            raise ValueError(
                f"the profile's peak is {ratio:,.1f}x its average, above the {MAX_PEAK_TO_AVERAGE:g}x a plan admits: "
                "raise its quietest hours or plan the peak hours as a workload of their own"
            )
        return {**data, "requests_per_min": profile.average_rps * 60.0, "peak_to_average": ratio}

    @model_validator(mode="after")
    def _demand(self) -> ServingWorkload:
        if (self.tokens_per_sec is None) == (self.requests_per_min is None):
            raise ValueError("give exactly one of tokens_per_sec or requests_per_min")
        if self.max_context is not None and self.max_context < self.input_tokens + self.output_tokens:
            raise ValueError(
                f"max_context ({self.max_context:,.0f}) is shorter than input_tokens + output_tokens "
                f"({self.input_tokens + self.output_tokens:,.0f})"
            )
        return self

    @property
    def requests_per_s(self) -> float:
        """Average request arrival rate, requests/s."""
        if self.requests_per_min is not None:
            return self.requests_per_min / 60.0
        assert self.tokens_per_sec is not None
        return self.tokens_per_sec / self.output_tokens

    @property
    def output_tokens_per_s(self) -> float:
        return self.requests_per_s * self.output_tokens

    @property
    def context_tokens(self) -> float:
        return self.max_context if self.max_context is not None else self.input_tokens + self.output_tokens


MEMORY_OPTIONS_HELP = (
    "memory options the planner may use when a layout does not fit otherwise: bf16_weights (no fp32 master copy), "
    "optimizer_in_backward, adamw8bit, activation_offload, paged_optimizer, optimizer_offload; [] forbids all; "
    "default: those standard in the method's framework (training: none; finetune: all, as torchtune ships them)"
)


# The layout knobs a training or fine-tuning workload may pin (None: the planner chooses), one definition for both.
ActivationRecompute = Annotated[
    Literal["none", "selective", "full"] | None, Field(description="None lets the planner choose")
]
ContextParallel = Annotated[
    int | None,
    Field(
        ge=1, le=64, description="context-parallel degree (each sequence split over this many GPUs); "
        "None lets the planner choose",
    ),
]  # fmt: skip
ExpertParallelDegree = Annotated[int, Field(ge=1, le=1024)]
ExpertParallel = Annotated[
    ExpertParallelDegree | list[ExpertParallelDegree] | Literal["auto"] | None,
    Field(
        description="expert-parallel degree of an MoE model (routed experts split over this many of the data x "
        "context parallel GPUs; Megatron --expert-model-parallel-size): one degree, a list the planner chooses "
        "from, or auto / None to let it choose; a dense model trains at 1",
    ),
]  # fmt: skip
VirtualStages = Annotated[
    int | None,
    Field(ge=1, le=64, description="interleaved (virtual) pipeline chunks per stage; None lets the planner choose"),
]
RecomputeLayers = Annotated[
    int | None,
    Field(
        ge=1, le=1024, description="with full recompute: layers of each pipeline stage recomputed "
        "(Megatron --recompute-num-layers); None: the fewest that fit",
    ),
]  # fmt: skip
MemoryOptions = Annotated[list[MemoryOption] | None, Field(description=MEMORY_OPTIONS_HELP)]
TrainingFramework = Annotated[
    str | None,
    Field(
        max_length=200, description="training framework (catalog/frameworks.yaml): megatron-lm, torchtitan, "
        "deepspeed, torchtune, peft; only layouts it runs are planned. Unset: megatron-lm for pretraining and full "
        "fine-tunes, torchtune for LoRA and QLoRA",
    ),
]  # fmt: skip


class TrainingWorkload(Strict):
    kind: Literal["training"]
    name: Name = Field("training", description="label used in plans and explanations")
    model: ModelRef | None = Field(None, description="overrides the requirement's model for this workload")
    tokens: Count = Field(gt=0, description="tokens to train on")
    deadline: StatedDuration = Field(gt=0, description="wall-clock time allowed, seconds (e.g. '30d')")
    sequence_length: Tokens = Field(4096, ge=1, le=MAX_REQUEST_TOKENS, description="tokens per sequence")
    global_batch_tokens: Tokens = Field(4_194_304, ge=1, le=MAX_BATCH_TOKENS, description="tokens per optimizer step")
    optimizer: Literal["adamw", "sgd", "adafactor"] = Field(
        "adamw", description="optimizer; sets bytes of optimizer state per parameter"
    )
    precision: Literal["bf16", "fp16", "fp8", "fp32"] = Field(
        "bf16", description="compute precision (mixed precision with fp32 master weights)"
    )
    activation_recompute: ActivationRecompute = None
    context_parallel: ContextParallel = None
    expert_parallel: ExpertParallel = None
    virtual_stages: VirtualStages = None
    recompute_layers: RecomputeLayers = None
    memory_options: MemoryOptions = None
    interruptible: bool = Field(
        False,
        description="the workload tolerates losing its cloud instances at short notice (it checkpoints and resumes, or "
        "retries requests): spot capacity may be planned for it; default false: never on spot",
    )
    framework: TrainingFramework = None


class FinetuneWorkload(Strict):
    kind: Literal["finetune"]
    name: Name = Field("finetune", description="label used in plans and explanations")
    model: ModelRef | None = Field(None, description="overrides the requirement's model for this workload")
    method: Literal["full", "lora", "qlora"] = Field(
        "lora",
        description="full: every weight trains; lora: frozen base "
        "at 16 bits plus adapters; qlora: frozen base at 4 bits (NF4) plus adapters",
    )
    lora_rank: int = Field(16, ge=1, le=4096, description="LoRA adapter rank r")
    tokens: Count = Field(gt=0, description="tokens to train on (dataset tokens x epochs)")
    deadline: StatedDuration = Field(gt=0, description="wall-clock time allowed, seconds")
    sequence_length: Tokens = Field(2048, ge=1, le=MAX_REQUEST_TOKENS, description="tokens per sequence")
    global_batch_tokens: Tokens = Field(65_536, ge=1, le=MAX_BATCH_TOKENS, description="tokens per optimizer step")
    optimizer: Literal["adamw", "sgd", "adafactor"] = Field("adamw", description="optimizer for trainable parameters")
    precision: Literal["bf16", "fp16"] = Field("bf16", description="compute precision of the trainable path")
    activation_recompute: ActivationRecompute = None
    context_parallel: ContextParallel = None
    expert_parallel: ExpertParallel = None
    virtual_stages: VirtualStages = None
    recompute_layers: RecomputeLayers = None
    memory_options: MemoryOptions = None
    interruptible: bool = Field(
        False,
        description="the workload tolerates losing its cloud instances at short notice (it checkpoints and resumes, or "
        "retries requests): spot capacity may be planned for it; default false: never on spot",
    )
    framework: TrainingFramework = None


Workload = Annotated[ServingWorkload | TrainingWorkload | FinetuneWorkload, Field(discriminator="kind")]


class Budget(Strict):
    capital: Money | None = Field(None, description="up-front purchase budget, USD")
    monthly: Money | None = Field(None, description="recurring spend per month, USD/month")
    total: Money | None = Field(None, description="all spending over the horizon, USD")
    horizon: Months = Field(36, gt=0, le=240, description="planning horizon, months")


class InventoryItem(Strict):
    gpu: str = Field(description="catalog GPU name")
    count: int = Field(ge=1, le=1_000_000, description="GPUs of this type already owned")


class Constraints(Strict):
    allowed_gpus: list[str] | None = Field(None, description="only these catalog GPUs")
    excluded_gpus: list[str] = Field(default_factory=list, description="never use these catalog GPUs")
    quantizations: list[Quantization] | None = Field(None, description="allowed weight precisions")
    max_gpus: int | None = Field(None, ge=1, le=1_000_000, description="cap on GPUs in total, all workloads")
    max_power: StatedPower | None = Field(None, gt=0, description="cap on facility power, W (e.g. '40kW')")
    inventory: list[InventoryItem] = Field(default_factory=list, description="GPUs already owned")
    clouds: list[str] | None = Field(None, description="allowed cloud providers")
    regions: list[str] | None = Field(None, description="allowed regions")
    allow_mixed: bool = Field(False, description="allow several GPU types within one serving workload")
    allow_consumer_gpus: bool = Field(
        False,
        description="plan consumer (GeForce) cards, whose driver licence excludes datacenter deployment; a card "
        "named in allowed_gpus or the inventory is planned without it",
    )
    pricing: Pricing = Field(
        "auto",
        description="cloud price terms: auto (on demand, or a 1- or 3-year commitment where it costs less over the "
        "horizon, paid for whole terms; spot for interruptible workloads), on_demand (on-demand only), spot (spot "
        "prices only; every workload must say interruptible: true)",
    )
    provider_tiers: list[ProviderTier] | None = Field(
        None,
        min_length=1,
        description="provider tiers whose offers may be planned (default: hyperscaler and gpu_cloud; "
        "add marketplace to allow Vast.ai and RunPod Community Cloud)",
    )


class Fleet(Strict):
    """Rules for the fleet as a whole, across workloads."""

    max_gpu_types: int | None = Field(
        None, ge=1, le=1000, description="cap on distinct GPU types across the fleet (all workloads, cloud and owned)"
    )


# The source an owned figure set in the requirement cites (catalog/README.md: each figure carries its source).
REQUIREMENT_SOURCE = "requirement"


class OwnedOverrides(Strict):
    """Owned-hardware and operations figures that replace catalog/owned.yaml's for this requirement, as plain
    numbers in each field's unit (catalog/README.md's owned field table). Unset: the catalog's figure."""

    server_usd_per_node: dict[GpuClass, Annotated[Money, Field(ge=0, le=1e8)]] | None = Field(
        None, description="host (chassis, CPUs, RAM, storage) per reference node without GPUs, USD, by GPU class"
    )
    network_usd_per_node: Money | None = Field(
        None, ge=0, le=1e8, description="NICs, switch ports, cables per node, USD"
    )
    node_power_overhead_w: float | None = Field(None, ge=0, le=1e6, description="non-GPU power per node, W")
    pue: float | None = Field(None, ge=1, le=10, description="facility power / IT power")
    electricity_usd_per_kwh: float | None = Field(None, ge=0, le=100, description="energy price, USD per kWh")
    amortisation_months: Months | None = Field(None, gt=0, le=1200, description="straight-line depreciation, months")
    colocation_usd_per_kw_month: Money | None = Field(
        None, ge=0, le=1e6, description="colocation per kW of IT capacity per month, USD (0: your own room)"
    )
    support_fraction_per_year: float | None = Field(
        None, ge=0, le=10, description="support contract per year, fraction of the hardware price"
    )
    operations_usd_per_server_month: Money | None = Field(
        None, ge=0, le=1e7, description="operations per reference server per month, USD"
    )
    operations_usd_per_gpu_type_month: Money | None = Field(
        None, ge=0, le=1e7, description="operations of each distinct GPU type held, per month, USD"
    )
    operations_usd_per_pool_month: Money | None = Field(
        None, ge=0, le=1e7, description="operations of each serving pool, per month, USD"
    )

    def applied_to(self, base: OwnedCosts) -> OwnedCosts:
        """``base`` with every figure set here replaced (its unit kept, its source ``requirement``)."""
        update: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, dict):
                merged = dict(getattr(base, name))
                for cls, v in value.items():
                    merged[cls] = _figure(merged.get(cls), float(v), "USD per node")
                update[name] = merged
            else:
                update[name] = _figure(getattr(base, name), float(value), _UNITS[name])
        return base.model_copy(update=update)


_UNITS = {  # each figure's unit where the catalog has none to keep (an optional figure it leaves out)
    "network_usd_per_node": "USD per node",
    "node_power_overhead_w": "W per node",
    "pue": "dimensionless",
    "electricity_usd_per_kwh": "USD per kWh",
    "amortisation_months": "months",
    "colocation_usd_per_kw_month": "USD per kW of IT capacity per month",
    "support_fraction_per_year": "fraction of hardware price per year",
    "operations_usd_per_server_month": "USD per server per month",
    "operations_usd_per_gpu_type_month": "USD per distinct GPU type per month",
    "operations_usd_per_pool_month": "USD per serving pool per month",
}


def _figure(was: OwnedFigure | None, value: float, unit: str) -> OwnedFigure:
    """A figure set in the requirement: its value, the catalog's unit, the requirement as its source."""
    return OwnedFigure(
        value=value,
        unit=was.unit if was is not None else unit,
        source=REQUIREMENT_SOURCE,
        as_of="n/a",  # the requirement's own figure: dated by whoever wrote it
        notes="set in the requirement's owned block",
    )


class Quality(Strict):
    max_loss: MaxLoss = Field(
        "fp8_class",
        description="most lossy precision class accepted: none (16-bit), fp8_class, int8_class (int8, fp4), "
        "any (weight-only int4)",
    )


class PinnedConfig(Strict):
    """One configuration to evaluate with ``clusterplan estimate`` (any omitted knob is chosen)."""

    workload: int | str | None = Field(None, description="index or name of the workload to estimate")
    gpu: str | None = Field(None, description="catalog GPU name")
    count: int | None = Field(None, ge=1, le=1_000_000, description="GPUs in total")
    tp: int | None = Field(None, ge=1, le=1024, description="tensor-parallel degree")
    pp: int | None = Field(None, ge=1, le=1024, description="pipeline-parallel degree")
    dp: int | None = Field(None, ge=1, le=1_000_000, description="data-parallel degree or serving replicas")
    burst: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="serving with a demand profile: replicas rented by the hour for the busy hours, beside the dp "
        "replicas that run every hour (all of them run at the peak hour)",
    )
    ep: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="expert-parallel degree of an MoE model: per stage, dividing tp (serving); "
        "over the data x context parallel GPUs, dividing the routed experts (training, fine-tuning)",
    )
    attention_dp: bool | None = Field(None, description="attention data-parallel over each stage's GPUs (serving)")
    zero: Literal[0, 1, 2, 3] | None = Field(None, description="ZeRO stage (training)")
    quant: Quantization | None = Field(None, description="weight precision / quantization")
    kv_quant: KvPrecision | None = Field(None, description="KV-cache precision")
    batch: int | None = Field(None, ge=1, le=1_000_000, description="concurrency (serving) or micro-batch")
    recompute: Literal["none", "selective", "full"] | None = Field(
        None, description="activation recomputation (training)"
    )
    cp: int | None = Field(None, ge=1, le=64, description="context-parallel degree (training)")
    vpp: int | None = Field(None, ge=1, le=64, description="virtual (interleaved) pipeline stages per stage (training)")
    recompute_layers: int | None = Field(
        None, ge=1, le=1024, description="layers of each pipeline stage fully recomputed (training, full recompute)"
    )
    optimizer: Literal["adamw", "adamw8bit", "paged_adamw8bit"] | None = Field(
        None, description="optimizer state (training): AdamW fp32, bitsandbytes 8-bit, or 8-bit paged to the host"
    )
    offload: Literal["none", "optimizer", "activations", "both"] | None = Field(
        None, description="what lives in host memory (training): optimizer state, stored activations, both, none"
    )
    deployment: Literal["cloud", "owned"] | None = Field(
        None, description="price as cloud instances or as owned servers"
    )
    engine: str | None = Field(
        None, max_length=200, description="serving engine to estimate under (replaces the workload's engine name)"
    )
    role: Literal["aggregated", "prefill", "decode"] | None = Field(
        None,
        description="serving: aggregated replicas (default), or one pool of a disaggregated design: prefill "
        "replicas (prompts, then the KV cache sent on) or decode replicas (the output tokens)",
    )
    share: float | None = Field(
        None,
        gt=0,
        le=1,
        description="serving: the share of the workload's demand routed to these replicas (one group of a larger "
        "design: the router's weight), 0-1; unset: all of it",
    )

    @model_validator(mode="after")
    def _known_engine(self) -> PinnedConfig:
        if self.engine is not None:
            Assumptions._known_engine(self.engine)
        return self


class Requirement(Strict):
    """A clusterplan requirement file."""

    name: Name = Field("requirement", description="title used in reports")
    model: ModelRef | None = Field(None, description="the model, unless each workload names its own")
    workloads: list[Workload] = Field(min_length=1, max_length=64, description="what the cluster must do")
    schedule: Literal["sequential", "concurrent"] = Field(
        "concurrent",
        description="sequential: workloads run one after another on the same owned GPUs "
        "(train, then serve); concurrent: they need GPUs at the same time",
    )
    budget: Budget = Field(default_factory=Budget, description="spending limits over the horizon")
    deployment: Deployment = Field(
        "either", description="cloud: rent instances; owned: buy servers; either: the cheaper"
    )
    constraints: Constraints = Field(default_factory=Constraints, description="hardware, power and placement limits")
    fleet: Fleet = Field(default_factory=Fleet, description="rules for the fleet as a whole (GPU types to operate)")
    owned: OwnedOverrides | None = Field(
        None,
        description="owned-hardware and operations figures replacing catalog/owned.yaml's for this requirement "
        "(electricity, PUE, colocation, support, operations, server and network prices)",
    )
    quality: Quality | None = Field(None, description="the quality loss accepted for cheaper precisions")
    assumptions: Assumptions = Field(
        default_factory=Assumptions, description="efficiency factors and defaults to override (docs/model.md)"
    )
    config: PinnedConfig | None = Field(None, description="a pinned configuration for `clusterplan estimate`")
    confidence: float | None = Field(
        None,
        ge=0.5,
        le=0.99,
        description="plan so each throughput, p95 latency and deadline target holds with this probability under "
        "the model's measured error (catalog/model_error.yaml); unset: plan on the point predictions",
    )

    @model_validator(mode="after")
    def _models(self) -> Requirement:
        for i, w in enumerate(self.workloads):
            if w.model is None and self.model is None:
                raise ValueError(f"workloads[{i}] has no model: set the top-level 'model' or the workload's")
        names = [w.name for w in self.workloads]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"workload names must be unique; repeated: {', '.join(sorted(dup))}")
        steady = [w.name for w in self.workloads if not w.interruptible]
        if self.constraints.pricing == "spot" and steady:
            raise ValueError(
                f"constraints.pricing: spot plans every workload on spot capacity, but {', '.join(steady)} does not "
                "say interruptible: true; mark the workloads that tolerate losing their instances, or use "
                "pricing: auto (spot only for interruptible workloads)"
            )
        return self

    @property
    def max_loss(self) -> MaxLoss:
        return self.quality.max_loss if self.quality is not None else DEFAULT_MAX_LOSS

    def allowed_precisions(self) -> frozenset[str]:
        """The weight precisions serving may use: the quality gate's class, narrowed by constraints.quantizations.

        One rule: ``quality.max_loss`` (default fp8_class) decides which precisions are allowed;
        ``constraints.quantizations`` may only narrow that set (a listed precision beyond the gate is
        refused when the requirement is read); the allowed_quant family enforces the result.
        """
        gate = frozenset(QUALITY_CLASSES[self.max_loss])
        listed = self.constraints.quantizations
        if listed is None:
            return gate
        return gate & frozenset("bf16" if q in ("bf16", "fp16") else q for q in listed)

    def owned_costs(self, catalog_owned: OwnedCosts) -> OwnedCosts:
        """The owned-hardware figures this requirement is priced with: the catalog's, with its ``owned`` block's."""
        return catalog_owned if self.owned is None else self.owned.applied_to(catalog_owned)

    def model_of(self, index: int) -> Any:
        w = self.workloads[index]
        return w.model if w.model is not None else self.model


# Training precision maps to a tensor precision on the GPU.
TRAIN_COMPUTE: dict[str, Precision] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp32": "fp32"}
