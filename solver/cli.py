"""The ``clusterplan`` command line: a thin typer layer. Only this layer prints and exits.

Exit codes: 0 success; 1 a well-formed question with no answer (infeasible requirement, impossible
configuration); 2 bad input (located message, never a traceback; ``--debug`` shows one), including an
output path that is refused or cannot be written (:mod:`clusterplan.outputs`); 130 interrupted (Ctrl-C,
SIGINT), 143 terminated (SIGTERM), each with one line, its pool workers stopped and no partial output.

Standard output and error never fail on a character their encoding lacks (an ASCII or Latin-1
locale, ``PYTHONIOENCODING=ascii``): such a character is written as a backslash escape.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any


def _exit_at_once(signum: int, frame: Any) -> None:
    """An interrupt while the command is still starting: nothing to stop or remove yet, one line and out."""
    os.write(2, b"interrupted\n" if signum == signal.SIGINT else b"terminated\n")
    os._exit(128 + signum)


# Allocations between two collections of the youngest generation in a command (Python's default: 700).
GC_THRESHOLD = 100_000

# In the clusterplan process itself (not a program importing this module), an interrupt while the imports below
# run ends it with one line: a Ctrl-C there gave a traceback, or exit 3 when it cut an import short.
if os.path.basename(sys.argv[0]) == "clusterplan" and threading.current_thread() is threading.main_thread():
    for _signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signal, _exit_at_once)
# There too, the collector runs as :func:`entry` sets it from here on: at Python's default the imports below (typer,
# rich, pydantic) made ~30 collections (4-17 ms of every start) of objects that live until the command exits.
if os.path.basename(sys.argv[0]) == "clusterplan":
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])

import typer  # noqa: E402 - after the handlers above
import typer.main  # noqa: E402
from typer.core import TyperGroup  # noqa: E402
from typer.models import CommandInfo, TyperInfo  # noqa: E402

from clusterplan import __version__  # noqa: E402
from clusterplan.console import (  # noqa: E402
    EXIT_INTERRUPTED,
    Terminated,
    err_console,
    interruption,
    out_console,
    report_interruption,
    safe_streams,
    state,
)

if TYPE_CHECKING:
    from typer import _click  # the click typer vendors: the types TyperGroup's methods take

# Every command by name and the module of clusterplan.commands that registers it, in the order ``--help`` lists them
# (commands, then command groups). A module is imported only when one of its commands runs or a help page lists it
# (~15 ms of a ``solve`` went to importing and registering the other ten); tests/test_imports.py holds this table
# to what the modules register.
COMMAND_MODULES: dict[str, str] = {
    "calibrate": "calibrate",
    "compare": "compare",
    "estimate": "estimate",
    "export": "export",
    "rent-vs-buy": "rent_vs_buy",
    "report": "report",
    "solve": "solve",
    "sweep": "sweep",
    "frontier": "sweep",
    "validate": "validate",
    "schema": "validate",
    "catalog": "catalog",
}
_REGISTERED: dict[str, dict[str, CommandInfo | TyperInfo]] = {}  # per module: its commands by name


def registered(module: str) -> dict[str, CommandInfo | TyperInfo]:
    """The commands and command groups one module of ``clusterplan.commands`` registers, by name (imported once)."""
    found = _REGISTERED.get(module)
    if found is None:
        import importlib

        # Each module registers on a Typer of its own; the root group (_Commands) builds a command when it is used.
        holder = typer.Typer()
        importlib.import_module(f"clusterplan.commands.{module}").register(holder)
        found = {}
        for command in holder.registered_commands:
            assert command.callback is not None
            found[command.name or typer.main.get_command_name(command.callback.__name__)] = command
        for group in holder.registered_groups:
            assert group.name, "a command group needs a name"
            found[group.name] = group
        _REGISTERED[module] = found
    return found


def _command_info(name: str) -> CommandInfo | TyperInfo | None:
    module = COMMAND_MODULES.get(name)
    return None if module is None else registered(module).get(name)


@contextlib.contextmanager
def _one_line_on_interrupt() -> Iterator[None]:
    """A Ctrl-C within the block ends the command with its one line and exit 130 (typer's own ending says nothing)."""
    try:
        yield
    except KeyboardInterrupt:
        report_interruption(EXIT_INTERRUPTED)
        raise typer.Exit(EXIT_INTERRUPTED) from None


class _Commands(TyperGroup):
    """The root group: a command's module is imported and its click form (its options read from its signature) built
    only when it runs or a help page lists it, not every command's on every start."""

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(COMMAND_MODULES)

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        info = _command_info(cmd_name) if cmd_name not in self.commands else None
        if info is not None:
            built = (
                typer.main.get_command_from_info(
                    info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
                )
                if isinstance(info, CommandInfo)
                else typer.main.get_group_from_info(
                    info,
                    pretty_exceptions_short=app.pretty_exceptions_short,
                    rich_markup_mode=app.rich_markup_mode,
                    suggest_commands=app.suggest_commands,
                )
            )
            self.add_command(built, cmd_name)
        return super().get_command(ctx, cmd_name)

    # Typer ends a Ctrl-C it catches with 130 and no word. The modules a command needs load while its options are
    # parsed (typer imports pydantic there) and while it is looked up and invoked (its module, its body's imports
    # before its guard), so a Ctrl-C while a command starts comes this way: the one line, as everywhere else.
    def make_context(
        self, info_name: str | None, args: list[str], parent: _click.Context | None = None, **extra: Any
    ) -> _click.Context:
        with _one_line_on_interrupt():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: _click.Context) -> Any:
        with _one_line_on_interrupt():
            return super().invoke(ctx)

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        if args and args[0] not in COMMAND_MODULES:
            for name in COMMAND_MODULES:  # no such command: typer's "did you mean" reads the names of the built ones
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="clusterplan",
    help="Plan GPU clusters: which GPUs, how many, and how to run them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Commands,
)


