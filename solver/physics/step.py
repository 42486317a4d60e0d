"""A serving replica's step times from its tabulated physics (:class:`clusterplan.physics.types.DecodeStepModel`).

:func:`clusterplan.physics.serving.estimate_serving` reads the catalog once and tabulates a replica's per-step costs
(weights, per-sequence FLOPs and bytes, collectives, host time); the functions here evaluate that table at any
number of sequences: the decode step as a roofline per kind of kernel (LLM-Viewer ``roofline_model.py``;
llm-analysis), a pipeline's micro-batches, speculative verification, and the saturated rates of a replica kept full.
The batch search, the queueing model and the disaggregated pools call them at many batch sizes, which is why they
take the table, not the catalog.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from clusterplan.physics import moe
from clusterplan.physics.factors import SpeculativeDecoding
from clusterplan.physics.types import Bound, DecodeStepModel


def tp_comm_s(model: DecodeStepModel, n: float) -> float:
    """The stage's TP all-reduces of ``n`` sequences' hidden states, each at its fastest NCCL protocol, seconds."""
    lats, pers = model.tp_allreduce_latency_s, model.tp_allreduce_per_seq_s
    if n <= 0 or model.tp_allreduces == 0 or not lats:
        return 0.0
    # min over the protocols of latency + n x seconds per sequence; a loop, not min() over a generator: this
    # runs at every step of every rate search (a third of the decode step's time went to the generator).
    one = lats[0] + n * pers[0]
    for i in range(1, len(lats)):
        t = lats[i] + n * pers[i]
        if t < one:
            one = t
    return model.tp_allreduces * one


def all_to_all_s(model: DecodeStepModel, n: float) -> float:
    """The stage's MoE dispatch and combine all-to-alls for ``n`` sequences, seconds (0 without EP)."""
    if n <= 0 or model.all_to_alls == 0:
        return 0.0
    return model.all_to_alls * (model.all_to_all_latency_s + n * model.all_to_all_per_seq_s)


def expert_parts_s(model: DecodeStepModel, n: float) -> tuple[float, float]:
    """(weight stream, FLOPs and per-token work) seconds of one stage's routed experts (the MLP if dense).

    Weights: the experts the batch touches on one GPU (:func:`clusterplan.physics.moe.experts_touched` over the EP
    ranks), each read once per step. FLOPs: the routed-expert work on the busiest EP rank
    (:func:`clusterplan.physics.moe.load_imbalance`).
    Expert GEMMs run at ``moe_gemm_efficiency`` of the dense roofline (grouped GEMM at few tokens per expert; 1 for
    a dense model), and the MoE kernel spends a time per routed token beside them, on the tokens routed to the rank
    and on every token it receives (routing), which the FLOPs side carries (aiconfigurator-core 0.12.0 MoE tables:
    ``max(weights, FLOPs + tokens) + fixed`` per layer; the fixed part, ``expert_layers_s``, :func:`matmuls_s` adds).
    """
    tokens = n * model.tokens_per_seq  # a verification step routes each sequence's k + 1 tokens
    touched = moe.experts_touched(model.moe_experts, model.experts_per_token, tokens) / model.expert_parallel
    g = model.moe_gemm_efficiency
    imbalance = moe.load_imbalance(tokens, model.experts_per_token, model.expert_parallel, model.expert_load_skew)
    imbalance *= moe.routing_ratio(model.expert_routing_curve, tokens)  # unbalanced routing's kernel ratio
    padding = 1.0  # the kernel's row tiles (moe.row_tile_padding: Triton's MXFP4 MoE on Hopper pads each expert's rows)
    if model.expert_row_tile_max:
        padding = moe.row_tile_padding(
            tokens, model.experts_per_token, model.moe_experts, model.expert_parallel, model.expert_row_tile_max
        )
    routed = model.expert_compute_per_seq_s * padding / g + model.expert_routed_per_seq_s
    weights = model.expert_weights_s * touched / (model.moe_weight_efficiency or g)
    return weights, n * (routed * imbalance + model.expert_gathered_per_seq_s)


