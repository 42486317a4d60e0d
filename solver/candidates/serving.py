"""Serving rows: every replica shape of a serving workload on every GPU type, with its rates and reasons."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from clusterplan.physics.reasons import (
    KvStreamOverLink,
    MissesLatencyTargets,
    ModelDoesNotFit,
    ReasonCategory,
    of_category,
)

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
    from clusterplan.evaluation.evaluate import ServingRates
    from clusterplan.evaluation.pools import PrefillReplica
    from clusterplan.physics.factors import Assumptions
    from clusterplan.physics.types import LatencyAtLoad, ServingEstimate
    from clusterplan.requirement.schema import ServingWorkload
from clusterplan.candidates.offerings import forbidden_for
from clusterplan.candidates.prune import prune_serving_rows
from clusterplan.candidates.table import (
    PP_DEGREES,
    RACK_TP_DEGREES,
    SERVING_QUANTS,
    TP_DEGREES,
    Exclusion,
    GpuType,
    Limits,
    ServingRow,
    ServingTargets,
    WorkloadCandidates,
    excluded,
    hard_reasons,
)
from clusterplan.evaluation.uncertainty import NO_DERATE, Derate
from clusterplan.forks import shared_work
from clusterplan.physics.layout import Layout

V = TypeVar("V")

# Workload fields no row reads (the demand: rows describe one replica) and those only the rate search
# reads (the p95 targets): what :class:`clusterplan.candidates.build.CandidateCache` keys leave out.
DEMAND_FIELDS = ("requests_per_min", "tokens_per_sec", "peak_to_average")
TARGET_FIELDS = ("p95_latency", "p95_ttft", "p95_tpot")


LayoutKey = tuple[str, Layout]  # GPU id and one replica's layout (TP, PP, weight and KV precision, EP, attention DP)


@dataclass(frozen=True, slots=True)
class ServingInputs:
    """What a serving workload's rows read beside the derating and the physics memo: the workload, its model, the
    catalog, the GPU types, the limits and the requirement's assumptions."""

    w: ServingWorkload
    arch: ModelArchitecture
    catalog: Catalog
    gpus: dict[str, GpuType]
    limits: Limits
    assumptions: Assumptions


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """One layout at one batch that physics allows: everything its row holds but the rate search's figures."""

    layout: Layout
    est: ServingEstimate  # as the row reads it (a link reason waived: the tp_nvlink family decides)
    memo_est: ServingEstimate  # the memoised estimate (its p95s per rate are memoised by identity)
    rate_nolat_rps: float
    forbidden_by: tuple[tuple[str, str], ...]
    families: frozenset[str]
    nvlink_gpus: int  # GPUs of one stage that share one NVLink domain (Layout.nvlink_group): tp, but 8 of wide EP
    network_gb_per_s: float  # wide EP: the network per GPU its all-to-all is rated at (0: it crosses no servers)


# Candidates considered, and per GPU type (in id order) its operating points and exclusions in visiting order.
Layouts = tuple[int, tuple[tuple[str, tuple["OperatingPoint | Exclusion", ...]], ...]]


@dataclass(frozen=True, slots=True)
class PoolShape:
    """One pool layout that fits and that no family forbids, with its ceiling rate per role (no targets)."""

    gpu_id: str
    layout: Layout
    est: ServingEstimate
    prefill_ceiling_rps: float
    decode_ceiling_rps: float


