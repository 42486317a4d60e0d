"""``clusterplan estimate`` for a training or fine-tuning workload: the fastest layout for the count, or the fewest
whole servers meeting the deadline, searched as the planner searches (:mod:`clusterplan.evaluation.evaluate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

from clusterplan.candidates.training import framework_space
from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import GpuSpec, ModelArchitecture
from clusterplan.design.estimate import (
    ChosenConfig,
    CloudCost,
    EstimateResult,
    Hosting,
    check_count,
    deployments_wanted,
    estimate_result,
    horizon_costs,
    offerings_for,
    owned_cost,
)
from clusterplan.errors import ClusterplanError
from clusterplan.evaluation import evaluate, pricing
from clusterplan.physics import cost, optimizer_memory, rules, training
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout, Recompute
from clusterplan.physics.optimizer_memory import MemoryPlan
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.physics.types import TrainingEstimate
from clusterplan.requirement.load import framework_name
from clusterplan.requirement.schema import (
    FinetuneWorkload,
    PinnedConfig,
    Requirement,
    TrainingWorkload,
)
from clusterplan.wording.reasons import render_reasons

if TYPE_CHECKING:
    from clusterplan.candidates.table import Offering
    from clusterplan.candidates.training import FrameworkSpace as Space


def _cloud_training(
    req: Requirement, gpu: GpuSpec, offerings: list[Offering], est: TrainingEstimate, workload: str
) -> CloudCost | None:
    """The run on the cheapest instance type the planner would rent for it, billed in whole hours."""
    spot = any(w.interruptible for w in req.workloads if w.name == workload)
    o, n, run_usd, _ = pricing.cheapest_training_cloud(
        offerings, gpu.id, est.tp, est.gpus, est.time_to_train_s, interruptible=spot
    )
    if o is None:
        return None
    line = pricing.training_cloud_line(o, n, gpu_name=gpu.name, workload=workload, seconds=est.time_to_train_s)
    # a cloud run is billed once and holds nothing for the horizon: no GPU type operated, no serving pool
    c = horizon_costs(req, [line], operations=pricing.Operations(), serves=None, one_off_usd=run_usd)
    return CloudCost(
        instance=o.label, gpus_per_instance=o.gpus_per_unit, instances=n, pricing=o.term,
        usd_per_hour=n * o.usd_per_hour, usd_per_month=c.monthly_usd, usd_total=c.total_usd,
        billed_hours=cost.billed_hours(est.time_to_train_s), costs=c, hardware=[line],
    )  # fmt: skip


_TRAINING_EP_FIX = {
    "ep_without_experts": "--ep applies to mixture-of-experts models only; drop --ep",
    "ep_not_dividing_experts": "--ep must divide the model's routed experts (e.g. 8 for Mixtral, up to 64 for "
    "DeepSeek-V3's 256)",
}


Degrees = tuple[int, int, int, int]  # tp, cp, pp, dp of a layout tried


def _shapes(
    arch: ModelArchitecture, gpu: GpuSpec, w: TrainingWorkload | FinetuneWorkload, cfg: PinnedConfig, space: Space
) -> list[tuple[int, int, int]]:
    """(tp, cp, pp) searched, as the planner's candidates are (the degrees the workload's framework runs; knobs the
    user pinned stay pinned)."""
    from clusterplan.candidates.offerings import gpu_type_of
    from clusterplan.candidates.table import TP_DEGREES
    from clusterplan.evaluation.pinned import TRAINING_PP

    domain = gpu_type_of(gpu).nvlink_domain
    tps = [cfg.tp] if cfg.tp else [t for t in TP_DEGREES if t <= domain and t in space.tps]
    pps = [cfg.pp] if cfg.pp else [p for p in TRAINING_PP if p <= arch.layers and p in space.pps]
    pinned_cp = cfg.cp if cfg.cp is not None else w.context_parallel if space.context_parallel else 1
    return [
        (tp, cp, pp) for tp in tps for pp in pps for cp in evaluate.context_parallel_options(w, tp, domain, pinned_cp)
    ]


def _fastest(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    cfg: PinnedConfig,
    a: Assumptions,
    degrees: Degrees,
    space: Space,
) -> TrainingEstimate | None:
    """The fastest settings of one tp x cp x pp x dp layout (pinned knobs stay pinned), as the planner's rows: of
    those the workload's framework runs (``space``)."""
    tp, cp, pp, dp = degrees
    method = getattr(w, "method", "full")
    zeros = (cfg.zero,) if cfg.zero is not None else space.zeros(pp, method)
    layers = cfg.recompute_layers if cfg.recompute_layers is not None else w.recompute_layers
    if layers is None and not space.recompute_layers:
        layers = arch.layers  # the framework checkpoints every layer of the stage
    recs: list[Recompute]
    if cfg.recompute:
        recs = [cfg.recompute]
    elif cfg.recompute_layers is not None:
        recs = ["full"]
    else:
        recs = space.recomputes
    vpp = cfg.vpp if cfg.vpp is not None else w.virtual_stages if space.interleaving else 1
    options = evaluate.TrainingOptions(
        zero_stages=zeros, recomputes=recs, micro_batches=[cfg.batch] if cfg.batch else None,
        virtual_stages=(vpp,) if vpp is not None else None, recompute_layers=layers if "full" in recs else None,
        memory_plans=_memory_plans(w, cfg, space),
        expert_parallel=(cfg.ep,) if cfg.ep is not None else None if space.expert_parallel else (1,),
    )  # fmt: skip
    est, _ = evaluate.fastest_training_layout(
        arch, gpu, w, layout=Layout(tp=tp, pp=pp, cp=cp), dp=dp, options=options, assumptions=a
    )
    return est


