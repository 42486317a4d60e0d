"""One exception root for everything clusterplan reports to a user.

Only the CLI prints and exits. Every error says what went wrong, how to fix it,
and, where we can, a hint (a did-you-mean suggestion, the nearest valid value).
"""

from __future__ import annotations

import difflib
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# How much of a user's text a message quotes: names longer than this are cut with an ellipsis and their
# length (a 3,000,000-character name took 41 s to render in full).
MAX_QUOTED_CHARS = 80
# Problems listed one per line before the rest are summarised by kind (150,000 unknown keys printed
# 7.9 MB of stderr and took 24 s).
MAX_LISTED_PROBLEMS = 20
# Longest message one problem prints (names in it are already cut to MAX_QUOTED_CHARS).
MAX_MESSAGE_CHARS = 2000
# Problems located and worded in full; beyond them a problem is only counted by kind (49,000 unknown
# keys took 0.5 s to word, all but 20 of them never shown).
MAX_LOCATED_PROBLEMS = 1000
# Did-you-mean suggestions computed per error report; the rest of the names are reported without one.
MAX_SUGGESTIONS = 20

_QUOTED_INT_BITS = 1024

# C0 and C1 control characters and DEL, as Python escapes them (ESC -> \x1b); newlines kept where asked.
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]}
_CONTROL.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})
_CONTROL_KEEP_NEWLINES = {c: e for c, e in _CONTROL.items() if c != 0x0A}
# Unicode bidirectional overrides and isolates reorder what a terminal shows (CVE-2021-42574); zero-width and
# invisible format characters (zero-width space and joiners, marks, word joiner, soft hyphen, byte-order mark) and
# the Unicode line and paragraph separators hide or split text without showing anything.
INVISIBLE = (
    *range(0x202A, 0x202F), *range(0x2066, 0x206A), *range(0x200B, 0x2010), *range(0x2060, 0x2065),
    0x00AD, 0x061C, 0x180E, 0x2028, 0x2029, 0xFEFF,
)  # fmt: skip
_CONTROL.update({c: f"\\u{c:04x}" for c in INVISIBLE})
_CONTROL_KEEP_NEWLINES.update({c: f"\\u{c:04x}" for c in INVISIBLE})
# Every character printable() escapes: refused in names (catalog/schema.py Label), escaped in every output.
CONTROL_CHARACTERS = frozenset(chr(c) for c in _CONTROL)


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with control characters escaped (ESC -> ``\\x1b``), so a name cannot drive the terminal.

    The one escaping function: the error renderer and every command that prints a user's names use it.
    """
    return text.translate(_CONTROL_KEEP_NEWLINES if keep_newlines else _CONTROL)


def shorten(text: str, max_chars: int = MAX_QUOTED_CHARS) -> str:
    """``text`` escaped (:func:`printable`) and, beyond ``max_chars``, cut in the middle with an ellipsis and its
    length: the start and the last quarter stay, so a long path still shows its file name."""
    if len(text) <= max_chars:
        return printable(text)
    tail = max_chars // 4
    return f"{printable(text[: max_chars - tail])}...{printable(text[-tail:])} ({len(text):,} characters)"


def quoted(value: object, max_chars: int = MAX_QUOTED_CHARS) -> str:
    """A user's value as a message quotes it: ``'name'`` for text, ``repr`` otherwise; escaped and cut short."""
    if isinstance(value, str):
        return f"'{shorten(value, max_chars)}'"
    if isinstance(value, int) and value.bit_length() > _QUOTED_INT_BITS:  # repr is slow, then refused
        return f"an integer of about {int(value.bit_length() * math.log10(2)):,} digits"
    try:
        return shorten(repr(value), max_chars)
    except RecursionError:
        return "a deeply nested value"


@dataclass(frozen=True)
class Location:
    """Where in a user's file a problem sits (1-based line and column)."""

    file: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return self.file
        if self.column is None:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.column}"


