"""Lint and type checks, run as tests so the README's one test command (and CI) runs them too.

mypy cannot follow pyproject's ``solver/`` -> ``clusterplan`` mapping on its own (an editable
install resolves it with an import hook mypy does not run), so it checks ``-p clusterplan`` through a
temporary directory holding a ``clusterplan`` link to ``solver/``: every ``clusterplan.*`` import then
resolves to the source tree, as it does at run time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


def _tool(name: str) -> list[str]:
    if shutil.which(name, path=str(Path(sys.executable).parent)) is None:
        pytest.skip(f"{name} is not installed (pip install '.[test]' installs it)")
    return [sys.executable, "-m", name]


def test_ruff_lint_and_format_are_clean() -> None:
    ruff = _tool("ruff")
    paths = ["solver", "tests", "bench"]
    lint = subprocess.run([*ruff, "check", *paths], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = subprocess.run([*ruff, "format", "--check", *paths], cwd=ROOT, capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def _mypy(tmp_path: Path, *target: str) -> subprocess.CompletedProcess[str]:
    """mypy on ``target`` from ``tmp_path``, where a ``clusterplan`` link to ``solver/`` stands for the package."""
    mypy = _tool("mypy")
    link = tmp_path / "clusterplan"
    if not link.exists():
        link.symlink_to(ROOT / "solver", target_is_directory=True)
    env = {**os.environ, "MYPYPATH": str(tmp_path)}
    config = ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache")]
    return subprocess.run([*mypy, *config, *target], cwd=tmp_path, env=env, capture_output=True, text=True)


def _checked(out: subprocess.CompletedProcess[str]) -> int:
    assert out.returncode == 0, out.stdout + out.stderr
    return int(out.stdout.split("no issues found in ")[1].split()[0])


def test_mypy_resolves_the_package_and_is_clean_on_it_and_the_tests(tmp_path: Path) -> None:
    # One run for both: checking the tests analyses every clusterplan module they import anyway, so two runs
    # (package, then tests) did the package twice (~12 s of the suite).
    checked = _checked(_mypy(tmp_path, "clusterplan", str(ROOT / "tests")))  # the link, read as the package
    # A guard against a configuration that resolves nothing: the whole package and every test file were checked.
    assert checked >= len(list((ROOT / "solver").rglob("*.py"))) + len(list((ROOT / "tests").glob("*.py")))
