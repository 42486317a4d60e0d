"""Cloud prices refreshed from a checkout of SkyPilot's public catalog, as a dated overlay for ``--catalog``.

SkyPilot keeps one CSV per cloud (github.com/skypilot-org/skypilot-catalog, ``catalogs/v<N>/<cloud>/vms.csv``),
built from each cloud's pricing API: one row per instance type, region (and availability zone on AWS), with the
columns ``InstanceType``, ``AcceleratorName``, ``AcceleratorCount``, ``Price`` (on demand, USD/h, the whole
instance), ``SpotPrice`` (empty where none), ``Region`` and, on some clouds, ``AvailabilityZone``. Many rows of
``instances.yaml`` already cite a snapshot of these files (sources ``SKY-AWS``, ``SKY-GCP``, ...).

:func:`refresh` reads every ``vms.csv`` under a folder (the newest ``v<N>`` of each cloud), keeps the rows whose
accelerator is a catalog GPU (by id or alias) and whose ``cloud:InstanceType`` the catalog holds, and writes, per
instance, its on-demand price in one region (``region``, else the cheapest), and its spot price there (the highest
of the region's zones, the catalog's convention). The overlay overrides those rows (``override: true``) and cites
a source of its own: the CSV's path, the checkout's commit and the date, so the plan shows where each price came
from. Nothing else in a row changes; commitments and fabrics stay as the catalog has them.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from clusterplan.catalog.load import Catalog
from clusterplan.errors import FieldProblem, InputError, Location, UnknownNameError, quoted

REQUIRED_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")
MAX_CSV_BYTES = 200 * 2**20  # AWS's vms.csv, the largest, is about 4 MB
_VERSION = re.compile(r"v(\d+)")
# SkyPilot's accelerator names that are not a catalog GPU's id or alias (its AWS and GCP CSVs call the HGX H100 SXM
# "H100", the A100 40GB "A100", and H100 MEGA the same SXM part on GCP's a3-megagpu); the others (A100-80GB, H200,
# B200, L40S, L4, T4, A10G) resolve through the catalog's aliases.
SKYPILOT_NAMES = {
    "h100": "h100-sxm",
    "h100-mega": "h100-sxm",
    "a100": "a100-40gb",
    "h100-80g-pcie": "h100-pcie",
    "a100-80g-pcie": "a100-pcie-80gb",
}
_DATE = re.compile(r"\d{4}-\d{2}(-\d{2})?")


@dataclass(frozen=True)
class Price:
    """One instance's prices in one region, read from a CSV row (or the rows of the region's zones)."""

    on_demand_usd_per_hour: float
    spot_usd_per_hour: float | None
    region: str
    line: int  # the first CSV line it was read from


@dataclass
class Refreshed:
    """What a refresh found: the overlay's instance rows, and what it left out (with counts, for the summary)."""

    rows: dict[str, tuple[str, Price]] = field(default_factory=dict)  # catalog key -> (CSV path, its price)
    not_in_catalog: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # accelerator name -> rows
    new_instances: int = 0  # instance types of catalog GPUs the catalog does not hold (not added)
    files: list[tuple[str, str]] = field(default_factory=list)  # (cloud, CSV path as given)


def vms_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """``(cloud, path)`` of every ``<cloud>/vms.csv`` under ``folder``; of several catalog versions
    (``catalogs/v7``, ``catalogs/v8``) the newest per cloud."""
    best: dict[str, tuple[int, Path]] = {}
    for path in sorted(folder.rglob("vms.csv")):
        cloud = path.parent.name.lower()
        version = next((int(m[1]) for p in path.parents if (m := _VERSION.fullmatch(p.name))), 0)
        if cloud not in best or version > best[cloud][0]:
            best[cloud] = (version, path)
    for cloud in sorted(best):
        yield cloud, best[cloud][1]


def _number(text: str, where: Location, column: str, *, optional: bool = False) -> float | None:
    """A price or count cell: a finite number >= 0 (an empty cell is None where ``optional``)."""
    text = text.strip()
    if not text and optional:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(
            [FieldProblem(where, column, f"expected a number, got {quoted(text)}", "bad_number")],
            fix="the CSV is not a SkyPilot vms.csv as published, or was cut off; check out the repository again",
        )
    return value


def read_vms(path: Path, label: str) -> Iterator[tuple[str, str, int, Price]]:
    """``(InstanceType, AcceleratorName, AcceleratorCount, Price)`` of each GPU row of one ``vms.csv``;
    CPU-only rows (no accelerator) are skipped. A missing column or a cell that is no number is an error
    located at ``label:line``."""
    if path.stat().st_size > MAX_CSV_BYTES:
        raise InputError([FieldProblem(Location(label), "", f"larger than {MAX_CSV_BYTES // 2**20} MB")])
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(
                [FieldProblem(Location(label, 1), "", f"no column {', '.join(missing)}", "missing_column")],
                fix=f"a SkyPilot vms.csv has the columns {', '.join(REQUIRED_COLUMNS)}, SpotPrice, ...",
            )
        for row in reader:
            line = reader.line_num
            where = Location(label, line)
            if None in row or any(v is None for v in row.values()):
                raise InputError([FieldProblem(where, "", "the row has a different number of cells than the header")])
            name = (row["AcceleratorName"] or "").strip()
            if not name:
                continue
            count = _number(row["AcceleratorCount"], where, "AcceleratorCount")
            if count is None or count < 1 or count != int(count):
                raise InputError(
                    [FieldProblem(where, "AcceleratorCount", f"expected a whole count of GPUs, got {count}")]
                )
            price = _number(row["Price"], where, "Price", optional=True)
            if price is None or price == 0:
                continue  # no on-demand price in this region (spot-only shapes)
            spot = _number(row.get("SpotPrice") or "", where, "SpotPrice", optional=True)
            yield (
                row["InstanceType"].strip(),
                name,
                int(count),
                Price(price, spot or None, row["Region"].strip(), line),
            )


