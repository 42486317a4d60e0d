"""Parts of a requirement that contradict each other: warnings as records (codes), never sentences.

The requirement is valid and is planned as written; these say what part of it has no effect, so a
reviewer is not left to assume it was used. Words: :func:`clusterplan.wording.reasons.render_warning`.
"""

from __future__ import annotations

from collections.abc import Sequence

from clusterplan.plan import INVENTORY_IGNORED, RequirementWarning


def contradictions(deployment: str, inventory: Sequence[tuple[str, int]]) -> list[RequirementWarning]:
    """Warnings for a requirement's ``deployment`` and ``constraints.inventory`` ((gpu id, count))."""
    out: list[RequirementWarning] = []
    if deployment == "cloud" and inventory:
        # deployment: cloud forbids every owned server (candidates.offerings), inventory included.
        out.append(
            RequirementWarning(
                code=INVENTORY_IGNORED,
                fields=["deployment", "constraints.inventory"],
                gpus=[f"{count}x {gpu}" for gpu, count in inventory],
            )
        )
    return out