def matmul_parts_s(model: DecodeStepModel, n: float) -> tuple[float, float]:
    """(weight stream, matmul FLOPs) seconds of one stage's matmuls for ``n`` sequences, all kinds summed: the
    linear layers at the weights' precision (:func:`linear_ramp` at few sequences), the LM head and the routed
    experts (:func:`expert_parts_s`)."""
    expert_w, expert_c = expert_parts_s(model, n)
    weights = model.dense_weights_s + model.head_weights_s + expert_w
    linear = model.compute_per_seq_s * linear_ramp(model, n)
    return weights, n * (linear + model.head_compute_per_seq_s) + expert_c + model.expert_layers_s


def matmuls_s(model: DecodeStepModel, n: float) -> float:
    """One stage's matmuls for ``n`` sequences, seconds: a roofline per kind of GEMM, the kinds in sequence.

    ``max(weights, FLOPs)`` of the linear layers at the weights' precision (attention projections, dense MLPs,
    shared experts, routers), of the 16-bit LM head and of the routed experts (:func:`expert_parts_s`), added:
    each kind is its own kernels, run one after another (LLM-Viewer ``roofline_model.py`` bounds each operation by
    its own roofline and sums them). Layers of one kind share an arithmetic intensity, so splitting them further
    changes nothing; across kinds it does: at 531 sequences Llama 4 Scout's attention and shared-expert GEMMs on
    one B200 are compute-bound (3.6 ms against a 0.8 ms weight stream) while its routed experts are weight-bound
    (13.1 ms), and one ``max`` over the sums hid the former under the latter (aiconfigurator-core 0.12.0's B200
    NVFP4 GEMM table: those four GEMMs take 94 us a layer at M = 512, 4.5 ms over 48 layers).
    """
    expert_w, expert_c = expert_parts_s(model, n)
    linear = max(model.dense_weights_s, n * model.compute_per_seq_s * linear_ramp(model, n))
    head = max(model.head_weights_s, n * model.head_compute_per_seq_s)
    # the MoE kernels' fixed time per layer beside their roofline (aiconfigurator-core 0.12.0 MoE tables)
    return linear + head + max(expert_w, expert_c) + model.expert_layers_s


def linear_ramp(model: DecodeStepModel, n: float) -> float:
    """Multiplier on the linear layers' FLOP time at ``n`` sequences: ``(n + knee) / (n + ref)``, 1 without a knee.

    A GEMM's share of peak falls at small M as ``M / (M + M0)`` (aiconfigurator-core 0.12.0 GEMM tables; factors
    ``decode_gemm_knee_tokens``); the compute factors hold the reference architecture's ramp, so another
    architecture's decode GEMMs take ``(n + knee) / (n + ref)`` of the time. Blackwell NVFP4 at 531 sequences: 1.34.
    """
    ref, knee = model.linear_knee_seqs
    return (n + knee) / (n + ref) if knee > 0.0 else 1.0


def decode_stage_parts_s(model: DecodeStepModel, n: float) -> tuple[float, float, float]:
    """(memory, compute, communication) seconds of one stage processing ``n`` sequences for one token."""
    weights, matmul = matmul_parts_s(model, n)
    mem = weights + n * model.kv_per_seq_s
    comp = matmul + n * model.attention_compute_per_seq_s
    return mem, comp, tp_comm_s(model, n) + all_to_all_s(model, n)


def decode_stage_s(model: DecodeStepModel, n: float) -> float:
    """One stage's decode step for ``n`` sequences, seconds: a roofline per kind of kernel, the kinds in sequence.

    ``matmuls (a roofline per kind of GEMM, :func:`matmuls_s`) + max(KV cache, attention FLOPs) + TP comm + MoE
    all-to-alls``. LLM-Viewer
    (``roofline_model.py``) bounds each operation by its own roofline and adds the operations: the matmuls stream
    the weights while they multiply, but the attention kernels that stream the KV cache run after them, not
    alongside.
    """
    attention = max(n * model.kv_per_seq_s, n * model.attention_compute_per_seq_s)
    return matmuls_s(model, n) + attention + tp_comm_s(model, n) + all_to_all_s(model, n)


