"""Names as every output shows them: the one sanitiser of what clusterplan renders and hands on.

A name reaches a terminal table, Markdown, HTML, CSV, a launch script's comment and a file name. Control,
bidirectional and zero-width characters are refused in names at validation (``catalog/schema.visible_name``);
what still carries one (a document assembled from many parts, a name built before validation) is escaped here,
visibly (ESC as ``\\x1b``, U+202E as ``\\u202e``), by the table :func:`clusterplan.errors.printable` keeps for error
messages too, so there is one list of what is escaped.
"""

from __future__ import annotations

import re

from clusterplan.errors import CONTROL_CHARACTERS, printable

MAX_SLUG_CHARS = 40  # of a name inside a file name; the file's number keeps names cut alike apart
_UNSAFE_IN_FILE_NAME = re.compile(r"[^A-Za-z0-9._]+")
_JSON_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in CONTROL_CHARACTERS if ord(c) >= 0x7F}


def visible(text: str) -> str:
    """``text`` on one line with every control, bidirectional and zero-width character escaped visibly."""
    return printable(text)


def visible_lines(text: str) -> str:
    """A whole rendered document: newlines kept, every other control, bidirectional or zero-width character
    escaped visibly."""
    return printable(text, keep_newlines=True)


def json_text(text: str) -> str:
    """JSON text with every C1, bidirectional and zero-width character written as its ``\\uXXXX`` escape: the same
    JSON value (C0 characters are escaped by every JSON writer already), nothing invisible in the bytes."""
    return text.translate(_JSON_ESCAPES)


def shell_comment(text: str) -> str:
    """One ``# ...`` line of a shell script: a newline or carriage return in ``text`` is escaped, so nothing after
    it can become a command."""
    return "# " + visible(text)


def file_slug(text: str, fallback: str = "x") -> str:
    """A name as part of a file name: ASCII letters, digits, dots and underscores, every other run of characters
    one dash; no leading dash or dot (never an option, a hidden file or ``..``), at most ``MAX_SLUG_CHARS``."""
    slug = _UNSAFE_IN_FILE_NAME.sub("-", text)[:MAX_SLUG_CHARS].strip("-.")
    return slug or fallback
