"""One exception root: every error a user can meet is defined in ``solver/errors.py``.

A caller catches any of them without importing the layer that raises it, and errors.py is the one list of
what clusterplan reports. The walk reads the source (ast), so it sees modules no test imports, and follows
subclasses of subclasses by name across files.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

SOLVER = ROOT / "solver"
ERRORS = SOLVER / "errors.py"
ROOT_CLASS = "ClusterplanError"


def _base_names(node: ast.ClassDef) -> set[str]:
    """The names of ``node``'s bases as written: ``Error`` and ``errors.Error`` are both ``Error``."""
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


def error_classes(folder: Path) -> dict[str, set[Path]]:
    """Every class under ``folder`` that descends from ClusterplanError, by name, with the files defining it."""
    classes: list[tuple[str, set[str], Path]] = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        classes += [(n.name, _base_names(n), path) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    found: dict[str, set[Path]] = {}
    known = {ROOT_CLASS}
    grew = True
    while grew:  # to a fixed point: a subclass of a subclass in another file is found on a later pass
        grew = False
        for name, bases, path in classes:
            if bases & known and path not in found.get(name, set()):
                found.setdefault(name, set()).add(path)
                known.add(name)
                grew = True
    return found


def test_every_clusterplan_error_is_defined_in_errors_py() -> None:
    found = error_classes(SOLVER)
    assert {"InputError", "UnknownNameError", "OutOfRange", "NoDesign"} <= set(found)  # the walk sees them
    outside = {name: sorted(str(p.relative_to(ROOT)) for p in paths - {ERRORS}) for name, paths in found.items()}
    outside = {name: paths for name, paths in outside.items() if paths}
    assert not outside, f"ClusterplanError subclasses defined outside solver/errors.py: {outside}"


def test_the_walk_finds_a_subclass_defined_elsewhere(tmp_path: Path) -> None:
    """The check itself: a subclass of a subclass, in another file and written as ``errors.X``, is found."""
    (tmp_path / "errors.py").write_text(f"class {ROOT_CLASS}(Exception): ...\nclass InputError({ROOT_CLASS}): ...\n")
    (tmp_path / "layer").mkdir()
    (tmp_path / "layer" / "a.py").write_text(
        "from b import Mid\nclass Leaf(Mid): ...\nclass Private(ValueError): ...\n"
    )
    (tmp_path / "layer" / "b.py").write_text("import errors\nclass Mid(errors.InputError): ...\n")
    found = error_classes(tmp_path)
    assert set(found) == {"InputError", "Mid", "Leaf"}
    assert found["Leaf"] == {tmp_path / "layer" / "a.py"}
