"""Integer resolutions the CP-SAT model uses, built on :mod:`clusterplan.units` (the one place that scales).

* Money: integer cents. Costs up to $1e12 are 1e14 cents; every coefficient is checked by
  :func:`clusterplan.units.scale_to_int` against ``CPSAT_MAX_COEFF``.
* Request rates: per serving workload, a resolution that puts its demand between 1e9 and 1e10
  units (``10**(floor(log10 D) - 9)`` requests/s, applied as an exact power of ten). Relative precision is 1e-9 of demand whatever
  its scale (a 0.01 req/s chatbot or 1e9 tokens/s), so rates up to 1e9 tokens/s cannot overflow.
  Replica rates are rounded *down* and demand *up*: the model never overstates capacity.
* Power: integer watts (rounded up). Time: integer seconds; ratios in parts per million.
"""

from __future__ import annotations

import math

from clusterplan.units import NotRepresentable, scale_down, scale_to_int, scale_up

USD_RESOLUTION = 0.01  # one cent
PPM = 1_000_000


def cents_up(usd: float, *, what: str) -> int:
    """A cost coefficient in cents, rounded up (costs are never understated)."""
    return scale_up(usd, USD_RESOLUTION, what=what)


def cents_down(usd: float, *, what: str) -> int:
    """A budget in cents, rounded down (budgets are never overstated)."""
    return scale_down(usd, USD_RESOLUTION, what=what)


def cents_to_usd(cents: int) -> float:
    return cents * USD_RESOLUTION


RATE_DIGITS = 4
# Most integer units a demand may take: keeps rate x replica sums far inside int64 for CP-SAT.
MAX_DEMAND_UNITS = 10**9


def rate_exponent(demand_rps: float, smallest_rate_rps: float | None = None) -> int:
    """Decimal exponent e giving the demand, and the smallest replica rate, RATE_DIGITS digits.

    Scaled to the demand alone, a replica far slower than the demand (0.5 req/s of a 405B replica
    against 10,000 req/s) rounded down to 0 units and the requirement looked impossible. The
    exponent grows until the smallest rate has RATE_DIGITS digits too, as long as the demand stays
    within MAX_DEMAND_UNITS units; :func:`check_rate_units` refuses what still rounds to 0.
    """
    if demand_rps <= 0 or not math.isfinite(demand_rps):
        return RATE_DIGITS
    e = RATE_DIGITS - math.floor(math.log10(demand_rps))
    if smallest_rate_rps is not None and 0 < smallest_rate_rps < demand_rps and math.isfinite(smallest_rate_rps):
        e_rate = RATE_DIGITS - math.floor(math.log10(smallest_rate_rps))
        e_cap = math.floor(math.log10(MAX_DEMAND_UNITS / demand_rps))  # demand x 10**e <= MAX_DEMAND_UNITS
        e = max(e, min(e_rate, e_cap))
    return e


def check_rate_units(rps: float, units: int, *, what: str) -> int:
    """``units`` of a positive rate ``rps``, refused (:class:`NotRepresentable`) when it rounded down to 0 units."""
    if rps > 0 and units == 0:
        raise NotRepresentable(
            f"{what}: a replica's {rps:.3g} req/s is too small against the demand to be represented"
            " exactly for the solver (the demand is over a billion times one replica's rate)"
        )
    return units


def rate_resolution(exponent: int) -> float:
    """Requests/s per integer unit."""
    return 10.0**-exponent


def _to_units(rps: float, exponent: int) -> float:
    # Multiply or divide by an exact power of ten: 4.0 req/s must become exactly 4e9 units, which
    # dividing by a float resolution (4.0 / 1e-9 = 3999999999.9999995) does not give.
    return rps * 10**exponent if exponent >= 0 else rps / 10 ** (-exponent)


def rate_units_down(rps: float, exponent: int, *, what: str) -> int:
    """A replica's rate in integer units, rounded down (capacity is never overstated)."""
    return max(0, scale_down(_to_units(rps, exponent), 1.0, what=what))


def rate_units_up(rps: float, exponent: int, *, what: str) -> int:
    """A demand in integer units, rounded up."""
    return scale_up(_to_units(rps, exponent), 1.0, what=what)


def watts_up(w: float, *, what: str) -> int:
    return scale_up(w, 1.0, what=what)


def watts_down(w: float, *, what: str) -> int:
    return scale_down(w, 1.0, what=what)


def ppm_down(ratio: float, *, what: str) -> int:
    return max(0, scale_down(ratio * PPM, 1.0, what=what))


def ppm_up(ratio: float, *, what: str) -> int:
    return scale_up(ratio * PPM, 1.0, what=what)


def milliseconds_up(seconds: float, *, what: str) -> int:
    return scale_up(seconds, 1e-3, what=what)


def checked(value: float, *, what: str) -> int:
    return scale_to_int(value, 1.0, what=what)
