"""The whole candidate table of a resolved requirement: offerings, serving and training rows, pruning.

:class:`CandidateCache` is what repeated builds of variants of one requirement (a what-if sweep, the
infeasibility analysis's retargeted tables) may share: each workload's rows, keyed by every input
that makes them, and each serving workload's physics (memory, batch, step times per layout), keyed by
every input of those. A key that differs in anything the rows or the physics read is a miss, so a
table built with a cache equals one built without (``tests/test_sweep_reuse.py``).
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from clusterplan.physics.reasons import (
    ConsumerLicence,
    NotObtainable,
)

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
    from clusterplan.physics.factors import Assumptions
    from clusterplan.requirement.load import ResolvedRequirement
    from clusterplan.requirement.schema import Requirement, ServingWorkload
from clusterplan.candidates.offerings import build_offerings, gpu_type_of, limits_of, tier_exclusions
from clusterplan.candidates.prune import prune_pool_rows
from clusterplan.candidates.serving import (
    DEMAND_FIELDS,
    TARGET_FIELDS,
    CostCap,
    ServingInputs,
    ServingPhysics,
    serving_candidates,
    with_demand,
)
from clusterplan.candidates.table import (
    SERVING_QUANTS,
    CandidateTable,
    GpuType,
    Limits,
    Offering,
    PrecisionGate,
    WorkloadCandidates,
    excluded,
)
from clusterplan.evaluation.uncertainty import Derate, derate_for
from clusterplan.forks import shared_work

# Catalog fields the physics never reads: purchase prices (offerings read them) and provenance.
_NOT_PHYSICS = frozenset({"price", "source", "as_of", "provisional", "provisional_fields", "also_sources", "notes"})


@dataclass
class CandidateCache:
    """Rows and serving physics shared by builds of variants of one requirement (see the module doc).

    ``rows``: per workload key, its :class:`WorkloadCandidates` (demand excluded from serving keys: no
    row reads it; the demand figures are set again on a hit). ``physics``: per serving physics key, the
    memo of its layouts' memory and estimates (targets excluded: only the rate search reads them); read it with
    :meth:`physics_for`. ``shipped``: memos a forked worker made, as it sent them (pickled), read back into
    ``physics`` when a build first needs one (most never are: unpickling each took 10-30 ms).
    """

    rows: dict[Hashable, WorkloadCandidates] = field(default_factory=dict)
    physics: dict[Hashable, ServingPhysics] = field(default_factory=dict)
    shipped: dict[Hashable, bytes] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    # Per catalog object (held, so its id is not reused): its GPUs' physics figures as one key.
    _catalogs: dict[int, tuple[Catalog, str]] = field(default_factory=dict)

    def physics_for(self, key: Hashable) -> ServingPhysics:
        """The memo of serving physics ``key`` (a new, empty one where none was made)."""
        sent = self.shipped.pop(key, None)
        if sent is not None:
            self.physics[key] = pickle.loads(sent)  # bytes this process's own forked worker wrote
        return self.physics.setdefault(key, ServingPhysics())

    def catalog_key(self, catalog: Catalog) -> str:
        held = self._catalogs.get(id(catalog))
        if held is None or held[0] is not catalog:
            text = "\n".join(
                [spec.model_dump_json(exclude=set(_NOT_PHYSICS)) for _, spec in sorted(catalog.gpus.items())]
                + [f.model_dump_json() for _, f in sorted(catalog.frameworks.items())]  # the layouts each runs
                # the engine rows too: a --catalog engine override is physics (requirement/load.py)
                + [engine.model_dump_json() for _, engine in sorted(catalog.engines.items())]
            )
            held = (catalog, text)
            self._catalogs[id(catalog)] = held
        return held[1]


def _physics_key(
    cache: CandidateCache, w: ServingWorkload, arch: ModelArchitecture, catalog: Catalog, assumptions: Assumptions
) -> Hashable:
    """Every input of a serving workload's per-layout physics: the workload less its name, demand and targets."""
    return (
        w.model_dump_json(exclude={"name", *DEMAND_FIELDS, *TARGET_FIELDS}),
        arch.model_dump_json(),
        cache.catalog_key(catalog),
        assumptions.model_dump_json(),
    )


