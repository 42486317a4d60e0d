"""Plots of sweeps, frontiers and memory breakdowns: matplotlib's Agg canvas, PNG or SVG bytes.

Rendering only: every number and label comes from the data (:mod:`clusterplan.whatif.sweep`,
:mod:`clusterplan.review.records`). Output is deterministic, so a report or plot is byte-identical run
to run: figures are made with :class:`matplotlib.figure.Figure` on an Agg canvas (no pyplot, no global
backend), inside one fixed rc context (DejaVu Sans, which matplotlib ships; SVG glyphs as paths;
``svg.hashsalt`` for stable ids), and saved without dates or version strings in the metadata.
Labels never go through mathtext (``text.parse_math`` off), so ``$1.2M`` is a price, not a formula.

matplotlib is imported when a figure is drawn, not with this module: importing it takes half a second,
and a command imports this module to check a ``--plot`` file name whether or not it plots.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from clusterplan.whatif.sweep import Axis, FrontierResult, SweepResult, SweepRow, format_value, series

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from clusterplan.review.records import MemoryBar

Format = Literal["png", "svg"]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
INFEASIBLE_COLOUR = "#bbbbbb"
MEMORY_PARTS = (
    ("weights_gib", "weights", "#1f77b4"),
    ("kv_cache_gib", "KV cache", "#ff7f0e"),
    ("activations_gib", "activations", "#2ca02c"),
    ("gradients_gib", "gradients", "#9467bd"),
    ("optimizer_gib", "optimizer states", "#8c564b"),
    ("runtime_overhead_gib", "runtime", "#7f7f7f"),
    ("headroom_gib", "headroom", "#dddddd"),
)

RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "svg.fonttype": "path",
    "svg.hashsalt": "clusterplan",
    "text.parse_math": False,
    "text.usetex": False,
    "path.simplify": True,
}  # and "axes.prop_cycle": PALETTE, set in style (a cycler needs matplotlib's import)


MATPLOTLIB_FOLDER = "matplotlib"  # matplotlib's font cache and configuration, inside clusterplan's cache folder


def prepare_matplotlib() -> None:
    """Keep matplotlib's files under clusterplan's cache folder (``matplotlib`` in ``catalog.cache.cache_root``), or,
    with caching off, in a temporary folder removed once its font list is built: never ``~/.cache/matplotlib`` or
    ``~/.config/matplotlib``. A ``MPLCONFIGDIR`` the user set is theirs and kept. Call before importing matplotlib."""
    if "matplotlib" in sys.modules or os.environ.get("MPLCONFIGDIR"):
        return
    from clusterplan.catalog.cache import cache_root

    root = cache_root()
    if root is not None:
        with contextlib.suppress(OSError):
            (root / MATPLOTLIB_FOLDER).mkdir(mode=0o700, parents=True, exist_ok=True)
            os.environ["MPLCONFIGDIR"] = str(root / MATPLOTLIB_FOLDER)
            return
    with tempfile.TemporaryDirectory(prefix="clusterplan-matplotlib-") as folder:
        os.environ["MPLCONFIGDIR"] = folder
        try:
            import matplotlib.font_manager  # noqa: F401 - builds the font list, the one file matplotlib writes
        finally:
            del os.environ["MPLCONFIGDIR"]


def load_matplotlib() -> None:
    """Import matplotlib and its Agg canvas now, as drawing a figure would (half a second): for a caller that has
    that time free, waiting on something else."""
    prepare_matplotlib()
    import matplotlib.figure  # noqa: F401
    from matplotlib.backends import backend_agg  # noqa: F401


@contextmanager
def style() -> Iterator[None]:
    """matplotlib's settings for every figure, its warnings kept off the terminal (a warning line names a file of
    the installed package, not anything a user can act on)."""
    prepare_matplotlib()
    import matplotlib
    from cycler import cycler

    rc: Any = {**RC, "axes.prop_cycle": cycler(color=list(PALETTE))}
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _figure(width_in: float, height_in: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in))


def save(fig: Figure, fmt: Format) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    if fmt == "svg":
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "clusterplan"})
    elif fmt == "png":
        fig.savefig(buf, format="png", metadata={"Software": None})
    else:  # pragma: no cover - callers check the suffix
        raise ValueError(f"unsupported plot format {fmt!r}")
    return buf.getvalue()


def format_of(path_suffix: str) -> Format | None:
    """'.png' -> 'png', '.svg' -> 'svg', anything else -> None."""
    suffix = path_suffix.lower().lstrip(".")
    return suffix if suffix in ("png", "svg") else None  # type: ignore[return-value]


def _value_formatter(quantity: str) -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _pos: format_value(x, quantity))  # type: ignore[arg-type]


def _y_quantity(unit: str) -> str:
    return {"USD": "money", "s": "duration"}.get(unit, "number")


def _spans(xs: Sequence[float], bad: Sequence[bool], *, log: bool) -> list[tuple[float, float]]:
    """x intervals covering runs of bad points, each bounded halfway to its neighbours (geometrically
    on a log axis; the outermost points mirror their inner half-gap)."""
    x = sorted(xs)
    flags = [b for _, b in sorted(zip(xs, bad, strict=True), key=lambda t: t[0])]
    if not x:
        return []
    geometric = log and all(v > 0 for v in x)

    def mid(a: float, b: float) -> float:
        return math.sqrt(a * b) if geometric else (a + b) / 2

    def mirror(v: float, m: float) -> float:
        return v * v / m if geometric else 2 * v - m

    if len(x) == 1:
        edges = [(x[0] / 1.5, x[0] * 1.5) if geometric else (x[0] - 0.5, x[0] + 0.5)]
    else:
        mids = [mid(a, b) for a, b in itertools.pairwise(x)]
        lefts = [mirror(x[0], mids[0]), *mids]
        rights = [*mids, mirror(x[-1], mids[-1])]
        edges = list(zip(lefts, rights, strict=True))
    out: list[tuple[float, float]] = []
    for k, (lo, hi) in enumerate(edges):
        if not flags[k]:
            continue
        if out and k > 0 and flags[k - 1]:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _series_label(axes: Sequence[Axis], row: SweepRow) -> str:
    return ", ".join(
        f"{a.target.field} = {format_value(v, a.target.quantity)}"
        for a, v in zip(axes[1:], row.values[1:], strict=True)
    )


def design_letters(shapes: Sequence[str | None]) -> dict[str, str]:
    """A letter per distinct design, in order of first appearance (A, B, ..., Z, AA, ...)."""
    out: dict[str, str] = {}
    for shape in shapes:
        if shape is not None and shape not in out:
            n = len(out)
            out[shape] = (chr(65 + n // 26 - 1) if n >= 26 else "") + chr(65 + n % 26)
    return out


MAX_KEY = 8  # designs listed in a plot's key; more are counted


def _design_key(ax: Any, letters: dict[str, str]) -> None:
    from matplotlib.lines import Line2D

    items = list(letters.items())
    handles = [Line2D([], [], ls="none", label=f"{letter}: {shape}") for shape, letter in items[:MAX_KEY]]
    if len(items) > MAX_KEY:
        handles.append(Line2D([], [], ls="none", label=f"... {len(items) - MAX_KEY} more (see the table)"))
    key = ax.legend(
        handles=handles, loc="upper left", fontsize=7.5, handlelength=0, handletextpad=0, framealpha=0.85,
        title="designs", title_fontsize=8,
    )  # fmt: skip
    ax.add_artist(key)


def sweep_figure(result: SweepResult, fmt: Format = "png") -> bytes:
    """The objective against the first varied field, one line per value of the second. Each point where
    the optimal design changes (and the first) is tagged with its design's letter, switches are drawn
    as diamonds, and stretches with no design are shaded."""
    axis = result.axes[0]
    runs = series(result.rows, result.axes)
    letters = design_letters([r.shape for r in result.rows])
    with style():
        fig = _figure(8, 4.5)
        ax = fig.add_subplot()
        if axis.log:
            ax.set_xscale("log")
        xs_all = [r.values[0] for r in runs[0]] if runs else []
        no_design = [all(run[k].objective_value is None for run in runs) for k in range(len(xs_all))]
        for k, (lo, hi) in enumerate(_spans(xs_all, no_design, log=axis.log)):
            ax.axvspan(lo, hi, color=INFEASIBLE_COLOUR, alpha=0.35, lw=0, label="no design" if k == 0 else None)
        marked = False
        top = 0.0
        for n, run in enumerate(runs):
            colour = PALETTE[n % len(PALETTE)]
            xs = [r.values[0] for r in run]
            ys = [r.objective_value if r.objective_value is not None else math.nan for r in run]
            top = max([top, *(v for v in ys if not math.isnan(v))])
            label = _series_label(result.axes, run[0]) if len(runs) > 1 else result.objective_label
            ax.plot(xs, ys, marker="o", ms=4, lw=1.5, color=colour, label=label)
            previous: str | None = None
            for k, r in enumerate(run):
                if r.objective_value is None:
                    if len(runs) > 1:
                        ax.plot([xs[k]], [0], marker="x", color=colour, ms=6, clip_on=False)
                    previous = None
                    continue
                if r.switch:
                    ax.plot(
                        [xs[k]], [r.objective_value], marker="D", ms=7, mfc="white", mec=colour, mew=1.5,
                        label=None if marked else "optimal design switches",
                    )  # fmt: skip
                    marked = True
                if r.shape is not None and r.shape != previous:
                    ax.annotate(
                        letters[r.shape],
                        (xs[k], r.objective_value),
                        xytext=(0, 9),
                        textcoords="offset points",
                        ha="center",
                        fontsize=8,
                        fontweight="bold",
                        color=colour,
                    )
                previous = r.shape
        ax.set_xlabel(axis.label)
        ax.xaxis.set_major_formatter(_value_formatter(axis.target.quantity))
        ax.set_ylabel(f"{result.objective_label} ({result.objective_unit})")
        ax.yaxis.set_major_formatter(_value_formatter(_y_quantity(result.objective_unit)))
        ax.set_ylim(bottom=0, top=(top * (1.35 + 0.07 * min(len(letters), MAX_KEY))) or 1.0)
        if xs_all and all(no_design):
            # Nothing to plot: say why instead of an empty $0-$1 scale.
            ax.set_yticks([])
            ax.text(
                0.5, 0.5, f"no design at any {axis.target.field} tried:\nnothing meets the requirement across this range",
                transform=ax.transAxes, ha="center", va="center", fontsize=10,
            )  # fmt: skip
        ax.set_title(f"{result.objective_label} against {axis.target.field} ({result.objective})")
        if letters:
            _design_key(ax, letters)
        ax.legend(loc="upper right", fontsize=8, framealpha=0.85)
        fig.tight_layout()
        return save(fig, fmt)


def frontier_figure(result: FrontierResult, fmt: Format = "png") -> bytes:
    """Total cost against p95 latency (or throughput): the frontier joined, dominated points grey,
    the requirement's own target dashed."""
    latency = result.against == "latency"

    def y(p: Any) -> float | None:
        return p.p95_latency_s if latency else p.throughput

    with style():
        fig = _figure(8, 4.5)
        ax = fig.add_subplot()
        front = [p for p in result.points if p.on_frontier and y(p) is not None]
        letters = design_letters([p.shape or "" for p in front])
        others = [p for p in result.points if not p.on_frontier and p.total_usd is not None and y(p) is not None]
        if others:
            ax.scatter(
                [p.total_usd or 0.0 for p in others],
                [y(p) or 0.0 for p in others],
                color=INFEASIBLE_COLOUR,
                s=18,
                zorder=2,
                label="dominated",
            )
        if front:
            ax.plot(
                [p.total_usd or 0.0 for p in front],
                [y(p) or 0.0 for p in front],
                marker="o",
                ms=5,
                lw=1.5,
                drawstyle="steps-post",
                color=PALETTE[0],
                zorder=3,
                label="Pareto frontier",
            )
            for p in front:
                ax.annotate(
                    letters[p.shape or ""],
                    (p.total_usd or 0, y(p) or 0),
                    xytext=(0, 7),
                    textcoords="offset points",
                    ha="center",
                    fontsize=8,
                    fontweight="bold",
                    color=PALETTE[0],
                )
        if result.target is not None:
            what = "requirement's p95 target" if latency else "peak demand"
            ax.axhline(result.target, ls="--", lw=1, color=PALETTE[1], label=what)
        ax.set_xlabel("total cost over the horizon (USD)")
        ax.xaxis.set_major_formatter(_value_formatter("money"))
        if latency:
            ax.set_ylabel("p95 latency at rated load (s)")
            ax.yaxis.set_major_formatter(_value_formatter("duration"))
        else:
            ax.set_ylabel(f"capacity within the targets ({result.throughput_unit})")
        values = [v for v in (y(p) for p in result.points) if v is not None]
        top = max([*values, result.target or 0.0, 0.0])
        ax.set_ylim(bottom=0, top=(top * (1.35 + 0.07 * min(len(letters), MAX_KEY))) or 1.0)
        ax.set_title(f"cost against {'p95 latency' if latency else 'throughput'}: the Pareto frontier")
        if letters:
            _design_key(ax, letters)
        ax.legend(loc="upper right", fontsize=8, framealpha=0.85)
        fig.tight_layout()
        return save(fig, fmt)


