"""``clusterplan export FILE [--design N] [--engine E] [-o DIR]``: the chosen design as engine launch commands,
a benchmark replaying the requirement's workload, and what it should report. Exit 2 on bad input or when
there is no design to export; the logic is :mod:`clusterplan.design.export`, the text
:mod:`clusterplan.render.export_view`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clusterplan.commands.options import Catalogs
from clusterplan.outputs import FORCE_HELP
from clusterplan.stdin import FILE_HELP


def register(app: typer.Typer) -> None:
    @app.command()
    def export(
        file: Annotated[Path, typer.Argument(help=FILE_HELP)],
        design: Annotated[int, typer.Option("--design", min=1, help="Which design of the plan (1: the best).")] = 1,
        engine: Annotated[
            str | None,
            typer.Option("--engine", help="vllm, sglang or tensorrt-llm (trtllm); default: each workload's engine."),
        ] = None,
        output: Annotated[
            Path | None, typer.Option("--output", "-o", help="Directory to write the scripts into (default: print).")
        ] = None,
        force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
        catalog: Catalogs = None,
    ) -> None:
        """Engine launch commands, a benchmark command and the expected figures for one design."""
        from clusterplan.console import guarded, out_console

        def run() -> None:
            from clusterplan.catalog.load import load_catalog
            from clusterplan.design.export import export_design
            from clusterplan.errors import ClusterplanError
            from clusterplan.outputs import check_output_path, make_folder, write_text
            from clusterplan.physics.factors import Assumptions
            from clusterplan.pipeline import PlanOptions, plan_requirement
            from clusterplan.render.export_view import export_files
            from clusterplan.stdin import load_requirement_arg

            name = None
            if engine is not None:
                try:
                    name = Assumptions._known_engine(engine)
                except ValueError as exc:
                    raise ClusterplanError(f"--engine: {exc}", fix="see clusterplan catalog engines") from None
            if output is not None and output.is_dir():  # the one name known before planning: refused at once
                check_output_path(output / "expected.txt", force, flag="--output")
            cat = load_catalog(catalog or [])
            resolved = load_requirement_arg(file, cat)
            plan = plan_requirement(resolved, cat, PlanOptions(top=max(design, 1), explain="design"))
            launches = export_design(resolved, cat, plan, design=design, engine=name)
            if not launches:
                raise ClusterplanError(
                    "the design has no serving workload to export", fix="export plans serving workloads"
                )
            files = export_files(launches)
            if output is None:  # one shell script: every line that is not a command is a comment
                for fname, text in files.items():
                    body = text if fname.endswith(".sh") else "".join(f"# {line}\n" for line in text.splitlines())
                    out_console.print(f"# ---- {fname}\n{body}", markup=False, soft_wrap=True)
                return
            make_folder(output, flag="--output")
            for fname in files:  # every file checked before the first is written: none or all of them
                check_output_path(output / fname, force, flag="--output")
            for fname, text in files.items():
                write_text(output / fname, text, force=force, flag="--output")
            out_console.print(f"wrote {len(files)} files to {output}", markup=False)
            out_console.print(files["expected.txt"], markup=False, soft_wrap=True)

        guarded(run)