def prefill_compute_s(weights_s: float, compute_s: float) -> float:
    """A prompt's pass through the stage's matmuls, seconds: weight stream **plus** FLOPs, not the larger.

    Calculon (Isaev et al., SC'23; ``calculon/system.py``) offers ``roofline`` (the larger of the two) and
    ``no_overlap`` (the sum) and ships ``no_overlap`` for A100 and H100 (``systems/a100_80g.json``,
    ``systems/h100_80g_nvl8.json``). The prefill measurements need the sum: a 128-token prompt sits at the ridge
    point (arithmetic intensity 128-256 FLOP/B), where the larger term put Llama-2-70B TP4 at half the measured
    TTFT on both A100 and H100 (TensorRT-LLM 0.5; docs/model.md section 3). Decode steps keep the roofline
    (:func:`decode_stage_s`): the in-flight-batching throughput rows fit it and fall ~10 % low with the sum.
    Far from the ridge the two differ by the smaller term only.
    """
    return weights_s + compute_s


def host_step_s(model: DecodeStepModel, n: float) -> float:
    """Host (CPU) time of one step on the busiest rank for ``n`` running sequences, seconds: ``h · l · n · share``.

    TensorRT-LLM's PyTorch executor (``_torch/pyexecutor/py_executor.py``) prepares every scheduled request's
    inputs, samples and updates it, and emits its response in Python each step, on every rank for the sequences
    that rank schedules: all of them under attention TP, its own ``1/tp`` under attention DP (``share``). The
    measured ceilings grow with the depth ``l`` of the rank's stage (docs/model.md section 9: 24-, 36- and 48-layer
    MoE models on one page and host), so ``host_per_seq_s`` holds ``h · l``.
    """
    return model.host_per_seq_s * max(n, 0.0) * model.host_rank_share


def decode_step_s(model: DecodeStepModel, n: float) -> float:
    """Time between two tokens of a sequence when ``n`` sequences decode together, seconds.

    One stage: :func:`decode_stage_s`. With ``pp`` stages the batch splits into ``m = min(pp, n)`` micro-batches
    in flight, and a token waits ``pp`` stage-times of ``n/m`` sequences plus ``pp - 1`` stage-to-stage sends.
    The host prepares the next step while the GPU runs this one (TensorRT-LLM's overlap scheduler, on unless
    ``disable_overlap_scheduler``), so a step takes the longer of the GPU work and :func:`host_step_s`; then the
    fixed per-step engine overhead.
    """
    n = max(n, 1.0)
    m = min(float(model.pp), n)
    per_micro = n / m
    stage = decode_stage_s(model, per_micro)
    hops = (model.pp - 1) * (model.pp_hop_fixed_s + per_micro * model.pp_hop_per_seq_s)
    host = host_step_s(model, n) if model.host_per_seq_s else 0.0
    return max(model.pp * stage + hops, host) + model.overhead_s