@dataclass
class ServingPhysics:
    """Memo of one serving workload's per-layout physics (largest batch, estimate at a batch), which its
    targets and demand do not change; the caller keys it by everything else (candidates/build.py)."""

    batches: dict[LayoutKey, int] = field(default_factory=dict)
    estimates: dict[tuple[LayoutKey, int], ServingEstimate] = field(default_factory=dict)
    # Per estimate (by identity, held): its p95s at a rate, each rate's kept (queueing.loader, which keeps its decode
    # step at each running batch: the rate searches of other targets and of a retargeted build share them).
    loads: dict[int, tuple[ServingEstimate, Callable[[float], LatencyAtLoad]]] = field(default_factory=dict)
    # Per estimate (by identity, held): its decode-only replica and that replica's p95s at a rate, each rate's kept.
    decode_loads: dict[int, tuple[ServingEstimate, ServingEstimate, Callable[[float], LatencyAtLoad]]] = field(
        default_factory=dict
    )
    # Per (GPU types and limits as the layouts read them, keep_latency, derating): the operating points and
    # exclusions of every layout (:func:`_layouts`); of the workload, only the rate searches read the targets.
    layouts: dict[Hashable, Layouts] = field(default_factory=dict)
    # Per (GPU types and limits as the layouts read them, derating): the pool shapes that fit (:func:`_pool_shapes`).
    pool_shapes: dict[Hashable, list[PoolShape]] = field(default_factory=dict)

    # Per estimate (by identity, held): it as a prefill replica, its p95 TTFT at a rate memoised.
    prefill_loads: dict[int, tuple[ServingEstimate, PrefillReplica]] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, object]:
        """What a forked build sends back (candidates/build.py): the memos keyed by an estimate's identity, which
        another process's copies do not share, left out; they are filled again as the rate searches need them."""
        return {**self.__dict__, "loads": {}, "decode_loads": {}, "prefill_loads": {}}

    def max_batch(
        self, arch: ModelArchitecture, spec: GpuSpec, w: ServingWorkload, layout: Layout, assumptions: Assumptions
    ) -> int:
        """:func:`clusterplan.evaluation.evaluate.max_batch`, once per layout."""
        from clusterplan.evaluation import evaluate

        key = (spec.id, layout)
        if key not in self.batches:
            self.batches[key] = evaluate.max_batch(arch, spec, w, layout, assumptions)
        return self.batches[key]

    def estimate(
        self,
        arch: ModelArchitecture,
        spec: GpuSpec,
        w: ServingWorkload,
        layout: Layout,
        *,
        batch: int,
        assumptions: Assumptions,
    ) -> ServingEstimate:
        """:func:`clusterplan.evaluation.evaluate.serving_estimate`, once per layout and batch."""
        from clusterplan.evaluation import evaluate

        key = ((spec.id, layout), batch)
        if key not in self.estimates:
            self.estimates[key] = evaluate.serving_estimate(arch, spec, w, layout, batch=batch, assumptions=assumptions)
        return self.estimates[key]

    def at_load(
        self, est: ServingEstimate, w: ServingWorkload, assumptions: Assumptions
    ) -> Callable[[float], LatencyAtLoad]:
        """:func:`clusterplan.physics.queueing.latency_at_load` of ``est`` (a memoised estimate: one
        per layout and batch), once per rate: the rate searches of other targets visit the same rates. A new rate
        reads the decode steps of earlier ones (one :func:`clusterplan.physics.queueing.loader` per estimate)."""
        from clusterplan.physics import queueing

        held = self.loads.get(id(est))
        if held is None:
            at_rate = queueing.loader(
                est, input_tokens=w.input_tokens, output_tokens=w.output_tokens, assumptions=assumptions
            )
            held = self.loads[id(est)] = (est, _once_per_rate(at_rate))
        return held[1]

    def decode_replica(
        self, est: ServingEstimate, w: ServingWorkload, assumptions: Assumptions
    ) -> tuple[ServingEstimate, Callable[[float], LatencyAtLoad]]:
        """``est`` as a decode-only replica (:func:`clusterplan.physics.disagg.decode_only`, once) and
        :func:`clusterplan.evaluation.pools.decode_at_load` of it, once per rate."""
        from clusterplan.evaluation import pools
        from clusterplan.physics import disagg

        held = self.decode_loads.get(id(est))
        if held is None:
            dec = disagg.decode_only(est, output_tokens=w.output_tokens)
            held = self.decode_loads[id(est)] = (est, dec, _once_per_rate(pools.decode_at_load(dec, w, assumptions)))
        return held[1], held[2]

    def prefill_replica(
        self, est: ServingEstimate, arch: ModelArchitecture, spec: GpuSpec, w: ServingWorkload, assumptions: Assumptions
    ) -> PrefillReplica:
        """:func:`clusterplan.evaluation.pools.prefill_replica` of ``est``, once, its p95 TTFT once per rate."""
        from clusterplan.evaluation import pools

        held = self.prefill_loads.get(id(est))
        if held is None:
            made = pools.prefill_replica(est, arch, spec, w, assumptions)
            held = self.prefill_loads[id(est)] = (est, replace(made, at=_once_per_rate(made.at)))
        return held[1]


def _once_per_rate(at_rate: Callable[[float], V]) -> Callable[[float], V]:
    """``at_rate``, each rate's answer kept: the rate searches of other targets, and a retargeted build's, visit the
    same rates."""
    table: dict[float, V] = {}

    def at(rate: float) -> V:
        got = table.get(rate)
        if got is None:
            got = table[rate] = at_rate(rate)
        return got

    return at


