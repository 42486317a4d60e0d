"""Units: the one place that owns GB versus GiB, human-unit parsing and CP-SAT integer scaling.

Conventions used everywhere in clusterplan:

* Memory capacity is held in GiB (2**30 bytes) because that is what allocators and ``nvidia-smi``
  report; vendors market capacity in "GB" that is usually GiB-ish for HBM. Catalog fields say which.
* Bandwidth is held in GB/s (10**9 bytes per second) as vendors publish it.
* Compute is held in TFLOPS (10**12 operations per second), dense (no 2:4 sparsity).
* Time is seconds, money is USD, power is watts, rates are per second.

CP-SAT needs integers. :func:`scale_to_int` turns a float into an integer of a stated resolution and
refuses values that would overflow int64 arithmetic inside the model.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationInfo, WithJsonSchema
from pydantic_core import PydanticCustomError

from clusterplan.errors import quoted

BYTES_PER_GIB = 2**30  # binary gibibyte
BYTES_PER_GB = 10**9  # decimal gigabyte (bandwidth, marketing capacity)
HOURS_PER_MONTH = 730.0  # 8,760 h / 12; the convention cloud providers bill monthly estimates with
HOURS_PER_YEAR = 8760.0
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
DAYS_PER_MONTH = 365.0 / 12.0

# Largest magnitude we let a scaled coefficient reach; products of two such values must stay < 2**63.
CPSAT_MAX_COEFF = 2**62


def bytes_to_gib(n_bytes: float) -> float:
    return n_bytes / BYTES_PER_GIB


def gib_to_bytes(gib: float) -> float:
    return gib * BYTES_PER_GIB


def gb_to_gib(gb: float) -> float:
    """Decimal GB to binary GiB (1 GB = 0.9313 GiB)."""
    return gb * BYTES_PER_GB / BYTES_PER_GIB


def gib_to_gb(gib: float) -> float:
    return gib * BYTES_PER_GIB / BYTES_PER_GB


class NotRepresentable(ValueError):
    """A figure the solver's integers cannot hold exactly (NaN, infinity, overflow, a rate that rounds to 0).

    Its own type, so that the planner turns it into a plain refusal by what it is, never by its wording.
    """


def scale_to_int(value: float, resolution: float, *, what: str) -> int:
    """``value`` in units of ``resolution`` as an int for CP-SAT, rounded to nearest.

    Raises :class:`NotRepresentable` (a programming or catalog problem, not a user's) on NaN, infinity or overflow.
    """
    if not math.isfinite(value):
        raise NotRepresentable(f"{what}: cannot scale non-finite value {value!r} for the solver")
    scaled = round(value / resolution)
    if abs(scaled) > CPSAT_MAX_COEFF:
        raise NotRepresentable(f"{what}: {value!r} is too large for the solver at resolution {resolution}")
    return int(scaled)


def scale_up(value: float, resolution: float, *, what: str) -> int:
    """Like :func:`scale_to_int` but rounds up (for requirements that must be met in full)."""
    if not math.isfinite(value):
        raise NotRepresentable(f"{what}: cannot scale non-finite value {value!r} for the solver")
    scaled = math.ceil(value / resolution - 1e-9)
    if abs(scaled) > CPSAT_MAX_COEFF:
        raise NotRepresentable(f"{what}: {value!r} is too large for the solver at resolution {resolution}")
    return int(scaled)


def scale_down(value: float, resolution: float, *, what: str) -> int:
    """Like :func:`scale_to_int` but rounds down (for capacities that must not be overstated)."""
    if not math.isfinite(value):
        raise NotRepresentable(f"{what}: cannot scale non-finite value {value!r} for the solver")
    scaled = math.floor(value / resolution + 1e-9)
    if abs(scaled) > CPSAT_MAX_COEFF:
        raise NotRepresentable(f"{what}: {value!r} is too large for the solver at resolution {resolution}")
    return int(scaled)


# --------------------------------------------------------------------------------------------
# Human units. Each parser accepts a number (int/float) as the base unit, or a string with a unit.
# Ambiguous suffixes ('m' for minutes or months or milli, 'b' for bits/bytes/billions) are errors.
# --------------------------------------------------------------------------------------------

_NUMBER = r"(?P<num>[0-9][0-9_,]*(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+)"

_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_MONEY_SUFFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_DURATION_SUFFIX = {
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": SECONDS_PER_DAY,
    "day": SECONDS_PER_DAY,
    "days": SECONDS_PER_DAY,
    "w": 7 * SECONDS_PER_DAY,
    "week": 7 * SECONDS_PER_DAY,
    "weeks": 7 * SECONDS_PER_DAY,
    "mo": DAYS_PER_MONTH * SECONDS_PER_DAY,
    "month": DAYS_PER_MONTH * SECONDS_PER_DAY,
    "months": DAYS_PER_MONTH * SECONDS_PER_DAY,
    "y": 365 * SECONDS_PER_DAY,
    "yr": 365 * SECONDS_PER_DAY,
    "year": 365 * SECONDS_PER_DAY,
    "years": 365 * SECONDS_PER_DAY,
}
_POWER_SUFFIX = {"w": 1.0, "kw": 1e3, "mw": 1e6}


def _err(kind: str, example: str, value: Any) -> PydanticCustomError:
    return PydanticCustomError(
        "unit_parse",
        "expected {kind} like {example}, got {got}",
        {"kind": kind, "example": example, "got": quoted(value)},
    )


def _number(text: str) -> float:
    cleaned = text.replace("_", "")
    if "," in cleaned:
        # Thousands separators only: 1,200,000 (a comma used as a decimal point is ambiguous).
        if not re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?", cleaned):
            raise ValueError(text)
        cleaned = cleaned.replace(",", "")
    return float(cleaned)


def _finite_nonneg(x: float, kind: str, example: str, value: Any) -> float:
    if isinstance(x, bool) or not math.isfinite(x):
        raise _err(kind, example, value)
    if x < 0:
        raise PydanticCustomError("negative", "must not be negative, got {got}", {"got": quoted(value)})
    return float(x)


def _parse(
    value: Any,
    suffixes: dict[str, float],
    kind: str,
    example: str,
    *,
    prefix: str = "",
    case_insensitive: bool = False,
) -> float:
    if isinstance(value, bool):
        raise _err(kind, example, value)
    if isinstance(value, int | float):
        return _finite_nonneg(float(value), kind, example, value)
    if not isinstance(value, str):
        raise _err(kind, example, value)
    text = value.strip()
    if prefix and text.startswith(prefix):
        text = text[len(prefix) :].strip()
    m = re.fullmatch(_NUMBER + r"\s*(?P<unit>[A-Za-z/]*)", text)
    if not m:
        raise _err(kind, example, value)
    unit = m.group("unit")
    key = unit.lower() if case_insensitive else unit
    if key not in suffixes:
        raise _err(kind, example, value)
    try:
        number = _number(m.group("num"))
    except ValueError:
        raise _err(kind, example, value) from None
    return _finite_nonneg(number * suffixes[key], kind, example, value)


def parse_count(value: Any) -> float:
    """'150k' -> 150000, '1.5M' -> 1.5e6, '300B' -> 3e11 (B = billion), '2T' -> 2e12."""
    return _parse(value, _COUNT_SUFFIX, "a number", "'150k', '1.5M' or '300B'")


def parse_money(value: Any) -> float:
    """'$1.2M' -> 1.2e6 USD, '150k' -> 150000, '$400,000' -> 400000."""
    return _parse(value, _MONEY_SUFFIX, "an amount in USD", "'$1.2M', '150k' or 400000", prefix="$")


def parse_duration(value: Any) -> float:
    """'5s' -> 5.0, '800ms' -> 0.8, '30d' -> 2,592,000 seconds. A bare number is seconds."""
    # 'm' alone is refused: minutes, months and milli are all plausible readings.
    return _parse(value, _DURATION_SUFFIX, "a duration", "'5s' or '800ms'")


def parse_rate(value: Any) -> float:
    """Per-second rates such as tokens/s: '4k' -> 4000, '4k/s' -> 4000."""
    if isinstance(value, str) and value.strip().endswith("/s"):
        value = value.strip()[:-2]
    return _parse(value, _COUNT_SUFFIX, "a rate", "'4k' or 1500")


def parse_power(value: Any) -> float:
    """'40kW' -> 40000 W; a bare number is watts."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _finite_nonneg(float(value), "a power", "'40kW' or '800W'", value)
    return _parse(value, _POWER_SUFFIX, "a power", "'40kW' or '800W'", case_insensitive=True)


def parse_months(value: Any) -> float:
    """A horizon in months: 36, '36mo', '3y' (= 36 months), '18 months'."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _finite_nonneg(float(value), "a number of months", "36, '36mo' or '3y'", value)
    seconds = _parse(
        value,
        {k: v for k, v in _DURATION_SUFFIX.items() if v >= 30 * SECONDS_PER_DAY},
        "a number of months",
        "36, '36mo' or '3y'",
    )
    return seconds / (DAYS_PER_MONTH * SECONDS_PER_DAY)


def parse_tokens(value: Any) -> float:
    """Token counts: '4k' -> 4000, '128k' -> 128000, '2T' -> 2e12."""
    return _parse(value, _COUNT_SUFFIX, "a token count", "'4k', 8192 or '2T'")


def _human(description: str) -> WithJsonSchema:
    """JSON Schema for a field that takes a number or a string with a unit (editors then accept '5s')."""
    return WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}], "description": description})


# Set in the validation context of a document a user wrote (inputs.located.validate_document): a
# latency, deadline or power cap must then carry its unit. A bare number (``p95_latency: 500`` or
# ``0.5``) was read as seconds where milliseconds may have been meant; a what-if sweep writes its values
# back with the base unit (``stated``).
UNITS_REQUIRED = "units_required"


def _duration_stated(value: Any, info: ValidationInfo) -> Any:
    """A latency target or deadline as a requirement states it: '500ms', '5s', '30d' (not 500)."""
    if _bare_number(value, info):
        raise PydanticCustomError(
            "unit_missing",
            "{got} has no unit: write it with one, e.g. '{got}ms' or '{got}s' (or '30d' for a deadline)",
            {"got": value},
        )
    return value


def _power_stated(value: Any, info: ValidationInfo) -> Any:
    """A power cap as a requirement states it: '40kW', '800W' (not 40)."""
    if _bare_number(value, info):
        raise PydanticCustomError(
            "unit_missing", "{got} has no unit: write it with one, e.g. '{got}kW' or '{got}W'", {"got": value}
        )
    return value


def _bare_number(value: Any, info: ValidationInfo) -> bool:
    """A number without its unit (int or float; a bool is refused elsewhere) where units are required."""
    required = bool(info.context and info.context.get(UNITS_REQUIRED))
    return required and type(value) in (int, float) and math.isfinite(value)  # inf/nan: the finite check says


def stated(value: float, base_unit: str) -> str:
    """``value`` in its base unit written the way a requirement must state it ('0.5s', '40000W'); exact:
    repr round-trips the float."""
    return f"{value!r}{base_unit}"


Count = Annotated[float, BeforeValidator(parse_count), _human("count: 150k, 1.5M, 300B")]
Money = Annotated[float, BeforeValidator(parse_money), _human("USD: $1.2M, 150k, 400000")]
Duration = Annotated[float, BeforeValidator(parse_duration), _human("seconds, or 5s, 800ms, 30d")]
# A requirement's latencies, deadlines and power cap: a unit is required in a file (UNITS_REQUIRED).
# (The unit check runs first: pydantic applies the last BeforeValidator first.)
StatedDuration = Annotated[
    float, BeforeValidator(parse_duration), BeforeValidator(_duration_stated), _human("a duration: 800ms, 5s, 30d")
]
StatedPower = Annotated[
    float, BeforeValidator(parse_power), BeforeValidator(_power_stated), _human("a power: 40kW, 800W")
]
Rate = Annotated[float, BeforeValidator(parse_rate), _human("per second: 4k, 1500")]
Power = Annotated[float, BeforeValidator(parse_power), _human("watts, or 40kW, 800W")]
Months = Annotated[float, BeforeValidator(parse_months), _human("months, or 36mo, 3y")]
Tokens = Annotated[float, BeforeValidator(parse_tokens), _human("tokens: 4k, 8192, 2T")]
