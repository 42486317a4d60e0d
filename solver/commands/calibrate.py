"""``clusterplan calibrate RESULTS...``: fit the engine x GPU factors (or training_mfu) to a user's own benchmark
results, write them as a catalog overlay for ``--catalog``, and with ``--requirement`` show what the plan does with
them. The logic is :mod:`clusterplan.design.calibrate`, the reading :mod:`clusterplan.inputs.bench_results`, the
text :mod:`clusterplan.render.calibrate_view`."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from clusterplan.commands.options import Catalogs, options_command
from clusterplan.outputs import FORCE_HELP

RESULTS_HELP = (
    "Result files: vllm bench serve --save-result JSON, SGLang bench_serving JSONL, trtllm-bench --report_json, "
    "genai-perf/AIPerf profile export JSON or CSV; or one training log (Megatron-LM or torchtitan, .log/.txt)."
)
TRAINING_SUFFIXES = (".log", ".txt")


@dataclass(frozen=True)
class CalibrateOptions:
    """``clusterplan calibrate``'s arguments and options, in the order ``--help`` lists them."""

    results: Annotated[list[Path], typer.Argument(help=RESULTS_HELP)]
    gpu: Annotated[str | None, typer.Option("--gpu", help="Catalog GPU, where a file does not record it.")] = None
    engine: Annotated[
        str | None, typer.Option("--engine", help="Serving engine, where a file does not record it (default vllm).")
    ] = None
    model: Annotated[str | None, typer.Option("--model", help="Catalog model, where a file does not record it.")] = None
    tp: Annotated[int | None, typer.Option("--tp", min=1, help="Tensor-parallel size, where not recorded.")] = None
    pp: Annotated[int | None, typer.Option("--pp", min=1, help="Training: pipeline stages (default 1).")] = None
    quant: Annotated[str, typer.Option("--quant", help="Weight precision the runs served (bf16, fp8, ...).")] = "bf16"
    gpus: Annotated[int | None, typer.Option("--gpus", min=1, help="Training: GPUs in the job.")] = None
    seq_len: Annotated[int | None, typer.Option("--seq-len", min=1, help="Training: sequence length.")] = None
    global_batch: Annotated[
        int | None, typer.Option("--global-batch", min=1, help="Training: sequences per step, if the log lacks it.")
    ] = None
    requirement: Annotated[
        Path | None, typer.Option("--requirement", help="Re-plan this requirement with the overlay: what moved.")
    ] = None
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Overlay file to write (default calibrated-<engine>-<gpu>.yaml)."),
    ] = None
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="Date the overlay records (YYYY-MM-DD; default today).")
    ] = None
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False
    catalog: Catalogs = None


def calibrate(o: CalibrateOptions) -> None:
    """Fit the factors a prediction rests on to your own benchmark results; write them as a --catalog overlay."""
    from clusterplan.console import guarded

    guarded(lambda: _run(o))


def _run(o: CalibrateOptions) -> None:
    from clusterplan.catalog.load import load_catalog
    from clusterplan.console import out_console
    from clusterplan.design import calibrate as cal
    from clusterplan.errors import FieldProblem, InputError, Location
    from clusterplan.inputs.bench_results import read_serving_results, read_training_log
    from clusterplan.outputs import check_output_path, write_text
    from clusterplan.physics.factors import Assumptions
    from clusterplan.render import calibrate_view as view

    if o.output is not None:
        check_output_path(o.output, o.force, flag="--output")  # before anything is read (docs/guarantees.md 7)
    cat = load_catalog(o.catalog or [])
    settings = cal.RunSettings(
        gpu=o.gpu, engine=o.engine, model=o.model, tp=o.tp, pp=o.pp, quant=o.quant, gpus=o.gpus,
        sequence_length=o.seq_len, global_batch=o.global_batch,
    )  # fmt: skip
    as_of = o.as_of or datetime.date.today().isoformat()
    base = Assumptions().with_catalog_engines(cat.engines)
    training = [p for p in o.results if p.suffix.lower() in TRAINING_SUFFIXES]
    if training and len(o.results) > 1:
        raise InputError(
            [FieldProblem(Location(str(training[0])), "RESULTS", "a training log is calibrated alone")],
            fix="give one training log, or only serving result files",
        )
    if training:
        point = cal.training_point(read_training_log(training[0]), settings, cat)
        target = o.output or Path(f"calibrated-training-{point.gpu.id}.yaml")
        check_output_path(target, o.force, flag="--output")  # before the fit
        tfit = cal.fit_training(point, base)
        doc, lines = cal.training_overlay(tfit, point.run, as_of), view.training_lines(tfit)
    else:
        runs = [run for path in o.results for run in read_serving_results(path)]
        points = cal.serving_points(runs, settings, cat)
        engine = cat.engine(points[0].run.engine or "vllm").id
        target = o.output or Path(f"calibrated-{engine}-{points[0].gpu.id}.yaml")
        check_output_path(target, o.force, flag="--output")  # before the fit
        sfit = cal.fit_serving(points, base)
        doc = cal.serving_overlay(sfit, [p.run for p in points], cat, as_of)
        lines = [*view.ignored_lines(cal.flags_ignored(runs, settings, cat)), *view.serving_lines(sfit)]
    header = "clusterplan calibrate: factors measured on your hardware. Load with --catalog " + target.name
    write_text(target, view.overlay_yaml(doc, header), force=o.force, flag="--output")
    for line in lines:
        out_console.print(line, markup=False)
    out_console.print(f"\nwrote {target} (load it with --catalog {target})", markup=False)
    if o.requirement is not None:
        before = cal.design_one(o.requirement, cat)
        after = cal.design_one(o.requirement, load_catalog([*(o.catalog or []), target]))
        for line in view.replan_lines(before, after):
            out_console.print(line, markup=False)


def register(app: typer.Typer) -> None:
    app.command()(options_command(CalibrateOptions, calibrate))
