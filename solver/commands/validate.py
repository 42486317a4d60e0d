"""``clusterplan validate FILE`` and ``clusterplan schema``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from clusterplan.commands.options import Catalogs
from clusterplan.outputs import FORCE_HELP
from clusterplan.requirement.schema import Requirement
from clusterplan.stdin import FILE_HELP


def requirement_schema() -> dict[str, object]:
    """The JSON Schema of a requirement file, as checked in at specs/requirement.schema.json."""
    schema = Requirement.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://clusterplan.dev/specs/requirement.schema.json"
    return schema


def schema_text() -> str:
    return json.dumps(requirement_schema(), indent=2, sort_keys=True) + "\n"


def register(app: typer.Typer) -> None:
    @app.command()
    def validate(
        file: Path = typer.Argument(..., help=FILE_HELP),
        catalog: Catalogs = None,
    ) -> None:
        """Check a requirement file and say what it asks for; exit 2 with located errors if it is invalid."""
        from clusterplan.catalog.load import load_catalog
        from clusterplan.console import guarded, out_console
        from clusterplan.errors import printable
        from clusterplan.explain.contradictions import contradictions
        from clusterplan.stdin import display_path, load_requirement_arg
        from clusterplan.wording.reasons import render_warning

        def run() -> None:
            cat = load_catalog(catalog or [])
            resolved = load_requirement_arg(file, cat)
            req = resolved.requirement
            out_console.print(f"{printable(str(display_path(file)))}: valid", markup=False)
            for i, w in enumerate(req.workloads):
                arch = resolved.model_for(i)
                out_console.print(
                    f"  workloads[{i}] {printable(w.name)}: {w.kind} of {printable(arch.name)}", markup=False
                )
            for note in resolved.model_notes:
                out_console.print(f"  {printable(note)}", markup=False)
            out_console.print(
                f"  deployment: {req.deployment}; horizon {req.budget.horizon:g} months; schedule {req.schedule}",
                markup=False,
            )
            inventory = [(i.gpu, i.count) for i in req.constraints.inventory]
            for warning in contradictions(req.deployment, inventory):
                out_console.print(f"  warning: {render_warning(warning)}", markup=False)

        guarded(run)

    @app.command()
    def schema(
        output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Print the JSON Schema of requirement files (checked in at specs/requirement.schema.json)."""
        from clusterplan.console import guarded
        from clusterplan.outputs import check_output_path, write_text

        def run() -> None:
            if output is not None:
                check_output_path(output, force, flag="-o")
            text = schema_text()
            if output is None:
                typer.echo(text, nl=False)
            else:
                write_text(output, text, force=force, flag="-o")

        guarded(run)
