"""What-if sweeps: re-plan a requirement across values of one or two fields, and Pareto frontiers.

Pure data in and out; no printing. The layers, in order:

1. **Fields.** :func:`resolve_field` turns what a user writes after ``--vary`` (``budget``, ``demand``,
   ``p95_latency``, ``gpu_price.h100-sxm``, ``workloads[0].peak_to_average`` ...) into a :class:`Target`:
   the requirement path it sets (or the user-catalog figure it overrides) and the kind of quantity,
   found from the requirement schema itself, so any numeric field can vary and units parse as in a file.
2. **Values.** :func:`parse_spec` reads ``200k..2M`` (``steps`` points, linear or ``log``) or a list
   ``1s,2s,5s`` with the field's own unit parser.
3. **Points.** :func:`build_tasks` makes one :class:`PointTask` per grid point: the requirement document
   with the value set, dumped back to YAML (so every point is validated and unit-parsed like a file),
   and, for catalog targets, a user-catalog override. The first axis varies fastest.
4. **Running.** :func:`run_task` loads and plans one point; :func:`run_tasks` runs them inline
   (``jobs=1``) or in a process pool, and always returns them in point order, so results do not depend
   on ``jobs`` (the planner has a fixed seed and one search worker).
   A point plans with :func:`plan_point`: ``plan_requirement`` with ``explain="binding"``, which works
   out which constraints bind (or conflict) but not the rest of the explanation (lost GPU types, mixes,
   least relaxations), which a row does not show. The tests check that its design equals
   ``plan_requirement(..., PlanOptions(top=1))``'s first design.
5. **Reading.** :func:`assemble` turns outcomes into :class:`SweepRow` s, marks where the optimal design
   switches and where the requirement becomes feasible, and writes the notes a reader wants first.
6. **Frontiers.** :func:`run_frontier` plans at tightening p95 targets below the cheapest design's p95
   (or, against throughput, at budget levels with ``max_throughput``) and keeps the Pareto-optimal points.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import re
import tempfile
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from clusterplan import units
from clusterplan.errors import ClusterplanError, InputError, did_you_mean
from clusterplan.plan import Design, FamilyRef, ServingPlan, TrainingPlan
from clusterplan.planner.solve import SolverSettings
from clusterplan.requirement import (
    FinetuneWorkload,
    InventoryItem,
    Requirement,
    ServingWorkload,
    TrainingWorkload,
)

if typing.TYPE_CHECKING:
    from clusterplan.catalog import Catalog
    from clusterplan.requirement_loader import ResolvedRequirement

Quantity = Literal["money", "duration", "rate", "tokens", "count", "months", "power", "number", "integer", "price"]
Objective = Literal["min_cost", "max_throughput", "min_latency"]
RowStatus = Literal["optimal", "feasible", "infeasible", "unknown", "invalid"]

DEFAULT_STEPS = 10
MAX_POINTS = 2500  # a grid larger than this is a typo, not a question
SWEEP_SOURCE = "clusterplan-what-if"  # the source key catalog overrides of a sweep cite
FRONTIER_BUDGET_SPAN = 4.0  # throughput frontier: budget levels from the least cost to this multiple of it
FRONTIER_LATENCY_SPAN = 4.0  # latency frontier: p95 targets from the cheapest design's p95 down to 1/4 of it
DEFAULT_FRONTIER_POINTS = 8


class SweepError(ClusterplanError):
    """A --vary field or value that cannot be swept (exit code 2)."""


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------------------------------
# 1. Fields
# ------------------------------------------------------------------------------------------------

_PARSERS: dict[Any, Quantity] = {
    units.parse_money: "money",
    units.parse_duration: "duration",
    units.parse_rate: "rate",
    units.parse_tokens: "tokens",
    units.parse_count: "count",
    units.parse_months: "months",
    units.parse_power: "power",
}

_UNIT: dict[Quantity, str] = {
    "money": "USD",
    "duration": "s",
    "rate": "per s",
    "tokens": "tokens",
    "count": "",
    "months": "months",
    "power": "W",
    "number": "",
    "integer": "",
    "price": "USD",
}

ALIASES: dict[str, str] = {
    "budget": "the budget field the file sets (budget.total if none)",
    "demand": "the first serving workload's requests_per_min or tokens_per_sec, whichever is set",
    "p95_latency": "the first serving workload's p95_latency",
    "p95_ttft": "the first serving workload's p95_ttft",
    "p95_tpot": "the first serving workload's p95_tpot",
    "input_tokens": "the first serving workload's input_tokens",
    "output_tokens": "the first serving workload's output_tokens",
    "peak_to_average": "the first serving workload's peak_to_average",
    "deadline": "the first training or fine-tuning workload's deadline",
    "horizon": "budget.horizon",
    "max_gpus": "constraints.max_gpus",
    "max_power": "constraints.max_power",
    "electricity_price": "owned.electricity_usd_per_kwh in a user-catalog override, USD per kWh",
    "gpu_price.<gpu>": "that GPU's purchase price in a user-catalog override, USD per GPU (cloud prices unchanged)",
}

_SERVING_ALIASES = ("p95_latency", "p95_ttft", "p95_tpot", "input_tokens", "output_tokens", "peak_to_average")
_WORKLOAD_CLASSES: dict[str, type[BaseModel]] = {
    "serving": ServingWorkload,
    "training": TrainingWorkload,
    "finetune": FinetuneWorkload,
}


class Target(Out):
    """Where a varied value goes and what kind of quantity it is."""

    field: str = Field(description="the field as the user wrote it")
    path: str = Field(description="what it sets: a requirement path, or 'catalog: ...' for a catalog figure")
    where: Literal["requirement", "electricity_price", "gpu_price"]
    keys: list[str | int] = Field(default_factory=list, description="requirement path (requirement targets)")
    gpu: str | None = Field(default=None, description="catalog GPU id (gpu_price)")
    quantity: Quantity
    unit: str = Field(description="unit of the values: USD, s, requests/min, ...")


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """The core type of an annotation without Optional/Annotated, and the metadata met on the way."""
    meta: list[Any] = []
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            args = typing.get_args(annotation)
            meta.extend(args[1:])
            annotation = args[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation, meta


def _quantity(info: FieldInfo) -> Quantity | None:
    """The kind of number a schema field holds, or None if it is not a number."""
    core, meta = _unwrap(info.annotation)
    for m in [*info.metadata, *meta]:
        if isinstance(m, BeforeValidator) and m.func in _PARSERS:
            return _PARSERS[m.func]
    if core is bool:
        return None
    if core is int:
        return "integer"
    if core is float:
        return "number"
    if isinstance(core, type) and core.__name__ == "PerClass":  # assumptions: one number sets every class
        return "number"
    return None


def _submodel(info: FieldInfo) -> type[BaseModel] | None:
    core, _ = _unwrap(info.annotation)
    if isinstance(core, type) and issubclass(core, BaseModel) and core.__name__ != "PerClass":
        return core
    return None


def _list_item(info: FieldInfo, name: str, item: Any) -> type[BaseModel] | None:
    """The model of one element of a list field (workloads by their kind; inventory items)."""
    if name == "workloads":
        kind = item.get("kind") if isinstance(item, dict) else None
        return _WORKLOAD_CLASSES.get(str(kind))
    if name == "inventory":
        return InventoryItem
    return None


def _numeric_paths(data: dict[str, Any]) -> list[str]:
    """Every numeric field path a document of this shape can vary (for did-you-mean)."""
    out: list[str] = []

    def walk(model: type[BaseModel], prefix: str, node: Any) -> None:
        for name, info in model.model_fields.items():
            here = f"{prefix}.{name}" if prefix else name
            sub = _submodel(info)
            if name in ("workloads", "inventory"):
                items = node.get(name) if isinstance(node, dict) else None
                for i, item in enumerate(items if isinstance(items, list) else []):
                    cls = _list_item(info, name, item)
                    if cls is not None:
                        walk(cls, f"{here}[{i}]", item)
            elif sub is not None and sub.__name__ in ("Budget", "Constraints", "Assumptions"):
                walk(sub, here, node.get(name) if isinstance(node, dict) else None)
            elif _quantity(info) is not None:
                out.append(here)

    walk(Requirement, "", data)
    return out


_PART = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<idx>(\[\d+\])*)")


def _parse_path(text: str) -> list[str | int] | None:
    keys: list[str | int] = []
    for part in text.split("."):
        m = _PART.fullmatch(part)
        if m is None:
            return None
        keys.append(m.group("name"))
        keys.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group("idx")))
    return keys


def first_workload(data: dict[str, Any], kinds: tuple[str, ...]) -> int | None:
    for i, w in enumerate(data.get("workloads") or []):
        if isinstance(w, dict) and w.get("kind") in kinds:
            return i
    return None


def _unknown(name: str, data: dict[str, Any], why: str) -> SweepError:
    choices = [*(a for a in ALIASES if "<" not in a), *_numeric_paths(data)]
    hint = did_you_mean(name, choices)
    return SweepError(
        f"cannot vary '{name}': {why}",
        fix="vary budget, demand, p95_latency, input_tokens, output_tokens, deadline, electricity_price, "
        "gpu_price.<gpu>, or a numeric path such as workloads[0].peak_to_average",
        hint=hint,
    )


def resolve_field(name: str, data: dict[str, Any], catalog: Catalog) -> Target:
    """The :class:`Target` of a ``--vary`` field for this requirement document; SweepError if none."""
    text = name.strip()
    if text == "electricity_price":
        return Target(
            field=text,
            path="catalog: owned.electricity_usd_per_kwh",
            where="electricity_price",
            quantity="price",
            unit="USD/kWh",
        )
    if text == "gpu_price" or text.startswith("gpu_price."):
        gpu_name = text.partition(".")[2]
        if not gpu_name:
            raise SweepError("gpu_price needs a GPU: gpu_price.<gpu>", fix="e.g. --vary gpu_price.h100-sxm=20k..35k")
        gpu = catalog.gpu(gpu_name)  # UnknownNameError (exit 2) with did-you-mean
        return Target(
            field=text,
            path=f"catalog: gpus[{gpu.id}].price.usd",
            where="gpu_price",
            gpu=gpu.id,
            quantity="money",
            unit="USD per GPU",
        )
    keys = _alias_keys(text, data)
    if keys is None:
        keys = _parse_path(text)
        if keys is None:
            raise _unknown(text, data, "not a field name or a dotted path like workloads[0].p95_latency")
    quantity = _check_path(text, keys, data)
    unit = _UNIT[quantity]
    if quantity == "rate":
        unit = "requests/min" if keys[-1] == "requests_per_min" else "tokens/s"
    from clusterplan.yamlio import format_path

    return Target(
        field=text, path=format_path(tuple(keys)), where="requirement", keys=keys, quantity=quantity, unit=unit
    )


def _alias_keys(text: str, data: dict[str, Any]) -> list[str | int] | None:
    if text == "budget":
        b = data.get("budget") if isinstance(data.get("budget"), dict) else {}
        for k in ("total", "monthly", "capital"):
            if isinstance(b, dict) and b.get(k) is not None:
                return ["budget", k]
        return ["budget", "total"]
    if text == "horizon":
        return ["budget", "horizon"]
    if text in ("max_gpus", "max_power"):
        return ["constraints", text]
    if text == "demand" or text in _SERVING_ALIASES:
        i = first_workload(data, ("serving",))
        if i is None:
            raise SweepError(f"cannot vary '{text}': the requirement has no serving workload")
        if text != "demand":
            return ["workloads", i, text]
        w = data["workloads"][i]
        return ["workloads", i, "tokens_per_sec" if w.get("tokens_per_sec") is not None else "requests_per_min"]
    if text == "deadline":
        i = first_workload(data, ("training", "finetune"))
        if i is None:
            raise SweepError("cannot vary 'deadline': the requirement has no training or fine-tuning workload")
        return ["workloads", i, "deadline"]
    return None


def _check_path(text: str, keys: list[str | int], data: dict[str, Any]) -> Quantity:
    """Walk ``keys`` through the requirement schema (and the document for list items); the leaf's quantity."""
    model: type[BaseModel] = Requirement
    node: Any = data
    i = 0
    while i < len(keys):
        key = keys[i]
        if not isinstance(key, str) or key not in model.model_fields:
            raise _unknown(text, data, f"'{key}' is not a field of {model.__name__}")
        info = model.model_fields[key]
        child = node.get(key) if isinstance(node, dict) else None
        if key in ("workloads", "inventory"):
            if i + 1 >= len(keys) or not isinstance(keys[i + 1], int):
                raise _unknown(text, data, f"{key} is a list: give an index, e.g. {key}[0]")
            index = keys[i + 1]
            assert isinstance(index, int)
            items = child if isinstance(child, list) else []
            if index >= len(items):
                raise SweepError(f"cannot vary '{text}': there is no {key}[{index}] (the file has {len(items)})")
            cls = _list_item(info, key, items[index])
            if cls is None:  # pragma: no cover - a validated document always has a known kind
                raise SweepError(f"cannot vary '{text}': {key}[{index}] is not a known kind")
            model, node, i = cls, items[index], i + 2
            continue
        sub = _submodel(info)
        if sub is not None and i + 1 < len(keys):
            model, node, i = sub, child, i + 1
            continue
        if i + 1 < len(keys):
            raise _unknown(text, data, f"'{key}' has no sub-fields")
        quantity = _quantity(info)
        if quantity is None:
            raise _unknown(text, data, f"'{key}' is not a number")
        return quantity
    raise _unknown(text, data, "the path names a section, not a number")


