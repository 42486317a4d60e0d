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
        """Engine launch commands, a benchmark command and the expected figures for one design; its training and
        fine-tuning launches, Kubernetes manifests of its serving groups and SkyPilot tasks of its cloud launches."""
        from clusterplan.console import guarded, out_console

        def run() -> None:
            from clusterplan.catalog.load import load_catalog
            from clusterplan.design.export import export_design
            from clusterplan.design.export_targets import cloud_tasks, serving_scaling
            from clusterplan.design.export_training import export_training
            from clusterplan.errors import ClusterplanError, NotExportable
            from clusterplan.outputs import check_output_path, make_folder, write_text
            from clusterplan.physics.factors import Assumptions
            from clusterplan.pipeline import PlanOptions, plan_requirement
            from clusterplan.render.export_view import export_files
            from clusterplan.render.k8s_view import k8s_file
            from clusterplan.render.skypilot_view import skypilot_files
            from clusterplan.render.training_export_view import training_files
            from clusterplan.stdin import load_requirement_arg
            from clusterplan.wording.reasons import render_reason
            from clusterplan.wording.safe import visible

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
            chosen = plan.designs[design - 1]
            training = export_training(resolved, cat, chosen, first=len(launches) + 1)
            if not launches and not training:
                raise ClusterplanError(
                    "the design has no workload to export", fix="export plans serving, training and fine-tuning"
                )
            files = export_files(launches) if launches else {}
            files |= training_files(training)
            if launches:
                files["serving-k8s.yaml"] = k8s_file(serving_scaling(chosen, launches))
            files |= skypilot_files(cloud_tasks(chosen, launches, training))
            if not any(f.endswith(".sh") for f in files):
                raise NotExportable(
                    [f"{visible(x.workload)}: {render_reason(r)}" for x in training for r in x.refusals],
                    fix="plan a layout the framework runs (e.g. constraints.allowed_gpus with a GPU one stage fits "
                    "on), or launch the plan's layout with a framework that has it",
                )
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
            for summary in ("expected.txt", "training.txt"):
                if summary in files:
                    out_console.print(files[summary], markup=False, soft_wrap=True)

        guarded(run)
