"""A report laid out as plain blocks (headings, paragraphs, tables, figures) that both writers serialise.

The review's content and its order are decided once, here, from :class:`clusterplan.review.ReviewReport`;
numbers are formatted here too. The Markdown and HTML writers only serialise these blocks and escape
every piece of text, so the two formats say the same thing and neither holds logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clusterplan.design.selfhost import SelfHostVsApi
from clusterplan.plan import Design, Plan, ServingPlan, TrainingPlan
from clusterplan.review.records import ReviewReport, Risk
from clusterplan.whatif.sweep import format_value
from clusterplan.wording import odds as odds_words
from clusterplan.wording import provisional as provisional_words
from clusterplan.wording import selfhost as api_words
from clusterplan.wording.fmt import also_runs_as, group_layout, layout, margin, seconds, usd, usd_per_m


@dataclass(frozen=True)
class Strong:
    text: str


@dataclass(frozen=True)
class Link:
    text: str
    url: str  # the writers link it only when it is http(s)


@dataclass(frozen=True)
class Code:
    text: str


Inline = str | Strong | Link | Code


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    parts: list[Inline]
    role: str = ""  # 'summary', 'note': a hint for styling


@dataclass(frozen=True)
class Bullets:
    items: list[list[Inline]]


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[Inline]]
    numeric: frozenset[int] = frozenset()  # right-aligned columns
    strong_rows: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Figure:
    image: str  # name of an image the writer is given (e.g. 'memory')
    alt: str
    caption: str


@dataclass(frozen=True)
class Pre:
    text: str


Block = Heading | Paragraph | Bullets | Table | Figure | Pre


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


def _gib(x: float) -> str:
    return f"{x:,.1f}"


def _recommendation(d: Design, doc: Document) -> None:
    c = d.costs
    rows: list[list[Inline]] = [
        ["GPUs", d.summary],
        ["capital (up front)", usd(c.capital_usd)],
        ["monthly", f"{usd(c.monthly_usd)}/month"],
    ]
    if c.one_off_usd:
        rows.append(["one-off (cloud training)", usd(c.one_off_usd)])
    if c.unused_commitment_usd:
        rows.append(["cloud commitment owed beyond the horizon (whole terms)", usd(c.unused_commitment_usd)])
    rows.append([f"total over {c.horizon_months:g} months", Strong(usd(c.total_usd))])
    if c.usd_per_million_output_tokens is not None:
        rows.append(["per million output tokens", usd(c.usd_per_million_output_tokens)])
    if d.owned_power_w:
        rows.append(["owned power at full load", f"{d.owned_power_w / 1000:,.1f} kW"])
    doc.add(Table(["", "recommended design"], rows))
    items: list[list[Inline]] = []
    for w in d.workloads:
        if isinstance(w, ServingPlan):
            items.append(
                [
                    Strong(w.workload),
                    f" ({w.model}): {w.demand_rps:,.2f} req/s at peak; capacity {w.capacity_rps:,.2f} req/s within the "
                    f"targets ({w.headroom_pct:+.0f}% headroom)",
                ]
            )
            for g in w.groups:
                items.append(
                    [
                        f"{group_layout(g)}: TTFT {seconds(g.ttft_s)}, TPOT {seconds(g.tpot_s)}, p95 "
                        f"{seconds(g.p95_latency_s)} at rated load, {_gib(g.memory_gib_per_gpu)} of "
                        f"{_gib(g.gpu_memory_gib)} GiB per GPU, bound by {g.bound.replace('_', ' ')}"
                    ]
                )
        elif isinstance(w, TrainingPlan):
            due = f" (deadline {seconds(w.deadline_s)})" if w.deadline_s else ""
            items.append(
                [
                    Strong(w.workload),
                    f" ({w.model}): {layout(w)}, {seconds(w.time_to_train_s)}{due}, MFU {w.mfu:.0%}, "
                    f"{w.tokens_per_s:,.0f} tokens/s",
                ]
            )
    doc.add(Bullets(items))
    hw: list[list[Inline]] = [
        [
            x.kind,
            x.label,
            str(x.units),
            str(x.gpus),
            str(x.bought) if x.kind == "owned" else "-",
            f"{x.usd_per_hour:,.2f}" if x.kind == "cloud" else "-",
            usd(x.capital_usd),
            usd(x.monthly_usd),
            x.purpose,
        ]
        for x in d.hardware
    ]
    doc.add(
        Table(
            ["kind", "what", "units", "GPUs", "buy", "$/h", "capital", "monthly", "for"],
            hw,
            numeric=frozenset({2, 3, 4, 5, 6, 7}),
        )
    )
    if d.provisional:
        doc.add(Paragraph([provisional_words.HEADING]), Bullets([[provisional_words.line(f)] for f in d.provisional]))


def _self_host_vs_api(v: SelfHostVsApi, doc: Document) -> None:
    """Design 1 beside the hosted APIs for its model: per month, per million tokens, and the break-even demand."""
    doc.add(Heading(2, api_words.TITLE))
    if not v.quotes or not v.designs:
        doc.add(Paragraph([api_words.note_sentence(v)], role="note"))
        return
    d = v.designs[0]
    rows: list[list[Inline]] = [
        [Strong("design 1, self-hosted"), "-", "-", "-", usd_per_m(d.usd_per_million_tokens),
         f"{usd(d.usd_per_month)}/month", "-"]
    ]  # fmt: skip
    rows += [
        [q.provider, api_words.served(q), usd_per_m(q.usd_per_million_input_tokens),
         usd_per_m(q.usd_per_million_output_tokens), usd_per_m(q.usd_per_million_tokens),
         f"{usd(q.usd_per_month)}/month", api_words.break_even_cell(b)]
        for q, b in zip(v.quotes, d.break_even, strict=True)
    ]  # fmt: skip
    doc.add(
        Table(
            ["who", "model served", "$/M input", "$/M output", "$/M tok (in+out)", "at the demand", "break-even"],
            rows,
            numeric=frozenset({2, 3, 4, 5}),
            strong_rows=frozenset({0}),
        )
    )
    doc.add(Bullets([[line] for line in api_words.notes(v)]))


def _price(x: float, unit: str) -> str:
    return f"{usd(x)}/h" if unit == "USD/h" else f"{usd(x)} per GPU"


def _risk(r: Risk, doc: Document) -> None:
    doc.add(Heading(2, "Risks"))
    doc.add(Heading(3, "Single points of failure"))
    if r.single_points:
        doc.add(
            Bullets(
                [
                    [
                        Strong(p.workload),
                        f": {p.replicas} replica{'s' if p.replicas != 1 else ''}, {p.spares} spare; losing the "
                        f"largest leaves {p.capacity_after_loss_pct:,.0f}% of peak demand"
                        + (" (the service stops)" if p.capacity_after_loss_pct <= 0 else ""),
                    ]
                    for p in r.single_points
                ]
            )
        )
    else:
        doc.add(Paragraph(["Every serving workload has more than one replica and a spare."]))
    doc.add(Heading(3, "Prices that decide the choice"))
    if r.price_gap_usd is None:
        doc.add(Paragraph(["Only one design was found: no price comparison."], role="note"))
    elif not r.prices:
        doc.add(Paragraph(["Design 1 and design 2 depend on the same prices alike."], role="note"))
    else:
        rows: list[list[Inline]] = []
        for p in r.prices:
            check = "-"
            if p.resolved:
                check = f"re-solved: {p.design_after or 'no design'}" + ("" if p.changed else " (design 1 unchanged)")
            rows.append(
                [
                    p.what, _price(p.value_usd, p.unit), "yes" if p.provisional else "", p.as_of,
                    _price(p.switch_usd, p.unit), f"{p.change_pct:+.1f}%", check,
                ]
            )  # fmt: skip
        doc.add(
            Table(
                ["price", "catalog", "provisional", "as of", "design 2 cheaper at", "move", "check"],
                rows,
                numeric=frozenset({1, 4, 5}),
            )
        )
        doc.add(
            Paragraph(
                [
                    f"Design 2 costs {usd(r.price_gap_usd)} more over the horizon. Each price is moved alone; the "
                    "totals are linear in it. The purchase price nearest its switch is re-solved there."
                ],
                role="note",
            )
        )
    doc.add(Heading(3, "Each target against the model's error"))
    note = odds_words.confidence_note(r.confidence)
    if note:
        doc.add(Paragraph([note], role="note"))
    if r.odds:
        doc.add(Bullets([[odds_words.sentence(o)] for o in r.odds]))
    if not r.within_error:
        doc.add(Paragraph(["No target of design 1 lies inside the model's 80% error range."]))
    doc.add(Heading(3, "The model's accuracy for these workloads"))
    doc.add(
        Table(
            ["figure", "measurements", "median error", "bias", "80% of cases"],
            [
                [
                    a.kind,
                    str(a.cases),
                    f"{a.median_abs_error:.1%}",
                    f"{a.bias_pct:+.1f}%",
                    f"{a.range_pct[0]:+.0f}% to {a.range_pct[1]:+.0f}%",
                ]
                for a in r.accuracy
            ],
            numeric=frozenset({1, 2, 3}),
        )
    )
    doc.add(
        Paragraph(
            [
                f"Predicted over measured, unflagged published measurements (docs/accuracy.md, as of "
                f"{r.accuracy_as_of}); the odds above use a normal fit of the log error."
            ],
            role="note",
        )
    )


def _summary(report: ReviewReport, doc: Document) -> None:
    """The summary, and the solve's status in one line."""
    plan = report.plan
    doc.add(Paragraph([report.summary], role="summary"))
    s = plan.solver
    status = f"status {plan.status}, objective {s.objective}"
    if s.status == "feasible" and s.gap is not None:
        status += f" (time limit reached, gap {s.gap:.2%})"
    doc.add(Paragraph([f"clusterplan {report.reproduce.clusterplan_version}; {status}."], role="note"))


