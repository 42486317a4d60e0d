"""Money: cloud rental, owned capital and power, cost per token, rent versus buy. USD, hours, watts.

Conventions: a serving month is 730 hours (8,760 / 12, the figure cloud calculators use); training is
billed in whole hours, rounded up; owned hardware is amortised straight-line over the horizon, and its
power is board TDP times GPUs plus a per-node overhead, times the facility PUE. An owned server's month is its
electricity, its colocation (per kW of IT power) and its support contract (a share of its price per year).
Sources: ``$/M tok = 1e6 · ($/h) / (3600 · tok/s)`` (kubernetes-sigs/inference-perf #139; llm-analysis
``inference()``); owned cost per token and the rent-versus-buy arithmetic as in shared/seeds/002.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from clusterplan.units import HOURS_PER_MONTH, HOURS_PER_YEAR, SECONDS_PER_HOUR

SERVING_HOURS_PER_MONTH = HOURS_PER_MONTH  # 730


def serving_hours_per_month() -> float:
    """Hours a serving fleet runs per month: 730 (8,760 h / 12)."""
    return SERVING_HOURS_PER_MONTH


def billed_hours(seconds: float) -> int:
    """Whole billing hours for a job of ``seconds``: ``ceil(seconds / 3600)`` (at least 1 for any work)."""
    if seconds <= 0:
        return 0
    return max(1, math.ceil(seconds / SECONDS_PER_HOUR - 1e-9))


# The terms a cloud instance is rented on: on demand, a 1- or 3-year commitment, or spot (interruptible).
TERM_MONTHS: dict[str, int] = {"on_demand": 0, "1y": 12, "3y": 36, "spot": 0}


def term_of(term_months: int) -> str:
    """The term's name for a commitment of ``term_months`` (``1y``, ``3y``)."""
    return f"{term_months // 12}y"


def paid_months(horizon_months: float, term_months: int) -> float:
    """Months a cloud term bills over a horizon: the horizon itself on demand or spot (``term_months`` 0); a
    commitment is owed for whole terms, ``term x ceil(horizon / term)`` (AWS Savings Plans, Azure reservations and
    GCP committed use are billed for the whole term whether used or not), so a 1-year commitment on a 6-month
    horizon pays 12 months."""
    if term_months <= 0:
        return horizon_months
    return term_months * math.ceil(horizon_months / term_months - 1e-9)


def cloud_cost_usd(usd_per_hour: float, instances: int | float, hours: float) -> float:
    """``usd_per_hour x instances x hours``."""
    return usd_per_hour * instances * hours


def training_cloud_cost_usd(usd_per_hour: float, instances: int, seconds: float) -> float:
    """A training run on rented instances, billed in whole hours: ``rate x instances x ceil(h)``."""
    return cloud_cost_usd(usd_per_hour, instances, billed_hours(seconds))


def owned_capital_usd(
    gpu_price_usd: float,
    gpus: int,
    nodes: int,
    server_usd_per_node: float,
    network_usd_per_node: float,
) -> float:
    """Purchase price of an owned cluster: ``GPUs x price + nodes x (server + network)``."""
    return gpu_price_usd * gpus + nodes * (server_usd_per_node + network_usd_per_node)


def owned_power_w(gpu_tdp_w: float, gpus: int, nodes: int, node_overhead_w: float) -> float:
    """IT power at full load: ``TDP x GPUs + nodes x non-GPU overhead``, W."""
    return gpu_tdp_w * gpus + nodes * node_overhead_w


def owned_power_usd_per_month(power_w: float, pue: float, usd_per_kwh: float) -> float:
    """Electricity per month: ``kW x PUE x $/kWh x 730 h`` (the one formula the planner, estimate and checker use)."""
    return power_w / 1000.0 * pue * usd_per_kwh * SERVING_HOURS_PER_MONTH


def colocation_usd_per_month(power_w: float, usd_per_kw_month: float) -> float:
    """Colocation per month: ``IT kW x $/kW-month`` (CBRE NA H2 2024: wholesale rates are per kW of contracted IT
    capacity, the facility's PUE is inside the rate; metered energy is billed apart, :func:`owned_power_usd_per_month`)."""
    return power_w / 1000.0 * usd_per_kw_month