def with_demand(wc: WorkloadCandidates, w: ServingWorkload) -> WorkloadCandidates:
    """``wc`` with the demand figures of ``w`` (peak requests/s = average x peak_to_average)."""
    profile = tuple(w.profile.requests_per_s_by_hour) if w.profile is not None else ()
    return replace(
        wc, demand_rps=w.requests_per_s * w.peak_to_average, average_rps=w.requests_per_s, profile_rps=profile
    )


@dataclass(frozen=True)
class CostCap:
    """The rows a design costing at most ``max_usd`` cannot use (a trade's target probes: only a design cheaper
    than the best one counts). A row's floor is its GPUs x the fewest replicas it can serve with x the least
    horizon cost of one GPU of its type (``usd_per_gpu``, :func:`clusterplan.candidates.build.usd_per_gpu_floor`):
    every figure is at most what the model charges, so a row over the cap is in no design under it."""

    max_usd: float
    usd_per_gpu: Mapping[str, float]

    def excludes(self, gpu_id: str, gpus: int, replicas: int) -> bool:
        unit = self.usd_per_gpu.get(gpu_id)
        # 1e-9: a float product a hair over an exact cap must not drop a row the model could use.
        return unit is not None and gpus * replicas * unit * (1.0 - 1e-9) > self.max_usd


def fewest_replicas(demand_rps: float, rate_rps: float, *, alone: bool) -> int:
    """Replicas a row needs at ``rate_rps`` each: the demand over the rate when the row serves it alone (one shape
    per workload), else 1. Rounded down a hair (1e-9), so that a float quotient never overstates it."""
    if not alone or rate_rps <= 0 or demand_rps <= 0:
        return 1
    return max(1, math.ceil(demand_rps / rate_rps * (1.0 - 1e-9)))


def within_cap(
    rows: list[ServingRow], cap: CostCap, demand_rps: float, *, mixed: bool, targets: bool
) -> list[ServingRow]:
    """``rows`` less those ``cap`` excludes: an aggregated row of a one-shape workload serves the whole demand
    (at its rate within targets, or at its ceiling without targets); a pool row or a mixed one may serve with one."""
    out = []
    for r in rows:
        rate = r.rate_rps if targets else r.rate_nolat_rps
        n = fewest_replicas(demand_rps, rate, alone=r.role == "both" and not mixed)
        if not cap.excludes(r.gpu_id, r.gpus, n):
            out.append(r)
    return out


def _kv_default(quant: str, w: ServingWorkload, spec: GpuSpec) -> str:
    if w.kv_cache_precision is not None:
        return w.kv_cache_precision
    from clusterplan.physics.rules import default_kv_precision

    return default_kv_precision(spec, quant)


def _batch_ladder(max_batch: int) -> list[int]:
    out = []
    b = 1
    while b < max_batch:
        out.append(b)
        b *= 2
    out.append(max_batch)
    return sorted(set(out))


def serving_shapes(g: GpuType) -> list[tuple[int, int]]:
    """(TP, PP) pairs tried for one GPU type.

    TP 1, 2, 4, 8 (wider than the NVLink domain: kept, forbidden by ``tp_nvlink``), and 16, 32, 64 where
    one NVLink domain spans them (an NVL72 rack); pipeline parallelism 2 and 4 only on top of TP 8 (the
    widest NVLink TP group, for PCIe-only GPUs TP 1): PP inside one NVLink domain never beats TP there,
    and PP is how a replica spans domains or nodes.
    """
    widest = min(g.nvlink_domain, max(TP_DEGREES))
    shapes = [(tp, 1) for tp in TP_DEGREES]
    shapes += [(tp, 1) for tp in RACK_TP_DEGREES if tp <= g.nvlink_domain]
    shapes += [(widest, pp) for pp in PP_DEGREES if pp > 1]
    return shapes


WIDE_EP_MIN_DOMAIN = 8  # HGX and OAM boards: servers a wide-EP stage spans hold 8 GPUs on one NVLink/IF domain