def _infeasibility(plan: Plan, doc: Document) -> None:
    """Why no design meets the requirement: unplaceable workloads, or a minimal conflict and its least relaxations."""
    inf = plan.infeasibility
    if inf is None:
        return
    doc.add(Heading(2, "No design meets the requirement"))
    if inf.unplaceable:
        doc.add(Bullets([[u] for u in inf.unplaceable]))
    if inf.conflict:
        doc.add(Paragraph(["These requirements cannot all hold (a minimal set):"]))
        doc.add(Bullets([[Strong(f.title), f": {f.sentence}"] for f in inf.conflict]))
        doc.add(Paragraph(["The least relaxation of each, with everything else as given:"]))
        doc.add(
            Bullets([[r.change, "" if r.restores_feasibility else " (not enough on its own)"] for r in inf.relaxations])
        )
    if not inf.unplaceable and not inf.conflict:
        doc.add(Paragraph([inf.text]))


def _designs(plan: Plan, doc: Document) -> None:
    """The recommended design, then every design found side by side."""
    if not plan.designs:
        return
    d = plan.designs[0]
    doc.add(Heading(2, "Recommended design"))
    _recommendation(d, doc)
    doc.add(Heading(2, "Alternatives"))
    alt: list[list[Inline]] = [
        [
            " ".join([str(x.rank), *(f"({t})" for t in x.labels)]),
            x.summary,
            "; ".join([*(f"{w.workload}: {layout(w)}" for w in x.workloads), *also_runs_as(x)]),
            usd(x.costs.capital_usd),
            usd(x.costs.monthly_usd),
            usd(x.costs.total_usd),
            usd(x.costs.usd_per_million_output_tokens),
            "; ".join(odds_words.short(o) for o in odds_words.flagged(x)) or "-",
        ]
        for x in plan.designs
    ]
    doc.add(
        Table(
            ["#", "GPUs", "layout", "capital", "monthly", "total", "$/M tok", "within model error"],
            alt,
            numeric=frozenset({0, 3, 4, 5, 6}),
            strong_rows=frozenset({0}),
        )
    )
    if len(plan.designs) == 1:
        doc.add(Paragraph(["No other distinct design was found."], role="note"))