# ------------------------------------------------------------------------------------------------
# 2. Values
# ------------------------------------------------------------------------------------------------


def parse_value(text: str, quantity: Quantity, *, field: str) -> float:
    """One value with the unit parser of ``quantity`` (``5s``, ``$1.2M``, ``150k`` ...)."""
    parser: Callable[[Any], float] = {
        "money": units.parse_money,
        "price": units.parse_money,
        "duration": units.parse_duration,
        "rate": units.parse_rate,
        "tokens": units.parse_tokens,
        "count": units.parse_count,
        "months": units.parse_months,
        "power": units.parse_power,
        "number": units.parse_count,
        "integer": units.parse_count,
    }[quantity]
    try:
        return parser(text.strip())
    except (PydanticCustomError, ValueError) as exc:
        message = exc.message() if isinstance(exc, PydanticCustomError) else str(exc)
        raise SweepError(f"--vary {field}: {message}", fix="e.g. 200k..2M, 1s,2s,5s or 0.5..2 with --log") from None


def _tidy(x: float) -> float:
    """Six significant digits: steps print as 1.5e6, not 1499999.9999999998."""
    return float(f"{x:.6g}")


def parse_spec(
    spec: str, quantity: Quantity, *, field: str, steps: int = DEFAULT_STEPS, log: bool = False
) -> list[float]:
    """Values of ``A..B`` (``steps`` of them, linear or log-spaced) or of a list ``a,b,c``.

    A comma always separates list values, so thousands separators cannot be used: 1.2M, not 1,200,000.
    """
    text = spec.strip()
    if not text:
        raise SweepError(f"--vary {field}= needs values", fix="e.g. --vary budget=200k..2M")
    if ".." in text:
        lo_text, _, hi_text = text.partition("..")
        lo = parse_value(lo_text, quantity, field=field)
        hi = parse_value(hi_text, quantity, field=field)
        if steps < 1:
            raise SweepError("--steps must be at least 1")
        if steps == 1 or lo == hi:
            values = [lo]
        elif log:
            if lo <= 0 or hi <= 0:
                raise SweepError(f"--vary {field}: --log needs both ends above zero")
            values = [_tidy(lo * (hi / lo) ** (i / (steps - 1))) for i in range(steps)]
        else:
            values = [_tidy(lo + (hi - lo) * i / (steps - 1)) for i in range(steps)]
    else:  # a comma always separates values: 100,200,300 is three (write 1.2M, not 1,200,000)
        values = [parse_value(part, quantity, field=field) for part in text.split(",") if part.strip()]
    if quantity == "integer":
        values = [float(round(v)) for v in values]
    return list(dict.fromkeys(values))  # a repeated value is planned once


