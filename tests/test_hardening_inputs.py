"""Hostile files: every one is refused with a located message, or accepted, within a second of CPU time.

The corpus lives in tests/data/broken (requirements) and tests/data/catalogs/bad-*.yaml (user
catalogs); tests/test_requirement_cli.py and tests/test_catalog_user.py check each message through
the CLI. Here each is timed, and the cases that are built rather than stored (a 50 MB sparse file,
a 3 MB line, a byte-order mark, Windows line endings, a named pipe) are checked the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clusterplan.catalog.load import load_catalog
from clusterplan.cli import app
from clusterplan.errors import ClusterplanError
from clusterplan.inputs.yamlio import MAX_FILE_BYTES
from clusterplan.requirement.load import load_requirement
from conftest import DATA, cpu_s

runner = CliRunner()
LIMIT_S = 1.0  # CPU seconds (cpu_s): a loaded machine stretches wall time, not the work
BROKEN = sorted((DATA / "broken").glob("*.yaml"))
BAD_CATALOGS = sorted((DATA / "catalogs").glob("bad-*.yaml"))
VALID = "model: llama-3.1-8b\nworkloads:\n  - kind: serving\n    requests_per_min: 100\n    p95_latency: 4s\n"


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = cpu_s()
    try:
        out: Any = fn()
    except ClusterplanError as exc:
        out = exc
    return out, cpu_s() - start


def _refused_in_time(path: Path, catalog: Any) -> ClusterplanError:
    out, seconds = _timed(lambda: load_requirement(path, catalog))
    assert seconds < LIMIT_S, f"{path.name}: {seconds:.2f} s"
    assert isinstance(out, ClusterplanError), f"{path.name} was accepted"
    assert out.exit_code == 2
    return out


@pytest.mark.parametrize("broken", BROKEN, ids=lambda p: p.name)
def test_every_broken_requirement_is_refused_within_a_second(broken: Path, catalog: Any) -> None:
    exc = _refused_in_time(broken, catalog)
    assert str(broken) in exc.render()  # located: the message starts from the file


@pytest.mark.parametrize("bad", BAD_CATALOGS, ids=lambda p: p.name)
def test_every_contradictory_catalog_is_refused_within_a_second(bad: Path) -> None:
    out, seconds = _timed(lambda: load_catalog([bad]))
    assert seconds < LIMIT_S, f"{bad.name}: {seconds:.2f} s"
    assert isinstance(out, ClusterplanError) and out.exit_code == 2
    assert f"{bad}:" in out.render()


def test_a_50_mb_sparse_file_is_refused_without_reading_it(tmp_path: Path, catalog: Any) -> None:
    f = tmp_path / "big.yaml"
    with f.open("wb") as fh:
        fh.truncate(50 * 2**20)
    assert "the limit is" in _refused_in_time(f, catalog).render()


def test_deep_nesting_is_refused_within_a_second(tmp_path: Path, catalog: Any) -> None:
    f = tmp_path / "deep.yaml"
    f.write_text("model: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert "nested" in _refused_in_time(f, catalog).render()


def test_a_3_mb_line_under_the_cap_is_handled_within_a_second(tmp_path: Path, catalog: Any) -> None:
    f = tmp_path / "long.yaml"
    f.write_text(VALID + "name: " + "x" * (3 * 2**20) + "\n")
    assert f.stat().st_size < MAX_FILE_BYTES
    out, seconds = _timed(lambda: load_requirement(f, catalog))
    assert seconds < LIMIT_S, f"{seconds:.2f} s"
    assert not isinstance(out, ClusterplanError) or out.exit_code == 2
    over = tmp_path / "over.yaml"
    over.write_text(VALID + "name: " + "x" * MAX_FILE_BYTES + "\n")
    assert "the limit is" in _refused_in_time(over, catalog).render()


@pytest.mark.parametrize(
    "content",
    [
        b"\xef\xbb\xbf" + VALID.encode(),  # UTF-8 byte-order mark (Notepad)
        VALID.replace("\n", "\r\n").encode(),  # Windows line endings
        b"\xef\xbb\xbf" + VALID.replace("\n", "\r\n").encode(),
        ("# caf\u00e9 \u2014 \u4e2d\u6587 comment\n" + VALID).encode(),  # non-ASCII UTF-8 is fine
    ],
    ids=["bom", "crlf", "bom-crlf", "utf8-comment"],
)
def test_bom_and_windows_line_endings_are_accepted(content: bytes, tmp_path: Path, catalog: Any) -> None:
    f = tmp_path / "r.yaml"
    f.write_bytes(content)
    out, seconds = _timed(lambda: load_requirement(f, catalog))
    assert seconds < LIMIT_S
    assert not isinstance(out, ClusterplanError), out.render()
    assert out.requirement.workloads[0].p95_latency == 4.0


def test_a_windows_file_reports_the_right_line(tmp_path: Path, catalog: Any) -> None:
    f = tmp_path / "r.yaml"
    f.write_bytes(b"\xef\xbb\xbf" + VALID.replace("4s", "fast").replace("\n", "\r\n").encode())
    assert f"{f}:5:5: workloads[0].p95_latency" in _refused_in_time(f, catalog).render()


def test_a_user_catalog_with_a_bom_and_crlf_is_accepted(tmp_path: Path) -> None:
    f = tmp_path / "cat.yaml"
    text = (
        "instances:\n"
        "  - {provider: aws, id: g6.xlarge, override: true, on_demand_usd_per_hour: 0.7,"
        " source: https://example.invalid/q, as_of: 2026-11}\n"
    )
    f.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    assert load_catalog([f]).instance("aws:g6.xlarge").on_demand_usd_per_hour == 0.7


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need POSIX")
def test_a_named_pipe_is_refused_instead_of_blocking(tmp_path: Path, catalog: Any) -> None:
    """Regression: opening a FIFO with no writer blocked forever."""
    f = tmp_path / "pipe.yaml"
    os.mkfifo(f)
    assert "not a regular file" in _refused_in_time(f, catalog).render()
    result = runner.invoke(app, ["solve", str(f)])
    assert result.exit_code == 2 and "not a regular file" in result.output


@pytest.mark.parametrize(
    "text",
    [
        "--- !!python/object:os.system\nmodel: x\n",
        "gpus: !!set {a, b}\n",
        "gpus:\n  - &a {id: x}\n  - *a\n---\ngpus: []\n",
        "\x00",
        "owned: {pue: !!float .nan}\n",
    ],
    ids=["python-tag", "set-tag", "two-documents", "nul", "nan"],
)
def test_hostile_user_catalogs_are_refused_located(text: str, tmp_path: Path) -> None:
    f = tmp_path / "cat.yaml"
    f.write_text(text)
    out, seconds = _timed(lambda: load_catalog([f]))
    assert seconds < LIMIT_S
    assert isinstance(out, ClusterplanError) and out.exit_code == 2
    assert str(f) in out.render()
