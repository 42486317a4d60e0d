"""What a design's hardware costs: hardware lines (offerings x units) in, :class:`Costs` out.

The planner (:mod:`clusterplan.explain.designs`), ``clusterplan estimate`` and the checker price through
these functions. One cost view: the requirement's horizon (capital + horizon x monthly + one-off cloud
training); an amortised month (capital / amortisation months + recurring) is a separate, labelled view.
Formulas and their sources are in :mod:`clusterplan.physics.cost`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterplan.physics import cost
from clusterplan.plan import Costs, HardwareLine, ServingPlan, TrainingPlan
from clusterplan.units import HOURS_PER_MONTH, SECONDS_PER_HOUR

if TYPE_CHECKING:
    from clusterplan.candidates.table import Offering
    from clusterplan.catalog.schema import OwnedCosts


@dataclass(frozen=True, slots=True)
class ServerPrice:
    """One owned server of ``gpus`` GPU slots: its price, its power and what it costs to run each month."""

    capital_usd: float  # GPUs + chassis + network
    power_w: float  # at TDP, with the node's non-GPU overhead
    energy_usd_per_month: float  # power x PUE x $/kWh x 730 h
    colocation_usd_per_month: float = 0.0  # IT kW x $/kW-month
    support_usd_per_month: float = 0.0  # capital x support fraction per year / 12
    operations_usd_per_month: float = 0.0  # the catalog's operations figure per server (none shipped)

    @property
    def running_usd_per_month(self) -> float:
        """Everything one server costs a month: energy + colocation + support + operations."""
        return cost.owned_running_usd_per_month(
            self.energy_usd_per_month,
            self.colocation_usd_per_month,
            self.support_usd_per_month,
            self.operations_usd_per_month,
        )


PoolKey = tuple[str, str, str, str]  # (workload, role, GPU type, "cloud" | "owned")


@dataclass(frozen=True, slots=True)
class Operations:
    """What running the fleet costs beyond its servers, per month: each distinct GPU type held and each serving
    pool (catalog ``owned.operations_usd_per_gpu_type_month`` and ``operations_usd_per_pool_month``)."""

    usd_per_gpu_type_month: float = 0.0
    usd_per_pool_month: float = 0.0

    @classmethod
    def of(cls, owned: OwnedCosts) -> Operations:
        return cls(owned.gpu_type_operations_rate(), owned.pool_operations_rate())


def operated_gpu_types(hardware: Sequence[HardwareLine]) -> set[str]:
    """The GPU types a design holds for the horizon: any owned server or cloud serving instance of the type (a cloud
    training run is billed once and not operated). The planner's ``operated[g]`` (planner/families/structure.py)."""
    return {line.gpu for line in hardware if line.trains is None}


def serving_pools(workloads: Sequence[ServingPlan | TrainingPlan]) -> set[PoolKey]:
    """A design's serving pools: per workload, its aggregated, prefill or decode replicas of one GPU type on cloud or
    on owned servers (the planner's ``pool[w,role,g,kind]``); layouts of one GPU type in one role share a pool."""
    pools: set[PoolKey] = set()
    for w in workloads:
        if not isinstance(w, ServingPlan):
            continue
        for g in w.groups:
            for kind, replicas in (("cloud", g.cloud_replicas), ("owned", g.owned_replicas)):
                if replicas > 0:
                    pools.add((w.workload, g.role, g.gpu, kind))
    return pools


def owned_server(
    owned: OwnedCosts, gpu_class: str, tdp_w: float, gpu_price_usd: float | None, gpus: int
) -> ServerPrice:
    """A server of ``gpus`` slots: per-node figures scale with its slots (catalog ``OwnedCosts.node_fraction``).

    Its month is electricity (IT power x PUE), colocation on its IT power (the catalog's rate is per kW of IT
    capacity) and support on its price (GPUs, chassis and network share); an operations figure only where the
    catalog gives one. Spares and a residual value at the horizon are not priced: no catalog row gives a figure.
    """
    node_usd = owned.server_usd_for_node(gpu_class, gpus) + owned.network_usd_for_node(gpu_class, gpus)  # type: ignore[arg-type]
    power = cost.owned_power_w(tdp_w, gpus, 1, owned.power_overhead_w_for_node(gpu_class, gpus))  # type: ignore[arg-type]
    capital = cost.owned_capital_usd(gpu_price_usd or 0.0, gpus, 1, node_usd, 0.0)
    return ServerPrice(
        capital_usd=capital,
        power_w=power,
        energy_usd_per_month=cost.owned_power_usd_per_month(
            power, owned.pue.value, owned.electricity_usd_per_kwh.value
        ),
        colocation_usd_per_month=cost.colocation_usd_per_month(power, owned.colocation_rate()),
        support_usd_per_month=cost.support_usd_per_month(capital, owned.support_rate()),
        operations_usd_per_month=owned.operations_usd_for_node(gpu_class, gpus),  # type: ignore[arg-type]
    )


