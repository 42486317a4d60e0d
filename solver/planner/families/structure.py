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

from clusterplan.candidates.table import CandidateTable, Offering, ServingRow, TrainingRow
from clusterplan.planner import scaling
from clusterplan.planner.cpsat import cp_model
from clusterplan.planner.variables import PlanVariables
from clusterplan.units import HOURS_PER_MONTH


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
        for t in sorted({1} | {row.tp for _, _, row in serving} | {trow.tp for _, _, trow in training}):
            if t < min_t or (max_t is not None and t > max_t):
                continue
            # cloud
            need_cloud = [row.gpus * v.cloud_replicas(w, r) for w, r, row in serving if row.tp >= t and (w, r) in v._xc]
            if need_cloud:
                cap = sum(o.tp_capacity(t) * v.instances(o) for o in cloud)
                c = model.add(sum(need_cloud) <= cap)
                if enforce is not None:
                    c.only_enforce_if(enforce)
            # owned
            per_workload: dict[int, list[cp_model.LinearExprT]] = defaultdict(list)
            for w, r, row in serving:
                if row.tp >= t and (w, r) in v._xo:
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
        (big.provider, big.region, big.forbidden_by) == (small.provider, small.region, small.forbidden_by)
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
    """Add every structural constraint and define the aggregates on ``v``."""
    lim = table.limits
    # (1)-(2) serving: link replicas and selections; one shape unless mixed; serve every workload.
    for wc in table.workloads:
        w = wc.index
        if wc.is_serving:
            s = v.scales[w]
            rho = s.rate if wc.targets.any else s.rate_nolat
            sels = []
            all_x: list[cp_model.IntVar] = []
            cloud_x: list[cp_model.IntVar] = []
            owned_x: list[cp_model.IntVar] = []
            by_shape: dict[tuple[object, ...], list[cp_model.IntVar]] = defaultdict(list)
            for r, row in enumerate(wc.serving_rows()):
                sel = v.selected(w, r)
                sels.append(sel)
                xs = v.replica_vars(w, r)
                all_x += xs
                if (w, r) in v._xc:
                    cloud_x.append(v._xc[w, r])
                    model.add(v._xc[w, r] <= s.upper[r] * v.uses_cloud(w))
                if (w, r) in v._xo:
                    owned_x.append(v._xo[w, r])
                    model.add(v._xo[w, r] <= s.upper[r] * v.uses_owned(w))
                if xs:
                    model.add(sum(xs) >= 1).only_enforce_if(sel)
                    model.add(sum(xs) == 0).only_enforce_if(sel.Not())
                else:
                    model.add(sel == 0)
                if wc.redundancy > 0:
                    model.add(v.largest_rate(w) >= rho[r] * sel)
                by_shape[row.shape].append(sel)
            for shape, members in by_shape.items():
                z = v.shape_used(w, shape)
                if len(members) == 1 and z is members[0]:
                    continue
                for sel in members:
                    model.add_implication(sel, z)
                model.add_bool_or([*members, z.Not()])
            d = v.disaggregated(w)
            rows = wc.serving_rows()
            if d is None:
                if not wc.allow_mixed:
                    model.add_exactly_one(sels)  # one shape, and (below) at least one replica
            else:
                # Aggregated replicas, or a prefill pool and a decode pool (d): one shape each unless mixed.
                aggregated = [s_ for s_, row in zip(sels, rows, strict=True) if row.role == "both"]
                by_role = {
                    role: [s_ for s_, row in zip(sels, rows, strict=True) if row.role == role]
                    for role in ("prefill", "decode")
                }
                if not wc.allow_mixed:
                    model.add_exactly_one([*aggregated, d])
                    for members in by_role.values():
                        model.add(sum(members) == d)
                else:
                    for members in by_role.values():
                        for s_ in members:
                            model.add_implication(s_, d)
                        model.add_bool_or([*members, d.Not()])
            model.add(sum(all_x) >= 1)
            model.add(sum(cloud_x) >= v.uses_cloud(w))
            model.add(sum(owned_x) >= v.uses_owned(w))
        else:
            # (3) training: exactly one layout, on cloud or owned.
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
    # (4) total GPU count per type and deployment (TP size 1).
    add_capacity(model, v, table, min_t=1, max_t=1, enforce=None)
    # (4b) symmetry: with prices, power and energy pro rata to GPU slots (the catalog's rule), two
    # bought servers of size s are worth exactly one of size 2s, which hosts everything they host
    # (its NVLink domain is no smaller). So WLOG at most one server of each size that has a double.
    for gid in sorted({o.gpu_id for o in table.offerings if o.kind == "owned"}):
        sizes = {o.gpus_per_unit: o for o in table.offerings_of(gid, "owned") if o.purchasable}
        for size, o in sizes.items():
            big = sizes.get(2 * size)
            if big is not None and _pro_rata(o, big) and o.forbidden_by == big.forbidden_by:
                model.add(v.bought(o) <= 1)
    # (4c) the same for cloud instances: k instances of s GPUs cost exactly one of k*s GPUs from the same
    # provider and region at the same price per GPU, which hosts everything they host (its NVLink domain,
    # rack domain and fabric no smaller). So WLOG fewer than k of the small one: of two designs at one cost
    # the plan takes the one with fewer machines, as an operator would, not whichever the search met first
    # (four 1x-l40s or one 4x-l40s at $3.44/h flipped with the physics' last digits).
    for gid in sorted({o.gpu_id for o in table.offerings if o.kind == "cloud"}):
        instances = table.offerings_of(gid, "cloud")
        for o in instances:
            multiples = [big.gpus_per_unit // o.gpus_per_unit for big in instances if _cloud_pro_rata(o, big)]
            if multiples:
                model.add(v.instances(o) <= min(multiples) - 1)
    # (5) without inventory no server is free.
    if not inventory_family:
        for o in table.offerings:
            if o.kind == "owned":
                model.add(v.from_inventory(o) <= o.inventory_units)

    # (6) aggregates, integer cents / GPUs / W / ppm.
    h = lim.horizon_months
    capital: list[tuple[int, cp_model.IntVar]] = []
    monthly: list[tuple[int, cp_model.IntVar]] = []
    total: list[tuple[int, cp_model.IntVar]] = []
    owned_gpus: list[tuple[int, cp_model.IntVar]] = []
    cloud_gpus: list[tuple[int, cp_model.IntVar]] = []
    power: list[tuple[int, cp_model.IntVar]] = []
    extra: list[tuple[int, cp_model.IntVar]] = []
    for o in table.offerings:
        if o.kind == "cloud":
            n = v.instances(o)
            monthly.append((scaling.cents_up(o.usd_per_hour * HOURS_PER_MONTH, what=o.key), n))
            total.append((scaling.cents_up(o.usd_per_hour * HOURS_PER_MONTH * h, what=o.key), n))
            cloud_gpus.append((o.gpus_per_unit, n))
        else:
            m, u = v.bought(o), v.from_inventory(o)
            capital.append((scaling.cents_up(o.capital_usd, what=o.key), m))
            total.append((scaling.cents_up(o.capital_usd, what=o.key), m))
            e_month = scaling.cents_up(o.running_usd_per_month, what=o.key)
            e_total = scaling.cents_up(o.running_usd_per_month * h, what=o.key)
            p = scaling.watts_up(o.power_w, what=o.key)
            for var in (m, u):
                monthly.append((e_month, var))
                total.append((e_total, var))
                owned_gpus.append((o.gpus_per_unit, var))
                power.append((p, var))
            if inventory_family:
                e = model.new_int_var(0, upper_bound(u), f"extra_{o.key}")
                model.add(e >= u - o.inventory_units)
                extra.append((o.gpus_per_unit, e))
    one_off: list[tuple[int, cp_model.IntVar]] = []
    train_cloud: dict[int, list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
    for wc, r, trow in v.training_rows():
        yc = v.runs_on_cloud(wc.index, r)
        if yc is None or trow.cloud_offering is None:
            continue
        cost = scaling.cents_up(trow.cloud_cost_usd, what=f"{wc.name}: training cost")
        one_off.append((cost, yc))
        total.append((cost, yc))
        o = table.offering(trow.cloud_offering)
        train_cloud[wc.index].append((trow.cloud_instances * o.gpus_per_unit, yc))
    v.capital_cents = _define(model, "capital_cents", capital)
    v.monthly_cents = _define(model, "monthly_cents", monthly)
    v.one_off_cents = _define(model, "one_off_cents", one_off)
    v.total_cents = _define(model, "total_cents", total)
    v.total_terms = [(c, x) for c, x in total if c]
    v.owned_gpus = _define(model, "owned_gpus", owned_gpus)
    v.owned_power_w = _define(model, "owned_power_w", power)
    v.inventory_extra_gpus = _define(model, "inventory_extra_gpus", extra)
    cloud_serving = _define(model, "cloud_serving_gpus", cloud_gpus)
    train_vars = [_define(model, f"train_cloud_gpus_{w}", pairs) for w, pairs in sorted(train_cloud.items())]
    if lim.schedule == "sequential" and train_vars:
        phase_ub = max(upper_bound(x) for x in [cloud_serving, *train_vars])
        phase = model.new_int_var(0, phase_ub, "cloud_gpus_largest_phase")
        model.add_max_equality(phase, [cloud_serving, *train_vars])
        parts = [v.owned_gpus, phase]
    else:
        parts = [v.owned_gpus, cloud_serving, *train_vars]
    v.gpus_in_use = _define(model, "gpus_in_use", [(1, x) for x in parts])

    # Ratios of capacity to demand (ppm), p95 (ms), training time over deadline (ppm).
    headroom: list[tuple[int, cp_model.IntVar]] = []
    served_caps: list[int] = []
    thr_caps: list[int] = []
    served_terms: list[list[tuple[int, cp_model.IntVar]]] = []
    thr_terms: list[list[tuple[int, cp_model.IntVar]]] = []
    p95_ms: list[tuple[int, cp_model.IntVar]] = []
    for wc in table.workloads:
        if not wc.is_serving:
            continue
        s = v.scales[wc.index]
        rho = s.rate if wc.targets.any else s.rate_nolat
        # One capacity per side of a request (a workload with pool rows: prefill and decode, aggregated rows in both).
        sides = wc.sides()
        for side in sides:
            st: list[tuple[int, cp_model.IntVar]] = []
            tt: list[tuple[int, cp_model.IntVar]] = []
            for r, row in enumerate(wc.serving_rows()):
                if not row.serves(side):
                    continue
                c_srv = scaling.PPM * rho[r] // max(1, s.demand)
                c_thr = scaling.PPM * s.rate_nolat[r] // max(1, s.demand)
                for x in v.replica_vars(wc.index, r):
                    if c_srv:
                        st.append((c_srv, x))
                        # Headroom (a tie-break): an aggregated replica counts once; a pool replica not at all, so
                        # at equal cost and GPUs the simpler aggregated design is kept.
                        if row.role == "both" and side == sides[0]:
                            headroom.append((c_srv, x))
                    if c_thr:
                        tt.append((c_thr, x))
                if latency_objective and side == sides[0]:
                    p95_ms.append((scaling.milliseconds_up(row.p95_e2e_s, what="p95"), v.selected(wc.index, r)))
            served_terms.append(st)
            thr_terms.append(tt)
            served_caps.append(_ub(st))
            thr_caps.append(_ub(tt))
    v.headroom_ppm = _define(model, "headroom_ppm", headroom)
    v.headroom_ub = upper_bound(v.headroom_ppm)
    v.served_ratio_ppm = model.new_int_var(0, min(served_caps, default=0), "served_ratio_ppm")
    v.throughput_ratio_ppm = model.new_int_var(0, min(thr_caps, default=0), "throughput_ratio_ppm")
    for st in served_terms:
        model.add(v.served_ratio_ppm <= sum(c * x for c, x in st))
    for tt in thr_terms:
        model.add(v.throughput_ratio_ppm <= sum(c * x for c, x in tt))
    v.p95_max_ms = model.new_int_var(0, max((c for c, _ in p95_ms), default=0), "p95_max_ms")
    for c, sel in p95_ms:
        model.add(v.p95_max_ms >= c * sel)
    ratios: list[tuple[int, list[tuple[int, cp_model.IntVar]]]] = []
    ub = 0
    for wc in table.workloads:
        if wc.is_serving or wc.deadline_s is None:
            continue
        terms = []
        for r, trow in enumerate(wc.training_rows()):
            c = scaling.ppm_up(trow.time_to_train_s / wc.deadline_s, what="deadline ratio")
            for y in v.training_choices(wc.index, r):
                terms.append((c, y))
                ub = max(ub, c)
        ratios.append((wc.index, terms))
    v.deadline_ratio_ppm = model.new_int_var(0, ub, "deadline_ratio_ppm")
    for _, terms in ratios:
        model.add(v.deadline_ratio_ppm >= sum(c * y for c, y in terms))
