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
    "burst": "--burst",
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


ROLES = ("prefill", "decode")
# A pool group's own flags (--prefill-tp, --decode-count, ...), each repeatable: the i-th of each is group i.
POOL_KEYS = ("gpu", "count", "tp", "pp", "ep", "quant", "kv_quant", "batch", "deployment")
# The plain flags a pool takes as its defaults (--count and --dp size one aggregated group: refused beside pools).
POOL_DEFAULTS = (
    "workload",
    "gpu",
    "tp",
    "pp",
    "ep",
    "attention_dp",
    "quant",
    "kv_quant",
    "batch",
    "deployment",
    "engine",
)
LOCATION = Location("command line")


def _pinned(values: dict[str, Any], flags: dict[str, str] = _FLAGS) -> Any:
    """Command-line knobs as a PinnedConfig; located errors name the flag (``flags``: field to flag)."""
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
            problems.append(FieldProblem(LOCATION, flags.get(key, key), f"{msg}, got {err.get('input')!r}"))
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
        out.append(_serving_speed_table(result.serving, pooled=result.pool is not None))
        out.append(_pool_table(result.pool) if result.pool is not None else _load_table(result.load))
    else:
        out.append(_training_speed_table(result.training))
    costs = _cost_table(result)
    if costs.row_count:
        out.append(costs)
    if result.autoscaler is not None:  # a demand profile's fleet: in the month above, its burst tier included
        out.append("  " + fmt.autoscaler_words(result.config.workload, result.autoscaler))
    out += _closing_lines(result)
    return out


def render_design(d: Any) -> list[Any]:
    """Rich renderables for a DesignEstimate: each group's estimate, then the design as a whole."""
    kind = "prefill and decode pools" if d.disaggregated else "replica group(s)"
    out: list[Any] = [f"{d.requirement}: workload '{d.workload}' as {d.source}: {len(d.parts)} {kind}"]
    for i, part in enumerate(d.parts, 1):
        c = part.config
        role = "" if c.role == "aggregated" else f" {c.role} pool"
        share = f" taking {c.share:.0%} of the demand" if c.share < 1 else ""
        role = f" ({role.strip()}{',' if role and share else ''}{share})" if role or share else ""
        out.append(f"\n--- group {i} of {len(d.parts)}{role}: {c.count} x {c.gpu_name} ---")
        out += render(part)
    whole = _table("\nThe design as a whole")
    if d.capacity_rps is not None:
        whole.add_row("peak demand / capacity within targets", f"{d.demand_rps:,.2f} / {d.capacity_rps:,.2f} req/s")
        whole.add_row("p95 end-to-end at the rated rates", fmt.seconds(d.p95_e2e_s))
    if d.costs is not None:
        c = d.costs
        whole.add_row("capital", _usd(c.capital_usd))
        whole.add_row("per month", _usd(c.monthly_usd))
        if c.one_off_usd:
            whole.add_row("one-off (training runs)", _usd(c.one_off_usd))
        whole.add_row(f"total over {c.horizon_months:g} months", _usd(c.total_usd))
        if c.usd_per_million_output_tokens is not None:
            whole.add_row("per million output tokens", _usd(c.usd_per_million_output_tokens))
    out.append(whole)
    if d.autoscaler is not None:  # a demand profile's fleet: in the month above, its burst tier included
        out.append("  " + fmt.autoscaler_words(d.workload, d.autoscaler))
    return out


def _layout(c: Any) -> str:
    """The layout in one phrase: tp (ep, attention DP) x cp x pp x dp or replicas."""
    cp = f" x cp {c.cp}" if c.cp and c.cp > 1 else ""
    serving = c.kind == "serving"
    moe = (f" (ep {c.ep})" if c.ep > 1 and serving else "") + (" (attention DP)" if c.attention_dp else "")
    layout = f"tp {c.tp}{moe}{cp} x pp {c.pp} x {'replicas' if serving else 'dp'} {c.dp}"
    if c.burst:  # a demand profile's: rented for the busy hours, every one of them running at the peak hour
        layout += f" + {c.burst} burst"
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