def split_vary(option: str) -> tuple[str, str]:
    """``FIELD=SPEC`` -> (FIELD, SPEC)."""
    name, sep, spec = option.partition("=")
    if not sep or not name.strip():
        raise SweepError(f"--vary '{option}' is not FIELD=SPEC", fix="e.g. --vary budget=200k..2M")
    return name.strip(), spec


class Axis(Out):
    """One varied field and its values."""

    target: Target
    values: list[float]
    log: bool = False

    @property
    def label(self) -> str:
        unit = f" ({self.target.unit})" if self.target.unit else ""
        return f"{self.target.field}{unit}"


def make_axis(option: str, data: dict[str, Any], catalog: Catalog, *, steps: int, log: bool) -> Axis:
    """An :class:`Axis` from one ``--vary FIELD=SPEC``."""
    name, spec = split_vary(option)
    target = resolve_field(name, data, catalog)
    return Axis(target=target, values=parse_spec(spec, target.quantity, field=name, steps=steps, log=log), log=log)


def format_value(value: float, quantity: Quantity) -> str:
    """A value in its field's own units, short: $1.2M, 5 s, 150k, 36 months."""
    if quantity in ("money",):
        if abs(value) >= 1e6:
            return f"${value / 1e6:,.4g}M"
        if abs(value) >= 1e4:
            return f"${value / 1e3:,.4g}k"
        return f"${value:,.4g}"
    if quantity == "price":
        return f"${value:.4g}"
    if quantity == "duration":
        if value >= 86400:
            return f"{value / 86400:.4g} d"
        if value >= 3600:
            return f"{value / 3600:.4g} h"
        if value >= 1:
            return f"{value:.4g} s"
        return f"{value * 1000:.4g} ms"
    if quantity == "months":
        return f"{value:.4g} months"
    if quantity == "power":
        return f"{value / 1000:.4g} kW" if value >= 1000 else f"{value:.4g} W"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