def wide_ep_degrees(arch: ModelArchitecture, g: GpuType) -> list[int]:
    """Expert-parallel degrees of a stage spanning servers (wide EP) tried for an MoE model: 16, 32 and 64 beyond
    an 8-GPU NVLink domain, attention data-parallel on every GPU and the experts split over all of them, as the
    engines run it across nodes (vLLM ``--data-parallel-size 32 --data-parallel-size-local 8
    --enable-expert-parallel``; SGLang ``--tp 32 --dp 32 --enable-dp-attention --ep-size 32 --moe-a2a-backend
    deepep --nnodes 4``). Empty for a dense model, a PCIe or workstation part, and a rack whose NVLink domain
    already spans them (its TP rows hold the same layouts inside the rack)."""
    from clusterplan.physics import moe

    if not moe.is_moe(arch) or g.gpu_class != "datacenter" or g.nvlink_domain < WIDE_EP_MIN_DOMAIN:
        return []
    return [e for e in RACK_TP_DEGREES if e > g.nvlink_domain and moe.layout_problem(arch, e, e, True) is None]


def _quant_shapes(spec: GpuSpec, g: GpuType) -> list[tuple[str, int, int]]:
    """(weight precision, TP, PP) of one GPU type as the rows visit them: fewest GPUs, then narrowest TP, then the
    precision order of ``SERVING_QUANTS``. fp4 where FP4 tensor cores run it: weight-only FP4 elsewhere is the int4
    row's memory (within 2%) and the same 16-bit matmuls, so the planner plans int4 there (estimate --quant fp4
    still prices it)."""
    from clusterplan.physics import rules

    order = {q: i for i, q in enumerate(SERVING_QUANTS)}
    quants = [q for q in SERVING_QUANTS if q != "fp4" or rules.supports_precision(spec, "fp4")]
    return sorted(
        ((q, tp, pp) for q in quants for tp, pp in serving_shapes(g)), key=lambda c: (c[1] * c[2], c[1], order[c[0]])
    )


def _layout_key(gpus: dict[str, GpuType], limits: Limits) -> Hashable:
    """What the layouts read of the GPU types and the limits (not prices or budgets: a sweep over them reuses one)."""
    return (
        tuple(sorted((gid, replace(g, price_usd=None)) for gid, g in gpus.items())),
        limits.allowed_gpus,
        limits.quantizations,
    )


def _layouts(inputs: ServingInputs, keep_latency: bool, derate: Derate, memo: ServingPhysics) -> Layouts:
    """Every layout of every GPU type, in the order the rows visit them: an exclusion, or an operating point.

    Nothing here reads the workload's targets or demand, so a retargeted build (the infeasibility analysis,
    a trade's target search, a latency sweep) reuses it and redoes only the rate searches. Each GPU type's layouts
    are independent of the others': they are worked out beside a forked worker where one may run
    (:func:`clusterplan.forks.shared_work`), the worker's share of the memo coming back with them."""
    gids = sorted(inputs.gpus)
    parts = shared_work(gids, lambda gid: _gpu_layouts(inputs, gid, keep_latency, derate, memo))
    for part in parts:
        part.merge_into(memo)
    return sum(p.considered for p in parts), tuple((gid, p.entries) for gid, p in zip(gids, parts, strict=True))


class _GpuLayouts:
    """One GPU type's layouts (:func:`_gpu_layouts`): how many were considered and their entries. Made in a forked
    worker, it carries back the memo entries of that GPU type it made (pickled with the entries, so an operating
    point's estimate is still the memo's own), which :meth:`merge_into` adds to the caller's memo."""

    def __init__(
        self, gid: str, considered: int, entries: tuple[OperatingPoint | Exclusion, ...], memo: ServingPhysics
    ):
        self.gid, self.considered, self.entries = gid, considered, entries
        self.memo: ServingPhysics | None = memo
        self.batches: dict[LayoutKey, int] = {}
        self.estimates: dict[tuple[LayoutKey, int], ServingEstimate] = {}

    def __getstate__(self) -> dict[str, object]:
        memo = self.memo
        assert memo is not None
        return {
            **self.__dict__,
            "memo": None,
            "batches": {k: v for k, v in memo.batches.items() if k[0] == self.gid},
            "estimates": {k: v for k, v in memo.estimates.items() if k[0][0] == self.gid},
        }

    def merge_into(self, memo: ServingPhysics) -> None:
        """Add what the worker's memo made for this GPU type (nothing where it was made in this process)."""
        for layout_key, b in self.batches.items():
            memo.batches.setdefault(layout_key, b)
        for estimate_key, e in self.estimates.items():
            memo.estimates.setdefault(estimate_key, e)


