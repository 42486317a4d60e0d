"""``clusterplan compare``: GPU types side by side for one model and workload. A thin typer layer over
:mod:`clusterplan.design.compare`; rendering is :mod:`clusterplan.render.compare_view`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from clusterplan.commands.options import Catalogs, options_command
from clusterplan.stdin import FILE_HELP


def _gpu_names(gpus: str | None) -> list[str] | None:
    if gpus is None:
        return None
    return [g.strip() for g in gpus.split(",") if g.strip()]


@dataclass(frozen=True)
class CompareOptions:
    """``clusterplan compare``'s arguments and options, in the order ``--help`` lists them."""

    file: Annotated[Path | None, typer.Argument(help=FILE_HELP + " Or give --model.")] = None
    model: Annotated[
        str | None, typer.Option("--model", help="Catalog model, instead of a requirement file (serving).")
    ] = None
    input_tokens: Annotated[int, typer.Option("--input-tokens", min=1, help="With --model: prompt tokens.")] = 512
    output_tokens: Annotated[int, typer.Option("--output-tokens", min=1, help="With --model: generated tokens.")] = 256
    tokens_per_s: Annotated[
        float, typer.Option("--tokens-per-s", help="With --model: average output tokens/s demanded.")
    ] = 1000.0
    horizon: Annotated[float, typer.Option("--horizon", help="With --model: months costs are summed over.")] = 36
    workload: Annotated[
        str | None,
        typer.Option("--workload", help="Workload name or index (default the first)."),
    ] = None
    gpus: Annotated[
        str | None, typer.Option("--gpus", help="Comma-separated GPUs (default: the requirement's, else all).")
    ] = None
    precision: Annotated[
        str | None,
        typer.Option(
            "--precision",
            help="Serving: weight precision (bf16, fp8, ...; default: the best the quality gate allows); training: precision.",
        ),
    ] = None
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON for tools.")] = False
    as_markdown: Annotated[bool, typer.Option("--markdown", help="Print the comparison as Markdown.")] = False
    catalog: Catalogs = None


def compare(o: CompareOptions) -> None:
    """Compare GPUs for one workload: memory fit, tokens/s, $ per million tokens, $ per TB/s, $ per TFLOPS, power."""
    from clusterplan.catalog.load import load_catalog
    from clusterplan.console import guarded, out_console
    from clusterplan.design.compare import COMMAND_LINE, compare_requirement, model_requirement_text
    from clusterplan.design.estimate import workload_ref
    from clusterplan.errors import FieldProblem, InputError
    from clusterplan.render import compare_view

    def run() -> None:
        if (o.file is None) == (o.model is None):
            raise InputError(
                [FieldProblem(COMMAND_LINE, "FILE / --model", "give a requirement file or --model, not both")],
                fix="clusterplan compare examples/requirements/70b-serving.yaml, or --model llama-3.1-70b",
            )
        for flag, value in (("--tokens-per-s", o.tokens_per_s), ("--horizon", o.horizon)):
            if o.model is not None and not value > 0:
                raise InputError([FieldProblem(COMMAND_LINE, flag, f"must be positive, got {value:g}")])
        cat = load_catalog(o.catalog or [])
        if o.model is not None:
            from clusterplan.requirement.load import load_requirement_text

            cat.model(o.model)  # an unknown model: a clean error with suggestions before anything else
            text = model_requirement_text(
                o.model, input_tokens=o.input_tokens, output_tokens=o.output_tokens, tokens_per_s=o.tokens_per_s,
                horizon_months=o.horizon,
            )  # fmt: skip
            # A value out of range is located in the requirement the flags make, named after them.
            resolved = load_requirement_text(text, "command line (--model)", cat)
        else:
            from clusterplan.stdin import load_requirement_arg

            assert o.file is not None
            resolved = load_requirement_arg(o.file, cat)
        which = workload_ref(o.workload) if o.workload is not None else None
        result = compare_requirement(
            resolved, cat, workload=which, gpus=_gpu_names(o.gpus),
            precision=o.precision,
        )  # fmt: skip
        if o.as_json:
            typer.echo(json.dumps(result.model_dump(mode="json"), indent=2, allow_nan=False))
        elif o.as_markdown:
            typer.echo(compare_view.markdown(result), nl=False)
        else:
            for part in compare_view.table(result):
                out_console.print(part, markup=False) if isinstance(part, str) else out_console.print(part)

    guarded(run)


def register(app: typer.Typer) -> None:
    app.command()(options_command(CompareOptions, compare))
