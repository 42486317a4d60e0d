"""The ``--json`` output: the plan as documented in specs/plan.md, byte-identical for the same input."""

from __future__ import annotations

from clusterplan.plan import Plan
from clusterplan.wording.safe import json_text


def render(plan: Plan) -> str:
    return json_text(plan.model_dump_json(indent=2) + "\n")
