"""Training communication as the frameworks overlap it: what each kind (TP, CP, PP, DP/ZeRO, EP) leaves on a
step's critical path, and the collectives' links (NVLink inside a server, the network across them).

Pure functions of the layout and the compute time it hides behind; :mod:`clusterplan.physics.training` times the
step around them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.physics import memory, moe
from clusterplan.physics.comm import (
    NO_LINK,
    Link,
    exposed_s,
    hierarchical_allgather_s,
    link_for_group,
    nccl_allreduce_s,
    p2p_s,
    ring_allgather_s,
)
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.memo import HeldMemo
from clusterplan.physics.rules import architecture_kernels
from clusterplan.physics.serving import ACTIVATION_BYTES, attention_width
from clusterplan.physics.training_job import TrainingSettings

GRAD_BYTES = 4.0  # fp32 main gradients are what gets reduced (Megatron-LM default for bf16)


def reduced_grad_bytes(precision: str) -> float:
    """Bytes per gradient the data-parallel reduction moves: fp32 main gradients, except fp16 training, which
    Megatron-LM reduces in fp16 unless asked (``arguments.py``: bf16 forces ``accumulate_allreduce_grads_in_fp32``,
    fp16 leaves it off by default)."""
    return 2.0 if precision == "fp16" else GRAD_BYTES


# Megatron-LM DDP gradient buckets: ``bucket_size = max(40M, 1M x dp)`` parameters (``distributed_data_parallel_config``
# / ``DistributedDataParallel.__init__``); the last bucket's reduction starts after the backward ends.
DDP_BUCKET_MIN_PARAMS = 40_000_000
DDP_BUCKET_PARAMS_PER_RANK = 1_000_000


@dataclass(frozen=True)
class ExposedComm:
    """Communication left on a step's critical path, per kind, seconds per optimizer step."""

    tp_s: float
    cp_s: float
    pp_s: float
    dp_s: float
    tp_overlapped: bool
    cp_link: Link
    ep_s: float = 0.0
    ep_link: Link = NO_LINK


@dataclass(frozen=True)
class StageTraffic:
    """What the most loaded pipeline stage's collectives move, per GPU.

    ``layers`` of the stage, ``recomputed`` of them fully recomputed; ``local_seq`` tokens of each sequence on one
    CP rank; ``trainable`` parameters on this GPU, ``expert_trainable`` of them routed experts' (reduced over the
    ``expert_dp`` expert-data-parallel ranks); ``gathered_bytes`` what ZeRO-3 gathers per pass; ``w_b`` bytes per
    stored weight and ``grad_bytes_per_param`` per reduced gradient; ``moe_layers`` of the stage, ``moe_recomputed``
    of them recomputed.
    """

    layers: int
    recomputed: int
    local_seq: float
    trainable: float
    gathered_bytes: float
    w_b: float
    grad_bytes_per_param: float = GRAD_BYTES
    expert_trainable: float = 0.0
    expert_dp: int = 1
    moe_layers: int = 0
    moe_recomputed: int = 0
    tp_overlap: bool = True  # the framework pipelines TP collectives with GEMMs (FrameworkRates.tp_comm_overlap)
    dp_overlap: bool = True  # the framework overlaps DP collectives with compute (FrameworkRates.dp_comm_overlap)


@dataclass(frozen=True)
class StepTiming:
    """The compute a step's communication hides behind, on the most loaded stage.

    ``micro_batches`` per optimizer step filling ``slots`` micro-batch times (``m + (p - 1)/v``), ``t_micro``
    seconds each; ``attention_flops_per_s``: the attention kernel's rate; ``fwd_share`` and ``gemm_share``: the
    forward's and the GEMMs' shares of a micro-batch; ``shared_window_s``: the shared experts' MLP time beside the
    all-to-alls.
    """

    micro_batches: int
    slots: float
    t_micro: float
    attention_flops_per_s: float
    fwd_share: float
    gemm_share: float
    shared_window_s: float = 0.0