class ClusterplanError(Exception):
    """Root of every error clusterplan raises on purpose. Exit code 2 unless overridden."""

    exit_code = 2

    def __init__(self, message: str, *, fix: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.hint = hint

    def render(self) -> str:
        """The message, fix and hint as printed, control characters escaped (:func:`printable`)."""
        parts = [self.message]
        if self.fix:
            parts.append(f"  fix: {self.fix}")
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return printable("\n".join(parts), keep_newlines=True)


@dataclass(frozen=True)
class FieldProblem:
    """One located problem in an input document.

    ``kind`` names the sort of problem (``unknown_key``, ``unknown_gpu``, pydantic's error type, ...) so
    that a long list can be summarised by kind without reading the words.
    """

    location: Location
    path: str
    message: str
    kind: str = ""

    def __str__(self) -> str:
        where = shorten(str(self.location), 4 * MAX_QUOTED_CHARS)
        message = self.message
        if len(message) > MAX_MESSAGE_CHARS:  # a safety net: messages quote names through quoted()
            message = f"{message[:MAX_MESSAGE_CHARS]}... ({len(message):,} characters)"
        message = printable(message, keep_newlines=True)
        if self.path:
            return f"{where}: {shorten(self.path, 2 * MAX_QUOTED_CHARS)}: {message}"
        return f"{where}: {message}"


def render_problems(problems: list[FieldProblem], limit: int = MAX_LISTED_PROBLEMS) -> str:
    """The first ``limit`` problems one per line, then the rest counted by kind."""
    lines = [str(p) for p in problems[:limit]]
    rest = problems[limit:]
    if rest:
        kinds = Counter(p.kind or "other" for p in rest)
        by_kind = ", ".join(f"{kind.replace('_', ' ')}: {n:,}" for kind, n in sorted(kinds.items(), key=_by_count))
        lines.append(f"... and {len(rest):,} more problems ({by_kind}); fix the ones above and run again")
    return "\n".join(lines)


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    return (-item[1], item[0])


class InputError(ClusterplanError):
    """A requirement, catalog or command-line value is invalid (exit code 2)."""

    def __init__(self, problems: list[FieldProblem], *, fix: str | None = None, hint: str | None = None):
        self.problems = problems
        super().__init__(render_problems(problems), fix=fix, hint=hint)


class CatalogError(ClusterplanError):
    """The shipped or a user catalog is inconsistent (exit code 2)."""


class ConfigurationImpossible(ClusterplanError):
    """A configuration the user pinned cannot run (exit code 1); ``reasons`` says why."""

    exit_code = 1

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("configuration is impossible:\n" + "\n".join(f"  - {r}" for r in reasons))


def did_you_mean(word: str, choices: Iterable[str], n: int = 3) -> str | None:
    """A 'did you mean ...?' hint for ``word`` among ``choices``, or None if nothing is close."""
    if len(word) > 2 * MAX_QUOTED_CHARS:  # no name is that long; comparing it would only cost time
        return None
    options = sorted(set(choices))
    lowered = {c.lower(): c for c in options}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.5)
    if not close:
        # Substring matches catch 'h100' -> 'h100-sxm', 'h100-pcie'.
        close = [c for c in lowered if word.lower() in c][:n]
    if not close:
        return None
    return "did you mean " + " or ".join(f"'{lowered[c]}'" for c in close) + "?"


# ------------------------------------------------------------------------------------------------
# The errors each layer raises. They live here, beside the root, so that a caller catches one of them without
# importing the layer that raises it, and so there is one list of what a user can meet.
# ------------------------------------------------------------------------------------------------


class CatalogInputError(InputError, CatalogError):
    """A shipped or user catalog is invalid or contradicts itself (exit code 2), with located problems."""


class UnknownNameError(ClusterplanError):
    """A GPU, model or instance name that the catalog does not hold; ``suggestions`` are the closest ids."""

    def __init__(self, kind: str, name: str, suggestions: list[str], listing: str) -> None:
        self.kind = kind
        self.name = name
        self.suggestions = suggestions
        hint = "did you mean " + " or ".join(f"'{s}'" for s in suggestions) + "?" if suggestions else None
        super().__init__(
            f"unknown {kind} {quoted(name)}",
            fix=f"run `clusterplan catalog {listing}` to list them, or add one with --catalog FILE",
            hint=hint,
        )


class HfConfigError(ClusterplanError):
    """A config.json this reader cannot turn into an architecture without guessing."""


class OutOfRange(ClusterplanError):
    """Figures too large or too small for the solver's integers to represent exactly (exit code 2).

    The requirement and catalog loaders refuse, located, every value outside the documented ranges
    (docs/guarantees.md); this is the backstop for combinations of in-range values that still overflow.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"cannot plan this requirement exactly: {detail}",
            fix="check the units of the demand, budgets, deadlines and any user-catalog prices",
            hint="docs/guarantees.md lists the ranges clusterplan plans within",
        )


class SweepError(ClusterplanError):
    """A --vary field or value that cannot be swept (exit code 2)."""


class BackendError(ClusterplanError):
    """An unknown backend, ``--backend ray`` without Ray installed, or a cluster not reached (exit code 2)."""


class OutputError(ClusterplanError):
    """An output path that is refused, or a write that failed (exit code 2)."""


class ReportError(ClusterplanError):
    """A report that cannot be written as asked (exit code 2)."""


class NeedsBudget(ClusterplanError):
    """--objective max_throughput or min_latency without any budget: the answer is unbounded (exit 2)."""


class NoDesign(ClusterplanError):
    """The requirement has no feasible design to price (exit 1: a well-formed question with no answer)."""

    exit_code = 1


class NotExportable(ClusterplanError):
    """Every workload of the design needs a layout its framework cannot run (exit 1: a valid question with no
    answer); ``reasons`` says why, one line per refusal."""

    exit_code = 1

    def __init__(self, reasons: list[str], *, fix: str | None = None) -> None:
        self.reasons = reasons
        super().__init__("nothing to export:\n" + "\n".join(f"  - {r}" for r in reasons), fix=fix)


class CalibrationError(ClusterplanError):
    """A benchmark run ``clusterplan calibrate`` cannot predict (the model does not fit the GPU at the run's layout,
    a setting the file and the flags both lack, runs that mix engines or GPUs): exit code 2."""
