"""Every command that takes ``--catalog`` reads the user catalog it is given (negotiated prices, added GPUs).

The other CLI tests give ``--catalog`` to ``solve``, ``validate``, ``report`` and the ``catalog`` group only; a
command that dropped the option on its way to its body would still plan, on the shipped prices. A refused user
catalog shows it was read: each command must stop at it, located, before planning anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import typer.main

from conftest import DATA, example, run_cli

BAD = DATA / "catalogs" / "bad-duplicate.yaml"
REFUSAL = "bad-duplicate.yaml:12:5: instances[1]: duplicate instance 'acme:1x-l4'"
REQ = str(example("70b-serving"))

# Each command that takes --catalog, with the arguments it needs to get as far as reading it.
CASES: dict[str, list[str]] = {
    "solve": [REQ],
    "estimate": [REQ],
    "compare": [REQ],
    "rent-vs-buy": [REQ, "--gpu", "h100-sxm", "--count", "8"],
    "sweep": [REQ, "--vary", "budget=1M", "--jobs", "1"],
    "frontier": [REQ, "--jobs", "1"],
    "report": [REQ, "-o", "review.md", "--jobs", "1"],
    "export": [REQ],
    "validate": [REQ],
    "calibrate": [str(DATA / "bench" / "vllm-bench-serve-c16.json"), "-o", "review.md"],
}


@pytest.mark.parametrize("command", sorted(CASES))
def test_command_reads_the_user_catalog(command: str, tmp_path: Path) -> None:
    args = [a if a != "review.md" else str(tmp_path / a) for a in CASES[command]]
    result = run_cli(command, *args, "--catalog", str(BAD))
    assert result.exit_code == 2, result.output
    assert REFUSAL in result.output


def test_every_command_with_a_catalog_option_is_held() -> None:
    """The cases above are every top-level command that declares ``--catalog`` (the group is tested on its own)."""
    from clusterplan.cli import app

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    names = group.list_commands(ctx)  # type: ignore[attr-defined]
    commands = [group.get_command(ctx, name) for name in names]  # type: ignore[attr-defined]
    with_catalog = {
        c.name
        for c in commands
        if not isinstance(c, typer.main.TyperGroup) and any("--catalog" in getattr(p, "opts", []) for p in c.params)
    }
    assert with_catalog == set(CASES)