def _serving_key(inputs: ServingInputs, physics_key: Hashable, mixed: bool, keep_latency: bool) -> Hashable:
    """Every input of a serving workload's rows, demand excepted (rows describe one replica); ``physics_key``: its
    physics' (:func:`_physics_key`)."""
    return (
        "serving",
        inputs.w.model_dump_json(exclude=set(DEMAND_FIELDS)),
        physics_key,
        tuple(sorted((gid, replace(g, price_usd=None)) for gid, g in inputs.gpus.items())),
        inputs.limits.allowed_gpus,
        inputs.limits.quantizations,
        mixed,
        keep_latency,
    )


def build_candidates(
    resolved: ResolvedRequirement,
    catalog: Catalog,
    *,
    keep_latency: bool = False,
    cache: CandidateCache | None = None,
    max_usd: float | None = None,
) -> CandidateTable:
    """The candidate table of a requirement: every row costed and estimated before any solver runs.

    ``cache``: rows and physics a previous build of a variant of this requirement left (and this build
    adds to); the table is the same with or without it. ``max_usd``: leave out the serving rows no design
    costing at most that can use (:class:`~clusterplan.candidates.serving.CostCap`; a trade's target probe,
    whose solves all hold the total under it): such a table is not cached and serves that probe only.
    """
    req = resolved.requirement
    limits = limits_of(req, catalog)
    gpus = {gid: gpu_type_of(spec) for gid, spec in sorted(catalog.gpus.items())}
    offerings, notes = build_offerings(catalog, req, gpus, limits)
    cap = None if max_usd is None else CostCap(max_usd, usd_per_gpu_floor(offerings, limits.horizon_months))
    derate = derate_for(req.confidence)  # targets held at this confidence (evaluation/uncertainty.py); default none
    make = _Make(resolved, catalog, gpus, offerings, limits, keep_latency, derate, cap)
    workloads = _made(make, cache)
    # Consumer cards the requirement does not opt in to are not planned (their driver licence), nor are GPUs with no
    # way to obtain them: drop their rows, say why.
    # (Their offerings stay in the table, unusable without rows, so the explanation can say what such a card lost.)
    unlicensed = unlicensed_gpus(req, catalog, gpus)
    placeable = {o.gpu_id for o in offerings} - unlicensed
    final: list[WorkloadCandidates] = []
    for wc in workloads:
        rows = [r for r in wc.rows if r.gpu_id in placeable]
        had = {r.gpu_id for r in wc.rows}
        extra = tuple(
            excluded(
                gid, ConsumerLicence(gpu=gpus[gid].name) if gid in unlicensed else NotObtainable(gpu=gpus[gid].name)
            )
            for gid in sorted(had - placeable)
        )
        final.append(replace(wc, rows=tuple(rows), exclusions=wc.exclusions + extra))  # type: ignore[arg-type]
    table = CandidateTable(
        workloads=tuple(final),
        gpus=gpus,
        offerings=tuple(offerings),
        limits=limits,
        name=req.name,
        assumptions_used=tuple(
            [
                *resolved.model_notes,
                *assumption_lines(req.assumptions),
                *engine_lines(req.workloads, req.assumptions),
                *measured_lines(req.workloads, req.assumptions, [catalog.gpus[g] for g in gpus]),
                *confidence_lines(derate),
            ]
        ),
        notes=tuple(notes),
        offer_exclusions=tuple(tier_exclusions(catalog, req, gpus)),
        precision_gates=tuple(precision_gates(resolved, catalog)),
    )
    return prune_pool_rows(table)


