"""Turn a model's solution into a :class:`clusterplan.plan.Design`: pure arithmetic on the table.

Costs are recomputed here from the offerings (floats, USD), not read back from the model's integer
cents, so rounding in the model never shows; the checker recomputes them once more, independently.
"""

from __future__ import annotations

from collections import defaultdict

from clusterplan.candidates import CandidateTable, ServingRow, TrainingRow, WorkloadCandidates
from clusterplan.design import pricing
from clusterplan.plan import (
    ConstraintCheck,
    Costs,
    Design,
    FamilyStatus,
    HardwareLine,
    ReplicaGroup,
    ServingPlan,
    TrainingPlan,
)
from clusterplan.planner.constraints import Family
from clusterplan.planner.solve import Solution


def _gpu_name(table: CandidateTable, gid: str) -> str:
    g = table.gpus.get(gid)
    return g.name if g is not None else gid


def serving_plan(table: CandidateTable, wc: WorkloadCandidates, sol: Solution) -> ServingPlan:
    groups: list[ReplicaGroup] = []
    cap = cap_nolat = 0.0
    gpus = 0
    for a in sol.serving_of(wc.index):
        row: ServingRow = wc.serving_rows()[a.row]
        cap += a.replicas * row.rate_rps
        cap_nolat += a.replicas * row.rate_nolat_rps
        gpus += a.replicas * row.gpus
        groups.append(
            ReplicaGroup(
                gpu=row.gpu_id,
                gpu_name=_gpu_name(table, row.gpu_id),
                tp=row.tp,
                pp=row.pp,
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
                tpot_s=row.tpot_s,
                p95_ttft_s=row.p95_ttft_s,
                p95_tpot_s=row.p95_tpot_s,
                p95_latency_s=row.p95_e2e_s,
                memory_gib_per_gpu=row.memory_gib,
                gpu_memory_gib=row.capacity_gib,
                bound=row.bound,
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
    )


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
    )


def hardware_lines(table: CandidateTable, sol: Solution) -> list[HardwareLine]:
    """The instances and servers a solution uses, each priced by :mod:`clusterplan.design.pricing`."""
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


def costs_of(table: CandidateTable, sol: Solution, hardware: list[HardwareLine]) -> Costs:
    """The solution's costs over the horizon (:func:`clusterplan.design.pricing.costs`)."""
    one_off = 0.0
    for wc in table.workloads:
        a = sol.training_of(wc.index) if not wc.is_serving else None
        if a is not None and a.where == "cloud":
            one_off += wc.training_rows()[a.row].cloud_cost_usd
    tokens = sum(wc.average_rps * wc.output_tokens for wc in table.workloads if wc.is_serving)
    return pricing.costs(
        hardware, horizon_months=table.limits.horizon_months, one_off_usd=one_off, output_tokens_per_s=tokens
    )


def gpus_in_use(table: CandidateTable, hardware: list[HardwareLine]) -> int:
    """Owned GPUs + cloud serving GPUs + cloud training GPUs (sequential: the largest cloud phase)."""
    owned = sum(x.gpus for x in hardware if x.kind == "owned")
    serving_cloud = sum(x.gpus for x in hardware if x.kind == "cloud" and x.purpose == "serving")
    training = [x.gpus for x in hardware if x.kind == "cloud" and x.purpose != "serving"]
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
            for g, tp, pp, q in shapes:
                out.append(f"{wc.name}: {g} TP{tp} PP{pp} {q} ({'+'.join(where)})")
        else:
            a = sol.training_of(wc.index)
            if a is not None:
                r = wc.training_rows()[a.row]
                out.append(f"{wc.name}: {r.gpu_id} TP{r.tp} PP{r.pp} ZeRO-{r.zero_stage} ({a.where})")
    return out


def summary_text(table: CandidateTable, hardware: list[HardwareLine]) -> str:
    parts: list[str] = []
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for line in hardware:
        counts[line.kind, line.gpu_name] += line.gpus
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
# Margins: how far inside each family a design sits (pure arithmetic)
# ------------------------------------------------------------------------------------------------


