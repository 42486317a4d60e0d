"""``structure``: what a plan *is*. No literal: these hold in every solve.

Linking replicas to selections, one shape per workload unless mixing is allowed, exactly one layout
per training workload, GPUs placed in whole instances and servers (total count; the per-TP-size
packing is the ``tp_nvlink`` family), and the aggregate cost, GPU, power and ratio variables the
other families and the objectives read. See :mod:`clusterplan.planner.builder` for the numbered
formulation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from clusterplan.candidates.table import CandidateTable, Offering, ServingRow, TrainingRow, WorkloadCandidates
from clusterplan.planner import scaling
from clusterplan.planner.cpsat import cp_model
from clusterplan.planner.families import demand_profile
from clusterplan.planner.variables import PlanVariables
from clusterplan.units import HOURS_PER_MONTH

Terms = list[tuple[int, cp_model.IntVar]]  # (integer coefficient, variable) pairs of a linear sum


def _gpus_with_rows(table: CandidateTable) -> list[str]:
    return sorted({row.gpu_id for wc in table.workloads for row in wc.rows})


def add_capacity(
    model: cp_model.CpModel,
    v: PlanVariables,
    table: CandidateTable,
    *,
    min_t: int,
    enforce: cp_model.IntVar | None,
    max_t: int | None = None,
) -> None:
    """GPUs in TP groups of size >= t fit the units whose TP domain is >= t, for t in [min_t, max_t].

    Cloud: serving replicas against the serving instance pool (training runs on its own instances,
    costed per row). Owned: serving and training together (concurrent) or each workload on its own
    (sequential: the same servers are reused one workload after another).
    """
    sequential = table.limits.schedule == "sequential"
    # The rows of each GPU type, in the order the workloads list them (one pass, not one per type and size).
    serving_of: dict[str, list[tuple[int, int, ServingRow]]] = defaultdict(list)
    for wc, r, row in v.serving_rows():
        serving_of[row.gpu_id].append((wc.index, r, row))
    training_of: dict[str, list[tuple[int, int, TrainingRow]]] = defaultdict(list)
    for wc, r, trow in v.training_rows():
        training_of[trow.gpu_id].append((wc.index, r, trow))
    for gid in _gpus_with_rows(table):
        cloud = table.offerings_of(gid, "cloud")
        owned = table.offerings_of(gid, "owned")
        serving = serving_of.get(gid, [])
        training = training_of.get(gid, [])
        for t in sorted({1} | {row.nvlink_group for _, _, row in serving} | {trow.tp for _, _, trow in training}):
            if t < min_t or (max_t is not None and t > max_t):
                continue
            # cloud
            need_cloud = [
                row.gpus * v.cloud_replicas(w, r) for w, r, row in serving if row.nvlink_group >= t and (w, r) in v._xc
            ]
            if need_cloud:
                cap = sum(o.tp_capacity(t) * v.instances(o) for o in cloud)
                c = model.add(sum(need_cloud) <= cap)
                if enforce is not None:
                    c.only_enforce_if(enforce)
            # owned
            per_workload: dict[int, list[cp_model.LinearExprT]] = defaultdict(list)
            for w, r, row in serving:
                if row.nvlink_group >= t and (w, r) in v._xo:
                    per_workload[w].append(row.gpus * v.owned_replicas(w, r))
            for w, r, trow in training:
                y = v.runs_owned(w, r)
                if trow.tp >= t and y is not None:
                    per_workload[w].append(trow.gpus * y)
            if not per_workload:
                continue
            cap_owned = sum(o.tp_capacity(t) * v.owned_units(o) for o in owned)
            groups: Sequence[list[cp_model.LinearExprT]] = (
                [per_workload[w] for w in sorted(per_workload)]
                if sequential
                else [[e for w in sorted(per_workload) for e in per_workload[w]]]
            )
            for terms in groups:
                c = model.add(sum(terms) <= cap_owned)
                if enforce is not None:
                    c.only_enforce_if(enforce)


def upper_bound(var: cp_model.IntVar) -> int:
    """A variable's largest value (the proto wrapper does not support negative indices)."""
    dom = var.proto.domain
    return int(dom[len(dom) - 1])


