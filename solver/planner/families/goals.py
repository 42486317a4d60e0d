"""What a solve optimises or bounds: a typed goal over the model's aggregates (no attribute names).

Each goal reads one aggregate of :class:`~clusterplan.planner.variables.PlanVariables` and has a
sense. A family's relaxation names the goal optimised while it is switched off; the planner's
objectives name their primary goal; bounds say "this goal no worse than a value".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from clusterplan.planner.cpsat import cp_model
from clusterplan.planner.variables import PlanVariables


class Goal(Enum):
    FEASIBILITY = "feasibility"  # no objective
    MIN_TOTAL = "min_total"
    MIN_CAPITAL = "min_capital"
    MIN_MONTHLY = "min_monthly"
    MIN_GPUS = "min_gpus"
    MIN_GPU_TYPES = "min_gpu_types"
    MIN_POWER = "min_power"
    MIN_DEADLINE_RATIO = "min_deadline_ratio"
    MIN_INVENTORY_EXTRA = "min_inventory_extra"
    MAX_SERVED_RATIO = "max_served_ratio"
    MAX_THROUGHPUT_RATIO = "max_throughput_ratio"
    MIN_P95 = "min_p95"

    @property
    def minimise(self) -> bool:
        """True: smaller is better; False: larger is better."""
        return self not in (Goal.MAX_SERVED_RATIO, Goal.MAX_THROUGHPUT_RATIO)

    def variable(self, v: PlanVariables) -> cp_model.IntVar:
        """The aggregate this goal reads (FEASIBILITY reads none)."""
        read = _AGGREGATES.get(self)
        if read is None:
            raise ValueError(f"{self.value} reads no aggregate")
        var = read(v)
        assert var is not None, f"the model has no aggregate for {self.value}"
        return var


_AGGREGATES: dict[Goal, Callable[[PlanVariables], cp_model.IntVar | None]] = {
    Goal.MIN_TOTAL: lambda v: v.total_cents,
    Goal.MIN_CAPITAL: lambda v: v.capital_cents,
    Goal.MIN_MONTHLY: lambda v: v.monthly_cents,
    Goal.MIN_GPUS: lambda v: v.gpus_in_use,
    Goal.MIN_GPU_TYPES: lambda v: v.gpu_types_used,
    Goal.MIN_POWER: lambda v: v.owned_power_w,
    Goal.MIN_DEADLINE_RATIO: lambda v: v.deadline_ratio_ppm,
    Goal.MIN_INVENTORY_EXTRA: lambda v: v.inventory_extra_gpus,
    Goal.MAX_SERVED_RATIO: lambda v: v.served_ratio_ppm,
    Goal.MAX_THROUGHPUT_RATIO: lambda v: v.throughput_ratio_ppm,
    Goal.MIN_P95: lambda v: v.p95_max_ms,
}


@dataclass(frozen=True)
class Bound:
    """A solve's bound: ``goal``'s aggregate no worse than ``value`` (<= for a minimised goal, >= else)."""

    goal: Goal
    value: int