# ------------------------------------------------------------------------------------------------
# 3. Points
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Base:
    """The requirement a sweep starts from."""

    path: Path
    data: dict[str, Any]  # the located document's data, never modified
    name: str
    catalog: Catalog
    catalog_paths: tuple[Path, ...] = ()


def load_base(path: Path, catalog_paths: Sequence[Path] = ()) -> tuple[Base, ResolvedRequirement]:
    """Load the catalog and the requirement once (exit 2 on bad input) and keep its document."""
    from clusterplan.catalog import load_catalog
    from clusterplan.requirement_loader import load_requirement

    catalog = load_catalog(list(catalog_paths))
    resolved = load_requirement(path, catalog)
    assert resolved.document is not None
    base = Base(
        path=path,
        data=copy.deepcopy(resolved.document.data),
        name=resolved.requirement.name,
        catalog=catalog,
        catalog_paths=tuple(catalog_paths),
    )
    return base, resolved


@dataclass(frozen=True)
class PointTask:
    """Everything a worker needs to plan one point (picklable)."""

    index: int
    values: tuple[float, ...]
    text: str  # the requirement YAML with the values set
    name: str  # what located errors call it
    base_dir: str
    catalog_paths: tuple[str, ...]
    catalog_override: str | None  # a user-catalog document applied last, or None
    objective: str
    settings: SolverSettings = field(default_factory=SolverSettings)


def set_path(data: dict[str, Any], keys: Sequence[str | int], value: float | int) -> None:
    """Set ``data[k0][k1]... = value``, creating mappings that are missing."""
    node: Any = data
    for key in keys[:-1]:
        if isinstance(key, int):
            node = node[key]
        else:
            if node.get(key) is None:
                node[key] = {}
            node = node[key]
    node[keys[-1]] = value


def catalog_override(catalog: Catalog, settings: Sequence[tuple[Target, float]]) -> str | None:
    """A user-catalog document overriding the catalog figures of ``settings`` (None if there are none).

    Provenance stays honest: each figure cites the ``clusterplan-what-if`` source and keeps the date of
    the figure it replaces (no wall-clock date, so points are reproducible).
    """
    gpus: list[dict[str, Any]] = []
    owned: dict[str, Any] = {}
    for target, value in settings:
        if target.where == "gpu_price":
            assert target.gpu is not None
            gpu = catalog.gpu(target.gpu)
            price_as_of = gpu.price.as_of if gpu.price is not None else gpu.as_of
            gpus.append(
                {
                    "id": gpu.id,
                    "override": True,
                    "source": gpu.source,
                    "as_of": gpu.as_of,
                    "notes": f"price set by a what-if sweep ({target.field} = {format_value(value, 'money')})",
                    "price": {
                        "usd": value,
                        "kind": "estimate",
                        "source": SWEEP_SOURCE,
                        "as_of": price_as_of,
                        "notes": "what-if value, not a quote",
                    },
                }
            )
        elif target.where == "electricity_price":
            figure = catalog.owned.electricity_usd_per_kwh
            owned["electricity_usd_per_kwh"] = {
                "value": value,
                "unit": figure.unit,
                "source": SWEEP_SOURCE,
                "as_of": figure.as_of,
                "notes": "what-if value set by a sweep, not a tariff",
            }
    if not gpus and not owned:
        return None
    doc: dict[str, Any] = {}
    if SWEEP_SOURCE not in catalog.sources:
        doc["sources"] = {SWEEP_SOURCE: {"title": "clusterplan what-if sweep: a value being explored, not a quote"}}
    if gpus:
        doc["gpus"] = gpus
    if owned:
        doc["owned"] = owned
    return yaml.safe_dump(doc, sort_keys=False)


def grid(axes: Sequence[Axis]) -> list[tuple[float, ...]]:
    """Every combination of the axes' values; the first axis varies fastest."""
    combos = itertools.product(*(a.values for a in reversed(axes)))
    return [tuple(reversed(c)) for c in combos]


