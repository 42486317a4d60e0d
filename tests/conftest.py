"""Shared fixtures: the shipped catalog (loaded once), paths to examples and test data."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "requirements").glob("*.yaml"))
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def catalog():  # type: ignore[no-untyped-def]
    from clusterplan.catalog import load_catalog

    return load_catalog()
