"""Self-host versus a hosted API: a design's $ per million tokens beside API list prices, and the break-even demand.

The API side is the catalog's ``api_prices`` rows for the workload's model (those serving the same model, then
stand-ins: ``equivalent``), each billed per token at its list prices. The self-host side is a design's cost over
the requirement's horizon as :func:`clusterplan.evaluation.pricing.costs` gives it. Both are compared per month at
the workload's average demand, and per million tokens **blended**: input and output tokens counted together, the
API's two prices weighted by the workload's input:output ratio, and the design's total divided by every token it
reads or writes. (The plan's ``usd_per_million_output_tokens`` charges the whole cost to output tokens only; the
blended figure is the one an API's bill can be set beside.)

The break-even demand is where the API's monthly bill (linear in demand) equals the design's monthly cost (fixed:
the design is sized for the requirement's demand). Below it the API costs less; above it self-hosting does, but
only up to the demand the design was sized for: beyond that it needs more hardware, so a break-even above the
requirement's demand is reported as such, not as a promise that this design would pay there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from clusterplan.design.estimate import Result
from clusterplan.units import HOURS_PER_MONTH, SECONDS_PER_HOUR

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import ApiPrice
    from clusterplan.design.breakeven import RentVsBuy
    from clusterplan.plan import Costs, Design
    from clusterplan.requirement.schema import Requirement

TOKENS_PER_MILLION = 1e6
SECONDS_PER_MONTH = HOURS_PER_MONTH * SECONDS_PER_HOUR  # 730 h, the month the planner bills a cloud instance by


# ------------------------------------------------------------------------------------------------
# Formulas
# ------------------------------------------------------------------------------------------------


def api_usd_per_request(input_tokens: float, output_tokens: float, in_usd_per_m: float, out_usd_per_m: float) -> float:
    """``(input x in-price + output x out-price) / 1e6``: one request at per-million-token list prices."""
    return (input_tokens * in_usd_per_m + output_tokens * out_usd_per_m) / TOKENS_PER_MILLION


def api_usd_per_month(
    requests_per_month: float, input_tokens: float, output_tokens: float, in_usd_per_m: float, out_usd_per_m: float
) -> float:
    """``requests/month x (input x in-price + output x out-price) / 1e6``: an API's bill (its per-token list prices)."""
    return requests_per_month * api_usd_per_request(input_tokens, output_tokens, in_usd_per_m, out_usd_per_m)


def blended_usd_per_million_tokens(
    input_tokens: float, output_tokens: float, in_usd_per_m: float, out_usd_per_m: float
) -> float:
    """``(input x in-price + output x out-price) / (input + output)``: an API's price per 1e6 tokens of either kind."""
    return (input_tokens * in_usd_per_m + output_tokens * out_usd_per_m) / (input_tokens + output_tokens)


def design_usd_per_month(costs: Costs) -> float:
    """``total over the horizon / horizon months``: capital spread evenly over the horizon, plus the monthly cost."""
    return costs.total_usd / costs.horizon_months


def design_usd_per_million_tokens(usd_per_month: float, requests_per_s: float, tokens_per_request: float) -> float:
    """``$/month / (requests/s x 730 h x 3600 s x tokens per request / 1e6)``: every token read or written."""
    return usd_per_month / (requests_per_s * SECONDS_PER_MONTH * tokens_per_request / TOKENS_PER_MILLION)


def break_even_requests_per_s(usd_per_month: float, api_usd_per_req: float) -> float | None:
    """``design $/month / (API $ per request x seconds per month)``: the demand at which the bills are equal
    (None: a free API, which self-hosting never undercuts)."""
    if api_usd_per_req <= 0:
        return None
    return usd_per_month / (api_usd_per_req * SECONDS_PER_MONTH)


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------