def cloud_line(
    o: Offering, units: int, *, gpu_name: str, purpose: str = "serving", trains: str | None = None
) -> HardwareLine:
    """``units`` instances of a cloud offering; serving runs 730 h a month, training is billed as one-off."""
    return HardwareLine(
        kind="cloud",
        gpu=o.gpu_id,
        gpu_name=gpu_name,
        offering=o.key,
        label=o.label,
        provider=o.provider,
        units=units,
        gpus_per_unit=o.gpus_per_unit,
        gpus=units * o.gpus_per_unit,
        bought=0,
        from_inventory=0,
        usd_per_hour=o.usd_per_hour,
        region=o.region,
        capital_usd=0.0,
        monthly_usd=units * o.usd_per_hour * HOURS_PER_MONTH if trains is None else 0.0,
        power_w=0.0,
        term=o.term,
        term_months=o.term_months,
        purpose=purpose,
        trains=trains,
    )


def training_cloud_line(o: Offering, units: int, *, gpu_name: str, workload: str, seconds: float) -> HardwareLine:
    """A training run's instances: no monthly cost, the run is one-off (:func:`training_run_usd`); its
    purpose names the hours billed (whole hours, rounded up), the figure its cost is computed from."""
    purpose = f"{workload} ({cost.billed_hours(seconds):,} billed h)"
    return cloud_line(o, units, gpu_name=gpu_name, purpose=purpose, trains=workload)


def training_run_usd(o: Offering, units: int, seconds: float) -> float:
    """Instances x $/h x whole billed hours."""
    return cost.training_cloud_cost_usd(o.usd_per_hour, units, seconds)


def owned_line(o: Offering, *, bought: int, from_inventory: int, gpu_name: str) -> HardwareLine:
    """Owned servers of one size: capital for those bought; electricity, colocation, support and operations for
    all of them (a server from the inventory is paid for, but still draws power, takes space and needs support)."""
    units = bought + from_inventory
    return HardwareLine(
        kind="owned",
        gpu=o.gpu_id,
        gpu_name=gpu_name,
        offering=o.key,
        label=o.label,
        provider=o.provider,
        units=units,
        gpus_per_unit=o.gpus_per_unit,
        gpus=units * o.gpus_per_unit,
        bought=bought,
        from_inventory=from_inventory,
        usd_per_hour=0.0,
        capital_usd=bought * o.capital_usd,
        monthly_usd=units * o.running_usd_per_month,
        energy_usd_per_month=units * o.energy_usd_per_month,
        colocation_usd_per_month=units * o.colocation_usd_per_month,
        support_usd_per_month=units * o.support_usd_per_month,
        operations_usd_per_month=units * o.operations_usd_per_month,
        power_w=units * o.power_w,
        purpose="shared",
    )


# ------------------------------------------------------------------------------------------------
# A demand profile's burst tier: replicas rented on demand for the hours the base does not cover
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BurstOffer:
    """Where one burst replica is rented by the hour: the offering and the instances one replica takes."""

    offering: Offering
    instances: int

    @property
    def usd_per_replica_hour(self) -> float:
        """Instances per replica x the instance's $/h."""
        return self.instances * self.offering.usd_per_hour


def burst_offer(offerings: Sequence[Offering], *, gpu_id: str, tp: int, pp: int) -> BurstOffer | None:
    """The cheapest cloud offering a burst replica of ``pp`` stages of ``tp`` GPUs rents by the hour: billed only for
    the hours it runs, so on demand (or spot, offered for serving only to interruptible workloads), never a
    commitment; one no rule of the requirement forbids. Each burst replica rents its own instances (a started replica
    does not share a machine with another). None: no such offering."""
    best: tuple[float, str, BurstOffer] | None = None
    for o in offerings:
        if o.kind != "cloud" or o.gpu_id != gpu_id or not o.serves or o.term_months or o.forbidden_by:
            continue
        n = units_for(o, tp, pp)
        if n is None:
            continue
        offer = BurstOffer(o, n)
        cand = (offer.usd_per_replica_hour, o.key, offer)
        if best is None or cand[:2] < best[:2]:
            best = cand
    return None if best is None else best[2]