def margins(table: CandidateTable, sol: Solution, fams: list[Family]) -> list[ConstraintCheck]:
    """One check per active family: margin, unit and a readable detail (status 'slack'/'satisfied';
    the explainer upgrades it to 'binding' when relaxing the family lowers the optimum)."""
    hw = hardware_lines(table, sol)
    costs = costs_of(table, sol, hw)
    lim = table.limits
    out: list[ConstraintCheck] = []

    def add(f: Family, margin: float | None, unit: str, detail: str) -> None:
        status: FamilyStatus = "satisfied" if margin is None else ("slack" if margin >= -1e-9 else "violated")
        out.append(ConstraintCheck(family=f.id, title=f.title, status=status, margin=margin, unit=unit, detail=detail))

    for f in fams:
        fid = f.id
        if fid == "memory":
            worst: tuple[float, str] | None = None
            for wc in table.workloads:
                used_rows: list[ServingRow | TrainingRow] = []
                if wc.is_serving:
                    used_rows = [wc.serving_rows()[a.row] for a in sol.serving_of(wc.index)]
                else:
                    a = sol.training_of(wc.index)
                    used_rows = [wc.training_rows()[a.row]] if a is not None else []
                for r in used_rows:
                    free = r.capacity_gib - r.memory_gib
                    text = f"{wc.name}: {r.memory_gib:,.1f} of {r.capacity_gib:,.1f} GiB per {r.gpu_id} GPU"
                    if isinstance(r, ServingRow):
                        text += f" (the KV cache for the batch cap of {r.batch} fills what the weights leave)"
                    if worst is None or free < worst[0]:
                        worst = (free, text)
            if worst is not None:
                add(f, worst[0], "GiB", f"tightest: {worst[1]}")
        elif fid in ("throughput", "latency", "redundancy"):
            worst_pct: tuple[float, str] | None = None
            for wc in table.workloads:
                if (
                    not wc.is_serving
                    or (fid == "latency" and not wc.targets.any)
                    or (fid == "redundancy" and wc.redundancy <= 0)
                ):
                    continue
                assigned = sol.serving_of(wc.index)
                rows = [(a, wc.serving_rows()[a.row]) for a in assigned]
                if fid == "throughput":
                    cap = sum(a.replicas * r.rate_nolat_rps for a, r in rows)
                    text = f"{wc.name}: {cap:,.2f} req/s at the utilisation ceiling for {wc.demand_rps:,.2f} at peak"
                elif fid == "latency":
                    cap = sum(a.replicas * r.rate_rps for a, r in rows)
                    worst_p95 = max((r.p95_e2e_s for _, r in rows), default=0.0)
                    text = (
                        f"{wc.name}: {cap:,.2f} req/s within targets for {wc.demand_rps:,.2f} at peak; "
                        f"p95 {worst_p95:,.2f} s at rated load (target {_fmt_opt(wc.targets.p95_latency_s)})"
                    )
                else:
                    rho = [(a, r.rate_rps if wc.targets.any else r.rate_nolat_rps) for a, r in rows]
                    biggest = max((x for _, x in rho), default=0.0)
                    cap = sum(a.replicas * x for a, x in rho) - wc.redundancy * biggest
                    text = f"{wc.name}: {cap:,.2f} req/s with {wc.redundancy} replica(s) lost, for {wc.demand_rps:,.2f}"
                pct = (cap / wc.demand_rps - 1.0) * 100.0 if wc.demand_rps > 0 else 0.0
                if worst_pct is None or pct < worst_pct[0]:
                    worst_pct = (pct, text)
            if worst_pct is not None:
                add(f, worst_pct[0], "% above peak demand", worst_pct[1])
        elif fid == "deadline":
            worst_d: tuple[float, str] | None = None
            for wc in table.workloads:
                a = sol.training_of(wc.index) if not wc.is_serving else None
                if a is None or wc.deadline_s is None:
                    continue
                r = wc.training_rows()[a.row]
                days = (wc.deadline_s - r.time_to_train_s) / 86400.0
                text = f"{wc.name}: {r.time_to_train_s / 86400:,.1f} d of {wc.deadline_s / 86400:,.1f} d"
                if worst_d is None or days < worst_d[0]:
                    worst_d = (days, text)
            if worst_d is not None:
                add(f, worst_d[0], "days", worst_d[1])
        elif fid == "tp_nvlink":
            add(f, None, "", "every tensor-parallel group sits inside one NVLink domain")
        elif fid == "allowed_gpus":
            add(f, None, "", "only allowed GPU types are used")
        elif fid == "allowed_quant":
            add(f, None, "", "only allowed weight precisions are used")
        elif fid == "deployment":
            add(f, None, "", f"deployment: {lim.deployment}")
        elif fid == "max_gpus" and lim.max_gpus is not None:
            used = gpus_in_use(table, hw)
            add(f, float(lim.max_gpus - used), "GPUs", f"{used} of {lim.max_gpus} GPUs")
        elif fid == "power" and lim.max_power_w is not None:
            used_w = sum(x.power_w for x in hw)
            add(
                f,
                (lim.max_power_w - used_w) / 1000.0,
                "kW",
                f"{used_w / 1000:,.1f} of {lim.max_power_w / 1000:,.1f} kW (owned servers at full power)",
            )
        elif fid == "inventory":
            have = sum(o.inventory_units * o.gpus_per_unit for o in table.offerings if o.kind == "owned")
            used_inv = sum(x.from_inventory * x.gpus_per_unit for x in hw if x.kind == "owned")
            add(
                f,
                float(have - used_inv),
                "GPUs",
                f"{used_inv} of {have} owned GPUs used; "
                f"{sum(x.bought * x.gpus_per_unit for x in hw if x.kind == 'owned')} bought",
            )
        elif fid == "budget_capital" and lim.budget_capital_usd is not None:
            add(
                f,
                lim.budget_capital_usd - costs.capital_usd,
                "USD",
                f"${costs.capital_usd:,.0f} of ${lim.budget_capital_usd:,.0f}",
            )
        elif fid == "budget_monthly" and lim.budget_monthly_usd is not None:
            add(
                f,
                lim.budget_monthly_usd - costs.monthly_usd,
                "USD/month",
                f"${costs.monthly_usd:,.0f} of ${lim.budget_monthly_usd:,.0f} per month",
            )
        elif fid == "budget_total" and lim.budget_total_usd is not None:
            add(
                f,
                lim.budget_total_usd - costs.total_usd,
                "USD",
                f"${costs.total_usd:,.0f} of ${lim.budget_total_usd:,.0f} over {lim.horizon_months:g} months",
            )
    return out


def _fmt_opt(x: float | None) -> str:
    return "none" if x is None else f"{x:g} s"
