"""``--backend ray``: sweep and frontier points planned as Ray tasks give the ``--jobs 1`` results.

Runs against a local Ray instance the test starts (one CPU, no dashboard); skipped where Ray is not
installed (it is an optional extra; the ``test`` extra installs it). The errors need no Ray.
"""

from __future__ import annotations

import builtins
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterplan.errors import BackendError
from clusterplan.planner.solve import SolverSettings
from clusterplan.whatif import points
from clusterplan.whatif.frontier import run_frontier
from clusterplan.whatif.points import load_base
from clusterplan.whatif.ray_backend import points_backend
from clusterplan.whatif.sweep import run_sweep
from clusterplan.whatif.vary import make_axis
from conftest import example, run_cli

# Each test starts or connects to a local Ray (seconds before the first task runs).
pytestmark = pytest.mark.slow

SETTINGS = SolverSettings(time_limit_s=10.0)


@pytest.fixture(scope="module")
def ray() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


def _budget_sweep(backend: str) -> Any:
    base, _ = load_base(example("70b-serving"))
    axis = make_axis("budget=150k..2M", base.data, base.catalog, steps=3, log=False)
    with points_backend(backend):
        return run_sweep(base, [axis], solver=SETTINGS, jobs=1)


def _not_here(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("a point was planned in the test's own process, not on Ray")


def test_sweep_on_ray_equals_jobs_1(ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    local = _budget_sweep("local")
    monkeypatch.setattr(points, "plan_point", _not_here)  # Ray's worker processes import the real one
    remote = _budget_sweep("ray")
    assert ray.is_initialized()  # the test's instance was used and left running
    assert remote == local
    assert any(r.shape is not None for r in local.rows) and any(r.shape is None for r in local.rows)


def test_frontier_on_ray_equals_jobs_1(ray: Any) -> None:
    base, _ = load_base(example("7b-chat-serving"))
    local = run_frontier(base, points=2, solver=SETTINGS, jobs=1)
    with points_backend("ray"):
        remote = run_frontier(base, points=2, solver=SETTINGS, jobs=1)
    assert remote == local and local.frontier


def test_cli_sweep_backend_ray(ray: Any, tmp_path: Path) -> None:
    args = ["sweep", str(example("7b-chat-serving")), "--vary", "budget=200k,2M"]
    local, remote = tmp_path / "local.json", tmp_path / "ray.json"
    assert run_cli(*args, "--jobs", "1", "--json", str(local)).exit_code == 0
    result = run_cli(*args, "--backend", "ray", "--json", str(remote))
    assert result.exit_code == 0, result.output
    assert json.loads(remote.read_text()) == json.loads(local.read_text())


def test_without_ray_installed_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_ray(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_ray)
    result = run_cli("sweep", str(example("7b-chat-serving")), "--vary", "budget=1M", "--backend", "ray")
    assert result.exit_code == 2
    assert "clusterplan[ray]" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("backend", "address", "words"),
    [("dask", None, "unknown backend"), ("local", "auto", "--ray-address is for --backend ray")],
)
def test_backend_errors(backend: str, address: str | None, words: str) -> None:
    with pytest.raises(BackendError, match=words), points_backend(backend, address):
        pass
    extra = ["--ray-address", address] if address else []
    result = run_cli("frontier", str(example("7b-chat-serving")), "--backend", backend, *extra)
    assert result.exit_code == 2 and words in result.output
