"""``-`` as the requirement FILE: every command that takes one reads it from standard input instead.

Located messages then name ``<stdin>``; a relative ``hf_config`` path is read from the current folder.
Standard input is read once per command (a report or sweep passes the text on), bounded like a file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from clusterplan.errors import FieldProblem, InputError, Location
from clusterplan.inputs.yamlio import MAX_FILE_BYTES, decode_text

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.requirement.load import ResolvedRequirement

STDIN_ARG = "-"
STDIN_NAME = "<stdin>"
FILE_HELP = "Requirement YAML file ('-' reads it from standard input)."


def is_stdin(path: Path | str) -> bool:
    """Whether a FILE argument means standard input."""
    return str(path) == STDIN_ARG


def display_path(path: Path) -> Path:
    """The name messages give a FILE argument: ``<stdin>`` for ``-``."""
    return Path(STDIN_NAME) if is_stdin(path) else path


def _problem(message: str, line: int | None = None) -> InputError:
    return InputError([FieldProblem(Location(STDIN_NAME, line), "", message)])


def read_stdin(*, max_bytes: int = MAX_FILE_BYTES) -> str:
    """Standard input as text, refused like a file (:func:`clusterplan.inputs.yamlio.decode_text`)."""
    stream = sys.stdin
    if stream is None:
        raise _problem("no standard input to read", None)
    buffer = getattr(stream, "buffer", None)
    try:
        raw = buffer.read(max_bytes + 1) if buffer is not None else stream.read(max_bytes + 1).encode("utf-8")
    except OSError as exc:
        raise _problem(f"cannot read: {exc.strerror}") from None
    return decode_text(raw, STDIN_NAME, max_bytes=max_bytes, noun="input")


def load_requirement_arg(path: Path, catalog: Catalog, *, text: str | None = None) -> ResolvedRequirement:
    """Load the requirement a command was given: a file, or standard input for ``-`` (``text`` when a
    caller has read it already)."""
    from clusterplan.evaluation.pinned import check_pinned_layouts
    from clusterplan.requirement.load import load_requirement, load_requirement_text

    if text is None and is_stdin(path):
        text = read_stdin()
    if text is not None:
        resolved = load_requirement_text(text, STDIN_NAME, catalog, base_dir=Path.cwd())
    else:
        resolved = load_requirement(path, catalog)
    check_pinned_layouts(resolved)  # what no layout of the model can honour, refused before any planning
    return resolved
