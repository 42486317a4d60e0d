"""Hostile and random requirement documents: every one is accepted or refused with a located message.

Never a traceback, never a hang. (Issue: hardening.) Generated with hypothesis from the shipped examples
by replacing values with junk, adding unknown keys and deleting keys.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterplan.catalog.load import load_catalog
from clusterplan.errors import ClusterplanError, InputError
from clusterplan.requirement.load import load_requirement_text
from conftest import EXAMPLES, cpu_s, value_paths

CATALOG = load_catalog()
BASES = [yaml.safe_load(p.read_text()) for p in EXAMPLES]
LOCATED = re.compile(r"^[^:\n]+\.yaml(:\d+(:\d+)?)?: ", re.MULTILINE)

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["5s", "800ms", "$1.2M", "150k", "4k", "30d", "fast", "5m", "-1", "1e999", "h100", "int3"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@st.composite
def mutated_requirements(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = value_paths(doc)
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(junk)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(junk)
    return doc


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_requirements())
def test_mutated_requirements_are_accepted_or_refused_with_a_location(doc: dict[str, Any]) -> None:
    text = yaml.safe_dump(doc, allow_unicode=True)
    start = cpu_s()
    try:
        load_requirement_text(text, "r.yaml", CATALOG, base_dir=Path("."))
    except InputError as exc:
        assert exc.exit_code == 2
        assert exc.problems, "an input error names at least one problem"
        assert LOCATED.search(exc.render()), exc.render()
    except ClusterplanError as exc:  # other refusals must still be clean messages
        assert exc.exit_code == 2, exc.render()
    assert cpu_s() - start < 1.0


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash_the_loader(data: bytes) -> None:
    from clusterplan.inputs.yamlio import parse_yaml_text

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    try:
        doc = parse_yaml_text(text, "x.yaml")
        load_requirement_text(text, "x.yaml", CATALOG) if isinstance(doc.data, dict) else None
    except ClusterplanError as exc:
        assert exc.exit_code == 2
