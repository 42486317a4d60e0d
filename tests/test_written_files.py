"""Every file clusterplan writes outside the paths it is given is listed in docs/guarantees.md (section 8): the
catalog cache and matplotlib's font cache, both under clusterplan's cache folder; with ``CLUSTERPLAN_NO_CACHE=1``,
none at all (matplotlib's went to ``~/.cache/matplotlib`` and ``~/.config/matplotlib``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import example


def _files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _report(tmp_path: Path, **env: str) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    home, tmp, out = tmp_path / "home", tmp_path / "tmp", tmp_path / "out"
    for folder in (home, tmp, out):
        folder.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTERPLAN_", "XDG_", "MPL"))}
    result = subprocess.run(
        [sys.executable, "-c", "from clusterplan.cli import main; main()", "report", str(example("7b-chat-serving")),
         "-o", str(out / "r.md"), "--what-if", "none", "--time-limit", "2"],
        cwd=out, env={**base, "HOME": str(home), "TMPDIR": str(tmp), **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _files_under(out) == ["r.md", "r_files/memory.png"]
    assert result.stderr == ""  # no matplotlib warning naming an installed file
    return home, tmp, result


@pytest.mark.slow
def test_a_report_writes_only_under_clusterplans_cache_folder(tmp_path: Path) -> None:
    home, tmp, _ = _report(tmp_path)
    written = _files_under(home)
    assert written and all(f.startswith(".cache/clusterplan/") for f in written), written
    assert ".cache/clusterplan/clusterplan-catalog/key" in written
    assert any(f.startswith(".cache/clusterplan/matplotlib/") for f in written), written
    assert _files_under(tmp) == []


@pytest.mark.slow
def test_no_cache_writes_nothing_beyond_the_output(tmp_path: Path) -> None:
    home, tmp, _ = _report(tmp_path, CLUSTERPLAN_NO_CACHE="1")
    assert _files_under(home) == [] and list(home.iterdir()) == []
    assert list(tmp.iterdir()) == []
