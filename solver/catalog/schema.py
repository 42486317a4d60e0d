"""Pydantic models of catalog rows: GPUs, cloud instances, model architectures, owned-hardware costs.

These are the contract between the catalog data (``catalog/*.yaml``), the physics and the planner.
Every numeric field names its unit; every row carries ``source`` (a key of the catalog's ``sources``
map, or a URL) and ``as_of`` (the date the figure was read, ISO ``YYYY-MM-DD`` or ``YYYY-MM``).
``provisional: true`` marks figures the reference sheet calls recalled or derived.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from clusterplan.errors import CONTROL_CHARACTERS, printable, quoted

# fp4: 4-bit floating point (E2M1) with block scales: NVFP4 (an FP8 E4M3 scale per 16 values) on NVIDIA
# Blackwell, MXFP4 (an E8M0 scale per 32, OCP Microscaling v1.0) on AMD CDNA 4 and, weight-only, elsewhere.
Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]
GpuClass = Literal["datacenter", "workstation", "consumer"]
HostCpu = Literal["x86", "arm"]
MoeDispatch = Literal["all_to_all", "allgather"]
ScaleUp = Literal["nvlink", "infinity_fabric", "pcie"]
Provider = str  # 'aws', 'gcp', 'azure', 'lambda', 'runpod', 'coreweave', ...
# What kind of seller a provider is (catalog/providers.yaml): hyperscalers and GPU clouds run their own
# datacenters; a marketplace resells hosts it does not operate (Vast.ai, RunPod Community Cloud).
ProviderTier = Literal["hyperscaler", "gpu_cloud", "marketplace"]
PROVIDER_TIERS: tuple[ProviderTier, ...] = ("hyperscaler", "gpu_cloud", "marketplace")
# The fabric between a provider's instances: EFA (AWS), InfiniBand, RoCE, or none (Ethernet only).
Interconnect = Literal["infiniband", "roce", "efa", "none"]
# Precisions quality.yaml has published deltas for (fp4: NVFP4 or MXFP4 weights).
QualityPrecision = Literal["fp8", "int8", "int4", "fp4"]

# Ranges of the physics figures every catalog row obeys, the shipped catalog and a user's alike
# (docs/guarantees.md section 1). Each is 10 to 100 times beyond the largest shipped figure, so no
# real part is refused, while a typo (memory_gib: 1e308) or a sign slip (reference_node_gpus: -8) is,
# located, before it can overflow the planner's integers or price a server below zero.
# tests/test_hostile_classes.py loads the shipped catalog under them and reports its extremes.
MAX_GPU_MEMORY_GIB = 4096.0  # shipped largest: 286.8 GiB (MI355X, memory_gb 288)
MAX_BANDWIDTH_GB_PER_S = 100_000.0  # shipped largest: 8,000 GB/s of HBM, 1,800 GB/s of NVLink
MAX_PCIE_BANDWIDTH_GB_PER_S = 1_000.0  # shipped largest: 128 GB/s (PCIe 5 x16, both directions)
MAX_DENSE_TFLOPS = 1_000_000.0  # shipped largest: 15,000 (GB300 fp4, dense)
MIN_DENSE_TFLOPS = 0.1  # shipped smallest: 8.1 (fp32); a precision without support is left out, not 0
MAX_TDP_W = 10_000.0  # shipped largest: 1,400 W (GB300, MI355X)
MAX_GPUS_PER_NODE = 1024  # shipped largest: 72 (GB200 / GB300 NVL72 racks: one NVLink domain; NVL576 is 576)
MAX_NETWORK_GBIT_PER_S = 100_000.0  # shipped largest: 3,200 Gbit/s
MAX_LAYERS = 2048  # shipped largest: 126
MAX_HIDDEN_SIZE = 262_144  # 2**18; shipped largest: 20,480
MAX_HEADS = 4096  # attention or key/value heads, and head_dim; shipped largest: 232 heads, head_dim 256
MAX_FFN_SIZE = 1_048_576  # 2**20; shipped largest: 81,920
MAX_VOCAB_SIZE = 4_194_304  # 2**22; shipped largest: 250,680
MAX_EXPERTS = 4096  # shipped largest: 384 routed experts (Kimi K2)
MAX_CONTEXT_TOKENS = 100_000_000  # shipped largest: 10,485,760 (Llama 4 Scout)
MAX_PUBLISHED_PARAMS = 1e14  # shipped largest: 1.04e12 (Kimi K2)
MAX_MTP_LAYERS = 16  # multi-token-prediction modules; shipped largest: 1 (DeepSeek-V3, GLM-4.5)

MAX_LABEL_CHARS = 200  # ids and names are labels in tables; a 3,000,000-character name took 41 s to render

NodeGpus = Annotated[int, Field(ge=1, le=MAX_GPUS_PER_NODE)]
_CONTROL_IN_NAME = re.compile("[" + re.escape("".join(sorted(CONTROL_CHARACTERS))) + "]")


def visible_name(value: str) -> str:
    """A name without control, bidirectional or zero-width characters: names become table labels, script comments
    and file names, where a newline ran code (``chat\\ntouch x`` in an exported script) and ESC drove the terminal."""
    bad = _CONTROL_IN_NAME.search(value)
    if bad is not None:
        raise ValueError(
            f"the name {quoted(value)} holds a control or invisible character ({printable(bad.group())} at character"
            f" {bad.start() + 1}): write it in visible characters (letters, digits, spaces, punctuation)"
        )
    return value


Label = Annotated[str, Field(min_length=1, max_length=MAX_LABEL_CHARS), AfterValidator(visible_name)]


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceRef(Row):
    title: str
    url: str | None = None
    alt_url: str | None = Field(None, description="a second address for the same source")
    as_of: str | None = Field(None, description="when the source was read or published")
    kind: str | None = Field(None, description="what sort of source: vendor primary, price catalog, estimate, ...")


class Provenance(Row):
    source: str = Field(description="key into the catalog's sources map, or a URL")
    as_of: str = Field(description="date the figure was read or published, YYYY-MM-DD or YYYY-MM")
    provisional: bool = Field(False, description="recalled or derived, not checked against a stored copy")
    provisional_fields: list[str] = Field(
        default_factory=list, description="which fields of the row are recalled or derived (empty: all or none)"
    )
    also_sources: list[str] = Field(
        default_factory=list, description="further source keys (or URLs) that confirm or qualify the figures"
    )
    notes: str | None = None


class DenseThroughput(Row):
    """Dense (no 2:4 sparsity) tensor throughput. None = not supported natively."""

    bf16_tflops: float | None = Field(None, ge=MIN_DENSE_TFLOPS, le=MAX_DENSE_TFLOPS, description="TFLOPS, dense")
    fp16_tflops: float | None = Field(None, ge=MIN_DENSE_TFLOPS, le=MAX_DENSE_TFLOPS, description="TFLOPS, dense")
    fp8_tflops: float | None = Field(None, ge=MIN_DENSE_TFLOPS, le=MAX_DENSE_TFLOPS, description="TFLOPS, dense")
    int8_tops: float | None = Field(None, ge=MIN_DENSE_TFLOPS, le=MAX_DENSE_TFLOPS, description="TOPS, dense")
    int4_tops: float | None = Field(None, ge=MIN_DENSE_TFLOPS, le=MAX_DENSE_TFLOPS, description="TOPS, dense")
    fp4_tflops: float | None = Field(
        None,
        ge=MIN_DENSE_TFLOPS,
        le=MAX_DENSE_TFLOPS,
        description="TFLOPS, dense, block-scaled FP4 tensor cores (NVFP4 on Blackwell, MXFP4 on CDNA 4)",
    )
    fp32_tflops: float | None = Field(
        None, ge=MIN_DENSE_TFLOPS, le=MAX_DENSE_TFLOPS, description="TFLOPS, non-tensor FP32"
    )


class PurchasePrice(Provenance):
    usd: float = Field(gt=0, description="USD per GPU (street or list price)")
    kind: str = Field("street", description="'list', 'street', 'estimate'")


class GpuSpec(Provenance):
    id: Label = Field(description="catalog key, lower-case with dashes, e.g. 'h100-sxm'")
    aliases: list[Label] = Field(default_factory=list, description="other names accepted for this GPU")
    name: Label
    vendor: Literal["nvidia", "amd", "intel"]
    architecture: Label
    compute_capability: str | None = Field(None, description="NVIDIA CUDA compute capability, e.g. '9.0'")
    gpu_class: GpuClass
    memory_gb: float = Field(ge=1, le=MAX_GPU_MEMORY_GIB, description="marketed capacity in GB as on the datasheet")
    memory_gib: float = Field(ge=1, le=MAX_GPU_MEMORY_GIB, description="capacity the driver reports, GiB")
    bandwidth_gb_per_s: float = Field(
        ge=1, le=MAX_BANDWIDTH_GB_PER_S, description="HBM/GDDR bandwidth, GB/s (10^9 B/s)"
    )
    dense: DenseThroughput
    native_precisions: list[Precision] = Field(description="precisions with native tensor-core support")
    scale_up: ScaleUp = Field(description="intra-node GPU-to-GPU link")
    scale_up_bandwidth_gb_per_s: float = Field(
        ge=1,
        le=MAX_BANDWIDTH_GB_PER_S,
        description="per-GPU bidirectional scale-up bandwidth, GB/s (NVLink/IF; PCIe x16 if none)",
    )
    scale_up_domain: int = Field(
        ge=1, le=MAX_GPUS_PER_NODE, description="GPUs sharing one NVLink/IF domain (1 = no scale-up link)"
    )
    pcie_gen: int = Field(ge=3, le=6)
    pcie_bandwidth_gb_per_s: float = Field(
        ge=1, le=MAX_PCIE_BANDWIDTH_GB_PER_S, description="PCIe x16 bidirectional, GB/s"
    )
    tdp_w: float = Field(ge=1, le=MAX_TDP_W, description="board power, W")
    host_cpu: HostCpu = Field(
        "x86", description="the host CPU class of the systems it ships in: x86 (HGX/DGX), arm (Grace superchips)"
    )
    max_gpus_per_node: int = Field(8, ge=1, le=MAX_GPUS_PER_NODE, description="largest server this GPU ships in")
    owned_node_sizes: list[NodeGpus] | None = Field(
        None,
        description="server sizes (GPUs per node) this GPU is sold in, e.g. [8] for HGX B200 boards; "
        "default: the owned node_sizes up to max_gpus_per_node",
    )
    price: PurchasePrice | None = None
    measured_training_mfu: float | None = Field(
        None,
        gt=0,
        le=1.5,
        description="training_mfu measured on this GPU (a `clusterplan calibrate` overlay from a step-time log); "
        "None: the GPU class's Assumptions training_mfu. A requirement's own training_mfu wins",
    )
    # The kernels.yaml row of this GPU's architecture, set by the catalog that holds the row (Catalog.__post_init__);
    # not a field: a GPU row does not name it, and it is not part of the row's data or its fingerprint.
    _kernels: ArchitectureKernels | None = PrivateAttr(default=None)

    @property
    def kernels(self) -> ArchitectureKernels | None:
        """The kernel fits of this GPU's architecture in the catalog it came from (None: not from a catalog)."""
        return self._kernels

    def with_kernels(self, kernels: ArchitectureKernels | None) -> GpuSpec:
        """A copy of the row that carries ``kernels`` (the row itself is shared by catalogs and left alone)."""
        copy = self.model_copy()
        copy._kernels = kernels
        return copy

    @model_validator(mode="after")
    def _consistent(self) -> GpuSpec:
        if self.memory_gib > self.memory_gb * 1.08:
            raise ValueError(
                f"memory_gib {self.memory_gib} exceeds memory_gb {self.memory_gb} by more than the GiB/GB ratio allows"
            )
        if self.scale_up == "pcie" and self.scale_up_domain != 1:
            raise ValueError("a PCIe-only GPU has scale_up_domain 1")
        if self.scale_up_domain > self.max_gpus_per_node:
            raise ValueError("scale_up_domain cannot exceed max_gpus_per_node")
        if self.owned_node_sizes is not None and (not self.owned_node_sizes or min(self.owned_node_sizes) < 1):
            raise ValueError("owned_node_sizes must be a non-empty list of positive GPU counts")
        return self

    def tflops(self, precision: Precision) -> float | None:
        """Dense tensor throughput for a compute precision (TFLOPS or TOPS), None if not native."""
        field = {
            "bf16": "bf16_tflops",
            "fp16": "fp16_tflops",
            "fp8": "fp8_tflops",
            "int8": "int8_tops",
            "int4": "int4_tops",
            "fp32": "fp32_tflops",
            "fp4": "fp4_tflops",
        }[precision]
        value: float | None = getattr(self.dense, field)
        return value


