"""The review's tables: memory per GPU, rent against buy, binding constraints, efficiency factors, sources.

Memory bars and rent/buy rows come from :func:`clusterplan.design.estimate.estimate_requirement` on the
design's own layout: the same evaluation and pricing (:mod:`clusterplan.design`) the plan came from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from clusterplan.catalog.load import Catalog
from clusterplan.plan import Design, ServingPlan, TrainingPlan
from clusterplan.requirement.load import ResolvedRequirement
from clusterplan.review.records import BindingRow, FactorRow, MemoryBar, RentBuyRow, SourceRow
from clusterplan.wording.fmt import moe_layout, usd


def _layout(w: ServingPlan | TrainingPlan, i: int = 0) -> str:
    if isinstance(w, ServingPlan):
        g = w.groups[i]
        return (
            f"{g.replicas}x {g.gpu} TP{g.tp} PP{g.pp}{moe_layout(g.ep, g.attention_dp, g.servers_per_stage)} {g.quant}"
        )
    return f"{w.gpus}x {w.gpu} TP{w.tp} PP{w.pp} DP{w.dp} ZeRO-{w.zero_stage}"


def design_estimates(resolved: ResolvedRequirement, catalog: Catalog, design: Design) -> list[tuple[str, Any, str]]:
    """(label, EstimateResult, kind) for each replica group and training layout of the design, priced both
    ways (the requirement's deployment is set to 'either' so the estimate gives cloud and owned)."""
    from clusterplan.design.estimate import estimate_requirement
    from clusterplan.requirement.schema import PinnedConfig

    req = resolved.requirement.model_copy(update={"deployment": "either"})
    models = list(resolved.models)
    names = [w.name for w in req.workloads]
    out: list[tuple[str, Any, str]] = []
    for w in design.workloads:
        index = names.index(w.workload)
        if isinstance(w, ServingPlan):
            for k, g in enumerate(w.groups):
                cfg = PinnedConfig(
                    workload=index, gpu=g.gpu, tp=g.tp, pp=g.pp, quant=g.quant, kv_quant=g.kv_cache,
                    batch=g.batch, dp=g.replicas - g.burst_replicas, ep=g.ep if g.ep > 1 else None,
                    attention_dp=g.attention_dp or None, burst=g.burst_replicas or None,
                )  # fmt: skip
                out.append(
                    (f"{w.workload}: {_layout(w, k)}", estimate_requirement(req, models, catalog, cfg), "serving")
                )
        else:
            cfg = PinnedConfig(
                workload=index, gpu=w.gpu, tp=w.tp, pp=w.pp, dp=w.dp, zero=w.zero_stage,
                recompute=w.recompute, batch=w.micro_batch,
            )  # fmt: skip
            out.append((f"{w.workload}: {_layout(w)}", estimate_requirement(req, models, catalog, cfg), "training"))
    return out


def memory_bars(estimates: Sequence[tuple[str, Any, str]]) -> list[MemoryBar]:
    bars: list[MemoryBar] = []
    for label, est, _kind in estimates:
        phys = est.serving if est.serving is not None else est.training
        m = phys.memory
        bars.append(
            MemoryBar(
                label=label,
                workload=est.config.workload,
                gpu=est.config.gpu_id,
                weights_gib=m.weights_gib,
                kv_cache_gib=m.kv_cache_gib,
                activations_gib=m.activations_gib,
                gradients_gib=m.gradients_gib,
                optimizer_gib=m.optimizer_gib,
                runtime_overhead_gib=m.runtime_overhead_gib,
                headroom_gib=m.headroom_gib,
                total_gib=m.total_gib,
                capacity_gib=m.capacity_gib,
            )
        )
    return bars


def _chosen(design: Design, gpu: str) -> str:
    kinds = sorted({h.kind for h in design.hardware if h.gpu == gpu})
    return "+".join(kinds) or "-"


def rent_buy_rows(estimates: Sequence[tuple[str, Any, str]], design: Design, horizon_months: float) -> list[RentBuyRow]:
    """Each layout rented (cheapest catalog instance holding a replica) and bought (owned servers)."""
    from clusterplan.physics import cost

    rows: list[RentBuyRow] = []
    for label, est, kind in estimates:
        cloud, owned = est.cloud, est.owned
        cfg = est.config
        capital = owned.capital_usd if owned is not None else None
        running = owned.usd_per_month if owned is not None else None
        if kind == "serving":
            # The estimate's costs over the requirement's horizon: the figures solve reports.
            period = f"over {horizon_months:g} months"
            rent_total = cloud.costs.total_usd if cloud is not None else None
            buy_total = owned.costs.total_usd if owned is not None else None
        else:
            hours = float(cost.billed_hours(est.training.time_to_train_s))
            period = f"for the run ({hours:,.0f} h)"
            rent_total = cloud.costs.one_off_usd if cloud is not None else None
            buy_total = None
            if capital is not None and running is not None:
                buy_total = capital + running * hours / cost.serving_hours_per_month()
        breakeven = None
        if cloud is not None and owned is not None and capital is not None and running is not None:
            # Rented, the same GPU type and pool are operated: the owned side's operations count on both sides.
            ops = owned.costs.gpu_type_operations_usd_per_month + owned.costs.pool_operations_usd_per_month
            # A demand profile's burst replicas are rented by the hour either way: the base alone breaks even.
            held = running - owned.costs.burst_usd_per_month
            be = cost.rent_vs_buy_breakeven(
                capital_usd=capital,
                cloud_usd_per_hour=cloud.usd_per_hour + ops / cost.serving_hours_per_month(),
                owned_running_usd_per_hour=held / cost.serving_hours_per_month(),
                horizon_months=horizon_months,
            )
            breakeven = be.months_at_full_use if math.isfinite(be.months_at_full_use) else None
        cheaper: Literal["rent", "buy"] | None = None
        if rent_total is not None and buy_total is not None:
            cheaper = "rent" if rent_total < buy_total else "buy"
        rows.append(
            RentBuyRow(
                workload=cfg.workload,
                kind="serving" if kind == "serving" else "training",
                layout=label.partition(": ")[2],
                gpus=cfg.count,
                chosen=_chosen(design, cfg.gpu_id),
                period=period,
                rent_offer=f"{cloud.instance} x {cloud.instances}" if cloud is not None else None,
                rent_usd_per_hour=cloud.usd_per_hour if cloud is not None else None,
                rent_total_usd=rent_total,
                buy_servers=f"{owned.nodes} x {owned.gpus_per_node}-GPU server" if owned is not None else None,
                buy_capital_usd=capital,
                buy_running_usd_per_month=running,
                buy_total_usd=buy_total,
                breakeven_months=breakeven,
                cheaper=cheaper,
            )
        )
    return rows


def binding_rows(design: Design) -> list[BindingRow]:
    out: list[BindingRow] = []
    for c in design.constraints:
        if c.status != "binding":
            continue
        saving = design.costs.total_usd - c.relaxed_total_usd if c.relaxed_total_usd is not None else None
        out.append(
            BindingRow(
                family=c.family,
                title=c.title,
                detail=c.detail,
                relaxed_total_usd=c.relaxed_total_usd,
                saving_usd=saving,
                relaxed_design=c.relaxed_design,
            )
        )
    return out


def _per_class(value: Any, classes: Sequence[str]) -> str:
    vals = {c: value.of(c) for c in classes}
    if len(set(vals.values())) == 1:
        return f"{next(iter(vals.values())):g}"
    return ", ".join(f"{c} {v:g}" for c, v in vals.items())


def factor_rows(resolved: ResolvedRequirement, classes: Sequence[str]) -> list[FactorRow]:
    """Every efficiency factor and default in the requirement's Assumptions, for the GPU classes used."""
    a = resolved.requirement.assumptions
    overridden = set(a.overridden())
    rows: list[FactorRow] = []
    for name, info in type(a).model_fields.items():
        value = getattr(a, name)
        if hasattr(value, "of"):
            text = _per_class(value, classes)
        elif isinstance(value, dict):
            text = ", ".join(f"{k} {v:g}" if isinstance(v, int | float) else f"{k} {v}" for k, v in value.items())
        elif isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, float):
            text = f"{value:g}"
        else:
            text = str(value)
        rows.append(
            FactorRow(name=name, value=text, set_in_requirement=name in overridden, description=info.description or "")
        )
    return rows


