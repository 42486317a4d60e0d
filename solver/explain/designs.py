"""Turn a model's solution into a :class:`clusterplan.plan.Design`: pure arithmetic on the table.

Costs are recomputed here from the offerings (floats, USD), not read back from the model's integer
cents, so rounding in the model never shows; the checker recomputes them once more, independently.
"""

from __future__ import annotations

from collections import defaultdict

from clusterplan.candidates.table import CandidateTable, TrainingRow, WorkloadCandidates
from clusterplan.evaluation import pricing
from clusterplan.plan import (
    Autoscaler,
    ConstraintCheck,
    Costs,
    Design,
    HardwareLine,
    ReplicaGroup,
    ServingPlan,
    TrainingPlan,
)
from clusterplan.planner.families import Family, demand_profile
from clusterplan.planner.families.facts import DesignFacts
from clusterplan.planner.solve import Solution
from clusterplan.wording.fmt import layout


def _gpu_name(table: CandidateTable, gid: str) -> str:
    g = table.gpus.get(gid)
    return g.name if g is not None else gid


def serving_plan(table: CandidateTable, wc: WorkloadCandidates, sol: Solution) -> ServingPlan:
    groups: list[ReplicaGroup] = []
    cap = cap_nolat = 0.0
    gpus = 0
    assigned = [(a, wc.serving_rows()[a.row]) for a in sol.serving_of(wc.index)]
    if assigned:  # the smaller of the prefill and decode sides (aggregated replicas count on both)
        cap = min(sum(a.replicas * r.rate_rps for a, r in assigned if r.serves(side)) for side in wc.sides())
        cap_nolat = min(
            sum(a.replicas * r.rate_nolat_rps for a, r in assigned if r.serves(side)) for side in wc.sides()
        )
    for a, row in assigned:
        gpus += a.replicas * row.gpus
        groups.append(
            ReplicaGroup(
                gpu=row.gpu_id,
                gpu_name=_gpu_name(table, row.gpu_id),
                tp=row.tp,
                pp=row.pp,
                ep=row.ep,
                attention_dp=row.attention_dp,
                servers_per_stage=row.tp // row.nvlink_group,
                quant=row.quant,
                kv_cache=row.kv_precision,
                batch=row.batch,
                replicas=a.replicas,
                cloud_replicas=a.cloud_replicas,
                owned_replicas=a.owned_replicas,
                gpus=a.replicas * row.gpus,
                rate_rps=row.rate_rps,
                rate_no_targets_rps=row.rate_nolat_rps,
                output_tokens_per_s=row.output_tokens_per_s,
                ttft_s=row.ttft_s,
                tpot_s=None if row.role == "prefill" else row.tpot_s,  # a prefill replica emits no output tokens
                p95_ttft_s=row.p95_ttft_s,
                p95_tpot_s=None if row.role == "prefill" else row.p95_tpot_s,
                p95_latency_s=row.p95_e2e_s,
                mean_ttft_s=row.mean_ttft_s,
                mean_tpot_s=row.mean_tpot_s,
                mean_latency_s=row.mean_e2e_s,
                memory_gib_per_gpu=row.memory_gib,
                gpu_memory_gib=row.capacity_gib,
                bound=row.bound,
                role="aggregated" if row.role == "both" else row.role,
                burst_replicas=a.burst_replicas,
            )
        )
    used = cap if wc.targets.any else cap_nolat
    return ServingPlan(
        workload=wc.name,
        model=wc.model_name,
        demand_rps=wc.demand_rps,
        average_rps=wc.average_rps,
        output_tokens_per_s=wc.average_rps * wc.output_tokens,
        capacity_rps=cap,
        capacity_no_targets_rps=cap_nolat,
        headroom_pct=(used / wc.demand_rps - 1.0) * 100.0 if wc.demand_rps > 0 else 0.0,
        redundancy=wc.redundancy,
        gpus=gpus,
        groups=groups,
        disaggregated=any(r.role != "both" for _, r in assigned),
        autoscaler=_autoscaler(table, wc, sol),
    )


def _autoscaler(table: CandidateTable, wc: WorkloadCandidates, sol: Solution) -> Autoscaler | None:
    """A profile workload's base, burst and hourly replicas (planner/families/demand_profile.py; None: flat demand)."""
    if not wc.profile_rps:
        return None
    fleets = [
        demand_profile.fleet(wc, wc.serving_rows()[a.row], a.cloud_replicas + a.owned_replicas, a.burst_replicas, table)
        for a in sol.serving_of(wc.index)
        if wc.serving_rows()[a.row].role == "both"
    ]
    return demand_profile.autoscaler(wc, fleets)