def _memory(report: ReviewReport, images: set[str], doc: Document) -> None:
    """What fills the most loaded GPU of each replica (the figure when the writer has it), GiB per GPU."""
    if not report.memory:
        return
    doc.add(Heading(2, "Memory per GPU"))
    if "memory" in images:
        doc.add(Figure("memory", "memory per GPU, stacked by use", "What fills the most loaded GPU of each replica"))
    doc.add(
        Table(
            ["replica", "weights", "KV cache", "activations", "gradients", "optimizer", "runtime", "headroom",
             "total", "capacity"],
            [
                [b.label, _gib(b.weights_gib), _gib(b.kv_cache_gib), _gib(b.activations_gib),
                 _gib(b.gradients_gib), _gib(b.optimizer_gib), _gib(b.runtime_overhead_gib), _gib(b.headroom_gib),
                 Strong(_gib(b.total_gib)), _gib(b.capacity_gib)]
                for b in report.memory
            ],
            numeric=frozenset(range(1, 10)),
        )
    )  # fmt: skip
    doc.add(Paragraph(["GiB per GPU."], role="note"))


def _binding(report: ReviewReport, doc: Document) -> None:
    """What binds the recommended design and what relaxing it saves; every constraint's margin; GPU types that lost."""
    plan = report.plan
    if not plan.designs:
        return
    doc.add(Heading(2, "What binds"))
    if report.binding:
        doc.add(
            Table(
                ["constraint", "at the optimum", "total if relaxed", "saving", "design if relaxed"],
                [
                    [
                        Strong(b.title),
                        b.detail,
                        usd(b.relaxed_total_usd),
                        usd(b.saving_usd),
                        b.relaxed_design or "-",
                    ]
                    for b in report.binding
                ],
                numeric=frozenset({2, 3}),
            )
        )
    else:
        doc.add(Paragraph(["No stated constraint binds: the design is the least-cost way to run the workloads."]))
    e = plan.explanation
    if e is not None:
        doc.add(Heading(3, "Every constraint at the optimum"))
        doc.add(
            Table(
                ["constraint", "status", "margin", "detail"],
                [[c.title, c.status, margin(c.margin, c.unit), c.detail] for c in e.constraints],
                numeric=frozenset({2}),
            )
        )
        if e.lost_gpus:
            doc.add(Heading(3, "Cheaper GPU types that lost"))
            doc.add(Bullets([[f"[{x.workload}] {x.reason}"] for x in e.lost_gpus]))
        if e.mixes:
            doc.add(Bullets([[m.text] for m in e.mixes]))