def exposed_comm(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    a: Assumptions,
    *,
    layout: Layout,
    settings: TrainingSettings,
    node: int,
    traffic: StageTraffic,
    timing: StepTiming,
) -> ExposedComm:
    """Each kind of training communication and the part of it no compute hides.

    * TP (sequence parallel: an all-gather and a reduce-scatter around each of the 2 GEMM blocks, forward and
      backward: 4 all-reduce equivalents per layer, 2 more per recomputed layer) of ``b·s/cp·h·2`` bytes. On
      Hopper+ the collectives are split into chunks pipelined with the GEMMs (Wang et al. 2023, "Overlap
      communication with dependent computation via decomposition", ASPLOS; TransformerEngine userbuffers):
      ``max(comm / tp, comm - GEMM time)``; elsewhere ``comm x (1 - tp_comm_overlap)``.
    * CP: ring attention sends each KV chunk ``cp - 1`` times forward and KV plus its gradient backward, each
      send beside one chunk's attention (TransformerEngine ``AttnFuncWithCPAndKVP2P``): ``max(0, send - chunk)``.
    * PP: 1F1B sends are on the critical path, two per slot; interleaved schedules send ``2·v`` per micro-batch
      and overlap them with the next chunk (Megatron-LM ``overlap_p2p_comm``), the ``2(p-1)`` warm-up and
      cool-down hops excepted (Narayanan et al. 2021 §2.2.2: ``v`` times the traffic).
    * DP over ``dp x cp`` ranks (ZeRO 0: all-reduce; 1: reduce-scatter and all-gather; 2: reduce-scatter each
      micro-batch; 3: gathers and reduce-scatter each micro-batch), ring or NVLink-then-network, whichever is
      faster; gradient reduction hides behind the backward it follows and parameter gathers behind a forward
      (Megatron-LM ``--overlap-grad-reduce`` / ``--overlap-param-gather``; FSDP prefetch): exposed
      ``max(comm - compute, last bucket, (1 - dp_comm_overlap) x comm)``. Under EP the routed experts' share
      reduces over the ``dp x cp / ep`` expert-data-parallel ranks instead (Megatron-LM expert DP group).
    * EP: a dispatch and a combine all-to-all per MoE layer forward, the same two in backward, two more per
      recomputed MoE layer (Megatron-LM ``MoEAlltoAllTokenDispatcher``: ``token_dispatch`` / ``token_combine``);
      each TP rank sends its sequence-parallel shard of the tokens (:func:`moe.dispatch_bytes_per_token`) over
      :func:`moe.training_all_to_all_s`. Hidden only behind the shared experts' MLP (``--moe-shared-expert-overlap``
      runs it beside the all-to-alls); no batch-level overlap (``--overlap-moe-expert-parallel-comm``, Megatron-Core
      0.14, needs its own schedule; DeepSeek's DualPipe) is assumed: exposed ``max(0, all-to-alls - shared MLP)``.
    """
    act_msg = settings.micro_batch * traffic.local_seq * arch.hidden_size * ACTIVATION_BYTES
    tp_micro, overlap = _tp_micro_s(gpu, a, layout, node=node, act_msg=act_msg, traffic=traffic, timing=timing)
    cp_micro, cp_link = _cp_micro_s(
        arch,
        gpu,
        a,
        layout,
        node=node,
        micro_batch=settings.micro_batch,
        traffic=traffic,
        rate=timing.attention_flops_per_s,
    )
    pp_s = _pp_s(gpu, a, layout, node=node, act_msg=act_msg, timing=timing)
    ep_micro, ep_link = _ep_micro_s(
        arch, gpu, a, layout, node=node, micro_batch=settings.micro_batch, traffic=traffic, timing=timing
    )
    dp_s = _dp_s(gpu, a, layout, settings, node=node, traffic=traffic, timing=timing)
    slots = timing.slots
    return ExposedComm(
        tp_s=slots * tp_micro, cp_s=slots * cp_micro, pp_s=pp_s, dp_s=dp_s, tp_overlapped=overlap, cp_link=cp_link,
        ep_s=slots * ep_micro, ep_link=ep_link,
    )  # fmt: skip


