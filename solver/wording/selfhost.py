"""How self-host versus API reads (:mod:`clusterplan.design.selfhost`): words and figures only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clusterplan.wording.fmt import rps, usd, usd_per_m

if TYPE_CHECKING:  # the values it words are the service's; words sit beneath it and read them as given
    from clusterplan.design.selfhost import ApiQuote, BreakEven, SelfHostVsApi

TITLE = "Self-host versus API"


def quote_column(q: ApiQuote) -> str:
    """``vs DeepInfra $0.26/M``: a table column per API, its blended price at the workload's mix."""
    stand_in = " (stand-in)" if q.match == "equivalent" else ""
    return f"vs {q.provider} {usd_per_m(q.usd_per_million_tokens)}/M{stand_in}"


def break_even_cell(b: BreakEven) -> str:
    """Which costs less at the requirement's demand, and the demand at which the two bills are equal."""
    if b.requests_per_s is None or b.times_demand is None:
        return "API (free: no break-even)"
    at = f"equal at {rps(b.requests_per_s)} req/s ({b.times_demand:.2g}x)"
    if b.self_host_cheaper:
        return f"self-host cheaper; {at}"
    return f"API cheaper; {at}, beyond sizing"


def served(q: ApiQuote) -> str:
    """The model an API serves, marked when it stands in for the workload's model."""
    return f"{q.served_model} (stand-in)" if q.match == "equivalent" else q.served_model


def note_sentence(base: SelfHostVsApi) -> str:
    """Why there is nothing to compare, as a sentence."""
    note = base.note or "nothing to compare"
    return f"{note[0].upper()}{note[1:]}."


def quote_line(q: ApiQuote, base: SelfHostVsApi) -> str:
    """One API's price, applied to the workload, with its source."""
    stand_in = f", standing in for {base.model}" if q.match == "equivalent" else ""
    recalled = ", recalled (provisional)" if q.provisional else ""
    return (
        f"{q.provider} ({q.served_model}{stand_in}): {usd_per_m(q.usd_per_million_input_tokens)}/M input, "
        f"{usd_per_m(q.usd_per_million_output_tokens)}/M output, {usd_per_m(q.usd_per_million_tokens)}/M at "
        f"{base.input_tokens:,.0f} in : {base.output_tokens:,.0f} out; {usd(q.usd_per_month)}/month at "
        f"{rps(base.requests_per_s)} req/s (list price, {q.source}, as of {q.as_of}{recalled})"
    )


def notes(base: SelfHostVsApi) -> list[str]:
    """The lines under a self-host-versus-API table: what each figure counts, then each API's price and source."""
    if base.note is not None:
        return [f"{TITLE}: {base.note}."]
    if not base.designs:
        return [
            f"{TITLE}: no design here meets its targets, so none is set beside the hosted APIs' prices.",
            *(quote_line(q, base) for q in base.quotes),
        ]
    return [
        f"{TITLE}: the design's cost per month is its total over the horizon / the horizon's months; its $/M tok "
        "(in+out) divides that by every input and output token of the average demand, as the API's blended "
        "price weights its input and output prices by the workload's mix.",
        "Break-even: the average demand at which the API's bill equals the design's cost per month (x: over "
        "the requirement's demand). The design is sized for the requirement's demand; a break-even above it "
        "('beyond sizing') needs more hardware than the design has, so self-hosting pays there only if a "
        "design sized for it costs less.",
        *(quote_line(q, base) for q in base.quotes),
    ]


def summary_lines(base: SelfHostVsApi) -> list[str]:
    """Compact lines for a terminal: each design per month and per million tokens, then each API with its
    break-even against each design, then each API's price and source."""
    if base.note is not None:
        return [f"self-host versus API: {base.note}"]
    if not base.designs:
        return []
    head = (
        f"self-host versus API at {rps(base.requests_per_s)} req/s of {base.input_tokens:,.0f} in : "
        f"{base.output_tokens:,.0f} out tokens: "
        + "; ".join(
            f"{d.label} {usd(d.usd_per_month)}/month ({usd_per_m(d.usd_per_million_tokens)}/M tok in+out)"
            for d in base.designs
        )
    )
    out = [head]
    for i, q in enumerate(base.quotes):
        against = "; ".join(f"{d.label}: {break_even_cell(d.break_even[i])}" for d in base.designs)
        out.append(f"  {quote_column(q)} ({usd(q.usd_per_month)}/month): {against}")
    out.append(
        "  (break-even: the average demand at which the API's bill equals the design's cost per month, x the "
        "requirement's; the design is sized for the requirement's demand)"
    )
    out += [f"  - {quote_line(q, base)}" for q in base.quotes]
    return out
