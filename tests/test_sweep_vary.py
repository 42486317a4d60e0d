"""``--vary`` fields and values (:mod:`clusterplan.whatif.vary`): aliases follow the file, values parse with the
field's units, catalog overrides load and keep their provenance."""

from __future__ import annotations

from typing import Any

import pytest

from clusterplan.catalog.load import load_catalog_text
from clusterplan.errors import SweepError
from clusterplan.whatif.points import load_base
from clusterplan.whatif.vary import catalog_override, parse_spec, resolve_field
from conftest import example


def test_aliases_follow_the_file(catalog: Any) -> None:
    base, _ = load_base(example("7b-chat-serving"))
    assert resolve_field("budget", base.data, catalog).path == "budget.monthly"  # the field the file sets
    assert resolve_field("demand", base.data, catalog).path == "workloads[0].tokens_per_sec"
    assert resolve_field("demand", base.data, catalog).unit == "tokens/s"
    train, _ = load_base(example("13b-train-then-serve"))
    assert resolve_field("deadline", train.data, catalog).path == "workloads[0].deadline"
    assert resolve_field("demand", train.data, catalog).path == "workloads[1].requests_per_min"
    assert resolve_field("budget", train.data, catalog).path == "budget.capital"
    assert resolve_field("assumptions.compute_efficiency", train.data, catalog).quantity == "number"
    assert resolve_field("constraints.max_gpus", train.data, catalog).quantity == "integer"
    assert resolve_field("gpu_price.H100 SXM", train.data, catalog).gpu == "h100-sxm"


def test_specs_parse_with_units() -> None:
    assert parse_spec("200k..2M", "money", field="b", steps=3) == [200_000.0, 1_100_000.0, 2_000_000.0]
    assert parse_spec("1k..100k", "money", field="b", steps=3, log=True) == [1_000.0, 10_000.0, 100_000.0]
    assert parse_spec("1s,2s,500ms", "duration", field="p") == [1.0, 2.0, 0.5]
    assert parse_spec("100,200,300", "rate", field="d") == [100.0, 200.0, 300.0]  # a comma separates values
    assert parse_spec("$1.2M", "money", field="b") == [1_200_000.0]
    assert parse_spec("1..3", "integer", field="n", steps=5) == [1.0, 2.0, 3.0]  # 1.5 and 2.5 round, repeats go
    with pytest.raises(SweepError, match="--log needs both ends above zero"):
        parse_spec("0..10", "number", field="x", log=True)


def test_catalog_overrides_load_and_keep_provenance(catalog: Any) -> None:
    price = resolve_field("gpu_price.h100-sxm", {}, catalog)
    power = resolve_field("electricity_price", {}, catalog)
    text = catalog_override(catalog, [(price, 20_000.0), (power, 0.25)])
    assert text is not None
    over = load_catalog_text(text, "what-if")
    gpu = over.gpu("h100-sxm")
    assert gpu.price is not None and gpu.price.usd == 20_000.0 and gpu.price.source == "clusterplan-what-if"
    assert gpu.source == catalog.gpu("h100-sxm").source and gpu.memory_gib == catalog.gpu("h100-sxm").memory_gib
    assert over.owned.electricity_usd_per_kwh.value == 0.25
    assert catalog_override(catalog, []) is None


@pytest.mark.parametrize("option", ["p95_latency=,,,", "p95_latency=,", "budget=,"])
def test_a_vary_of_separators_only_is_refused(option: str) -> None:
    """``--vary 'p95_latency=,,,'`` once exited 3 (``range() arg 3 must not be zero``): no value, exit 2."""
    from conftest import run_cli

    result = run_cli("sweep", str(example("7b-chat-serving")), "--vary", option)
    assert result.exit_code == 2, result.output
    assert "holds no value" in result.output
