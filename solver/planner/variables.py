"""All decision variables of the planning model, in one container with intent-revealing accessors.

Constraint modules never index raw lists: they ask for ``v.cloud_replicas(w, r)``,
``v.instances(offering)``, ``v.literal("budget_total")``. Variables that cannot matter are not
created (no cloud offering for a GPU type: no cloud-replica variable); accessors then return 0, so
constraint code reads the same whatever the table holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from clusterplan.candidates.table import CandidateTable, Offering, ServingRow, Side, TrainingRow, WorkloadCandidates
from clusterplan.evaluation import pricing
from clusterplan.planner import scaling
from clusterplan.planner.cpsat import cp_model

# What the accessors below hand back: a CP-SAT expression (an IntVar or a sum of them) or the constant 0.
# (cp_model.LinearExprT also admits numpy integers, which never occur here and make ``0 - expr`` untypable.)
LinearExpr = cp_model.LinearExpr | int
IntVar = cp_model.IntVar
PoolKey = tuple[int, str, str, str]  # (workload index, role, GPU type, "cloud" | "owned")


@dataclass
class ServingScale:
    """Per-workload integer rates (see :mod:`clusterplan.planner.scaling`)."""

    resolution_rps: float
    demand: int
    rate: list[int]  # meeting latency targets
    rate_nolat: list[int]
    upper: list[int]  # replica upper bound per row
    exponent: int = 0
    # per row, the load a replica may take within the latency targets: ``rate``, capped where the scheduler
    # simulation holds them only at less (``ServingRow.held_rps``, the latency family); 0: not at any
    held: list[int] = field(
        default_factory=list
    )  # the decimal exponent of the integer units (resolution = 10**-exponent req/s)


@dataclass
class PlanVariables:
    model: cp_model.CpModel
    table: CandidateTable
    # serving: (w, r) -> var
    _xc: dict[tuple[int, int], IntVar] = field(default_factory=dict)
    _xo: dict[tuple[int, int], IntVar] = field(default_factory=dict)
    _sel: dict[tuple[int, int], IntVar] = field(default_factory=dict)
    _maxrate: dict[int, IntVar] = field(default_factory=dict)
    _pools: dict[int, IntVar] = field(default_factory=dict)  # w -> served by a prefill and a decode pool
    # demand profiles (planner/families/demand_profile.py): burst replicas of a row, rented by the hour
    _burst: dict[tuple[int, int], IntVar] = field(default_factory=dict)
    # w -> (hourly demand level req/s, hours of the period at it, burst replicas running at it)
    burst_levels: dict[int, list[tuple[float, int, IntVar]]] = field(default_factory=dict)
    # training
    _yc: dict[tuple[int, int], IntVar] = field(default_factory=dict)
    _yo: dict[tuple[int, int], IntVar] = field(default_factory=dict)
    # offerings: key -> var
    _instances: dict[str, IntVar] = field(default_factory=dict)
    _bought: dict[str, IntVar] = field(default_factory=dict)
    _from_inventory: dict[str, IntVar] = field(default_factory=dict)
    # signature
    _shape: dict[tuple[int, tuple[object, ...]], IntVar] = field(default_factory=dict)
    _uses_cloud: dict[int, IntVar] = field(default_factory=dict)
    _uses_owned: dict[int, IntVar] = field(default_factory=dict)
    _gpu_used: dict[str, IntVar] = field(default_factory=dict)  # GPU type -> the design runs on it
    # operations indicators (only where the table charges operations): a GPU type held (a unit of it bought,
    # from inventory or rented for serving) and a serving pool (workload, role, GPU type, cloud | owned) in use
    _gpu_operated: dict[str, IntVar] = field(default_factory=dict)
    _pool_used: dict[PoolKey, IntVar] = field(default_factory=dict)
    _pool_members: dict[PoolKey, list[IntVar]] | None = None  # pool_replicas' lists, made in one pass over the rows
    # family literals
    _literals: dict[str, IntVar] = field(default_factory=dict)
    # per-workload integer scales
    scales: dict[int, ServingScale] = field(default_factory=dict)
    # aggregates (IntVars defined by equalities in constraints.structure)
    capital_cents: IntVar | None = None
    monthly_cents: IntVar | None = None
    one_off_cents: IntVar | None = None
    total_cents: IntVar | None = None
    gpus_in_use: IntVar | None = None
    owned_gpus: IntVar | None = None
    owned_power_w: IntVar | None = None
    headroom_ppm: IntVar | None = None
    served_ratio_ppm: IntVar | None = None
    throughput_ratio_ppm: IntVar | None = None
    p95_max_ms: IntVar | None = None
    deadline_ratio_ppm: IntVar | None = None
    inventory_extra_gpus: IntVar | None = None
    gpu_types_used: IntVar | None = None
    # GPUs held per (GPU type, cloud | owned): what a design buys or rents (defined in constraints.structure)
    hardware_counts: dict[tuple[str, str], IntVar] = field(default_factory=dict)
    # GPUs at work per (GPU type, cloud | owned): serving replicas x GPUs per replica, and training runs' GPUs
    working_counts: dict[tuple[str, str], IntVar] = field(default_factory=dict)
    headroom_ub: int = 0
    total_terms: list[tuple[int, cp_model.IntVar]] = field(default_factory=list)

    # -------------------------------------------------------------------------------- creation
    @classmethod
    def create(
        cls, model: cp_model.CpModel, table: CandidateTable, *, families: list[str], replica_factor: int = 1
    ) -> PlanVariables:
        v = cls(model=model, table=table)
        cloud_gpus = {o.gpu_id for o in table.offerings if o.kind == "cloud"}
        owned_gpus = {o.gpu_id for o in table.offerings if o.kind == "owned"}
        for wc in table.workloads:
            w = wc.index
            if wc.is_serving:
                scale = _serving_scale(wc, replica_factor)
                v.scales[w] = scale
                per_shape: dict[tuple[object, ...], int] = {}
                for row in wc.serving_rows():
                    per_shape[row.shape] = per_shape.get(row.shape, 0) + 1
                for r, row in enumerate(wc.serving_rows()):
                    ub = scale.upper[r]
                    tag = f"w{w}r{r}"
                    v._sel[w, r] = model.new_bool_var(f"sel_{tag}")
                    if row.gpu_id in cloud_gpus:
                        v._xc[w, r] = model.new_int_var(0, ub, f"xc_{tag}")
                    if row.gpu_id in owned_gpus:
                        v._xo[w, r] = model.new_int_var(0, ub, f"xo_{tag}")
                    if _bursts(table, wc, row):
                        v._burst[w, r] = model.new_int_var(0, max(0, ub - 1), f"xb_{tag}")
                    if per_shape[row.shape] == 1:
                        v._shape[w, row.shape] = v._sel[w, r]  # the shape is used iff its only row is
                    else:
                        v._new_shape(w, row.shape)
                if wc.has_pools:
                    v._pools[w] = model.new_bool_var(f"pools_{w}")
                if wc.redundancy > 0:
                    max_rate = max([*scale.rate, *scale.rate_nolat, 0])
                    v._maxrate[w] = model.new_int_var(0, max_rate, f"maxrate_{w}")
            else:
                for r, trow in enumerate(wc.training_rows()):
                    tag = f"w{w}r{r}"
                    if trow.cloud_offering is not None:
                        v._yc[w, r] = model.new_bool_var(f"yc_{tag}")
                    if trow.gpu_id in owned_gpus:
                        v._yo[w, r] = model.new_bool_var(f"yo_{tag}")
                    v._new_shape(w, trow.shape)
            v._uses_cloud[w] = model.new_bool_var(f"cloud_{w}")
            v._uses_owned[w] = model.new_bool_var(f"owned_{w}")
        for gid in sorted({row.gpu_id for wc in table.workloads for row in wc.rows}):
            v._gpu_used[gid] = model.new_bool_var(f"gpu_used_{gid}")
        gpu_need = _gpu_need_bounds(table, v)
        for o in table.offerings:
            need = gpu_need.get(o.gpu_id, 0)
            ub = max(0, math.ceil(need / o.gpus_per_unit))
            if o.kind == "cloud":
                # a spot offer kept for interruptible training only hosts no serving replica (Offering.serves)
                v._instances[o.key] = model.new_int_var(0, ub if o.serves else 0, f"n_{o.key}")
            else:
                v._bought[o.key] = model.new_int_var(0, ub if o.purchasable else 0, f"m_{o.key}")
                v._from_inventory[o.key] = model.new_int_var(0, max(ub, o.inventory_units), f"u_{o.key}")
        v._operations_indicators(table)
        for f in families:
            v._literals[f] = model.new_bool_var(f"on_{f}")
        return v

    def _operations_indicators(self, table: CandidateTable) -> None:
        """A boolean per GPU type with an offering and per serving pool that can hold a replica, where the table
        charges operations for it (a rate of 0 adds nothing: the model stays as it was without them)."""
        if table.limits.operations_usd_per_gpu_type_month > 0:
            for gid in sorted({o.gpu_id for o in table.offerings}):
                self._gpu_operated[gid] = self.model.new_bool_var(f"operated_{gid}")
        if table.limits.operations_usd_per_pool_month > 0:
            for wc, r, row in self.serving_rows():
                for kind, xs in (("cloud", self._xc), ("owned", self._xo)):
                    key = (wc.index, row.role, row.gpu_id, kind)
                    if (wc.index, r) in xs and key not in self._pool_used:
                        self._pool_used[key] = self.model.new_bool_var(
                            f"pool_{wc.index}_{row.role}_{row.gpu_id}_{kind}"
                        )

    def _new_shape(self, w: int, shape: tuple[object, ...]) -> None:
        if (w, shape) not in self._shape:
            self._shape[w, shape] = self.model.new_bool_var(f"z_{w}_{'_'.join(map(str, shape))}")

    # -------------------------------------------------------------------------------- accessors
    def serving_rows(self) -> Iterator[tuple[WorkloadCandidates, int, ServingRow]]:
        for wc in self.table.workloads:
            if wc.is_serving:
                for r, row in enumerate(wc.serving_rows()):
                    yield wc, r, row

    def training_rows(self) -> Iterator[tuple[WorkloadCandidates, int, TrainingRow]]:
        for wc in self.table.workloads:
            if not wc.is_serving:
                for r, row in enumerate(wc.training_rows()):
                    yield wc, r, row

    def selected(self, w: int, r: int) -> IntVar:
        """Serving row r of workload w has at least one replica."""
        return self._sel[w, r]

    def cloud_replicas(self, w: int, r: int) -> LinearExpr:
        return self._xc.get((w, r), 0)

    def owned_replicas(self, w: int, r: int) -> LinearExpr:
        return self._xo.get((w, r), 0)

    def replicas(self, w: int, r: int) -> LinearExpr:
        xs = self.replica_vars(w, r)
        return cp_model.LinearExpr.sum(xs) if xs else 0

    def replica_vars(self, w: int, r: int) -> list[IntVar]:
        """Replicas of row r at peak: on cloud instances, on owned servers and (a demand profile's) burst."""
        return [x for x in (self._xc.get((w, r)), self._xo.get((w, r)), self._burst.get((w, r))) if x is not None]

    def base_replicas(self, w: int, r: int) -> LinearExpr:
        """Replicas of row r that run every hour (cloud instances and owned servers): the autoscaler's minimum."""
        xs = [x for x in (self._xc.get((w, r)), self._xo.get((w, r))) if x is not None]
        return cp_model.LinearExpr.sum(xs) if xs else 0

    def burst_replicas(self, w: int, r: int) -> IntVar | None:
        """Replicas of row r rented by the hour for a demand profile's busy hours (None: the row has no burst)."""
        return self._burst.get((w, r))

    def disaggregated(self, w: int) -> IntVar | None:
        """Workload w is served by a prefill pool and a decode pool (None: it has no pool rows)."""
        return self._pools.get(w)

    def side_replicas(self, wc: WorkloadCandidates, rates: list[int], side: Side) -> list[LinearExpr]:
        """``min(rate, demand) x replicas`` of every row carrying ``side`` of a request (aggregated rows carry
        both): a demand family's capacity terms, one inequality per side (:meth:`WorkloadCandidates.sides`)."""
        demand = self.scales[wc.index].demand
        return [
            min(rate, demand) * self.replicas(wc.index, r)
            for r, (rate, row) in enumerate(zip(rates, wc.serving_rows(), strict=True))
            if rate and row.serves(side)
        ]

    def largest_rate(self, w: int) -> IntVar:
        """Largest per-replica rate among the rows workload w uses (for N+k redundancy)."""
        return self._maxrate[w]

    def runs_on_cloud(self, w: int, r: int) -> IntVar | None:
        """Training row r of workload w runs on its cheapest cloud instance type."""
        return self._yc.get((w, r))

    def runs_owned(self, w: int, r: int) -> IntVar | None:
        return self._yo.get((w, r))

    def training_choices(self, w: int, r: int) -> list[IntVar]:
        return [y for y in (self._yc.get((w, r)), self._yo.get((w, r))) if y is not None]

    def instances(self, o: Offering) -> IntVar:
        """Cloud instances of this type in the serving pool."""
        return self._instances[o.key]

    def bought(self, o: Offering) -> IntVar:
        """Owned servers of this size bought."""
        return self._bought[o.key]

    def from_inventory(self, o: Offering) -> IntVar:
        """Owned servers of this size taken from inventory (free)."""
        return self._from_inventory[o.key]

    def owned_units(self, o: Offering) -> LinearExpr:
        return self._bought[o.key] + self._from_inventory[o.key]

    def unit_vars(self, o: Offering) -> list[IntVar]:
        if o.kind == "cloud":
            return [self._instances[o.key]]
        return [self._bought[o.key], self._from_inventory[o.key]]

    def shape_used(self, w: int, shape: tuple[object, ...]) -> IntVar:
        return self._shape[w, shape]

    def shapes(self) -> dict[tuple[int, tuple[object, ...]], IntVar]:
        return dict(self._shape)

    def uses_cloud(self, w: int) -> IntVar:
        return self._uses_cloud[w]

    def uses_owned(self, w: int) -> IntVar:
        return self._uses_owned[w]

    def gpu_used(self, gpu_id: str) -> IntVar | None:
        """The design runs on GPU type ``gpu_id`` (None: no row of the table uses it)."""
        return self._gpu_used.get(gpu_id)

    def gpu_types(self) -> dict[str, IntVar]:
        return dict(self._gpu_used)

    def gpu_operated(self) -> dict[str, IntVar]:
        """GPU type -> the design holds a unit of it (owned, or rented for serving); only where operations are charged."""
        return dict(self._gpu_operated)

    def pools_used(self) -> dict[PoolKey, IntVar]:
        """(workload, role, GPU type, cloud | owned) -> that pool has a replica; only where operations are charged."""
        return dict(self._pool_used)

    def pool_replicas(self, key: PoolKey) -> list[IntVar]:
        """The replica variables of one pool: its workload's rows of that role and GPU type, on that side."""
        if self._pool_members is None:  # one pass over the rows for every pool (one per pool took 0.07 s on a fleet)
            members: dict[PoolKey, list[IntVar]] = {}
            for wc, r, row in self.serving_rows():
                for kind, xs in (("cloud", self._xc), ("owned", self._xo)):
                    if (wc.index, r) in xs:
                        members.setdefault((wc.index, row.role, row.gpu_id, kind), []).append(xs[wc.index, r])
            self._pool_members = members
        return list(self._pool_members.get(key, []))

    def literal(self, family: str) -> IntVar:
        """The enforcement literal of a constraint family."""
        return self._literals[family]

    def has_literal(self, family: str) -> bool:
        return family in self._literals

    def literals(self) -> dict[str, IntVar]:
        return dict(self._literals)

    def choice_literals(self) -> list[IntVar]:
        """The booleans that pick rows: serving rows selected, training rows run on cloud / owned."""
        return [*self._sel.values(), *self._yc.values(), *self._yo.values()]

    def pool_literals(self) -> list[IntVar]:
        """Per workload with pool rows, its disaggregated literal (in workload order)."""
        return [self._pools[w] for w in sorted(self._pools)]

    def signature_literals(self) -> list[IntVar]:
        """The booleans a design's signature is made of (shapes used, cloud/owned per workload)."""
        out = [self._shape[k] for k in sorted(self._shape, key=repr)]
        out += [self._uses_cloud[w] for w in sorted(self._uses_cloud)]
        out += [self._uses_owned[w] for w in sorted(self._uses_owned)]
        return out


def _bursts(table: CandidateTable, wc: WorkloadCandidates, row: ServingRow) -> bool:
    """A row may add burst replicas: its workload has a demand profile and one shape (a mixed workload runs its
    base as it is), it is aggregated (pools run every hour) and some cloud offering rents it by the hour."""
    if not wc.profile_rps or wc.allow_mixed or row.role != "both":
        return False
    return pricing.burst_offer(table.offerings, gpu_id=row.gpu_id, tp=row.tp, pp=row.pp) is not None


def _serving_scale(wc: WorkloadCandidates, replica_factor: int) -> ServingScale:
    if wc.rate_exponent is None:
        positive = [x for r in wc.serving_rows() for x in (r.rate_rps, r.rate_nolat_rps) if x > 0]
        exp = scaling.rate_exponent(wc.demand_rps, min(positive, default=None))
        rate = [
            scaling.check_rate_units(
                r.rate_rps, scaling.rate_units_down(r.rate_rps, exp, what=f"{wc.name}: rate"), what=wc.name
            )
            for r in wc.serving_rows()
        ]
    else:
        # The exponent another table decided (a trade's probe at its plan's resolution): a rate below one
        # unit there counts as none, as it would in that plan's model (rates are rounded down).
        exp = wc.rate_exponent
        rate = [scaling.rate_units_down(r.rate_rps, exp, what=f"{wc.name}: rate") for r in wc.serving_rows()]
    res = scaling.rate_resolution(exp)
    # the simulation's held load caps a row's latency rate (rounded down, as the rates are)
    held = [
        x if r.held_rps is None else min(x, scaling.rate_units_down(r.held_rps, exp, what=f"{wc.name}: held load"))
        for x, r in zip(rate, wc.serving_rows(), strict=True)
    ]
    demand = scaling.rate_units_up(wc.demand_rps, exp, what=f"{wc.name}: demand")
    nolat = [scaling.rate_units_down(r.rate_nolat_rps, exp, what=f"{wc.name}: rate") for r in wc.serving_rows()]
    k = wc.redundancy
    max_rate = max(rate, default=0)
    max_nolat = max(nolat, default=0)
    upper: list[int] = []
    if not wc.allow_mixed and replica_factor == 1:
        # One shape serves the workload: the fewest replicas meeting every family that may be on
        # is the most a cost-minimising (or latency-minimising) solution uses. Tight bounds make
        # x = floor x sel exact in the LP, which is what keeps large models fast.
        for r_lat, r_nolat in zip(held, nolat, strict=True):
            floors = [1]
            if r_nolat > 0:
                floors.append(-(-demand // r_nolat))
            if wc.targets.any and r_lat > 0:
                floors.append(-(-demand // r_lat))
            rho = r_lat if wc.targets.any else r_nolat
            if k > 0 and rho > 0:
                floors.append(k + -(-demand // rho))
            upper.append(max(floors))
        return ServingScale(
            resolution_rps=res, demand=demand, rate=rate, rate_nolat=nolat, upper=upper, exponent=exp, held=held
        )
    for r_lat, r_nolat in zip(held, nolat, strict=True):
        # Enough replicas of this row alone to meet demand plus k of the largest replica, for each
        # rate the model may use; one more cannot be needed (removing it keeps every family satisfied).
        bounds = [1 + k]
        if r_lat > 0:
            bounds.append(math.ceil((demand + k * max_rate) / r_lat))
        if r_nolat > 0:
            bounds.append(math.ceil((demand + k * max_nolat) / r_nolat))
        upper.append(max(bounds) * replica_factor + (replica_factor - 1) * k)
    return ServingScale(
        resolution_rps=res, demand=demand, rate=rate, rate_nolat=nolat, upper=upper, exponent=exp, held=held
    )


def _gpu_need_bounds(table: CandidateTable, v: PlanVariables) -> dict[str, int]:
    """Upper bound on GPUs of each type any workload could ask for (sizes instance/server counts)."""
    need: dict[str, int] = {}
    for wc in table.workloads:
        per: dict[str, int] = {}
        if wc.is_serving:
            scale = v.scales[wc.index]
            by_role: dict[tuple[str, str], int] = {}
            for r, row in enumerate(wc.serving_rows()):
                n = scale.upper[r] * row.gpus
                # One shape per workload (and pool): the largest row bounds it; mixed: rows add up.
                key = (row.gpu_id, row.role)
                by_role[key] = by_role.get(key, 0) + n if wc.allow_mixed else max(by_role.get(key, 0), n)
            for (gid, role), n in by_role.items():
                if role == "both" or wc.allow_mixed:
                    per[gid] = per.get(gid, 0) + n if wc.allow_mixed else max(per.get(gid, 0), n)
            for gid in {g for g, role in by_role if role != "both" and not wc.allow_mixed}:
                pools = by_role.get((gid, "prefill"), 0) + by_role.get((gid, "decode"), 0)
                per[gid] = max(per.get(gid, 0), pools)
        else:
            for trow in wc.training_rows():
                per[trow.gpu_id] = max(per.get(trow.gpu_id, 0), trow.gpus)
        for g, n in per.items():
            need[g] = need.get(g, 0) + n
    return need
