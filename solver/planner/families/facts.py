"""A design as plain numbers, and the small pure helpers the family modules share to measure one.

:class:`DesignFacts` is what a family's ``margin`` and ``check`` read: the rows chosen and their
replica counts, the units bought, taken from inventory or rented, and the design's costs, GPU count
and owned power. The planner builds it from a solution (``clusterplan.explain.designs.facts``); the
brute-force test builds it from its own enumeration, without a solver.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterplan.candidates.table import CandidateTable, ServingRow, TrainingRow, WorkloadCandidates
from clusterplan.plan import Relaxation
from clusterplan.wording import fmt

if TYPE_CHECKING:
    from clusterplan.planner.solve import ServingAssignment, TrainingAssignment

# A margin this far below zero is still within rounding (report status 'slack', check passes).
MARGIN_TOLERANCE = 1e-9


@dataclass(frozen=True)
class DesignFacts:
    table: CandidateTable
    serving: tuple[ServingAssignment, ...]
    training: tuple[TrainingAssignment, ...]
    instances: tuple[tuple[str, int], ...]  # cloud serving offering key, instances
    bought: tuple[tuple[str, int], ...]  # owned offering key, servers bought
    from_inventory: tuple[tuple[str, int], ...]  # owned offering key, inventory servers used
    capital_usd: float
    monthly_usd: float
    total_usd: float
    gpus_in_use: int
    owned_power_w: float

    def serving_rows(self, wc: WorkloadCandidates) -> list[tuple[ServingAssignment, ServingRow]]:
        return [(a, wc.serving_rows()[a.row]) for a in self.serving if a.workload == wc.index]

    def training_row(self, wc: WorkloadCandidates) -> tuple[TrainingAssignment, TrainingRow] | None:
        for a in self.training:
            if a.workload == wc.index:
                return a, wc.training_rows()[a.row]
        return None

    def owned_units(self) -> dict[str, int]:
        """Owned servers in use (bought plus from inventory) by offering key."""
        out: dict[str, int] = {}
        for key, n in (*self.bought, *self.from_inventory):
            out[key] = out.get(key, 0) + n
        return out

    def unit_gpus(self) -> set[str]:
        """GPU types of the units the design holds: serving instances, owned servers, cloud training runs."""
        t = self.table
        gpus = {t.offering(k).gpu_id for k in [*(o for o, _ in self.instances), *self.owned_units()]}
        for wc in t.workloads:
            tr = self.training_row(wc)
            if tr is not None and tr[0].where == "cloud" and tr[1].cloud_offering is not None:
                gpus.add(t.offering(tr[1].cloud_offering).gpu_id)
        return gpus

    def gpus_used(self) -> set[str]:
        """GPU types the design runs on: every unit it holds and every row it runs."""
        gpus = self.unit_gpus()
        for wc in self.table.workloads:
            gpus |= {r.gpu_id for _, r in self.serving_rows(wc)}
            tr = self.training_row(wc)
            if tr is not None:
                gpus.add(tr[1].gpu_id)
        return gpus


@dataclass(frozen=True)
class Margin:
    """How far inside its family a design sits: ``value`` in ``unit`` (None: met, nothing to measure)."""

    value: float | None
    unit: str
    detail: str


@dataclass(frozen=True)
class RelaxedAt:
    """What a family's ``relaxation_at`` reads: the relaxed optimum of its goal and that design."""

    fid: str
    value: float  # the goal's optimum with the family off (the model's integers: cents, W, ppm, GPUs)
    design: DesignFacts
    resolution_rps: Mapping[int, float]  # per serving workload: the request rate the solver counts in


@dataclass(frozen=True)
class TradeRead:
    """A binding family's marginal trade read off the design itself, without a solve (``Family.trade_of``)."""

    change: str
    saving_usd: float


@dataclass(frozen=True)
class NotEnough:
    """A relaxation that is proven to be no relaxation: the explainer says what still conflicts."""

    lead: str


def worst(items: list[tuple[float, str]]) -> tuple[float, str] | None:
    """The smallest margin (the first of equals), or None."""
    out: tuple[float, str] | None = None
    for m, text in items:
        if out is None or m < out[0]:
            out = (m, text)
    return out


def pct_above(capacity_rps: float, demand_rps: float) -> float:
    """Capacity above peak demand, in % (0 for no demand)."""
    return (capacity_rps / demand_rps - 1.0) * 100.0 if demand_rps > 0 else 0.0


def side_capacity(
    wc: WorkloadCandidates,
    rows: list[tuple[ServingAssignment, ServingRow]],
    rate: Callable[[ServingRow], float],
) -> float:
    """Requests/s a design serves: the smaller of its prefill side and its decode side (aggregated replicas
    count on both; a workload without pool rows has one side, the sum over its replicas)."""
    return min(sum(a.replicas * rate(r) for a, r in rows if r.serves(side)) for side in wc.sides())


def demand_margin(
    d: DesignFacts,
    applies: Callable[[WorkloadCandidates], bool],
    capacity: Callable[[WorkloadCandidates, list[tuple[ServingAssignment, ServingRow]]], tuple[float, str]],
) -> Margin | None:
    """The tightest serving workload's capacity over its peak demand, in % (throughput, latency, N+k)."""
    items = []
    for wc in d.table.workloads:
        if wc.is_serving and applies(wc):
            cap, text = capacity(wc, d.serving_rows(wc))
            items.append((pct_above(cap, wc.demand_rps), text))
    w = worst(items)
    return None if w is None else Margin(w[0], "% above peak demand", w[1])


def demand_met(
    d: DesignFacts,
    applies: Callable[[WorkloadCandidates], bool],
    capacity: Callable[[WorkloadCandidates, list[tuple[ServingAssignment, ServingRow]]], tuple[float, str]],
) -> bool:
    """Every serving workload the family applies to has the capacity for its peak demand."""
    for wc in d.table.workloads:
        if wc.is_serving and applies(wc):
            cap, _ = capacity(wc, d.serving_rows(wc))
            if cap < wc.demand_rps * (1.0 - MARGIN_TOLERANCE):
                return False
    return True


def within(used: float, limit: float | None) -> bool:
    """``used`` within a stated upper ``limit`` (no limit: within)."""
    return limit is None or used <= limit + MARGIN_TOLERANCE * max(1.0, abs(limit))


def restores(fid: str, change: str, value: float | None = None, unit: str = "") -> Relaxation:
    """A relaxation that restores feasibility."""
    return Relaxation(family=fid, change=change, value=value, unit=unit, restores_feasibility=True)


def budget_raised(r: RelaxedAt, field: str, unit: str) -> Relaxation:
    """A budget raised to the relaxed optimum ``r.value`` (cents), rounded up to a whole dollar."""
    return Relaxation(
        family=r.fid,
        change=f"{field} >= {fmt.usd_up(r.value / 100)}",
        value=math.ceil(r.value / 100),
        unit=unit,
        restores_feasibility=True,
    )