def _serving_speed_table(s: Any, *, pooled: bool = False) -> Table:
    """One replica's speeds; a pool replica (``pooled``) without the saturated figures of a replica that both
    prefills and decodes (its pool's own rates follow)."""
    sp = _table("\nSpeed of one replica")
    sp.add_row("prefill (unloaded TTFT)", fmt.seconds(s.prefill_s))
    sp.add_row(f"decode step at batch {s.batch}", fmt.seconds(s.decode_step_s))
    if s.ep > 1:
        sp.add_row(f"  of which MoE all-to-all (EP{s.ep})", fmt.seconds(s.all_to_all_s))
    if pooled:
        sp.add_row("max batch by memory", f"{s.max_batch_by_memory:,}")
        sp.add_row("compute precision", s.compute_precision)
        return sp
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


def _pool_table(pool: Any) -> Table:
    """A prefill or decode pool under its share of the demand (no means: the pools' are not modelled)."""
    pt = _table(f"\nAt the requested load ({pool.role} pool)")

    def seconds(x: float | None) -> str:  # a p95 at the requested load is None where the queue grows unbounded
        return "unbounded" if x is None else fmt.seconds(x)

    pt.add_row("demand average / peak", f"{pool.average_requests_per_s:,.2f} / {pool.peak_requests_per_s:,.2f} req/s")
    pt.add_row("per replica", f"{pool.per_replica_requests_per_s:,.2f} req/s ({pool.utilisation:.0%} utilised)")
    if pool.role == "prefill":
        pt.add_row("KV transfer to the decode pool", fmt.seconds(pool.kv_transfer_s))
        pt.add_row("p95 TTFT (wait, prefill, KV transfer)", seconds(pool.p95_ttft_s))
    else:
        pt.add_row("p95 first step / TPOT", f"{seconds(pool.p95_ttft_s)} / {seconds(pool.p95_tpot_s)}")
        pt.add_row("p95 decode part of end-to-end", seconds(pool.p95_e2e_s))
    for check in pool.targets:
        mark = "meets" if check.met else "MISSES"
        pt.add_row(f"target {check.name}", f"{mark} {fmt.seconds(check.target_s)}")
    pt.add_row("max rate meeting its targets", f"{pool.rate_rps:,.2f} req/s per replica")
    rated = fmt.seconds(pool.rated_p95_ttft_s)
    if pool.role == "decode":
        rated += f" / {fmt.seconds(pool.rated_p95_tpot_s)} / {fmt.seconds(pool.rated_p95_e2e_s)}"
        pt.add_row("p95 first step / TPOT / decode part at that rate", rated)
    else:
        pt.add_row("p95 TTFT at that rate", rated)
    return pt


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
            burst = ", burst replicas" if c.burst_usd_per_month else ""
            ct.add_row(f"  per month (730 h, operations{burst})", _usd(c.monthly_usd))
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
            "  per month (energy, colocation, support, operations"
            + (", burst replicas)" if c.burst_usd_per_month else ")"),
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
    burst: Annotated[
        int | None,
        typer.Option(
            "--burst",
            help="Serving with a demand profile: replicas rented by the hour for the busy hours, beside the --dp "
            "that run every hour (priced as solve prices its burst tier).",
        ),
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
    design: Annotated[
        Path | None,
        typer.Option(
            "--design",
            help="A plan written by 'clusterplan solve --json': estimate its design --index (every replica group "
            "and pool, as solve chose them).",
        ),
    ] = None
    index: Annotated[int, typer.Option("--index", help="With --design: which design (1 = the best).")] = 1
    prefill_gpu: Annotated[
        list[str] | None,
        typer.Option("--prefill-gpu", help="Catalog GPU of each prefill group (repeat per group; default --gpu)."),
    ] = None
    prefill_count: Annotated[
        list[int] | None, typer.Option("--prefill-count", help="GPUs in each prefill group (repeat per group).")
    ] = None
    prefill_tp: Annotated[
        list[int] | None,
        typer.Option("--prefill-tp", help="Tensor-parallel degree of each prefill group (default --tp)."),
    ] = None
    prefill_pp: Annotated[
        list[int] | None, typer.Option("--prefill-pp", help="Pipeline stages of each prefill group (default --pp).")
    ] = None
    prefill_ep: Annotated[
        list[int] | None,
        typer.Option("--prefill-ep", help="Expert-parallel degree of each prefill group (default --ep)."),
    ] = None
    prefill_quant: Annotated[
        list[str] | None, typer.Option("--prefill-quant", help="Weights of each prefill group (default --quant).")
    ] = None
    prefill_kv_quant: Annotated[
        list[str] | None,
        typer.Option("--prefill-kv-quant", help="KV cache of each prefill group (default --kv-quant)."),
    ] = None
    prefill_batch: Annotated[
        list[int] | None,
        typer.Option("--prefill-batch", help="Concurrency cap per prefill replica (default: the engine's largest)."),
    ] = None
    prefill_deployment: Annotated[
        list[str] | None,
        typer.Option("--prefill-deployment", help="cloud or owned, per prefill group (default --deployment)."),
    ] = None
    prefill_attention_dp: Annotated[
        bool | None, typer.Option("--prefill-attention-dp", help="Attention data-parallel in the prefill pool (MoE).")
    ] = None
    decode_gpu: Annotated[
        list[str] | None,
        typer.Option("--decode-gpu", help="Catalog GPU of each decode group (repeat per group; default --gpu)."),
    ] = None
    decode_count: Annotated[
        list[int] | None, typer.Option("--decode-count", help="GPUs in each decode group (repeat per group).")
    ] = None
    decode_tp: Annotated[
        list[int] | None,
        typer.Option("--decode-tp", help="Tensor-parallel degree of each decode group (default --tp)."),
    ] = None
    decode_pp: Annotated[
        list[int] | None, typer.Option("--decode-pp", help="Pipeline stages of each decode group (default --pp).")
    ] = None
    decode_ep: Annotated[
        list[int] | None,
        typer.Option("--decode-ep", help="Expert-parallel degree of each decode group (default --ep)."),
    ] = None
    decode_quant: Annotated[
        list[str] | None, typer.Option("--decode-quant", help="Weights of each decode group (default --quant).")
    ] = None
    decode_kv_quant: Annotated[
        list[str] | None, typer.Option("--decode-kv-quant", help="KV cache of each decode group (default --kv-quant).")
    ] = None
    decode_batch: Annotated[
        list[int] | None,
        typer.Option("--decode-batch", help="Concurrency cap per decode replica (default: the engine's largest)."),
    ] = None
    decode_deployment: Annotated[
        list[str] | None,
        typer.Option("--decode-deployment", help="cloud or owned, per decode group (default --deployment)."),
    ] = None
    decode_attention_dp: Annotated[
        bool | None, typer.Option("--decode-attention-dp", help="Attention data-parallel in the decode pool (MoE).")
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


def _flag(role: str, key: str) -> str:
    return f"--{role}-{key.replace('_', '-')}"


def _pools_given(o: EstimateOptions) -> list[str]:
    """The pool flags given, as written."""
    keys = (*POOL_KEYS, "attention_dp")
    return [_flag(r, k) for r in ROLES for k in keys if getattr(o, f"{r}_{k}") not in (None, [])]


def _pool_pins(o: EstimateOptions, role: str) -> list[Any]:
    """One PinnedConfig per group of one pool: its i-th flags (a flag given once applies to every group), the plain
    flags as defaults."""
    lists: dict[str, list[Any]] = {k: list(getattr(o, f"{role}_{k}") or []) for k in POOL_KEYS}
    groups = max(len(v) for v in lists.values())
    attention_dp = getattr(o, f"{role}_attention_dp")
    if groups == 0 and attention_dp is None:
        return []
    for key, given in lists.items():
        if len(given) not in (0, 1, groups):
            problem = f"given {len(given)} times for {groups} {role} groups"
            raise InputError(
                [FieldProblem(LOCATION, _flag(role, key), problem)],
                fix=f"give each --{role}-* flag once (every group) or once per group, in the same order",
            )
    flags = {k: _FLAGS[k] for k in POOL_DEFAULTS} | {k: _flag(role, k) for k in POOL_KEYS}
    flags["attention_dp"] = _flag(role, "attention_dp") if attention_dp is not None else _FLAGS["attention_dp"]
    pins = []
    for i in range(max(groups, 1)):
        values = {k: getattr(o, k) for k in POOL_DEFAULTS}
        values |= {k: v[i] if len(v) == groups else v[0] for k, v in lists.items() if v}
        if attention_dp is not None:
            values["attention_dp"] = attention_dp
        pins.append(_pinned({**values, "role": role}, flags))
    return pins


def _design_result(o: EstimateOptions, catalog: Any) -> Any:
    """``--design PLAN.json`` (its design ``--index``) or the pool flags: every group estimated, the whole priced."""
    from clusterplan.design.estimate_design import design_pins, estimate_design, read_design
    from clusterplan.requirement.schema import PinnedConfig
    from clusterplan.stdin import load_requirement_arg

    resolved = load_requirement_arg(o.file, catalog)
    if o.design is not None:
        pinned = [flag for name, flag in _FLAGS.items() if name not in ("workload", "engine") and getattr(o, name)]
        pinned += _pools_given(o)
        if pinned:
            raise InputError(
                [FieldProblem(LOCATION, pinned[0], "the design file fixes the layout")],
                fix=f"drop {', '.join(pinned)}, or drop --design to pin a layout by hand",
            )
        design = read_design(o.design, o.index)
        pins = design_pins(design, resolved.requirement, o.workload)
        if o.engine is not None:
            pins = [PinnedConfig.model_validate(p.model_dump(exclude_none=True) | {"engine": o.engine}) for p in pins]
        source = f"{o.design} design {o.index}"
    else:
        sized = [_FLAGS[k] for k in ("count", "dp", "burst") if getattr(o, k) is not None]
        if sized:
            raise InputError(
                [FieldProblem(LOCATION, sized[0], "sizes aggregated replicas, not a pool")],
                fix="size each pool with --prefill-count and --decode-count",
            )
        pins = _pool_pins(o, "prefill") + _pool_pins(o, "decode")
        source = "command line"
    return estimate_design(resolved.requirement, list(resolved.models), catalog, pins, source)


def estimate(o: EstimateOptions) -> None:
    """Estimate memory, speed, latency and cost of one configuration; exit 1 if it cannot run."""
    from clusterplan.catalog.load import load_catalog
    from clusterplan.console import guarded, out_console
    from clusterplan.design.estimate import check_feasible, estimate_file

    def run() -> None:
        if o.design is None and o.index != 1:
            raise InputError([FieldProblem(LOCATION, "--index", "needs --design")], fix="give --design PLAN.json")
        cat = load_catalog(o.catalog or [])
        if o.arrival is not None:
            _simulated(o, cat, _pinned({name: getattr(o, name) for name in _FLAGS}))
            return
        if o.design is not None or _pools_given(o):
            design = _design_result(o, cat)
            parts, results = render_design(design), design.parts
            data = design.model_dump(mode="json")
        else:
            result = estimate_file(o.file, cat, _pinned({name: getattr(o, name) for name in _FLAGS}))
            parts, results = render(result), [result]
            data = result.model_dump(mode="json")
        if o.as_json:
            typer.echo(json.dumps(data, indent=2, allow_nan=False, default=str))
        else:
            for part in parts:
                out_console.print(part, markup=False) if isinstance(part, str) else out_console.print(part)
        for result in results:
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