def _whatif(report: ReviewReport, images: set[str], doc: Document) -> None:
    """The what-if sweep: its figure (when the writer has it) and one row per value of its axis."""
    sw = report.whatif
    if sw is None:
        return
    doc.add(Heading(2, "What if"))
    if "whatif" in images:
        doc.add(Figure("whatif", f"{sw.objective_label} against {sw.axes[0].target.field}", report.whatif_note))
    ax = sw.axes[0]
    doc.add(
        Table(
            [ax.target.field, "status", "GPUs", "layout", "total", "throughput", "p95", "binding", "change"],
            [
                [
                    format_value(r.values[0], ax.target.quantity),
                    r.status,
                    f"{r.gpus} ({r.deployment})" if r.gpus else "-",
                    r.parallelism or "-",
                    usd(r.total_usd),
                    f"{r.throughput:,.2f} {sw.throughput_unit}" if r.throughput is not None else "-",
                    seconds(r.p95_latency_s),
                    ", ".join(r.binding or []) or "-",
                    ("switch: " if r.switch else "") + r.change,
                ]
                for r in sw.rows
            ],
            numeric=frozenset({0, 4, 5, 6}),
            strong_rows=frozenset(i for i, r in enumerate(sw.rows) if r.switch),
        )
    )
    if sw.notes:
        doc.add(Bullets([[n] for n in sw.notes]))
    if not images:
        doc.add(Paragraph([report.whatif_note], role="note"))


