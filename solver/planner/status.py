"""The solver's answer, in our words: a status that never confuses "impossible" with "out of time".

CP-SAT's status codes are translated once, here (the CPMpy habit). ``FEASIBLE`` means a solution was
found but the time limit stopped the proof of optimality: the objective's bound and gap are reported
with it. ``UNKNOWN`` means the time limit passed before any solution *and* before any proof of
infeasibility: it is never reported as infeasible.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from clusterplan.planner.cpsat import cp_model


class SolveStatus(StrEnum):
    OPTIMAL = "optimal"  # proven best for the objective
    FEASIBLE = "feasible"  # a solution, optimality not proven within the time limit
    INFEASIBLE = "infeasible"  # proven: no solution exists
    UNKNOWN = "unknown"  # out of time with neither a solution nor a proof
    MODEL_INVALID = "model_invalid"  # a bug in clusterplan, never a user's problem

    @property
    def has_solution(self) -> bool:
        return self in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)

    @classmethod
    def from_cpsat(cls, code: Any) -> SolveStatus:
        return _FROM_CPSAT[code]


_FROM_CPSAT: dict[Any, SolveStatus] = {
    cp_model.OPTIMAL: SolveStatus.OPTIMAL,
    cp_model.FEASIBLE: SolveStatus.FEASIBLE,
    cp_model.INFEASIBLE: SolveStatus.INFEASIBLE,
    cp_model.UNKNOWN: SolveStatus.UNKNOWN,
    cp_model.MODEL_INVALID: SolveStatus.MODEL_INVALID,
}


def relative_gap(objective: float, bound: float) -> float:
    """|objective - bound| / max(1, |objective|): 0 when proven optimal."""
    return abs(objective - bound) / max(1.0, abs(objective))