def point_task(
    base: Base,
    index: int,
    settings: Sequence[tuple[Target, float]],
    *,
    objective: str,
    solver: SolverSettings,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> PointTask:
    """The task of one point: the document with each requirement target set, catalog targets overridden."""
    data = copy.deepcopy(base.data)
    if edit is not None:
        edit(data)
    for target, value in settings:
        if target.where == "requirement":
            set_path(data, target.keys, int(value) if target.quantity == "integer" else value)
    label = ", ".join(f"{t.field}={format_value(v, t.quantity)}" for t, v in settings)
    return PointTask(
        index=index,
        values=tuple(v for _, v in settings),
        text=yaml.safe_dump(data, sort_keys=False, allow_unicode=True),
        name=f"{base.path} [{label}]" if label else str(base.path),
        base_dir=str(base.path.parent),
        catalog_paths=tuple(str(p) for p in base.catalog_paths),
        catalog_override=catalog_override(base.catalog, settings),
        objective=objective,
        settings=solver,
    )


def build_tasks(base: Base, axes: Sequence[Axis], *, objective: str, solver: SolverSettings) -> list[PointTask]:
    """One task per grid point, in point order."""
    points = grid(axes)
    if len(points) > MAX_POINTS:
        raise SweepError(f"{len(points):,} points is more than {MAX_POINTS:,}", fix="use fewer --steps or values")
    return [
        point_task(
            base, i, list(zip((a.target for a in axes), values, strict=True)), objective=objective, solver=solver
        )
        for i, values in enumerate(points)
    ]


# ------------------------------------------------------------------------------------------------
# 4. Running
# ------------------------------------------------------------------------------------------------


class PointOutcome(Out):
    """What planning one point gave: the best design, or why there is none."""

    index: int
    values: list[float]
    status: RowStatus
    design: Design | None = None
    conflict: list[FamilyRef] = Field(default_factory=list, description="a minimal conflicting set (infeasible)")
    detail: str = ""


def plan_point(
    resolved: ResolvedRequirement, catalog: Catalog, objective: str, settings: SolverSettings
) -> PointOutcome:
    """The best design of one point with its binding constraints, or the conflict when there is none.

    ``plan_requirement`` with ``top=1`` and ``explain="binding"``: the rest of the explanation (lost
    GPU types, mixes, least relaxations) is not worked out, as a row does not show it.
    """
    from clusterplan.planner.pipeline import PlanOptions, plan_requirement

    options = PlanOptions(top=1, objective=objective, explain="binding", settings=settings)
    plan = plan_requirement(resolved, catalog, options)
    if plan.designs:
        return PointOutcome(index=0, values=[], status=plan.status, design=plan.designs[0])
    if plan.infeasibility is not None:
        why = plan.infeasibility
        return PointOutcome(index=0, values=[], status="infeasible", conflict=why.conflict, detail=why.text)
    return PointOutcome(index=0, values=[], status=plan.status, detail="time limit reached before a design or a proof")


def run_task(task: PointTask) -> PointOutcome:
    """Load and plan one point (in a worker process or inline). Bad values give an 'invalid' row."""
    from clusterplan.catalog import load_catalog
    from clusterplan.requirement_loader import load_requirement_text

    try:
        with tempfile.TemporaryDirectory(prefix="clusterplan-sweep-") as tmp:
            paths = [Path(p) for p in task.catalog_paths]
            if task.catalog_override is not None:
                extra = Path(tmp) / "what-if-catalog.yaml"
                extra.write_text(task.catalog_override, encoding="utf-8")
                paths.append(extra)
            catalog = load_catalog(paths)
        resolved = load_requirement_text(task.text, task.name, catalog, base_dir=Path(task.base_dir))
    except InputError as exc:
        first = exc.problems[0] if exc.problems else None
        detail = f"{first.path}: {first.message}" if first is not None and first.path else exc.message
        return PointOutcome(index=task.index, values=list(task.values), status="invalid", detail=detail)
    except ClusterplanError as exc:
        return PointOutcome(index=task.index, values=list(task.values), status="invalid", detail=exc.message)
    out = plan_point(resolved, catalog, task.objective, task.settings)
    return out.model_copy(update={"index": task.index, "values": list(task.values)})


def default_jobs() -> int:
    return os.cpu_count() or 1


def _pool_context() -> Any:
    """Fork where it is safe and cheap (Linux: the pool forks every worker before any thread starts);
    spawn elsewhere."""
    import multiprocessing
    import sys

    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def run_tasks(
    tasks: Sequence[PointTask], *, jobs: int = 1, on_done: Callable[[int], None] | None = None
) -> list[PointOutcome]:
    """Plan every task; ``jobs`` > 1 uses a process pool. Outcomes come back in task order."""
    if jobs < 1:
        raise SweepError("--jobs must be at least 1")
    jobs = min(jobs, len(tasks)) or 1
    results: dict[int, PointOutcome] = {}
    if jobs == 1:
        for task in tasks:
            results[task.index] = run_task(task)
            if on_done is not None:
                on_done(len(results))
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=jobs, mp_context=_pool_context()) as pool:
            futures = [pool.submit(run_task, t) for t in tasks]
            for fut in as_completed(futures):
                out = fut.result()
                results[out.index] = out
                if on_done is not None:
                    on_done(len(results))
    return [results[t.index] for t in tasks]


# ------------------------------------------------------------------------------------------------
# 5. Reading
# ------------------------------------------------------------------------------------------------


class SweepRow(Out):
    """One point of a sweep: the optimal design there, or why there is none."""

    index: int
    values: list[float] = Field(description="one per axis, in the axis's unit")
    status: RowStatus
    design: str | None = Field(default=None, description="the design's summary, e.g. '4x NVIDIA B200 (owned)'")
    shape: str | None = Field(
        default=None, description="GPU type, parallelism, quantization and deployment per workload"
    )
    gpus: str | None = Field(default=None, description="GPU type x count, e.g. '4x b200'")
    deployment: str | None = None
    parallelism: str | None = None
    quantization: str | None = None
    total_usd: float | None = Field(default=None, description="total over the horizon, USD")
    capital_usd: float | None = None
    monthly_usd: float | None = Field(default=None, description="USD/month")
    throughput: float | None = Field(
        default=None, description="capacity within targets, in the sweep's throughput_unit"
    )
    p95_latency_s: float | None = Field(default=None, description="worst p95 end-to-end latency at rated load, s")
    objective_value: float | None = Field(default=None, description="what the objective optimises, in objective_unit")
    binding: list[str] = Field(default_factory=list, description="binding constraints (conflict when infeasible)")
    switch: bool = Field(default=False, description="the optimal design differs from the previous point's")
    change: str = Field(default="", description="what changed from the previous point along the first axis")
    detail: str = ""


