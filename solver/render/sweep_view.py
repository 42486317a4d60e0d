"""Sweeps and frontiers as a rich table, CSV and JSON. Formatting only; the data is :mod:`clusterplan.whatif.sweep`
and :mod:`clusterplan.whatif.frontier`."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clusterplan.whatif.frontier import FrontierResult
from clusterplan.whatif.sweep import SweepResult
from clusterplan.whatif.vary import format_value
from clusterplan.wording.fmt import seconds, usd
from clusterplan.wording.safe import json_text, visible_lines


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    return f"{x:,.2f}{(' ' + unit) if unit else ''}"


def _binding_cell(binding: list[str] | None, empty: str) -> str:
    """A row's binding constraints; ``empty`` where none binds; blank where they were not worked out (None)."""
    if binding is None:
        return ""
    return ", ".join(binding) or empty


def _short_unit(unit: str) -> str:
    return {"requests/s": "req/s"}.get(unit, unit)


def sweep_table(result: SweepResult, console: Console) -> None:
    """One row per point; switch points in bold with what changed."""
    p = console.print
    p(
        f"[bold]{escape(result.requirement)}[/bold]  sweep of "
        + " x ".join(f"{escape(a.target.field)} ({len(a.values)})" for a in result.axes)
        + f"  objective: {result.objective}"
    )
    t = Table(show_lines=False)
    for a in result.axes:
        t.add_column(escape(a.target.field), justify="right", no_wrap=True)
    for col in ("status", "GPUs", "parallelism", "quant", "total cost", "throughput", "p95", "binding", "change"):
        t.add_column(col, overflow="fold")
    tp_unit = _short_unit(result.throughput_unit)
    for r in result.rows:
        cells = [format_value(v, a.target.quantity) for a, v in zip(result.axes, r.values, strict=True)]
        style = "bold" if r.switch else ("dim" if r.shape is None else None)
        change = "switch" if r.switch else r.change  # the new design is in the row itself
        t.add_row(
            *cells,
            r.status,
            escape(f"{r.gpus} ({r.deployment})" if r.gpus else "-"),
            escape(r.parallelism or "-"),
            escape(r.quantization or "-"),
            usd(r.total_usd),
            _num(r.throughput, tp_unit),
            seconds(r.p95_latency_s),
            escape(_binding_cell(r.binding, r.detail if r.shape is None else "-")),
            escape(change),
            style=style,
        )
    console.print(t)
    if result.switches:
        switch_table(result, console)
    for note in result.notes:
        p(f"- {escape(note)}")


def _side(shape: str | None, design: str | None, total_usd: float | None, status: str) -> str:
    if shape is None:
        return status
    return f"{shape}  [{design}, {usd(total_usd)}]"


def switch_table(result: SweepResult, console: Console) -> None:
    """The bisected switch points: the value where the design changes and the designs on either side."""
    axis = result.axes[0]
    q = axis.target.quantity
    t = Table(title="switch points (bisected)", title_justify="left")
    for other in result.axes[1:]:
        t.add_column(escape(other.target.field), justify="right", no_wrap=True)
    for col in (f"{axis.target.field} ≈", "between", "design below", "design above"):
        t.add_column(escape(col), overflow="fold")
    for sp in result.switches:
        below, above = sp.before, sp.after
        t.add_row(
            *(format_value(v, ax.target.quantity) for ax, v in zip(result.axes[1:], sp.others, strict=True)),
            format_value(sp.at, q),
            f"{format_value(below.value, q)} .. {format_value(above.value, q)}",
            escape(_side(below.shape, below.design, below.total_usd, below.status)),
            escape(_side(above.shape, above.design, above.total_usd, above.status)),
        )
    console.print(t)


CSV_INJECTION = ("=", "+", "@", "\t", "\r")


def _cell(value: object) -> object:
    """Strings a spreadsheet would run as a formula get a leading quote (names can come from a user catalog)."""
    if isinstance(value, str) and value.startswith(CSV_INJECTION):
        return "'" + value
    return value


