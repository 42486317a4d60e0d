"""``clusterplan report``: the review carries the recommended design's figures, HTML is well formed and
self-contained, hostile names print as text, and an infeasible requirement still gets a report."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clusterplan import pipeline
from clusterplan.catalog.load import load_catalog
from clusterplan.cli import app
from clusterplan.requirement.load import load_requirement
from clusterplan.wording.fmt import usd
from conftest import example, reusing_plans

SERVING_70B = example("70b-serving")
runner = CliRunner()

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class StrictParser(HTMLParser):
    """Fails on any unbalanced or mis-nested tag; records every tag and attribute."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        assert tag not in VOID, f"end tag for void element <{tag}>"
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse_html(text: str) -> StrictParser:
    p = StrictParser()
    p.feed(text)
    p.close()
    assert p.stack == [], f"unclosed tags: {p.stack}"
    assert text.startswith("<!DOCTYPE html>")
    return p


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The 70B example's review as Markdown (its what-if on two worker processes) and as HTML (on one), each
    written by ``clusterplan report``; the example's plan is made once and is the one both show."""
    d = tmp_path_factory.mktemp("report")
    md, html_out = d / "review.md", d / "review.html"
    with reusing_plans():
        r1 = runner.invoke(app, ["report", str(SERVING_70B), "-o", str(md), "--top", "3", "-j", "2"])
        assert r1.exit_code == 0, r1.output
        r2 = runner.invoke(app, ["report", str(SERVING_70B), "-o", str(html_out), "--top", "3", "-j", "1"])
        assert r2.exit_code == 0, r2.output
        cat = load_catalog()
        plan = pipeline.plan_requirement(load_requirement(SERVING_70B, cat), cat, pipeline.PlanOptions(top=3))
    return {"dir": d, "md": md.read_text(), "html": html_out.read_text(), "plan": plan}


@pytest.mark.slow
def test_report_has_the_recommended_designs_key_figures(reports: dict[str, Any]) -> None:
    d = reports["plan"].designs[0]
    for text in (reports["md"], reports["html"]):
        assert usd(d.costs.total_usd) in text and usd(d.costs.capital_usd) in text
        assert "70B chat serving" in text
        for section in ("Recommended design", "Alternatives", "Memory per GPU", "What binds", "What if",
                        "Rent versus buy", "Assumptions", "Catalog rows used", "Reproduce"):  # fmt: skip
            assert section in text, section
        assert reports["plan"].catalog_fingerprint in text
        assert "memory_bandwidth_efficiency" in text.replace("\\_", "_")  # Markdown escapes the underscores


@pytest.mark.slow
def test_markdown_images_sit_beside_it(reports: dict[str, Any]) -> None:
    md = reports["md"]
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert sorted(links) == ["review_files/memory.png", "review_files/whatif.png"]
    for link in links:
        assert (reports["dir"] / link).read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_html_is_well_formed_and_self_contained(reports: dict[str, Any]) -> None:
    page = parse_html(reports["html"])
    imgs = [dict(a) for t, a in page.tags if t == "img"]
    assert len(imgs) == 2 and all((i["src"] or "").startswith("data:image/png;base64,") for i in imgs)
    assert not [t for t, a in page.tags if t in ("script", "link", "iframe")]
    hrefs = [dict(a).get("href") or "" for t, a in page.tags if t == "a"]
    assert hrefs and all(h.startswith(("http://", "https://")) for h in hrefs)
    assert "@media print" in reports["html"]


HOSTILE = """\
name: <script>alert(1)</script>
model: llama-3.1-70b
workloads:
  - kind: serving
    name: "x](javascript:alert(2)) <img src=x onerror=alert(3)>"
    requests_per_min: 300
    input_tokens: 500
    output_tokens: 100
    p95_latency: 10s
deployment: owned
constraints:
  allowed_gpus: [b200]
"""

HOSTILE_CATALOG = """\
sources:
  evil: {title: "<b onmouseover=alert(4)>spec</b> | [x](javascript:alert(5))", url: "javascript:alert(6)"}
gpus:
  - id: b200
    override: true
    name: "<svg onload=alert(7)>"
    source: evil
    as_of: '2026-01'
"""


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".md", ".html"])
def test_hostile_names_are_rendered_harmless(tmp_path: Path, suffix: str) -> None:
    req = tmp_path / "hostile.yaml"
    req.write_text(HOSTILE)
    cat = tmp_path / "evil-catalog.yaml"
    cat.write_text(HOSTILE_CATALOG)
    out = tmp_path / f"review{suffix}"
    result = runner.invoke(
        app, ["report", str(req), "--catalog", str(cat), "-o", str(out), "--top", "1", "--what-if", "none", "-j", "1"]
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    for raw in ("<script", "<img src=x", "<svg", "<b ", 'href="javascript'):
        assert raw not in text, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    paren = "\\(" if suffix == ".md" else "("
    assert f"&lt;svg onload=alert{paren}7" in text  # the overridden GPU name reached the report, escaped
    if suffix == ".html":
        page = parse_html(text)
        assert not [t for t, a in page.tags if t in ("script", "svg", "b", "iframe")]
        assert all(not (v or "").lower().startswith("javascript") for _, attrs in page.tags for _, v in attrs)
        assert "<script>alert(1)</script>" in "".join(page.text)  # shown to the reader as text
    else:
        assert "<pre>name: &lt;script&gt;" in text
        outside_pre = re.sub(r"<pre>.*?</pre>", "", text, flags=re.S)  # an HTML block: Markdown is not parsed in it
        assert "](javascript:" not in outside_pre and "x\\]\\(javascript:alert\\(2\\)\\)" in outside_pre
        assert "(javascript:alert\\(6\\))" in text and "(<javascript" not in text  # printed, never linked


INFEASIBLE = """\
name: 70B on a shoestring
model: llama-3.1-70b
workloads:
  - kind: serving
    requests_per_min: 1000
    input_tokens: 1000
    output_tokens: 200
    p95_latency: 5s
budget:
  total: $20k
  horizon: 12
deployment: cloud
"""


@pytest.mark.slow
def test_infeasible_requirement_gets_a_report_with_the_conflict(tmp_path: Path) -> None:
    req = tmp_path / "tight.yaml"
    req.write_text(INFEASIBLE)
    out = tmp_path / "tight.html"
    result = runner.invoke(app, ["report", str(req), "-o", str(out), "-j", "2"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    parse_html(text)
    assert "No design meets the requirement" in text
    assert "total budget" in text and "budget.total &gt;= $" in text
    assert "feasible from budget.total" in text  # the what-if walks the budget past the least relaxation


def test_bad_output_suffix_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(SERVING_70B), "-o", str(tmp_path / "review.pdf")])
    assert result.exit_code == 2
    assert ".md or .html" in result.output
