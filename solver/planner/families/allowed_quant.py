"""``allowed_quant``: serving weights only in the precisions the requirement allows.

The quality gate decides the allowed set (``Requirement.allowed_precisions``: the ``quality.max_loss``
class, default fp8_class, narrowed by ``constraints.quantizations``); this family enforces it.

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
    """The weight precisions the relaxed design serves that the requirement does not allow, and the gate that would."""
    from clusterplan.requirement.schema import QUALITY_CLASSES, quality_class_of

    limits = r.design.table.limits
    quants = sorted(_quants(r.design) - (limits.quantizations or frozenset()))
    if limits.max_loss is None or not quants:  # a hand-built table: no gate, only the list
        return restores(r.fid, f"allow {', '.join(quants) or 'more precisions'} in constraints.quantizations")
    order: list[str] = list(QUALITY_CLASSES)
    needed = max((quality_class_of(q) for q in quants), key=order.index)
    if order.index(needed) <= order.index(limits.max_loss):  # the gate admits them: the list narrowed them out
        return restores(r.fid, f"allow {', '.join(quants)} in constraints.quantizations")
    return restores(r.fid, f"accept {', '.join(quants)}: quality.max_loss {needed} (now {limits.max_loss})")


FAMILY = Family(
    id="allowed_quant",
    title="allowed quantizations",
    sentence="serving weights use only the precisions quality.max_loss and constraints.quantizations allow",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=Relaxing(goal=Goal.MIN_TOTAL, at=relaxation_at),
    layout_rule=True,
)
