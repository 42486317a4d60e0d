"""The review as one self-contained HTML file: inline CSS that also prints well, images embedded as
base64 data URIs, every string through :func:`html.escape`, links only to http(s) URLs, and a
Content-Security-Policy that allows no script at all (a second wall behind the escaping)."""

from __future__ import annotations

import base64
from html import escape

from clusterplan.render.review_markdown import SAFE_URL
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

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;max-width:64rem;
margin:2rem auto;padding:0 1rem;color:#1f2328;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.5rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #d0d7de;
padding-bottom:.2rem}h3{font-size:1.05rem;margin-top:1.4rem}
p.summary{font-size:1.05rem;border-left:4px solid #1f77b4;padding:.2rem 0 .2rem .8rem;background:#f6f8fa}
p.note{color:#57606a;font-size:.9rem}
table{border-collapse:collapse;margin:.4rem 0 1rem;font-size:.88rem}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.strong td{font-weight:600}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:.75rem;overflow-x:auto;font-size:.85rem}
code{font-size:.85em;background:#f6f8fa;padding:0 .2em;word-break:break-all}
figure{margin:1rem 0}figure img{max-width:100%;height:auto}figcaption{color:#57606a;font-size:.85rem}
@media print{body{max-width:none;margin:0;padding:0;font-size:9.5pt;color:#000}
h2{page-break-after:avoid}table,figure,pre{page-break-inside:avoid}
p.summary,th,pre,code{background:none}a{color:inherit;text-decoration:none}
pre{white-space:pre-wrap}}
""".strip()

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def inline(part: Inline) -> str:
    if isinstance(part, Strong):
        return f"<strong>{escape(part.text)}</strong>"
    if isinstance(part, Code):
        return f"<code>{escape(part.text)}</code>"
    if isinstance(part, Link):
        if SAFE_URL.fullmatch(part.url):
            return f'<a href="{escape(part.url)}" rel="noopener noreferrer">{escape(part.text)}</a>'
        return f"{escape(part.text)} ({escape(part.url)})"
    return escape(part)


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in t.header)
    rows = []
    for k, row in enumerate(t.rows):
        cells = "".join(
            f'<td class="num">{inline(c)}</td>' if i in t.numeric else f"<td>{inline(c)}</td>"
            for i, c in enumerate(row)
        )
        cls = ' class="strong"' if k in t.strong_rows else ""
        rows.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>"


def _block(b: Block, images: dict[str, bytes]) -> str:
    if isinstance(b, Heading):
        return f"<h{b.level}>{escape(b.text)}</h{b.level}>"
    if isinstance(b, Paragraph):
        cls = f' class="{escape(b.role)}"' if b.role else ""
        return f"<p{cls}>{''.join(inline(p) for p in b.parts)}</p>"
    if isinstance(b, Bullets):
        return "<ul>\n" + "\n".join(f"<li>{''.join(inline(p) for p in item)}</li>" for item in b.items) + "\n</ul>"
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Figure):
        data = images.get(b.image)
        if data is None:
            return ""
        src = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        caption = f"<figcaption>{escape(b.caption)}</figcaption>" if b.caption else ""
        return f'<figure><img src="{src}" alt="{escape(b.alt)}">{caption}</figure>'
    if isinstance(b, Pre):
        return f"<pre>{escape(b.text.rstrip())}</pre>"
    raise TypeError(f"unknown block {b!r}")  # pragma: no cover


def render(doc: Document, images: dict[str, bytes]) -> str:
    """The whole page; ``images`` maps image names to PNG bytes."""
    body = "\n".join(x for x in (_block(b, images) for b in doc.blocks) if x)
    return visible_lines(
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        f"<title>{escape(doc.title)}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n"
        f"<h1>{escape(doc.title)}</h1>\n{body}\n</body>\n</html>\n"
    )
