"""``clusterplan catalog refresh DIR``: SkyPilot's per-cloud vms.csv files to a dated overlay that ``--catalog`` reads.

The sample in tests/data/skypilot-catalog mirrors the real layout and columns (catalogs/v<N>/<cloud>/vms.csv:
InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB, GpuInfo, Price, SpotPrice, Region,
AvailabilityZone, Arch) with invented prices: p5.48xlarge at $49.00 in us-east-1 (spot $17.50 and $24.00 in two
zones) and $52.50 in us-west-2; p4de.24xlarge at $25.00 (spot $8.12, $9.50); an older v7 file at $98.32.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA, run_cli, write_doc

SAMPLE = DATA / "skypilot-catalog"
AS_OF = "2026-12-06"


def _overlay(tmp_path: Path, *extra: str, folder: Path = SAMPLE) -> Path:
    out = tmp_path / "prices.yaml"
    r = run_cli("catalog", "refresh", str(folder), "--as-of", AS_OF, "-o", str(out), "--force", *extra)
    assert r.exit_code == 0, r.output
    return out


def _instances(overlay: Path) -> dict[str, dict[str, Any]]:
    r = run_cli("catalog", "instances", "--json", "--catalog", str(overlay), "--provider", "aws")
    assert r.exit_code == 0, r.output
    return {f"{row['provider']}:{row['id']}": row for row in json.loads(r.stdout)}


def test_refresh_writes_an_overlay_that_moves_the_catalogs_prices(tmp_path: Path) -> None:
    rows = _instances(_overlay(tmp_path))
    p5 = rows["aws:p5.48xlarge"]
    # The cheapest region (us-east-1, $49.00 against $52.50), its zones' highest spot; the newest version (v8), not
    # v7's $98.32. The shipped row said $55.04 (SKY-AWS).
    assert (p5["on_demand_usd_per_hour"], p5["spot_usd_per_hour"], p5["region"]) == (49.0, 24.0, "us-east-1")
    assert p5["source"] == f"SKY-REFRESH-AWS-{AS_OF}" and p5["as_of"] == AS_OF
    assert "SKY-AWS" in p5["also_sources"]  # the shipped source still backs the fields not replaced
    assert rows["aws:p4de.24xlarge"]["on_demand_usd_per_hour"] == 25.0
    assert rows["aws:p4de.24xlarge"]["spot_usd_per_hour"] == 9.5
    assert rows["aws:p6-b200.48xlarge"]["on_demand_usd_per_hour"] == 113.9328  # not in the sample: unchanged


def test_refresh_in_a_chosen_region(tmp_path: Path) -> None:
    rows = _instances(_overlay(tmp_path, "--region", "us-west-2"))
    p5 = rows["aws:p5.48xlarge"]
    assert (p5["on_demand_usd_per_hour"], p5["region"]) == (52.5, "us-west-2")
    assert p5["spot_usd_per_hour"] == 25.75  # no spot in the sample's us-west-2: the catalog's stays
    assert rows["aws:p4de.24xlarge"]["on_demand_usd_per_hour"] == 27.44705  # not sold there in the sample


def test_the_overlay_names_its_csv_and_date(tmp_path: Path) -> None:
    text = _overlay(tmp_path).read_text()
    assert f"SKY-REFRESH-AWS-{AS_OF}:" in text
    assert "skypilot-org/skypilot-catalog catalogs/v8/aws/vms.csv" in text
    assert "catalogs/v8/aws/vms.csv line 6" in text  # the row each price was read from


@pytest.mark.slow
def test_a_plan_priced_with_the_overlay_moves(tmp_path: Path) -> None:
    doc = {
        "name": "fine-tune",
        "model": "mistral-7b",
        "workloads": [
            {"kind": "finetune", "name": "adapt", "method": "qlora", "tokens": "200M", "deadline": "2d",
             "sequence_length": "2k", "global_batch_tokens": "64k"}
        ],
        "budget": {"horizon": 1},
        "deployment": "cloud",
        "constraints": {"clouds": ["aws"], "allowed_gpus": ["a100-80gb"]},
    }  # fmt: skip
    path = write_doc(tmp_path, doc)
    overlay = _overlay(tmp_path)

    def line(*extra: str) -> dict[str, Any]:
        r = run_cli("solve", str(path), "--json", *extra)
        assert r.exit_code == 0, r.output
        (hw,) = json.loads(r.stdout)["designs"][0]["hardware"]
        assert hw["offering"] == "cloud:aws:p4de.24xlarge"
        return hw

    assert line()["usd_per_hour"] == 27.44705
    assert line("--catalog", str(overlay))["usd_per_hour"] == 25.0


def _broken(tmp_path: Path, text: str) -> str:
    folder = tmp_path / "sky"
    (folder / "catalogs" / "v8" / "aws").mkdir(parents=True)
    (folder / "catalogs" / "v8" / "aws" / "vms.csv").write_text(text)
    r = run_cli("catalog", "refresh", str(folder), "--as-of", AS_OF)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    return r.output


HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region\n"


def test_a_malformed_csv_is_refused_where_it_breaks(tmp_path: Path) -> None:
    out = _broken(tmp_path, "InstanceType,Accelerator,Price\np5.48xlarge,H100,49\n")
    assert "catalogs/v8/aws/vms.csv:1" in out and "AcceleratorName" in out
    out = _broken(tmp_path / "a", HEADER + "p5.48xlarge,H100,8,192,2048,,forty,,us-east-1\n")
    assert "catalogs/v8/aws/vms.csv:2: Price: expected a number" in out
    out = _broken(tmp_path / "b", HEADER + "p5.48xlarge,H100,8,192\n")
    assert "catalogs/v8/aws/vms.csv:2" in out and "cells" in out
    out = _broken(tmp_path / "c", HEADER + "p5.48xlarge,H100,4,192,2048,,49,,us-east-1\n")
    assert "catalogs/v8/aws/vms.csv:2" in out and "8 x h100-sxm" in out


def test_refresh_of_a_folder_without_csvs_says_so(tmp_path: Path) -> None:
    r = run_cli("catalog", "refresh", str(tmp_path), "--as-of", AS_OF)
    assert r.exit_code == 2 and "vms.csv" in r.output
    r = run_cli("catalog", "refresh", str(tmp_path / "nowhere"))
    assert r.exit_code == 2 and "no such folder" in r.output


def test_refresh_reads_a_copy_of_the_layout_anywhere(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    shutil.copytree(SAMPLE, copy)
    assert _instances(_overlay(tmp_path, folder=copy))["aws:p5.48xlarge"]["on_demand_usd_per_hour"] == 49.0
