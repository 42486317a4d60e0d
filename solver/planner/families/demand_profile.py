"""``demand_profile``: a workload with a daily or weekly demand profile runs a base every hour and rents burst
replicas by the hour for the hours above it; the autoscaler spans the base (min) and the peak (max).

For a serving workload w with hourly demand ``d_h`` over a period of ``H`` hours (24 or 168), grouped into its
distinct levels ``l`` (``m_l`` hours at ``d_l``), one shape (a mixed workload or a pool runs every replica every
hour), and its rows' burst offering (evaluation/pricing.burst_offer: the cheapest cloud offering billed by the hour):

* ``xb[w,r]`` burst replicas of row r, counted at peak with the base ``xc+xo`` by every demand family
  (throughput, latency and N+k hold at the peak hour with base + burst running);
* ``run[w,l]`` burst replicas running at level l: ``run[w,l] <= sum_r xb[w,r]`` and ``sum_r xb[w,r] <= run[w,peak]``
  (the peak count is what runs at the peak hour);
* every hour is served: ``sel[w,r] => xc+xo + run[w,l] >= need(d_l, rate[r], k)`` (pricing.replicas_needed: the
  replicas taking ``d_l`` within the p95 targets, plus N+k's spares), and ``sel[w,r] => xc+xo >= 1``;
* its cost: ``sel[w,r] => rh[w,r] >= sum_l m_l x run[w,l]`` (burst replica-hours a period on row r), and
  ``monthly += rh[w,r] x $/replica-hour[r] x 730/H``, ``total += that x the horizon``.

The base is on whatever the design holds (owned servers, committed or on-demand instances): CP-SAT decides how many
replicas run every hour and how many are rented for the busy ones. No literal: it states how the profile is paid,
not a limit a design may relax (lowering the demand is the throughput family's relaxation).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from clusterplan.candidates.table import CandidateTable, ServingRow, WorkloadCandidates
from clusterplan.evaluation import pricing
from clusterplan.plan import Autoscaler
from clusterplan.planner import scaling
from clusterplan.planner.cpsat import cp_model
from clusterplan.planner.families import Family, FamilyContext
from clusterplan.planner.families.facts import DesignFacts, Margin
from clusterplan.planner.variables import PlanVariables

Terms = list[tuple[int, cp_model.IntVar]]


def _rate(wc: WorkloadCandidates, row: ServingRow) -> float:
    """What one replica takes: within the p95 targets where the workload states any, else at the ceiling."""
    return row.rate_rps if wc.targets.any else row.rate_nolat_rps


def _levels(wc: WorkloadCandidates) -> list[tuple[float, int]]:
    """The profile's distinct hourly demands and the hours at each, lowest first."""
    return sorted(Counter(wc.profile_rps).items())


def burst_terms(model: cp_model.CpModel, v: PlanVariables, table: CandidateTable) -> tuple[Terms, Terms]:
    """The burst replicas' (monthly, total) cost terms, in cents; called while the structure defines the costs (a
    cost is part of every design). Defines ``run[w,l]`` on ``v.burst_levels`` for :func:`add`."""
    monthly: Terms = []
    total: Terms = []
    h_months = table.limits.horizon_months
    for wc in table.workloads:
        if not wc.is_serving:
            continue
        rows = [
            (r, row, x) for r, row in enumerate(wc.serving_rows()) if (x := v.burst_replicas(wc.index, r)) is not None
        ]
        if not rows:
            continue
        w = wc.index
        hours = len(wc.profile_rps)
        top = max(v.scales[w].upper[r] for r, _, _ in rows)
        levels = [(d, m, model.new_int_var(0, top, f"run_{w}_{i}")) for i, (d, m) in enumerate(_levels(wc))]
        v.burst_levels[w] = levels
        peak_burst = sum(x for _, _, x in rows)
        for _, _, run in levels:
            model.add(run <= peak_burst)
        model.add(peak_burst <= levels[-1][2])
        hours_run = sum(m * run for _, m, run in levels)
        for r, row, _ in rows:
            offer = pricing.burst_offer(table.offerings, gpu_id=row.gpu_id, tp=row.tp, pp=row.pp)
            assert offer is not None  # a row has a burst variable only with an offer (variables._bursts)
            rh = model.new_int_var(0, hours * top, f"burst_hours_w{w}r{r}")
            model.add(rh >= hours_run).only_enforce_if(v.selected(w, r))
            # a replica-hour a period x periods a month (pricing.burst_usd_per_month with one replica-hour)
            per_month = pricing.burst_usd_per_month(1, offer.usd_per_replica_hour, hours)
            monthly.append((scaling.cents_up(per_month, what=offer.offering.key), rh))
            total.append((scaling.cents_up(per_month * h_months, what=offer.offering.key), rh))  # x the horizon
    return monthly, total


def add(ctx: FamilyContext) -> None:
    """Every hour of each profile is served by the base and the burst replicas running then (module docstring)."""
    v = ctx.v
    for wc in ctx.table.workloads:
        levels = v.burst_levels.get(wc.index)
        if levels is None:
            continue
        w = wc.index
        for r, row in enumerate(wc.serving_rows()):
            rate = _rate(wc, row)
            if row.role != "both" or rate <= 0:
                continue
            sel = v.selected(w, r)
            base = v.base_replicas(w, r)
            ctx.model.add(base >= 1).only_enforce_if(sel)
            for d, _, run in levels:
                need = pricing.replicas_needed(d, rate, wc.redundancy)
                if need > 1:
                    ctx.model.add(base + run >= need).only_enforce_if(sel)