def _pro_rata(small: Offering, big: Offering) -> bool:
    """Every cost of ``big`` (hourly price, capital, power, energy) is its GPU slots over ``small``'s times
    ``small``'s, and its NVLink domain is no smaller. The costs a kind does not have are 0 on both sides."""
    ratio = big.gpus_per_unit / small.gpus_per_unit

    def same(a: float, b: float) -> bool:
        return abs(a * ratio - b) <= 1e-9 * max(1.0, abs(b))

    return (
        same(small.usd_per_hour, big.usd_per_hour)
        and same(small.capital_usd, big.capital_usd)
        and same(small.power_w, big.power_w)
        and same(small.running_usd_per_month, big.running_usd_per_month)
        and big.tp_domain >= small.tp_domain
    )


def _cloud_pro_rata(small: Offering, big: Offering) -> bool:
    """``big`` is ``k >= 2`` of ``small`` in one instance of the same provider and region at ``k`` times its
    price (:func:`_pro_rata`), and runs anything they run (rack domain and fabric no smaller)."""
    if big.gpus_per_unit <= small.gpus_per_unit or big.gpus_per_unit % small.gpus_per_unit:
        return False
    return (
        (big.provider, big.region, big.forbidden_by, big.term, big.serves)
        == (small.provider, small.region, small.forbidden_by, small.term, small.serves)
        and _pro_rata(small, big)
        and big.domain_gpus >= small.domain_gpus
        and (big.fabric or not small.fabric)
    )


def _ub(pairs: Sequence[tuple[int, cp_model.IntVar]]) -> int:
    """Upper bound of sum(coef * var) for non-negative coefficients and variables."""
    total = 0
    for coef, var in pairs:
        total += coef * upper_bound(var)
    return scaling.checked(total, what="aggregate bound")


def _define(
    model: cp_model.CpModel, name: str, pairs: Sequence[tuple[int, cp_model.IntVar]], constant: int = 0
) -> cp_model.IntVar:
    pairs = [(c, x) for c, x in pairs if c]
    var = model.new_int_var(0, _ub(pairs) + constant, name)
    model.add(var == sum(c * x for c, x in pairs) + constant)
    return var


def add(
    model: cp_model.CpModel,
    v: PlanVariables,
    table: CandidateTable,
    *,
    inventory_family: bool,
    latency_objective: bool = False,
) -> None:
    """Add every structural constraint and define the aggregates on ``v``.

    In the order of the builder's formulation (:mod:`clusterplan.planner.builder`), which is also the
    order the constraints reach the model (the solve depends on it): (1)-(2) each serving workload's
    linking and shape, (3) each training workload's one layout, (4) GPUs placed by type and deployment,
    (4b)-(4c) the symmetry cuts, (5) no free server without an inventory, (6) the cost and GPU
    aggregates, then the ratios the objectives read.
    """
    for wc in table.workloads:
        if wc.is_serving:
            _link_serving(model, v, wc)
        else:
            _link_training(model, v, wc)
    # (4) total GPU count per type and deployment (TP size 1).
    add_capacity(model, v, table, min_t=1, max_t=1, enforce=None)
    _owned_symmetry(model, v, table)
    _cloud_symmetry(model, v, table)
    _pools_on_a_fabric(model, v, table)
    # (5) without inventory no server is free.
    if not inventory_family:
        for o in table.offerings:
            if o.kind == "owned":
                model.add(v.from_inventory(o) <= o.inventory_units)
    _define_gpu_types(model, v, table)
    _define_costs(model, v, table, inventory_family=inventory_family)
    _define_serving_ratios(model, v, _serving_terms(v, table, latency_objective=latency_objective))
    _define_deadline_ratio(model, v, table)