def _tp_micro_s(
    gpu: GpuSpec, a: Assumptions, layout: Layout, *, node: int, act_msg: float, traffic: StageTraffic,
    timing: StepTiming,
) -> tuple[float, bool]:  # fmt: skip
    """Tensor-parallel time one micro-batch leaves exposed, and whether it overlaps the GEMMs (Hopper+ over
    NVLink: ``max(comm / tp, comm - GEMM time)``; elsewhere ``comm x (1 - tp_comm_overlap)``)."""
    tp, eff = layout.tp, a.link_efficiency
    tp_link = network_link(gpu, a, group_size=tp, spans_nodes=tp > node)
    # 4 all-reduce equivalents per layer, 2 more per recomputed one
    tp_comm = (4 * traffic.layers + 2 * traffic.recomputed) * nccl_allreduce_s(act_msg, tp, tp_link, eff)
    overlap = tp > 1 and tp_link.kind == "nvlink" and architecture_kernels(gpu).tp_comm_overlap and traffic.tp_overlap
    if overlap:
        return exposed_s(tp_comm, timing.t_micro * timing.gemm_share, floor_s=tp_comm / tp), overlap
    return tp_comm * (1.0 - a.tp_comm_overlap), overlap


def _cp_micro_s(
    arch: ModelArchitecture, gpu: GpuSpec, a: Assumptions, layout: Layout, *, node: int, micro_batch: int,
    traffic: StageTraffic, rate: float,
) -> tuple[float, Link]:  # fmt: skip
    """Context-parallel ring exchanges one micro-batch leaves exposed (KV of the local tokens, the heads of one TP
    rank, each send beside one chunk's attention at ``rate``), and their link."""
    tp, cp = layout.tp, layout.cp
    if cp <= 1:
        return 0.0, NO_LINK
    cp_link = network_link(gpu, a, group_size=tp * cp, spans_nodes=tp * cp > node)
    local_seq, layers, recomputed = traffic.local_seq, traffic.layers, traffic.recomputed
    kv_bytes = 2.0 * micro_batch * local_seq * memory.kv_heads_per_gpu(arch.kv_heads, tp) * arch.head_dim_eff
    send = p2p_s(kv_bytes * ACTIVATION_BYTES, cp_link, a.link_efficiency)
    chunk = 4.0 * local_seq * attention_width(arch) * micro_batch * local_seq / tp / rate
    # cp - 1 sends forward, KV plus its gradient backward, each beside one chunk
    cp_micro = (cp - 1) * ((layers + recomputed) * exposed_s(send, chunk) + layers * exposed_s(2.0 * send, 2.0 * chunk))
    return cp_micro, cp_link


def _pp_s(gpu: GpuSpec, a: Assumptions, layout: Layout, *, node: int, act_msg: float, timing: StepTiming) -> float:
    """Pipeline sends a step leaves exposed: two per slot under 1F1B; interleaved, ``2·v`` per micro-batch
    beside the next chunk, the ``2(p - 1)`` warm-up and cool-down hops excepted."""
    tp, pp, vpp = layout.tp, layout.pp, layout.virtual_stages
    replica = tp * layout.cp * pp
    pp_link = network_link(gpu, a, group_size=replica if pp > 1 else 1, spans_nodes=replica > node)
    hop = p2p_s(act_msg / tp, pp_link, a.link_efficiency) if pp > 1 else 0.0
    if vpp <= 1:
        return 2.0 * timing.slots * hop
    return 2.0 * (pp - 1) * hop + 2.0 * vpp * timing.micro_batches * exposed_s(hop, timing.t_micro / vpp)