def replicas_needed(demand_rps: float, rate_rps: float, spare: int) -> int:
    """Replicas running to take ``demand_rps`` at ``rate_rps`` each, plus the ``spare`` of N+k (at least one: an
    autoscaler keeps a replica up); 1e-9: a float quotient a hair over a whole number is that number."""
    if demand_rps <= 0 or rate_rps <= 0:
        return max(1, spare)
    return max(1, spare + math.ceil(demand_rps / rate_rps - 1e-9))


def burst_usd_per_month(replica_hours_per_period: float, usd_per_replica_hour: float, period_hours: int) -> float:
    """A period's burst replica-hours x $/replica-hour x periods a month (730 h / 24 h a day or / 168 h a week)."""
    return replica_hours_per_period * usd_per_replica_hour * HOURS_PER_MONTH / period_hours


def plan_burst_usd_per_month(workloads: Sequence[ServingPlan | TrainingPlan]) -> float:
    """A design's burst tier a month: each profile workload's replica-hours above its minimum, hour by hour
    (``sum_h replicas_h - min``), priced by :func:`burst_usd_per_month` (checker, rent-vs-buy, the planner)."""
    total = 0.0
    for w in workloads:
        if isinstance(w, ServingPlan) and w.autoscaler is not None:
            a = w.autoscaler
            hours = sum(n - a.min_replicas for n in a.replicas_by_hour)
            total += burst_usd_per_month(hours, a.burst_usd_per_replica_hour, len(a.replicas_by_hour))
    return total


def costs(
    hardware: Sequence[HardwareLine],
    *,
    horizon_months: float,
    one_off_usd: float,
    output_tokens_per_s: float,
    operations: Operations,
    pools: Collection[PoolKey],
    burst_usd_per_month: float = 0.0,
) -> Costs:
    """Capital, monthly, one-off and total over the horizon; $ per million output tokens at average demand.

    ``monthly = sum of the lines' months + ops_g x GPU types operated + ops_p x pools + burst`` (burst: the demand
    profiles' on-demand replica-hours a month, :func:`burst_usd_per_month`; :func:`operated_gpu_types`,
    :func:`serving_pools`); ``total = capital + horizon x monthly + one-off + unused``, where ``unused`` is each
    commitment's months owed beyond the horizon (whole terms, :func:`clusterplan.physics.cost.paid_months`) x its
    monthly cost; ``$/M = total / (tokens/s x horizon seconds / 1e6)``.
    """
    capital = sum(line.capital_usd for line in hardware)
    types = len(operated_gpu_types(hardware))
    type_ops = types * operations.usd_per_gpu_type_month
    pool_ops = len(pools) * operations.usd_per_pool_month
    monthly = sum(line.monthly_usd for line in hardware) + type_ops + pool_ops + burst_usd_per_month
    unused = sum(
        line.monthly_usd * (cost.paid_months(horizon_months, line.term_months) - horizon_months)
        for line in hardware
        if line.term_months
    )
    total = capital + monthly * horizon_months + one_off_usd + unused
    seconds = horizon_months * HOURS_PER_MONTH * SECONDS_PER_HOUR
    per_m = total / (output_tokens_per_s * seconds / 1e6) if output_tokens_per_s > 0 else None
    return Costs(
        capital_usd=capital,
        monthly_usd=monthly,
        one_off_usd=one_off_usd,
        total_usd=total,
        horizon_months=horizon_months,
        usd_per_million_output_tokens=per_m,
        gpu_types_operated=types,
        pools=len(pools),
        gpu_type_operations_usd_per_month=type_ops,
        pool_operations_usd_per_month=pool_ops,
        unused_commitment_usd=unused,
        burst_usd_per_month=burst_usd_per_month,
    )