def _csv(header: list[str], rows: list[list[object]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow([_cell(c) for c in row])
    return visible_lines(buf.getvalue())


def sweep_csv(result: SweepResult) -> str:
    """One line per point; numbers in base units (USD, seconds, the throughput unit)."""
    header = [
        *(f"{a.target.field} ({a.target.unit})" if a.target.unit else a.target.field for a in result.axes),
        "status",
        "design",
        "shape",
        "gpus",
        "deployment",
        "parallelism",
        "quantization",
        "total_usd",
        "capital_usd",
        "monthly_usd",
        f"throughput ({result.throughput_unit})",
        "p95_latency_s",
        f"objective ({result.objective_unit})",
        "binding",
        "switch",
        "change",
        "detail",
    ]
    rows: list[list[object]] = [
        [
            *r.values,
            r.status,
            r.design or "",
            r.shape or "",
            r.gpus or "",
            r.deployment or "",
            r.parallelism or "",
            r.quantization or "",
            "" if r.total_usd is None else round(r.total_usd, 2),
            "" if r.capital_usd is None else round(r.capital_usd, 2),
            "" if r.monthly_usd is None else round(r.monthly_usd, 2),
            "" if r.throughput is None else round(r.throughput, 4),
            "" if r.p95_latency_s is None else round(r.p95_latency_s, 4),
            "" if r.objective_value is None else round(r.objective_value, 4),
            "; ".join(r.binding or []),
            "yes" if r.switch else "",
            r.change,
            r.detail,
        ]
        for r in result.rows
    ]
    return _csv(header, rows)


def _md(text: str) -> str:
    """One Markdown table cell: pipes escaped, newlines as breaks."""
    return text.replace("|", "\\|").replace("\n", "<br>")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows]
    return lines


def sweep_markdown(result: SweepResult) -> str:
    """The sweep as Markdown: one row per point, the bisected switch points, the notes."""
    fields = " x ".join(f"{a.target.field} ({len(a.values)})" for a in result.axes)
    out = [f"# {_md(result.requirement)}: sweep of {_md(fields)}", "", f"Objective: {result.objective}.", ""]
    tp_unit = _short_unit(result.throughput_unit)
    out += _md_table(
        [*(a.target.field for a in result.axes), "status", "design", "total cost", "throughput", "p95", "binding"],
        [
            [
                *(format_value(v, a.target.quantity) for a, v in zip(result.axes, r.values, strict=True)),
                r.status + (" (switch)" if r.switch else ""),
                f"{r.shape} [{r.design}]" if r.shape else "-",
                usd(r.total_usd),
                _num(r.throughput, tp_unit),
                seconds(r.p95_latency_s),
                _binding_cell(r.binding, "-"),
            ]
            for r in result.rows
        ],
    )
    if result.switches:
        axis = result.axes[0]
        q = axis.target.quantity
        out += ["", "## Switch points", ""]
        out += _md_table(
            [*(a.target.field for a in result.axes[1:]), f"{axis.target.field} ≈", "between", "below", "above"],
            [
                [
                    *(format_value(v, a.target.quantity) for a, v in zip(result.axes[1:], sp.others, strict=True)),
                    format_value(sp.at, q),
                    f"{format_value(sp.before.value, q)} .. {format_value(sp.after.value, q)}",
                    _side(sp.before.shape, sp.before.design, sp.before.total_usd, sp.before.status),
                    _side(sp.after.shape, sp.after.design, sp.after.total_usd, sp.after.status),
                ]
                for sp in result.switches
            ],
        )
    if result.notes:
        out += ["", *(f"- {_md(n)}" for n in result.notes)]
    return visible_lines("\n".join(out) + "\n")


def sweep_json(result: SweepResult) -> str:
    return json_text(json.dumps(result.model_dump(mode="json"), indent=2, sort_keys=False) + "\n")


def frontier_table(result: FrontierResult, console: Console) -> None:
    """The frontier points only, cheapest first; dominated and infeasible points are counted in the notes."""
    latency = result.against == "latency"
    console.print(
        f"[bold]{escape(result.requirement)}[/bold]  Pareto frontier of cost against "
        f"{'p95 latency' if latency else 'throughput'}"
    )
    t = Table()
    for col in ("p95 target" if latency else "budget", "design", "total cost", "p95", "throughput"):
        t.add_column(col, overflow="fold")
    for p in result.frontier:
        level = seconds(p.p95_target_s) if latency else usd(p.budget_usd)
        t.add_row(
            level if (p.p95_target_s or p.budget_usd) else "(least cost)",
            escape(f"{p.shape}  [{p.design}]"),
            usd(p.total_usd),
            seconds(p.p95_latency_s),
            _num(p.throughput, _short_unit(result.throughput_unit)),
        )
    console.print(t)
    for note in result.notes:
        console.print(f"- {escape(note)}")


def frontier_csv(result: FrontierResult) -> str:
    header = [
        "p95_target_s",
        "budget_usd",
        "status",
        "design",
        "shape",
        "total_usd",
        "p95_latency_s",
        f"throughput ({result.throughput_unit})",
        "on_frontier",
    ]
    rows: list[list[object]] = [
        [
            "" if p.p95_target_s is None else p.p95_target_s,
            "" if p.budget_usd is None else p.budget_usd,
            p.status,
            p.design or "",
            p.shape or "",
            "" if p.total_usd is None else round(p.total_usd, 2),
            "" if p.p95_latency_s is None else round(p.p95_latency_s, 4),
            "" if p.throughput is None else round(p.throughput, 4),
            "yes" if p.on_frontier else "",
        ]
        for p in result.points
    ]
    return _csv(header, rows)


def frontier_json(result: FrontierResult) -> str:
    return json_text(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
