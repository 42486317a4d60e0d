"""``clusterplan rent-vs-buy`` as a terminal table and a PNG plot. Formatting only; the data is
:class:`clusterplan.design.breakeven.RentVsBuy`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from clusterplan.errors import printable
from clusterplan.wording import selfhost as api_words
from clusterplan.wording.fmt import usd, usd_exact

if TYPE_CHECKING:
    from clusterplan.design.breakeven import RentVsBuy, Side


def _side(s: Side) -> str:
    if s.costs is None:
        return f"not possible ({', '.join(s.missing)})"
    parts = [f"{x.units} x {x.label}" for x in s.hardware]
    c = s.costs
    money = f"capital {usd_exact(c.capital_usd)}, {usd_exact(c.monthly_usd)}/month"
    if c.one_off_usd:
        money += f", one-off {usd_exact(c.one_off_usd)}"
    mark = " (the design's own)" if s.from_design else ""
    return f"{'; '.join(parts)}{mark}: {money}"


def break_even_text(r: RentVsBuy) -> str:
    if r.rent.costs is None or r.buy.costs is None:
        return "break-even: none (one side cannot be priced)"
    if r.break_even_month is None:
        return "break-even: never (buying does not catch up with renting)"
    if r.break_even_month == 0:
        return "break-even: month 0 (buying costs no more from the start)"
    first = f"; first whole month: {r.first_cheaper_month}" if r.first_cheaper_month is not None else ""
    return f"break-even after {r.break_even_month:,.1f} months of use{first}"


def lines(r: RentVsBuy) -> list[str]:
    gpus = ", ".join(f"{n} x {g}" for g, n in sorted(r.gpus.items()))
    out = [
        f"{r.requirement}: {r.source} ({gpus})",
        f"rent: {_side(r.rent)}",
        f"buy:  {_side(r.buy)}",
        break_even_text(r),
    ]
    if r.cheaper_at_horizon is not None and r.rent.costs is not None and r.buy.costs is not None:
        out.append(
            f"over the requirement's {r.horizon_months:g} months: rent {usd_exact(r.rent.costs.total_usd)}, "
            f"buy {usd_exact(r.buy.costs.total_usd)}; {r.cheaper_at_horizon} is cheaper"
        )
    if r.self_host_vs_api is not None:
        out += api_words.summary_lines(r.self_host_vs_api)
    return [printable(x) for x in out]


def table(r: RentVsBuy) -> Table:
    t = Table(title="Cumulative cost", title_justify="left")
    for col in ("month", "rent", "buy", "cheaper"):
        t.add_column(col, justify="right")
    for p in r.curve:
        cheaper = "-"
        if p.rent_usd is not None and p.buy_usd is not None:
            cheaper = "buy" if p.buy_usd <= p.rent_usd else "rent"
        month = f"{p.month:g}" + (" (horizon)" if p.month == r.horizon_months else "")
        t.add_row(month, usd_exact(p.rent_usd), usd_exact(p.buy_usd), cheaper)
    return t


def figure(r: RentVsBuy) -> bytes:
    """The two cumulative curves, the horizon and the break-even month, PNG. matplotlib is imported here only
    (through :mod:`clusterplan.render.plots`, whose style and deterministic saving it shares)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from clusterplan.render import plots

    months = [p.month for p in r.curve]
    with plots.style():
        fig = Figure(figsize=(7, 4))
        ax = fig.add_subplot()
        for name, values, colour in (
            ("rent", [p.rent_usd for p in r.curve if p.rent_usd is not None], plots.PALETTE[0]),
            ("buy", [p.buy_usd for p in r.curve if p.buy_usd is not None], plots.PALETTE[1]),
        ):
            if len(values) == len(months):  # a side that cannot be priced has no curve
                ax.plot(months, values, label=name, color=colour)
        ax.axvline(r.horizon_months, color="#7f7f7f", ls=":", lw=1, label=f"horizon ({r.horizon_months:g} months)")
        if r.break_even_month is not None and r.break_even_month > 0:
            ax.axvline(
                r.break_even_month, color="black", ls="--", lw=1, label=f"break-even ({r.break_even_month:,.1f})"
            )
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: usd(y)))
        ax.set_xlabel("months")
        ax.set_ylabel("cumulative cost")
        ax.set_title(printable(f"{r.requirement}: rent vs buy"))
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize=8, framealpha=0.85)
        fig.tight_layout()
        return plots.save(fig, "png")
