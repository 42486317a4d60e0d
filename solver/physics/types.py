"""Result types of the physics: what one configuration needs and achieves. Pure data.

These are the contract between the physics (``clusterplan.physics``), the candidate table
(``clusterplan.candidates``), the independent checker and the renderers. Units are in field names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, InstanceOf

from clusterplan.physics.reasons import Reason

Bound = Literal["memory_capacity", "memory_bandwidth", "compute", "communication", "host"]


class Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Judged(Result):
    """An estimate that may be infeasible: ``why_not`` holds the reason records, empty when feasible.

    Layers decide on the records; the words come last: ``estimate --json`` writes their sentences under
    ``reasons``, right after ``feasible`` (:class:`clusterplan.design.estimate.EstimateResult`).
    """

    feasible: bool
    why_not: list[InstanceOf[Reason]] = Field(
        default_factory=list, exclude=True, description="why not feasible (clusterplan.physics.reasons records)"
    )


class MemoryBreakdown(Result):
    """Memory needed on the most loaded GPU of a replica, GiB."""

    weights_gib: float
    kv_cache_gib: float = 0.0
    activations_gib: float = 0.0
    gradients_gib: float = 0.0
    optimizer_gib: float = 0.0
    runtime_overhead_gib: float = 0.0
    headroom_gib: float = Field(
        0.0,
        description="memory left unused: training, memory_headroom_fraction x capacity; serving, what the engine's "
        "memory policy and the workload's headroom keep out of the KV pool",
    )
    total_gib: float
    capacity_gib: float

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.capacity_gib

    @property
    def free_gib(self) -> float:
        return self.capacity_gib - self.total_gib


class DecodeStepModel(Result):
    """A replica's decode step as a function of the running batch ``n`` (seconds, per pipeline stage).

    Built by :func:`clusterplan.physics.serving.estimate_serving`; evaluated by
    :func:`clusterplan.physics.step.decode_step_s` so the queueing model can ask for the step time at
    any running batch. Memory terms stream at achieved bandwidth, compute at achieved throughput.
    """

    pp: int = Field(ge=1)
    dense_weights_s: float = Field(description="stream the stage's non-expert weights once, s (no LM head)")
    expert_weights_s: float = Field(description="stream one expert of every layer of the stage, s (the MLP if dense)")
    moe_experts: int = Field(1, ge=1)
    experts_per_token: int = Field(1, ge=1)
    kv_per_seq_s: float = Field(description="stream one sequence's KV cache at the mean context, s")
    compute_per_seq_s: float = Field(description="one sequence's non-expert matmul FLOPs on the stage, s (no LM head)")
    linear_knee_seqs: tuple[float, float] = Field(
        (0.0, 0.0),
        description="(reference, this GPU's) sequences at which the linear layers' GEMMs reach half their large-M "
        "share (factors decode_gemm_knee_tokens over the tokens a sequence puts in one GEMM); (0, 0): no ramp",
    )
    head_weights_s: float = Field(0.0, ge=0, description="stream the stage's LM head once, s (16-bit)")
    head_compute_per_seq_s: float = Field(0.0, ge=0, description="one sequence's LM-head FLOPs on the stage, s")
    attention_compute_per_seq_s: float = Field(
        0.0, description="one sequence's attention FLOPs over its KV cache on the stage, s"
    )
    tp_allreduces: int = Field(0, ge=0, description="TP all-reduces of the stage per step (2 per layer)")
    tp_allreduce_latency_s: list[float] = Field(
        default_factory=list, description="start-up latency of one TP all-reduce, s, per NCCL protocol"
    )
    tp_allreduce_per_seq_s: list[float] = Field(
        default_factory=list,
        description="transfer of one sequence's hidden state in one TP all-reduce, s, per protocol",
    )
    pp_hop_fixed_s: float = Field(0.0, description="latency of one stage-to-stage send, s")
    pp_hop_per_seq_s: float = Field(0.0, description="transfer of one sequence's hidden state between stages, s")
    overhead_s: float = Field(0.0, description="engine-independent fixed cost per step, s")
    host_per_seq_s: float = Field(
        0.0,
        ge=0,
        description="host (CPU) time per sequence its rank's executor runs, per step, s: per layer x the stage's "
        "layers (0: none)",
    )
    host_rank_share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="share of the replica's sequences one rank's executor runs (1/tp under attention DP)",
    )
    expert_parallel: int = Field(1, ge=1, description="EP ranks the stage's experts are spread over (1: none)")
    expert_compute_per_seq_s: float = Field(
        0.0, description="one sequence's routed-expert matmul FLOPs on the stage's average GPU, s (MoE only)"
    )
    moe_gemm_efficiency: float = Field(1.0, gt=0, le=1.5, description="expert GEMMs' share of the dense roofline")
    moe_weight_efficiency: float | None = Field(
        None, gt=0, le=1.5, description="the MoE kernel's share of the weight stream (None: moe_gemm_efficiency)"
    )
    expert_routed_per_seq_s: float = Field(
        0.0,
        ge=0,
        description="the MoE kernel's work beside its FLOPs for one sequence's tokens routed to the average rank "
        "(permute, quantise, activation, finalize), s",
    )
    expert_gathered_per_seq_s: float = Field(
        0.0, ge=0, description="the MoE kernel's routing work for one sequence the rank's MoE receives, s"
    )
    tokens_per_seq: float = Field(
        1.0,
        ge=1,
        description="tokens each sequence runs through the step's experts (k + 1 under speculative verification)",
    )
    expert_layers_s: float = Field(
        0.0,
        ge=0,
        description="the MoE kernels' fixed time over the stage's MoE layers per forward, whatever its tokens, s",
    )
    expert_row_tile_max: int = Field(
        0, ge=0, description="the MoE kernel's largest row tile when it pads experts' rows to tiles (0: no padding)"
    )
    expert_load_skew: float = Field(1.0, ge=1, description="static max/mean load of EP ranks")
    expert_routing_curve: tuple[tuple[float, float], ...] = Field(
        (),
        description="(tokens, ratio): the MoE layer's time under unbalanced over balanced routing (moe.routing_ratio)",
    )
    all_to_alls: int = Field(0, ge=0, description="MoE dispatch and combine all-to-alls of the stage per step")
    all_to_all_latency_s: float = Field(0.0, description="start-up latency of one all-to-all, s")
    all_to_all_per_seq_s: float = Field(
        0.0, description="transfer of one sequence's share of one all-to-all from the busiest GPU, s"
    )


class ServingEstimate(Judged):
    """One serving replica (tp x pp GPUs) of one model on one GPU type at one batch (concurrency)."""

    gpu_id: str
    tp: int
    pp: int
    quant: str
    kv_precision: str
    batch: int = Field(description="concurrent sequences per replica")
    gpus_per_replica: int
    memory: MemoryBreakdown
    max_batch_by_memory: int = Field(description="largest concurrency whose KV cache fits in the engine's KV pool")
    prefill_s: float = Field(description="prefill of one request's input tokens, seconds (unloaded)")
    decode_step_s: float = Field(description="one decode step at this batch, seconds")
    ttft_s: float = Field(description="unloaded time to first token, seconds")
    tpot_s: float = Field(description="time per output token at this batch, seconds")
    e2e_s: float = Field(description="unloaded end-to-end latency of a mean request at this batch, seconds")
    output_tokens_per_s: float = Field(description="saturated output tokens/s of the replica at this batch")
    requests_per_s: float = Field(description="saturated requests/s of the replica at this batch")
    bound: Bound
    power_w: float = Field(description="board power of the replica's GPUs at TDP, W")
    notes: list[str] = Field(default_factory=list, description="assumptions applied (derates, replication)")
    compute_precision: str = Field("", description="precision the matmuls run at (int4/int8 weight-only: 16-bit)")
    decode_context_tokens: float = Field(0.0, description="mean context a decode step attends over, tokens")
    prefill_busy_s: float = Field(
        0.0,
        description="GPU time one request's prefill takes when interleaved with decode (chunked prefill), s: its "
        "tokens ride the running step's collectives, adding bytes, not latency",
    )
    prefill_alone_busy_s: float = Field(
        0.0,
        description="GPU time one request's prefill takes in forwards of its own (a prefill-only replica), s: its "
        "collectives' latency included",
    )
    step_model: DecodeStepModel | None = Field(None, description="decode step time at any running batch")
    ep: int = Field(1, description="expert-parallel degree of each stage (1: experts tensor-parallel)")
    attention_dp: bool = Field(False, description="attention data-parallel over each stage's GPUs")
    all_to_all_s: float = Field(
        0.0, description="MoE dispatch and combine all-to-alls of one decode step at this batch, s (0 without EP)"
    )
    prefill_chunks: int = Field(1, ge=1, description="engine steps one prompt's computed tokens take (chunked prefill)")


class LatencyAtLoad(Result):
    """Latency percentiles of a replica under a given arrival rate (queueing model)."""

    arrival_requests_per_s: float
    utilisation: float
    p95_ttft_s: float
    p95_tpot_s: float
    p95_e2e_s: float
    stable: bool = Field(description="False when arrivals exceed the utilisation ceiling")
    p95_wait_s: float = Field(0.0, description="95th percentile wait for a free batch slot, seconds")
    mean_running_batch: float = Field(0.0, description="expected sequences decoding at once (Little's law)")
    mean_ttft_s: float = Field(0.0, description="mean time to first token, seconds (mean wait + prefill)")
    mean_tpot_s: float = Field(0.0, description="mean time per output token, seconds (step at the mean batch)")
    mean_e2e_s: float = Field(0.0, description="mean end-to-end latency of a request of mean length, seconds")


class TrainingEstimate(Judged):
    """One training or fine-tuning configuration: tp x cp x pp x dp GPUs of one type."""

    gpu_id: str
    tp: int
    pp: int
    dp: int
    zero_stage: int
    recompute: str
    cp: int = Field(1, description="context-parallel degree: each sequence split over cp GPUs")
    ep: int = Field(1, description="expert-parallel degree, carved out of the dp x cp ranks (MoE models)")
    virtual_stages: int = Field(1, description="interleaved (virtual) pipeline chunks per stage")
    recompute_layers: int = Field(0, description="layers of each pipeline stage fully recomputed in backward")
    micro_batch: int = Field(description="sequences per micro-batch per GPU")
    gpus: int
    memory: MemoryBreakdown
    flops_per_token: float = Field(description="model FLOPs per trained token (6N + attention, 8N with full recompute)")
    step_time_s: float
    compute_time_s: float
    exposed_comm_time_s: float
    exposed_tp_s: float = Field(0.0, description="tensor-parallel collectives not hidden behind GEMMs, per step")
    exposed_cp_s: float = Field(0.0, description="context-parallel KV exchanges not hidden behind attention, per step")
    exposed_pp_s: float = Field(0.0, description="pipeline point-to-point sends not hidden, per step")
    exposed_dp_s: float = Field(0.0, description="data-parallel / ZeRO collectives not hidden, per step")
    exposed_ep_s: float = Field(
        0.0, description="expert-parallel dispatch/combine all-to-alls not hidden behind shared experts, per step"
    )
    bubble_fraction: float
    tokens_per_s: float = Field(description="all GPUs together")
    mfu: float = Field(description="model FLOPs utilisation against dense peak at the compute precision")
    time_to_train_s: float
    bound: Bound
    power_w: float
    notes: list[str] = Field(default_factory=list)
    memory_options: list[str] = Field(
        default_factory=list, description="memory options in use (physics/optimizer_memory.py MEMORY_OPTIONS)"
    )
    offload_time_s: float = Field(0.0, description="exposed PCIe time per step of the memory options' host transfers")
