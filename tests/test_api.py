"""``clusterplan.api``: the README's example runs as written, and the API gives the CLI's answers."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import EXAMPLES_DIR, ROOT, run_cli


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## From Python") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the README's 'From Python' section has no python block"
    return found.group(1)


@pytest.mark.slow
def test_the_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    here = Path.cwd()
    os.chdir(ROOT)  # the example names its requirement from the repository root, as a reader runs it
    try:
        exec(compile(_readme_example(), "README.md", "exec"), {})
    finally:
        os.chdir(here)
    printed = capsys.readouterr().out
    assert "$" in printed and "replica(s) of" in printed


@pytest.mark.slow
def test_plan_and_estimate_are_the_commands_answers(tmp_path: Path) -> None:
    from clusterplan import api

    path = EXAMPLES_DIR / "7b-chat-serving.yaml"
    req = api.load(path)
    plan = api.plan(req, top=1, explain=False)
    solved = json.loads(run_cli("solve", str(path), "--json", "--top", "1").stdout)
    assert plan.designs[0].costs.total_usd == solved["designs"][0]["costs"]["total_usd"]
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(solved))
    by_cli = json.loads(run_cli("estimate", str(path), "--design", str(plan_file), "--json").stdout)
    by_api = api.estimate(req, design=plan_file).model_dump(mode="json")
    assert by_api == by_cli


@pytest.mark.slow
def test_an_index_a_plan_does_not_hold_is_a_located_error() -> None:
    from clusterplan import api
    from clusterplan.errors import ClusterplanError

    req = api.load(EXAMPLES_DIR / "7b-chat-serving.yaml")
    solved = api.plan(req, top=1, explain=False)
    empty = solved.model_copy(update={"designs": []})
    with pytest.raises(ClusterplanError) as caught:
        api.estimate(req, design=empty)
    assert caught.value.exit_code == 2 and "no design" in str(caught.value.render())