@dataclass
class _Replicas:
    """A serving workload's replica variables and selections, gathered while linking its rows."""

    sels: list[cp_model.IntVar] = field(default_factory=list)  # sel[w,r], one per row
    all_x: list[cp_model.IntVar] = field(default_factory=list)  # xc and xo of every row
    cloud_x: list[cp_model.IntVar] = field(default_factory=list)
    owned_x: list[cp_model.IntVar] = field(default_factory=list)
    by_shape: dict[tuple[object, ...], list[cp_model.IntVar]] = field(default_factory=lambda: defaultdict(list))


def _link_serving(model: cp_model.CpModel, v: PlanVariables, wc: WorkloadCandidates) -> None:
    """(1)-(2) one serving workload: link replicas and selections; one shape unless mixed; serve it."""
    w = wc.index
    reps = _link_replicas(model, v, wc)
    _link_shapes(model, v, w, reps.by_shape)
    _one_shape_or_pools(model, v, wc, reps.sels)
    model.add(sum(reps.all_x) >= 1)
    model.add(sum(reps.cloud_x) >= v.uses_cloud(w))
    model.add(sum(reps.owned_x) >= v.uses_owned(w))


def _link_replicas(model: cp_model.CpModel, v: PlanVariables, wc: WorkloadCandidates) -> _Replicas:
    """(1) per row: ``xc <= U*cloud[w]``, ``xo <= U*owned[w]``; ``sel => xc+xo >= 1``, ``not sel => xc+xo = 0``
    (a row with no replica variable is unselected); ``M_w >= rho[r]*sel`` when the workload has redundancy."""
    w = wc.index
    s = v.scales[w]
    rho = s.rate if wc.targets.any else s.rate_nolat
    reps = _Replicas()
    for r, row in enumerate(wc.serving_rows()):
        sel = v.selected(w, r)
        reps.sels.append(sel)
        xs = v.replica_vars(w, r)
        reps.all_x += xs
        if (w, r) in v._xc:
            reps.cloud_x.append(v._xc[w, r])
            model.add(v._xc[w, r] <= s.upper[r] * v.uses_cloud(w))
        if (w, r) in v._xo:
            reps.owned_x.append(v._xo[w, r])
            model.add(v._xo[w, r] <= s.upper[r] * v.uses_owned(w))
        if xs:
            model.add(sum(xs) >= 1).only_enforce_if(sel)
            model.add(sum(xs) == 0).only_enforce_if(sel.Not())
        else:
            model.add(sel == 0)
        if wc.redundancy > 0:
            model.add(v.largest_rate(w) >= rho[r] * sel)
        reps.by_shape[row.shape].append(sel)
    return reps


def _link_shapes(
    model: cp_model.CpModel, v: PlanVariables, w: int, by_shape: dict[tuple[object, ...], list[cp_model.IntVar]]
) -> None:
    """(1) ``sel => z[w,shape(r)]`` and ``z => OR sel`` of its rows (nothing to add when z is the one row's sel)."""
    for shape, members in by_shape.items():
        z = v.shape_used(w, shape)
        if len(members) == 1 and z is members[0]:
            continue
        for sel in members:
            model.add_implication(sel, z)
        model.add_bool_or([*members, z.Not()])


def _one_shape_or_pools(
    model: cp_model.CpModel, v: PlanVariables, wc: WorkloadCandidates, sels: list[cp_model.IntVar]
) -> None:
    """(2) ``sum_r sel[w,r] = 1`` unless mixed; with pool rows, aggregated replicas or a prefill pool and a
    decode pool (``d``), one shape each and both on one GPU type unless mixed."""
    d = v.disaggregated(wc.index)
    rows = wc.serving_rows()
    if d is None:
        if not wc.allow_mixed:
            model.add_exactly_one(sels)  # one shape, and (in _link_serving) at least one replica
        return
    aggregated = [s_ for s_, row in zip(sels, rows, strict=True) if row.role == "both"]
    by_role = {
        role: [s_ for s_, row in zip(sels, rows, strict=True) if row.role == role] for role in ("prefill", "decode")
    }
    if not wc.allow_mixed:
        model.add_exactly_one([*aggregated, d])
        for members in by_role.values():
            model.add(sum(members) == d)
        # One GPU type for the workload, pools included: per GPU type, its prefill rows selected = its decode rows
        # selected (each 0 or 1 once d fixes one row per pool), so the two pools sit on the same type.
        for gid in sorted({row.gpu_id for row in rows if row.role != "both"}):
            pre = [s_ for s_, row in zip(sels, rows, strict=True) if row.role == "prefill" and row.gpu_id == gid]
            dec = [s_ for s_, row in zip(sels, rows, strict=True) if row.role == "decode" and row.gpu_id == gid]
            model.add(sum(pre) == sum(dec))
    else:
        for members in by_role.values():
            for s_ in members:
                model.add_implication(s_, d)
            model.add_bool_or([*members, d.Not()])