def _rent_buy(report: ReviewReport, doc: Document) -> None:
    """Each workload's layout rented and bought, with the break-even."""
    if not report.rent_buy:
        return
    doc.add(Heading(2, "Rent versus buy"))
    doc.add(
        Table(
            ["workload", "layout", "plan chose", "rent", "rent total", "buy", "capital", "running", "buy total",
             "break-even", "cheaper"],
            [
                [r.workload, r.layout, r.chosen,
                 f"{r.rent_offer} at {usd(r.rent_usd_per_hour)}/h" if r.rent_offer else "no instance",
                 usd(r.rent_total_usd), r.buy_servers or "-", usd(r.buy_capital_usd),
                 f"{usd(r.buy_running_usd_per_month)}/month" if r.buy_running_usd_per_month is not None else "-",
                 usd(r.buy_total_usd),
                 f"{r.breakeven_months:,.1f} months" if r.breakeven_months is not None else "never",
                 Strong(r.cheaper) if r.cheaper else "-"]
                for r in report.rent_buy
            ],
            numeric=frozenset({4, 6, 7, 8, 9}),
        )
    )  # fmt: skip
    periods = sorted({f"{r.workload}: {r.period}" for r in report.rent_buy})
    doc.add(Paragraph([f"Totals {'; '.join(periods)}. {report.rent_buy_note}."], role="note"))


def _assumptions(report: ReviewReport, doc: Document) -> None:
    """Every efficiency factor with where it came from, how costs were counted, the catalog rows used, warnings."""
    doc.add(Heading(2, "Assumptions"))
    doc.add(Heading(3, "Efficiency factors and defaults"))
    doc.add(
        Table(
            ["factor", "value", "from", "meaning"],
            [
                [Code(f.name), f.value, "requirement" if f.set_in_requirement else "default", f.description]
                for f in report.factors
            ],
        )
    )
    if report.planner_notes:
        doc.add(Heading(3, "How costs and candidates were counted"))
        doc.add(Bullets([[n] for n in report.planner_notes]))
    doc.add(Heading(3, "Catalog rows used"))
    doc.add(
        Table(
            ["what", "value", "source", "as of", "provisional"],
            [
                [s.what, s.value, Link(s.title, s.url) if s.url else s.title, s.as_of, "yes" if s.provisional else ""]
                for s in report.sources
            ],
        )
    )
    if report.warnings:
        doc.add(Bullets([[w] for w in report.warnings]))


def _reproduce(report: ReviewReport, doc: Document) -> None:
    """What is needed to reproduce the report: versions, fingerprints, the solver settings and the command."""
    r = report.reproduce
    doc.add(Heading(2, "Reproduce"))
    items: list[list[Inline]] = [
        ["clusterplan ", Code(r.clusterplan_version)],
        ["catalog fingerprint (sha256) ", Code(r.catalog_fingerprint)],
        ["requirement ", Code(r.requirement_file), " sha256 ", Code(r.requirement_sha256)],
    ]
    items += [["user catalog ", Code(c.path), " sha256 ", Code(c.sha256)] for c in r.user_catalogs]
    items.append(
        [
            f"solver: CP-SAT, {r.num_workers} worker, seed {r.random_seed}, objective {r.objective}; command ",
            Code(r.command),
        ]
    )
    doc.add(Bullets(items))


def build(report: ReviewReport, images: set[str]) -> Document:
    """The review as blocks, in the order a reviewer reads it."""
    doc = Document(title=f"Design review: {report.title}")
    _summary(report, doc)
    doc.add(Heading(2, "The requirement as given"), Pre(report.requirement_text))
    _infeasibility(report.plan, doc)
    _designs(report.plan, doc)
    _memory(report, images, doc)
    _binding(report, doc)
    _whatif(report, images, doc)
    _rent_buy(report, doc)
    if report.self_host_vs_api is not None:
        _self_host_vs_api(report.self_host_vs_api, doc)
    if report.risk is not None:
        _risk(report.risk, doc)
    _assumptions(report, doc)
    _reproduce(report, doc)
    return doc
