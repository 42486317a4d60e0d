"""The command-line arguments each serving engine version documents (``catalog/engine_args.yaml``).

``clusterplan export`` writes launch, router and benchmark commands; every ``--flag`` it writes must be one the
engine version's own argument parser defines. The lists are data with their source (the parser's file at a
commit); ``tests/test_export_serving.py`` holds every export against them.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field

SHIPPED_FILE = "engine_args.yaml"


class EngineCommand(BaseModel):
    """One command of an engine: how it is invoked, the flags its parser defines, and where they were read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    invocation: tuple[str, ...] = Field(min_length=1, description="the words that start the command line")
    source: str = Field(description="the argument parser the flags were read from (URL at a commit)")
    flags: frozenset[str] = Field(description="every --flag the parser defines that export may write")
    keys: frozenset[str] = Field(frozenset(), description="top-level keys of the YAML options file it reads")


class EngineArguments(BaseModel):
    """One engine version's commands."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(description="the engine release the parsers were read at")
    as_of: str
    commands: tuple[EngineCommand, ...]

    def command_for(self, argv: list[str]) -> EngineCommand | None:
        """The command ``argv`` invokes (the longest matching invocation), None if none."""
        fits = [c for c in self.commands if tuple(argv[: len(c.invocation)]) == c.invocation]
        return max(fits, key=lambda c: len(c.invocation), default=None)


class EngineArgsFile(BaseModel):
    """``catalog/engine_args.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engines: dict[str, EngineArguments]


@cache
def engine_arguments() -> dict[str, EngineArguments]:
    """The shipped argument lists by engine id (``catalog/engines.yaml`` ids)."""
    text = resources.files("clusterplan.catalog_data").joinpath(SHIPPED_FILE).read_text(encoding="utf-8")
    return EngineArgsFile.model_validate(yaml.safe_load(text)).engines
