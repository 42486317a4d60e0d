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
from ortools.sat.python import cp_model, cp_model_helper  # noqa: E402  (imported by load(): the typed names)

# Where ``CpModel`` wraps (OR-Tools 9.15 here) a C++ ``CpBaseModel``, and its constructor then sets a deprecated
# camelCase alias of every ``add_``/``new_``/``clear_`` method on the instance (``dir`` walked and ~70 wrappers made):
# 0.85 ms of each 1.4 ms ``CpModel.clone()`` of the 70B example's model, the whole proto copy being 0.5 ms
# (cProfile, 2-core machine, 2026-12-06). A plan clones the base model once a solve (39 solves for the 70B example).
_FAST_CLONE = hasattr(cp_model_helper, "CpBaseModel") and issubclass(cp_model.CpModel, cp_model_helper.CpBaseModel)


class _Model(cp_model.CpModel):
    """A ``CpModel`` without the camelCase aliases (clusterplan calls the snake_case names only)."""

    def __init__(self) -> None:
        cp_model_helper.CpBaseModel.__init__(self, None)

    def clone(self) -> cp_model.CpModel:
        return clone(self)


def clone(model: cp_model.CpModel) -> cp_model.CpModel:
    """A copy of ``model``, as ``model.clone()`` makes it (the same proto, the same constant map), made faster."""
    if not _FAST_CLONE:  # an older OR-Tools: its own clone
        return model.clone()
    out = _Model()
    out.proto.copy_from(model.proto)  # what CpModel.clone does (ortools/sat/python/cp_model.py)
    out.rebuild_constant_map()
    return out


__all__ = ["clone", "cp_model", "load"]
