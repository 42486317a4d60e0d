"""The review's records: everything the Markdown and HTML writers print, as data."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from clusterplan.design.selfhost import SelfHostVsApi
from clusterplan.plan import Plan, TargetOdds
from clusterplan.whatif.sweep import (
    SweepResult,
)

WhatIf = Literal["auto", "demand", "budget", "deadline", "none"]


WHATIF_FACTORS = (0.5, 0.75, 1.0, 1.5, 2.0)  # a handful of points around the requirement, so a report stays quick


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MemoryBar(Out):
    """What fills the most loaded GPU of one replica group or training layout, GiB."""

    label: str = Field(description="workload: GPU, layout")
    workload: str
    gpu: str
    weights_gib: float
    kv_cache_gib: float
    activations_gib: float
    gradients_gib: float
    optimizer_gib: float
    runtime_overhead_gib: float
    headroom_gib: float
    total_gib: float
    capacity_gib: float


class BindingRow(Out):
    family: str
    title: str
    detail: str
    relaxed_total_usd: float | None = Field(description="the optimum with this constraint switched off, USD")
    saving_usd: float | None = Field(description="recommended total minus relaxed total, USD")
    relaxed_design: str | None


class RentBuyRow(Out):
    """One workload's layout priced both ways, alone (shared servers are not split)."""

    workload: str
    kind: Literal["serving", "training"]
    layout: str
    gpus: int
    chosen: str = Field(description="what the plan chose: cloud, owned or cloud+owned")
    period: str = Field(description="what the totals cover: 'over 36 months' or 'for the run (9 h)'")
    rent_offer: str | None = Field(description="provider:instance x count")
    rent_usd_per_hour: float | None
    rent_total_usd: float | None
    buy_servers: str | None = Field(description="owned servers x GPUs each")
    buy_capital_usd: float | None
    buy_running_usd_per_month: float | None = Field(
        description="electricity at full power x PUE, colocation and support, USD/month"
    )
    buy_total_usd: float | None = Field(description="capital + running over the period, USD")
    breakeven_months: float | None = Field(description="months of full use after which buying is cheaper")
    cheaper: Literal["rent", "buy"] | None


class FactorRow(Out):
    name: str
    value: str
    set_in_requirement: bool
    description: str


class SourceRow(Out):
    what: str
    value: str
    source: str = Field(description="the catalog's source key or URL")
    title: str
    url: str | None
    as_of: str
    provisional: bool


class UserCatalog(Out):
    path: str
    sha256: str


class Reproduce(Out):
    clusterplan_version: str
    catalog_fingerprint: str
    requirement_file: str
    requirement_sha256: str
    user_catalogs: list[UserCatalog]
    command: str
    objective: str
    random_seed: int
    num_workers: int


class SinglePoint(Out):
    """A serving workload a single failure would hurt: one replica, or no spare (N+0)."""

    workload: str
    replicas: int
    spares: int = Field(description="redundancy the requirement asked for (N+k)")
    capacity_after_loss_pct: float = Field(description="capacity with its largest replica lost, % of peak demand")


class PriceRisk(Out):
    """A price design 1 depends on, and how far it must move before design 2 costs less."""

    what: str = Field(description="'purchase price <gpu>' or 'instance <provider:id>'")
    gpu: str
    value_usd: float = Field(description="the catalog figure: USD per GPU (purchase) or USD/h (instance)")
    unit: str
    provisional: bool
    as_of: str
    switch_usd: float = Field(description="the figure at which design 2 costs as much as design 1")
    change_pct: float = Field(description="switch over the catalog figure minus 1, %")
    resolved: bool = Field(description="re-solved at the switch figure (what-if machinery), not only estimated")
    design_after: str | None = Field(None, description="the optimal design just past the switch, when re-solved")
    changed: bool | None = Field(None, description="the re-solved optimum differs from design 1")


class AccuracyRow(Out):
    """The model's measured error for one kind of figure a workload of this plan depends on."""

    kind: str
    cases: int
    median_abs_error: float = Field(description="fraction")
    bias_pct: float = Field(description="exp(mean ln(predicted / measured)) - 1, %: > 0 over-predicts")
    range_pct: tuple[float, float] = Field(description="80% range of predicted / measured - 1, %")


class Risk(Out):
    """The review's risk section."""

    single_points: list[SinglePoint]
    prices: list[PriceRisk]
    price_gap_usd: float | None = Field(description="design 2's total minus design 1's, USD (None: one design)")
    within_error: list[TargetOdds] = Field(description="design 1's targets inside the model's error")
    odds: list[TargetOdds] = Field(description="design 1's chance of meeting each target")
    accuracy: list[AccuracyRow]
    accuracy_as_of: str
    confidence: float | None


class ReviewReport(Out):
    title: str = Field(description="the requirement's name")
    status: str
    summary: str = Field(description="what to buy or rent, what it costs, what bounds it; one paragraph")
    requirement_text: str = Field(description="the requirement file as given")
    plan: Plan
    memory: list[MemoryBar]
    binding: list[BindingRow]
    whatif: SweepResult | None
    whatif_note: str
    rent_buy: list[RentBuyRow]
    rent_buy_note: str
    factors: list[FactorRow]
    planner_notes: list[str]
    sources: list[SourceRow]
    reproduce: Reproduce
    warnings: list[str] = Field(default_factory=list, description="parts that could not be computed, and why")
    risk: Risk | None = Field(None, description="what could make design 1 miss or stop being the best choice")
    self_host_vs_api: SelfHostVsApi | None = Field(
        None, description="design 1 beside hosted API prices for the model it serves (None: it serves nothing)"
    )
