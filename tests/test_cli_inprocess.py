"""The CLI can be driven in-process: :func:`clusterplan.cli.run` returns each command's exit code and leaves the
process running; the console script's fast exit is taken only in the ``clusterplan`` process itself (a harness
calling ``entry()`` once died silently at its first call, exit 0, nothing reported)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clusterplan.cli import run
from conftest import ROOT, example

_HARNESS = """
import sys
sys.argv = ["harness", *sys.argv[1:]]
from clusterplan.cli import entry
try:
    entry()
except SystemExit as exc:
    print("harness saw exit", exc.code)
"""


@pytest.mark.slow
def test_run_returns_each_commands_exit_code_and_can_be_called_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    assert run(["--version"]) == 0
    assert run(["validate", str(bad)]) == 2
    assert run(["validate", str(example("7b-chat-serving"))]) == 0
    assert run(["sweep", str(example("7b-chat-serving")), "--vary", "budget=,"]) == 2
    assert run(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert "holds no value" in err


def test_a_bug_is_exit_3_with_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import clusterplan.stdin

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(clusterplan.stdin, "load_requirement_arg", boom)
    assert run(["validate", str(example("7b-chat-serving"))]) == 3
    err = capsys.readouterr().err
    assert "internal error" in err and "RuntimeError: boom" in err and "Traceback" not in err


@pytest.mark.slow
def test_the_console_entry_called_by_a_harness_returns_to_it() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _HARNESS, "validate", str(example("7b-chat-serving"))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "harness saw exit 0" in result.stdout, result.stdout[-2000:]
