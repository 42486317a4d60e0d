"""A request trace to replay: CSV with the header ``arrival_s,input_tokens,output_tokens`` (further columns are
ignored), or JSON Lines with the same three fields per line. Problems come back located (file:line)."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

from clusterplan.errors import FieldProblem, InputError, Location

TRACE_FIELDS = ("arrival_s", "input_tokens", "output_tokens")
MAX_TRACE_REQUESTS = 1_000_000
_FIX = (
    "give a CSV with the header arrival_s,input_tokens,output_tokens (seconds >= 0, whole tokens >= 1) or JSON "
    'Lines such as {"arrival_s": 0.5, "input_tokens": 1000, "output_tokens": 200}'
)


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: when it is sent, seconds from the trace's start, and its tokens."""

    arrival_s: float
    input_tokens: int
    output_tokens: int


def read_trace(path: Path) -> list[TraceRow]:
    """The trace at ``path`` (``.jsonl`` / ``.ndjson``: JSON Lines; anything else: CSV), sorted by arrival."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            [FieldProblem(Location(str(path)), "trace", f"cannot read the trace: {exc}")], fix=_FIX
        ) from None
    jsonl = path.suffix.lower() in (".jsonl", ".ndjson")
    rows = _jsonl(text, str(path)) if jsonl else _csv(text, str(path))
    if not rows:
        raise InputError([FieldProblem(Location(str(path)), "trace", "the trace holds no request")], fix=_FIX)
    return sorted(rows, key=lambda r: r.arrival_s)


def _row(values: dict[str, object], where: Location) -> TraceRow:
    """One request from its three fields; a located problem when one is missing or out of range."""
    missing = [f for f in TRACE_FIELDS if f not in values or values[f] in (None, "")]
    if missing:
        raise InputError([FieldProblem(where, missing[0], f"missing {', '.join(missing)}")], fix=_FIX)
    try:
        arrival = float(str(values["arrival_s"]))
        tokens = [float(str(values[f])) for f in TRACE_FIELDS[1:]]
    except ValueError as exc:
        raise InputError([FieldProblem(where, "trace", f"not a number: {exc}")], fix=_FIX) from None
    if not math.isfinite(arrival) or arrival < 0:
        raise InputError([FieldProblem(where, "arrival_s", f"must be seconds >= 0, got {arrival}")], fix=_FIX)
    for name, value in zip(TRACE_FIELDS[1:], tokens, strict=True):
        if not math.isfinite(value) or value < 1 or value != int(value) or value > 10_000_000:
            raise InputError(
                [FieldProblem(where, name, f"must be a whole number of tokens >= 1, got {value}")], fix=_FIX
            )
    return TraceRow(arrival, int(tokens[0]), int(tokens[1]))


def _csv(text: str, name: str) -> list[TraceRow]:
    """The rows of a CSV trace, its header naming the three fields."""
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    absent = [f for f in TRACE_FIELDS if f not in header]
    if absent:
        raise InputError(
            [FieldProblem(Location(name, 1), "header", f"the header lacks {', '.join(absent)}, got {header}")], fix=_FIX
        )
    rows: list[TraceRow] = []
    for record in reader:
        if len(rows) >= MAX_TRACE_REQUESTS:
            break
        values = {str(k).strip(): (v.strip() if isinstance(v, str) else v) for k, v in record.items()}
        rows.append(_row(values, Location(name, reader.line_num)))
    return rows


def _jsonl(text: str, name: str) -> list[TraceRow]:
    """The rows of a JSON Lines trace, one object a line (blank lines skipped)."""
    rows: list[TraceRow] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(rows) >= MAX_TRACE_REQUESTS:
            break
        try:
            values = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(
                [FieldProblem(Location(name, number, exc.colno), "trace", f"not JSON: {exc.msg}")], fix=_FIX
            ) from None
        if not isinstance(values, dict):
            raise InputError(
                [FieldProblem(Location(name, number), "trace", "each line must be a JSON object")], fix=_FIX
            )
        rows.append(_row(values, Location(name, number)))
    return rows


SECONDS_PER_HOUR = 3600.0


def hourly_profile(rows: list[TraceRow], period_hours: int, where: str) -> list[float]:
    """A daily (24) or weekly (168) demand profile from a trace whose ``arrival_s`` counts from hour 0 of the period
    (00:00, or Monday 00:00): hour h's requests/s = the requests arriving in hour h of each period the trace covers /
    (the times the trace covers hour h x 3600 s). The trace covers every hour from 0 to its last arrival's; it must
    cover each hour of the period at least once."""
    if len(rows) >= MAX_TRACE_REQUESTS:  # the reader stops there: the hours after it would read as empty
        raise InputError(
            [FieldProblem(Location(where), "trace", f"the trace holds {MAX_TRACE_REQUESTS:,} requests or more")],
            fix="give requests_per_s_by_hour, or a sample of the trace (its rates are what the profile keeps)",
        )
    slots = int(rows[-1].arrival_s // SECONDS_PER_HOUR) + 1  # hours from 0 to the last arrival's, each covered once
    if slots < period_hours:
        raise InputError(
            [
                FieldProblem(
                    Location(where),
                    "trace",
                    f"the trace covers {slots} hour(s) of a {period_hours}-hour period: a profile needs every hour",
                )
            ],
            fix=f"give a trace of at least {period_hours} hours (arrival_s from hour 0 of the period), or give "
            "requests_per_s_by_hour",
        )
    counts = [0] * period_hours
    for r in rows:
        counts[int(r.arrival_s // SECONDS_PER_HOUR) % period_hours] += 1
    # hour h of the period is covered once per slot k < slots with k mod H == h
    covered = [len(range(h, slots, period_hours)) for h in range(period_hours)]
    return [n / (c * SECONDS_PER_HOUR) for n, c in zip(counts, covered, strict=True)]
