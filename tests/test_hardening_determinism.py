"""Determinism: the same input gives byte-identical output, whatever ran before and however many jobs.

tests/test_solve_cli_schema.py compares one example's ``--json`` across two processes and hash
seeds, and tests/test_sweep.py one latency sweep across ``--jobs 1`` and ``--jobs 2``. Here: an
infeasible plan (the conflict and relaxations are data too) and a plan under a user catalog across
processes; plans that do not depend on what the same process planned before (caches, the user
catalog layer); and a two-field sweep with a catalog price, a user catalog and an out-of-range
point, across jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clusterplan.cli import app
from conftest import DATA, EXAMPLES, ROOT

# Each test plans in fresh processes or under several job counts: 3-7 s a test.
pytestmark = pytest.mark.slow

runner = CliRunner()
NEGOTIATED = DATA / "catalogs" / "negotiated.yaml"
SMALL = {
    "name": "small mixed",
    "model": "llama-3.1-8b",
    "workloads": [
        {"kind": "serving", "name": "chat", "requests_per_min": 300, "p95_latency": "4s", "redundancy": 1},
        {"kind": "finetune", "name": "tune", "method": "lora", "tokens": "20M", "deadline": "1d"},
    ],
    "budget": {"horizon": 12},
    "constraints": {"allowed_gpus": ["l4", "l40s", "rtx-4090"]},
}
INFEASIBLE = {
    "name": "70B on a shoestring",
    "model": "llama-3.1-70b",
    "workloads": [{"kind": "serving", "requests_per_min": 1000, "p95_latency": "5s"}],
    "budget": {"total": "$20k", "horizon": 12},
    "deployment": "cloud",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("det")
    out = {}
    for name, doc in (("small", SMALL), ("infeasible", INFEASIBLE)):
        out[name] = d / f"{name}.yaml"
        out[name].write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return out


def _solve(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(app, ["solve", *args, "--json", "--top", "2"])
    return result.exit_code, result.stdout


def _solve_in_new_process(args: list[str], seed: str) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-c", "from clusterplan.cli import entry; entry()", "solve", *args, "--json", "--top", "2"],
        cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": seed},
        capture_output=True,
        text=True,
        check=False,
    )
    return out.returncode, out.stdout


@pytest.mark.parametrize("case", ["infeasible", "small-with-catalog"])
def test_json_is_byte_identical_across_processes(case: str, files: dict[str, Path]) -> None:
    args = [str(files["infeasible"])] if case == "infeasible" else [str(files["small"]), "-c", str(NEGOTIATED)]
    here = _solve(args)
    assert here[0] == (1 if case == "infeasible" else 0), here[1]
    assert _solve_in_new_process(args, "7") == here
    assert _solve_in_new_process(args, "4242") == here


def test_a_plan_does_not_depend_on_what_ran_before(files: dict[str, Path]) -> None:
    """Plan, then plan others (another example, a user catalog, an infeasible one), then plan again."""
    first = _solve([str(files["small"])])
    assert first[0] == 0
    for other in (
        [str(EXAMPLES[0]), "--no-explain"],
        [str(files["small"]), "-c", str(NEGOTIATED)],
        [str(files["infeasible"])],
    ):
        runner.invoke(app, ["solve", *other, "--json", "--top", "1"])
    assert _solve([str(files["small"])]) == first


def test_a_user_catalog_changes_only_what_it_overrides(files: dict[str, Path]) -> None:
    plain = _solve([str(files["small"]), "--no-explain"])[1]
    with_catalog = _solve([str(files["small"]), "--no-explain", "-c", str(NEGOTIATED)])[1]
    assert plain != with_catalog  # the catalog fingerprint at least
    assert _solve([str(files["small"]), "--no-explain"])[1] == plain


def test_a_sweep_with_a_catalog_price_and_a_user_catalog_does_not_depend_on_jobs(
    files: dict[str, Path], tmp_path: Path
) -> None:
    outputs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"sweep-{jobs}.json"
        result = runner.invoke(
            app,
            [
                "sweep",
                str(files["small"]),
                "--vary",
                "gpu_price.l40s=6k,12k",
                "--vary",
                "demand=100,3000,1e9",  # 1e9 requests/min is out of range: an invalid row, same every time
                "-c",
                str(NEGOTIATED),
                "-j",
                jobs,
                "--time-limit",
                "5",
                "--json",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1]
    rows = yaml.safe_load(outputs[0])["rows"]
    assert len(rows) == 6
    assert {r["status"] for r in rows if r["values"][1] == 1e9} == {"invalid"}