def _ep_micro_s(
    arch: ModelArchitecture, gpu: GpuSpec, a: Assumptions, layout: Layout, *, node: int, micro_batch: int,
    traffic: StageTraffic, timing: StepTiming,
) -> tuple[float, Link]:  # fmt: skip
    """Expert-parallel dispatch and combine all-to-alls of each MoE layer of the stage one micro-batch leaves
    exposed beside the shared experts' MLP, and their link."""
    ep, tp = layout.ep, layout.tp
    if ep <= 1 or traffic.moe_layers <= 0:
        return 0.0, NO_LINK
    tokens = micro_batch * traffic.local_seq / tp  # the sequence-parallel shard each TP rank routes
    one, ep_link = moe.training_all_to_all_s(
        gpu, ep=ep, tp=tp, node_gpus=node, bytes_sent_per_gpu=tokens * moe.dispatch_bytes_per_token(arch, ep),
        assumptions=a,
    )  # fmt: skip
    # dispatch and combine forward and backward, two more per recomputed MoE layer
    return exposed_s((4 * traffic.moe_layers + 2 * traffic.moe_recomputed) * one, timing.shared_window_s), ep_link


def _dp_s(
    gpu: GpuSpec, a: Assumptions, layout: Layout, settings: TrainingSettings, *, node: int, traffic: StageTraffic,
    timing: StepTiming,
) -> float:  # fmt: skip
    """Data-parallel (ZeRO) collectives over the ``dp x cp`` ranks a step leaves exposed beside the backward they
    follow and the forward they precede; the routed experts' share over the expert-data-parallel ranks."""
    tp, cp, pp, vpp, ep = layout.tp, layout.cp, layout.pp, layout.virtual_stages, layout.ep
    group = settings.dp * cp  # with the CP ranks, which hold the same weights
    if group <= 1:
        return 0.0
    eff, trainable, micro_batches = a.link_efficiency, traffic.trainable, timing.micro_batches
    dense_gather = dp_gather(gpu, a, group=group, stride=tp, node=node, eff=eff)
    expert_gather = dp_gather(gpu, a, group=traffic.expert_dp, stride=tp * ep, node=node, eff=eff)
    expert_share = traffic.expert_trainable / trainable if ep > 1 and trainable > 0 else 0.0

    def gather(total_bytes: float) -> float:
        if expert_share <= 0:
            return dense_gather(total_bytes)
        return dense_gather(total_bytes * (1.0 - expert_share)) + expert_gather(total_bytes * expert_share)

    grad_bytes = trainable * traffic.grad_bytes_per_param
    bucket = max(DDP_BUCKET_MIN_PARAMS, DDP_BUCKET_PARAMS_PER_RANK * group)
    last = min(1.0, bucket / trainable) if trainable > 0 else 1.0
    # 1F1B reduces during the last micro-batch's backward and gathers during the first one's forward. The
    # interleaved schedule syncs each chunk as soon as its last backward ends (and gathers each before its first
    # forward): the last round of min(p, m) micro-batches through every chunk hides all but the last chunk's
    # share (Megatron-Core core_r0.8.0 pipeline_parallel/schedules.py:723-732, 797-805, grad/param_sync_func).
    rounds = min(pp, micro_batches) if vpp > 1 else 1
    if vpp > 1:
        last = max(last, 1.0 / vpp)
    bwd = timing.t_micro * (1.0 - timing.fwd_share) * rounds
    fwd = timing.t_micro * timing.fwd_share * rounds
    # Never hidden: the last bucket, and the (1 - dp_comm_overlap) share of any collective (NCCL kernels share
    # SMs and memory bandwidth with the compute they overlap).
    hidden = a.dp_comm_overlap if traffic.dp_overlap else 0.0

    def floor(comm: float, first: float) -> float:
        return max(comm * first, comm * (1.0 - hidden))

    zero_stage = settings.zero_stage
    if zero_stage == 0:
        reduce = 2.0 * gather(grad_bytes)
        return exposed_s(reduce, bwd, floor_s=floor(reduce, last))
    if zero_stage in (1, 2):
        rs = gather(grad_bytes)
        ag = gather(trainable * traffic.w_b)
        reductions = micro_batches if zero_stage == 2 else 1
        dp_s = reductions * exposed_s(rs, bwd, floor_s=floor(rs, last))
        return dp_s + exposed_s(ag, fwd, floor_s=floor(ag, last))
    gathers = 3 if layout.recompute == "full" else 2
    per_micro = gathers * gather(traffic.gathered_bytes) + gather(grad_bytes)
    layers = traffic.layers
    return micro_batches * exposed_s(per_micro, timing.t_micro, floor_s=floor(per_micro, 1.0 / max(layers, 1)))


