"""Output files and the requirement argument: the rule of ``clusterplan.outputs`` held through the CLI.

Every command that writes a file (``sweep`` and ``frontier`` --csv/--json/--plot, ``report -o`` and its
images, ``schema -o``) refuses a folder, a missing or unwritable parent, and an existing file or symbolic
link without ``--force`` with exit 2, before the requirement is read; writes are atomic and a failed
write leaves no temporary file. ``-`` reads the requirement from stdin. A stdout that cannot encode a
name never crashes the command.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from conftest import cpu_s, example, run_cli

FAST = example("7b-chat-serving")  # plans in well under a second
BIG = example("70b-serving")
TEMP_GLOB = ".clusterplan-*"

# Each command that writes a file, as (arguments before the output flag, the output flag, a file name).
WRITERS = [
    pytest.param(["sweep", str(FAST), "--vary", "budget=10k..30k", "--steps", "2"], "--csv", "out.csv", id="sweep-csv"),
    pytest.param(
        ["sweep", str(FAST), "--vary", "budget=10k..30k", "--steps", "2"], "--json", "out.json", id="sweep-json"
    ),
    pytest.param(
        ["sweep", str(FAST), "--vary", "budget=10k..30k", "--steps", "2"], "--plot", "out.svg", id="sweep-plot"
    ),
    pytest.param(["frontier", str(FAST), "--points", "2"], "--csv", "out.csv", id="frontier-csv"),
    pytest.param(["frontier", str(FAST), "--points", "2"], "--json", "out.json", id="frontier-json"),
    pytest.param(["frontier", str(FAST), "--points", "2"], "--plot", "out.png", id="frontier-plot"),
    pytest.param(["report", str(FAST), "--what-if", "none"], "-o", "review.md", id="report-md"),
    pytest.param(["report", str(FAST), "--what-if", "none"], "-o", "review.html", id="report-html"),
    pytest.param(["schema"], "-o", "schema.json", id="schema"),
]


@pytest.fixture
def no_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the command gets as far as loading the catalog (the first step of any planning)."""
    import clusterplan.catalog.load

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the output path was not checked before planning")

    monkeypatch.setattr(clusterplan.catalog.load, "load_catalog", refuse)


def _no_temp(folder: Path) -> None:
    assert not list(folder.glob(TEMP_GLOB)), "a temporary file was left behind"


def _refused(result: Result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output
    for w in words:
        assert w in result.output, (w, result.output)


# ------------------------------------------------------------------------------------------------
# Refused before planning
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "flag", "name"), WRITERS)
def test_a_folder_is_refused_before_planning(
    tmp_path: Path, no_planning: None, args: list[str], flag: str, name: str
) -> None:
    folder = tmp_path / name  # a folder named like the file, suffix and all
    folder.mkdir()
    _refused(run_cli(*args, flag, str(folder)), str(folder), "is a folder", flag)


@pytest.mark.parametrize(("args", "flag", "name"), WRITERS)
def test_a_missing_parent_is_refused_before_planning(
    tmp_path: Path, no_planning: None, args: list[str], flag: str, name: str
) -> None:
    path = tmp_path / "no" / "such" / name
    _refused(run_cli(*args, flag, str(path)), str(path), "does not exist", "mkdir -p")


@pytest.mark.parametrize(("args", "flag", "name"), WRITERS)
def test_an_existing_file_is_refused_and_untouched_without_force(
    tmp_path: Path, no_planning: None, args: list[str], flag: str, name: str
) -> None:
    path = tmp_path / name
    path.write_text("keep me\n")
    before = path.stat()
    _refused(run_cli(*args, flag, str(path)), str(path), "already exists", "--force")
    assert path.read_text() == "keep me\n"
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    _no_temp(tmp_path)


@pytest.mark.parametrize(("args", "flag", "name"), WRITERS)
def test_a_symlink_is_not_followed_without_force(
    tmp_path: Path, no_planning: None, args: list[str], flag: str, name: str
) -> None:
    target = tmp_path / "target.txt"
    target.write_text("precious\n")
    link = tmp_path / name
    link.symlink_to(target)
    _refused(run_cli(*args, flag, str(link)), str(link), "symbolic link", "--force")
    assert link.is_symlink()
    assert target.read_text() == "precious\n"