def _gpu_layouts(
    inputs: ServingInputs, gid: str, keep_latency: bool, derate: Derate, memo: ServingPhysics
) -> _GpuLayouts:
    """The layouts of GPU type ``gid``, in the order the rows visit them (see :func:`_layouts`)."""
    from clusterplan.evaluation import evaluate
    from clusterplan.physics import rules

    w, arch, catalog, gpus, limits, assumptions = (
        inputs.w, inputs.arch, inputs.catalog, inputs.gpus, inputs.limits, inputs.assumptions
    )  # fmt: skip
    considered = 0
    spec = catalog.gpus[gid]
    g = gpus[gid]
    half = rules.half_precision(spec)
    combos = [
        (quant_choice, tp, pp, ep, attention_dp)
        for quant_choice, tp, pp in _quant_shapes(spec, g)
        for ep, attention_dp in evaluate.moe_layouts(arch, tp)  # ascending (ep, attention_dp)
    ]
    # Wide EP: a stage over several servers, experts only, joined by the all-to-all over their fabric.
    wide = wide_ep_degrees(arch, g)
    combos += [
        (quant_choice, e, 1, e, True)
        for e in wide
        for quant_choice in dict.fromkeys(q for q, tp, pp in _quant_shapes(spec, g) if (tp, pp) == (1, 1))
    ]
    entries: list[OperatingPoint | Exclusion] = []
    for quant_choice, tp, pp, ep, attention_dp in combos:
        quant = half if quant_choice == "bf16" else quant_choice
        kv = _kv_default(quant, w, spec)
        considered += 1
        layout = Layout(tp=tp, pp=pp, quant=quant, kv_precision=kv, ep=ep, attention_dp=attention_dp)
        wide_ep = layout.expert_parallel_only and tp in wide  # a stage over servers, joined by their fabric
        hard = hard_reasons(rules.serving_rule_reasons(arch, spec, tp, pp, quant, kv, wide_ep))
        if hard:
            entries.append(excluded(gid, hard[0]))
            continue
        max_batch = memo.max_batch(arch, spec, w, layout, assumptions)
        if max_batch < 1:
            # the reasons the estimate at one sequence would give, without estimating its speed
            reasons = hard_reasons(evaluate.serving_reasons(arch, spec, w, layout, batch=1, assumptions=assumptions))
            fallback = ModelDoesNotFit(gpu=g.name, model=arch.name, quant=quant, tp=tp, pp=pp)
            entries.append(excluded(gid, reasons[0] if reasons else fallback))
            continue
        group = layout.nvlink_group(g.nvlink_domain) if wide_ep else tp
        forbidden = tuple(forbidden_for(g, limits, tp=group, quant=quant))
        # The largest batch that fits is the operating point: a larger concurrency cap never
        # lowers the rate a replica takes within its targets (the running batch follows the
        # load; the cap only adds room), so it dominates smaller batches for cost. The
        # min-latency objective also gets batch 1.
        top = evaluate.serving_batch(max_batch)
        for batch in sorted({top, 1} if keep_latency else {top}, reverse=True):
            est = memo_est = memo.estimate(arch, spec, w, layout, batch=batch, assumptions=assumptions)
            if of_category(est.why_not, ReasonCategory.LINK):
                # Estimated over PCIe; the tp_nvlink family decides whether it may be used.
                est = est.model_copy(update={"feasible": True, "why_not": []})
            if not est.feasible:
                entries.append(excluded(gid, est.why_not[0]))  # infeasible: at least one reason
                continue
            entries.append(
                OperatingPoint(
                    layout=layout, est=est, memo_est=memo_est, rate_nolat_rps=evaluate.rate_at_ceiling(est, assumptions, derate),
                    forbidden_by=forbidden, families=frozenset(f for f, _ in forbidden), nvlink_gpus=group,
                    network_gb_per_s=assumptions.inter_node_bandwidth_gb_per_s if wide_ep else 0.0,
                )
            )  # fmt: skip
    return _GpuLayouts(gid, considered, tuple(entries), memo)