def _link_training(model: cp_model.CpModel, v: PlanVariables, wc: WorkloadCandidates) -> None:
    """(3) training: ``sum_r (yc+yo)[w,r] = 1`` (exactly one layout, on cloud or owned); its shape and
    deployment flags are the sums of its choices."""
    w = wc.index
    ys: list[cp_model.IntVar] = []
    by_shape_t: dict[tuple[object, ...], list[cp_model.IntVar]] = defaultdict(list)
    ycs: list[cp_model.IntVar] = []
    yos: list[cp_model.IntVar] = []
    for r, trow in enumerate(wc.training_rows()):
        by_shape_t.setdefault(trow.shape, [])  # a row no offering can run: its shape is 0, not free
        for y in v.training_choices(w, r):
            ys.append(y)
            by_shape_t[trow.shape].append(y)
        if (yc := v.runs_on_cloud(w, r)) is not None:
            ycs.append(yc)
        if (yo := v.runs_owned(w, r)) is not None:
            yos.append(yo)
    model.add_exactly_one(ys)
    for shape, members in by_shape_t.items():
        model.add(v.shape_used(w, shape) == sum(members))
    model.add(v.uses_cloud(w) == sum(ycs))
    model.add(v.uses_owned(w) == sum(yos))


def _owned_symmetry(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable) -> None:
    """(4b) symmetry: with prices, power and energy pro rata to GPU slots (the catalog's rule), two
    bought servers of size s are worth exactly one of size 2s, which hosts everything they host
    (its NVLink domain is no smaller). So WLOG at most one server of each size that has a double."""
    for gid in sorted({o.gpu_id for o in table.offerings if o.kind == "owned"}):
        sizes = {o.gpus_per_unit: o for o in table.offerings_of(gid, "owned") if o.purchasable}
        for size, o in sizes.items():
            big = sizes.get(2 * size)
            if big is not None and _pro_rata(o, big) and o.forbidden_by == big.forbidden_by:
                model.add(v.bought(o) <= 1)


