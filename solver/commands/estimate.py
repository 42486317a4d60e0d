"""``clusterplan estimate FILE``: the physics of one configuration. A thin typer layer over
:mod:`clusterplan.design.estimate`; this module only parses flags and renders."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.table import Table

from clusterplan.commands.options import Catalogs, options_command
from clusterplan.errors import FieldProblem, InputError, Location
from clusterplan.stdin import FILE_HELP
from clusterplan.wording import fmt

_FLAGS = {
    "workload": "--workload",
    "gpu": "--gpu",
    "count": "--count",
    "tp": "--tp",
    "pp": "--pp",
    "dp": "--dp",
    "ep": "--ep",
    "attention_dp": "--attention-dp",
    "zero": "--zero",
    "quant": "--quant",
    "kv_quant": "--kv-quant",
    "batch": "--batch",
    "recompute": "--recompute",
    "cp": "--cp",
    "vpp": "--vpp",
    "recompute_layers": "--recompute-layers",
    "optimizer": "--optimizer",
    "offload": "--offload",
    "deployment": "--deployment",
    "engine": "--engine",
}


# Estimate prints exact dollars and says "unknown" where a price is missing.
_usd = functools.partial(fmt.usd_exact, missing="unknown")


def _pinned(values: dict[str, Any]) -> Any:
    """Command-line knobs as a PinnedConfig; located errors name the flag."""
    from clusterplan.design.estimate import workload_ref
    from clusterplan.requirement.schema import PinnedConfig

    given = {k: v for k, v in values.items() if v is not None}
    if "workload" in given:
        given["workload"] = workload_ref(given["workload"])
    try:
        return PinnedConfig.model_validate(given)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            key = str(err["loc"][0]) if err["loc"] else ""
            msg = str(err["msg"])
            problems.append(
                FieldProblem(Location("command line"), _FLAGS.get(key, key), f"{msg}, got {err.get('input')!r}")
            )
        raise InputError(problems, fix="see clusterplan estimate --help") from None


# ------------------------------------------------------------------------------------------------
# Rendering (no logic: every number comes from the EstimateResult)
# ------------------------------------------------------------------------------------------------


def _table(title: str) -> Table:
    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(justify="right", overflow="fold")
    return t


def render(result: Any) -> list[Any]:
    """Rich renderables for an EstimateResult."""
    out: list[Any] = [*_status_lines(result), _memory_table(result)]
    if result.serving is not None:
        out += [_serving_speed_table(result.serving), _load_table(result.load)]
    else:
        out.append(_training_speed_table(result.training))
    costs = _cost_table(result)
    if costs.row_count:
        out.append(costs)
    out += _closing_lines(result)
    return out


def _layout(c: Any) -> str:
    """The layout in one phrase: tp (ep, attention DP) x cp x pp x dp or replicas."""
    cp = f" x cp {c.cp}" if c.cp and c.cp > 1 else ""
    serving = c.kind == "serving"
    moe = (f" (ep {c.ep})" if c.ep > 1 and serving else "") + (" (attention DP)" if c.attention_dp else "")
    layout = f"tp {c.tp}{moe}{cp} x pp {c.pp} x {'replicas' if serving else 'dp'} {c.dp}"
    if c.ep > 1 and not serving:
        layout += f", ep {c.ep} (experts over the dp x cp GPUs)"
    return layout


def _status_lines(result: Any) -> list[str]:
    """The configuration in one line, then feasible or not, what bounds it, and why."""
    c = result.config
    head = f"{result.requirement}: {c.kind} '{c.workload}' of {c.model} on {c.count} x {c.gpu_name} ({_layout(c)})"
    if c.kind == "serving":
        head += f", weights {c.quant}, KV {c.kv_quant}, batch {c.batch} per replica"
        if c.engine is not None:
            head += f", engine {c.engine} (cap {c.batch_cap:,})"
    else:
        vpp = f", {c.vpp} virtual stages" if c.vpp and c.vpp > 1 else ""
        rec = f"full, {c.recompute_layers} layers per stage" if c.recompute == "full" else c.recompute
        head += f", {c.precision}{vpp}, ZeRO {c.zero}, recompute {rec}, micro-batch {c.batch}"
        if c.memory_options:
            head += f", memory options: {', '.join(c.memory_options)}"
    status = "feasible" if result.feasible else "IMPOSSIBLE"
    return [
        head,
        f"status: {status}; bounded by {result.bound.replace('_', ' ')}",
        *(f"  - {r}" for r in result.reasons),
    ]


def _memory_table(result: Any) -> Table:
    m = (result.serving or result.training).memory
    mem = _table("\nMemory per GPU (most loaded), GiB")
    rows = [
        ("weights", m.weights_gib),
        ("KV cache", m.kv_cache_gib),
        ("activations", m.activations_gib),
        ("gradients", m.gradients_gib),
        ("optimizer", m.optimizer_gib),
        ("runtime overhead", m.runtime_overhead_gib),
        ("headroom", m.headroom_gib),
    ]
    for name, value in rows:
        if value > 0:
            mem.add_row(name, f"{value:,.2f}")
    mem.add_row("total / capacity", f"{m.total_gib:,.2f} / {m.capacity_gib:,.2f}")
    return mem


def _serving_speed_table(s: Any) -> Table:
    sp = _table("\nSpeed of one replica")
    sp.add_row("prefill (unloaded TTFT)", fmt.seconds(s.prefill_s))
    sp.add_row(f"decode step at batch {s.batch}", fmt.seconds(s.decode_step_s))
    if s.ep > 1:
        sp.add_row(f"  of which MoE all-to-all (EP{s.ep})", fmt.seconds(s.all_to_all_s))
    sp.add_row("time per output token at saturation", fmt.seconds(s.tpot_s))
    sp.add_row("end-to-end, mean request", fmt.seconds(s.e2e_s))
    sp.add_row("output tokens/s (saturated)", f"{s.output_tokens_per_s:,.0f}")
    sp.add_row("requests/s (saturated)", f"{s.requests_per_s:,.2f}")
    sp.add_row("max batch by memory", f"{s.max_batch_by_memory:,}")
    sp.add_row("compute precision", s.compute_precision)
    return sp


def _load_table(load: Any) -> Table:
    lat = load.latency
    lt = _table("\nAt the requested load")
    lt.add_row("demand average / peak", f"{load.average_requests_per_s:,.2f} / {load.peak_requests_per_s:,.2f} req/s")
    lt.add_row("per replica", f"{load.per_replica_requests_per_s:,.2f} req/s ({lat.utilisation:.0%} utilised)")
    lt.add_row("mean running batch", f"{lat.mean_running_batch:,.1f}")
    lt.add_row("TTFT mean / p95", f"{fmt.seconds(lat.mean_ttft_s)} / {fmt.seconds(lat.p95_ttft_s)}")
    lt.add_row("TPOT mean / p95", f"{fmt.seconds(lat.mean_tpot_s)} / {fmt.seconds(lat.p95_tpot_s)}")
    lt.add_row("end-to-end mean / p95", f"{fmt.seconds(lat.mean_e2e_s)} / {fmt.seconds(lat.p95_e2e_s)}")
    for check in load.targets:
        mark = "meets" if check.met else "MISSES"
        lt.add_row(f"target {check.name}", f"{mark} {fmt.seconds(check.target_s)}")
    lt.add_row("max rate meeting targets", f"{load.max_rate_for_targets_per_replica:,.2f} req/s per replica")
    r = load.rated
    lt.add_row(
        "p95 TTFT / TPOT / end-to-end at that rate",
        f"{fmt.seconds(r.p95_ttft_s)} / {fmt.seconds(r.p95_tpot_s)} / {fmt.seconds(r.p95_e2e_s)}",
    )
    return lt


def _training_speed_table(t: Any) -> Table:
    tt = _table("\nTraining speed")
    tt.add_row("step time", fmt.seconds(t.step_time_s))
    tt.add_row("  compute (incl. pipeline bubble)", fmt.seconds(t.compute_time_s))
    tt.add_row("  exposed communication", fmt.seconds(t.exposed_comm_time_s))
    for kind, seconds in (
        ("tensor parallel", t.exposed_tp_s),
        ("context parallel", t.exposed_cp_s),
        ("pipeline parallel", t.exposed_pp_s),
        ("data parallel", t.exposed_dp_s),
        ("expert parallel all-to-all", t.exposed_ep_s),
    ):
        tt.add_row(f"    {kind}", fmt.seconds(seconds))
    if t.offload_time_s > 0:
        tt.add_row("  host offload over PCIe", fmt.seconds(t.offload_time_s))
    tt.add_row("pipeline bubble", f"{t.bubble_fraction:.1%}")
    tt.add_row("tokens/s (all GPUs)", f"{t.tokens_per_s:,.0f}")
    tt.add_row("tokens/s per GPU", f"{t.tokens_per_s / t.gpus:,.0f}")
    tt.add_row("MFU", f"{t.mfu:.1%}")
    tt.add_row("time to train", fmt.seconds(t.time_to_train_s))
    return tt


def _operations_row(ct: Table, c: Any) -> None:
    """The operations inside a side's month, as the plan's cost lines word them (wording/fmt.operations_line)."""
    line = fmt.operations_line(c)
    if line is not None:
        ct.add_row("    of which operations", line.removeprefix("operations: "))


def _cost_table(result: Any) -> Table:
    ct = _table("\nCost (as solve prices it)")
    if result.cloud is not None:
        cl = result.cloud
        c = cl.costs
        ct.add_row("cloud", f"{cl.instances} x {cl.instance}")
        ct.add_row(f"  {cl.pricing.replace('_', '-')} rate", f"{_usd(cl.usd_per_hour)}/h")
        if cl.billed_hours is not None:
            ct.add_row(f"  training run ({cl.billed_hours} billed h)", _usd(c.one_off_usd))
        else:
            ct.add_row("  per month (730 h, operations)", _usd(c.monthly_usd))
            _operations_row(ct, c)
        ct.add_row(f"  total over {c.horizon_months:g} months", _usd(c.total_usd))
        if c.usd_per_million_output_tokens is not None:
            ct.add_row(
                f"  per million output tokens ({c.horizon_months:g} months)", _usd(c.usd_per_million_output_tokens)
            )
    if result.owned is not None:
        ow = result.owned
        c = ow.costs
        ct.add_row("owned", f"{ow.nodes} server(s) of {ow.gpus_per_node} GPUs")
        ct.add_row("  capital", _usd(c.capital_usd))
        ct.add_row(
            "  per month (energy, colocation, support, operations)",
            f"{_usd(c.monthly_usd)} ({ow.power_w / 1000:,.1f} kW)",
        )
        _operations_row(ct, c)
        ct.add_row(f"  total over {c.horizon_months:g} months", _usd(c.total_usd))
        if c.usd_per_million_output_tokens is not None:
            ct.add_row(
                f"  per million output tokens ({c.horizon_months:g} months)", _usd(c.usd_per_million_output_tokens)
            )
        ct.add_row(
            f"  amortised view: capital over {ow.amortisation_months:g} months + running costs",
            f"{_usd(ow.amortised_usd_per_month)}/month",
        )
    return ct


def _closing_lines(result: Any) -> list[str]:
    est = result.serving or result.training
    lines: list[str] = []
    if result.choices:
        lines.append("\nChosen for you:")
        lines += [f"  - {x}" for x in result.choices]
    notes = list(est.notes) + list(result.notes) + (list(result.owned.notes) if result.owned else [])
    if notes:
        lines.append("Notes:")
        lines += [f"  - {x}" for x in notes]
    if result.assumptions_overridden:
        lines.append("Assumptions overridden: " + ", ".join(result.assumptions_overridden))
    return lines


@dataclass(frozen=True)
class EstimateOptions:
    """``clusterplan estimate``'s arguments and options, in the order ``--help`` lists them."""

    file: Annotated[Path, typer.Argument(help=FILE_HELP)]
    gpu: Annotated[str | None, typer.Option("--gpu", help="Catalog GPU, e.g. h100-sxm.")] = None
    count: Annotated[int | None, typer.Option("--count", help="GPUs in total (default tp x pp x dp).")] = None
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor-parallel degree.")] = None
    pp: Annotated[int | None, typer.Option("--pp", help="Pipeline-parallel degree.")] = None
    dp: Annotated[
        int | None,
        typer.Option("--dp", help="Data-parallel degree (training) or replicas (serving)."),
    ] = None
    ep: Annotated[
        int | None,
        typer.Option(
            "--ep",
            help="Expert-parallel degree of an MoE model: serving, per stage dividing --tp; training and "
            "fine-tuning, carved out of the dp x cp GPUs (dividing the routed experts).",
        ),
    ] = None
    attention_dp: Annotated[
        bool | None,
        typer.Option("--attention-dp", help="Attention data-parallel over each stage's GPUs (serving an MoE model)."),
    ] = None
    zero: Annotated[int | None, typer.Option("--zero", help="ZeRO stage 0-3 (training).")] = None
    quant: Annotated[
        str | None, typer.Option("--quant", help="Weights: bf16, fp16, fp8, int8, fp4, int4 (serving).")
    ] = None
    kv_quant: Annotated[
        str | None,
        typer.Option("--kv-quant", help="KV cache: bf16, fp16, fp8, int8 (serving)."),
    ] = None
    batch: Annotated[
        int | None, typer.Option("--batch", help="Concurrency per replica, or micro-batch (training).")
    ] = None
    recompute: Annotated[str | None, typer.Option("--recompute", help="none, selective or full (training).")] = None
    cp: Annotated[
        int | None, typer.Option("--cp", help="Context-parallel degree: each sequence over cp GPUs (training).")
    ] = None
    vpp: Annotated[
        int | None, typer.Option("--vpp", help="Interleaved (virtual) pipeline chunks per stage (training).")
    ] = None
    recompute_layers: Annotated[
        int | None,
        typer.Option("--recompute-layers", help="With --recompute full: layers of each stage recomputed."),
    ] = None
    optimizer: Annotated[
        str | None,
        typer.Option("--optimizer", help="adamw, adamw8bit or paged_adamw8bit (training; default: chosen)."),
    ] = None
    offload: Annotated[
        str | None,
        typer.Option("--offload", help="optimizer, activations, both or none: host offload (training)."),
    ] = None
    workload: Annotated[
        str | None,
        typer.Option("--workload", help="Workload name or index (default the first)."),
    ] = None
    deployment: Annotated[str | None, typer.Option("--deployment", help="cloud or owned (default: the file's).")] = None
    engine: Annotated[
        str | None,
        typer.Option("--engine", help="Serving engine: vllm, sglang, tensorrt-llm (trtllm), exllamav2, llama.cpp."),
    ] = None
    as_json: Annotated[bool, typer.Option("--json", help="Print the estimate as JSON for tools.")] = False
    catalog: Catalogs = None
    arrival: Annotated[
        str | None,
        typer.Option(
            "--arrival",
            help="Simulate one replica's scheduler under a benchmark's traffic: closed:64 (64 clients, synchronized "
            "start), poisson:20/s, gamma:20/s:cv=2 (bursty) or trace:FILE (CSV/JSONL arrival_s,input_tokens,"
            "output_tokens); append :n=N (requests, default 1000), :range=R (lengths uniform within +-R) or :seed=S.",
        ),
    ] = None