@dataclass(frozen=True)
class _Make:
    """What every workload's rows of one build read beside the workload itself."""

    resolved: ResolvedRequirement
    catalog: Catalog
    gpus: dict[str, GpuType]
    offerings: Sequence[Offering]
    limits: Limits
    keep_latency: bool
    derate: Derate
    cap: CostCap | None

    def mixed(self, w: ServingWorkload) -> bool:
        return w.allow_mixed if w.allow_mixed is not None else self.resolved.requirement.constraints.allow_mixed

    def serving_inputs(self, i: int, w: ServingWorkload) -> ServingInputs:
        """What serving workload ``w`` (the requirement's ``i``-th) reads."""
        req = self.resolved.requirement
        return ServingInputs(w, self.resolved.model_for(i), self.catalog, self.gpus, self.limits, req.assumptions)

    def rows_key(self, i: int, cache: CandidateCache, physics_key: Hashable) -> Hashable:
        """Every input of workload ``i``'s rows (a serving workload's demand excepted; ``physics_key``: its
        :meth:`physics_key`); None: not cached (a probe's table under a cost cap)."""
        req = self.resolved.requirement
        w = req.workloads[i]
        if w.kind == "serving":
            if self.cap is not None:
                return None
            return (_serving_key(self.serving_inputs(i, w), physics_key, self.mixed(w), self.keep_latency), self.derate)
        return (
            "training",
            w.model_dump_json(),
            self.resolved.model_for(i).model_dump_json(),
            cache.catalog_key(self.catalog),
            tuple(sorted(self.gpus.items())),
            tuple(self.offerings),
            self.limits.allowed_gpus,
            req.assumptions.model_dump_json(),
            self.derate,
        )

    def physics_key(self, i: int, cache: CandidateCache) -> Hashable:
        """The key of serving workload ``i``'s physics memo in ``cache`` (None: a training workload)."""
        req = self.resolved.requirement
        w = req.workloads[i]
        if w.kind != "serving":
            return None
        return _physics_key(cache, w, self.resolved.model_for(i), self.catalog, req.assumptions)

    def rows(self, i: int, physics: ServingPhysics | None) -> WorkloadCandidates:
        """Workload ``i``'s rows, made afresh (``physics``: a serving workload's memo, filled as it goes)."""
        w = self.resolved.requirement.workloads[i]
        if w.kind == "serving":
            return serving_candidates(
                i, self.serving_inputs(i, w), self.mixed(w), keep_latency=self.keep_latency, derate=self.derate,
                physics=physics, cap=self.cap,
            )  # fmt: skip
        # Imported here: a serving-only requirement does not load the training layout search and its physics.
        from clusterplan.candidates.training import training_candidates

        req = self.resolved.requirement
        return training_candidates(
            i, w, self.resolved.model_for(i), self.catalog, self.offerings, self.limits, req.assumptions,
            derate=self.derate,
        )  # fmt: skip


@dataclass
class _Job:
    """Workloads whose rows are made afresh together, in order (those sharing one physics memo), that memo and its
    key in the cache."""

    workloads: list[int]
    physics: ServingPhysics | None
    physics_key: Hashable = None


def _made(make: _Make, cache: CandidateCache | None) -> list[WorkloadCandidates]:
    """Every workload's rows, in order: from ``cache`` where it holds them, else made (and added to it).

    The workloads made afresh are independent of one another (a memo shared by several goes with them as one job),
    so they are made side by side with a forked process where one may run (:func:`clusterplan.forks.shared_work`):
    the same rows as made in turn, each by the same pure functions. A memo made in the worker comes back with the
    rows (what later builds of this cache, a trade's probes or a sweep's points, read)."""
    req = make.resolved.requirement
    keys: list[Hashable] = [None] * len(req.workloads)
    jobs: dict[Hashable, _Job] = {}
    first_of: dict[Hashable, int] = {}  # a key's first workload made afresh in this build: later ones read its rows
    for i in range(len(req.workloads)):
        physics, pkey = None, None
        if cache is not None:
            pkey = make.physics_key(i, cache)
            keys[i] = make.rows_key(i, cache, pkey)
            if keys[i] is not None and (keys[i] in cache.rows or keys[i] in first_of):
                continue  # its rows are made: its memo is not read (a memo a worker sent stays pickled)
            if keys[i] is not None:
                first_of[keys[i]] = i
            if pkey is not None:
                physics = cache.physics_for(pkey)
        group: Hashable = ("physics", pkey) if pkey is not None else ("alone", i)
        jobs.setdefault(group, _Job([], physics, pkey)).workloads.append(i)
    # Training layout searches are the longest jobs: first, so that the two processes finish together.
    order = sorted(jobs.values(), key=lambda j: req.workloads[j.workloads[0]].kind == "serving")
    made: dict[int, WorkloadCandidates] = {}
    for job, (rows, memo) in zip(order, shared_work(order, lambda j: _run_job(make, j)), strict=True):
        made.update(rows)
        if cache is not None and job.physics_key is not None and memo.sent is not None:  # made in the worker
            del cache.physics[job.physics_key]
            cache.shipped[job.physics_key] = memo.sent
    out: list[WorkloadCandidates] = []
    for i, w in enumerate(req.workloads):
        key = keys[i]
        if i in made:
            wc = made[i]
        else:  # rows another build, or an earlier workload of this one, made
            assert cache is not None
            hit = cache.rows.get(key, made.get(first_of.get(key, -1)))
            assert hit is not None
            wc = with_demand(replace(hit, index=i), w) if w.kind == "serving" else replace(hit, index=i)
        if cache is not None and key is not None:
            if i in made:
                cache.misses += 1
                cache.rows[key] = wc
            else:
                cache.hits += 1
        out.append(wc)
    return out


