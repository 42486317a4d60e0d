"""``clusterplan compare`` as a terminal table or Markdown. Formatting only; the data is
:class:`clusterplan.design.compare.Comparison`."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from clusterplan.design.compare import Comparison, DeploymentFigures, GpuComparison
from clusterplan.errors import printable
from clusterplan.wording import selfhost as api_words
from clusterplan.wording.fmt import seconds, usd, usd_3sf, usd_per_m
from clusterplan.wording.safe import visible_lines

FIT_COLUMNS = ("GPU", "fits", "layout", "memory / GPU", "speed", "W / GPU", "W / replica")
COST_COLUMNS = ("GPU", "deployment", "offering", "per GPU", "total", "$/M tok", "$ per TB/s", "$ per dense TFLOPS")


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def _layout(r: GpuComparison, kind: str) -> str:
    if not r.feasible and r.count is None:
        return "-"
    if kind == "serving":
        return f"{r.count} GPUs: {r.layout}"
    return f"{r.count} GPUs: TP{r.tp} PP{r.pp} x dp {r.dp}"


def _memory(r: GpuComparison) -> str:
    if r.memory_total_gib is None or r.memory_capacity_gib is None:
        return "-"
    if r.kv_cache_gib and r.weights_gib is not None:
        kv = f"weights {r.weights_gib:,.1f} + KV {r.kv_cache_gib:,.1f}"
        return f"{kv} = {r.memory_total_gib:,.1f} of {r.memory_capacity_gib:,.1f} GiB"
    weights = "" if r.weights_gib is None else f" (weights {r.weights_gib:,.1f})"
    return f"{r.memory_total_gib:,.1f} of {r.memory_capacity_gib:,.1f} GiB{weights}"


def _speed(r: GpuComparison) -> str:
    if not r.feasible and r.count is None:
        return "-"
    if r.output_tokens_per_s_per_replica is not None:
        within = _num(r.output_tokens_per_s_within_targets)
        return f"{_num(r.output_tokens_per_s_per_replica)} tok/s per replica ({within} within targets)"
    return f"{_num(r.tokens_per_s)} tok/s, {seconds(r.time_to_train_s)} to train"


def _power(r: GpuComparison) -> tuple[str, str]:
    """Owned figures (with the server overhead) when owned, else the board's TDP."""
    d = r.owned or r.cloud
    if d is None:
        per_replica = "-" if r.gpus_per_replica is None else f"{r.tdp_w * r.gpus_per_replica:,.0f}"
        return f"{r.tdp_w:,.0f}", per_replica
    return f"{d.power_w_per_gpu:,.0f}", f"{d.power_w_per_replica:,.0f}"


def fit_rows(c: Comparison) -> list[list[str]]:
    rows = []
    for r in c.rows:
        fits = "yes" if r.feasible else "no"
        if r.feasible and r.meets_targets is False:
            fits = "yes, misses targets" if c.kind == "serving" else "yes, misses deadline"
        w_gpu, w_rep = _power(r)
        rows.append([r.gpu_name, fits, _layout(r, c.kind), _memory(r), _speed(r), w_gpu, w_rep])
    return rows


def _per_gpu(d: DeploymentFigures) -> tuple[str, str]:
    """The price the ratios divide (cloud: $/GPU-hour; owned: capital per GPU slot) and its unit suffix."""
    if d.kind == "cloud":
        return f"{usd(d.usd_per_gpu_hour)}/h", "/h"
    if d.kind == "owned":
        return usd(d.capital_usd_per_gpu), ""
    return "-", ""


def cost_rows(c: Comparison) -> list[list[str]]:
    rows = []
    for r in c.rows:
        for d in r.deployments():
            price, suffix = _per_gpu(d)
            rows.append(
                [
                    r.gpu_name,
                    d.kind,
                    d.hardware or f"{d.units} x {d.label}",
                    price,
                    usd(d.costs.total_usd),
                    usd(d.usd_per_million_tokens),
                    f"{usd_3sf(d.usd_per_tb_per_s)}{suffix}",
                    f"{usd_3sf(d.usd_per_dense_tflops)}{suffix} ({r.compute_precision})",
                ]
            )
    return rows


def api_table(c: Comparison) -> tuple[list[str], list[list[str]]] | None:
    """Self-host versus API: each design's cost per month and per million tokens, and its break-even per API."""
    v = c.self_host_vs_api
    if v is None or not v.quotes or not v.designs:
        return None
    cols = ["design", "per month", "$/M tok (in+out)", *(api_words.quote_column(q) for q in v.quotes)]
    rows = [
        [d.label, usd(d.usd_per_month), usd_per_m(d.usd_per_million_tokens)]
        + [api_words.break_even_cell(b) for b in d.break_even]
        for d in v.designs
    ]
    return cols, rows


def _tables(c: Comparison) -> list[tuple[str, tuple[str, ...] | list[str], list[list[str]]]]:
    out: list[tuple[str, tuple[str, ...] | list[str], list[list[str]]]] = [
        ("Fit and speed", FIT_COLUMNS, fit_rows(c)),
        ("Cost", COST_COLUMNS, cost_rows(c)),
    ]
    api = api_table(c)
    if api is not None:
        out.append((api_words.TITLE, *api))
    return out


def heading(c: Comparison) -> str:
    precision = f", precision {c.precision}" if c.precision else ""
    return (
        f"{c.requirement}: {c.kind} '{c.workload}' of {c.model}{precision}; costs over {c.horizon_months:g} months, "
        "cheapest offering of each deployment, as solve prices it"
    )


def footnotes(c: Comparison) -> list[str]:
    out = [
        "$ per TB/s and per dense TFLOPS: cloud, the instance's $/GPU-hour; owned, capital per GPU slot "
        "(GPU + its share of chassis and network).",
        "$/M tok: serving, total over the horizon / the workload's average output tokens (solve's figure); "
        "training, total / trained tokens.",
        "W / GPU: owned server at full load with its overhead, per GPU (the board TDP where only cloud prices it).",
    ]
    out += list(c.notes)
    if c.self_host_vs_api is not None:
        out += api_words.notes(c.self_host_vs_api)
    for r in c.rows:
        out += [f"{r.gpu_name}: {x}" for x in r.reasons + r.notes]
    return out


def table(c: Comparison) -> list[Table | str]:
    """Rich renderables: a heading, the fit-and-speed table, the cost table and the notes."""
    out: list[Table | str] = [printable(heading(c))]
    for title, cols, rows in _tables(c):
        t = Table(title=title, title_justify="left")
        for col in cols:
            left = col in ("GPU", "offering", "layout", "design")
            t.add_column(col, overflow="fold", justify="left" if left else "right")
        for row in rows:
            t.add_row(*(escape(printable(x)) for x in row))
        out.append(t)
    out += [f"  - {printable(x)}" for x in footnotes(c)]
    return out


def _cell(text: str) -> str:
    return printable(text).replace("|", "\\|")


def markdown(c: Comparison) -> str:
    out = [f"# GPU comparison: {_cell(c.model)}", "", _cell(heading(c)) + ".", ""]
    for title, cols, rows in _tables(c):
        out += [f"## {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in rows]
        out.append("")
    out += [f"- {_cell(x)}" for x in footnotes(c)]
    return visible_lines("\n".join(out) + "\n")