def test_a_read_only_location_is_refused(no_planning: None) -> None:
    # /proc refuses new files even to root, so this holds wherever the tests run.
    path = Path("/proc/clusterplan-test.csv")
    if not Path("/proc").is_dir():
        pytest.skip("no /proc")
    args = ["sweep", str(FAST), "--vary", "budget=10k..30k", "--steps", "2", "--csv", str(path)]
    _refused(run_cli(*args), str(path), "cannot write in /proc")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused(tmp_path: Path, no_planning: None) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        _refused(run_cli("schema", "-o", str(folder / "s.json")), "cannot write in", str(folder))
    finally:
        folder.chmod(0o755)


def test_the_same_file_twice_is_refused(tmp_path: Path, no_planning: None) -> None:
    path = tmp_path / "both.txt"
    args = ["sweep", str(FAST), "--vary", "budget=10k..30k", "--csv", str(path), "--json", str(path)]
    _refused(run_cli(*args), "--csv and --json name the same file")


def test_report_images_beside_the_markdown_follow_the_same_rule(tmp_path: Path, no_planning: None) -> None:
    out = tmp_path / "review.md"
    images = tmp_path / "review_files"
    images.mkdir()
    (images / "memory.png").write_bytes(b"old image")
    _refused(run_cli("report", str(FAST), "-o", str(out)), str(images / "memory.png"), "already exists", "--force")
    assert (images / "memory.png").read_bytes() == b"old image"

    (images / "memory.png").unlink()
    images.rmdir()
    images.write_text("not a folder")
    _refused(run_cli("report", str(FAST), "-o", str(out)), str(images), "is not a folder")


def test_a_refusal_on_the_70b_example_takes_well_under_a_second(tmp_path: Path) -> None:
    out = tmp_path / "review.md"
    out.write_text("an earlier review\n")
    run_cli("report", str(BIG), "-o", str(out))  # the first call imports the command's modules
    t0 = cpu_s()
    result = run_cli("report", str(BIG), "-o", str(out))
    cpu_used_s = cpu_s() - t0
    _refused(result, "already exists")
    assert cpu_used_s < 0.5, f"refused after {cpu_used_s:.2f} s of CPU: the path was checked after planning"
    assert out.read_text() == "an earlier review\n"


# ------------------------------------------------------------------------------------------------
# Written atomically, replaced only with --force
# ------------------------------------------------------------------------------------------------


def test_force_replaces_an_existing_file_and_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text("old\n")
    path.chmod(0o640)
    result = run_cli("schema", "-o", str(path), "--force")
    assert result.exit_code == 0, result.output
    assert path.read_text().startswith("{")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    _no_temp(tmp_path)


