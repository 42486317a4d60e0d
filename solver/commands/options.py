"""Options several commands share, defined once, and the way a command takes its options as one value (a module
without ``register``: the CLI skips it)."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

CATALOG_HELP = "A user catalog YAML that adds or overrides rows (repeatable; applied in order)."

# ``--catalog``, in a command's signature or as a field of its options (see :func:`options_command`).
Catalogs = Annotated[list[Path] | None, typer.Option("--catalog", "-c", help=CATALOG_HELP)]

Options = TypeVar("Options", bound="DataclassInstance")
Result = TypeVar("Result")


def options_command(options: type[Options], body: Callable[[Options], Result]) -> Callable[..., Result]:
    """``body`` as a typer command that takes the fields of the dataclass ``options`` as its parameters.

    Each field is one argument or option, in field order, its ``Annotated[type, typer.Argument / typer.Option]``
    metadata and default read by typer as if written in a ``def``: typer reads a command's parameters through
    ``inspect.signature``, which returns the ``__signature__`` given here. ``body`` receives one ``options`` value;
    its name is the command's and its docstring the command's help.
    """
    hints = typing.get_type_hints(options, include_extras=True)  # the fields' annotations, evaluated
    signature = inspect.Signature(
        [
            inspect.Parameter(
                field.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default,
                annotation=hints[field.name],
            )
            for field in dataclasses.fields(options)
        ]
    )

    def command(**values: Any) -> Result:
        return body(options(**values))

    command.__name__ = command.__qualname__ = body.__name__
    command.__doc__ = body.__doc__
    command.__module__ = body.__module__
    command.__signature__ = signature  # type: ignore[attr-defined]
    return command