# The commitment terms a cloud sells beside on-demand and spot, in months: AWS Savings Plans and Reserved Instances,
# Azure Reserved VM Instances and GCP committed-use discounts all come in 1- and 3-year terms (providers.yaml).
CommitmentMonths = Literal[12, 36]
Payment = Literal["no_upfront", "partial_upfront", "all_upfront"]


class CommittedPrice(Provenance):
    """One commitment term of a cloud instance: its effective hourly rate, owed for the whole term."""

    term_months: CommitmentMonths = Field(description="length of the commitment, months (12 or 36)")
    usd_per_hour: float = Field(
        gt=0, description="whole instance, USD/hour, effective over the term (an upfront payment spread over its hours)"
    )
    payment: Payment = Field("no_upfront", description="how the provider bills it: no, partial or all upfront")


class CloudInstance(Provenance):
    id: Label = Field(description="provider's instance name, e.g. 'p5.48xlarge' (unique per provider)")
    provider: Label
    gpu_id: Label = Field(description="key into gpus")
    gpus_per_instance: int = Field(ge=1, le=MAX_GPUS_PER_NODE)
    gpu_link: ScaleUp = Field(description="GPU-to-GPU link inside the instance")
    network_gbit_per_s: float | None = Field(
        None, ge=1, le=MAX_NETWORK_GBIT_PER_S, description="inter-instance network, Gbit/s"
    )
    on_demand_usd_per_hour: float = Field(gt=0, description="whole instance, USD/hour")
    spot_usd_per_hour: float | None = Field(None, gt=0, description="whole instance, USD/hour, point-in-time")
    commitments: list[CommittedPrice] = Field(
        default_factory=list, description="1- and 3-year committed or reserved rates, each with its own source"
    )
    region: Label
    per_gpu_pricing: bool = Field(False, description="price derived from a per-GPU-hour list price")
    tier: ProviderTier | None = Field(
        None, description="this offer's tier where it differs from its provider's (RunPod Community Cloud)"
    )

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.id}"

    def commitment(self, term_months: int) -> CommittedPrice | None:
        """The row's committed rate of ``term_months`` (None: the catalog holds none)."""
        return next((c for c in self.commitments if c.term_months == term_months), None)