def decode_stepper(model: DecodeStepModel) -> Callable[[float], float]:
    """:func:`decode_step_s` of ``model`` as a function of ``n`` alone, for a caller that asks at many batches (the
    queueing model's root search: thousands of steps of one replica).

    The same terms as :func:`decode_stage_s`, :func:`matmuls_s`, :func:`expert_parts_s`, :func:`linear_ramp`,
    :func:`tp_comm_s`, :func:`all_to_all_s` and :func:`host_step_s`, in one body: the model's fields are read once,
    the parts that do not depend on ``n`` (a dense model's expert weight stream and per-sequence expert work, the
    no-op routing factors) are computed once, and every other float operation is the one those functions make, in
    their order, so the result is :func:`decode_step_s`'s bit for bit (``tests/test_physics_fast_paths.py`` holds
    the two equal over every example's replicas and fuzzed step models). Change a formula there and here together.
    """
    pp, stages = model.pp, float(model.pp)
    kv_s, attention_s = model.kv_per_seq_s, model.attention_compute_per_seq_s
    dense_s, compute_s = model.dense_weights_s, model.compute_per_seq_s
    ref, knee = model.linear_knee_seqs
    head_s, head_compute_s = model.head_weights_s, model.head_compute_per_seq_s
    experts, k, ep, per_seq = model.moe_experts, model.experts_per_token, model.expert_parallel, model.tokens_per_seq
    g, skew, curve, tile_max = (
        model.moe_gemm_efficiency,
        model.expert_load_skew,
        model.expert_routing_curve,
        (model.expert_row_tile_max),
    )
    weight_g = model.moe_weight_efficiency or g
    expert_w_s, gathered_s = model.expert_weights_s, model.expert_gathered_per_seq_s
    expert_c_s, expert_r_s, layers_s = (
        model.expert_compute_per_seq_s,
        model.expert_routed_per_seq_s,
        (model.expert_layers_s),
    )
    # expert_parts_s with one expert (a dense MLP: moe.experts_touched is 1) and no row tiles (padding 1)
    dense_expert_w = expert_w_s * (moe.experts_touched(experts, k, 1.0) / ep) / weight_g
    untiled_routed = expert_c_s * 1.0 / g + expert_r_s
    reduces, lats, pers = model.tp_allreduces, tuple(model.tp_allreduce_latency_s), tuple(model.tp_allreduce_per_seq_s)
    protocols = range(1, len(lats))
    a2as, a2a_lat_s, a2a_per_s = model.all_to_alls, model.all_to_all_latency_s, model.all_to_all_per_seq_s
    hop_s, hop_per_s = model.pp_hop_fixed_s, model.pp_hop_per_seq_s
    host_s, host_share, overhead_s = model.host_per_seq_s, model.host_rank_share, model.overhead_s

    def step_s(n: float) -> float:
        n = max(n, 1.0)
        x = n / min(stages, n)  # sequences per micro-batch
        tokens = x * per_seq
        if experts > 1:
            expert_w = expert_w_s * (moe.experts_touched(experts, k, tokens) / ep) / weight_g
        else:
            expert_w = dense_expert_w
        imbalance = moe.load_imbalance(tokens, k, ep, skew) if ep > 1 else 1.0
        if curve:
            imbalance *= moe.routing_ratio(curve, tokens)
        if tile_max:
            routed = expert_c_s * moe.row_tile_padding(tokens, k, experts, ep, tile_max) / g + expert_r_s
        else:
            routed = untiled_routed
        expert_c = x * (routed * imbalance + gathered_s)
        linear = max(dense_s, x * compute_s * ((x + knee) / (x + ref) if knee > 0.0 else 1.0))
        matmuls = linear + max(head_s, x * head_compute_s) + max(expert_w, expert_c) + layers_s
        tp = 0.0
        if x > 0 and reduces != 0 and lats:
            one = lats[0] + x * pers[0]
            for i in protocols:
                t = lats[i] + x * pers[i]
                if t < one:
                    one = t
            tp = reduces * one
        a2a = a2as * (a2a_lat_s + x * a2a_per_s) if x > 0 and a2as != 0 else 0.0
        stage = matmuls + max(x * kv_s, x * attention_s) + tp + a2a
        hops = (pp - 1) * (hop_s + x * hop_per_s)
        host = host_s * max(n, 0.0) * host_share if host_s else 0.0
        return max(pp * stage + hops, host) + overhead_s

    return step_s


