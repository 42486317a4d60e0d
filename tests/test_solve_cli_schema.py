"""The documented --json schema is current, and the output validates against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from clusterplan.plan import Plan, plan_schema_text
from conftest import ROOT


def test_checked_in_schema_is_current() -> None:
    assert (ROOT / "specs" / "plan.schema.json").read_text() == plan_schema_text(), (
        'regenerate: python -c "from clusterplan.plan import plan_schema_text; '
        "open('specs/plan.schema.json','w').write(plan_schema_text())\""
    )


def test_every_top_level_field_is_documented() -> None:
    doc = (ROOT / "specs" / "plan.md").read_text()
    for name in Plan.model_fields:
        assert f"`{name}`" in doc, name


def _solve_json(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from clusterplan.cli import main; sys.argv[0] = 'clusterplan'; main()",
            "solve",
            "examples/requirements/mixtral-serving.yaml",
            "--json",
            "--top",
            "2",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
def test_json_is_byte_identical_across_processes_and_hash_seeds() -> None:
    a = _solve_json("1")
    b = _solve_json("12345")
    assert a == b
    Plan.model_validate(json.loads(a))
