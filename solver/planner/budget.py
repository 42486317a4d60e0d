"""One time budget per command: ``--time-limit`` bounds the whole command, not each solve.

The command creates one :class:`TimeBudget` and every stage that solves (ranking, explanation, the
conflict analysis, and the candidate tables the analysis rebuilds) draws on it; each solve gets what
is left, and a stage that finds it spent stops and says so (fewer designs, an explanation marked
incomplete, a conflict analysis that ran out of time).

Determinism: what a solve may use is counted in CP-SAT's *deterministic time* (work units that
depend on the model, not on the machine's speed or load), so the same input gives the same output
on any machine, cut short or not. The user's seconds become work units at
:data:`DETERMINISTIC_UNITS_PER_S`. Wall-clock time is only a safety net at
:data:`WALL_NET_FACTOR` times the limit; when the net fires (a very slow or very loaded machine)
the output may differ from run to run, and :attr:`TimeBudget.wall_net_fired` says it did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# CP-SAT deterministic-time units per second of --time-limit. Measured on the examples and a
# 12-workload case with one worker (this project's setting): one unit took 0.5-1.5 s of wall time on
# a 2024 x86 core, so 0.5 units a second keeps the work of a limit inside the limit on ordinary machines.
DETERMINISTIC_UNITS_PER_S = 0.2

# GLOP (the LP relaxation of large models, planner/lp_bound.py) reports no deterministic time: each
# LP is charged by its size instead. Measured: 0.6-0.9 s wall for a 9,162-variable model, i.e.
# about 0.25 units at this file's rate of wall seconds per unit.
LP_UNITS_PER_VARIABLE = 3e-5

# The wall-clock safety net, in multiples of the limit (plus a floor for process start-up work).
WALL_NET_FACTOR = 3.0
WALL_NET_FLOOR_S = 2.0

# Below this many units left, the budget counts as spent (no solve is started with less).
MIN_UNITS = 1e-3


@dataclass
class TimeBudget:
    """What is left of one command's ``--time-limit``: deterministic units, and a wall-clock net."""

    limit_s: float
    units_used: float = 0.0
    started: float = field(default_factory=time.monotonic)
    wall_net_fired: bool = False

    @property
    def units_total(self) -> float:
        return self.limit_s * DETERMINISTIC_UNITS_PER_S  # seconds x units per second

    @property
    def wall_net_s(self) -> float:
        return WALL_NET_FACTOR * self.limit_s + WALL_NET_FLOOR_S

    def units_left(self) -> float:
        return max(0.0, self.units_total - self.units_used)

    def wall_left_s(self) -> float:
        return max(0.0, self.wall_net_s - (time.monotonic() - self.started))

    def spent(self) -> bool:
        """No solve should start: the deterministic units are used up, or the wall net was reached."""
        if self.wall_left_s() <= 0.0:
            self.wall_net_fired = True
        return self.wall_net_fired or self.units_left() < MIN_UNITS

    def charge(self, units: float, *, wall_hit: bool = False) -> None:
        """Count a finished solve's deterministic time; ``wall_hit``: it stopped on the wall net."""
        self.units_used += units
        if wall_hit:
            self.wall_net_fired = True


@dataclass
class Share:
    """A slice of ``budget`` for one of several solves run at once (:meth:`clusterplan.planner.solve.Planner.concurrently`).

    Each of n solves run side by side gets a slice of the units left (together at most what is left) and
    keeps its charges here, in order. If none of them ran out of its slice (``cut``), every one ran within
    what it would have had in turn (the solves before it in turn used at most their slices), so it returned
    what it returns in turn: the charges are then made on ``budget`` in the solves' order, and the output is
    the sequential one. ``budget`` is itself a Share when the calls run inside a call run side by side (an
    explanation beside the ranking of the other designs): the slices nest, and so does the argument.
    """

    budget: TimeBudget | Share
    units: float
    charges: list[float] = field(default_factory=list)
    cut: bool = False  # a solve stopped undecided, or the slice ran out: the caller redoes them in turn

    def units_left(self) -> float:
        return max(0.0, self.units - sum(self.charges))

    def wall_left_s(self) -> float:
        return self.budget.wall_left_s()

    def spent(self) -> bool:
        if self.units_left() < MIN_UNITS or self.budget.spent():
            self.cut = True
        return self.cut

    def charge(self, units: float, *, wall_hit: bool = False) -> None:
        self.charges.append(units)
        self.cut = self.cut or wall_hit


# What a solve draws on: the command's budget, or a slice of it while it runs beside other solves.
Meter = TimeBudget | Share
