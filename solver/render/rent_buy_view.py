"""``clusterplan rent-vs-buy`` as a terminal table and a PNG plot. Formatting only; the data is
:class:`clusterplan.design.breakeven.RentVsBuy`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from clusterplan.errors import printable
from clusterplan.wording import selfhost as api_words
from clusterplan.wording.fmt import usd, usd_exact

if TYPE_CHECKING:
    from clusterplan.design.breakeven import PoolBreakEven, RentVsBuy, Side
    from clusterplan.plan import HardwareLine

NEAREST_GAP = {
    "tp_exceeds_instance_domain": "no instance's NVLink domain holds its TP group",
    "no_fabric": "no offer has a fabric between instances",
}


def _owned_month(lines: list[HardwareLine]) -> str:
    """' (energy $1,135 + colocation $1,877 + support $2,738)' over the owned lines; '' when none."""
    owned = [x for x in lines if x.kind == "owned"]
    if not owned:
        return ""
    parts = [
        ("energy", sum(x.energy_usd_per_month for x in owned)),
        ("colocation", sum(x.colocation_usd_per_month for x in owned)),
        ("support", sum(x.support_usd_per_month for x in owned)),
        ("operations", sum(x.operations_usd_per_month for x in owned)),
    ]
    return " (" + " + ".join(f"{name} {usd_exact(v)}" for name, v in parts if v or name == "energy") + ")"


def _side(s: Side) -> str:
    if s.costs is None:
        return f"not possible ({', '.join(s.missing)})"
    parts = [f"{x.units} x {x.label}" for x in s.hardware]
    c = s.costs
    money = f"capital {usd_exact(c.capital_usd)}, {usd_exact(c.monthly_usd)}/month{_owned_month(s.hardware)}"
    if c.one_off_usd:
        money += f", one-off {usd_exact(c.one_off_usd)}"
    mark = " (the design's own)" if s.from_design else ""
    if s.nearest:
        mark += f" (nearest rentable packaging for {', '.join(s.nearest)})"
    return f"{'; '.join(parts)}{mark}: {money}"


def pool_text(p: PoolBreakEven) -> str:
    """One pool's answer: what it rents and buys, and its break-even month or why there is none."""
    role = "" if p.role == "aggregated" else f" {p.role}"
    head = f"{p.workload}{role}: {p.gpus} x {p.gpu_name} TP{p.tp}"
    if p.rent is None:
        clouds = "no cloud in the catalog (within the requirement's clouds, regions and tiers)"
        return f"{head}: no break-even: {clouds} rents {p.gpu_name}"
    rent = f"rent {p.rent.units} x {p.rent.label}"
    if p.rent_gap is not None:
        rent += f" (nearest packaging: {NEAREST_GAP[p.rent_gap]})"
    if p.buy is None:
        why = (
            f"no owned server of {p.gpu_name} holds a TP{p.tp} group in its NVLink domain"
            if p.reason == "no_owned_packaging"
            else f"{p.gpu_name} has no purchase price in the catalog and too little inventory"
        )
        return f"{head}: {rent}; no break-even: {why}"
    buy = f"buy {p.buy.units} x {p.buy.label}"
    if p.reason == "never_catches_up":
        why = "a training run rented once" if p.rent_one_off_usd else "renting costs less each month than owning"
        return f"{head}: {rent}; {buy}; no break-even: buying never catches up ({why})"
    assert p.break_even_month is not None
    when = (
        "month 0 (buying costs no more from the start)"
        if p.break_even_month == 0
        else f"after {p.break_even_month:,.1f} months"
    )
    return f"{head}: {rent}; {buy}; break-even {when}"


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
    if r.pools:
        out.append("per pool, each rented and bought alone:")
        out += [f"  {pool_text(p)}" for p in r.pools]
    if r.self_host_vs_api is not None:
        out += api_words.summary_lines(r.self_host_vs_api)
    return [printable(x) for x in out]


def table(r: RentVsBuy) -> Table:
    """The cumulative curve; a side that cannot be priced has no column (the lines above say why)."""
    both = r.rent.costs is not None and r.buy.costs is not None
    t = Table(title="Cumulative cost", title_justify="left")
    cols = ["month"] + [s.kind for s in (r.rent, r.buy) if s.costs is not None] + (["cheaper"] if both else [])
    for col in cols:
        t.add_column(col, justify="right")
    for p in r.curve:
        month = f"{p.month:g}" + (" (horizon)" if p.month == r.horizon_months else "")
        row = [month] + [usd_exact(v) for v in (p.rent_usd, p.buy_usd) if v is not None]
        if both and p.rent_usd is not None and p.buy_usd is not None:
            row.append("buy" if p.buy_usd <= p.rent_usd else "rent")
        t.add_row(*row)
    return t


def figure(r: RentVsBuy) -> bytes:
    """The two cumulative curves, the horizon and the break-even month, PNG. matplotlib is imported here only
    (through :mod:`clusterplan.render.plots`, whose style and deterministic saving it shares)."""
    from clusterplan.render import plots

    plots.prepare_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

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