class ProviderSpec(Provenance):
    """A cloud provider: what kind of seller it is and what it sells between instances (providers.yaml)."""

    id: Label = Field(description="the `provider` of instances.yaml rows, lower case")
    name: Label
    tier: ProviderTier
    interconnect: Interconnect = Field(description="fabric between the priced instances (none: Ethernet only)")
    interconnect_gbit_per_s: float | None = Field(
        None, ge=1, le=MAX_NETWORK_GBIT_PER_S, description="fabric per 8-GPU instance, Gbit/s"
    )
    largest_cluster_gpus: int | None = Field(
        None, ge=1, le=10_000_000, description="largest single cluster it has publicly built or sold, GPUs"
    )
    commitment: str | None = Field(None, description="reserved / committed-use terms, where public")
    spot: str | None = Field(None, description="spot or preemptible terms, where public (None: none sold)")

    @property
    def has_fabric(self) -> bool:
        return self.interconnect != "none"


class QualityDelta(Provenance):
    """A published quality loss of one precision on one model family against its 16-bit baseline."""

    id: Label = Field(description="row key, e.g. 'llama-3.1-70b-fp8'")
    precision: QualityPrecision = Field(description="the planner's weight precision this method serves as")
    method: Label = Field(description="the published recipe: 'FP8 W8A8', 'SmoothQuant W8A8', 'AWQ W4A16', ...")
    models: list[Label] = Field(
        default_factory=list, description="catalog model ids it was measured on (empty: a cross-family figure)"
    )
    loss_pct: float = Field(ge=-100, le=100, description="quality lost vs 16-bit on `metric`, percent (negative: gain)")
    metric: Label = Field(description="what was measured: 'OpenLLM v1 average', 'average recovery', ...")


MAX_API_USD_PER_MILLION_TOKENS = 10_000.0  # shipped largest: $2.40 (DeepSeek-R1 output); frontier APIs list under $200


class ApiPrice(Provenance):
    """A hosted inference API's list price for one model (api_prices.yaml): the self-host-versus-API yardstick."""

    id: Label = Field(description="row key, e.g. 'deepinfra-llama-3.1-70b'")
    provider: Label = Field(description="who sells the API, as they name themselves: 'DeepInfra', 'Together AI'")
    served_model: Label = Field(description="the provider's own name of the model it serves")
    model: Label | None = Field(None, description="catalog model id the API serves (the same weights)")
    equivalent: Label | None = Field(
        None, description="catalog model id the API stands in for when it serves another model (a newer revision)"
    )
    usd_per_million_input_tokens: float = Field(
        ge=0, le=MAX_API_USD_PER_MILLION_TOKENS, description="list price per 1e6 prompt tokens, USD"
    )
    usd_per_million_output_tokens: float = Field(
        ge=0, le=MAX_API_USD_PER_MILLION_TOKENS, description="list price per 1e6 generated tokens, USD"
    )

    @model_validator(mode="after")
    def _one_model(self) -> ApiPrice:
        if (self.model is None) == (self.equivalent is None):
            raise ValueError(
                "give exactly one of model (the catalog model it serves) or equivalent (the one it stands in for)"
            )
        return self

    @property
    def model_id(self) -> str:
        """The catalog model this price is compared against (served or stood in for)."""
        return self.model or self.equivalent or ""


AttentionWindowKind = Literal["sliding", "chunked"]


