"""Human units: what a user may write and what it means."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic_core import PydanticCustomError
from typer.testing import CliRunner

from clusterplan import units
from clusterplan.cli import app


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5s", 5.0),
        ("800ms", 0.8),
        ("30d", 30 * 86400.0),
        ("2h", 7200.0),
        ("10min", 600.0),
        (7, 7.0),
        ("1.5 s", 1.5),
        ("2w", 14 * 86400.0),
        ("1y", 365 * 86400.0),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert units.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["fast", "5m", "5 parsecs", "", "s", "-5s", True, [5], "1,5s"])
def test_bad_durations_are_refused(text: object) -> None:
    with pytest.raises(PydanticCustomError):
        units.parse_duration(text)


@pytest.mark.parametrize(
    ("text", "usd"),
    [("$1.2M", 1.2e6), ("150k", 150e3), ("$400,000", 4e5), (2_000_000, 2e6), ("$2M", 2e6), ("1e6", 1e6)],
)
def test_money(text: object, usd: float) -> None:
    assert units.parse_money(text) == pytest.approx(usd)


@pytest.mark.parametrize("text", ["1.2 million", "€100", "$", "12,34", "1.2m"])
def test_bad_money_is_refused(text: str) -> None:
    with pytest.raises(PydanticCustomError):
        units.parse_money(text)


@pytest.mark.parametrize(
    ("text", "value"), [("150k", 150e3), ("4k", 4e3), ("300B", 3e11), ("2T", 2e12), ("1,200,000", 1.2e6)]
)
def test_counts(text: str, value: float) -> None:
    assert units.parse_count(text) == pytest.approx(value)


def test_rates_power_and_months() -> None:
    assert units.parse_rate("4k/s") == 4000
    assert units.parse_power("40kW") == 40_000
    assert units.parse_power("800w") == 800
    assert units.parse_months("3y") == pytest.approx(36.0)
    assert units.parse_months("18 months") == pytest.approx(18.0)
    assert units.parse_months(24) == 24
    with pytest.raises(PydanticCustomError):
        units.parse_months("36d")


def test_non_finite_numbers_are_refused() -> None:
    for bad in (math.nan, math.inf, "1e999"):
        with pytest.raises(PydanticCustomError):
            units.parse_count(bad)


def test_gb_and_gib() -> None:
    assert units.gb_to_gib(80) == pytest.approx(74.506, rel=1e-4)
    assert units.bytes_to_gib(2**30) == 1.0
    assert units.gib_to_gb(1) == pytest.approx(1.073741824)


def test_integer_scaling_rounds_in_the_safe_direction_and_refuses_overflow() -> None:
    assert units.scale_up(1.001, 0.01, what="demand") == 101
    assert units.scale_down(1.009, 0.01, what="capacity") == 100
    assert units.scale_to_int(2.5e12, 0.01, what="cost") == 250_000_000_000_000
    with pytest.raises(ValueError, match="too large"):
        units.scale_to_int(1e30, 0.01, what="cost")
    with pytest.raises(ValueError, match="non-finite"):
        units.scale_up(math.nan, 1, what="rate")


@pytest.mark.parametrize(
    ("field", "text", "fix"),
    [
        ("p95_latency", "500", "'500ms' or '500s'"),
        ("p95_ttft", "2", "'2ms' or '2s'"),
        ("p95_tpot", "0.05", "'0.05ms' or '0.05s'"),
    ],
)
def test_a_bare_latency_is_refused_with_the_units_to_use(tmp_path: Path, field: str, text: str, fix: str) -> None:
    """``p95_latency: 500`` was read as 500 seconds; a file must say 500ms or 500s (located, exit 2), and
    so must a bare decimal."""
    path = tmp_path / "r.yaml"
    path.write_text(
        f"model: llama-3.1-8b\nworkloads:\n  - kind: serving\n    requests_per_min: 60\n    {field}: {text}\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert f"r.yaml:5:5: workloads[0].{field}: {text} has no unit" in result.output
    assert fix in result.output


def test_a_bare_integer_deadline_and_power_cap_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(
        "model: llama-3.1-8b\nworkloads:\n  - kind: finetune\n    method: lora\n    tokens: 1M\n    deadline: 3\n"
        "constraints:\n  max_power: 40\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "r.yaml:6:5: workloads[0].deadline: 3 has no unit" in result.output
    assert "r.yaml:8:3: constraints.max_power: 40 has no unit: write it with one, e.g. '40kW' or '40W'" in result.output


def test_numbers_with_a_unit_are_read_and_what_if_writes_its_values_with_one(tmp_path: Path) -> None:
    """Units parse as before; a what-if point's duration or power is written back with its base unit
    (exactly: repr round-trips the float) and validates."""
    from clusterplan.whatif.vary import Target, requirement_value

    path = tmp_path / "r.yaml"
    path.write_text(
        "model: llama-3.1-8b\nworkloads:\n  - kind: serving\n    requests_per_min: 60\n    p95_latency: 0.5s\n"
        "    p95_ttft: 300ms\nconstraints:\n  max_power: 40kW\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    latency = Target(
        field="p95_latency", path="workloads[0].p95_latency", where="requirement", quantity="duration", unit="s"
    )
    power = Target(field="max_power", path="constraints.max_power", where="requirement", quantity="power", unit="W")
    assert requirement_value(0.1 + 0.2, latency) == "0.30000000000000004s"
    assert units.parse_duration(requirement_value(0.1 + 0.2, latency)) == 0.1 + 0.2
    assert requirement_value(40000.0, power) == "40000.0W"


def test_a_typo_in_a_training_key_gets_a_training_key_suggestion(tmp_path: Path) -> None:
    """The did-you-mean reads the workload's own kind (it once offered serving keys: 'model')."""
    path = tmp_path / "r.yaml"
    path.write_text(
        "model: llama-3.1-8b\nworkloads:\n  - kind: serving\n    requests_per_min: 60\n"
        "  - kind: training\n    tokens: 1B\n    deadline: 30d\n    sequence_lenght: 2k\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert (
        "workloads[1].sequence_lenght: unknown key 'sequence_lenght'; did you mean 'sequence_length'" in result.output
    )