def _source(catalog: Catalog, what: str, value: str, row: Any) -> SourceRow:
    ref = str(row.source)
    found = catalog.source(ref)
    return SourceRow(
        what=what,
        value=value,
        source=ref,
        title=found.title if found is not None else ref,
        url=found.url if found is not None else None,
        as_of=str(row.as_of),
        provisional=bool(getattr(row, "provisional", False)),
    )


def source_rows(catalog: Catalog, resolved: ResolvedRequirement, design: Design | None) -> list[SourceRow]:
    """The catalog rows the recommendation rests on, each with its source and date."""
    rows: list[SourceRow] = []
    req = resolved.requirement
    seen: set[str] = set()
    for i in range(len(req.workloads)):
        ref = req.model_of(i)
        if isinstance(ref, str):
            m = catalog.model(ref)
            if m.id not in seen:
                seen.add(m.id)
                params = f"{m.published_params / 1e9:,.1f}B parameters" if m.published_params else f"{m.layers} layers"
                rows.append(_source(catalog, f"model {m.name}", params, m))
    if design is None:
        return rows
    owned_classes: list[str] = []
    for gid in design.gpus_by_type:
        g = catalog.gpu(gid)
        bf16 = g.tflops("bf16")
        spec = f"{g.memory_gib:,.1f} GiB, {g.bandwidth_gb_per_s:,.0f} GB/s" + (
            f", bf16 {bf16:,.0f} TFLOPS" if bf16 else ""
        )
        rows.append(_source(catalog, f"GPU {g.name}", spec + f", {g.tdp_w:,.0f} W", g))
        if any(h.kind == "owned" and h.gpu == gid for h in design.hardware):
            if g.gpu_class not in owned_classes:
                owned_classes.append(g.gpu_class)
            if g.price is not None:
                rows.append(
                    _source(
                        catalog, f"purchase price {g.name}", f"{usd(g.price.usd)} per GPU ({g.price.kind})", g.price
                    )
                )
    for h in design.hardware:
        if h.kind == "cloud":
            inst = catalog.instance(h.instance_key)
            committed = inst.commitment(h.term_months) if h.term_months else None
            if committed is not None:  # the commitment's own figure and source
                what = f"{usd(committed.usd_per_hour)}/h on a {h.term_months}-month commitment ({committed.payment})"
                rows.append(_source(catalog, f"instance {inst.key} ({h.term})", what, committed))
                continue
            rate = inst.spot_usd_per_hour if h.term == "spot" else inst.on_demand_usd_per_hour
            term = "spot" if h.term == "spot" else "on demand"
            rows.append(
                _source(
                    catalog,
                    f"instance {inst.key}",
                    f"{usd(rate or 0.0)}/h {term}, {inst.gpus_per_instance} GPUs, {inst.region}",
                    inst,
                )
            )
    o = resolved.requirement.owned_costs(catalog.owned)  # the requirement's owned block over the catalog's
    for cls in owned_classes:
        server = o.server_usd_per_node.get(cls)  # type: ignore[call-overload]
        if server is not None:
            rows.append(_source(catalog, f"owned server ({cls})", f"{usd(server.value)} {server.unit}", server))
        net = o.network_usd_for(cls)  # type: ignore[arg-type]
        rows.append(_source(catalog, f"owned network ({cls})", f"{usd(net.value)} {net.unit}", net))
        pw = o.power_overhead_w_for(cls)  # type: ignore[arg-type]
        rows.append(_source(catalog, f"node power overhead ({cls})", f"{pw.value:,.0f} {pw.unit}", pw))
    if owned_classes:
        rows.append(_source(catalog, "PUE", f"{o.pue.value:g}", o.pue))
        e = o.electricity_usd_per_kwh
        rows.append(_source(catalog, "electricity", f"${e.value:g} {e.unit}", e))
        if o.colocation_usd_per_kw_month is not None:
            col = o.colocation_usd_per_kw_month
            rows.append(_source(catalog, "colocation", f"${col.value:,.2f} {col.unit}", col))
        if o.support_fraction_per_year is not None:
            sup = o.support_fraction_per_year
            rows.append(_source(catalog, "support", f"{sup.value:.0%} {sup.unit}", sup))
        if o.operations_usd_per_server_month is not None:
            ops = o.operations_usd_per_server_month
            rows.append(_source(catalog, "operations", f"{usd(ops.value)} {ops.unit}", ops))
    for what, fig in (
        ("operations per GPU type", o.operations_usd_per_gpu_type_month),
        ("operations per pool", o.operations_usd_per_pool_month),
    ):
        if fig is not None and design.costs.gpu_types_operated + design.costs.pools:
            rows.append(_source(catalog, what, f"{usd(fig.value)} {fig.unit}", fig))
    return rows