def _search_training(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    cfg: PinnedConfig,
    count: int,
    a: Assumptions,
    space: Space,
) -> tuple[TrainingEstimate | None, list[Degrees]]:
    """The fastest layout of ``count`` GPUs, searched as the planner's candidates are; and the layouts tried."""
    best: TrainingEstimate | None = None
    tried: list[Degrees] = []
    for tp, cp, pp in _shapes(arch, gpu, w, cfg, space):
        if count % (tp * cp * pp):
            continue
        dp = count // (tp * cp * pp)
        if cfg.dp is not None and dp != cfg.dp:
            continue
        tried.append((tp, cp, pp, dp))
        est = _fastest(arch, gpu, w, cfg, a, (tp, cp, pp, dp), space)
        if est is not None and (best is None or est.time_to_train_s < best.time_to_train_s):
            best = est
    return best, tried


def _fewest_meeting_deadline(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    cfg: PinnedConfig,
    a: Assumptions,
    space: Space,
) -> tuple[TrainingEstimate | None, bool, list[Degrees]]:
    """The fewest GPUs (whole servers) meeting the deadline, searched as the planner's rows are: per shape, DP in
    powers of two up to the first that meets it, then a bisection over the whole-server DPs between
    (:func:`clusterplan.candidates.training.fewest_meeting`); the fewest GPUs over the shapes, the faster on a tie.
    When no layout meets the deadline: the fastest tried. Returns (estimate, meets, layouts tried)."""
    from clusterplan.candidates.training import MAX_TRAINING_GPUS, fewest_meeting

    node = gpu.max_gpus_per_node
    tried: list[Degrees] = []
    meeting: TrainingEstimate | None = None
    fastest: TrainingEstimate | None = None
    for tp, cp, pp in _shapes(arch, gpu, w, cfg, space):
        replica = tp * cp * pp

        def at(dp: int, tp: int = tp, cp: int = cp, pp: int = pp) -> TrainingEstimate | None:
            tried.append((tp, cp, pp, dp))
            return _fastest(arch, gpu, w, cfg, a, (tp, cp, pp, dp), space)

        max_dp = max(1, min(MAX_TRAINING_GPUS // replica, evaluate.sequences_per_step(w)))
        dps = [cfg.dp] if cfg.dp is not None else [2**k for k in range(max_dp.bit_length()) if 2**k <= max_dp]
        missed: int | None = None
        for dp in dps:
            est = at(dp)
            if est is None:
                continue
            if fastest is None or est.time_to_train_s < fastest.time_to_train_s:
                fastest = est
            if est.time_to_train_s <= w.deadline:
                if missed is not None:
                    est = (fewest_meeting(missed, dp, replica, node, at, w.deadline) or [est])[0]
                if meeting is None or (est.gpus, est.time_to_train_s) < (meeting.gpus, meeting.time_to_train_s):
                    meeting = est
                break
            missed = dp
    if meeting is not None:
        return meeting, True, tried
    return fastest, False, tried


def _memory_plans(
    w: TrainingWorkload | FinetuneWorkload, cfg: PinnedConfig, space: Space | None = None
) -> list[MemoryPlan]:
    """The memory plans the workload allows, with ``--optimizer`` / ``--offload`` pinned where given, of the options
    its framework has a form of (``space``; pinned ones stay)."""
    forced, forbidden = optimizer_memory.pinned_options(cfg.optimizer, cfg.offload)
    if space is not None:
        forbidden = [*forbidden, *(o for o in space.no_memory_options if o not in forced)]
    return evaluate.memory_plans_for(w, forced=forced, forbidden=forbidden)


def _closest(
    arch: ModelArchitecture,
    gpu: GpuSpec,
    w: TrainingWorkload | FinetuneWorkload,
    a: Assumptions,
    cfg: PinnedConfig,
    tried: list[Degrees],
) -> TrainingEstimate:
    """Nothing runs: each layout tried at its most memory-friendly setting (the last memory plan the workload
    allows); the one closest to running."""
    method = getattr(w, "method", "full")
    plan = _memory_plans(w, cfg)[-1]
    ests = []
    for tp, cp, pp, dp in tried:
        zero = cfg.zero if cfg.zero is not None else max(evaluate.zero_stages_for(pp, method))
        rec = cfg.recompute or ("full" if cfg.recompute_layers else evaluate.recomputes_for(w)[-1])
        vpp = cfg.vpp or w.virtual_stages or 1
        layers = cfg.recompute_layers or w.recompute_layers
        eps = evaluate.expert_parallel_options(
            arch,
            tp=tp,
            dp_cp=dp * cp,
            nvlink_domain=evaluate.training_nvlink_domain(gpu),
            pinned=cfg.ep or w.expert_parallel,
        )
        point = evaluate.training_point(
            arch, gpu, w, layout=Layout(tp=tp, pp=pp, cp=cp, ep=max(eps), virtual_stages=vpp, recompute=rec,
                                        recompute_layers=layers),
            settings=TrainingSettings(dp=dp, zero_stage=zero, micro_batch=cfg.batch or 1, memory_plan=plan),
            assumptions=a,
        )  # fmt: skip
        ests.append(point)
    return min(ests, key=lambda e: (len(e.why_not), e.memory.total_gib / e.memory.capacity_gib, e.gpus))


def _layout_of(e: TrainingEstimate) -> Layout:
    """The layout an estimate describes (its recompute layers only under full recompute)."""
    return Layout(
        tp=e.tp, pp=e.pp, cp=e.cp, ep=e.ep, virtual_stages=e.virtual_stages, recompute=cast(Recompute, e.recompute),
        recompute_layers=e.recompute_layers if e.recompute == "full" else None,
    )  # fmt: skip


def _layout_words(e: TrainingEstimate) -> str:
    cp = f", cp={e.cp}" if e.cp > 1 else ""
    cp += f", ep={e.ep}" if e.ep > 1 else ""
    vpp = f", {e.virtual_stages} virtual stages" if e.virtual_stages > 1 else ""
    rec = e.recompute
    if rec == "full":
        rec = f"full ({e.recompute_layers} layers per stage)"
    return f"tp={e.tp}{cp}, pp={e.pp}{vpp}, ZeRO {e.zero_stage}, recompute {rec}, micro-batch {e.micro_batch}"


def estimate_training(
    req: Requirement,
    index: int,
    w: TrainingWorkload | FinetuneWorkload,
    arch: ModelArchitecture,
    gpu: GpuSpec,
    cfg: PinnedConfig,
    catalog: Catalog,
    choices: list[str],
) -> EstimateResult:
    """``estimate`` of workload ``index`` (``w``) of ``req`` on ``gpu``, its knobs pinned by ``cfg``; the choices
    made on the way are appended to ``choices``."""
    a = req.assumptions
    if "precision" not in w.model_fields_set and w.precision == "bf16" and not rules.supports_precision(gpu, "bf16"):
        w = w.model_copy(update={"precision": "fp16"})
        choices.append(f"precision fp16: {gpu.name} has no bf16")
    if cfg.ep is not None and cfg.ep > 1:
        reason = training.expert_parallel_reason(arch, cfg.ep, cfg.ep)  # the model's side; DP is searched
        if reason is not None:
            (words,) = render_reasons([reason])
            raise ClusterplanError(f"--ep {cfg.ep}, {arch.name}: {words}", fix=_TRAINING_EP_FIX[reason.problem])
    count = cfg.count
    cp_pinned = cfg.cp if cfg.cp is not None else w.context_parallel
    if count is None and cfg.tp and cfg.pp and cfg.dp:
        count = cfg.tp * (cp_pinned or 1) * cfg.pp * cfg.dp
    all_pinned = all(v is not None for v in (cfg.tp, cfg.pp, cfg.zero, cfg.batch)) and (
        cfg.recompute or w.activation_recompute
    )
    tried: list[Degrees] = []
    best: TrainingEstimate | None = None
    framework = catalog.framework(framework_name(w))
    space = framework_space(
        framework, evaluate.recomputes_for(w, flash_attention=a.flash_attention), getattr(w, "method", "full")
    )
    if count is not None:
        if cfg.tp and cfg.pp:
            check_count(count, cfg.tp * (cp_pinned or 1), cfg.pp, cfg.dp, "dp")
        best, tried = _search_training(arch, gpu, w, cfg, count, a, space)
    else:
        best, meets, tried = _fewest_meeting_deadline(arch, gpu, w, cfg, a, space)
        if best is not None:
            if meets:
                choices.append(
                    f"{best.gpus} GPUs: the fewest whole servers that meet the deadline (each layout's DP searched "
                    "as the planner does)"
                )
            else:
                choices.append(f"{best.gpus} GPUs: no count meets the deadline; the fastest layout tried")
    if best is not None and not space.runs(best.tp, best.pp, best.virtual_stages, best.cp, best.ep):
        choices.append(f"{framework.name} runs no layout like this one ({_layout_words(best)}): estimated as pinned")
    if best is None:
        if not tried:
            raise ClusterplanError(
                f"no layout of {count} x {gpu.name} matches the given tp/cp/pp/dp",
                fix="give a count that is a multiple of tp x cp x pp, or leave tp and pp out",
            )
        # Nothing feasible: show the layout that comes closest (fewest reasons, least memory per capacity).
        best = _closest(arch, gpu, w, a, cfg, tried)
        if not all_pinned:
            choices.append(f"no layout tried runs; shown: the closest ({best.gpus} GPUs, {_layout_words(best)})")
    else:
        # The search leaves link reasons (TP over PCIe) to the planner's tp_nvlink family; shown here in full.
        best = evaluate.training_point(
            arch, gpu, w, layout=_layout_of(best), assumptions=a,
            settings=TrainingSettings(dp=best.dp, zero_stage=best.zero_stage, micro_batch=best.micro_batch,
                                      memory_plan=MemoryPlan.of(best.memory_options)),
        )  # fmt: skip
        if not all_pinned:
            choices.append(f"{_layout_words(best)}: the fastest feasible layout tried")
    want_cloud, want_owned = deployments_wanted(req, cfg)
    offerings = offerings_for(catalog, req, gpu)
    cloud = owned = None
    notes: list[str] = []
    if want_cloud:
        cloud = _cloud_training(req, gpu, offerings, best, w.name)
        if cloud is None:
            notes.append(f"no cloud instance in the catalog offers {gpu.name} for this layout")
    if want_owned:
        owned, why = owned_cost(req, catalog, gpu, offerings, Hosting(best.tp, best.cp * best.pp * best.dp))
        if why:
            notes.append(why)
    kind: Literal["training", "finetune"] = "finetune" if isinstance(w, FinetuneWorkload) else "training"
    config = ChosenConfig(
        workload_index=index, workload=w.name, kind=kind, model=arch.name, gpu_id=gpu.id, gpu_name=gpu.name,
        count=best.gpus, tp=best.tp, pp=best.pp, dp=best.dp, ep=best.ep, batch=best.micro_batch, zero=best.zero_stage,
        recompute=best.recompute, precision=w.precision, cp=best.cp, vpp=best.virtual_stages,
        recompute_layers=best.recompute_layers if best.recompute == "full" else None,
        memory_options=best.memory_options,
    )  # fmt: skip
    return estimate_result(
        req, config, best, a, gpu.gpu_class, training=best, cloud=cloud, owned=owned, choices=choices, notes=notes
    )