class ApiQuote(Result):
    """One hosted API's list price, applied to the workload's request shape and average demand."""

    id: str = Field(description="the catalog's api_prices row")
    provider: str
    served_model: str
    match: Literal["same", "equivalent"] = Field(description="serves the model itself, or a named stand-in for it")
    usd_per_million_input_tokens: float
    usd_per_million_output_tokens: float
    usd_per_million_tokens: float = Field(description="blended at the workload's input:output ratio, USD per 1e6")
    usd_per_request: float
    usd_per_month: float = Field(description="the API's bill at the workload's average demand, USD/month (730 h)")
    source: str
    as_of: str
    provisional: bool


class BreakEven(Result):
    """A design against one API: which costs less at the requirement's demand, and the demand where they are equal."""

    api: str = Field(description="the ApiQuote's id")
    requests_per_s: float | None = Field(description="average demand at which the monthly bills are equal, requests/s")
    times_demand: float | None = Field(description="break-even demand over the requirement's average demand")
    self_host_cheaper: bool = Field(description="at the requirement's demand, the design costs less than the API")
    beyond_sizing: bool = Field(description="the break-even lies above the demand the design is sized for")


class DesignVsApi(Result):
    """One design's side: its cost per month and per million tokens, and its break-even against each API."""

    label: str = Field(description="which design: 'design 1', 'H100 SXM cloud', ...")
    usd_per_month: float = Field(description="total over the horizon / horizon months, USD")
    usd_per_million_tokens: float = Field(description="blended: input and output tokens together, USD per 1e6")
    break_even: list[BreakEven]


class SelfHostVsApi(Result):
    """Designs for one serving workload beside the hosted APIs that serve its model."""

    workload: str
    model: str
    requests_per_s: float = Field(description="the requirement's average demand, requests/s")
    input_tokens: float = Field(description="prompt tokens per request (mean)")
    output_tokens: float = Field(description="generated tokens per request (mean)")
    quotes: list[ApiQuote] = Field(description="empty: the catalog has no API price for the model (see note)")
    designs: list[DesignVsApi] = Field(default_factory=list)
    note: str | None = Field(None, description="why there is nothing to compare, in one line")


# ------------------------------------------------------------------------------------------------
# Entry points
# ------------------------------------------------------------------------------------------------


def _quote(p: ApiPrice, requests_per_s: float, input_tokens: float, output_tokens: float) -> ApiQuote:
    pin, pout = p.usd_per_million_input_tokens, p.usd_per_million_output_tokens
    return ApiQuote(
        id=p.id, provider=p.provider, served_model=p.served_model, match="same" if p.model else "equivalent",
        usd_per_million_input_tokens=pin, usd_per_million_output_tokens=pout,
        usd_per_million_tokens=blended_usd_per_million_tokens(input_tokens, output_tokens, pin, pout),
        usd_per_request=api_usd_per_request(input_tokens, output_tokens, pin, pout),
        usd_per_month=api_usd_per_month(requests_per_s * SECONDS_PER_MONTH, input_tokens, output_tokens, pin, pout),
        source=p.source, as_of=p.as_of, provisional=p.provisional,
    )  # fmt: skip


def api_quotes(
    catalog: Catalog,
    model_id: str,
    *,
    workload: str,
    requests_per_s: float,
    input_tokens: float,
    output_tokens: float,
) -> SelfHostVsApi:
    """The catalog's API prices for ``model_id`` at the workload's shape and demand; no designs yet."""
    rows = catalog.api_prices_for(model_id)
    note = None
    if not rows:
        note = (
            f"no hosted API price for {model_id} in the catalog (api_prices.yaml); nothing to compare self-hosting to"
        )
    return SelfHostVsApi(
        workload=workload, model=model_id, requests_per_s=requests_per_s, input_tokens=input_tokens,
        output_tokens=output_tokens, quotes=[_quote(p, requests_per_s, input_tokens, output_tokens) for p in rows],
        note=note,
    )  # fmt: skip