def _in_region(prices: list[Price], region: str | None) -> Price | None:
    """One region's prices: ``region``, else the cheapest on demand (of equal prices, the first by name); the
    spot price is the highest of the region's zones (instances.yaml: a snapshot's range, its top)."""
    by_region: dict[str, list[Price]] = defaultdict(list)
    for p in prices:
        by_region[p.region].append(p)
    if region is not None:
        chosen = by_region.get(region)
        if not chosen:
            return None
    else:
        chosen = min(by_region.values(), key=lambda ps: (min(p.on_demand_usd_per_hour for p in ps), ps[0].region))
    spots = [p.spot_usd_per_hour for p in chosen if p.spot_usd_per_hour is not None]
    return Price(
        on_demand_usd_per_hour=min(p.on_demand_usd_per_hour for p in chosen),
        spot_usd_per_hour=max(spots) if spots else None,
        region=chosen[0].region,
        line=min(p.line for p in chosen),
    )


def refresh(catalog: Catalog, folder: Path, *, region: str | None = None) -> Refreshed:
    """The catalog's cloud instances priced from the SkyPilot ``vms.csv`` files under ``folder``."""
    out = Refreshed()
    for cloud, path in vms_files(folder):
        label = str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path)
        out.files.append((cloud, label))
        seen: dict[str, list[Price]] = defaultdict(list)
        for instance, accelerator, count, price in read_vms(path, label):
            try:
                gpu = catalog.gpu(SKYPILOT_NAMES.get(accelerator.lower(), accelerator))
            except UnknownNameError:
                out.not_in_catalog[accelerator] += 1
                continue
            key = f"{cloud}:{instance}"
            row = catalog.instances.get(key)
            if row is None:
                out.new_instances += key not in seen
                seen[key] = []
                continue
            if row.gpu_id != gpu.id or row.gpus_per_instance != count:
                raise InputError(
                    [
                        FieldProblem(
                            Location(label, price.line),
                            instance,
                            f"{count} x {accelerator} ({gpu.id}), but the catalog's {key} holds "
                            f"{row.gpus_per_instance} x {row.gpu_id}",
                            "mismatch",
                        )
                    ],
                    fix="check that the folder is SkyPilot's catalog for this cloud",
                )
            seen[key].append(price)
        for key, prices in sorted(seen.items()):
            found = _in_region(prices, region) if prices else None
            if found is not None:
                out.rows[key] = (label, found)
    return out


def overlay_yaml(found: Refreshed, *, as_of: str, commit: str | None, folder_name: str) -> str:
    """The overlay: a source per CSV (its path, the commit, the date) and an override per instance row."""
    if not _DATE.fullmatch(as_of):
        raise InputError(
            [FieldProblem(Location("command line"), "--as-of", f"expected YYYY-MM-DD, got {quoted(as_of)}")]
        )
    keys = {label: f"SKY-REFRESH-{cloud.upper()}-{as_of}" for cloud, label in found.files}
    sources: dict[str, dict[str, str]] = {}
    instances: list[dict[str, object]] = []
    for key in sorted(found.rows):
        label, price = found.rows[key]
        provider, _, inst_id = key.partition(":")
        ref = keys[label]
        sources[ref] = {
            "title": f"skypilot-org/skypilot-catalog {label}" + (f" (commit {commit[:8]})" if commit else ""),
            "url": f"https://github.com/skypilot-org/skypilot-catalog/blob/{commit}/{label}"
            if commit
            else f"{folder_name}/{label}",
            "as_of": as_of,
            "kind": "machine-generated price catalog (refreshed with clusterplan catalog refresh)",
        }
        row: dict[str, object] = {
            "provider": provider,
            "id": inst_id,
            "override": True,
            "on_demand_usd_per_hour": price.on_demand_usd_per_hour,
        }
        if price.spot_usd_per_hour is not None:
            row["spot_usd_per_hour"] = price.spot_usd_per_hour
        row |= {"region": price.region, "source": ref, "as_of": as_of, "notes": f"{label} line {price.line}"}
        instances.append(row)
    head = (
        f"# Cloud prices refreshed from SkyPilot's catalog ({folder_name}"
        + (f", commit {commit}" if commit else "")
        + f"), {as_of}.\n# Use with --catalog FILE. Written by `clusterplan catalog refresh`; "
        f"{len(instances)} instance rows overridden.\n"
    )
    body = yaml.safe_dump({"sources": sources, "instances": instances}, sort_keys=False, width=120)
    return head + body