def amortised_usd_per_month(c: Costs, amortisation_months: float) -> float:
    """The amortised view: capital spread over ``amortisation_months`` plus the recurring monthly cost."""
    return cost.amortised_usd_per_month(c.capital_usd, amortisation_months) + c.monthly_usd


# ------------------------------------------------------------------------------------------------
# The hardware one pinned layout needs, priced alone (``clusterplan estimate``)
# ------------------------------------------------------------------------------------------------


def units_for(o: Offering, tp: int, groups: int) -> int | None:
    """Units of ``o`` that host ``groups`` tensor-parallel groups of ``tp`` GPUs (None: a group does not fit)."""
    per_unit = o.tp_capacity(tp) // tp if tp >= 1 else 0
    if per_unit <= 0:
        return None
    return math.ceil(groups / per_unit)


def cheapest_hosting(
    offerings: Sequence[Offering],
    *,
    gpu_id: str,
    kind: str,
    tp: int,
    groups: int,
    horizon_months: float,
    needs_fabric: bool = False,
    min_network_gb_per_s: float = 0.0,
) -> tuple[Offering, int, int] | None:
    """(offering, units bought or rented, units from inventory): the one offering type of ``kind`` that hosts
    ``groups`` TP groups of ``tp`` GPUs for the least total over the horizon (inventory servers are free);
    of equal totals (to the cent: server figures scale with the GPU slots), the fewest, largest units.
    ``needs_fabric``: the groups talk across units (a wide-EP stage's all-to-all), so several cloud instances only
    of an offer with a fabric between them (providers.yaml; owned servers are priced with their NICs and switch
    ports, catalog/owned.yaml ``network_usd_per_node``); ``min_network_gb_per_s``: and a fabric giving at least
    that per GPU (``Offering.network_gb_per_s_per_gpu``), the rate the all-to-all was estimated at."""
    best: tuple[float, int, str, Offering, int, int] | None = None
    for o in offerings:
        if o.kind != kind or o.gpu_id != gpu_id or not o.serves:
            continue
        n = units_for(o, tp, groups)
        if n is None or (needs_fabric and kind == "cloud" and n > 1 and not o.fabric):
            continue
        if needs_fabric and kind == "cloud" and n > 1 and o.network_gb_per_s_per_gpu < min_network_gb_per_s:
            continue
        if kind == "cloud":
            inv, paid = 0, n
            total = n * o.usd_per_hour * HOURS_PER_MONTH * o.paid_months(horizon_months)
        else:
            inv = min(n, o.inventory_units)
            paid = n - inv
            if paid and not o.purchasable:
                continue
            total = paid * o.capital_usd + n * o.running_usd_per_month * horizon_months
        cand = (round(total, 2), n, o.key, o, paid, inv)
        if best is None or cand[:3] < best[:3]:
            best = cand
    return None if best is None else (best[3], best[4], best[5])


def cheapest_training_cloud(
    offerings: Sequence[Offering], gpu_id: str, tp: int, gpus: int, seconds: float, *, interruptible: bool = False
) -> tuple[Offering | None, int, float, bool]:
    """Cheapest cloud instance type for a training layout: (offering, instances, cost, TP fits inside it).

    On demand, or spot where the workload is ``interruptible``; never a commitment (a run billed by the hour would
    owe the whole term). Billed in whole hours (:func:`training_run_usd`); a run on several instances only on an offer with a
    fabric between them (``Offering.fabric``); an instance type whose NVLink domain holds the TP
    group is preferred; failing that, the cheapest of any (the tp_nvlink family decides whether it may run).
    """
    best: tuple[float, str, Offering, int] | None = None
    best_any: tuple[float, str, Offering, int] | None = None
    for o in offerings:
        if o.kind != "cloud" or o.gpu_id != gpu_id or o.term_months or (o.term == "spot" and not interruptible):
            continue
        n = math.ceil(gpus / o.gpus_per_unit)
        if n > 1 and not o.fabric:
            continue  # no fabric between its instances (providers.yaml): it cannot host a multi-instance run
        cand = (training_run_usd(o, n, seconds), o.key, o, n)
        if best_any is None or cand[:2] < best_any[:2]:
            best_any = cand
        if tp <= o.tp_domain and (best is None or cand[:2] < best[:2]):
            best = cand
    if best is not None:
        return best[2], best[3], best[0], True
    if best_any is not None:
        return best_any[2], best_any[3], best_any[0], False
    return None, 0, 0.0, True