def memory_figure(bars: Sequence[MemoryBar], fmt: Format = "png") -> bytes:
    """Stacked horizontal bars of what fills one GPU of each replica group, capacity marked."""
    with style():
        fig = _figure(8, 1.9 + 0.5 * max(1, len(bars)))
        ax = fig.add_subplot()
        labels = [b.label for b in bars]
        ypos = list(range(len(bars)))[::-1]
        for key, name, colour in MEMORY_PARTS:
            widths = [getattr(b, key) for b in bars]
            if not any(w > 0 for w in widths):
                continue
            lefts = [sum(getattr(b, k) for k, _, _ in MEMORY_PARTS[: _index(key)]) for b in bars]
            ax.barh(ypos, widths, left=lefts, height=0.55, color=colour, label=name, edgecolor="white", lw=0.5)
        ax.scatter(
            [b.capacity_gib for b in bars], ypos, marker="|", s=500, color="black", zorder=4, label="GPU capacity"
        )
        ax.set_yticks(ypos, labels)
        ax.set_xlabel("GiB per GPU (most loaded GPU of the replica)")
        ax.set_xlim(left=0)
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.02), ncol=4, fontsize=8, frameon=False)
        fig.tight_layout()
        return save(fig, fmt)


def _index(key: str) -> int:
    return [k for k, _, _ in MEMORY_PARTS].index(key)