def design_vs_api(base: SelfHostVsApi, label: str, costs: Costs) -> DesignVsApi:
    """One design (its costs over the horizon, sized for ``base``'s demand) against each of ``base``'s quotes."""
    monthly = design_usd_per_month(costs)
    tokens = base.input_tokens + base.output_tokens
    out: list[BreakEven] = []
    for q in base.quotes:
        be = break_even_requests_per_s(monthly, q.usd_per_request)
        ratio = be / base.requests_per_s if be is not None else None
        out.append(
            BreakEven(
                api=q.id,
                requests_per_s=be,
                times_demand=ratio,
                self_host_cheaper=monthly < q.usd_per_month,
                beyond_sizing=ratio is None or ratio > 1.0,
            )
        )
    return DesignVsApi(
        label=label, usd_per_month=monthly,
        usd_per_million_tokens=design_usd_per_million_tokens(monthly, base.requests_per_s, tokens), break_even=out,
    )  # fmt: skip


def with_designs(base: SelfHostVsApi, designs: Sequence[tuple[str, Costs]]) -> SelfHostVsApi:
    """``base`` with each (label, costs) design set beside its quotes (none when it has no quote)."""
    if not base.quotes:
        return base
    return base.model_copy(update={"designs": [design_vs_api(base, label, c) for label, c in designs]})


def catalog_model_id(catalog: Catalog, name: str) -> str:
    """The catalog id of a model name (an alias in any case), else the name as given (a model not in the catalog)."""
    from clusterplan.errors import UnknownNameError

    try:
        return catalog.model(name).id
    except UnknownNameError:
        return name


def for_design(catalog: Catalog, req: Requirement, design: Design) -> SelfHostVsApi | None:
    """A plan's design beside the API prices of the model it serves: only for a design that serves one workload
    alone (the cost of shared hardware is not split between workloads; the note says so). None: it serves none."""
    from clusterplan.plan import ServingPlan
    from clusterplan.requirement.schema import ServingWorkload

    served = [w for w in design.workloads if isinstance(w, ServingPlan)]
    if not served:
        return None
    plan = served[0]
    w = next(x for x in req.workloads if isinstance(x, ServingWorkload) and x.name == plan.workload)
    base = api_quotes(
        catalog, catalog_model_id(catalog, plan.model), workload=plan.workload, requests_per_s=plan.average_rps,
        input_tokens=w.input_tokens, output_tokens=w.output_tokens,
    )  # fmt: skip
    if len(design.workloads) > 1:
        return base.model_copy(update={"quotes": [], "note": _shared_note(len(design.workloads))})
    return with_designs(base, [("design", design.costs)])


def _shared_note(workloads: int) -> str:
    return (
        f"compared only for a design that serves one workload alone; this one runs {workloads} "
        "workloads on hardware whose cost is not split between them"
    )


def for_rent_vs_buy(catalog: Catalog, req: Requirement, result: RentVsBuy) -> RentVsBuy:
    """``result`` with each side that can be priced (rent, buy) beside the API prices of the requirement's serving
    model, at its average demand; unchanged when the requirement serves nothing."""
    from clusterplan.requirement.schema import ServingWorkload

    served = [i for i, w in enumerate(req.workloads) if isinstance(w, ServingWorkload)]
    if not served:
        return result
    w = req.workloads[served[0]]
    assert isinstance(w, ServingWorkload)
    model = req.model_of(served[0])
    name = model if isinstance(model, str) else str(getattr(model, "name", "") or "")
    base = api_quotes(
        catalog, catalog_model_id(catalog, name), workload=w.name, requests_per_s=w.requests_per_s,
        input_tokens=w.input_tokens, output_tokens=w.output_tokens,
    )  # fmt: skip
    if len(req.workloads) > 1:
        base = base.model_copy(update={"quotes": [], "note": _shared_note(len(req.workloads))})
    sides = [(s.kind, s.costs) for s in (result.rent, result.buy) if s.costs is not None]
    return result.model_copy(update={"self_host_vs_api": with_designs(base, sides)})
