"""``memory``: every GPU holds its share of weights, KV cache / activations, optimizer state and
runtime overhead with the headroom kept free. Enforced while preparing candidates (rows that do not
fit never reach the model), so the family has no literal; the explanation reports its margin."""

from __future__ import annotations

from clusterplan.candidates.table import CandidateTable, ServingRow, TrainingRow
from clusterplan.planner.families import Family, FamilyContext
from clusterplan.planner.families.facts import DesignFacts, Margin, worst


def add(ctx: FamilyContext) -> None:
    """Nothing to add: the candidate table holds only rows that fit."""


def active(table: CandidateTable) -> bool:
    return True


def _used_rows(d: DesignFacts) -> list[tuple[str, ServingRow | TrainingRow]]:
    out: list[tuple[str, ServingRow | TrainingRow]] = []
    for wc in d.table.workloads:
        if wc.is_serving:
            out += [(wc.name, r) for _, r in d.serving_rows(wc)]
        else:
            tr = d.training_row(wc)
            out += [(wc.name, tr[1])] if tr is not None else []
    return out


def margin(d: DesignFacts) -> Margin | None:
    """Free GiB on the most loaded GPU of the tightest row in use."""
    items = []
    for name, r in _used_rows(d):
        text = f"{name}: {r.memory_gib:,.1f} of {r.capacity_gib:,.1f} GiB per {r.gpu_id} GPU"
        if isinstance(r, ServingRow):
            text += f" (the KV cache for the batch cap of {r.batch} fills what the weights leave)"
        items.append((r.capacity_gib - r.memory_gib, text))
    w = worst(items)
    return None if w is None else Margin(w[0], "GiB", f"tightest: {w[1]}")


def check(d: DesignFacts) -> bool:
    """Every row in use fits its GPU (the candidate table holds only such rows)."""
    return all(r.memory_gib <= r.capacity_gib for _, r in _used_rows(d))


FAMILY = Family(
    id="memory",
    title="memory fits",
    sentence="every GPU holds its share of the weights, KV cache or training state, and runtime overhead, "
    "with the fragmentation headroom kept free",
    add=add,
    active=active,
    margin=margin,
    check=check,
    relaxation=None,
)
