"""OR-Tools' CP-SAT Python module, imported without importing pandas.

``ortools.sat.python.cp_model`` (9.x) imports pandas at module level, for its ``*_series`` helpers
and the annotations that name ``pd.Index`` and ``pd.Series``. clusterplan never builds a model from
pandas objects, yet the import cost 0.17-0.25 s of a 1.9 s ``clusterplan solve`` (``python -X
importtime``, 2-core machine, 2026-11-24): more than a tenth of the command.

:func:`load` imports ``cp_model`` with a stand-in registered as ``pandas`` for the duration of the
import only (its attributes are placeholder classes, enough for the module's annotations), then
points the module's ``pd`` at a proxy that imports the real pandas the first time anything asks for
it. So a ``*_series`` call still works, at the cost of importing pandas then; everything
clusterplan calls never touches ``pd``. When pandas or ``cp_model`` is already imported (a user's
notebook, a test run), the stand-in is not used at all.

Every module of clusterplan takes ``cp_model`` from here (``from clusterplan.planner.cpsat import
cp_model``); a test holds that no module imports ``ortools.sat.python.cp_model`` itself, and that a
``solve`` leaves pandas unimported.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

PANDAS = "pandas"
CP_MODEL = "ortools.sat.python.cp_model"


class _ImportTimeStandIn(types.ModuleType):
    """Registered as ``pandas`` while ``cp_model`` imports: any attribute is a placeholder class."""

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__module__": PANDAS})


class _LazyPandas(types.ModuleType):
    """``cp_model.pd`` after the import: the real pandas, imported on first attribute access."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module(PANDAS), name)


def load() -> types.ModuleType:
    """``ortools.sat.python.cp_model``, imported without pandas unless pandas is already loaded."""
    if CP_MODEL in sys.modules or PANDAS in sys.modules:
        return importlib.import_module(CP_MODEL)
    sys.modules[PANDAS] = _ImportTimeStandIn(PANDAS)
    try:
        module = importlib.import_module(CP_MODEL)
    finally:
        if isinstance(sys.modules.get(PANDAS), _ImportTimeStandIn):
            del sys.modules[PANDAS]
    module.pd = _LazyPandas(PANDAS)  # type: ignore[attr-defined]
    return module


load()
from ortools.sat.python import cp_model  # noqa: E402  (already imported by load(): the typed name)

__all__ = ["cp_model", "load"]
