"""Assemble the CP-SAT model from a candidate table. The builder reads only the table.

Formulation
===========

Sets and data (all from :class:`clusterplan.candidates.CandidateTable`)

* ``S`` serving workloads, ``T`` training/fine-tuning workloads, ``R_w`` the candidate rows of w.
* A serving row r is a replica shape: GPU type g(r), TP, PP, quantization, batch; it needs
  ``tp*pp`` GPUs and sustains ``rate[r]`` requests/s with the p95 targets met and ``rate_nolat[r]``
  at the utilisation ceiling (integers, see :mod:`clusterplan.planner.scaling`).
* A training row r is a layout (GPU type, TP, PP, DP, ZeRO, recompute, micro-batch): ``gpus[r]``
  GPUs, ``time[r]`` seconds; on cloud it runs on its cheapest compatible instance type for
  ``cloud_cost[r]`` (instances x $/h x hours), computed in advance.
* Offerings O: cloud instance types c (``k_c`` GPUs, ``$/h``, TP domain ``d_c``) and owned server
  sizes o (``s_o`` GPUs, capital, power at TDP incl. overhead, energy/month, ``I_o`` inventory
  servers). ``cap_t(u)`` = GPUs of one unit usable by TP groups of size >= t.
* ``D_w`` = average requests/s x peak_to_average (rounded up); ``k_w`` = redundancy.
* Families F with enforcement literals ``l_f`` (:mod:`clusterplan.planner.families`).

Variables (:class:`clusterplan.planner.variables.PlanVariables`)

* ``xc[w,r], xo[w,r]`` in ``[0, U[w,r]]``: replicas of row r on cloud / owned; ``sel[w,r]`` boolean.
  One shape per workload (min-cost and min-latency objectives): ``U[w,r]`` = the largest of the
  per-family floors of 6-8 below (fewer replicas never break a family, more only cost more).
  Mixed workloads: ``U[w,r] = max over rates rho of ceil((D_w + k_w * max rho) / rho[r])``: one more
  replica than that can always be removed without breaking any family. max_throughput: x10.
* ``yc[w,r], yo[w,r]`` booleans: training row r runs on cloud / on owned servers.
* ``n[c]`` cloud instances (serving pool), ``m[o]`` owned servers bought, ``u[o]`` inventory
  servers used; ``z[w,shape]``, ``cloud[w]``, ``owned[w]`` booleans (the design's signature);
  ``M_w`` the largest per-replica rate in use.

Constraints

1. Link: ``sel[w,r] => xc+xo >= 1``, ``not sel[w,r] => xc+xo = 0``; ``sel => z[w,shape(r)]``,
   ``z => OR sel`` of its rows; ``xc <= U*cloud[w]``, ``cloud[w] <= sum xc`` (same for owned).
2. Shape: ``sum_r sel[w,r] = 1`` unless the workload allows mixed GPU types (with pool rows: one
   aggregated row, or one prefill and one decode row of the same GPU type g,
   ``sum_{prefill r: g} sel = sum_{decode r: g} sel``);
   ``sum_r (xc+xo)[w,r] >= 1`` (every serving workload is served).
3. Training: ``sum_r (yc+yo)[w,r] = 1`` for every w in T.
4. GPU count: for every GPU type g,
   cloud ``sum_{w,r: g} tp*pp*xc <= sum_c k_c*n[c]``;
   owned ``sum_{w} need_w(g) <= sum_o s_o*(m[o]+u[o])`` where ``need_w`` counts serving replicas
   (``tp*pp*xo``) and the training row (``gpus*yo``). Concurrent schedule: summed over workloads;
   sequential: each workload alone (the same servers are reused, train then serve).
5. ``tp_nvlink`` (l): rows with TP wider than the GPU's NVLink domain are unselected, and for every
   TP size t >= 2 the inequalities of 4 hold with ``tp >= t`` rows on the left and ``cap_t`` on the
   right. TP sizes and domains are powers of two, so this nested condition is exactly "every TP
   group inside one domain" (largest-first packing); pipeline stages may span units.
6. ``throughput`` (l): ``sum_r min(rate_nolat[r], D_w)*(xc+xo) >= D_w`` for w in S (a rate above the
   demand capped at it: the same integer solutions, a tighter LP relaxation).
7. ``latency`` (l): ``sum_r min(rate[r], D_w)*(xc+xo) >= D_w`` for w in S with a p95 target.
8. ``redundancy`` (l): ``M_w >= rho[r]*sel[w,r]``, ``sum_r rho[r]*(xc+xo) - k_w*M_w >= D_w``.
   For a workload served by one shape, each of 6-8 also states its per-row floor:
   ``l and sel[w,r] => xc+xo >= spare + ceil(D_w / rate[r])`` (rate 0: ``l => not sel[w,r]``).
   Implied once exactly one row is selected, it makes the LP relaxation the convex hull of whole
   replica counts of one shape (the bound then closes these models in few branches).
9. ``deadline``, ``allowed_gpus``, ``allowed_quant`` (l): rows marked by the family are unselected.
10. ``deployment`` (l): units of the excluded kind are 0 (training on them unselected).
11. ``max_gpus`` (l): ``G <= max_gpus``; ``G`` = owned GPUs + cloud serving GPUs + cloud training
    GPUs (sequential: owned + the largest cloud phase).
12. ``power`` (l): ``sum_o power_o*(m[o]+u[o]) <= max_power`` (owned only: your facility).
13. ``inventory`` (l): ``u[o] <= I_o`` (without an inventory, ``u[o] = 0`` unconditionally).
    Symmetry cut (structural): where owned server sizes s and 2s of a GPU cost, draw and bill pro
    rata to GPU slots (the catalog's rule), ``m[s] <= 1``: two bought s-servers are worth one
    2s-server, which hosts everything they host. Likewise for cloud instances of one provider and
    region whose k·s-GPU size costs k times the s-GPU one (no smaller NVLink domain or fabric):
    ``n[s] <= k - 1``, so of equal-cost designs the plan holds the fewer machines.
14. ``budget_capital`` (l): ``capital <= B``; ``budget_monthly`` (l): ``monthly <= B``;
    ``budget_total`` (l): ``total <= B`` (cents, budgets rounded down, costs rounded up).
4d. KV fabric (structural): a disaggregated workload's prefill and decode replicas of a datacenter GPU type g on
    cloud sit on instances with a fabric between them: ``sum_{pool r: g} gpus x xc <= sum_{c: g, fabric} k_c x n[c]``.
15. ``max_gpu_types`` (l): ``sum_g used[g] <= max_gpu_types``, where ``used[g]`` (structural) is implied
    by every selected row, training choice and unit of GPU type g (``units(o) <= U*used[g(o)]``).
16. ``demand_profile`` (no literal; only for a workload with a daily or weekly profile): burst replicas
    ``xb[w,r]``, rented by the hour, count at peak beside ``xc+xo`` in 6-8; ``run[w,l]`` burst replicas run at each
    distinct hourly demand ``d_l``, ``sel[w,r] => xc+xo + run[w,l] >= need(d_l, rate[r], k_w)``,
    ``run[w,l] <= sum_r xb[w,r] <= run[w,peak]``; their replica-hours are paid in ``monthly``
    (:mod:`clusterplan.planner.families.demand_profile`).

Cost (integer cents)

    capital = sum_o m[o]*capital_o
    monthly = sum_c n[c]*$/h_c*730 + sum_o (m[o]+u[o])*running_o
              + ops_g * sum_g operated[g] + ops_p * sum_k pool[k]
              + sum_{w,r} rh[w,r] * $/replica-hour[r] * 730 / H_w   (demand profiles' burst replica-hours)
    (operated[g]: a unit of GPU type g is held; pool[k]: pool k = (workload, role, GPU type, cloud | owned) has a
    replica; each a boolean tied both ways to its units / replicas, (6c) in families/structure.py)
    one_off = sum_{w in T, r} yc[w,r]*cloud_cost[r]
    total   = capital + horizon*monthly + one_off

Objectives (:mod:`clusterplan.planner.solve`)

* ``min_cost`` (default): minimise ``total``; then, lexicographically, with ``total <= optimum``
  fixed, minimise ``G*W - headroom`` (fewer GPUs, then more capacity above demand; ``W`` exceeds any
  headroom value so GPUs always dominate).
* Alternatives (``rank_designs``): each next design differs from every one before in the GPUs held per
  (type, cloud | owned) and in the GPUs at work there, or serves some pooled workload the other way
  (aggregated / disaggregated); other layouts of one design's hardware are listed with it, not ranked.
* ``max_throughput``: maximise min over serving workloads of capacity/demand (ppm), replica bounds
  widened tenfold; needs a budget; ties by cost.
* ``min_latency``: minimise the largest p95 at rated load among selected rows (ms); needs a budget;
  ties by cost.

Solver: one worker, fixed seed (deterministic), ``linearization_level = 2`` (every linear
constraint in the LP relaxation; the default level needs thousands of conflicts once GPU types mix).
Models of 5,000 variables or more (hundreds of GPU types) are first relaxed to an LP and solved by
GLOP, which gives an incumbent (CP-SAT where the LP points) and reduced-cost fixing; CP-SAT then
solves the reduced model, whose optimum is the full model's (:mod:`clusterplan.planner.lp_bound`).

Memory is enforced while preparing candidates (only rows that fit exist).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from types import TracebackType

from clusterplan.candidates.table import CandidateTable
from clusterplan.planner.cpsat import cp_model
from clusterplan.planner.families import Family, FamilyContext, active_families, structure
from clusterplan.planner.variables import PlanVariables

Objective = str  # "min_cost" | "max_throughput" | "min_latency"
OBJECTIVES = ("min_cost", "max_throughput", "min_latency")


@dataclass
class BuiltModel:
    """The base model: every family behind a free literal; solves fix the literals on a clone."""

    model: cp_model.CpModel
    v: PlanVariables
    families: list[Family]  # active families, in registry order

    @property
    def relaxable(self) -> list[str]:
        return [f.id for f in self.families if f.relaxable]


# The limits the variables and the structural constraints read (structure.add: the schedule, and the
# horizon in the total cost). Every other limit is read by its family's constraints alone.
STRUCTURE_LIMITS = (
    "schedule",
    "horizon_months",
    "operations_usd_per_gpu_type_month",
    "operations_usd_per_pool_month",
)
# The families whose constraints read no limit beyond STRUCTURE_LIMITS (their rows, demand and offerings only):
# a reused stem holds them already when they lead the registry order (:func:`_stem_families`).
LIMIT_FREE_FAMILIES = frozenset(
    {"memory", "throughput", "latency", "redundancy", "demand_profile", "deadline", "tp_nvlink"}
)
STEMS_KEPT = 4  # a sweep point's table, and those its infeasibility analysis builds beside it


@dataclass
class _Stem:
    """A built model as it stood before the families were added, and what it was built from."""

    table: CandidateTable
    objective: Objective
    families: tuple[str, ...]
    model: cp_model.CpModel  # variables, structure and the leading limit-free families (_stem_families)
    v: PlanVariables
    variables: int  # variables after the families were added (they may add none for a replay)


@dataclass
class ModelReuse:
    """While active (``with reuse:``), :func:`build` keeps the last model's variables and structure (and the
    families that read no limits, LIMIT_FREE_FAMILIES, where they come first), and builds a table that differs from it only in limits the families alone read (budgets, GPU and
    power caps) by adding the families to a copy of them: the same model as building it afresh, without
    the variables and structure (what a what-if sweep over such a limit re-solves with new bounds).
    """

    stems: list[_Stem] = field(default_factory=list)  # the last STEMS_KEPT built, newest first
    replays: int = 0

    def __enter__(self) -> ModelReuse:
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        _ACTIVE.reset(self._token)


_ACTIVE: ContextVar[ModelReuse | None] = ContextVar("clusterplan_model_reuse", default=None)


def _same_structure(a: CandidateTable, b: CandidateTable) -> bool:
    """Whether the variables and structure of ``a`` and ``b`` are the same (they read all but most limits)."""
    if any(getattr(a.limits, k) != getattr(b.limits, k) for k in STRUCTURE_LIMITS):
        return False
    return replace(a, limits=b.limits) == b


def _stem_families(fams: list[Family]) -> int:
    """How many of ``fams`` (registry order) a stem holds: the leading ones that read no limit beyond
    STRUCTURE_LIMITS, so a replay adds the rest in the same order as a fresh build (the same model)."""
    k = 0
    while k < len(fams) and fams[k].id in LIMIT_FREE_FAMILIES:
        k += 1
    return k


def _add_families(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable, fams: list[Family]) -> None:
    for f in fams:
        lit = v.literal(f.id) if f.relaxable else None
        f.add(FamilyContext(model=model, v=v, table=table, lit=lit))


def build(table: CandidateTable, *, objective: Objective = "min_cost") -> BuiltModel:
    """Build the base model for ``table``. See the module docstring for the formulation.

    Inside a :class:`ModelReuse`, a table whose variables and structure are the last one's reuses them.
    """
    fams = active_families(table)
    ids = tuple(f.id for f in fams)
    reuse = _ACTIVE.get()
    stem = None
    if reuse is not None:
        stem = next(
            (
                s
                for s in reuse.stems
                if s.objective == objective and s.families == ids and _same_structure(s.table, table)
            ),
            None,
        )
    if reuse is not None and stem is not None:
        model = stem.model.clone()
        v = replace(stem.v, model=model, table=table)
        _add_families(model, v, table, fams[_stem_families(fams) :])
        if len(model.proto.variables) == stem.variables:
            reuse.replays += 1
            return BuiltModel(model=model, v=v, families=fams)
        reuse.stems.remove(stem)  # a family made variables: build afresh (and keep that stem instead)
    model = cp_model.CpModel()
    model.name = f"clusterplan:{table.name}"
    relaxable = [f.id for f in fams if f.relaxable]
    v = PlanVariables.create(
        model, table, families=relaxable, replica_factor=10 if objective == "max_throughput" else 1
    )
    structure.add(
        model, v, table, inventory_family="inventory" in relaxable, latency_objective=objective == "min_latency"
    )
    held = _stem_families(fams) if reuse is not None else 0
    _add_families(model, v, table, fams[:held])
    before = model.clone() if reuse is not None else None
    _add_families(model, v, table, fams[held:])
    if reuse is not None and before is not None:
        reuse.stems.insert(0, _Stem(table, objective, ids, before, v, len(model.proto.variables)))
        del reuse.stems[STEMS_KEPT:]
    return BuiltModel(model=model, v=v, families=fams)
