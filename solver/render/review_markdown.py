"""The review as GitHub-flavoured Markdown, images written beside it (``review_files/*.png``).

Every piece of text is escaped for where it lands: HTML-special characters become entities and
Markdown punctuation is backslash-escaped, so a requirement named ``<script>alert(1)</script>`` or a
catalog title with ``](javascript:...)`` prints as text. The requirement file goes in an escaped
``<pre>`` block rather than a code fence, which no content can close. Links are made only to http(s)
URLs; anything else prints as text.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from clusterplan.review.document import (
    Block,
    Bullets,
    Code,
    Document,
    Figure,
    Heading,
    Inline,
    Link,
    Paragraph,
    Pre,
    Strong,
    Table,
)
from clusterplan.wording.safe import visible_lines

_PUNCT = re.compile(r"([\\`*_\[\]{}()|~#!])")
_LEADING = re.compile(r"^([-+*=])(?=\s|$)|^(\d{1,9})([.)])(?=\s|$)")
SAFE_URL = re.compile(r"https?://[^\s<>\"'`\\()\[\]{}|^]+")


def text(value: str, *, line_start: bool = False) -> str:
    """Inline text, escaped: one line, entities for & < >, Markdown punctuation backslash-escaped; at the
    start of a line, a list or heading marker too (``- x``, ``1. x``)."""
    t = " ".join(value.split("\n")).replace("\r", " ")
    t = html.escape(t, quote=False)
    t = _PUNCT.sub(r"\\\1", t)
    if not line_start:
        return t
    return _LEADING.sub(lambda m: f"\\{m.group(1)}" if m.group(1) else f"{m.group(2)}\\{m.group(3)}", t)


def inline(part: Inline, *, line_start: bool = False) -> str:
    if isinstance(part, Strong):
        return f"**{text(part.text)}**" if part.text.strip() else text(part.text)
    if isinstance(part, Code):
        return f"<code>{text(part.text)}</code>"
    if isinstance(part, Link):
        if SAFE_URL.fullmatch(part.url):
            return f"[{text(part.text)}](<{part.url}>)"
        return f"{text(part.text)} ({text(part.url)})"
    return text(part, line_start=line_start)


def _line(parts: list[Inline]) -> str:
    return "".join(inline(p, line_start=i == 0) for i, p in enumerate(parts))


def _table(t: Table) -> list[str]:
    head = "| " + " | ".join(text(h) or " " for h in t.header) + " |"
    rule = "|" + "|".join("---:" if i in t.numeric else "---" for i in range(len(t.header))) + "|"
    out = [head, rule]
    for k, row in enumerate(t.rows):
        cells = []
        for cell in row:
            s = inline(cell)
            if k in t.strong_rows and isinstance(cell, str) and cell.strip():
                s = f"**{s}**"
            cells.append(s or " ")
        out.append("| " + " | ".join(cells) + " |")
    return out


def _block(b: Block, image_paths: dict[str, str]) -> list[str]:
    if isinstance(b, Heading):
        return ["#" * b.level + " " + text(b.text, line_start=True)]
    if isinstance(b, Paragraph):
        line = _line(b.parts)
        return [f"> {line}" if b.role == "summary" else line]
    if isinstance(b, Bullets):
        return [f"- {_line(item)}" for item in b.items]
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Figure):
        path = image_paths.get(b.image)
        if path is None:
            return []
        out = [f"![{text(b.alt)}]({quote(path)})"]
        if b.caption:
            out += ["", text(b.caption)]
        return out
    if isinstance(b, Pre):
        return [f"<pre>{html.escape(b.text.rstrip(), quote=False)}</pre>"]
    raise TypeError(f"unknown block {b!r}")  # pragma: no cover


def render(doc: Document, image_paths: dict[str, str]) -> str:
    """The Markdown text; ``image_paths`` maps image names to paths relative to the Markdown file."""
    out = [f"# {text(doc.title)}"]
    for b in doc.blocks:
        lines = _block(b, image_paths)
        if lines:
            out += ["", *lines]
    return visible_lines("\n".join(out) + "\n")