def serving_candidates(
    index: int,
    inputs: ServingInputs,
    allow_mixed: bool,
    keep_latency: bool = False,
    derate: Derate = NO_DERATE,
    physics: ServingPhysics | None = None,
    cap: CostCap | None = None,
) -> WorkloadCandidates:
    """Every replica shape of one serving workload on every GPU type, with its rates and reasons.

    Shapes: GPU x (TP, PP) from :func:`serving_shapes` x weight precision (16-bit, fp8, int8, int4).
    Per shape one operating point becomes a row: the largest batch (concurrency cap) whose KV cache
    fits, with the rate meeting the p95 targets and the rate at the utilisation ceiling (both derated
    by ``derate`` at a requirement's ``confidence``). Anything physics rules out becomes an :class:`Exclusion`.
    ``physics``: a memo of the layouts' batches and estimates from a variant of this workload with other
    targets or demand (the same rows, faster). ``cap``: leave out the rows no design under its cost can use
    (a trade's probe; such a table serves that probe's solve only): a layout over it even at its ceiling
    rate is skipped before its latency-target rate search.
    """
    from clusterplan.evaluation import evaluate

    w, arch, gpus, assumptions = inputs.w, inputs.arch, inputs.gpus, inputs.assumptions
    targets = ServingTargets(w.p95_latency, w.p95_ttft, w.p95_tpot)
    rows: list[ServingRow] = []
    excl: list[Exclusion] = []
    # Rows another row of the same GPU type dominates are dropped (prune_serving_rows). Shapes are
    # visited from the fewest GPUs up, so a shape whose best possible rate (its rate without
    # targets) is already beaten by copies of a smaller shape is skipped before its latency-target
    # rate (the expensive queueing search) is computed: the outcome is the same table, faster.
    cross = (not allow_mixed) or w.redundancy == 0
    skip_dominated = cross and not keep_latency
    memo = physics if physics is not None else ServingPhysics()
    demand = w.requests_per_s * w.peak_to_average
    key = (_layout_key(gpus, inputs.limits), keep_latency, derate)
    layouts = memo.layouts.get(key)
    if layouts is None:
        layouts = memo.layouts[key] = _layouts(inputs, keep_latency, derate, memo)
    considered, per_gpu = layouts
    for gid, entries in per_gpu:
        # this GPU type's rows so far, as the skip reads them: TP, GPUs, forbidding families, rate with and without
        # targets (the least of the two)
        mine: list[tuple[int, int, frozenset[str], float]] = []
        for entry in entries:
            if isinstance(entry, Exclusion):
                excl.append(entry)
                continue
            tp, pp, rate_nolat, fams, est = (
                entry.layout.tp, entry.layout.pp, entry.rate_nolat_rps, entry.families, entry.est
            )  # fmt: skip
            # The rate within targets is at most the ceiling rate: the fewest replicas at the ceiling bound it.
            if cap is not None and cap.excludes(
                gid, tp * pp, fewest_replicas(demand, rate_nolat, alone=not allow_mixed)
            ):
                continue
            if skip_dominated and any(
                a_tp <= tp and a_gpus <= tp * pp and a_fams <= fams and (tp * pp // a_gpus) * a_rate >= rate_nolat
                for a_tp, a_gpus, a_fams, a_rate in mine
            ):
                continue
            rated = evaluate.serving_rates(
                est, w, assumptions, derate, at_load=memo.at_load(entry.memo_est, w, assumptions)
            )
            row = _aggregated_row(gid, entry, rated)
            rows.append(row)
            mine.append((tp, tp * pp, fams, min(row.rate_rps, row.rate_nolat_rps)))
    if targets.any:
        excl += _missing_targets(rows, gpus, targets)
    pruned = prune_serving_rows(rows, cross_shape=cross, keep_latency=keep_latency)
    if pools_allowed(w, keep_latency):
        pool_rows, kv_excl = pool_candidates(inputs, derate, memo, cap=cap)
        excl += kv_excl
        for role in ("prefill", "decode"):
            pruned += prune_serving_rows([r for r in pool_rows if r.role == role], cross_shape=cross)
        if w.disaggregation == "required":
            pruned = [r for r in pruned if r.role != "both"]
    if cap is not None:
        pruned = within_cap(pruned, cap, demand, mixed=allow_mixed, targets=targets.any)
    wc = WorkloadCandidates(
        index=index,
        name=w.name,
        kind="serving",
        rows=tuple(pruned),
        exclusions=tuple(excl),
        model_name=arch.name,
        input_tokens=w.input_tokens,
        output_tokens=w.output_tokens,
        targets=targets,
        redundancy=w.redundancy,
        allow_mixed=allow_mixed,
        disaggregation=w.disaggregation if pools_allowed(w, keep_latency) else "off",
        considered=considered,
    )
    return with_demand(wc, w)


def _aggregated_row(gid: str, entry: OperatingPoint, rated: ServingRates) -> ServingRow:
    """The row of one operating point at its rated load: the rate within targets and at the ceiling, the p95s and
    means there, the estimate's unloaded figures and memory."""
    est, layout = entry.est, entry.layout
    lat, top_lat = rated.rated, rated.at_ceiling
    return ServingRow(
        gpu_id=gid,
        tp=layout.tp,
        pp=layout.pp,
        quant=layout.quant,
        batch=est.batch,
        rate_rps=rated.rate_rps,
        rate_nolat_rps=entry.rate_nolat_rps,
        kv_precision=layout.kv_precision,
        p95_e2e_s=lat.p95_e2e_s,
        p95_ttft_s=lat.p95_ttft_s,
        p95_tpot_s=lat.p95_tpot_s,
        ceiling_p95_e2e_s=top_lat.p95_e2e_s,
        ceiling_p95_ttft_s=top_lat.p95_ttft_s,
        ceiling_p95_tpot_s=top_lat.p95_tpot_s,
        mean_e2e_s=lat.mean_e2e_s,
        mean_ttft_s=lat.mean_ttft_s,
        mean_tpot_s=lat.mean_tpot_s,
        ttft_s=est.ttft_s,
        tpot_s=est.tpot_s,
        output_tokens_per_s=est.output_tokens_per_s,
        memory_gib=est.memory.total_gib,
        capacity_gib=est.memory.capacity_gib,
        bound=est.bound,
        forbidden_by=entry.forbidden_by,
        ep=layout.ep,
        attention_dp=layout.attention_dp,
        nvlink_gpus=entry.nvlink_gpus,
        network_gb_per_s=entry.network_gb_per_s,
    )


def _missing_targets(rows: list[ServingRow], gpus: dict[str, GpuType], targets: ServingTargets) -> list[Exclusion]:
    """An exclusion per GPU type whose every row misses the latency targets, quoting its row of least p95 TTFT."""
    out = []
    for gid in sorted(gpus):
        mine = [r for r in rows if r.gpu_id == gid]
        if mine and all(r.rate_rps <= 0 for r in mine):
            best = min(mine, key=lambda r: r.p95_ttft_s)
            out.append(
                excluded(
                    gid,
                    MissesLatencyTargets(
                        gpu=gpus[gid].name, best_ttft_s=best.ttft_s, best_tpot_s=best.tpot_s, best_tp=best.tp,
                        best_quant=best.quant, p95_ttft_target_s=targets.p95_ttft_s,
                        p95_tpot_target_s=targets.p95_tpot_s,
                    ),
                )
            )  # fmt: skip
    return out


def pools_allowed(w: ServingWorkload, keep_latency: bool) -> bool:
    """Whether prefill and decode pool rows are offered: the switch is not off, no N+k (spares of a pool are
    not modelled) and not the min-latency objective (its p95 is per row; a pool's is half a request's)."""
    return w.disaggregation != "off" and w.redundancy == 0 and not keep_latency


def pool_candidates(
    inputs: ServingInputs, derate: Derate, memo: ServingPhysics, *, cap: CostCap | None = None
) -> tuple[list[ServingRow], list[Exclusion]]:
    """One prefill-pool row and one decode-pool row per replica shape that fits (the aggregated rows' shapes,
    at the same batch policy), rated by :mod:`clusterplan.evaluation.pools`. Rows that miss their share of the
    targets even idle are left out (no count of them could serve); the caller prunes dominated shapes. A prefill
    row whose KV stream at its rated rate is more than the link between the pools carries is ruled out, with its
    reason (``kv_stream_over_link``)."""
    from clusterplan.evaluation import pools

    w, arch, catalog, assumptions = inputs.w, inputs.arch, inputs.catalog, inputs.assumptions
    out: list[ServingRow] = []
    ruled_out: list[Exclusion] = []
    targets = ServingTargets(w.p95_latency, w.p95_ttft, w.p95_tpot)
    key = (_layout_key(inputs.gpus, inputs.limits), derate)
    shapes = memo.pool_shapes.get(key)
    if shapes is None:
        shapes = memo.pool_shapes[key] = _pool_shapes(inputs, derate, memo)
    # the rows of this GPU type so far per role, as the skip reads them: TP, GPUs, rate with and without targets (least)
    mine: dict[str, list[tuple[int, int, float]]] = {"prefill": [], "decode": []}
    gid = None
    for shape in shapes:
        if shape.gpu_id != gid:
            gid = shape.gpu_id
            mine = {"prefill": [], "decode": []}
        tp, pp, est = shape.layout.tp, shape.layout.pp, shape.est
        if cap is not None and cap.excludes(shape.gpu_id, tp * pp, 1):
            continue  # over the cap with one replica (``cap``: as in serving_candidates)
        for role in ("prefill", "decode"):
            # As for aggregated rows: a shape whose ceiling rate copies of a smaller kept shape already
            # reach is dominated; skip its latency-target search (the same table, faster).
            ceiling = shape.prefill_ceiling_rps if role == "prefill" else shape.decode_ceiling_rps
            if any(
                a_tp <= tp and a_gpus <= tp * pp and (tp * pp // a_gpus) * a_rate >= ceiling
                for a_tp, a_gpus, a_rate in mine[role]
            ):
                continue
            if role == "prefill":
                spec = catalog.gpus[gid]
                prefill = memo.prefill_replica(est, arch, spec, w, assumptions)
                rated = pools.prefill_rates(est, arch, spec, w, assumptions, derate, replica=prefill)
            else:
                rated = pools.decode_rates(
                    est, w, assumptions, derate, replica=memo.decode_replica(est, w, assumptions)
                )
            if rated.rate_no_targets_rps <= 0 or (targets.any and rated.rate_rps <= 0):
                continue
            if not rated.kv_stream_fits:
                spec = catalog.gpus[gid]
                reason = KvStreamOverLink(
                    gpu=spec.name, link=pools.kv_link(spec), stream_gb_per_s=rated.kv_stream_gb_per_s,
                    link_gb_per_s=rated.kv_link_gb_per_s,
                )  # fmt: skip
                ruled_out.append(excluded(gid, reason))
                continue
            out.append(
                ServingRow(
                    gpu_id=gid, tp=tp, pp=pp, quant=shape.layout.quant, batch=est.batch,
                    rate_rps=rated.rate_rps, rate_nolat_rps=rated.rate_no_targets_rps,
                    kv_precision=shape.layout.kv_precision,
                    p95_e2e_s=rated.p95_e2e_s, p95_ttft_s=rated.p95_ttft_s, p95_tpot_s=rated.p95_tpot_s,
                    ttft_s=rated.ttft_s, tpot_s=rated.tpot_s,
                    output_tokens_per_s=rated.rate_no_targets_rps * w.output_tokens if role == "decode" else 0.0,
                    memory_gib=est.memory.total_gib, capacity_gib=est.memory.capacity_gib,
                    bound="compute" if role == "prefill" else est.bound, role=role,
                )
            )  # fmt: skip
            mine[role].append((tp, tp * pp, min(out[-1].rate_rps, out[-1].rate_nolat_rps)))
    return out, ruled_out


def _pool_shapes(inputs: ServingInputs, derate: Derate, memo: ServingPhysics) -> list[PoolShape]:
    """The aggregated rows' shapes a pool replica may take, in the order pool rows visit them: no family forbids
    the layout (the relaxations price aggregated rows), physics allows it and one sequence fits. Nothing here
    reads the targets or the demand (a retargeted build reuses it)."""
    from clusterplan.evaluation import evaluate, pools
    from clusterplan.physics import rules

    w, arch, catalog, gpus, limits, assumptions = (
        inputs.w, inputs.arch, inputs.catalog, inputs.gpus, inputs.limits, inputs.assumptions
    )  # fmt: skip
    out: list[PoolShape] = []
    for gid in sorted(gpus):
        spec = catalog.gpus[gid]
        g = gpus[gid]
        half = rules.half_precision(spec)
        for quant_choice, tp, pp in _quant_shapes(spec, g):
            quant = half if quant_choice == "bf16" else quant_choice
            kv = _kv_default(quant, w, spec)
            if forbidden_for(g, limits, tp=tp, quant=quant):
                continue  # pools only where no family forbids the layout: the relaxations price aggregated rows
            if hard_reasons(rules.serving_rule_reasons(arch, spec, tp, pp, quant, kv)):
                continue
            layout = Layout(tp=tp, pp=pp, quant=quant, kv_precision=kv)
            top = memo.max_batch(arch, spec, w, layout, assumptions)
            if top < 1:
                continue
            est = memo.estimate(arch, spec, w, layout, batch=evaluate.serving_batch(top), assumptions=assumptions)
            if hard_reasons(est.why_not):
                continue
            out.append(
                PoolShape(
                    gpu_id=gid, layout=layout, est=est,
                    prefill_ceiling_rps=pools.prefill_ceiling_rps(est, w, assumptions, derate),
                    decode_ceiling_rps=pools.decode_ceiling_rps(est, w, assumptions, derate),
                )
            )  # fmt: skip
    return out