def test_force_replaces_a_symlink_itself_not_its_target(tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_text("precious\n")
    link = tmp_path / "schema.json"
    link.symlink_to(target)
    result = run_cli("schema", "-o", str(link), "--force")
    assert result.exit_code == 0, result.output
    assert not link.is_symlink()
    assert link.read_text().startswith("{")
    assert target.read_text() == "precious\n"


def test_a_new_file_gets_the_usual_permissions(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    assert run_cli("schema", "-o", str(path)).exit_code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not the temporary file's 0600
    _no_temp(tmp_path)


@pytest.mark.slow
def test_sweep_and_report_write_every_file(tmp_path: Path) -> None:
    csv, js, svg = tmp_path / "s.csv", tmp_path / "s.json", tmp_path / "s.svg"
    args = ["sweep", str(FAST), "--vary", "budget=10k..30k", "--steps", "2"]
    result = run_cli(*args, "--csv", str(csv), "--json", str(js), "--plot", str(svg))
    assert result.exit_code == 0, result.output
    assert csv.read_text().count("\n") == 3 and js.read_text().startswith("{") and svg.read_bytes().startswith(b"<")
    again = run_cli(*args, "--csv", str(csv), "--json", str(js), "--plot", str(svg), "--force")
    assert again.exit_code == 0, again.output

    review = tmp_path / "review.md"
    assert run_cli("report", str(FAST), "-o", str(review), "--what-if", "none").exit_code == 0
    assert (tmp_path / "review_files" / "memory.png").exists()
    assert run_cli("report", str(FAST), "-o", str(review), "--what-if", "none").exit_code == 2
    assert run_cli("report", str(FAST), "-o", str(review), "--what-if", "none", "--force").exit_code == 0
    _no_temp(tmp_path)
    _no_temp(tmp_path / "review_files")


def test_a_failed_write_is_exit_2_and_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import clusterplan.outputs

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(clusterplan.outputs.os, "fsync", full)
    path = tmp_path / "schema.json"
    _refused(run_cli("schema", "-o", str(path)), str(path), "could not be written", os.strerror(errno.ENOSPC))
    assert not path.exists()
    _no_temp(tmp_path)


def test_an_existing_file_survives_a_failed_forced_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import clusterplan.outputs

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / "schema.json"
    path.write_text("old\n")
    monkeypatch.setattr(clusterplan.outputs.os, "fsync", full)
    _refused(run_cli("schema", "-o", str(path), "--force"), "could not be written")
    assert path.read_text() == "old\n"  # the rename never happened
    _no_temp(tmp_path)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_dev_full_is_exit_2_with_the_os_error() -> None:
    _refused(run_cli("schema", "-o", "/dev/full"), "/dev/full", "could not be written", os.strerror(errno.ENOSPC))


def test_a_file_that_appears_during_planning_is_not_clobbered(tmp_path: Path) -> None:
    from clusterplan.errors import OutputError
    from clusterplan.outputs import check_output_path, write_text

    path = tmp_path / "late.csv"
    check_output_path(path, False)
    path.write_text("someone else's\n")  # created while the command was planning
    with pytest.raises(OutputError, match="already exists"):
        write_text(path, "ours\n", force=False)
    assert path.read_text() == "someone else's\n"
    _no_temp(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_named_pipe_with_no_reader_is_refused_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _refused(run_cli("schema", "-o", str(fifo)), str(fifo), "no reader")


# ------------------------------------------------------------------------------------------------
# '-' reads the requirement from stdin
# ------------------------------------------------------------------------------------------------


def _stdin(*args: str, text: str | bytes) -> Result:
    from clusterplan.cli import app

    result = CliRunner().invoke(app, list(args), input=text)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_validate_reads_stdin() -> None:
    result = _stdin("validate", "-", text=FAST.read_text())
    assert result.exit_code == 0, result.output
    assert "<stdin>: valid" in result.output


def test_a_bad_requirement_on_stdin_is_located_at_stdin() -> None:
    result = _stdin("validate", "-", text=FAST.read_text().replace("p95_latency: 4s", "p95_latency: fast"))
    _refused(result, "<stdin>:10:")
    _refused(_stdin("validate", "-", text=b"name: x\n\xff\n"), "<stdin>:2", "not valid UTF-8")


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["solve", "-", "--json", "--no-explain", "--top", "1"], id="solve"),
        pytest.param(["estimate", "-", "--gpu", "h100-sxm", "--tp", "1"], id="estimate"),
        pytest.param(["sweep", "-", "--vary", "budget=10k..30k", "--steps", "2"], id="sweep"),
        pytest.param(["frontier", "-", "--points", "2"], id="frontier"),
    ],
)
def test_every_command_reads_stdin(args: list[str]) -> None:
    from_file = run_cli(*[str(FAST) if a == "-" else a for a in args])
    from_stdin = _stdin(*args, text=FAST.read_text())
    assert from_stdin.exit_code == from_file.exit_code == 0, from_stdin.output
    if args[0] == "solve":  # the same plan, byte for byte, but for the file's name
        assert from_stdin.output == from_file.output.replace(f'"{FAST}"', '"<stdin>"')


@pytest.mark.slow
def test_report_reads_stdin(tmp_path: Path) -> None:
    out = tmp_path / "review.md"
    result = _stdin("report", "-", "-o", str(out), "--what-if", "none", text=FAST.read_text())
    assert result.exit_code == 0, result.output
    text = out.read_text()
    digest = hashlib.sha256(FAST.read_bytes()).hexdigest()
    assert f"requirement <code>&lt;stdin&gt;</code> sha256 <code>{digest}</code>" in text
    assert "model: llama-3.1-8b" in text  # the requirement as given


# ------------------------------------------------------------------------------------------------
# A stdout that cannot encode a name
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"}])
def test_a_stdout_that_cannot_encode_a_name_does_not_crash(tmp_path: Path, env: dict[str, str]) -> None:
    req = tmp_path / "unicode.yaml"
    req.write_text(FAST.read_text().replace("name: assistant", "name: assistänt-☃"), encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(FAST.read_text().replace("model: llama-3.1-8b", "model: llämä-☃"), encoding="utf-8")
    cmd = [sys.executable, "-c", "from clusterplan.cli import entry; entry()"]
    full_env = {**os.environ, **env}
    ok = subprocess.run([*cmd, "validate", str(req)], capture_output=True, env=full_env, timeout=60)
    assert ok.returncode == 0, ok.stderr.decode("ascii", "replace")
    assert b"\\u2603" in ok.stdout  # written as an escape, not dropped
    refused = subprocess.run([*cmd, "validate", str(bad)], capture_output=True, env=full_env, timeout=60)
    assert refused.returncode == 2, refused.stderr.decode("ascii", "replace")
    assert b"internal error" not in refused.stderr
