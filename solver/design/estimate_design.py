"""``clusterplan estimate --design PLAN.json`` and the pool flags: one design's workload, every replica group or
pool of it, through the functions ``solve`` used.

A design as ``solve --json`` writes it is a list of replica groups per serving workload (aggregated replicas,
or the prefill and decode pools of a disaggregated design) or one training layout. :func:`design_pins` turns
the chosen workload's part of it into one :class:`~clusterplan.requirement.schema.PinnedConfig` per group and
deployment (GPU, replicas, TP, PP, EP, attention DP, weight and KV precision, batch cap, role; a training
layout's CP, virtual stages, ZeRO, recompute, micro-batch, optimizer and offload); the command's
``--prefill-*`` / ``--decode-*`` flags build the same pins by hand. :func:`estimate_design` estimates each pin
through :func:`clusterplan.design.estimate.estimate_requirement` (so a pool through
:mod:`clusterplan.evaluation.pools`, as the planner's pool rows) and prices the whole through
:func:`clusterplan.evaluation.pricing.costs`: the figures ``solve`` gave that workload.

The engine, its memory policy, chunked prefill, speculative decoding and prefix caching are the workload's
(the requirement's ``engine:``, ``speculative:`` and ``prefix_cache_hit_rate``); a plan names no other, so the
estimate runs under the same.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, ValidationError

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import ModelArchitecture
from clusterplan.design.estimate import (
    CloudCost,
    EstimateResult,
    OwnedCost,
    Result,
    estimate_requirement,
    workload_ref,
)
from clusterplan.errors import ClusterplanError, FieldProblem, InputError, Location, quoted
from clusterplan.evaluation import pricing
from clusterplan.plan import Autoscaler, Costs, Design, HardwareLine, Plan, ServingPlan, TrainingPlan
from clusterplan.requirement.schema import PinnedConfig, Requirement, ServingWorkload

if TYPE_CHECKING:
    from clusterplan.candidates.table import Offering

WRITE_A_PLAN = "write one with: clusterplan solve REQUIREMENT --json > PLAN.json"


class DesignEstimate(Result):
    """One workload of a design, each replica group or pool estimated, and the whole priced over the horizon."""

    requirement: str
    workload: str
    source: str = Field(description="where the design came from: 'PLAN.json design N' or 'command line'")
    disaggregated: bool = Field(description="served by a prefill pool and a decode pool")
    feasible: bool = Field(description="every group can run")
    parts: list[EstimateResult] = Field(description="one estimate per replica group (or pool) and deployment")
    hardware: list[HardwareLine] = Field(description="every group's hardware, as solve prices it")
    costs: Costs | None = Field(description="the hardware over the requirement's horizon (None: a group unpriced)")
    demand_rps: float | None = Field(description="serving: peak demand, requests/s")
    capacity_rps: float | None = Field(
        description="serving: requests/s the groups take within their targets (disaggregated: the smaller pool's)"
    )
    p95_e2e_s: float | None = Field(
        description="disaggregated: the slowest prefill pool's rated p95 TTFT + the slowest decode pool's rated "
        "p95 (they add); aggregated: the slowest group's rated p95 end to end"
    )
    autoscaler: Autoscaler | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="a workload with a demand profile: its groups' replicas each hour and the burst tier, in costs "
        "(absent: flat demand)",
    )


# ------------------------------------------------------------------------------------------------
# A design read from a plan file
# ------------------------------------------------------------------------------------------------


def read_design(path: Path, index: int) -> Design:
    """Design ``index`` (1 = the best) of a plan written by ``solve --json``; a located error (exit 2) for a file
    that is not such a plan, or an index it does not hold."""
    where = Location(str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterplanError(f"cannot read the plan {quoted(str(path))}: {exc}", fix=WRITE_A_PLAN) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        problem = FieldProblem(Location(str(path), exc.lineno, exc.colno), "--design", f"not JSON: {exc.msg}")
        raise InputError([problem], fix=f"--design takes the JSON of a plan; {WRITE_A_PLAN}") from None
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        problems = [
            FieldProblem(where, ".".join(str(p) for p in err["loc"]) or "--design", str(err["msg"]))
            for err in exc.errors(include_url=False)[:5]
        ]
        raise InputError(
            problems, fix=f"--design takes a plan as clusterplan solve --json writes it; {WRITE_A_PLAN}"
        ) from None
    return pick_design(plan, index, where)


def pick_design(plan: Plan, index: int, where: Location) -> Design:
    """Design ``index`` (1 = the best) of ``plan``; a located error (exit 2) where the plan holds no such design."""
    if not plan.designs:
        raise InputError(
            [FieldProblem(where, "designs", f"the plan holds no design (its status is {plan.status})")],
            fix="plan a requirement that has an answer, or relax it (clusterplan solve explains why)",
        )
    if not 1 <= index <= len(plan.designs):
        raise InputError(
            [FieldProblem(where, "--index", f"no design {index}; the plan holds {len(plan.designs)}")],
            fix=f"use --index 1 to {len(plan.designs)} (1 is the best design)",
        )
    return plan.designs[index - 1]


def design_pins(design: Design, req: Requirement, workload: int | str | None) -> list[PinnedConfig]:
    """The pinned configurations of one workload of ``design`` (``workload``: name or index in the requirement;
    None: the design's first): one per replica group and deployment, or the training layout."""
    names = [w.name for w in req.workloads]
    planned = {w.workload: w for w in design.workloads}
    name = _workload_name(workload, names, list(planned))
    if name not in names:
        raise ClusterplanError(
            f"the design serves or trains {quoted(name)}, which the requirement does not name",
            fix="estimate the design against the requirement it was planned for",
        )
    index = names.index(name)
    wp = planned[name]
    if isinstance(wp, TrainingPlan):
        return [_training_pin(wp, index)]
    return _serving_pins(wp, index)


def _workload_name(workload: int | str | None, names: list[str], planned: list[str]) -> str:
    if workload is None:
        return planned[0]
    ref = workload_ref(workload)
    name = names[ref] if isinstance(ref, int) and 0 <= ref < len(names) else str(ref)
    if name not in planned:
        raise ClusterplanError(
            f"the design has no workload {quoted(str(workload))}",
            fix="use one of the design's workloads: " + ", ".join(planned),
        )
    return name


def _serving_pins(wp: ServingPlan, index: int) -> list[PinnedConfig]:
    """One pin per group and deployment; a demand profile's burst replicas of a group on its last pin (they are
    rented by the hour whatever the base's deployment, and the design's autoscaler sums the group's pins)."""
    pins = []
    for g in wp.groups:
        wheres = [(w, n) for w, n in (("owned", g.owned_replicas), ("cloud", g.cloud_replicas)) if n > 0]
        for i, (where, replicas) in enumerate(wheres):
            pin = dict(
                workload=index, gpu=g.gpu, dp=replicas, tp=g.tp, pp=g.pp, ep=g.ep, attention_dp=g.attention_dp,
                quant=g.quant, kv_quant=g.kv_cache, batch=g.batch, deployment=where, role=g.role,
                burst=g.burst_replicas if i == len(wheres) - 1 and g.burst_replicas else None,
            )  # fmt: skip
            pins.append(PinnedConfig.model_validate(pin))
    return pins


OFFLOADS: dict[tuple[bool, bool], Literal["none", "optimizer", "activations", "both"]] = {
    (False, False): "none",
    (True, False): "optimizer",
    (False, True): "activations",
    (True, True): "both",
}


def _training_pin(wp: TrainingPlan, index: int) -> PinnedConfig:
    options = set(wp.memory_options)
    optimizer = "paged_adamw8bit" if "paged_optimizer" in options else "adamw8bit" if "adamw8bit" in options else None
    offload = OFFLOADS["optimizer_offload" in options, "activation_offload" in options]
    pin = dict(
        workload=index, gpu=wp.gpu, tp=wp.tp, pp=wp.pp, dp=wp.dp, zero=wp.zero_stage, recompute=wp.recompute,
        batch=wp.micro_batch, deployment=wp.deployment, cp=wp.cp, vpp=wp.virtual_stages, ep=wp.ep,
        recompute_layers=wp.recompute_layers or None, optimizer=optimizer, offload=offload,
    )  # fmt: skip
    return PinnedConfig.model_validate(pin)


# ------------------------------------------------------------------------------------------------
# Estimating the pins
# ------------------------------------------------------------------------------------------------


def estimate_design(
    req: Requirement, models: list[ModelArchitecture], catalog: Catalog, pins: list[PinnedConfig], source: str
) -> DesignEstimate:
    """Each pin through :func:`~clusterplan.design.estimate.estimate_requirement`, the whole priced by
    :func:`clusterplan.evaluation.pricing.costs` (the pins name one workload)."""
    if not pins:
        raise ClusterplanError("no replica group to estimate", fix="give --design PLAN.json or the pool flags")
    parts = [estimate_requirement(req, models, catalog, pin) for pin in pins]
    shares = _shares(parts)
    if any(share < 1.0 for share in shares):  # the groups of one side split its demand: each at its own share
        pins = [pin.model_copy(update={"share": share}) for pin, share in zip(pins, shares, strict=True)]
        parts = [estimate_requirement(req, models, catalog, pin) for pin in pins]
    roles = {p.config.role for p in parts}
    if len({p.config.workload_index for p in parts}) > 1:
        raise ClusterplanError("the groups name different workloads", fix="estimate one workload at a time")
    disaggregated = roles != {"aggregated"}
    if disaggregated and roles != {"prefill", "decode"}:
        raise ClusterplanError(
            "a disaggregated design needs a prefill pool and a decode pool, and no aggregated replicas",
            fix="give both --prefill-* and --decode-* flags (each pool at least its GPU or count)",
        )
    chosen = [_priced(p) for p in parts]
    hardware = [x for c in chosen if c is not None for x in c.hardware]
    if None not in chosen and parts[0].serving is not None:
        hardware = _hosted_together(req, catalog, parts, chosen) or hardware
    w = req.workloads[parts[0].config.workload_index]
    serving = parts[0].serving is not None
    tokens_per_s = w.requests_per_s * w.output_tokens if isinstance(w, ServingWorkload) else 0.0
    scaler = _autoscaler(req, catalog, w, parts) if isinstance(w, ServingWorkload) and w.profile else None
    costs = (
        None
        if None in chosen
        else pricing.costs(
            hardware,
            horizon_months=req.budget.horizon,
            one_off_usd=sum(c.costs.one_off_usd for c in chosen if c is not None),
            output_tokens_per_s=tokens_per_s,
            operations=pricing.Operations.of(req.owned_costs(catalog.owned)),  # a cloud run holds no GPU type
            pools={
                (p.config.workload, p.config.role, line.gpu, line.kind)
                for p, c in zip(parts, chosen, strict=True)
                if serving and c is not None
                for line in c.hardware
            },
            burst_usd_per_month=scaler.burst_usd_per_month if scaler is not None else 0.0,
        )
    )
    demand, capacity, p95 = _serving_figures(parts, disaggregated) if serving else (None, None, None)
    return DesignEstimate(
        requirement=req.name, workload=parts[0].config.workload, source=source, disaggregated=disaggregated,
        feasible=all(p.feasible for p in parts), parts=parts, hardware=hardware, costs=costs, demand_rps=demand,
        capacity_rps=capacity, p95_e2e_s=p95, autoscaler=scaler,
    )  # fmt: skip


def _autoscaler(req: Requirement, catalog: Catalog, w: ServingWorkload, parts: list[EstimateResult]) -> Autoscaler:
    """A profile workload's autoscaler over the design's aggregated groups (pools run every hour), the groups of one
    replica shape together as one fleet (the planner's row: its owned and cloud replicas are one base), through
    :func:`clusterplan.design.estimate_serving.autoscaler`, as ``solve`` builds the plan's."""
    from clusterplan.design.estimate import offerings_for
    from clusterplan.design.estimate_serving import PinnedShape, autoscaler, fleet_rate

    shapes: dict[tuple[object, ...], tuple[PinnedShape, int, int]] = {}
    offerings: list[Offering] = []
    for p in parts:
        c, load = p.config, p.load
        if load is None:
            continue
        rate = fleet_rate(w, load.max_rate_for_targets_per_replica, load.rate_no_targets_per_replica)
        key = (c.gpu_id, c.tp, c.pp, c.ep, c.attention_dp, c.quant, c.kv_quant, c.batch)
        shape, base, burst = shapes.get(key, (PinnedShape(c.gpu_id, c.tp, c.pp, rate), 0, 0))
        shapes[key] = (shape, base + c.dp, burst + c.burst)
        if not any(o.gpu_id == c.gpu_id for o in offerings):
            offerings += offerings_for(catalog, req, catalog.gpu(c.gpu_id))
    return autoscaler(w, offerings, list(shapes.values()))


def _priced(p: EstimateResult) -> CloudCost | OwnedCost | None:
    """One group's pricing: its pinned deployment's, else the cheaper of cloud and owned over the horizon."""
    offers: list[CloudCost | OwnedCost] = [x for x in (p.cloud, p.owned) if x is not None]
    return min(offers, key=lambda x: x.costs.total_usd) if offers else None


def _hosted_together(
    req: Requirement, catalog: Catalog, parts: list[EstimateResult], chosen: list[CloudCost | OwnedCost | None]
) -> list[HardwareLine] | None:
    """The serving groups' hardware with the groups of one GPU type, deployment and TP degree hosted together (two
    pools of TP4 share an 8-GPU server, as ``solve`` places them), each priced by
    :func:`clusterplan.evaluation.pricing.cheapest_hosting`; None where one cannot be hosted."""
    from clusterplan.design.estimate import offerings_for

    groups: dict[tuple[str, str, int], int] = {}
    for p, c in zip(parts, chosen, strict=True):
        key = (p.config.gpu_id, "cloud" if isinstance(c, CloudCost) else "owned", p.config.tp)
        groups[key] = groups.get(key, 0) + p.config.dp * p.config.pp
    lines = []
    for (gpu_id, kind, tp), n in groups.items():
        gpu = catalog.gpu(gpu_id)
        found = pricing.cheapest_hosting(
            offerings_for(catalog, req, gpu), gpu_id=gpu_id, kind=kind, tp=tp, groups=n,
            horizon_months=req.budget.horizon,
        )  # fmt: skip
        if found is None:
            return None
        o, paid, inventory = found
        lines.append(
            pricing.cloud_line(o, paid, gpu_name=gpu.name)
            if kind == "cloud"
            else pricing.owned_line(o, bought=paid, from_inventory=inventory, gpu_name=gpu.name)
        )
    return lines


def _shares(parts: list[EstimateResult]) -> list[float]:
    """Each group's share of its side's demand (aggregated replicas, or one pool), as the router splits it and the
    checker loads it: replicas x the rate within the targets over the side's sum (the rate at the ceiling where no
    group of the side meets its targets). Training: 1."""

    def rates(p: EstimateResult) -> tuple[float, float]:
        if p.pool is not None:
            return p.pool.rate_rps, p.pool.rate_no_targets_rps
        if p.load is not None:
            return p.load.max_rate_for_targets_per_replica, p.load.rate_no_targets_per_replica
        return 1.0, 1.0

    sides: dict[str, list[tuple[float, float]]] = {}
    for p in parts:
        within, ceiling = rates(p)
        running = p.config.dp + p.config.burst  # at the peak hour, a demand profile's burst replicas run too
        sides.setdefault(p.config.role, []).append((running * within, running * ceiling))
    shares = []
    for p in parts:
        within, ceiling = rates(p)
        side = sides[p.config.role]
        total = sum(x for x, _ in side)
        running = p.config.dp + p.config.burst
        pick = (running * within, total) if total > 0 else (running * ceiling, sum(y for _, y in side))
        shares.append(pick[0] / pick[1] if pick[1] > 0 else 1.0 / len(side))
    return shares


def _serving_figures(parts: list[EstimateResult], disaggregated: bool) -> tuple[float, float, float | None]:
    """(peak demand, capacity within the targets, rated p95 end to end) of the groups together."""
    summary = parts[0].load or parts[0].pool
    demand = summary.peak_requests_per_s if summary is not None else 0.0
    if not disaggregated:
        capacity = sum(
            (p.config.dp + p.config.burst) * p.load.max_rate_for_targets_per_replica for p in parts if p.load
        )
        return demand, capacity, max(p.load.rated.p95_e2e_s for p in parts if p.load)
    side = {
        role: [p.pool for p in parts if p.pool is not None and p.pool.role == role] for role in ("prefill", "decode")
    }
    replicas = {id(p.pool): p.config.dp for p in parts}
    capacity = min(sum(replicas[id(x)] * x.rate_rps for x in pools) for pools in side.values())
    ttft = max(x.rated_p95_ttft_s for x in side["prefill"])
    p95 = ttft + max(x.rated_p95_e2e_s for x in side["decode"]) if math.isfinite(ttft) else None
    return demand, capacity, p95
