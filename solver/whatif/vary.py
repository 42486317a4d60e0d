"""What ``--vary FIELD=SPEC`` means: the field it sets, the values it takes, and how a value is applied.

Pure data in and out; no printing, no planning.

1. **Fields.** :func:`resolve_field` turns what a user writes after ``--vary`` (``budget``, ``demand``,
   ``p95_latency``, ``gpu_price.h100-sxm``, ``workloads[0].peak_to_average`` ...) into a :class:`Target`:
   the requirement path it sets (or the user-catalog figure it overrides) and the kind of quantity,
   found from the requirement schema itself, so any numeric field can vary and units parse as in a file.
2. **Values.** :func:`parse_spec` reads ``200k..2M`` (``steps`` points, linear or ``log``) or a list
   ``1s,2s,5s`` with the field's own unit parser; :func:`make_axis` does both for one ``--vary``, and
   :func:`format_value` writes a value back in its field's units.
3. **Applying.** :func:`set_path` sets a requirement target in a requirement document;
   :func:`catalog_override` writes a user-catalog document for catalog targets.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from clusterplan import units
from clusterplan.candidates.serving import DEMAND_FIELDS, TARGET_FIELDS
from clusterplan.errors import SweepError, did_you_mean
from clusterplan.inputs.yamlio import format_path
from clusterplan.plan import Out
from clusterplan.requirement.schema import (
    FinetuneWorkload,
    InventoryItem,
    Requirement,
    ServingWorkload,
    TrainingWorkload,
)

if typing.TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog

Quantity = Literal["money", "duration", "rate", "tokens", "count", "months", "power", "number", "integer", "price"]

DEFAULT_STEPS = 10
SWEEP_SOURCE = "clusterplan-what-if"  # the source key catalog overrides of a sweep cite


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

# Quantity -> its unit parser (price, number and integer have no parser of their own in the schema).
_PARSER_OF: dict[Quantity, Callable[[Any], float]] = {
    **{quantity: parser for parser, quantity in _PARSERS.items()},
    "price": units.parse_money,
    "number": units.parse_count,
    "integer": units.parse_count,
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


Reuse = Literal["table", "physics", "none"]

_TABLE_CONSTRAINTS = ("max_gpus", "max_power")


def reuse_of(target: Target) -> Reuse:
    """What the points of a sweep over ``target`` share, the one place that decides it
    (:mod:`clusterplan.whatif.points` passes the points one candidate cache when it is not "none").

    * ``"table"``: every candidate row. Budgets, the horizon, GPU and power caps and prices are bounds
      and cost coefficients of the model (limits and offerings, rebuilt per point); no row reads the
      demand (a row is one replica).
    * ``"physics"``: each serving layout's memory, batch and estimate; p95 targets change only the
      rate search.
    * ``"none"``: the field reaches the physics (token counts, the model, a deadline ...): each point
      prepares its candidates afresh.

    Whatever is shared is keyed by every input that made it (:class:`clusterplan.candidates.build.CandidateCache`),
    so a point's plan is the same as planning it alone.
    """
    if target.where in ("gpu_price", "electricity_price"):
        return "table"
    keys = target.keys
    if not keys:
        return "none"
    if keys[0] == "budget" or (keys[0] == "constraints" and keys[-1] in _TABLE_CONSTRAINTS):
        return "table"
    if keys[0] == "workloads" and keys[-1] in DEMAND_FIELDS:
        return "table"
    if keys[0] == "workloads" and keys[-1] in TARGET_FIELDS:
        return "physics"
    return "none"


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
    owned = data.get("owned")
    if text == "electricity_price" and isinstance(owned, dict) and "electricity_usd_per_kwh" in owned:
        text = "owned.electricity_usd_per_kwh"  # the requirement's own figure wins over a catalog's: vary it there
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
        if w.get("profile") is not None:  # its demand is a list of hourly rates, not one figure a sweep can set
            raise SweepError(
                "cannot vary 'demand': the first serving workload gives a demand profile (its hourly rates); "
                "plan scaled copies of the profile one by one, or vary another field"
            )
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
    parser = _PARSER_OF[quantity]
    try:
        return parser(text.strip())
    except (PydanticCustomError, ValueError) as exc:
        message = exc.message() if isinstance(exc, PydanticCustomError) else str(exc)
        raise SweepError(f"--vary {field}: {message}", fix="e.g. 200k..2M, 1s,2s,5s or 0.5..2 with --log") from None


def tidy(x: float) -> float:
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
            values = [tidy(lo * (hi / lo) ** (i / (steps - 1))) for i in range(steps)]
        else:
            values = [tidy(lo + (hi - lo) * i / (steps - 1)) for i in range(steps)]
    else:  # a comma always separates values: 100,200,300 is three (write 1.2M, not 1,200,000)
        values = [parse_value(part, quantity, field=field) for part in text.split(",") if part.strip()]
        if not values:  # ',,,': separators only (an empty axis once reached range() with a zero step)
            raise SweepError(f"--vary {field}={spec} holds no value", fix="e.g. --vary budget=200k,500k,1M")
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
# 3. Applying a value
# ------------------------------------------------------------------------------------------------


def requirement_value(value: float, target: Target) -> float | int | str:
    """``value`` as a requirement document holds it: an integer field an int, a duration or power with its
    base unit (a document must state one: units.UNITS_REQUIRED), anything else the number."""
    if target.quantity == "integer":
        return int(value)
    if target.quantity == "duration":
        return units.stated(value, "s")
    if target.quantity == "power":
        return units.stated(value, "W")
    return value


def set_path(data: dict[str, Any], keys: Sequence[str | int], value: float | int | str) -> None:
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


__all__ = [
    "ALIASES",
    "DEFAULT_STEPS",
    "SWEEP_SOURCE",
    "Axis",
    "Quantity",
    "Reuse",
    "Target",
    "catalog_override",
    "first_workload",
    "format_value",
    "make_axis",
    "parse_spec",
    "parse_value",
    "resolve_field",
    "reuse_of",
    "set_path",
    "split_vary",
    "tidy",
]
