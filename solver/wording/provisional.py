"""The sentence of a provisional catalog figure a design rests on (``plan.ProvisionalFigure``)."""

from __future__ import annotations

from clusterplan.plan import ProvisionalFigure

HEADING = (
    "Provisional figures (recalled or derived in the catalog, not read from a stored source; confirm before buying):"
)


def line(f: ProvisionalFigure) -> str:
    """``instance hyperstack:8x-h200 3y rate = 22.32 USD/h (AE-HYPERSTACK, 2026-08-26)``."""
    return f"{f.figure} = {f.value} ({f.source}, {f.as_of})"