def _cloud_symmetry(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable) -> None:
    """(4c) the same for cloud instances: k instances of s GPUs cost exactly one of k*s GPUs from the same
    provider and region at the same price per GPU, which hosts everything they host (its NVLink domain,
    rack domain and fabric no smaller). So WLOG fewer than k of the small one: of two designs at one cost
    the plan takes the one with fewer machines, as an operator would, not whichever the search met first
    (four 1x-l40s or one 4x-l40s at $3.44/h flipped with the physics' last digits)."""
    for gid in sorted({o.gpu_id for o in table.offerings if o.kind == "cloud"}):
        instances = table.offerings_of(gid, "cloud")
        for o in instances:
            multiples = [big.gpus_per_unit // o.gpus_per_unit for big in instances if _cloud_pro_rata(o, big)]
            if multiples:
                model.add(v.instances(o) <= min(multiples) - 1)


def _pools_on_a_fabric(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable) -> None:
    """(4d) a disaggregated workload's KV stream crosses between its pools over RDMA where its GPU is a datacenter
    part (evaluation/pools.kv_link): on cloud, prefill and decode replicas of GPU type g sit on instances whose provider
    sells a fabric between them, ``sum_{pool r: g} gpus x xc <= sum_{c: g, fabric} k_c x n[c]``; the design pays that
    fabric's price. Owned servers pay their network share in their capital (owned.yaml ``network_usd_per_node``).

    A wide-EP replica's all-to-all crosses its servers at the network per GPU its row was rated at (``b_r``): on
    cloud it sits on instances whose fabric gives at least that per GPU (``Offering.network_gb_per_s_per_gpu``, from
    the instance row), for each such figure ``b``: ``sum_{wide r: g, b_r >= b} gpus x xc <= sum_{c: g, nic_c >= b}
    k_c x n[c]``, and with the pools ``sum_{pool or wide r: g} gpus x xc <= sum_{c: g, fabric} k_c x n[c]``."""
    for gid in _gpus_with_rows(table):
        g = table.gpus.get(gid)
        if g is None or g.gpu_class != "datacenter":
            continue  # workstation and consumer pools send their KV over TCP (Ethernet): no fabric asked for
        rows = [
            (row, v.cloud_replicas(wc.index, r))
            for wc, r, row in v.serving_rows()
            if row.gpu_id == gid and (row.role != "both" or row.spans_servers) and (wc.index, r) in v._xc
        ]
        if not rows:
            continue
        offers = [o for o in table.offerings_of(gid, "cloud") if o.fabric]
        model.add(sum(row.gpus * x for row, x in rows) <= sum(o.gpus_per_unit * v.instances(o) for o in offers))
        for b in sorted({row.network_gb_per_s for row, _ in rows if row.spans_servers}):
            fast = [o.gpus_per_unit * v.instances(o) for o in offers if o.network_gb_per_s_per_gpu >= b]
            model.add(
                sum(row.gpus * x for row, x in rows if row.spans_servers and row.network_gb_per_s >= b) <= sum(fast)
            )


def _define_gpu_types(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable) -> None:
    """(6a) ``used[g]``: the design runs on GPU type g. ``sel[w,r] => used[g(r)]`` (serving),
    ``y[w,r] => used[g(r)]`` (training), ``used[g] => OR`` of those (no type held for nothing: a server of a type
    no row runs on is never part of a design), ``units(o) <= U * used[g(o)]``; ``gpu_types = sum_g used[g]``."""
    runs: dict[str, list[cp_model.IntVar]] = defaultdict(list)
    for wc, r, row in v.serving_rows():
        runs[row.gpu_id].append(v.selected(wc.index, r))
    for wc, r, trow in v.training_rows():
        runs[trow.gpu_id] += v.training_choices(wc.index, r)
    for gid, used in sorted(v.gpu_types().items()):
        for x in runs[gid]:
            model.add_implication(x, used)
        model.add_bool_or([*runs[gid], used.Not()])
    for o in table.offerings:
        on = v.gpu_used(o.gpu_id)
        for var in v.unit_vars(o):
            if on is None:
                model.add(var == 0)  # no row runs on it: no unit of it
            else:
                model.add(var <= upper_bound(var) * on)
    v.gpu_types_used = _define(model, "gpu_types_used", [(1, x) for _, x in sorted(v.gpu_types().items())])


@dataclass
class _CostTerms:
    """(6) the terms of each aggregate: integer cents, GPUs and W per unit of a variable."""

    capital: Terms = field(default_factory=list)
    monthly: Terms = field(default_factory=list)
    total: Terms = field(default_factory=list)
    owned_gpus: Terms = field(default_factory=list)
    cloud_gpus: Terms = field(default_factory=list)  # the cloud serving pool
    power: Terms = field(default_factory=list)
    extra: Terms = field(default_factory=list)  # owned GPUs beyond the inventory (the inventory family's)
    one_off: Terms = field(default_factory=list)
    train_cloud: dict[int, Terms] = field(default_factory=lambda: defaultdict(list))  # cloud GPUs per training run


def _define_costs(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable, *, inventory_family: bool) -> None:
    """(6) aggregates, integer cents / GPUs / W: ``capital``, ``monthly``, ``one_off``, ``total`` (the
    builder's cost formulas), owned GPUs and power, inventory GPUs beyond the inventory, GPUs in use."""
    terms = _offering_terms(model, v, table, inventory_family=inventory_family)
    _training_terms(v, table, terms)
    _operations_terms(model, v, table, terms)
    burst_monthly, burst_total = demand_profile.burst_terms(model, v, table)  # (6d) demand profiles' burst hours
    terms.monthly += burst_monthly
    terms.total += burst_total
    v.capital_cents = _define(model, "capital_cents", terms.capital)
    v.monthly_cents = _define(model, "monthly_cents", terms.monthly)
    v.one_off_cents = _define(model, "one_off_cents", terms.one_off)
    v.total_cents = _define(model, "total_cents", terms.total)
    v.total_terms = [(c, x) for c, x in terms.total if c]
    v.owned_gpus = _define(model, "owned_gpus", terms.owned_gpus)
    v.owned_power_w = _define(model, "owned_power_w", terms.power)
    v.inventory_extra_gpus = _define(model, "inventory_extra_gpus", terms.extra)
    v.gpus_in_use = _gpus_in_use(model, table, terms, v.owned_gpus)
    _define_hardware_counts(model, v, table)


def _define_hardware_counts(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable) -> None:
    """(6b) GPUs held per (GPU type, cloud | owned): units x GPUs per unit (owned: bought and from inventory), plus
    each cloud training run's instances x GPUs per instance; and GPUs at work per (GPU type, cloud | owned):
    serving replicas x GPUs per replica, training runs' GPUs. The ranking's no-good cuts read both
    (:func:`clusterplan.planner.solve._hardware_differs`)."""
    pairs: dict[tuple[str, str], Terms] = defaultdict(list)
    for o in table.offerings:
        for var in v.unit_vars(o):
            pairs[o.gpu_id, o.kind].append((o.gpus_per_unit, var))
    for wc, r, trow in v.training_rows():
        yc = v.runs_on_cloud(wc.index, r)
        if yc is not None and trow.cloud_offering is not None:
            o = table.offering(trow.cloud_offering)
            pairs[o.gpu_id, "cloud"].append((trow.cloud_instances * o.gpus_per_unit, yc))
    for key in sorted(pairs):
        var = _define(model, f"hw_{key[0]}_{key[1]}", pairs[key])
        if upper_bound(var) > 0:
            v.hardware_counts[key] = var
    working: dict[tuple[str, str], Terms] = defaultdict(list)
    for wc, r, row in v.serving_rows():
        for kind, x in (("cloud", v._xc.get((wc.index, r))), ("owned", v._xo.get((wc.index, r)))):
            if x is not None:
                working[row.gpu_id, kind].append((row.gpus, x))
    for wc, r, trow in v.training_rows():
        for kind, y in (("cloud", v.runs_on_cloud(wc.index, r)), ("owned", v.runs_owned(wc.index, r))):
            if y is not None:
                working[trow.gpu_id, kind].append((trow.gpus, y))
    for key in sorted(working):
        var = _define(model, f"work_{key[0]}_{key[1]}", working[key])
        if upper_bound(var) > 0:
            v.working_counts[key] = var


def _offering_terms(
    model: cp_model.CpModel, v: PlanVariables, table: CandidateTable, *, inventory_family: bool
) -> _CostTerms:
    """Each offering's share of the aggregates: a cloud instance type's hours, an owned server's capital
    (bought), energy, GPUs and power (bought or from inventory) and, with the inventory family, its GPUs
    beyond the inventory (``e >= u - I_o``, a variable of its own)."""
    h = table.limits.horizon_months
    terms = _CostTerms()
    for o in table.offerings:
        if o.kind == "cloud":
            n = v.instances(o)
            # monthly = $/h x hours a month; total = that x the horizon in months
            terms.monthly.append((scaling.cents_up(o.usd_per_hour * HOURS_PER_MONTH, what=o.key), n))
            # a commitment's total counts whole terms (Offering.horizon_usd; the horizon itself on demand)
            terms.total.append((scaling.cents_up(o.horizon_usd(h), what=o.key), n))
            terms.cloud_gpus.append((o.gpus_per_unit, n))
        else:
            m, u = v.bought(o), v.from_inventory(o)
            terms.capital.append((scaling.cents_up(o.capital_usd, what=o.key), m))
            terms.total.append((scaling.cents_up(o.capital_usd, what=o.key), m))
            e_month = scaling.cents_up(o.running_usd_per_month, what=o.key)
            e_total = scaling.cents_up(o.running_usd_per_month * h, what=o.key)  # running a month x the horizon
            p = scaling.watts_up(o.power_w, what=o.key)
            for var in (m, u):
                terms.monthly.append((e_month, var))
                terms.total.append((e_total, var))
                terms.owned_gpus.append((o.gpus_per_unit, var))
                terms.power.append((p, var))
            if inventory_family:
                e = model.new_int_var(0, upper_bound(u), f"extra_{o.key}")
                model.add(e >= u - o.inventory_units)
                terms.extra.append((o.gpus_per_unit, e))
    return terms


def _training_terms(v: PlanVariables, table: CandidateTable, terms: _CostTerms) -> None:
    """Each cloud training row's one-off cost (``yc[w,r]*cloud_cost[r]``, in ``one_off`` and ``total``) and
    its cloud GPUs (instances x GPUs per instance), added to ``terms``."""
    for wc, r, trow in v.training_rows():
        yc = v.runs_on_cloud(wc.index, r)
        if yc is None or trow.cloud_offering is None:
            continue
        cost = scaling.cents_up(trow.cloud_cost_usd, what=f"{wc.name}: training cost")
        terms.one_off.append((cost, yc))
        terms.total.append((cost, yc))
        o = table.offering(trow.cloud_offering)
        terms.train_cloud[wc.index].append((trow.cloud_instances * o.gpus_per_unit, yc))


def _operations_terms(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable, terms: _CostTerms) -> None:
    """(6c) operations, monthly and over the horizon: ``ops_g x operated[g] + ops_p x pool[w,role,g,kind]``.

    ``operated[g]`` holds exactly when a unit of GPU type g is held (``units(o) <= U x operated[g]``,
    ``operated[g] <= sum units``: cloud serving instances, owned servers bought or from inventory; a cloud
    training run is billed once, not operated); ``pool[k]`` exactly when pool k has a replica (``x <= U x pool``,
    ``pool <= sum x``). So a second GPU type or a second pool wins only when it saves more than it costs to run.
    """
    lim = table.limits
    groups: list[tuple[float, cp_model.IntVar, list[cp_model.IntVar]]] = [
        (lim.operations_usd_per_gpu_type_month, on, [x for o in table.offerings_of(gid) for x in v.unit_vars(o)])
        for gid, on in sorted(v.gpu_operated().items())
    ]
    groups += [(lim.operations_usd_per_pool_month, on, v.pool_replicas(k)) for k, on in sorted(v.pools_used().items())]
    for rate, on, xs in groups:
        for x in xs:
            model.add(x <= upper_bound(x) * on)
        model.add(on <= sum(xs))
        terms.monthly.append((scaling.cents_up(rate, what="operations"), on))
        # a month's operations x the horizon
        terms.total.append((scaling.cents_up(rate * lim.horizon_months, what="operations"), on))


def _gpus_in_use(
    model: cp_model.CpModel, table: CandidateTable, terms: _CostTerms, owned_gpus: cp_model.IntVar
) -> cp_model.IntVar:
    """``G`` = owned GPUs + cloud serving GPUs + cloud training GPUs (sequential: owned + the largest cloud phase)."""
    cloud_serving = _define(model, "cloud_serving_gpus", terms.cloud_gpus)
    train_vars = [_define(model, f"train_cloud_gpus_{w}", pairs) for w, pairs in sorted(terms.train_cloud.items())]
    if table.limits.schedule == "sequential" and train_vars:
        phase_ub = max(upper_bound(x) for x in [cloud_serving, *train_vars])
        phase = model.new_int_var(0, phase_ub, "cloud_gpus_largest_phase")
        model.add_max_equality(phase, [cloud_serving, *train_vars])
        parts = [owned_gpus, phase]
    else:
        parts = [owned_gpus, cloud_serving, *train_vars]
    return _define(model, "gpus_in_use", [(1, x) for x in parts])


@dataclass
class _RatioTerms:
    """Ratios of capacity to demand (ppm) and the p95 (ms): their terms, one list per side of a request."""

    headroom: Terms = field(default_factory=list)
    served_caps: list[int] = field(default_factory=list)
    thr_caps: list[int] = field(default_factory=list)
    served_terms: list[Terms] = field(default_factory=list)
    thr_terms: list[Terms] = field(default_factory=list)
    p95_ms: Terms = field(default_factory=list)


def _serving_terms(v: PlanVariables, table: CandidateTable, *, latency_objective: bool) -> _RatioTerms:
    """The ratio terms of every serving workload, one capacity per side of a request (a workload with pool
    rows: prefill and decode, aggregated rows in both)."""
    terms = _RatioTerms()
    for wc in table.workloads:
        if not wc.is_serving:
            continue
        s = v.scales[wc.index]
        rho = s.rate if wc.targets.any else s.rate_nolat
        sides = wc.sides()
        for side in sides:
            st: Terms = []
            tt: Terms = []
            for r, row in enumerate(wc.serving_rows()):
                if not row.serves(side):
                    continue
                c_srv = scaling.PPM * rho[r] // max(1, s.demand)  # ppm of the demand one replica serves
                c_thr = scaling.PPM * s.rate_nolat[r] // max(1, s.demand)  # the same at the utilisation ceiling
                for x in v.replica_vars(wc.index, r):
                    if c_srv:
                        st.append((c_srv, x))
                        # Headroom (a tie-break): an aggregated replica counts once; a pool replica not at all, so
                        # at equal cost and GPUs the simpler aggregated design is kept.
                        if row.role == "both" and side == sides[0]:
                            terms.headroom.append((c_srv, x))
                    if c_thr:
                        tt.append((c_thr, x))
                if latency_objective and side == sides[0]:
                    terms.p95_ms.append((scaling.milliseconds_up(row.p95_e2e_s, what="p95"), v.selected(wc.index, r)))
            terms.served_terms.append(st)
            terms.thr_terms.append(tt)
            terms.served_caps.append(_ub(st))
            terms.thr_caps.append(_ub(tt))
    return terms


def _define_serving_ratios(model: cp_model.CpModel, v: PlanVariables, terms: _RatioTerms) -> None:
    """Headroom (ppm), the served and throughput ratios (ppm, the smallest side's) and the largest selected p95 (ms)."""
    v.headroom_ppm = _define(model, "headroom_ppm", terms.headroom)
    v.headroom_ub = upper_bound(v.headroom_ppm)
    v.served_ratio_ppm = model.new_int_var(0, min(terms.served_caps, default=0), "served_ratio_ppm")
    v.throughput_ratio_ppm = model.new_int_var(0, min(terms.thr_caps, default=0), "throughput_ratio_ppm")
    for st in terms.served_terms:
        model.add(v.served_ratio_ppm <= sum(c * x for c, x in st))
    for tt in terms.thr_terms:
        model.add(v.throughput_ratio_ppm <= sum(c * x for c, x in tt))
    v.p95_max_ms = model.new_int_var(0, max((c for c, _ in terms.p95_ms), default=0), "p95_max_ms")
    for c, sel in terms.p95_ms:
        model.add(v.p95_max_ms >= c * sel)


def _define_deadline_ratio(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable) -> None:
    """Training time over deadline (ppm): at least each deadline workload's selected layout's ratio."""
    ratios: list[tuple[int, Terms]] = []
    ub = 0
    for wc in table.workloads:
        if wc.is_serving or wc.deadline_s is None:
            continue
        terms = []
        for r, trow in enumerate(wc.training_rows()):
            c = scaling.ppm_up(trow.time_to_train_s / wc.deadline_s, what="deadline ratio")  # time / deadline
            for y in v.training_choices(wc.index, r):
                terms.append((c, y))
                ub = max(ub, c)
        ratios.append((wc.index, terms))
    v.deadline_ratio_ppm = model.new_int_var(0, ub, "deadline_ratio_ppm")
    for _, terms in ratios:
        model.add(v.deadline_ratio_ppm >= sum(c * y for c, y in terms))