class SweepResult(Out):
    requirement: str
    file: str
    objective: str
    objective_label: str
    objective_unit: str
    throughput_unit: str
    axes: list[Axis]
    rows: list[SweepRow]
    notes: list[str]


OBJECTIVE_LABEL: dict[str, tuple[str, str]] = {
    "min_cost": ("total cost over the horizon", "USD"),
    "max_throughput": ("capacity within the targets", "throughput"),
    "min_latency": ("p95 latency at rated load", "s"),
}


def _shape(design: Design) -> str:
    parts = design.signature
    if len(design.workloads) == 1:
        parts = [s.partition(": ")[2] or s for s in parts]
    return "; ".join(parts)


def _parallelism(w: ServingPlan | TrainingPlan) -> list[str]:
    if isinstance(w, ServingPlan):
        return [f"{g.replicas}x TP{g.tp} PP{g.pp}" for g in w.groups]
    return [f"TP{w.tp} PP{w.pp} DP{w.dp} ZeRO-{w.zero_stage}"]


def _quant(w: ServingPlan | TrainingPlan) -> list[str]:
    if isinstance(w, ServingPlan):
        return [g.quant for g in w.groups]
    return []


def throughput_of(design: Design) -> tuple[float, str]:
    """Serving capacity within the targets (requests/s, all serving workloads), else training tokens/s."""
    serving = [w for w in design.workloads if isinstance(w, ServingPlan)]
    if serving:
        return sum(w.capacity_rps for w in serving), "requests/s"
    return sum(w.tokens_per_s for w in design.workloads if isinstance(w, TrainingPlan)), "tokens/s"


def p95_of(design: Design) -> float | None:
    """The worst p95 end-to-end latency of any serving replica group at its rated load, s."""
    values = [g.p95_latency_s for w in design.workloads if isinstance(w, ServingPlan) for g in w.groups]
    return max(values) if values else None


def row_of(outcome: PointOutcome, objective: str) -> SweepRow:
    """A row from one outcome (switch marks are added by :func:`assemble`)."""
    d = outcome.design
    if d is None:
        return SweepRow(
            index=outcome.index,
            values=outcome.values,
            status=outcome.status,
            binding=[r.title for r in outcome.conflict],
            detail=outcome.detail,
        )
    throughput, _ = throughput_of(d)
    p95 = p95_of(d)
    objective_value = {"min_cost": d.costs.total_usd, "max_throughput": throughput, "min_latency": p95}[objective]
    kinds = sorted({h.kind for h in d.hardware})
    return SweepRow(
        index=outcome.index,
        values=outcome.values,
        status=outcome.status,
        design=d.summary,
        shape=_shape(d),
        gpus=", ".join(f"{n}x {g}" for g, n in d.gpus_by_type.items()),
        deployment="+".join(kinds),
        parallelism="; ".join(p for w in d.workloads for p in _parallelism(w)),
        quantization=", ".join(dict.fromkeys(q for w in d.workloads for q in _quant(w))) or "-",
        total_usd=d.costs.total_usd,
        capital_usd=d.costs.capital_usd,
        monthly_usd=d.costs.monthly_usd,
        throughput=throughput,
        p95_latency_s=p95,
        objective_value=objective_value,
        binding=[c.title for c in d.constraints if c.status == "binding"],
        detail=outcome.detail,
    )


def _has_design(row: SweepRow) -> bool:
    return row.shape is not None


def series(rows: Sequence[SweepRow], axes: Sequence[Axis]) -> list[list[SweepRow]]:
    """Rows split into runs along the first axis (one run per value of the other axes)."""
    n = len(axes[0].values) if axes else len(rows)
    return [list(rows[i : i + n]) for i in range(0, len(rows), n)]


def assemble(base: Base, axes: Sequence[Axis], outcomes: Sequence[PointOutcome], *, objective: str) -> SweepResult:
    """Rows in point order with switches marked, and the notes: where it becomes feasible, where it switches."""
    rows = [row_of(o, objective) for o in outcomes]
    marked: list[SweepRow] = []
    notes: list[str] = []
    for run in series(rows, axes):
        prefix = ""
        if len(axes) > 1:
            others = run[0].values[1:]
            prefix = (
                ", ".join(
                    f"{a.target.field} = {format_value(v, a.target.quantity)}"
                    for a, v in zip(axes[1:], others, strict=True)
                )
                + ": "
            )
        prev: SweepRow | None = None
        for row in run:
            update: dict[str, Any] = {}
            at = f"{axes[0].target.field} = {format_value(row.values[0], axes[0].target.quantity)}" if axes else ""
            if prev is not None and _has_design(prev) and _has_design(row) and prev.shape != row.shape:
                update = {"switch": True, "change": f"{prev.shape} → {row.shape}"}
                notes.append(f"{prefix}the optimal design switches at {at}: {prev.shape} → {row.shape}")
            elif prev is not None and not _has_design(prev) and _has_design(row):
                update = {"change": "feasible from here"}
                notes.append(f"{prefix}feasible from {at} ({row.shape})")
            elif prev is not None and _has_design(prev) and not _has_design(row):
                update = {"change": f"{row.status} from here"}
                notes.append(f"{prefix}{row.status} from {at}")
            marked.append(row.model_copy(update=update) if update else row)
            prev = row
        if run and not any(_has_design(r) for r in run):
            notes.append(f"{prefix}no point has a design")
    label, unit = OBJECTIVE_LABEL[objective]
    throughput_unit = "requests/s" if first_workload(base.data, ("serving",)) is not None else "tokens/s"
    if unit == "throughput":
        unit = throughput_unit
    return SweepResult(
        requirement=base.name,
        file=str(base.path),
        objective=objective,
        objective_label=label,
        objective_unit=unit,
        throughput_unit=throughput_unit,
        axes=list(axes),
        rows=marked,
        notes=notes,
    )