def active(table: CandidateTable) -> bool:
    return any(wc.is_serving and wc.profile_rps for wc in table.workloads)


# ------------------------------------------------------------------------------------------------ the design's view


@dataclass(frozen=True)
class Fleet:
    """One profile workload's fleet in a design: base, peak burst, and the replicas running each hour."""

    base: int
    burst: int
    by_hour: tuple[int, ...]
    offer: pricing.BurstOffer | None

    @property
    def burst_replica_hours(self) -> int:
        return sum(n - self.base for n in self.by_hour)


def fleet(wc: WorkloadCandidates, row: ServingRow, base: int, burst: int, table: CandidateTable) -> Fleet:
    """One row's fleet in a design (:func:`fleet_of` at the row's rate and burst offering)."""
    offer = pricing.burst_offer(table.offerings, gpu_id=row.gpu_id, tp=row.tp, pp=row.pp)
    return fleet_of(wc.profile_rps, _rate(wc, row), wc.redundancy, base=base, burst=burst, offer=offer)


def fleet_of(
    profile_rps: Sequence[float], rate_rps: float, redundancy: int, *, base: int, burst: int,
    offer: pricing.BurstOffer | None,
) -> Fleet:  # fmt: skip
    """The replicas running each hour: the base, plus the burst the hour needs (all of it at the peak hour, as the
    model runs it), never more than base + burst. Solver-free: what the model's ``run[w,l]`` is at an optimum (a
    design's own rows here; a pinned design's replicas in ``clusterplan estimate``)."""
    peak = max(profile_rps)
    by_hour = tuple(
        base + burst if d >= peak else min(base + burst, max(base, pricing.replicas_needed(d, rate_rps, redundancy)))
        for d in profile_rps
    )
    return Fleet(base=base, burst=burst, by_hour=by_hour, offer=offer)


def autoscaler(wc: WorkloadCandidates, fleets: list[Fleet]) -> Autoscaler:
    """The plan's record of a profile workload's fleet (:func:`autoscaler_over` its profile's hours)."""
    return autoscaler_over(len(wc.profile_rps), fleets)


def autoscaler_over(hours: int, fleets: Sequence[Fleet]) -> Autoscaler:
    """A profile workload's fleet over a period of ``hours`` (24 or 168): its groups' fleets summed hour by hour, the
    burst priced by :func:`clusterplan.evaluation.pricing.burst_usd_per_month` (solve and ``estimate`` alike)."""
    by_hour = [sum(f.by_hour[h] for f in fleets) for h in range(hours)]
    offers = [f.offer for f in fleets if f.burst and f.offer is not None]
    usd = sum(
        pricing.burst_usd_per_month(f.burst_replica_hours, f.offer.usd_per_replica_hour, hours)
        for f in fleets
        if f.offer is not None and f.burst
    )
    return Autoscaler(
        min_replicas=sum(f.base for f in fleets),
        max_replicas=sum(f.base + f.burst for f in fleets),
        period="daily" if hours == 24 else "weekly",
        replicas_by_hour=by_hour,
        burst_offering=offers[0].offering.key if offers else None,
        burst_usd_per_replica_hour=offers[0].usd_per_replica_hour if offers else 0.0,
        burst_replica_hours_per_period=sum(f.burst_replica_hours for f in fleets),
        burst_usd_per_month=usd,
    )


def fleets_of(d: DesignFacts, wc: WorkloadCandidates) -> list[Fleet]:
    return [
        fleet(wc, row, a.cloud_replicas + a.owned_replicas, a.burst_replicas, d.table)
        for a, row in d.serving_rows(wc)
        if row.role == "both"
    ]


def margin(d: DesignFacts) -> Margin | None:
    """Nothing to measure (the hours are met by construction): what runs when, as the report's line."""
    parts = []
    for wc in d.table.workloads:
        if not (wc.is_serving and wc.profile_rps):
            continue
        a = autoscaler(wc, fleets_of(d, wc))
        parts.append(
            f"{wc.name}: {a.min_replicas} replicas every hour, {a.max_replicas} at the peak hour; "
            f"{a.burst_replica_hours_per_period:,} burst replica-hours a {'day' if a.period == 'daily' else 'week'}"
        )
    return Margin(None, "", "; ".join(parts)) if parts else None


def check(d: DesignFacts) -> bool:
    """Every hour's running replicas take that hour's demand within the targets (N+k spares kept), one replica
    always runs, and the burst is rented only where an offering bills it by the hour."""
    for wc in d.table.workloads:
        if not (wc.is_serving and wc.profile_rps):
            continue
        for a, row in d.serving_rows(wc):
            if row.role != "both":
                continue
            f = fleet(wc, row, a.cloud_replicas + a.owned_replicas, a.burst_replicas, d.table)
            if f.base < 1 or (f.burst and f.offer is None):
                return False
            if len(d.serving_rows(wc)) == 1:  # one shape: its replicas take every hour alone
                rate = _rate(wc, row)
                if any(
                    n < pricing.replicas_needed(dem, rate, wc.redundancy)
                    for n, dem in zip(f.by_hour, wc.profile_rps, strict=True)
                ):
                    return False
    return True


FAMILY = Family(
    id="demand_profile",
    title="demand profile",
    sentence="every hour of a workload's daily or weekly demand profile is served by the replicas that run every hour "
    "and the burst replicas rented for that hour",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=None,
)