def at_network_efficiency(link: Link, a: Assumptions) -> Link:
    """A network link with its bandwidth scaled so that the shared ``link_efficiency`` the collectives apply yields
    ``network_link_efficiency`` (InfiniBand reaches ~0.9 of line rate, NVLink ~0.7: Calculon; nccl-tests#290)."""
    if link.kind != "network" or a.link_efficiency <= 0:
        return link
    return replace(link, bandwidth_gb_per_s=link.bandwidth_gb_per_s * a.network_link_efficiency / a.link_efficiency)


# network_link per (GPU, assumptions, group): a training search asks some 25,000 times for a few dozen.
_NETWORK_LINKS: HeldMemo[Link] = HeldMemo()


def network_link(
    gpu: GpuSpec, a: Assumptions, *, group_size: int, spans_nodes: bool, members_per_node: int = 1
) -> Link:
    """The link of a collective's group (:func:`clusterplan.physics.comm.link_for_group`) at the network's own
    efficiency (:func:`at_network_efficiency`); memoised."""
    key = (id(gpu), id(a), group_size, spans_nodes, members_per_node)
    return _NETWORK_LINKS.get_or_make(key, (gpu, a), _network_link, gpu, a, group_size, spans_nodes, members_per_node)


def _network_link(gpu: GpuSpec, a: Assumptions, group_size: int, spans_nodes: bool, members_per_node: int) -> Link:
    """:func:`network_link`, computed."""
    link = link_for_group(
        gpu, group_size=group_size, spans_nodes=spans_nodes, assumptions=a, members_per_node=members_per_node
    )
    return at_network_efficiency(link, a)


# dp_gather per (GPU, assumptions, group, stride, node, efficiency): the timing function is pure, and a training
# search asks some 7,000 times for a few dozen.
_GATHERS: HeldMemo[Callable[[float], float]] = HeldMemo()


def dp_gather(
    gpu: GpuSpec, a: Assumptions, *, group: int, stride: int, node: int, eff: float
) -> Callable[[float], float]:
    """All-gather (or reduce-scatter) time of a ``group`` whose members sit ``stride`` ranks apart: a ring, or
    NVLink-then-network when the group spans servers, whichever is faster. Memoised."""
    key = (id(gpu), id(a), group, stride, node, eff)
    return _GATHERS.get_or_make(key, (gpu, a), _dp_gather, gpu, a, group, stride, node, eff)


def _dp_gather(
    gpu: GpuSpec, a: Assumptions, group: int, stride: int, node: int, eff: float
) -> Callable[[float], float]:
    """:func:`dp_gather`, built."""
    members = max(1, min(group, node // stride)) if stride <= node else 1
    spans = stride * group > node
    ring_link = network_link(gpu, a, group_size=group, spans_nodes=spans, members_per_node=members)
    intra = link_for_group(gpu, group_size=members, spans_nodes=False, assumptions=a)
    per_nic = network_link(gpu, a, group_size=group, spans_nodes=spans)

    def gather(total_bytes: float) -> float:
        ring = ring_allgather_s(total_bytes, group, ring_link, eff)
        if not spans or members <= 1:
            return ring
        return min(ring, hierarchical_allgather_s(total_bytes, group, members, intra, per_nic, eff))

    return gather
