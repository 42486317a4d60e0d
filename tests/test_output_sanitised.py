"""Every output form shows a name's control, bidirectional and zero-width characters escaped, visibly.

Names holding them are refused at validation (tests/test_export_safety.py); what is rendered is escaped as well, by
one sanitiser (``wording/safe``, the table of ``errors.printable``), so a name from any source (a plan read back, a
document built from many parts) cannot clear the screen, open a hyperlink or reverse a line: the terminal table,
Markdown, JSON, the review's Markdown and HTML, CSV.
"""

from __future__ import annotations

import io
import json

import pytest

from conftest import example

HOSTILE = "evil\x1b[2J\x1b]8;;https://x.example\x07link\x1b]8;;\x07\u202eRTL\u2066iso\u2069\u200bzw\ufeff\x9bC1\x7f"
RAW = ["\x1b", "\x07", "\u202e", "\u2066", "\u2069", "\u200b", "\ufeff", "\x9b", "\x7f"]


def assert_clean(text: str) -> None:
    assert not [c for c in RAW if c in text], [c for c in RAW if c in text]
    assert "\\x1b[2J" in text and "\\u202eRTL" in text, text[:3000]  # escaped, not dropped


@pytest.fixture(scope="module")
def hostile_plan() -> object:
    from clusterplan.catalog.load import load_catalog
    from clusterplan.pipeline import PlanOptions, plan_requirement
    from clusterplan.plan import Plan
    from clusterplan.requirement.load import load_requirement

    cat = load_catalog()
    plan = plan_requirement(load_requirement(example("7b-chat-serving"), cat), cat, PlanOptions(top=2))
    hostile = json.dumps(HOSTILE)[1:-1]
    text = (
        plan.model_dump_json().replace('"assistant"', f'"{hostile}"').replace('"8B assistant serving"', f'"{hostile}"')
    )
    return Plan.model_validate_json(text)


@pytest.mark.slow
def test_terminal_table(hostile_plan: object) -> None:
    from clusterplan.console import SafeConsole
    from clusterplan.plan import Plan
    from clusterplan.render import table

    assert isinstance(hostile_plan, Plan)
    buf = io.StringIO()
    table.render(hostile_plan, SafeConsole(file=buf, width=200, highlight=False, force_terminal=False))
    assert_clean(buf.getvalue())


@pytest.mark.slow
def test_markdown_and_json(hostile_plan: object) -> None:
    from clusterplan.plan import Plan
    from clusterplan.render import jsonout, plan_markdown

    assert isinstance(hostile_plan, Plan)
    assert_clean(plan_markdown.render(hostile_plan))
    text = jsonout.render(hostile_plan)
    assert not [c for c in RAW if c in text]
    assert json.loads(text)["requirement"]["name"] == HOSTILE  # the same JSON value, escaped bytes


def test_review_markdown_and_html() -> None:
    from clusterplan.render import review_html, review_markdown
    from clusterplan.review.document import Bullets, Code, Document, Heading, Link, Paragraph, Pre, Strong, Table

    doc = Document(
        title=HOSTILE,
        blocks=[
            Heading(2, HOSTILE),
            Paragraph([HOSTILE, Strong(HOSTILE), Code(HOSTILE), Link(HOSTILE, "https://example.com")]),
            Bullets([[HOSTILE]]),
            Table(header=[HOSTILE], rows=[[HOSTILE]]),
            Pre(HOSTILE),
        ],
    )
    assert_clean(review_markdown.render(doc, {}))
    assert_clean(review_html.render(doc, {}))


def test_csv() -> None:
    from clusterplan.render.sweep_view import _csv

    assert_clean(_csv(["design"], [[HOSTILE]]))


def test_console_output_of_a_command() -> None:
    from clusterplan.console import SafeConsole

    buf = io.StringIO()
    SafeConsole(file=buf, highlight=False).print(f"wrote {HOSTILE}", markup=False)
    assert_clean(buf.getvalue())
