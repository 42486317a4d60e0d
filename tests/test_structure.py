"""The floor plan stays one-way and the functions stay small (ARCHITECTURE.md, STYLE habits 24 and 25).

Read from the source with :mod:`ast`, nothing imported: every ``import`` of a ``clusterplan`` module in ``solver/``,
function-level imports included and ``if TYPE_CHECKING:`` blocks excluded (annotations only, never run).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

SOLVER = Path(__file__).resolve().parent.parent / "solver"

# ARCHITECTURE.md's layers, bottom up: a top-level package or module imports only its own layer's and lower ones.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "units", "outputs", "console", "forks"),
    ("inputs",),
    ("catalog",),
    ("physics",),
    ("plan", "wording"),
    ("requirement",),
    ("stdin", "evaluation"),
    ("candidates",),
    ("planner",),
    ("explain", "pipeline"),
    ("design", "whatif", "review"),
    ("render", "commands", "cli", "api"),
)
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
# The issue that drew this floor plan named these: none of them may reach the edge writers.
BELOW_THE_EDGE = ("physics", "candidates", "planner", "design", "evaluation", "explain", "requirement", "wording")

MAX_PARAMETERS = 8
MAX_LINES = 120


def _top(path: Path) -> str:
    rel = path.relative_to(SOLVER).with_suffix("")
    return rel.parts[0]


def _module(path: Path) -> list[str]:
    parts = ["clusterplan", *path.relative_to(SOLVER).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _type_checking_only(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skip.update(id(n) for n in ast.walk(inner))
    return skip


def _imported(path: Path, tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(top-level package imported, line) for each clusterplan import that runs."""
    skip = _type_checking_only(tree)
    here = _module(path)
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names = [f"{module}.{alias.name}" for alias in node.names] if module == "clusterplan" else [module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "clusterplan" and len(parts) > 1 and parts[1] in LAYER_OF:
                yield parts[1], line


@cache
def _edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) top-level pairs with the places that import."""
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SOLVER.rglob("*.py")):
        me = _top(path)
        for other, line in _imported(path, ast.parse(path.read_text(encoding="utf-8"))):
            if other != me:
                out.setdefault((me, other), []).append(f"{path.relative_to(SOLVER.parent)}:{line}")
    return out


def test_every_top_level_package_has_a_layer() -> None:
    tops = {_top(p) for p in SOLVER.rglob("*.py")} - {"__init__"}
    assert tops <= set(LAYER_OF), f"add {sorted(tops - set(LAYER_OF))} to LAYERS and ARCHITECTURE.md"


def test_no_layer_imports_one_above_it() -> None:
    upward = {f"{a} -> {b}": where for (a, b), where in _edges().items() if LAYER_OF[b] > LAYER_OF[a]}
    assert not upward, upward


def test_no_import_cycle_among_top_level_packages() -> None:
    graph: dict[str, set[str]] = {}
    for a, b in _edges():
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt] if nxt in path else [*path, nxt]
            if nxt not in state and (found := cycle_from(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = cycle_from(start, [start])
            assert found is None, (
                " -> ".join(found) + f": {[_edges()[(a, b)][0] for a, b in itertools.pairwise(found)]}"
            )


def test_nothing_below_the_edge_imports_render() -> None:
    offenders = {f"{a} -> render": w for (a, b), w in _edges().items() if b == "render" and a in BELOW_THE_EDGE}
    assert not offenders, offenders


def _functions() -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for path in sorted(SOLVER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield f"{path.relative_to(SOLVER.parent)}:{node.lineno} {node.name}", node


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    named = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    n = len(named) + (a.vararg is not None) + (a.kwarg is not None)
    return n - (1 if named and named[0].arg in ("self", "cls") else 0)


@pytest.mark.parametrize("limit", ["parameters", "lines"])
def test_functions_stay_small(limit: str) -> None:
    """No function takes more than eight parameters or runs over 120 lines: past that, a concept wants a value
    (habit 25) or the function handles several kinds that want a function each."""
    if limit == "parameters":
        big = {where: n for where, fn in _functions() if (n := _parameters(fn)) > MAX_PARAMETERS}
    else:
        big = {
            where: n for where, fn in _functions() if (n := (fn.end_lineno or fn.lineno) - fn.lineno + 1) > MAX_LINES
        }
    assert not big, big
