"""Cost formulas against hand-computed values."""

from __future__ import annotations

import math

import pytest

from clusterplan.physics import cost
from clusterplan.physics.factors import Assumptions


def test_billed_hours_round_up() -> None:
    assert cost.billed_hours(0) == 0
    assert cost.billed_hours(1) == 1
    assert cost.billed_hours(3600) == 1
    assert cost.billed_hours(3601) == 2


def test_training_cloud_cost_whole_hours() -> None:
    assert cost.training_cloud_cost_usd(98.32, 2, 5400) == pytest.approx(98.32 * 2 * 2)


def test_owned_capital_and_power() -> None:
    assert cost.owned_capital_usd(25_000, 16, 2, 60_000, 15_000) == 25_000 * 16 + 2 * 75_000
    assert cost.owned_power_w(700, 16, 2, 1500) == 700 * 16 + 3000
    assert cost.owned_power_usd_per_month(10_000, 1.5, 0.1) == pytest.approx(10 * 1.5 * 730 * 0.1)
    assert cost.amortised_usd_per_month(36_000, 36) == 1000
    assert math.isinf(cost.amortised_usd_per_month(1, 0))


def test_cost_per_million_tokens() -> None:
    assert cost.cost_per_million_tokens_usd(3.6, 1000) == pytest.approx(1.0)
    assert math.isinf(cost.cost_per_million_tokens_usd(3.6, 0))


def test_breakeven_with_running_cost() -> None:
    b = cost.rent_vs_buy_breakeven(capital_usd=2000, cloud_usd_per_hour=2.0, owned_running_usd_per_hour=0.5,
                                   horizon_months=12, utilisation=0.5)  # fmt: skip
    assert b.busy_hours == pytest.approx(2000 / 1.5)
    assert b.months_at_full_use == pytest.approx(2000 / 1.5 / 730)
    assert b.months_at_utilisation == pytest.approx(2 * 2000 / 1.5 / 730)
    assert b.utilisation_over_horizon == pytest.approx(2000 / 1.5 / (12 * 730))
    never = cost.rent_vs_buy_breakeven(capital_usd=1, cloud_usd_per_hour=1, owned_running_usd_per_hour=2)
    assert math.isinf(never.busy_hours)


def test_assumptions_accept_partial_per_class_overrides() -> None:
    a = Assumptions.model_validate({"memory_bandwidth_efficiency": {"consumer": 0.6}, "compute_efficiency": 0.5})
    assert a.memory_bandwidth_efficiency.of("consumer") == 0.6
    assert a.memory_bandwidth_efficiency.of("datacenter") == Assumptions().memory_bandwidth_efficiency.of("datacenter")
    assert a.compute_efficiency.of("workstation") == 0.5
    assert a.overridden() == ["compute_efficiency", "memory_bandwidth_efficiency"]
    assert Assumptions().used("consumer")["sustained_clock_fraction"] == 0.8
    with pytest.raises(ValueError):
        Assumptions.model_validate({"compute_efficiency": {"gamer": 0.5}})