def needs_budget(base: Base, axes: Sequence[Axis], objective: str) -> bool:
    """True when max_throughput would be unbounded: no budget in the file and none being varied."""
    if objective != "max_throughput":
        return False
    b = base.data.get("budget") if isinstance(base.data.get("budget"), dict) else {}
    if isinstance(b, dict) and any(b.get(k) is not None for k in ("total", "monthly", "capital")):
        return False
    return not any(a.target.keys[:1] == ["budget"] and a.target.keys[-1] != "horizon" for a in axes)


def run_sweep(
    base: Base,
    axes: Sequence[Axis],
    *,
    objective: str = "min_cost",
    solver: SolverSettings | None = None,
    jobs: int = 1,
    on_done: Callable[[int], None] | None = None,
) -> SweepResult:
    """Plan every point of the grid and read the result."""
    if not axes:
        raise SweepError("nothing to vary", fix="give at least one --vary FIELD=SPEC")
    if needs_budget(base, axes, objective):
        raise SweepError(
            "--objective max_throughput needs a budget to stay within",
            fix="vary the budget (--vary budget=200k..2M) or set budget.total in the requirement",
        )
    tasks = build_tasks(base, axes, objective=objective, solver=solver or SolverSettings())
    outcomes = run_tasks(tasks, jobs=jobs, on_done=on_done)
    return assemble(base, axes, outcomes, objective=objective)


# ------------------------------------------------------------------------------------------------
# 6. Pareto frontiers
# ------------------------------------------------------------------------------------------------


class FrontierPoint(Out):
    p95_target_s: float | None = Field(default=None, description="the p95_latency target planned at (latency frontier)")
    budget_usd: float | None = Field(
        default=None, description="the budget.total level planned at (throughput frontier)"
    )
    status: RowStatus
    design: str | None = None
    shape: str | None = None
    total_usd: float | None = Field(default=None, description="total over the horizon, USD")
    p95_latency_s: float | None = Field(default=None, description="worst p95 end-to-end latency at rated load, s")
    throughput: float | None = Field(default=None, description="capacity within the targets, in throughput_unit")
    on_frontier: bool = Field(default=False, description="no other point is at most as dear and at least as good")


class FrontierResult(Out):
    requirement: str
    file: str
    against: Literal["latency", "throughput"]
    objective: str = Field(description="the planner objective at each point")
    throughput_unit: str
    target: float | None = Field(
        default=None, description="the requirement's own p95_latency (s) or peak demand (req/s)"
    )
    points: list[FrontierPoint] = Field(description="every point planned, cheapest first; infeasible ones last")
    notes: list[str]

    @property
    def frontier(self) -> list[FrontierPoint]:
        return [p for p in self.points if p.on_frontier]


def pareto(points: Sequence[tuple[float, float]], *, maximise: bool) -> list[bool]:
    """Which (cost, value) points are Pareto-optimal: lower cost, and lower (with ``maximise``,
    higher) value. Of equal points only the first is kept."""
    keep = [False] * len(points)
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1] if maximise else points[i][1], i))
    best: float | None = None
    for i in order:
        value = points[i][1]
        if best is None or (value > best if maximise else value < best):
            keep[i] = True
            best = value
    return keep


def _serving_workloads(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for w in data.get("workloads") or [] if isinstance(w, dict) and w.get("kind") == "serving"]


def _latency_target(value: float | None) -> Callable[[dict[str, Any]], None]:
    """An edit that sets (or, with None, removes) every serving workload's p95_latency."""

    def edit(data: dict[str, Any]) -> None:
        for w in _serving_workloads(data):
            if value is None:
                w.pop("p95_latency", None)
            else:
                w["p95_latency"] = value

    return edit


def _frontier_point(out: PointOutcome, **level: float | None) -> FrontierPoint:
    d = out.design
    if d is None:
        return FrontierPoint(status=out.status, **level)  # type: ignore[arg-type]
    return FrontierPoint(
        status=out.status,
        design=d.summary,
        shape=_shape(d),
        total_usd=d.costs.total_usd,
        p95_latency_s=p95_of(d),
        throughput=throughput_of(d)[0],
        **level,  # type: ignore[arg-type]
    )