def training_plan(table: CandidateTable, wc: WorkloadCandidates, sol: Solution) -> TrainingPlan:
    a = sol.training_of(wc.index)
    assert a is not None
    row: TrainingRow = wc.training_rows()[a.row]
    cloud = a.where == "cloud"
    label = None
    if cloud and row.cloud_offering is not None:
        label = table.offering(row.cloud_offering).label
    return TrainingPlan(
        kind="finetune" if wc.kind == "finetune" else "training",
        workload=wc.name,
        model=wc.model_name,
        gpu=row.gpu_id,
        gpu_name=_gpu_name(table, row.gpu_id),
        tp=row.tp,
        pp=row.pp,
        dp=row.dp,
        zero_stage=row.zero_stage,
        recompute=row.recompute,
        micro_batch=row.micro_batch,
        gpus=row.gpus,
        cp=row.cp,
        ep=row.ep,
        virtual_stages=row.virtual_stages,
        recompute_layers=row.recompute_layers,
        deployment="cloud" if cloud else "owned",
        time_to_train_s=row.time_to_train_s,
        deadline_s=wc.deadline_s,
        tokens_per_s=row.tokens_per_s,
        mfu=row.mfu,
        memory_gib_per_gpu=row.memory_gib,
        gpu_memory_gib=row.capacity_gib,
        cloud_instance=label,
        cloud_instances=row.cloud_instances if cloud else 0,
        cloud_cost_usd=row.cloud_cost_usd if cloud else 0.0,
        memory_options=list(row.memory_options),
        framework=wc.framework,
    )


def hardware_lines(table: CandidateTable, sol: Solution) -> list[HardwareLine]:
    """The instances and servers a solution uses, each priced by :mod:`clusterplan.evaluation.pricing`."""
    lines: list[HardwareLine] = []
    for key, n in sol.instances:
        o = table.offering(key)
        lines.append(pricing.cloud_line(o, n, gpu_name=_gpu_name(table, o.gpu_id)))
    bought = dict(sol.bought)
    inv = dict(sol.from_inventory)
    for o in table.offerings:
        if o.kind != "owned" or (o.key not in bought and o.key not in inv):
            continue
        lines.append(
            pricing.owned_line(
                o, bought=bought.get(o.key, 0), from_inventory=inv.get(o.key, 0), gpu_name=_gpu_name(table, o.gpu_id)
            )
        )
    for wc in table.workloads:
        a = sol.training_of(wc.index) if not wc.is_serving else None
        if a is None or a.where != "cloud":
            continue
        row = wc.training_rows()[a.row]
        if row.cloud_offering is None:
            continue
        o = table.offering(row.cloud_offering)
        lines.append(
            pricing.training_cloud_line(
                o,
                row.cloud_instances,
                gpu_name=_gpu_name(table, o.gpu_id),
                workload=wc.name,
                seconds=row.time_to_train_s,
            )
        )
    return lines


def operations_of(table: CandidateTable) -> pricing.Operations:
    """The operations figures the table's model charged (catalog owned.yaml, through the limits)."""
    return pricing.Operations(
        table.limits.operations_usd_per_gpu_type_month, table.limits.operations_usd_per_pool_month
    )


def costs_of(table: CandidateTable, sol: Solution, hardware: list[HardwareLine]) -> Costs:
    """The solution's costs over the horizon (:func:`clusterplan.evaluation.pricing.costs`), its serving pools'
    and GPU types' operations included."""
    one_off = 0.0
    for wc in table.workloads:
        a = sol.training_of(wc.index) if not wc.is_serving else None
        if a is not None and a.where == "cloud":
            one_off += wc.training_rows()[a.row].cloud_cost_usd
    tokens = sum(wc.average_rps * wc.output_tokens for wc in table.workloads if wc.is_serving)
    serving = [serving_plan(table, wc, sol) for wc in table.workloads if wc.is_serving]
    return pricing.costs(
        hardware,
        horizon_months=table.limits.horizon_months,
        one_off_usd=one_off,
        output_tokens_per_s=tokens,
        operations=operations_of(table),
        pools=pricing.serving_pools(serving),
        burst_usd_per_month=sum(p.autoscaler.burst_usd_per_month for p in serving if p.autoscaler is not None),
    )


def gpus_in_use(table: CandidateTable, hardware: list[HardwareLine]) -> int:
    """Owned GPUs + cloud serving GPUs + cloud training GPUs (sequential: the largest cloud phase)."""
    owned = sum(x.gpus for x in hardware if x.kind == "owned")
    serving_cloud = sum(x.gpus for x in hardware if x.kind == "cloud" and x.trains is None)
    training = [x.gpus for x in hardware if x.kind == "cloud" and x.trains is not None]
    if table.limits.schedule == "sequential":
        return owned + max([serving_cloud, *training])
    return owned + serving_cloud + sum(training)


def signature(table: CandidateTable, sol: Solution) -> list[str]:
    out: list[str] = []
    for wc in table.workloads:
        if wc.is_serving:
            shapes = sorted({wc.serving_rows()[a.row].shape for a in sol.serving_of(wc.index)}, key=repr)
            where = sorted(
                {
                    w
                    for a in sol.serving_of(wc.index)
                    for w, n in (("cloud", a.cloud_replicas), ("owned", a.owned_replicas))
                    if n
                }
            )
            for shape in shapes:
                g, tp, pp, q = shape[:4]
                pool = f" {shape[4]} pool" if len(shape) > 4 else ""
                out.append(f"{wc.name}: {g} TP{tp} PP{pp} {q}{pool} ({'+'.join(where)})")
        else:
            a = sol.training_of(wc.index)
            if a is not None:
                r = wc.training_rows()[a.row]
                out.append(f"{wc.name}: {r.gpu_id} TP{r.tp} PP{r.pp} ZeRO-{r.zero_stage} ({a.where})")
    return out


