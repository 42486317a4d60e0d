"""Named efficiency factors and defaults, per hardware class (and engine where it matters).

Every factor has a default per GPU class with the source it comes from; a requirement's
``assumptions:`` block overrides any of them. No factor is keyed to a model-and-GPU pair.
The defaults the planner used are listed in every explanation.
"""

from __future__ import annotations

from clusterplan.catalog_schema import GpuClass
from pydantic import BaseModel, ConfigDict, Field


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
        description="thermal derate of dense sustained deployments (seeds: consumer cards lose 15-25%)",
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