def run_frontier(
    base: Base,
    *,
    against: Literal["latency", "throughput"] = "latency",
    points: int = DEFAULT_FRONTIER_POINTS,
    solver: SolverSettings | None = None,
    jobs: int = 1,
    on_done: Callable[[int], None] | None = None,
) -> FrontierResult:
    """The Pareto frontier of total cost against p95 latency (or against throughput).

    Latency: the least-cost design with every serving workload's ``p95_latency`` removed (TTFT and
    TPOT targets stay) gives the slow, cheap end and its p95 at rated load ``L``; then ``points``
    targets log-spaced from just below ``L`` down to ``L / FRONTIER_LATENCY_SPAN`` are each planned at
    least cost. Tighter targets buy more replicas at lower load, faster GPUs or lighter quantization;
    targets nothing can meet come back infeasible and are left off the frontier.

    Throughput: the least-cost design as given, then ``points`` ``budget.total`` levels log-spaced from
    that cost to ``FRONTIER_BUDGET_SPAN`` times it, each planned with ``max_throughput`` (whose
    tie-break is the least cost).

    Then dominated points (another at most as dear and at least as good) are marked off.
    """
    settings = solver or SolverSettings()
    serving = first_workload(base.data, ("serving",))
    if against == "latency" and serving is None:
        raise SweepError("a latency frontier needs a serving workload", fix="use --against throughput")
    if points < 2:
        raise SweepError("--points must be at least 2")
    throughput_unit = "requests/s" if serving is not None else "tokens/s"
    notes: list[str] = []
    target: float | None = None
    if against == "latency":
        assert serving is not None
        raw = base.data["workloads"][serving].get("p95_latency")
        target = units.parse_duration(raw) if raw is not None else None
        first = point_task(base, 0, [], objective="min_cost", solver=settings, edit=_latency_target(None))
        objective = "min_cost"
    else:
        w = base.data["workloads"][serving] if serving is not None else {}
        if w.get("requests_per_min") is not None:
            target = units.parse_rate(w["requests_per_min"]) / 60.0 * float(w.get("peak_to_average", 1.0))
        first = point_task(base, 0, [], objective="min_cost", solver=settings)
        objective = "max_throughput"
    cheapest = run_tasks([first], jobs=1)[0]
    if cheapest.design is None:
        notes.append(f"no design at any cost: {cheapest.detail}")
        return FrontierResult(
            requirement=base.name,
            file=str(base.path),
            against=against,
            objective=objective,
            throughput_unit=throughput_unit,
            target=target,
            points=[],
            notes=notes,
        )
    tasks: list[PointTask] = []
    levels: list[dict[str, float | None]] = []
    if against == "latency":
        slowest = p95_of(cheapest.design)
        assert slowest is not None
        targets = [float(f"{slowest * FRONTIER_LATENCY_SPAN ** (-i / points):.3g}") for i in range(1, points + 1)]
        for i, t in enumerate(targets):
            tasks.append(point_task(base, i + 1, [], objective=objective, solver=settings, edit=_latency_target(t)))
            levels.append({"p95_target_s": t})
        notes.append(
            f"p95_latency of every serving workload removed for the cheapest point, then set from "
            f"{format_value(targets[0], 'duration')} down to {format_value(targets[-1], 'duration')} "
            f"({points} targets, log-spaced); TTFT and TPOT targets kept"
        )
    else:
        low = math.ceil(cheapest.design.costs.total_usd) + 1.0  # above the least cost, so cent rounding never bites
        budget = Target(
            field="budget.total", path="budget.total", where="requirement", keys=["budget", "total"],
            quantity="money", unit="USD",
        )  # fmt: skip
        for i in range(points):
            lv = _tidy(low * FRONTIER_BUDGET_SPAN ** (i / (points - 1)))
            tasks.append(point_task(base, i + 1, [(budget, lv)], objective=objective, solver=settings))
            levels.append({"budget_usd": lv})
        notes.append(
            f"budget.total from {format_value(levels[0]['budget_usd'] or 0, 'money')} to "
            f"{format_value(levels[-1]['budget_usd'] or 0, 'money')} ({points} levels, log-spaced from the least "
            "cost), most capacity within each"
        )
    outcomes = run_tasks(tasks, jobs=jobs, on_done=on_done)
    pts = [_frontier_point(cheapest), *(_frontier_point(o, **lv) for o, lv in zip(outcomes, levels, strict=True))]

    def value(p: FrontierPoint) -> float | None:
        return p.p95_latency_s if against == "latency" else p.throughput

    scored = [(i, p.total_usd, value(p)) for i, p in enumerate(pts) if p.total_usd is not None and value(p) is not None]
    flags = pareto([(c, v) for _, c, v in scored], maximise=against == "throughput")  # type: ignore[misc]
    on = {i for (i, _, _), f in zip(scored, flags, strict=True) if f}
    pts = [p.model_copy(update={"on_frontier": i in on}) for i, p in enumerate(pts)]
    pts.sort(key=lambda p: (p.total_usd is None, p.total_usd or 0.0))
    infeasible = [p for p in pts if p.total_usd is None]
    dominated = len(pts) - len(on) - len(infeasible)
    notes.append(f"{len(on)} designs on the frontier; {dominated} dominated or repeated")
    if infeasible and against == "latency":
        tightest = min(p.p95_target_s or 0.0 for p in infeasible)
        loosest = max(p.p95_target_s or 0.0 for p in infeasible)
        notes.append(
            f"no design meets p95_latency {format_value(loosest, 'duration')}"
            + (f" or less (tried down to {format_value(tightest, 'duration')})" if tightest != loosest else "")
        )
    return FrontierResult(
        requirement=base.name,
        file=str(base.path),
        against=against,
        objective=objective,
        throughput_unit=throughput_unit,
        target=target,
        points=pts,
        notes=notes,
    )


__all__ = [
    "ALIASES",
    "Axis",
    "Base",
    "FrontierPoint",
    "FrontierResult",
    "PointOutcome",
    "PointTask",
    "SweepError",
    "SweepResult",
    "SweepRow",
    "Target",
    "assemble",
    "build_tasks",
    "catalog_override",
    "format_value",
    "grid",
    "load_base",
    "make_axis",
    "pareto",
    "parse_spec",
    "plan_point",
    "resolve_field",
    "row_of",
    "run_frontier",
    "run_sweep",
    "run_task",
    "run_tasks",
]
