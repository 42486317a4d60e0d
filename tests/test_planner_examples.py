"""Golden results for every shipped example: status, best cost (within 5%), the families stated.

Physics or catalog changes move the costs; regenerate with ``python tests/test_planner_examples.py``
and review the diff like any other change of result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "requirements").glob("*.yaml"))
GOLDEN_FILE = Path(__file__).resolve().parent / "test_planner_examples.golden.json"
COST_TOLERANCE = 0.05


def _summary(path: Path, catalog) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from clusterplan.planner.pipeline import PlanOptions, plan_requirement
    from clusterplan.requirement_loader import load_requirement

    plan = plan_requirement(load_requirement(path, catalog), catalog, PlanOptions(top=1))
    out: dict[str, object] = {"status": plan.status}
    if plan.designs:
        d = plan.designs[0]
        out["total_usd"] = round(d.costs.total_usd, 2)
        out["families"] = [c.family for c in d.constraints]
    if plan.infeasibility is not None:
        out["conflict"] = [c.id for c in plan.infeasibility.conflict]
    return out


def _golden() -> dict[str, dict[str, object]]:
    return json.loads(GOLDEN_FILE.read_text()) if GOLDEN_FILE.exists() else {}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_matches_golden(path: Path, catalog) -> None:  # type: ignore[no-untyped-def]
    got = _summary(path, catalog)
    want = _golden().get(path.stem)
    assert want is not None, f"no golden result for {path.stem}: run python tests/test_planner_examples.py"
    assert got["status"] == want["status"]
    assert got.get("families") == want.get("families")
    assert got.get("conflict") == want.get("conflict")
    if "total_usd" in want:
        assert got["total_usd"] == pytest.approx(want["total_usd"], rel=COST_TOLERANCE), (
            f"{path.stem}: best total moved from {want['total_usd']} to {got['total_usd']}; "
            "if intended, regenerate with python tests/test_planner_examples.py"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from clusterplan.catalog import load_catalog

    cat = load_catalog()
    GOLDEN_FILE.write_text(json.dumps({p.stem: _summary(p, cat) for p in EXAMPLES}, indent=2, sort_keys=True) + "\n")
    print(GOLDEN_FILE.read_text())
