"""User catalogs (``--catalog FILE``): overrides and additions, and contradictions rejected with the entry named.

The broken catalogs live in tests/data/catalogs/bad-*.yaml; the first line of each says what the error
must contain (``# expect: ...``). They are run through the CLI, which must exit 2 without a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clusterplan.catalog.load import load_catalog, load_catalog_text
from clusterplan.cli import app
from clusterplan.errors import CatalogError, CatalogInputError, InputError
from conftest import DATA

CATALOGS = DATA / "catalogs"
NEGOTIATED = CATALOGS / "negotiated.yaml"
BROKEN = sorted(CATALOGS.glob("bad-*.yaml"))
runner = CliRunner()


def _expectation(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# expect: "), path
    return first[len("# expect: ") :]


# ---------------------------------------------------------------- overrides and additions


def test_override_changes_the_price_and_records_provenance() -> None:
    shipped = load_catalog()
    cat = load_catalog([NEGOTIATED])
    before, after = shipped.instance("aws:p5.48xlarge"), cat.instance("aws:p5.48xlarge")
    assert before.on_demand_usd_per_hour == pytest.approx(55.04)
    assert after.on_demand_usd_per_hour == pytest.approx(38.50)
    assert after.source == "acme-aws-edp" and after.as_of == "2026-10"
    assert before.source in after.also_sources  # the shipped source still backs the fields not overridden
    assert after.gpus_per_instance == 8 and after.spot_usd_per_hour == before.spot_usd_per_hour
    assert after.provisional_fields == ["network_gbit_per_s"] and after.provisional
    assert "overridden by" in (after.notes or "")


def test_overriding_a_recalled_price_clears_its_provisional_mark() -> None:
    shipped, cat = load_catalog(), load_catalog([NEGOTIATED])
    assert shipped.instance("aws:g6.xlarge").provisional
    overridden = cat.instance("aws:g6.xlarge")
    assert overridden.on_demand_usd_per_hour == pytest.approx(0.70)
    assert not overridden.provisional and overridden.provisional_fields == []


def test_new_rows_are_added() -> None:
    cat = load_catalog([NEGOTIATED])
    sku = cat.instance("acme-colo:4x-rtx-4090")
    assert (sku.gpu_id, sku.gpus_per_instance, sku.on_demand_usd_per_hour) == ("rtx-4090", 4, 1.60)
    assert [i.key for i in cat.instances_for("rtx-4090", providers=["acme-colo"])] == ["acme-colo:4x-rtx-4090"]
    assert cat.model("acme-chat-9b").layers == 36
    assert cat.sources["acme-colo-quote"].title.startswith("Quote")
    assert cat.owned.electricity_usd_per_kwh.value == pytest.approx(0.21)
    assert cat.owned.pue.value == pytest.approx(1.56)  # figures not given are kept
    assert cat.user_files == (str(NEGOTIATED),)


def test_user_catalogs_do_not_leak_between_calls() -> None:
    first = load_catalog()
    with_user = load_catalog([NEGOTIATED])
    again = load_catalog()
    assert with_user.fingerprint() != first.fingerprint()
    assert again.fingerprint() == first.fingerprint()
    assert again.instance("aws:p5.48xlarge").on_demand_usd_per_hour == pytest.approx(55.04)
    assert "acme-colo:4x-rtx-4090" not in again.instances
    assert "acme-chat-9b" not in again.models


def test_catalogs_apply_in_order(tmp_path: Path) -> None:
    later = tmp_path / "later.yaml"
    later.write_text(
        "instances:\n"
        "  - {provider: aws, id: p5.48xlarge, override: true, on_demand_usd_per_hour: 30,"
        " source: https://example.invalid/q2, as_of: 2026-11}\n",
        encoding="utf-8",
    )
    cat = load_catalog([NEGOTIATED, later])
    assert cat.instance("aws:p5.48xlarge").on_demand_usd_per_hour == 30
    assert "acme-aws-edp" in cat.instance("aws:p5.48xlarge").also_sources


def test_partial_gpu_override_keeps_the_other_fields() -> None:
    cat = load_catalog_text(
        "gpus:\n"
        "  - id: rtx-4090\n"
        "    override: true\n"
        "    price: {usd: 1850, kind: street, source: https://example.invalid/shop, as_of: 2026-11}\n"
        "    source: https://example.invalid/shop\n"
        "    as_of: 2026-11\n"
    )
    gpu = cat.gpu("rtx-4090")
    assert gpu.price is not None and gpu.price.usd == 1850 and not gpu.price.provisional
    assert gpu.memory_gib == pytest.approx(23.99) and gpu.dense.bf16_tflops == pytest.approx(165.2)
    assert gpu.provisional  # tdp_w is still recalled
    assert gpu.provisional_fields == ["tdp_w"]


def test_errors_are_catalog_and_input_errors() -> None:
    with pytest.raises(CatalogInputError) as info:
        load_catalog([CATALOGS / "bad-negative-price.yaml"])
    assert isinstance(info.value, CatalogError) and isinstance(info.value, InputError)
    assert info.value.exit_code == 2


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(CatalogInputError) as info:
        load_catalog([CATALOGS / "bad-zero-memory.yaml"])
    paths = {p.path for p in info.value.problems}
    assert {"gpus[0].memory_gb", "gpus[0].memory_gib"} <= paths


# ---------------------------------------------------------------- the CLI


@pytest.mark.parametrize("broken", BROKEN, ids=lambda p: p.name)
def test_broken_user_catalog_exits_2_naming_the_entry(broken: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(broken.parent)
    result = runner.invoke(app, ["catalog", "gpus", "--catalog", broken.name])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert _expectation(broken) in result.output


def test_missing_user_catalog_exits_2() -> None:
    result = runner.invoke(app, ["catalog", "gpus", "--catalog", "no-such-catalog.yaml"])
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_gpus_json_parses_and_contains_h100_sxm() -> None:
    result = runner.invoke(app, ["catalog", "gpus", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    ids = [r["id"] for r in rows]
    assert "h100-sxm" in ids and ids == sorted(ids)
    h100 = rows[ids.index("h100-sxm")]
    assert h100["memory_gib"] == pytest.approx(79.6) and h100["source"] == "NV-H100"


def test_instances_json_with_a_user_catalog() -> None:
    result = runner.invoke(app, ["catalog", "instances", "--json", "--catalog", str(NEGOTIATED), "--gpu", "rtx-4090"])
    assert result.exit_code == 0, result.output
    rows = {f"{r['provider']}:{r['id']}": r for r in json.loads(result.output)}
    assert rows["acme-colo:4x-rtx-4090"]["on_demand_usd_per_hour"] == 1.6
    assert all(r["gpu_id"] == "rtx-4090" for r in rows.values())


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["catalog", "gpus"], "h100-sxm"),
        (["catalog", "instances", "--provider", "aws"], "p5.48xlarge"),
        (["catalog", "models"], "llama-3.1-70b"),
        (["catalog", "sources"], "fingerprint sha256:"),
    ],
)
def test_tables_render(args: list[str], expected: str) -> None:
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert expected in result.output


def test_unknown_gpu_filter_exits_2_with_a_suggestion() -> None:
    result = runner.invoke(app, ["catalog", "instances", "--gpu", "h100"])
    assert result.exit_code == 2
    assert "did you mean" in result.output and "h100-sxm" in result.output


def test_help_lists_the_subcommands() -> None:
    result = runner.invoke(app, ["catalog", "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    for name in ("gpus", "instances", "models", "sources"):
        assert name in result.output
