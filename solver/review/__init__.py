"""Design-review attachments: ``clusterplan report FILE -o review.md | review.html``.

:mod:`.data` assembles the review as data, :mod:`.document` lays it out as plain blocks, and
:mod:`.markdown` / :mod:`.htmlpage` serialise those blocks (escaping every string); the charts come
from :mod:`clusterplan.render.plots`, and :mod:`clusterplan.render.review_files` writes them all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from clusterplan.errors import ReportError

OutputFormat = Literal["markdown", "html"]


def output_format(path: Path) -> OutputFormat:
    suffix = path.suffix.lower()
    if suffix in (".md", ".markdown"):
        return "markdown"
    if suffix in (".html", ".htm"):
        return "html"
    raise ReportError(f"-o {path}: the file name must end in .md or .html", fix="e.g. -o review.md or -o review.html")


# The images a Markdown review writes into ``<stem>_files/`` beside it (the HTML review embeds them).
REPORT_IMAGES = ("memory", "whatif")


def image_folder(path: Path) -> Path:
    """Where a Markdown review at ``path`` keeps its images."""
    return path.parent / f"{path.stem}_files"


def check_report_paths(path: Path, force: bool) -> None:
    """Refuse ``-o`` and the images beside it before any planning, by :mod:`clusterplan.outputs`' rule."""
    from clusterplan.outputs import check_output_path

    fmt = output_format(path)
    check_output_path(path, force, flag="-o")
    if fmt != "markdown":
        return
    folder = image_folder(path)
    if os.path.islink(folder) and not force:
        raise ReportError(
            f"-o {path}: the image folder {folder} is a symbolic link; it is not followed",
            fix="pass --force to write the images where it points, or choose another -o name",
        )
    if not os.path.lexists(folder):
        return  # created beside the review, whose folder was just checked
    if not folder.is_dir():
        raise ReportError(
            f"-o {path}: {folder} exists and is not a folder; the review's images go there",
            fix="remove or rename it, or choose another -o name",
        )
    for name in REPORT_IMAGES:
        check_output_path(folder / f"{name}.png", force, flag="-o")
