"""Named efficiency factors and defaults, per hardware class (and engine where it matters).

Every factor has a default per GPU class with the source it comes from; a requirement's
``assumptions:`` block overrides any of them. No factor is keyed to a model-and-GPU pair.
The defaults the planner used are listed in every explanation.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from clusterplan.catalog_schema import GpuClass


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


class Assumptions(BaseModel):
    """Efficiency factors and defaults. Each field documents its unit and source.

    Provisional defaults; ``bench/accuracy.py`` fits them per hardware class against
    ``shared/calibration/measurements.yaml`` and ``docs/model.md`` records the fitted values.

    A per-class factor may be overridden in a requirement's ``assumptions:`` block by one number (all
    classes) or by a mapping of some classes (the others keep their default)::

        assumptions:
          memory_bandwidth_efficiency: {consumer: 0.6}
          compute_efficiency: 0.5
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    memory_bandwidth_efficiency: PerClass = Field(
        default_factory=lambda: _pc(0.80, 0.75, 0.70),
        description="achieved fraction of peak memory bandwidth in decode (aiconfigurator mem-BW x0.8; "
        "kv-planner MBU 0.75)",
    )
    compute_efficiency: PerClass = Field(
        default_factory=lambda: _pc(0.60, 0.55, 0.50),
        description="achieved fraction of dense tensor throughput in inference matmuls (prefill)",
    )
    training_mfu: PerClass = Field(
        default_factory=lambda: _pc(0.45, 0.40, 0.35),
        description="model FLOPs utilisation of training compute before exposed communication "
        "(kv-planner MFU 0.50; llm-analysis warns above 0.55)",
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
        default_factory=lambda: _pc(0.001, 0.001, 0.001),
        description="engine-independent fixed cost of one decode step (scheduling, sampling, launches with "
        "CUDA graphs), seconds; provisional, fitted by bench/accuracy.py",
    )
    scale_up_latency_s: float = Field(
        8e-6,
        ge=0,
        description="start-up latency of one collective over NVLink/Infinity Fabric, seconds "
        "(llm-analysis floors a TP all-reduce at 8 us)",
    )
    pcie_latency_s: float = Field(
        15e-6,
        ge=0,
        description="start-up latency of one collective over PCIe, seconds (assumption between "
        "NVLink 8-10 us and network 20 us)",
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
        mode="before",
    )
    @classmethod
    def _partial_per_class(cls, value: Any, info: ValidationInfo) -> Any:
        """One number sets every class; a mapping of some classes keeps the defaults of the others."""
        if isinstance(value, bool):
            return value
        field = cls.model_fields[info.field_name or ""]
        factory = field.default_factory
        default = factory() if factory is not None else None  # type: ignore[call-arg]
        if isinstance(value, int | float):
            return {"datacenter": value, "workstation": value, "consumer": value}
        if isinstance(value, dict) and isinstance(default, PerClass):
            return {**default.model_dump(), **value}
        if isinstance(value, PerClassOverride) and isinstance(default, PerClass):
            return {**default.model_dump(), **value.model_dump(exclude_none=True)}
        return value

    def used(self, gpu_class: GpuClass) -> dict[str, float | int | bool]:
        """The value of every factor for one GPU class (what an explanation lists)."""
        out: dict[str, float | int | bool] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            out[name] = value.of(gpu_class) if isinstance(value, PerClass) else value
        return out

    def overridden(self) -> list[str]:
        """Names of the factors a requirement set explicitly."""
        return sorted(self.model_fields_set)