class _Memo:
    """A job's physics memo as it comes back: unchanged where the job ran here; from the worker, pickled there and
    kept so (``sent``) until a build reads it (:meth:`CandidateCache.physics_for`)."""

    def __init__(self, physics: ServingPhysics | None) -> None:
        self.physics = physics
        self.sent: bytes | None = None

    def __getstate__(self) -> dict[str, object]:
        sent = None if self.physics is None else pickle.dumps(self.physics, protocol=pickle.HIGHEST_PROTOCOL)
        return {"physics": None, "sent": sent}


def _run_job(make: _Make, job: _Job) -> tuple[dict[int, WorkloadCandidates], _Memo]:
    """A job's workloads' rows, and the memo they filled."""
    return {i: make.rows(i, job.physics) for i in job.workloads}, _Memo(job.physics)


def unlicensed_gpus(req: Requirement, catalog: Catalog, gpus: dict[str, GpuType]) -> frozenset[str]:
    """The consumer (GeForce) cards a requirement may not plan: NVIDIA's GeForce driver licence excludes datacenter
    deployment (catalog source GEFORCE-EULA), so one is planned only with ``constraints.allow_consumer_gpus`` or
    where ``allowed_gpus`` or the inventory names it (a stated choice of that card)."""
    c = req.constraints
    if c.allow_consumer_gpus:
        return frozenset()
    named = {catalog.gpu(n).id for n in [*(c.allowed_gpus or []), *(i.gpu for i in c.inventory)]}
    return frozenset(gid for gid, g in gpus.items() if g.gpu_class == "consumer" and gid not in named)


def usd_per_gpu_floor(offerings: Sequence[Offering], horizon_months: float) -> dict[str, float]:
    """Per GPU type, the least any of its offerings charges one GPU over the horizon, as the model's total counts
    it (planner/families/structure.py: cloud instance-hours; owned capital, none for a server already owned, plus
    energy). A lower bound on what each GPU of that type adds to a design's total (forbidden offerings included)."""
    out: dict[str, float] = {}
    for o in offerings:
        per_gpu = o.horizon_usd(horizon_months, capital=not o.inventory_units) / o.gpus_per_unit
        out[o.gpu_id] = min(out.get(o.gpu_id, per_gpu), per_gpu)
    return out


def precision_gates(resolved: ResolvedRequirement, catalog: Catalog) -> list[PrecisionGate]:
    """Per serving workload: the precisions the quality gate allows and the catalog's published deltas."""
    req = resolved.requirement
    allowed = tuple(q for q in SERVING_QUANTS if q in req.allowed_precisions())
    out: list[PrecisionGate] = []
    for i, w in enumerate(req.workloads):
        if w.kind != "serving":
            continue
        model_id = str(getattr(resolved.model_for(i), "id", ""))
        evidence = tuple(q for p in SERVING_QUANTS[1:] for q in catalog.quality_for(model_id, p))
        out.append(
            PrecisionGate(
                workload=w.name,
                model=model_id,
                max_loss=req.max_loss,
                from_requirement=req.quality is not None,
                allowed=allowed,
                evidence=evidence,
            )
        )
    return out