def estimate(o: EstimateOptions) -> None:
    """Estimate memory, speed, latency and cost of one configuration; exit 1 if it cannot run."""
    from clusterplan.catalog.load import load_catalog
    from clusterplan.console import guarded, out_console
    from clusterplan.design.estimate import check_feasible, estimate_file

    def run() -> None:
        overrides = _pinned({name: getattr(o, name) for name in _FLAGS})
        cat = load_catalog(o.catalog or [])
        if o.arrival is not None:
            _simulated(o, cat, overrides)
            return
        result = estimate_file(o.file, cat, overrides)
        if o.as_json:
            typer.echo(json.dumps(result.model_dump(mode="json"), indent=2, allow_nan=False, default=str))
        else:
            for part in render(result):
                out_console.print(part, markup=False) if isinstance(part, str) else out_console.print(part)
        check_feasible(result)

    guarded(run)


def _simulated(o: EstimateOptions, cat: Any, overrides: Any) -> None:
    """``--arrival``: the estimate and its replica's simulated run, as a table or under ``simulation`` in JSON."""
    from clusterplan.console import out_console
    from clusterplan.design.estimate import check_feasible
    from clusterplan.design.estimate_sim import simulate_file

    assert o.arrival is not None
    result, simulated = simulate_file(o.file, cat, overrides, o.arrival)
    if o.as_json:
        dumped = result.model_dump(mode="json")
        dumped["simulation"] = simulated.model_dump(mode="json") if simulated is not None else None
        typer.echo(json.dumps(dumped, indent=2, allow_nan=False, default=str))
    else:
        parts = render(result)
        if simulated is not None:
            parts.insert(-len(_closing_lines(result)) or len(parts), _simulation_table(simulated))
        for part in parts:
            out_console.print(part, markup=False) if isinstance(part, str) else out_console.print(part)
    check_feasible(result)


