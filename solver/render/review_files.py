"""The design review's files: its charts rendered, then the review written (Markdown with its images beside it,
or one HTML page), each file atomically. The edge writer of :mod:`clusterplan.review`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from clusterplan.outputs import make_folder, write_bytes, write_new_folder, write_text
from clusterplan.render import plots, review_html, review_markdown
from clusterplan.review import REPORT_IMAGES, document, image_folder, output_format
from clusterplan.review.records import ReviewReport


def write_report(report: object, path: Path, *, force: bool = False) -> list[Path]:
    """Render the charts and write the review to ``path`` (Markdown with images in ``<stem>_files/``
    beside it, or one HTML file), each file atomically; the paths written.

    Everything is rendered before the first byte is written. A new image folder is filled under a temporary name
    beside it and renamed into place, then the Markdown written; if that fails or the command is interrupted
    (Ctrl-C, SIGTERM) the folder is removed again: no images without their review (a SIGTERM once left
    ``<stem>_files/`` without the ``.md``)."""
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
    folder = image_folder(path)
    rel = {name: f"{folder.name}/{name}.png" for name in sorted(images)}
    text = review_markdown.render(doc, rel)
    written = [folder / f"{name}.png" for name in sorted(images)]
    created: Path | None = None
    try:
        if images and not os.path.lexists(folder):
            created = write_new_folder(folder, {f"{n}.png": d for n, d in images.items()}, flag="-o")
        elif images:  # a folder already there (checked before planning): its images replaced one by one
            make_folder(folder, flag="-o")
            for name, data in sorted(images.items()):
                write_bytes(folder / f"{name}.png", data, force=force, flag="-o")
        write_text(path, text, force=force, flag="-o")  # last: its images exist
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    return [path, *written]
