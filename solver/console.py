"""The terminal every command writes to, and the guard that turns clusterplan errors into a message and an exit
code. Beneath :mod:`clusterplan.cli` and :mod:`clusterplan.commands`: only these print and exit.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from clusterplan.errors import ClusterplanError, printable

T = TypeVar("T")


class SafeConsole(Console):
    """A console that shows every string it renders (``print``'s text, table cells, titles) with its control,
    bidirectional and zero-width characters escaped visibly (ESC as ``\\x1b``; the table of
    :func:`clusterplan.errors.printable`, which ``wording/safe`` applies to every other output), so a name cannot
    drive or reorder the terminal; newlines are kept."""

    def render_str(self, text: str, *args: Any, **kwargs: Any) -> Text:
        return super().render_str(printable(text, keep_newlines=True), *args, **kwargs)


# Piped output (a file, a CI log, a design doc) gets room for the plan's tables; a terminal keeps its width.
_PIPE_WIDTH = 160
err_console = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
out_console = SafeConsole(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else _PIPE_WIDTH)

# debug: --debug given; freeze: this process is the clusterplan command itself (set by cli.entry), which ends with a
# fast exit, so what a command has imported by the time its body runs lives until then.
state = {"debug": False, "freeze": False}


# Error handlers that never raise on a character the encoding lacks; any other (strict, and
# surrogateescape on a non-UTF-8 stream) is replaced.
_NEVER_FAILING = {"backslashreplace", "replace", "namereplace", "xmlcharrefreplace", "ignore"}


def safe_streams() -> None:
    """Write what stdout and stderr cannot encode as backslash escapes (``\\u00e9``) instead of failing."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) not in _NEVER_FAILING:
            with contextlib.suppress(ValueError, OSError):  # closed or detached: nothing will be written
                reconfigure(errors="backslashreplace")


class Terminated(BaseException):
    """SIGTERM, raised in the main thread while a command runs (``cli.run`` installs the handler), so that it unwinds
    like Ctrl-C's ``KeyboardInterrupt``: pool workers stopped, temporary files removed, exit 143."""


# The exit codes of an interrupted command (128 + the signal's number, as shells report them).
EXIT_INTERRUPTED = 130  # SIGINT, Ctrl-C
EXIT_TERMINATED = 143  # SIGTERM


def interruption(exc: BaseException) -> int | None:
    """The exit code when ``exc`` is an interrupt or was raised while handling one (an import cut short by Ctrl-C
    surfaces as an ImportError), else None."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        if isinstance(cause, Terminated):
            return EXIT_TERMINATED
        cause = cause.__cause__ or cause.__context__
    return None


def report_interruption(code: int) -> None:
    """The one line an interrupted command ends with."""
    err_console.print("interrupted" if code == EXIT_INTERRUPTED else "terminated", markup=False)


def guarded(fn: Callable[[], T]) -> T:
    """Run a command body; turn clusterplan errors into a message and an exit code.

    In the clusterplan command itself, the collector is first told to leave alone every object that exists by now
    (``gc.freeze``): a command imports its modules when it runs, after :func:`clusterplan.cli.entry` froze the CLI's,
    and walking them again (~0.1 M objects for a ``solve``) cost one 30-70 ms collection of the 70B example's plan."""
    if state["freeze"]:
        gc.freeze()
    try:
        return fn()
    except ClusterplanError as exc:
        if state["debug"]:
            raise
        err_console.print(f"error: {exc.render()}", markup=False)
        raise typer.Exit(exc.exit_code) from None
    except (KeyboardInterrupt, Terminated) as exc:
        code = interruption(exc) or EXIT_INTERRUPTED
        report_interruption(code)
        raise typer.Exit(code) from None