def _version(value: bool) -> None:
    if value:
        out_console.print(f"clusterplan {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    """Plan GPU clusters from a declarative requirement."""
    safe_streams()  # again here: in-process callers (tests) replace the streams after start-up
    state["debug"] = debug


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


@contextlib.contextmanager
def _interrupts_raise() -> Iterator[None]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` and SIGTERM :class:`~clusterplan.console.Terminated` in
    the main thread, so a command unwinds (workers stopped, temporary files removed); the caller's handlers are
    put back after. Elsewhere than the main thread, signals are not this function's to take."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def _exit_code(code: object) -> int:
    """A ``SystemExit`` code as a process's exit status (``sys.exit``'s rules: None is 0, a message is 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    err_console.print(str(code), markup=False)
    return 1


def run(argv: Sequence[str] | None = None) -> int:
    """One ``clusterplan`` command in-process (``argv`` without the program name; default ``sys.argv[1:]``) and its
    exit code: 0, 1, 2, 4, 130 or 143, or 3 for a bug, which is reported in one line. It never raises
    ``SystemExit`` and never ends the process, so a harness or a fuzzer can call it again and again."""
    safe_streams()
    try:
        with _interrupts_raise():
            app(args=None if argv is None else list(argv), prog_name="clusterplan")
    except SystemExit as exc:
        return _exit_code(exc.code)
    except (KeyboardInterrupt, Terminated) as exc:  # outside a command's guard: the same one line
        code = interruption(exc) or EXIT_INTERRUPTED
        report_interruption(code)
        return code
    except Exception as exc:  # a bug, not a user error: say so plainly
        interrupted = interruption(exc)
        if interrupted is not None:  # an interrupt that surfaced as another error (an import cut short)
            report_interruption(interrupted)
            return interrupted
        if state["debug"]:
            raise
        import traceback

        err_console.print("internal error (a bug in clusterplan; rerun with --debug for the traceback):", markup=False)
        err_console.print(traceback.format_exc().strip().splitlines()[-1], markup=False)
        return 3
    return 0


def main() -> None:
    """:func:`run` on ``sys.argv``, ending in ``sys.exit`` with its code (a ``SystemExit`` an in-process caller can
    catch)."""
    sys.exit(run())


def entry() -> None:
    """The ``clusterplan`` console script: :func:`run`, then an exit that skips tearing the interpreter down.

    Unloading what a command imported (pydantic, numpy, OR-Tools) took ~40 ms of a 1.5 s ``solve`` and does
    nothing a finished command needs: the output is flushed and every file it wrote is closed by then. The fast
    exit (and the collector settings that go with it) is taken only when this process is the ``clusterplan``
    command itself: called from another program (a test harness, a fuzzer) it raises ``SystemExit`` like
    :func:`main`. The usual exit is kept too wherever exit hooks still have work: Ray (its driver disconnects at
    exit) or a thread still running.
    """
    console_script = os.path.basename(sys.argv[0]) == "clusterplan"
    if console_script:
        # A command is one short process: what it has imported lives until it exits, so the cyclic collector need
        # not walk it again (freeze), and collecting every 700 allocations cost ~3% of a solve (320 collections).
        gc.freeze()
        gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
        state["freeze"] = True  # and again once the command has imported its modules (console.guarded)
    code = run()
    if not console_script or "ray" in sys.modules or threading.active_count() > 1:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing left to write to
            stream.flush()
    os._exit(code)
