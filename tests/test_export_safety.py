"""What ``clusterplan export`` hands to a shell cannot run code taken from a name (docs/guarantees.md, section 8).

A workload named ``chat\\ntouch x`` once made the launch script's ``# chat: ...`` comment end at the newline and run
``touch``. Names with control characters are refused at validation; the scripts are also safe for any name that
reaches them (one sanitiser for comments, ``shlex.quote`` for arguments, a slug for file names): each exported
script passes ``bash -n`` and, run with a stub engine on ``PATH``, starts only the engine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import EXAMPLES_DIR, run_cli

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")
EXAMPLE = EXAMPLES_DIR / "7b-chat-serving.yaml"
ENGINE_COMMANDS = ("vllm", "python", "trtllm-serve")
SAFE_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


def hostile_names(mark: Path) -> list[str]:
    """Names that run ``touch MARK`` if a script lets them out of a comment or an argument."""
    m = str(mark)
    return [
        f"chat\ntouch {m}",
        f"chat\r\ntouch {m}",
        f"x; touch {m} #",
        f"$(touch {m})",
        f"`touch {m}`",
        f"'; touch {m}; '",
        f'"; touch {m}; "',
        f"chat\u2028touch {m}\u202e\x1b[2J",
        f"../../-rf {m}",
    ]


def stub_path(tmp_path: Path) -> str:
    """A ``PATH`` whose engine commands only record that they ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ENGINE_COMMANDS:
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho "{name} ran" >> "{tmp_path / "ran.log"}"\n')
        stub.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def write_checked(files: dict[str, str], out: Path) -> Path:
    """Write exported ``files`` into a new folder ``out``, each name a safe slug and each text free of control,
    bidirectional and zero-width characters."""
    out.mkdir()
    for fname, text in files.items():
        assert SAFE_FILE_NAME.match(fname), f"unsafe file name {fname!r}"
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069\u200b-\u200f\u2028]", text)
        (out / fname).write_text(text)
    return out


def run_script(script: Path, cwd: Path, path: str) -> subprocess.CompletedProcess[str]:
    assert BASH is not None
    env = {"PATH": path, "HOME": str(cwd), "LANG": "C.UTF-8"}
    return subprocess.run([BASH, str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def launches() -> list[object]:
    from clusterplan.catalog.load import load_catalog
    from clusterplan.design.export import export_design
    from clusterplan.pipeline import PlanOptions, plan_requirement
    from clusterplan.requirement.load import load_requirement

    cat = load_catalog()
    resolved = load_requirement(EXAMPLE, cat)
    plan = plan_requirement(resolved, cat, PlanOptions(top=1, explain="design"))
    return list(export_design(resolved, cat, plan))


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm"])
def test_exported_scripts_run_no_injected_command(launches: list[object], engine: str, tmp_path: Path) -> None:
    from clusterplan.design.export import Launch
    from clusterplan.render.export_view import export_files

    mark = tmp_path / "owned"
    path = stub_path(tmp_path)
    for i, name in enumerate(hostile_names(mark)):
        hostile = [
            x.model_copy(update={"workload": name, "model": name, "engine": engine})
            for x in launches
            if isinstance(x, Launch)
        ]
        files = export_files(hostile)
        out = write_checked(files, tmp_path / f"case{i}")
        for script in sorted(out.glob("*.sh")):
            assert BASH is not None
            syntax = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True, timeout=30)
            assert syntax.returncode == 0, (script.name, syntax.stderr)
            result = run_script(script, out, path)
            assert result.returncode == 0, (name, script.read_text(), result.stderr)
            assert not mark.exists(), f"{name!r} ran code from {script.name}:\n{script.read_text()}"
        assert (tmp_path / "ran.log").read_text().count("ran") >= 2  # the engine started, launch and bench
        (tmp_path / "ran.log").unlink()


@pytest.mark.slow
def test_printed_export_piped_into_bash_runs_only_the_engine(tmp_path: Path) -> None:
    """``clusterplan export F | bash``: every line that is not a command is a comment, for a name with shell
    syntax in it (control characters are refused before planning)."""
    mark = tmp_path / "owned"
    requirement = tmp_path / "r.yaml"
    requirement.write_text(EXAMPLE.read_text().replace("name: assistant", f'name: "x; touch {mark}; $(touch {mark})"'))
    result = run_cli("export", str(requirement))
    assert result.exit_code == 0, result.output
    script = tmp_path / "printed.sh"
    script.write_text(result.stdout)
    assert BASH is not None
    assert subprocess.run([BASH, "-n", str(script)], capture_output=True, timeout=30).returncode == 0
    run = run_script(script, tmp_path, stub_path(tmp_path))
    assert run.returncode == 0, run.stderr
    assert not mark.exists(), result.stdout
    assert (tmp_path / "ran.log").read_text().splitlines() == ["vllm ran", "vllm ran"]


@pytest.mark.parametrize("name", ["chat\ntouch /tmp/x", "a\x1b[2Jb", "rtl\u202eevil", "zero\u200bwidth", "tab\there"])
def test_names_with_control_characters_are_refused_located(name: str, tmp_path: Path) -> None:
    requirement = tmp_path / "r.yaml"
    escaped = name.encode("unicode_escape").decode("ascii").replace('"', '\\"')
    requirement.write_text(EXAMPLE.read_text().replace("name: assistant", f'name: "{escaped}"'))
    result = run_cli("validate", str(requirement))
    assert result.exit_code == 2, result.output
    assert re.search(r"r\.yaml:\d+:\d+: workloads\[0\]\.name: the name .* holds a control or invisible", result.output)
    assert not any(c in result.output for c in "\x1b\u202e\u200b\t")


def test_file_slug_and_shell_comment() -> None:
    from clusterplan.wording.safe import file_slug, shell_comment

    assert file_slug("chat\ntouch /tmp/owned") == "chat-touch-tmp-owned"
    assert file_slug("../..") == "x" and file_slug("-rf") == "rf" and file_slug(".hidden") == "hidden"
    assert len(file_slug("a" * 500)) == 40
    assert shell_comment("a\nb\rc\u2028d") == "# a\\nb\\rc\\u2028d"


def test_export_writes_no_file_when_one_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The files are checked together before the first is written: with ``expected.txt`` present, none (it once
    wrote the two scripts, then exited 2); that one is refused before any planning."""
    import clusterplan.pipeline

    def no_planning(*args: object, **kwargs: object) -> None:
        raise AssertionError("planned before refusing the output")

    monkeypatch.setattr(clusterplan.pipeline, "plan_requirement", no_planning)
    out = tmp_path / "out"
    out.mkdir()
    (out / "expected.txt").write_text("mine\n")
    result = run_cli("export", str(EXAMPLE), "-o", str(out))
    assert result.exit_code == 2, result.output
    assert sorted(p.name for p in out.iterdir()) == ["expected.txt"]
    assert (out / "expected.txt").read_text() == "mine\n"
    assert os.listdir(tmp_path) == ["out"]
