"""Recalled or derived catalog figures (``provisional: true``) are listed in every plan that rests on them.

A row marks all its figures provisional, or only those in ``provisional_fields``; a commitment carries its own mark.
Hyperstack's 8x H200 row marks only ``network_gbit_per_s`` (its on-demand price was read), while its 3-year rate is
provisional (the rate card gives no term); AWS's p5en 3-year Savings Plan rate was read (TCO-APPX).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterplan.candidates.table import Offering
from clusterplan.catalog.load import Catalog
from clusterplan.evaluation.pricing import Operations, cloud_line, costs
from clusterplan.evaluation.provisional import provisional_figures
from clusterplan.plan import Design
from conftest import example, run_cli


def _rented(instance: str, gpu: str, usd_per_hour: float, term: str = "on_demand", months: int = 0) -> Design:
    provider, _, inst_id = instance.partition(":")
    suffix = "" if term == "on_demand" else f":{term}"
    o = Offering(
        key=f"cloud:{instance}{suffix}", kind="cloud", gpu_id=gpu, gpus_per_unit=8, tp_domain=8,
        usd_per_hour=usd_per_hour, provider=provider, instance_id=inst_id, term=term, term_months=months,
    )  # fmt: skip
    line = cloud_line(o, 1, gpu_name=gpu)
    c = costs([line], horizon_months=36, one_off_usd=0.0, output_tokens_per_s=0.0, operations=Operations(), pools=())
    return Design(
        rank=1, summary="", signature=[], costs=c, gpus_total=8, gpus_by_type={}, owned_power_w=0.0,
        hardware=[line], workloads=[], constraints=[],
    )  # fmt: skip


def test_a_provisional_commitment_is_listed_with_its_source(catalog: Catalog) -> None:
    d = _rented("hyperstack:8x-h200", "h200", 22.32, "3y", 36)
    (f,) = provisional_figures(d, catalog)
    assert (f.figure, f.value, f.source, f.as_of) == (
        "instance hyperstack:8x-h200 3y rate",
        "22.32 USD/h",
        "AE-HYPERSTACK",
        "2026-08-26",
    )


def test_only_the_fields_a_row_marks_are_listed(catalog: Catalog) -> None:
    # The same instance on demand: its row marks only network_gbit_per_s, which a serving line does not use.
    assert provisional_figures(_rented("hyperstack:8x-h200", "h200", 31.92), catalog) == []
    # A commitment read from its source is not listed.
    assert provisional_figures(_rented("aws:p5en.48xlarge", "h200", 23.8, "3y", 36), catalog) == []


@pytest.mark.slow
@pytest.mark.usefixtures("reused_plans")  # one plan, written four ways
def test_the_70b_plan_marks_the_figure_it_rests_on_in_json_table_markdown_and_report(tmp_path: Path) -> None:
    # The 70B example held to H200 (allowed_gpus), where design 1 rents on Hyperstack's provisional 3-year rate.
    held = tmp_path / "70b-h200.yaml"
    held.write_text(example("70b-serving").read_text() + "constraints:\n  allowed_gpus: [h200]\n")
    path = str(held)
    plan = json.loads(run_cli("solve", path, "--json").stdout)
    d1 = plan["designs"][0]
    assert [f["figure"] for f in d1["provisional"]] == ["instance hyperstack:8x-h200 3y rate"]
    owned = next(d for d in plan["designs"] if "owned" in d["summary"] and "hyperstack" not in d["summary"])
    assert "purchase price h200" in [f["figure"] for f in owned["provisional"]]  # derived from TCO-APPX
    line = "instance hyperstack:8x-h200 3y rate = 22.32 USD/h (AE-HYPERSTACK, 2026-08-26)"
    assert line in run_cli("solve", path).stdout
    assert f"- {line}" in run_cli("solve", path, "--markdown").stdout
    out = tmp_path / "review.md"
    r = run_cli("report", path, "-o", str(out), "--what-if", "none")
    assert r.exit_code == 0, r.output
    review = out.read_text()  # Markdown escapes the parentheses
    assert "Provisional figures" in review and "instance hyperstack:8x-h200 3y rate = 22.32 USD/h" in review