class ModelArchitecture(Row):
    """A transformer's shape. Enough to count parameters, FLOPs and KV-cache bytes.

    Beyond the classic fields: an MoE model's expert width (``moe_intermediate_size``), shared experts, dense
    first layers and MoE layer frequency; multi-head latent attention (MLA, DeepSeek-V2/V3: ``kv_lora_rank``
    and friends); local attention (a sliding or chunked window on all layers or all but every n-th); and
    multi-token-prediction modules; hybrid Gated DeltaNet linear attention (``full_attention_every``, ``linear_*``:
    a linear layer holds a fixed state per sequence, no KV) and a gated attention output. Layer ``i`` (0-based) is an MoE layer when ``i >= first_k_dense_replace``
    and ``(i + 1) % moe_layer_freq == 0`` (Hugging Face ``Qwen3MoeDecoderLayer`` / Llama 4 ``moe_layers``);
    it is a global-attention layer when ``global_attention_every`` is unset and there is no window, or
    ``(i + 1) % global_attention_every == 0`` (gpt-oss ``layer_types``, Llama 4 ``no_rope_layers``, Gemma 3).
    """

    name: Label
    layers: int = Field(ge=1, le=MAX_LAYERS)
    hidden_size: int = Field(ge=1, le=MAX_HIDDEN_SIZE)
    attention_heads: int = Field(ge=1, le=MAX_HEADS)
    kv_heads: int = Field(ge=1, le=MAX_HEADS, description="key/value heads (GQA/MQA); = attention_heads for MHA")
    head_dim: int | None = Field(None, ge=1, le=MAX_HEADS, description="defaults to hidden_size / attention_heads")
    ffn_size: int = Field(
        ge=1,
        le=MAX_FFN_SIZE,
        description="intermediate size of a dense layer's MLP (of one expert when moe_intermediate_size is unset)",
    )
    vocab_size: int = Field(ge=1, le=MAX_VOCAB_SIZE)
    gated_mlp: bool = Field(True, description="SwiGLU-style MLP with three matrices (False: two, e.g. GELU)")
    moe_experts: int = Field(1, ge=1, le=MAX_EXPERTS, description="routed experts per MoE layer (1 = dense)")
    experts_per_token: int = Field(1, ge=1, le=MAX_EXPERTS, description="routed experts each token uses (top-k)")
    moe_intermediate_size: int | None = Field(
        None, ge=1, le=MAX_FFN_SIZE, description="intermediate size of one routed expert; defaults to ffn_size"
    )
    shared_experts: int = Field(0, ge=0, le=MAX_EXPERTS, description="always-active experts in each MoE layer")
    shared_expert_size: int | None = Field(
        None, ge=1, le=MAX_FFN_SIZE, description="intermediate size of one shared expert; defaults to the expert's"
    )
    first_k_dense_replace: int = Field(
        0, ge=0, le=MAX_LAYERS, description="leading layers with a dense MLP before the MoE layers (DeepSeek-V3: 3)"
    )
    moe_layer_freq: int = Field(
        1, ge=1, le=MAX_LAYERS, description="every n-th layer is MoE, the others dense (Llama 4 Maverick: 2)"
    )
    kv_lora_rank: int | None = Field(
        None, ge=1, le=MAX_FFN_SIZE, description="MLA: compressed key/value latent width (DeepSeek-V3: 512)"
    )
    q_lora_rank: int | None = Field(
        None, ge=1, le=MAX_FFN_SIZE, description="MLA: compressed query width (None: a full query projection)"
    )
    qk_rope_head_dim: int | None = Field(
        None, ge=1, le=MAX_HEADS, description="MLA: rotary part of each query/key head, cached once per token"
    )
    qk_nope_head_dim: int | None = Field(None, ge=1, le=MAX_HEADS, description="MLA: non-rotary part of a q/k head")
    v_head_dim: int | None = Field(None, ge=1, le=MAX_HEADS, description="MLA: value head width")
    attention_window: int | None = Field(
        None, ge=1, le=MAX_CONTEXT_TOKENS, description="tokens a local-attention layer attends to (None: all global)"
    )
    attention_window_kind: AttentionWindowKind = Field(
        "sliding", description="'sliding' (the last n tokens) or 'chunked' (the current n-token chunk; Llama 4)"
    )
    global_attention_every: int | None = Field(
        None,
        ge=2,
        le=MAX_LAYERS,
        description="with a window: every n-th layer attends globally (gpt-oss 2, Llama 4 4, Gemma 3 6); "
        "None: every layer is local",
    )
    full_attention_every: int | None = Field(
        None,
        ge=1,
        le=MAX_LAYERS,
        description="hybrid linear attention: every n-th layer is full (softmax) attention, the others Gated "
        "DeltaNet linear attention with a fixed-size state (Qwen3-Next / Qwen3.5 full_attention_interval 4); "
        "None: no linear-attention layers",
    )
    linear_key_heads: int | None = Field(None, ge=1, le=MAX_HEADS, description="linear attention: key heads")
    linear_value_heads: int | None = Field(None, ge=1, le=MAX_HEADS, description="linear attention: value heads")
    linear_key_head_dim: int | None = Field(None, ge=1, le=MAX_HEADS, description="linear attention: key head width")
    linear_value_head_dim: int | None = Field(
        None, ge=1, le=MAX_HEADS, description="linear attention: value head width"
    )
    linear_conv_kernel: int | None = Field(
        None, ge=1, le=MAX_HEADS, description="linear attention: short causal convolution's kernel (Qwen3-Next 4)"
    )
    linear_state_bytes: int = Field(
        2, ge=1, le=8, description="bytes per value of the linear-attention recurrent state (Qwen3.5 float32: 4)"
    )
    attention_output_gate: bool = Field(
        False, description="full-attention output gated by a projection of the input (Qwen3-Next attn_output_gate)"
    )
    mtp_layers: int = Field(
        0,
        ge=0,
        le=MAX_MTP_LAYERS,
        description="multi-token-prediction modules: held and run only under speculative decoding method mtp",
    )
    tied_embeddings: bool = False
    max_context: int | None = Field(None, ge=1, le=MAX_CONTEXT_TOKENS, description="tokens")
    published_params: float | None = Field(
        None, gt=0, le=MAX_PUBLISHED_PARAMS, description="parameter count the publisher states"
    )
    chat_checkpoint: str | None = Field(
        None,
        description="the instruct/chat checkpoint of this architecture a chat service serves (a Hugging Face "
        "repository; `clusterplan export` launches it); None: the checkpoint in `source` is the one served",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ModelArchitecture:
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads ({self.attention_heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if self.experts_per_token > self.moe_experts:
            raise ValueError("experts_per_token cannot exceed moe_experts")
        self._check_moe()
        self._check_mla()
        self._check_window()
        self._check_linear()
        return self

    def _check_linear(self) -> None:
        linear = {
            "linear_key_heads": self.linear_key_heads,
            "linear_value_heads": self.linear_value_heads,
            "linear_key_head_dim": self.linear_key_head_dim,
            "linear_value_head_dim": self.linear_value_head_dim,
            "linear_conv_kernel": self.linear_conv_kernel,
        }
        if self.full_attention_every is None or self.full_attention_every == 1:
            given = [k for k, v in linear.items() if v is not None]
            if given and self.full_attention_every is None:
                raise ValueError(f"{given[0]} describes linear-attention layers, but full_attention_every is not set")
            return
        missing = [k for k, v in linear.items() if v is None]
        if missing:
            raise ValueError(f"linear-attention layers need {', '.join(missing)}")
        if self.attention_window is not None or self.kv_lora_rank is not None:
            raise ValueError("linear-attention layers beside a window or MLA are not modelled")
        assert self.linear_value_heads is not None and self.linear_key_heads is not None
        if self.linear_value_heads % self.linear_key_heads:
            raise ValueError("linear_value_heads must be a multiple of linear_key_heads")

    def _check_moe(self) -> None:
        if self.moe_experts == 1:
            dense_only = {
                "moe_intermediate_size": self.moe_intermediate_size is not None,
                "shared_experts": self.shared_experts > 0,
                "shared_expert_size": self.shared_expert_size is not None,
                "first_k_dense_replace": self.first_k_dense_replace > 0,
                "moe_layer_freq": self.moe_layer_freq > 1,
            }
            for name, is_set in dense_only.items():
                if is_set:
                    raise ValueError(f"{name} describes MoE layers, but moe_experts is 1 (a dense model)")
            return
        if self.shared_expert_size is not None and self.shared_experts == 0:
            raise ValueError("shared_expert_size is set, but shared_experts is 0")
        if self.moe_layer_count == 0:
            raise ValueError(
                f"first_k_dense_replace ({self.first_k_dense_replace}) and moe_layer_freq ({self.moe_layer_freq}) "
                f"leave none of the {self.layers} layers an MoE layer"
            )

    def _check_mla(self) -> None:
        mla = {
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "v_head_dim": self.v_head_dim,
        }
        given = [k for k, v in mla.items() if v is not None]
        if not given and self.q_lora_rank is None:
            return
        missing = [k for k, v in mla.items() if v is None]
        if missing:
            raise ValueError(
                "multi-head latent attention needs kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim and v_head_dim; "
                f"missing {', '.join(missing)}"
            )
        if self.kv_heads != self.attention_heads:
            raise ValueError(
                f"with multi-head latent attention kv_heads ({self.kv_heads}) must equal attention_heads "
                f"({self.attention_heads}): every head reads the one shared latent"
            )
        if self.head_dim is not None:
            raise ValueError("with multi-head latent attention, give qk_nope_head_dim and v_head_dim, not head_dim")

    def _check_window(self) -> None:
        if self.attention_window is None:
            if self.global_attention_every is not None:
                raise ValueError("global_attention_every is set, but attention_window is not")
            if self.attention_window_kind != "sliding":
                raise ValueError("attention_window_kind is set, but attention_window is not")

    @property
    def head_dim_eff(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.attention_heads

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2 §2.1, arXiv:2405.04434): one latent cached per token."""
        return self.kv_lora_rank is not None

    @property
    def expert_ffn_size(self) -> int:
        """Intermediate size of one routed expert."""
        return self.moe_intermediate_size if self.moe_intermediate_size is not None else self.ffn_size

    @property
    def shared_ffn_size(self) -> int:
        """Intermediate size of one shared expert."""
        return self.shared_expert_size if self.shared_expert_size is not None else self.expert_ffn_size

    def is_moe_layer(self, index: int) -> bool:
        """Layer ``index`` (0-based) has routed experts."""
        return self.moe_experts > 1 and index >= self.first_k_dense_replace and (index + 1) % self.moe_layer_freq == 0

    def is_local_layer(self, index: int) -> bool:
        """Layer ``index`` (0-based) attends over a window, not the whole context."""
        if self.attention_window is None:
            return False
        return self.global_attention_every is None or (index + 1) % self.global_attention_every != 0

    def is_linear_layer(self, index: int) -> bool:
        """Layer ``index`` (0-based) is a Gated DeltaNet linear-attention layer (Qwen3-Next ``layer_types``)."""
        every = self.full_attention_every
        return every is not None and every > 1 and (index + 1) % every != 0

    @property
    def linear_layer_count(self) -> int:
        """Linear-attention layers: all but every ``full_attention_every``-th."""
        every = self.full_attention_every
        return 0 if every is None or every == 1 else self.layers - self.layers // every

    @property
    def softmax_layer_count(self) -> int:
        """Layers with softmax attention and a KV cache (global or local): all but the linear ones."""
        return self.layers - self.linear_layer_count

    @property
    def moe_layer_count(self) -> int:
        """Layers with routed experts: ``i + 1`` in ``(k, layers]`` divisible by the frequency."""
        if self.moe_experts <= 1:
            return 0
        k, f = self.first_k_dense_replace, self.moe_layer_freq
        return max(self.layers // f - k // f, 0)

    @property
    def local_layer_count(self) -> int:
        """Layers that attend over a window: all, or all but every ``global_attention_every``-th."""
        if self.attention_window is None:
            return 0
        every = self.global_attention_every
        return self.layers if every is None else self.layers - self.layers // every

    @property
    def uniform_layers(self) -> bool:
        """Every layer has the same parameters (no dense-first layers, no every-n-th MoE)."""
        return self.moe_experts <= 1 or (self.first_k_dense_replace == 0 and self.moe_layer_freq == 1)


class CatalogModel(ModelArchitecture):
    """A model architecture as listed in the catalog, with provenance and aliases."""

    id: Label = Field(description="catalog key, e.g. 'llama-3.1-70b'")
    aliases: list[Label] = Field(default_factory=list)
    source: str
    as_of: str
    provisional: bool = Field(False, description="a figure (usually published_params) is recalled, not read")
    notes: str | None = None


class OwnedFigure(Provenance):
    value: float = Field(ge=0)
    unit: str


def _reference_node_gpus() -> dict[GpuClass, int]:
    return {"datacenter": 8, "workstation": 4, "consumer": 4}


class OwnedCosts(Row):
    """Assumptions for owned hardware; each figure carries its own provenance."""

    server_usd_per_node: dict[GpuClass, OwnedFigure] = Field(
        description="chassis, CPUs, RAM, storage per node excluding GPUs, USD, by GPU class"
    )
    network_usd_per_node: OwnedFigure = Field(description="NICs, switch ports, cables per node, USD")
    node_power_overhead_w: OwnedFigure = Field(description="non-GPU power per node (CPUs, fans, NICs), W")
    pue: OwnedFigure = Field(description="power usage effectiveness, dimensionless >= 1")
    electricity_usd_per_kwh: OwnedFigure
    amortisation_months: OwnedFigure
    network_usd_per_node_by_class: dict[GpuClass, OwnedFigure] = Field(
        default_factory=dict, description="network_usd_per_node for a GPU class where it differs, USD"
    )
    node_power_overhead_w_by_class: dict[GpuClass, OwnedFigure] = Field(
        default_factory=dict, description="node_power_overhead_w for a GPU class where it differs, W"
    )
    colocation_usd_per_kw_month: OwnedFigure | None = Field(
        None, description="wholesale colocation per kW of IT capacity per month, USD (optional)"
    )
    support_fraction_per_year: OwnedFigure | None = Field(
        None, description="hardware support contract per year as a fraction of hardware price (optional)"
    )
    operations_usd_per_server_month: OwnedFigure | None = Field(
        None,
        description="operations (staff, remote hands, monitoring) per reference server per month, USD (optional; "
        "none shipped: no source gives one)",
    )
    operations_usd_per_gpu_type_month: OwnedFigure | None = Field(
        None,
        description="operations of each distinct GPU type a design runs (owned servers or cloud serving instances), "
        "per month, USD: its driver, CUDA and engine images qualified, its kernels benchmarked, its spares and vendor "
        "contact (optional; 0 when absent)",
    )
    operations_usd_per_pool_month: OwnedFigure | None = Field(
        None,
        description="operations of each serving pool (a workload's aggregated, prefill or decode replicas of one GPU "
        "type on cloud or owned), per month, USD: its deployment, autoscaling, dashboards, alerts and capacity "
        "reviews (optional; 0 when absent)",
    )
    node_sizes: list[NodeGpus] = Field(
        default_factory=lambda: [1, 2, 4, 8], min_length=1, description="GPUs per owned server"
    )
    reference_node_gpus: dict[GpuClass, NodeGpus] = Field(
        default_factory=_reference_node_gpus,
        description="GPU slots of the node the per-node figures describe, by class; smaller nodes scale down",
    )

    def sizes_for(self, gpu: GpuSpec) -> list[int]:
        """Owned server sizes a GPU can be bought in, ascending (its own list, else ours up to its maximum)."""
        own = gpu.owned_node_sizes if gpu.owned_node_sizes is not None else self.node_sizes
        # A user catalog that lowers max_gpus_per_node (a rack power limit) clips the sizes on sale.
        return sorted(s for s in own if s <= gpu.max_gpus_per_node) or [gpu.max_gpus_per_node]

    def node_fraction(self, gpu_class: GpuClass, node_gpus: int) -> float:
        """Share of a reference node's chassis, network and overhead a node of ``node_gpus`` carries.

        Assumption (catalog/README.md): per-node figures describe a full node of ``reference_node_gpus``;
        a smaller node costs and draws in proportion to its GPU slots, so a 1-GPU L4 box is not priced
        as an 8-GPU HGX server. Larger nodes than the reference are priced as full nodes per reference.
        """
        reference = self.reference_node_gpus.get(gpu_class, 8)
        return node_gpus / reference

    def server_usd_for_node(self, gpu_class: GpuClass, node_gpus: int) -> float:
        """Chassis, CPUs, RAM and storage of one node of ``node_gpus`` GPUs, USD (GPUs excluded)."""
        figure = self.server_usd_per_node.get(gpu_class)
        return 0.0 if figure is None else figure.value * self.node_fraction(gpu_class, node_gpus)

    def network_usd_for_node(self, gpu_class: GpuClass, node_gpus: int) -> float:
        """Network share (NICs, switch ports, cables) of one node of ``node_gpus`` GPUs, USD."""
        return self.network_usd_for(gpu_class).value * self.node_fraction(gpu_class, node_gpus)

    def power_overhead_w_for_node(self, gpu_class: GpuClass, node_gpus: int) -> float:
        """Non-GPU power of one node of ``node_gpus`` GPUs, W."""
        return self.power_overhead_w_for(gpu_class).value * self.node_fraction(gpu_class, node_gpus)

    def colocation_rate(self) -> float:
        """Colocation per kW of IT power per month, USD (0 when the catalog gives none)."""
        f = self.colocation_usd_per_kw_month
        return 0.0 if f is None else f.value

    def support_rate(self) -> float:
        """Support contract per year as a fraction of hardware price (0 when the catalog gives none)."""
        f = self.support_fraction_per_year
        return 0.0 if f is None else f.value

    def operations_usd_for_node(self, gpu_class: GpuClass, node_gpus: int) -> float:
        """Operations per month of one node of ``node_gpus`` GPUs, USD (0 when the catalog gives none)."""
        f = self.operations_usd_per_server_month
        return 0.0 if f is None else f.value * self.node_fraction(gpu_class, node_gpus)

    def gpu_type_operations_rate(self) -> float:
        """Operations of one distinct GPU type per month, USD (0 when the catalog gives none)."""
        f = self.operations_usd_per_gpu_type_month
        return 0.0 if f is None else f.value

    def pool_operations_rate(self) -> float:
        """Operations of one serving pool per month, USD (0 when the catalog gives none)."""
        f = self.operations_usd_per_pool_month
        return 0.0 if f is None else f.value

    def network_usd_for(self, gpu_class: GpuClass) -> OwnedFigure:
        """Network cost per node for servers of this GPU class (the class override, else the default)."""
        return self.network_usd_per_node_by_class.get(gpu_class, self.network_usd_per_node)

    def power_overhead_w_for(self, gpu_class: GpuClass) -> OwnedFigure:
        """Non-GPU power per node for servers of this GPU class (the class override, else the default)."""
        return self.node_power_overhead_w_by_class.get(gpu_class, self.node_power_overhead_w)


# What an engine's memory fraction is a fraction of (catalog/engines.yaml; physics/memory.py::kv_pool_bytes).
MemoryPolicy = Literal["total", "static", "free"]
SpeculativeMethod = Literal["draft", "eagle", "mtp"]
MAX_ENGINE_BATCH = 1_000_000  # shipped largest: 2,048 (TensorRT-LLM max_batch_size)


class ClassFactors(Row):
    """One kernel efficiency factor of an engine, per GPU class (fitted: docs/model.md section 9)."""

    datacenter: float = Field(gt=0, le=1.5)
    workstation: float = Field(gt=0, le=1.5)
    consumer: float = Field(gt=0, le=1.5)


class MeasuredEngineFactors(Row):
    """An engine's kernel factors measured on one GPU (`clusterplan calibrate` from benchmark results); a factor
    left out keeps the engine's per-class value. A requirement's own factor wins over both."""

    memory_bandwidth_efficiency: float | None = Field(None, gt=0, le=1.5, description="share of peak bandwidth")
    compute_efficiency: float | None = Field(None, gt=0, le=1.5, description="share of dense tensor peak")
    decode_step_overhead_s: float | None = Field(None, ge=0, le=1.5, description="fixed cost of one step, seconds")
    measured_by: str = Field(max_length=2000, description="the result files, tool and version the fit read")


class HostFactors(Row):
    """A per-step host (CPU) time of an engine, per host CPU class (:attr:`GpuSpec.host_cpu`)."""

    x86: float = Field(ge=0, le=0.01, description="on an x86 host (DGX/HGX: Xeon, EPYC), seconds")
    arm: float = Field(ge=0, le=0.01, description="on an Arm host (Grace: GH200, GB200, GB300), seconds")

    def of(self, host_cpu: HostCpu) -> float:
        value: float = getattr(self, host_cpu)
        return value


class UnbalancedRouting(Row):
    """MoE routing under power-law expert popularity against balanced routing, by EP degree, in one of two forms.

    Measured (``tokens`` and ``by_ep``): the MoE layer's time under power-law over balanced routing at each of
    ``tokens`` routed tokens, per EP degree (a kernel table's ratios; the largest degree not above a layout's EP
    applies, its points joined in log tokens). Law (``skew_per_doubling``): the busiest EP rank's routed load over the
    mean, ``1 + skew_per_doubling·log2(ep)`` at any token count, a static skew inside the load-imbalance cap. Read by
    physics/moe.py ``routing_effect``, the one reader of either form.
    """

    tokens: list[Annotated[int, Field(ge=1, le=1_048_576)]] = Field(
        default_factory=list,
        description="routed tokens a layer receives at which by_ep's ratios were measured, ascending",
    )
    by_ep: dict[Annotated[int, Field(ge=1, le=1024)], list[Annotated[float, Field(ge=1, le=8)]]] = Field(
        default_factory=dict,
        description="measured: the layer's time under power-law over balanced routing at each of tokens, by EP degree",
    )
    skew_per_doubling: float | None = Field(
        None,
        ge=0,
        le=4,
        description="law: the busiest EP rank's routed load over the mean grows by this much per doubling of EP "
        "degree (1 + skew_per_doubling·log2(ep)), dimensionless",
    )

    @model_validator(mode="after")
    def _one_form(self) -> UnbalancedRouting:
        measured = bool(self.tokens or self.by_ep)
        if measured == (self.skew_per_doubling is not None):
            raise ValueError("give exactly one form: tokens and by_ep (measured ratios) or skew_per_doubling (the law)")
        if measured:
            if not self.tokens or not self.by_ep:
                raise ValueError("measured routing needs both tokens and by_ep")
            if 1 not in self.by_ep:
                raise ValueError("by_ep must include EP degree 1 (the kernel's own ratios, below every larger degree)")
            if self.tokens != sorted(set(self.tokens)):
                raise ValueError("tokens must ascend without repeats")
            for ep, ratios in self.by_ep.items():
                if len(ratios) != len(self.tokens):
                    raise ValueError(f"by_ep[{ep}]: {len(ratios)} ratios for {len(self.tokens)} tokens")
        return self


class GemmShapeCurve(Row):
    """A GEMM ``(M x K) @ (K x N)`` reaches ``1 / (1 + a/M + a/N + b/K)`` of the plateau a large GEMM reaches."""

    per_output_dim_elements: float = Field(
        ge=0, le=1e6, description="a: the fixed cost per output row and column (tiles and waves), elements"
    )
    per_reduction_dim_elements: float = Field(
        ge=0, le=1e6, description="b: the fixed cost per reduction step (each tile's prologue and epilogue), elements"
    )


class GroupedGemmFit(Row):
    """MoE expert (grouped) GEMMs against routed tokens per expert ``t``: ``peak_share·t/(t + half_tokens)`` of dense
    peak, relative to the ``dense_peak_share`` the dense training GEMMs reach (``training_mfu``'s plateau)."""

    peak_share: float = Field(
        gt=0, le=1.5, description="the grouped GEMM's share of dense peak at many tokens an expert"
    )
    half_tokens: float = Field(
        ge=0,
        le=1e7,
        description="routed tokens per expert at which the grouped GEMM reaches half of peak_share, tokens",
    )
    dense_peak_share: float = Field(
        gt=0, le=1.5, description="the share of dense peak the dense training-shape GEMMs reach in the same tables"
    )


class ArchitectureKernels(Provenance):
    """Kernel fits of a family of GPU architectures (catalog/kernels.yaml): GEMMs by shape, MoE grouped GEMMs,
    unbalanced routing where the engine has no measured table, and whether Megatron's TP overlap runs."""

    id: Label = Field(description="row key: 'hopper', 'ampere'")
    architectures: list[Label] = Field(
        description="the GPU rows' architecture names (any case) the row applies to, matched whole"
    )
    default: bool = Field(
        False, description="the row for a GPU whose architecture no row lists (exactly one row is the default)"
    )
    gemm_shape: GemmShapeCurve
    grouped_gemm: GroupedGemmFit
    unbalanced_routing: UnbalancedRouting = Field(
        description="routing under power-law expert popularity where the engine tabulates none (physics/moe.py)"
    )
    tp_comm_overlap: bool = Field(
        description="Megatron-LM / TransformerEngine's userbuffers TP overlap (--tp-comm-overlap) runs on it"
    )
    fitted_to: str = Field(max_length=2000, description="the measurements the fits come from")

    def applies_to(self, architecture: str) -> bool:
        """Whether the row lists ``architecture`` (a GPU row's architecture name, any case)."""
        wanted = architecture.casefold()
        return any(name.casefold() == wanted for name in self.architectures)


def kernels_for(rows: Iterable[ArchitectureKernels], architecture: str) -> ArchitectureKernels | None:
    """The row listing ``architecture``, else the default row; None when there is neither."""
    table = list(rows)
    listed = next((row for row in table if row.applies_to(architecture)), None)
    return listed if listed is not None else next((row for row in table if row.default), None)


class MoeTokenCost(Row):
    """An MoE kernel's time per routed token per MoE layer, beside its GEMMs' FLOPs (one architecture, precision)."""

    rank_s: float = Field(
        ge=0, le=1e-6, description="per token routed to the rank's experts (permute, quantise, activation, finalize), s"
    )
    batch_s: float = Field(
        ge=0, le=1e-6, description="per routed token of every token the rank's MoE receives (routing, sort), s"
    )
    layer_s: float = Field(
        0.0,
        ge=0,
        le=1e-3,
        description="fixed time of one MoE layer's kernels whatever its tokens and weights (routing, permute, "
        "quantise, finalize, the GEMMs' prologue and tail: the layer time the kernel tables' smallest batches "
        "approach under CUDA graphs), s",
    )
    row_tile_max: int = Field(
        0,
        ge=0,
        le=1024,
        description="largest row tile of a kernel that pads each expert's rows to a tile sized from the gathered "
        "rows per local expert (Triton matmul_ogs: 128; physics/moe.py row_tile_padding); 0: no padding modelled",
    )
    unbalanced: UnbalancedRouting | None = Field(
        None,
        description="the layer's time under unbalanced (power-law) routing over balanced, measured by EP degree and "
        "routed tokens (physics/moe.py routing_effect); None: not tabulated, the architecture's law (kernels.yaml)",
    )


class EngineSpec(Provenance):
    """A serving engine as it runs: its memory policy, batch caps, chunked prefill, KV block and kernel factors."""

    id: Label = Field(description="row key and the name a requirement uses: 'vllm', 'sglang', 'tensorrt-llm'")
    name: Label = Field(description="display name")
    aliases: list[Label] = Field(default_factory=list, description="other names a requirement may use")
    description: str = Field(max_length=1000)
    memory_policy: MemoryPolicy = Field(
        description="what memory_fraction is a fraction of: total (the engine's whole footprint), static (weights "
        "+ KV pool), free (the memory left after weights, activations and runtime)"
    )
    memory_fraction: float = Field(gt=0, le=1, description="the engine's default memory fraction (0-1)")
    memory_fraction_by_tp: dict[int, float] = Field(
        default_factory=dict,
        description="default fraction by tensor-parallel size (the largest key not above TP applies); "
        "empty: memory_fraction at every TP",
    )
    runtime_reserve_gib: float = Field(
        ge=0, le=64, description="memory outside the profiled peak: CUDA context, NCCL buffers, CUDA graphs, GiB"
    )
    max_batch: int = Field(ge=1, le=MAX_ENGINE_BATCH, description="default cap on concurrent sequences")
    max_batch_small_gpu: int | None = Field(
        None, ge=1, le=MAX_ENGINE_BATCH, description="default cap on GPUs under 70 GiB or A100 (vLLM); None: max_batch"
    )
    prefill_chunk_tokens: int = Field(ge=1, le=1_048_576, description="tokens scheduled per engine step")
    kv_block_tokens: int = Field(ge=1, le=4096, description="tokens per KV-cache block (paging granularity)")
    memory_bandwidth_efficiency: ClassFactors
    compute_efficiency: ClassFactors
    decode_step_overhead_s: ClassFactors = Field(description="fixed cost of one engine step, seconds")
    moe_gemm_efficiency: ClassFactors = Field(
        description="MoE expert GEMMs' share of the dense roofline (grouped GEMM at few tokens per expert)"
    )
    kv_window_pools: bool = Field(
        True,
        description="the KV cache keeps only a window's tokens for sliding-window and chunked-attention layers "
        "(vLLM V1, SGLang); false: every layer reserves the full context unless configured (TensorRT-LLM without "
        "kv_cache_config.max_attention_window)",
    )
    moe_dispatch: MoeDispatch = Field(
        "all_to_all",
        description="how an expert-parallel MoE layer moves tokens under attention DP: all_to_all (each token to the "
        "ranks of its experts) or allgather (every rank gathers every token, a reduce-scatter combines)",
    )
    moe_dispatch_rack: MoeDispatch | None = Field(
        None,
        description="the dispatch on a rack-scale NVLink domain (scale_up_domain above 8 GPUs: GB200/GB300 NVL72), "
        "when it differs; None: moe_dispatch",
    )
    host_time_per_sequence_layer_s: HostFactors = Field(
        default_factory=lambda: HostFactors(x86=0.0, arm=0.0),
        description="host (CPU) time per running sequence and decoder layer per step on the executor of one rank, "
        "seconds; overlaps the GPU's step (physics/step.py host_step_s); 0: not modelled",
    )
    moe_routed_token_s: dict[str, dict[str, MoeTokenCost]] = Field(
        default_factory=dict,
        description="the MoE kernel's time per routed token and MoE layer beside its GEMM FLOPs, by catalog "
        "architecture name then weight precision (physics/step.py expert_parts_s); unlisted: 0, not modelled",
    )
    fitted_to: str = Field(max_length=2000, description="the measurements the factors come from")
    measured: dict[str, MeasuredEngineFactors] = Field(
        default_factory=dict,
        description="factors measured on one GPU, by catalog GPU id (a `clusterplan calibrate` overlay); they win "
        "over the per-class factors on that GPU",
    )
    speculative: list[SpeculativeMethod] = Field(default_factory=list, description="speculative methods it runs")

    def fraction_at(self, tp: int) -> float:
        """The default memory fraction at tensor-parallel size ``tp``."""
        keys = [k for k in sorted(self.memory_fraction_by_tp) if k <= tp]
        return self.memory_fraction_by_tp[keys[-1]] if keys else self.memory_fraction

    def batch_cap(self, memory_gib: float, gpu_name: str) -> int:
        """The default batch cap on a GPU: vLLM's ``get_batch_defaults`` halves it below 70 GiB and on A100."""
        small = memory_gib < 70.0 or "a100" in gpu_name.casefold()
        return self.max_batch_small_gpu if (small and self.max_batch_small_gpu is not None) else self.max_batch


TrainingMethod = Literal["full", "lora", "qlora"]
RecomputeMode = Literal["none", "selective", "full"]
FrameworkMemoryOption = Literal[
    "bf16_weights", "optimizer_in_backward", "adamw8bit", "activation_offload", "paged_optimizer", "optimizer_offload"
]


class FrameworkSpec(Provenance):
    """A training framework as it runs a job: the parallelisms, recompute options, ZeRO/FSDP sharding, optimizers
    and memory options it has a form of (catalog/frameworks.yaml). A training layout it has no form of is not a
    candidate of a workload that names it."""

    id: Label = Field(description="row key and the name a requirement uses: 'megatron-lm', 'torchtune'")
    name: Label = Field(description="display name")
    aliases: list[Label] = Field(default_factory=list, description="other names a requirement may use")
    description: str = Field(max_length=1000)
    methods: list[TrainingMethod] = Field(
        min_length=1, description="what it trains: full (every weight), lora, qlora (adapters on a frozen base)"
    )
    tensor_parallel: bool = Field(description="runs tensor parallelism (TP > 1)")
    sequence_parallel: bool = Field(
        description="with TP, shards the layer norms' and dropouts' activations over the TP ranks (Megatron "
        "--sequence-parallel); false: those stay replicated on every TP rank"
    )
    context_parallel: bool = Field(description="runs context parallelism (CP > 1, each sequence split over ranks)")
    pipeline_parallel: bool = Field(description="runs pipeline parallelism (PP > 1)")
    interleaved_pipeline: bool = Field(description="runs an interleaved (virtual-stage) pipeline schedule")
    expert_parallel: bool = Field(description="runs expert parallelism for MoE models (EP > 1)")
    zero_stages: list[Literal[0, 1, 2, 3]] = Field(
        min_length=1,
        description="data-parallel sharding it runs, as ZeRO stages: 0 replicated (DDP), 1 optimizer state "
        "(distributed optimizer), 2 also gradients, 3 also weights (FSDP / ZeRO-3)",
    )
    recompute: list[RecomputeMode] = Field(min_length=1, description="activation recompute policies it runs")
    recompute_layers: bool = Field(
        description="full recompute of a chosen number of each stage's layers (Megatron --recompute-num-layers); "
        "false: full recompute checkpoints every layer"
    )
    optimizers: list[Literal["adamw", "sgd", "adafactor"]] = Field(min_length=1, description="optimizers it runs")
    precisions: list[Literal["bf16", "fp16", "fp8", "fp32"]] = Field(min_length=1, description="compute precisions")
    memory_options: list[FrameworkMemoryOption] = Field(
        default_factory=list, description="memory options (physics/optimizer_memory.py) it has a form of"
    )
    pipeline_zero_stages: list[Literal[0, 1]] | None = Field(
        None,
        description="the ZeRO stages its data-parallel sharding amounts to beside pipeline stages, where that differs "
        "from zero_stages (torchtitan: FSDP2 under torch.distributed.pipelining keeps each stage unsharded for the "
        "step and reduce-scatters once, at the last backward: ZeRO 1); unset: zero_stages' 0 and 1",
    )
    replicated_alone: bool = Field(
        False,
        description="its replicated data parallelism (ZeRO 0, DDP) runs with no tensor, context or pipeline "
        "parallelism beside it (torchtitan); there it shards with FSDP instead",
    )
    achieved_rate: float = Field(
        1.0,
        gt=0,
        le=2,
        description="share of Megatron-LM's achieved training compute rate it reaches (training_mfu is fitted on "
        "Megatron-LM runs); fitted by bench/accuracy.py only where fair published runs of it exist and the factor "
        "helps out of source, else 1.0",
    )
    tp_comm_overlap: bool = Field(
        True,
        description="pipelines tensor-parallel collectives with the GEMMs they feed where the GPU's kernels can "
        "(Megatron-LM --tp-comm-overlap, torchtitan async TP); false: TP collectives are exposed",
    )
    dp_comm_overlap: bool = Field(
        True,
        description="overlaps data-parallel gradient reduction and parameter gathers with compute (Megatron-LM "
        "--overlap-grad-reduce / --overlap-param-gather, FSDP prefetch, DeepSpeed overlap_comm)",
    )

    def runs(self, method: str) -> bool:
        return method in self.methods
