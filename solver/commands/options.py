"""Options several commands share, defined once (a module without ``register``: the CLI skips it)."""

from __future__ import annotations

import typer

CATALOG_HELP = "A user catalog YAML that adds or overrides rows (repeatable; applied in order)."

CatalogOption = typer.Option(None, "--catalog", "-c", help=CATALOG_HELP)