def _simulation_table(s: Any) -> Table:
    """The simulated run's statistics (definitions: physics/schedule_sim.py)."""
    st = _table(f"\nSimulated one replica under {s.arrival} ({s.requests:,} requests, {s.definitions} definitions)")
    st.add_row(
        "scheduler",
        f"max_num_seqs {s.max_num_seqs:,}, token budget {s.chunk_tokens:,}, KV pool {s.kv_pool_tokens:,} tokens",
    )
    st.add_row("", "mean / p50 / p90 / p95 / p99")
    for name, d in (("TTFT", s.ttft), ("TPOT (first token excluded)", s.tpot), ("ITL", s.itl), ("end-to-end", s.e2e)):
        st.add_row(name, " / ".join(fmt.seconds(x) for x in (d.mean_s, d.p50_s, d.p90_s, d.p95_s, d.p99_s)))
    st.add_row("requests/s", f"{s.requests_per_s:,.2f}")
    st.add_row("output tokens/s", f"{s.output_tokens_per_s:,.0f}")
    st.add_row("goodput (meeting every target)", f"{s.goodput_requests_per_s:,.2f} req/s")
    st.add_row("mean running batch", f"{s.mean_running:,.1f}")
    st.add_row("preemptions", f"{s.preemptions:,}")
    for check in s.targets:
        st.add_row(f"target {check.name}", f"{'meets' if check.met else 'MISSES'} {fmt.seconds(check.target_s)}")
    return st


def register(app: typer.Typer) -> None:
    app.command()(options_command(EstimateOptions, estimate))