def speculative_step_model(model: DecodeStepModel, spec: SpeculativeDecoding) -> DecodeStepModel:
    """A decode step per *kept token* under speculative decoding (draft ``k``, mean acceptance ``tau``, proposer
    cost ``c`` of a target forward).

    One verification step runs the target on ``k + 1`` tokens per sequence: matmul (dense and routed-expert) and
    attention FLOPs, the TP all-reduce and MoE dispatch payloads grow ``k + 1``-fold, the experts touched are those
    of ``k + 1`` tokens a sequence, the weights and KV cache are streamed once (Leviathan et al. 2023,
    arXiv:2211.17192 §3; vLLM ``spec_decode`` scores all proposals in one forward). The proposer adds ``k``
    forwards at ``c`` of the target's weights, KV and FLOPs. The step keeps ``tau`` tokens, so every time is
    divided by ``tau``: :func:`decode_step_s` of the result is the time per output token.
    """
    k, c, tau = float(spec.draft_tokens), spec.cost, spec.acceptance_length
    verify = model.model_copy(
        update={
            "dense_weights_s": model.dense_weights_s * (1.0 + k * c),
            "head_weights_s": model.head_weights_s * (1.0 + k * c),
            "head_compute_per_seq_s": model.head_compute_per_seq_s * (k + 1.0 + k * c),
            # k + 1 tokens a sequence in each verification GEMM: its knee is k + 1 times fewer sequences
            "linear_knee_seqs": tuple(x / (k + 1.0) for x in model.linear_knee_seqs),
            "kv_per_seq_s": model.kv_per_seq_s * (1.0 + k * c),
            "compute_per_seq_s": model.compute_per_seq_s * (k + 1.0 + k * c),
            "expert_compute_per_seq_s": model.expert_compute_per_seq_s * (k + 1.0 + k * c),
            "expert_routed_per_seq_s": model.expert_routed_per_seq_s * (k + 1.0 + k * c),
            "expert_gathered_per_seq_s": model.expert_gathered_per_seq_s * (k + 1.0 + k * c),
            "attention_compute_per_seq_s": model.attention_compute_per_seq_s * (k + 1.0),
            "tp_allreduce_per_seq_s": [x * (k + 1.0) for x in model.tp_allreduce_per_seq_s],
            "pp_hop_per_seq_s": model.pp_hop_per_seq_s * (k + 1.0),
            "all_to_all_per_seq_s": model.all_to_all_per_seq_s * (k + 1.0),
            # the k + 1 tokens of a sequence reach more experts than one does: more expert weights stream
            "tokens_per_seq": model.tokens_per_seq * (k + 1.0),
            "expert_layers_s": model.expert_layers_s * (1.0 + k * c),  # the proposer's forwards pay it too
        }
    )
    return scale_step_model(verify, 1.0 / tau)


def scale_step_model(model: DecodeStepModel, factor: float) -> DecodeStepModel:
    """Every time of a step model times ``factor`` (fields ending in ``_s``): ``decode_step_s`` scales by it."""
    update: dict[str, object] = {}
    for name in type(model).model_fields:
        if not name.endswith("_s"):
            continue
        value = getattr(model, name)
        update[name] = [x * factor for x in value] if isinstance(value, list) else value * factor
    return model.model_copy(update=update)


def decode_bound(model: DecodeStepModel, n: float) -> Bound:
    """Which resource dominates a decode step at ``n`` sequences (``host``: the CPU's share outlasts the GPU's)."""
    m = min(float(model.pp), max(n, 1.0))
    mem, comp, comm = decode_stage_parts_s(model, max(n, 1.0) / m)
    if model.host_per_seq_s and host_step_s(model, max(n, 1.0)) > model.pp * (max(mem, comp) + comm):
        return "host"
    if comm > max(mem, comp):
        return "communication"
    return "compute" if comp > mem else "memory_bandwidth"


def saturated_rates(
    step_s: float, batch: int, prefill_busy_s: float, output_tokens: float
) -> tuple[float, float, float]:
    """(requests/s, output tokens/s, TPOT s) of a replica kept full at ``batch`` with chunked prefill.

    A request costs ``P_b`` of prefill time and ``O`` decode tokens shared ``batch`` ways:
    ``rps = 1 / (P_b + O·t/B)``; decode steps get the time prefill leaves, so ``TPOT = t / (1 - rps·P_b)``.
    """
    if batch <= 0 or step_s <= 0:
        return 0.0, 0.0, math.inf
    rps = 1.0 / (prefill_busy_s + output_tokens * step_s / batch)
    busy = min(rps * prefill_busy_s, 0.999)
    return rps, rps * output_tokens, step_s / (1.0 - busy)