def owned_running_usd_per_month(
    energy_usd: float, colocation_usd: float, support_usd: float, operations_usd: float
) -> float:
    """One owned server's month: ``energy + colocation + support + operations`` (the planner's, the checker's and
    estimate's monthly cost of a server; each term from its own function here)."""
    return energy_usd + colocation_usd + support_usd + operations_usd


def support_usd_per_month(hardware_usd: float, fraction_per_year: float) -> float:
    """Support and maintenance per month: ``hardware price x fraction per year / 12`` (TCO-APPX, Introl 2026: 8-12 %)."""
    return hardware_usd * fraction_per_year / 12.0


def amortised_usd_per_month(capital_usd: float, months: float) -> float:
    """Straight-line amortisation: ``capital / months``."""
    return capital_usd / months if months > 0 else math.inf


def cost_per_million_tokens_usd(usd_per_hour: float, tokens_per_s: float) -> float:
    """``1e6 x ($/h) / (3600 x tokens/s)``; infinite when nothing is produced."""
    if tokens_per_s <= 0:
        return math.inf
    return 1e6 * usd_per_hour / (SECONDS_PER_HOUR * tokens_per_s)


def owned_cost_per_million_tokens_usd(
    *,
    hardware_usd: float,
    lifetime_years: float,
    power_w: float,
    usd_per_kwh: float,
    tokens_per_s: float,
    utilisation: float,
    pue: float = 1.0,
) -> float:
    """Owned hardware per million tokens: amortisation plus power over ``tokens/s x utilisation``.

    ``(hardware / lifetime + kW x PUE x $/kWh per hour) / (3600 x tok/s x utilisation) x 1e6``; power is paid
    around the clock, tokens only while busy (shared/seeds/002 ``cost_per_1m_tokens``: RTX 4090, $1,600,
    450 W, 70 tok/s at 70 % over 3 years at $0.12/kWh = $0.65 per million).
    """
    usd_per_hour = hardware_usd / (lifetime_years * HOURS_PER_YEAR) + power_w / 1000.0 * pue * usd_per_kwh
    return cost_per_million_tokens_usd(usd_per_hour, tokens_per_s * utilisation)


def gpu_hours(years: float, utilisation: float, gpus: int = 1) -> float:
    """Busy GPU-hours over ``years`` at ``utilisation``: ``years x 8,760 x utilisation x GPUs``."""
    return years * HOURS_PER_YEAR * utilisation * gpus


class BreakEven(BaseModel):
    """When buying beats renting, for one unit (a GPU or a node) used at some utilisation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    busy_hours: float  # busy hours after which owning is cheaper
    months_at_full_use: float  # busy_hours / 730
    months_at_utilisation: float  # calendar months at the given utilisation
    utilisation_over_horizon: float  # the utilisation at which the horizon just breaks even (may be > 1)
    owned_usd: float  # owning over the horizon at the given utilisation
    rented_usd: float  # renting the same busy hours


def rent_vs_buy_breakeven(
    *,
    capital_usd: float,
    cloud_usd_per_hour: float,
    owned_running_usd_per_hour: float = 0.0,
    horizon_months: float = 36.0,
    utilisation: float = 1.0,
) -> BreakEven:
    """Busy hours at which buying pays off: ``capital / (cloud rate - owned running cost per busy hour)``.

    ``utilisation_over_horizon = busy_hours / (horizon x 730)``: below it renting is cheaper over the
    horizon. Seeds 002: an A100 at $12,000 against $5.12/GPU-hour breaks even after 2,344 busy hours,
    8.9 % utilisation over 3 years; 18,396 busy hours (70 %) rented cost $94,188.
    """
    margin = cloud_usd_per_hour - owned_running_usd_per_hour
    hours = capital_usd / margin if margin > 0 else math.inf
    horizon_hours = horizon_months * SERVING_HOURS_PER_MONTH
    busy = horizon_hours * utilisation
    return BreakEven(
        busy_hours=hours,
        months_at_full_use=hours / SERVING_HOURS_PER_MONTH,
        months_at_utilisation=hours / (SERVING_HOURS_PER_MONTH * utilisation) if utilisation > 0 else math.inf,
        utilisation_over_horizon=hours / horizon_hours if horizon_hours > 0 else math.inf,
        owned_usd=capital_usd + busy * owned_running_usd_per_hour,
        rented_usd=busy * cloud_usd_per_hour,
    )
