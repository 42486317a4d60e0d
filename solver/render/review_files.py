"""The design review's files: its charts rendered, then the review written (Markdown with its images beside it,
or one HTML page), each file atomically. The edge writer of :mod:`clusterplan.review`."""

from __future__ import annotations

from pathlib import Path

from clusterplan.outputs import make_folder, write_bytes, write_text
from clusterplan.render import plots, review_html, review_markdown
from clusterplan.review import REPORT_IMAGES, document, image_folder, output_format
from clusterplan.review.records import ReviewReport


def write_report(report: object, path: Path, *, force: bool = False) -> list[Path]:
    """Render the charts and write the review to ``path`` (Markdown with images in ``<stem>_files/``
    beside it, or one HTML file), each file atomically; the paths written."""
    assert isinstance(report, ReviewReport)
    images: dict[str, bytes] = {}
    if report.memory:
        images["memory"] = plots.memory_figure(report.memory, "png")
    if report.whatif is not None:
        images["whatif"] = plots.sweep_figure(report.whatif, "png")
    assert set(images) <= set(REPORT_IMAGES)
    doc = document.build(report, set(images))
    if output_format(path) == "html":
        write_text(path, review_html.render(doc, images), force=force, flag="-o")
        return [path]
    written: list[Path] = []
    rel: dict[str, str] = {}
    if images:
        folder = image_folder(path)
        make_folder(folder, flag="-o")
        for name, data in sorted(images.items()):
            target = folder / f"{name}.png"
            write_bytes(target, data, force=force, flag="-o")
            written.append(target)
            rel[name] = f"{folder.name}/{target.name}"
    write_text(path, review_markdown.render(doc, rel), force=force, flag="-o")  # last: its images exist
    return [path, *written]
