"""One exception root for everything clusterplan reports to a user.

Only the CLI prints and exits. Every error says what went wrong, how to fix it,
and, where we can, a hint (a did-you-mean suggestion, the nearest valid value).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


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
        parts = [self.message]
        if self.fix:
            parts.append(f"  fix: {self.fix}")
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)


@dataclass(frozen=True)
class FieldProblem:
    """One located problem in an input document."""

    location: Location
    path: str
    message: str

    def __str__(self) -> str:
        where = str(self.location)
        if self.path:
            return f"{where}: {self.path}: {self.message}"
        return f"{where}: {self.message}"


class InputError(ClusterplanError):
    """A requirement, catalog or command-line value is invalid (exit code 2)."""

    def __init__(self, problems: list[FieldProblem], *, fix: str | None = None, hint: str | None = None):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems), fix=fix, hint=hint)


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
    options = sorted(set(choices))
    lowered = {c.lower(): c for c in options}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.5)
    if not close:
        # Substring matches catch 'h100' -> 'h100-sxm', 'h100-pcie'.
        close = [c for c in lowered if word.lower() in c][:n]
    if not close:
        return None
    return "did you mean " + " or ".join(f"'{lowered[c]}'" for c in close) + "?"
