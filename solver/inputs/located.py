"""Turn pydantic validation errors into located, readable problems with did-you-mean hints."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from clusterplan.errors import (
    MAX_LOCATED_PROBLEMS,
    MAX_SUGGESTIONS,
    FieldProblem,
    InputError,
    Location,
    did_you_mean,
    quoted,
)
from clusterplan.inputs.yamlio import LocatedDocument, PathKey, format_path
from clusterplan.units import UNITS_REQUIRED

M = TypeVar("M", bound=BaseModel)

# pydantic inserts the tag of a union member into the location ('serving', 'str', 'InlineModel', ...).
_UNION_TAGS = {
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "InlineModel",
    "HfConfigModel",
    "function-after",
    "function-before",
    "function-wrap",
    "constrained-str",
}


def _allowed_keys(model: type[BaseModel], data: Any, path: PathKey) -> list[str]:
    """Field names valid at ``path`` in ``model`` (best effort, for did-you-mean).

    A union member (serving, training or finetune workload) is picked by the mapping it describes,
    so the mapping is read before the next key, not at the list that holds it.
    """
    annotation: Any = model
    node: Any = data
    for part in path:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            continue
        current = _model_in(annotation, node)
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        node = node.get(part) if isinstance(node, dict) else None
    current = _model_in(annotation, node)
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields else []


def _model_in(annotation: Any, node: Any) -> Any:
    """The BaseModel class inside an annotation (Optional, list, discriminated union by 'kind')."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    candidates = []
    for arg in typing.get_args(annotation):
        found = _model_in(arg, node)
        if found is not None:
            candidates.append(found)
    if not candidates:
        return None
    if len(candidates) > 1 and isinstance(node, dict):
        for c in candidates:
            kind = c.model_fields.get("kind")
            if kind is not None and node.get("kind") in typing.get_args(kind.annotation):
                return c
            if set(node) <= set(c.model_fields):
                return c
    return candidates[0]


def _clean_loc(loc: tuple[Any, ...], data: Any) -> PathKey:
    """Drop union-member tags from a pydantic location, keeping real keys and indices."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(part, int):
            out.append(part)
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            continue
        if isinstance(node, dict) and part in node:
            out.append(part)
            node = node[part]
            continue
        if (
            part in _UNION_TAGS
            or part in {"serving", "training", "finetune", "name", "inline", "hf_config"}
            or part.startswith("function-")
            or not isinstance(node, dict)
        ):
            continue
        out.append(part)  # a missing field or an extra key
        node = None
    return tuple(out)


def _message(err: dict[str, Any], model: type[BaseModel], data: Any, path: PathKey, *, suggest: bool) -> str:
    """One error in words; ``suggest`` says whether to look for a did-you-mean (capped per report)."""
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(path[-1]) if path else "?"
        hint = did_you_mean(key, _allowed_keys(model, data, path[:-1])) if suggest else None
        return f"unknown key {quoted(key)}" + (f"; {hint}" if hint else "")
    if kind == "missing":
        return "required field is missing"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind in {"literal_error", "enum"}:
        return f"{msg}, got {quoted(err.get('input'))}"
    if (
        kind not in {"unit_parse", "unit_missing", "negative", "value_error"}
        and "input" in err
        and not isinstance(err["input"], dict | list)
    ):
        msg = f"{msg}, got {quoted(err['input'])}"
    return msg


def validate_document(doc: LocatedDocument, model: type[M], *, root_path: PathKey = ()) -> M:
    """Validate ``doc.data`` (or the part at ``root_path``) as ``model``; raise a located InputError."""
    data = doc.data
    for part in root_path:
        data = data[part]
    try:
        return model.model_validate(data, context={UNITS_REQUIRED: True})
    except ValidationError as exc:
        problems: list[FieldProblem] = []
        seen: set[tuple[PathKey, str]] = set()
        union_noise: list[FieldProblem] = []
        for err in exc.errors(include_url=False):
            if len(problems) + len(union_noise) >= MAX_LOCATED_PROBLEMS:  # only counted beyond this
                kind = "unknown_key" if err["type"] == "extra_forbidden" else str(err["type"])
                problems.append(FieldProblem(Location(doc.file), "", "", kind))
                continue
            path = _clean_loc(tuple(err["loc"]), data)
            full = (*root_path, *path)
            message = _message(dict(err), model, data, path, suggest=len(problems) < MAX_SUGGESTIONS)
            if (full, message) in seen:
                continue
            seen.add((full, message))
            kind = "unknown_key" if err["type"] == "extra_forbidden" else str(err["type"])
            problem = FieldProblem(doc.locate(full), format_path(full), message, kind)
            # Union attempts that fail for being the wrong kind of thing are noise beside a real error.
            if err["type"] in {"string_type", "model_type", "dict_type"}:
                union_noise.append(problem)
            else:
                problems.append(problem)
        raise InputError(problems or union_noise) from None