def assumption_lines(assumptions: Assumptions) -> list[str]:
    """Every efficiency factor and default the physics used, one line each (listed in explanations)."""
    out: list[str] = []
    for name, f in type(assumptions).model_fields.items():
        value = getattr(assumptions, name)
        text = value.model_dump() if hasattr(value, "model_dump") else value
        default = f.get_default(call_default_factory=True)
        default_text = default.model_dump() if hasattr(default, "model_dump") else default
        tag = "" if text == default_text else " (overridden)"
        out.append(f"{name} = {text}{tag}")
    return out


def engine_lines(workloads: Sequence[Any], assumptions: Assumptions) -> list[str]:
    """Each serving workload's engine as it is planned (evaluation/evaluate.serving_assumptions), one line each."""
    from clusterplan.evaluation.evaluate import serving_assumptions

    out: list[str] = []
    for w in workloads:
        if w.kind != "serving":
            continue
        a = serving_assumptions(assumptions, w)
        spec = a.engine_spec
        fraction = a.engine_memory_fraction if a.engine_memory_fraction is not None else spec.memory_fraction
        cap = a.engine_max_batch if a.engine_max_batch is not None else spec.max_batch
        line = (
            f"{w.name}: engine {a.engine} ({spec.memory_policy} memory policy, fraction {fraction:g}, batch cap "
            f"{cap}, {a.chunk_tokens} tokens per step, {spec.runtime_reserve_gib if a.engine_runtime_reserve_gib is None else a.engine_runtime_reserve_gib:g} GiB reserve; "
            f"catalog/engines.yaml), headroom {a.serving_headroom_fraction:g}"
        )
        if a.prefix_cache_hit_rate > 0:
            line += f", prefix-cache hit rate {a.prefix_cache_hit_rate:g}"
        if a.speculative is not None:
            sp = a.speculative
            line += (
                f", speculative {sp.method}: {sp.draft_tokens} draft tokens, mean acceptance length "
                f"{sp.acceptance_length:g}, proposer cost {sp.cost:g}"
            )
        out.append(line)
    return out


def measured_lines(workloads: Sequence[Any], assumptions: Assumptions, gpus: Iterable[GpuSpec]) -> list[str]:
    """The factors measured on a GPU that the plan's physics ran in place of the class's (a `clusterplan calibrate`
    overlay: engines.yaml ``measured``, gpus.yaml ``measured_training_mfu``), one line each; none without them."""
    from clusterplan.evaluation.evaluate import serving_assumptions

    rows = list(gpus)
    out: list[str] = []
    engines = {
        (spec := serving_assumptions(assumptions, w).engine_spec).id: spec for w in workloads if w.kind == "serving"
    }
    for _, spec in sorted(engines.items()):
        for gpu in rows:
            m = spec.measured.get(gpu.id)
            if m is None:
                continue
            figures = ", ".join(
                f"{k} {v:g}" for k, v in m.model_dump(exclude={"measured_by"}, exclude_none=True).items()
            )
            out.append(f"{spec.id} on {gpu.id}: measured {figures} ({spec.source}: {m.measured_by})")
    if any(w.kind != "serving" for w in workloads):
        for gpu in rows:
            if gpu.measured_training_mfu is not None:
                out.append(f"training on {gpu.id}: measured training_mfu {gpu.measured_training_mfu:g} ({gpu.source})")
    return out


def confidence_lines(derate: Derate) -> list[str]:
    """The derating a requirement's ``confidence`` applied, one line (none when it is unset)."""
    if not derate.active:
        return []
    return [
        f"confidence = {derate.confidence:g}: serving rates x{derate.rate_factor:.3f}, p95 latencies "
        f"x{derate.latency_factor:.3f}, time to train x{derate.time_factor:.3f} (the model's measured error, "
        "catalog/model_error.yaml)"
    ]
