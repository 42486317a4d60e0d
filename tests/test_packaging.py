"""The installed package holds every module: a non-editable install must not lose a subpackage."""

from __future__ import annotations

import tomllib

from conftest import ROOT


def test_every_package_under_solver_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        "clusterplan" + "".join("." + part for part in init.parent.relative_to(ROOT / "solver").parts)
        for init in (ROOT / "solver").rglob("__init__.py")
    }
    assert on_disk <= listed, f"add to [tool.setuptools] packages: {sorted(on_disk - listed)}"
    assert config["package-dir"]["clusterplan.catalog_data"] == "catalog"
