"""``allowed_quant``: serving weights only in the precisions ``constraints.quantizations`` lists.

lit => sel[w,r] = 0 for rows at other precisions
"""

from __future__ import annotations

from clusterplan.candidates.table import ALLOWED_QUANT, CandidateTable
from clusterplan.plan import Relaxation
from clusterplan.planner.families import Family, FamilyContext, Relaxing, forbid_rows
from clusterplan.planner.families.facts import DesignFacts, Margin, NotEnough, RelaxedAt, restores
from clusterplan.planner.families.goals import Goal


def add(ctx: FamilyContext) -> None:
    forbid_rows(ctx, ALLOWED_QUANT)


def active(table: CandidateTable) -> bool:
    return table.limits.quantizations is not None


def _quants(d: DesignFacts) -> set[str]:
    return {r.quant for wc in d.table.workloads if wc.is_serving for _, r in d.serving_rows(wc)}


def margin(d: DesignFacts) -> Margin | None:
    return Margin(None, "", "only allowed weight precisions are used")


def check(d: DesignFacts) -> bool:
    allowed = d.table.limits.quantizations
    return allowed is None or _quants(d) <= allowed


def relaxation_at(r: RelaxedAt) -> Relaxation | NotEnough:
    """The weight precisions the relaxed design serves that the requirement does not list."""
    quants = sorted(_quants(r.design) - (r.design.table.limits.quantizations or frozenset()))
    return restores(r.fid, f"allow {', '.join(quants) or 'more precisions'} in constraints.quantizations")


FAMILY = Family(
    id="allowed_quant",
    title="allowed quantizations",
    sentence="serving weights use only the precisions constraints.quantizations lists",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_TOTAL, at=relaxation_at),
    layout_rule=True,
)