def layout_text(table: CandidateTable, sol: Solution) -> str:
    """The design's layout in one line, each workload's as the designs table writes it (``chat: 4x [h200 ...]``)."""
    lines = []
    for wc in table.workloads:
        w = serving_plan(table, wc, sol) if wc.is_serving else training_plan(table, wc, sol)
        lines.append(f"{w.workload}: {layout(w)}")
    return "; ".join(lines)


def labels(designs: list[Design], *, min_cost: bool) -> list[list[str]]:
    """What each design is among ``designs`` (best first): the first of each kind is labelled. With min_cost the
    first is the cheapest, and the first of one GPU type, all cloud, all owned or all aggregated is the cheapest
    such; 'most headroom' marks the design whose tightest serving workload sits furthest above its peak demand."""
    out: list[list[str]] = [[] for _ in designs]
    kinds = {
        "cheapest with one GPU type": lambda d: len(d.gpus_by_type) == 1,
        "cheapest cloud": lambda d: bool(d.hardware) and all(h.kind == "cloud" for h in d.hardware),
        "cheapest owned": lambda d: bool(d.hardware) and all(h.kind == "owned" for h in d.hardware),
        "cheapest aggregated": lambda d: all(not w.disaggregated for w in d.workloads if isinstance(w, ServingPlan)),
    }
    if not designs or not min_cost:
        return out
    out[0].append("cheapest")
    pooled = any(w.disaggregated for d in designs for w in d.workloads if isinstance(w, ServingPlan))
    for label, fits in kinds.items():
        if label == "cheapest aggregated" and not pooled:
            continue  # every design is aggregated: nothing to tell apart
        first = next((i for i, d in enumerate(designs) if fits(d)), None)
        # A kind every design shares says nothing (all owned, say); one only design 1 has is said by 'cheapest'.
        if first is not None and not all(fits(d) for d in designs):
            out[first].append(label)
    heads = [min((w.headroom_pct for w in d.workloads if isinstance(w, ServingPlan)), default=None) for d in designs]
    if len(designs) > 1 and all(h is not None for h in heads):
        best = max(range(len(designs)), key=lambda i: (heads[i], -i))
        out[best].append("most headroom")
    return out


def summary_text(table: CandidateTable, hardware: list[HardwareLine]) -> str:
    parts: list[str] = []
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for line in hardware:
        where = line.provider or line.kind  # cloud lines name their provider, and a term other than on demand
        counts[where if line.term == "on_demand" else f"{where}, {line.term}", line.gpu_name] += line.gpus
    for (kind, name), n in sorted(counts.items()):
        parts.append(f"{n}x {name} ({kind})")
    return ", ".join(parts)


def design(table: CandidateTable, sol: Solution, *, rank: int, checks: list[ConstraintCheck]) -> Design:
    hw = hardware_lines(table, sol)
    by_type: dict[str, int] = defaultdict(int)
    for line in hw:
        by_type[line.gpu] += line.gpus
    workloads: list[ServingPlan | TrainingPlan] = []
    for wc in table.workloads:
        workloads.append(serving_plan(table, wc, sol) if wc.is_serving else training_plan(table, wc, sol))
    return Design(
        rank=rank,
        summary=summary_text(table, hw),
        signature=signature(table, sol),
        costs=costs_of(table, sol, hw),
        gpus_total=gpus_in_use(table, hw),
        gpus_by_type=dict(sorted(by_type.items())),
        owned_power_w=sum(x.power_w for x in hw),
        hardware=hw,
        workloads=workloads,
        constraints=checks,
    )


# ------------------------------------------------------------------------------------------------
# Margins: how far inside each family a design sits (pure arithmetic, in the family modules)
# ------------------------------------------------------------------------------------------------


def facts(table: CandidateTable, sol: Solution) -> DesignFacts:
    """The design ``sol`` as the plain numbers a family's margin, check and relaxation read."""
    hw = hardware_lines(table, sol)
    costs = costs_of(table, sol, hw)
    return DesignFacts(
        table=table,
        serving=sol.serving,
        training=sol.training,
        instances=sol.instances,
        bought=sol.bought,
        from_inventory=sol.from_inventory,
        capital_usd=costs.capital_usd,
        monthly_usd=costs.monthly_usd,
        total_usd=costs.total_usd,
        gpus_in_use=gpus_in_use(table, hw),
        owned_power_w=sum(x.power_w for x in hw),
    )


def margins(table: CandidateTable, sol: Solution, fams: list[Family]) -> list[ConstraintCheck]:
    """One check per active family that has a margin to report, in registry order."""
    d = facts(table, sol)
    return [c for c in (f.constraint_check(d) for f in fams) if c is not None]
