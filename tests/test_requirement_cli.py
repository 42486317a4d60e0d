"""The ground floor as a user meets it: validate, schema, version, and refusals of bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clusterplan import __version__
from clusterplan.cli import app
from clusterplan.commands.validate import schema_text
from conftest import DATA, EXAMPLES, ROOT

runner = CliRunner()
BROKEN = sorted(p for p in (DATA / "broken").glob("*.yaml"))


def _expectation(path: Path) -> str:
    sidecar = path.with_suffix(".expect")
    if sidecar.exists():
        return sidecar.read_text().strip()
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} needs an '# expect:' first line"
    return first[len("# expect: ") :]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_validates(example: Path) -> None:
    result = runner.invoke(app, ["validate", str(example)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output


def test_examples_cover_the_documented_cases() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "70b-serving.yaml",
        "7b-chat-serving.yaml",
        "13b-train-then-serve.yaml",
        "7b-qlora-finetune.yaml",
        "405b-serving.yaml",
        "mixtral-serving.yaml",
    } <= names


@pytest.mark.parametrize("broken", BROKEN, ids=lambda p: p.name)
def test_broken_requirement_exits_2_with_a_located_message(broken: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(broken.parent)
    result = runner.invoke(app, ["validate", broken.name])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert _expectation(broken) in result.output


def test_unknown_names_suggest_catalog_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA / "broken")
    out = runner.invoke(app, ["validate", "unknown-gpu.yaml"]).output
    assert "h100-sxm" in out
    out = runner.invoke(app, ["validate", "unknown-model.yaml"]).output
    assert "llama-3.1-70b" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe\x00binary\x00", "NUL bytes"),
        ("model: caf\xe9\n".encode("latin-1"), "not valid UTF-8"),
    ],
)
def test_binary_and_non_utf8_files_are_refused(tmp_path: Path, content: bytes, message: str) -> None:
    f = tmp_path / "r.yaml"
    f.write_bytes(content)
    result = runner.invoke(app, ["validate", str(f)])
    assert result.exit_code == 2
    assert message in result.output


def test_missing_path_and_directory_are_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "no such file" in result.output
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory" in result.output


def test_a_huge_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    with f.open("wb") as fh:
        fh.truncate(50 * 2**20)  # a sparse 50 MB file
    result = runner.invoke(app, ["validate", str(f)])
    assert result.exit_code == 2
    assert "the limit is" in result.output


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "deep.yaml"
    f.write_text("model: " + "[" * 5000 + "]" * 5000 + "\n")
    result = runner.invoke(app, ["validate", str(f)])
    assert result.exit_code == 2
    assert "nested" in result.output


def test_hf_config_model_is_read_from_a_local_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 32,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "intermediate_size": 14336,
                "vocab_size": 128256,
                "max_position_embeddings": 131072,
            }
        )
    )
    (tmp_path / "r.yaml").write_text(
        "model: {hf_config: config.json, name: my-8b}\nworkloads: [{kind: serving, requests_per_min: 10}]\n"
    )
    result = runner.invoke(app, ["validate", str(tmp_path / "r.yaml")])
    assert result.exit_code == 0, result.output
    assert "my-8b" in result.output


def test_schema_is_current() -> None:
    checked_in = (ROOT / "specs" / "requirement.schema.json").read_text()
    assert checked_in == schema_text(), "run: clusterplan schema -o specs/requirement.schema.json --force"


def test_every_schema_field_is_documented() -> None:
    doc = (ROOT / "specs" / "requirement.md").read_text()
    schema = json.loads(schema_text())
    fields: set[str] = set(schema["properties"])
    for name, definition in schema["$defs"].items():
        if name in {"Assumptions", "PerClass", "PerClassOverride"}:
            continue  # documented in docs/model.md
        fields |= set(definition.get("properties", {}))
    missing = sorted(f for f in fields if f"`{f}`" not in doc)
    assert not missing, f"specs/requirement.md does not document: {missing}"


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


@pytest.mark.parametrize("command", [[], ["validate"], ["schema"]])
def test_help_is_available(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    assert re.search(r"Usage", result.output)
