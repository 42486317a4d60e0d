"""The catalog figures a design rests on that the catalog marks provisional (recalled or derived).

A design's price rests on its hardware lines' catalog rows (a cloud instance's rate on its term, an owned server's
GPU price and ``owned.yaml`` figures) and its physics on its GPU and model rows. A figure is provisional where its
row says ``provisional: true`` and either lists no ``provisional_fields`` (all of them are) or lists that figure
(catalog/README.md, "Provenance"). The plan lists each one with its source, so a reviewer knows which numbers to
confirm before buying (``Design.provisional``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clusterplan.plan import Design, ProvisionalFigure, ServingPlan

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import CatalogModel, OwnedFigure, Provenance


def _marked(row: Provenance, field: str | None = None) -> bool:
    """``row`` marks ``field`` (any field when None) recalled or derived."""
    if not row.provisional:
        return False
    return field is None or not row.provisional_fields or field in row.provisional_fields


def _fig(figure: str, value: str, row: Provenance | CatalogModel) -> ProvisionalFigure:
    return ProvisionalFigure(figure=figure, value=value, source=row.source, as_of=row.as_of, notes=row.notes or "")


def _owned_figures(catalog: Catalog, gpu_class: str) -> list[tuple[str, OwnedFigure]]:
    """The ``owned.yaml`` figures an owned server of ``gpu_class`` is priced from."""
    o = catalog.owned
    named: list[tuple[str, OwnedFigure | None]] = [
        (f"server_usd_per_node.{gpu_class}", o.server_usd_per_node.get(gpu_class)),  # type: ignore[call-overload]
        ("network_usd_per_node", o.network_usd_per_node_by_class.get(gpu_class, o.network_usd_per_node)),  # type: ignore[call-overload]
        ("node_power_overhead_w", o.node_power_overhead_w_by_class.get(gpu_class, o.node_power_overhead_w)),  # type: ignore[call-overload]
        ("pue", o.pue),
        ("electricity_usd_per_kwh", o.electricity_usd_per_kwh),
        ("colocation_usd_per_kw_month", o.colocation_usd_per_kw_month),
        ("support_fraction_per_year", o.support_fraction_per_year),
        ("operations_usd_per_server_month", o.operations_usd_per_server_month),
    ]
    return [(name, f) for name, f in named if f is not None]


def _hardware(design: Design, catalog: Catalog) -> list[ProvisionalFigure]:
    out: list[ProvisionalFigure] = []
    for x in design.hardware:
        if x.kind == "cloud":
            inst = catalog.instances.get(x.instance_key)
            if inst is None:
                continue
            committed = inst.commitment(x.term_months) if x.term_months else None
            if committed is not None:
                if committed.provisional:
                    out.append(
                        _fig(f"instance {inst.key} {x.term} rate", f"{committed.usd_per_hour:g} USD/h", committed)
                    )
                continue
            field = "spot_usd_per_hour" if x.term == "spot" else "on_demand_usd_per_hour"
            if _marked(inst, field):
                out.append(_fig(f"instance {inst.key} {field}", f"{getattr(inst, field):g} USD/h", inst))
            if x.trains is not None and x.units > 1 and inst.network_gbit_per_s and _marked(inst, "network_gbit_per_s"):
                out.append(_fig(f"instance {inst.key} network", f"{inst.network_gbit_per_s:g} Gbit/s", inst))
            continue
        gpu = catalog.gpus.get(x.gpu)
        if gpu is None:
            continue
        if x.bought and gpu.price is not None and _marked(gpu.price, "usd"):
            out.append(_fig(f"purchase price {gpu.id}", f"{gpu.price.usd:,.0f} USD per GPU", gpu.price))
        for name, f in _owned_figures(catalog, gpu.gpu_class):
            if f.provisional and (f.value or name == "pue"):
                out.append(_fig(f"owned {name}", f"{f.value:g} {f.unit}", f))
    return out


def _specs(design: Design, catalog: Catalog) -> list[ProvisionalFigure]:
    """The GPU and model rows the design's physics reads, where they are marked provisional."""
    out: list[ProvisionalFigure] = []
    for gid in sorted(design.gpus_by_type):
        gpu = catalog.gpus.get(gid)
        if gpu is not None and gpu.provisional:
            fields = ", ".join(gpu.provisional_fields) or "all figures"
            out.append(_fig(f"GPU {gid} ({fields})", "see catalog gpus", gpu))
    for w in design.workloads:
        if not isinstance(w, ServingPlan):
            continue
        model = catalog.models.get(w.model)
        if model is not None and model.provisional:  # a model row marks the whole row (usually published_params)
            out.append(_fig(f"model {model.id}", "see catalog models", model))
    return out


def provisional_figures(design: Design, catalog: Catalog) -> list[ProvisionalFigure]:
    """Each provisional catalog figure the design's price or physics rests on, once, in the order found."""
    seen: dict[str, ProvisionalFigure] = {}
    for f in [*_hardware(design, catalog), *_specs(design, catalog)]:
        seen.setdefault(f.figure, f)
    return list(seen.values())


def with_provisional(designs: list[Design], catalog: Catalog) -> list[Design]:
    """Each design with its :func:`provisional_figures`."""
    return [d.model_copy(update={"provisional": provisional_figures(d, catalog)}) for d in designs]
