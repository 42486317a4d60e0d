"""Design-review attachments: ``clusterplan report FILE -o review.md | review.html``.

:mod:`.data` assembles the review as data, :mod:`.document` lays it out as plain blocks, and
:mod:`.markdown` / :mod:`.htmlpage` serialise those blocks (escaping every string); the charts come
from :mod:`clusterplan.render.plots`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from clusterplan.errors import ClusterplanError

OutputFormat = Literal["markdown", "html"]


class ReportError(ClusterplanError):
    """A report that cannot be written as asked (exit code 2)."""


def output_format(path: Path) -> OutputFormat:
    suffix = path.suffix.lower()
    if suffix in (".md", ".markdown"):
        return "markdown"
    if suffix in (".html", ".htm"):
        return "html"
    raise ReportError(f"-o {path}: the file name must end in .md or .html", fix="e.g. -o review.md or -o review.html")


def write_report(report: object, path: Path) -> list[Path]:
    """Render the charts and write the review to ``path`` (Markdown with images beside it, or one HTML file)."""
    from clusterplan.render import plots, review_html, review_markdown
    from clusterplan.review import document
    from clusterplan.review.records import ReviewReport

    assert isinstance(report, ReviewReport)
    images: dict[str, bytes] = {}
    if report.memory:
        images["memory"] = plots.memory_figure(report.memory, "png")
    if report.whatif is not None:
        images["whatif"] = plots.sweep_figure(report.whatif, "png")
    doc = document.build(report, set(images))
    if output_format(path) == "markdown":
        return review_markdown.write(doc, path, images)
    path.write_text(review_html.render(doc, images), encoding="utf-8")
    return [path]
