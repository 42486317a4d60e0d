"""Shared test paths, fixtures and builders (what tests/README.md calls the shared layer).

- Paths: ``ROOT``, ``EXAMPLES`` (the shipped example requirements), ``EXAMPLES_DIR``, ``DATA``, ``example``.
- Running: ``plan_file`` (one example through the planner), ``shared_plan`` (the same, planned once per test
  run for the tests that read the same plan), ``run_cli`` (the ``clusterplan`` CLI in-process),
  ``write_doc`` (a requirement dict as a file), ``solve_doc`` / ``infeasibility_of`` (write it, solve it through
  the CLI), ``assert_not_dangling`` (an explanation never ends on a colon).
- Timing: ``cpu_s`` (this process's CPU seconds), the only clock a test bounds work with.
- Builders of hand-made candidate tables for the CP-SAT model (no physics, no catalog): two GPU types
  ``GPU_A`` (NVLink 8) and ``GPU_P`` (PCIe), ``cloud``/``owned`` offerings, ``srow`` serving rows,
  ``serving`` workloads, ``table``; and ``serving_workload`` for the explanation tests' one-workload tables.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest
import yaml
from typer.testing import CliRunner, Result

from clusterplan.candidates.table import (
    CandidateTable,
    Exclusion,
    GpuType,
    Limits,
    Offering,
    ServingRow,
    ServingTargets,
    WorkloadCandidates,
)

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.plan import Plan
    from clusterplan.requirement.load import ResolvedRequirement
    from clusterplan.whatif.points import PointTask

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = ROOT / "examples" / "requirements"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
DATA = Path(__file__).resolve().parent / "data"

_RUNNER = CliRunner()


def example(stem: str) -> Path:
    """The shipped example requirement ``examples/requirements/<stem>.yaml``."""
    path = EXAMPLES_DIR / f"{stem}.yaml"
    assert path.exists(), path
    return path


def point_alone(task: PointTask) -> tuple[ResolvedRequirement, Catalog]:
    """A what-if point as a file of its own would load: its catalog (with the what-if override, written as a file)
    and its requirement; what the sweep tests hold each row to, apart from the sweep's own loading."""
    import tempfile

    from clusterplan.catalog.load import load_catalog
    from clusterplan.requirement.load import load_requirement_text

    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(p) for p in task.catalog_paths]
        if task.catalog_override is not None:
            extra = Path(tmp) / "override.yaml"
            extra.write_text(task.catalog_override, encoding="utf-8")
            paths.append(extra)
        catalog = load_catalog(paths)
    return load_requirement_text(task.text, task.name, catalog, base_dir=Path(task.base_dir)), catalog


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    from clusterplan.catalog.load import load_catalog

    return load_catalog()


# ------------------------------------------------------------------------------------------------
# Running the planner and the CLI
# ------------------------------------------------------------------------------------------------


def plan_file(
    path: Path, catalog: Catalog, *, top: int = 1, explain: bool | Literal["binding", "design"] = True
) -> Plan:
    """Load a requirement file against ``catalog`` and plan it, as ``clusterplan solve`` does."""
    from clusterplan.pipeline import PlanOptions, plan_requirement
    from clusterplan.requirement.load import load_requirement

    return plan_requirement(load_requirement(path, catalog), catalog, PlanOptions(top=top, explain=explain))


# Plans made once per test run (shared_plan, reused_plans): per key, the plan, in this process.
_SHARED_PLANS: dict[str, Plan] = {}
# Under pytest-xdist, the folder every worker of this run shares (set by the session fixture below).
_SHARED_FOLDER: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def _shared_plans_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """With several workers (pytest-xdist), ``shared_plan`` also shares its plans between them, through a folder of
    this run's base temp (each worker's base temp is a subfolder of it: pytest-xdist's way to run a session fixture
    once per run)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.getbasetemp().parent / "shared-plans"
        folder.mkdir(exist_ok=True)
        _SHARED_FOLDER[:] = [folder]


def shared_plan(path: Path, catalog: Catalog, *, top: int = 1, explain: bool | Literal["binding"] = True) -> Plan:
    """``plan_file``'s plan, planned once per test run (session scope, across pytest-xdist's workers too) for each
    requirement, catalog and options, and shared by the tests that read different properties of the same plan (the
    shipped examples', mostly), and with the commands of tests that use ``reused_plans``. Planning is pure
    (tests/test_hardening_determinism.py: byte-identical across processes, whatever ran before). Each call returns
    its own deep copy: a test that edits its plan edits no other test's."""
    from clusterplan.pipeline import PlanOptions, plan_requirement
    from clusterplan.requirement.load import load_requirement

    return _planned_once(
        plan_requirement, load_requirement(path, catalog), catalog, PlanOptions(top=top, explain=explain)
    )


class ExamplePlans(Mapping[str, Any]):
    """Per example stem, ``make(path)``, made when a test first reads it (and kept): a module's fixture of every
    example's plan, whose tests each read one, then plans on each worker only the examples its tests read, instead
    of every example on every worker that runs one of them."""

    def __init__(self, paths: list[Path], make: Callable[[Path], Any]) -> None:
        self._paths = {p.stem: p for p in paths}
        self._make = make
        self._made: dict[str, Any] = {}

    def __getitem__(self, stem: str) -> Any:
        if stem not in self._made:
            self._made[stem] = self._make(self._paths[stem])
        return self._made[stem]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def _planned_once(
    plan: Callable[..., Plan], resolved: ResolvedRequirement, catalog: Catalog, options: Any, timings: Any = None
) -> Plan:
    """``plan(resolved, catalog, options)`` made once per test run, by content: the requirement (its file's path,
    which a plan quotes, and every field), the catalog's fingerprint and the options. A deep copy each call.
    ``timings`` are filled by the call that plans (a command prints them), left at zero where the plan is reused."""
    key = hashlib.sha256(
        repr(
            (resolved.path, resolved.requirement.model_dump_json(), resolved.models, resolved.model_notes,
             catalog.fingerprint(), options)
        ).encode("utf-8")
    ).hexdigest()  # fmt: skip
    held = _SHARED_PLANS.get(key)
    if held is None:
        held = _SHARED_PLANS[key] = _plan_once_per_run(key, lambda: plan(resolved, catalog, options, timings=timings))
    return held.model_copy(deep=True)


def _plan_once_per_run(key: str, make: Callable[[], Plan]) -> Plan:
    """The plan another worker of this run already made under ``key``, or a new one, left for the others (written
    whole, then renamed: a reader never sees half a file)."""
    if not _SHARED_FOLDER:
        return make()
    held = _SHARED_FOLDER[0] / f"{key}.pickle"
    if held.exists():
        plan: Plan = pickle.loads(held.read_bytes())
        return plan
    plan = make()
    partial = held.with_name(f"{held.name}.{os.getpid()}.partial")
    partial.write_bytes(pickle.dumps(plan))
    os.replace(partial, held)
    return plan


@pytest.fixture
def reused_plans() -> Iterator[None]:
    """The commands this test runs in-process plan each requirement, catalog and options once per test run
    (``shared_plan``'s plans): for tests of what a command makes of a plan (its output, its files, its exit code),
    which solving the same example again in every test only slows. Not for a test of planning itself (determinism,
    time limits, what ran before): those must plan. ``reusing_plans()`` is the same for a module's fixture."""
    with reusing_plans():
        yield


@contextlib.contextmanager
def reusing_plans() -> Iterator[None]:
    """``reused_plans`` as a context: ``clusterplan.pipeline.plan_requirement`` plans once per test run for each
    requirement, catalog and options inside it. A plan given a candidate cache (a what-if sweep's points) is
    planned as before."""
    from clusterplan import pipeline

    real = pipeline.plan_requirement

    def plan_requirement(
        resolved: ResolvedRequirement,
        catalog: Catalog,
        options: Any = None,
        *,
        timings: Any = None,
        cache: Any = None,
    ) -> Plan:
        if cache is not None:
            return real(resolved, catalog, options, timings=timings, cache=cache)
        return _planned_once(real, resolved, catalog, options or pipeline.PlanOptions(), timings)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "plan_requirement", plan_requirement)
        yield


def run_cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """``clusterplan ARGS`` in-process. A traceback other than ``SystemExit`` is re-raised: it is a bug."""
    from clusterplan.cli import app

    result = _RUNNER.invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def cpu_s() -> float:
    """CPU seconds this process has run, its threads together (``time.process_time``): what a test bounds the work
    of a command with. A loaded machine stretches wall time, not the CPU time the same work takes (a wall-clock
    bound failed that way); sleeping is not counted, nor a child process's work (bound work run in-process)."""
    return time.process_time()


def write_doc(folder: Path, doc: dict[str, Any], name: str = "req.yaml") -> Path:
    """``doc`` written as the requirement file ``folder/name``."""
    f = folder / name
    f.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return f


def solve_doc(tmp_path: Path, doc: dict[str, Any], *extra: str, name: str = "req.yaml") -> tuple[int, str]:
    """Write ``doc`` as a requirement file, run ``clusterplan solve FILE EXTRA``: (exit code, stdout)."""
    result = run_cli("solve", str(write_doc(tmp_path, doc, name)), *extra)
    return result.exit_code, result.stdout


def infeasibility_of(tmp_path: Path, doc: dict[str, Any], *extra: str) -> dict[str, Any]:
    """The ``infeasibility`` object of ``clusterplan solve --json`` on ``doc``, which must exit 1."""
    import json

    code, out = solve_doc(tmp_path, doc, "--json", *extra)
    assert code == 1, out
    inf = json.loads(out)["infeasibility"]
    assert isinstance(inf, dict)
    return inf


def value_paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a parsed YAML document (the fuzzers pick values to mutate from these)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += value_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += value_paths(v, (*prefix, i))
    return out


def assert_not_dangling(text: str) -> None:
    """An explanation says something and never ends on a colon with nothing after it."""
    assert text.strip(), "empty explanation"
    assert not text.rstrip().endswith(":"), text


# A small 8B chat service whose 1 ms p95 no GPU reaches (infeasible on latency alone).
SMALL_SERVING: dict[str, Any] = {
    "name": "tiny latency",
    "model": "llama-3.1-8b",
    "workloads": [
        {
            "kind": "serving",
            "name": "assistant",
            "requests_per_min": 100,
            "input_tokens": 800,
            "output_tokens": 250,
            "p95_latency": "1ms",
        }
    ],
    "budget": {"horizon": 24},
    "deployment": "cloud",
}


# ------------------------------------------------------------------------------------------------
# Hand-made candidate tables (the CP-SAT model's input, without physics or a catalog)
# ------------------------------------------------------------------------------------------------

GPU_A = GpuType(id="a", name="A", tdp_w=700, nvlink_domain=8, price_usd=20000)
GPU_P = GpuType(id="p", name="P", tdp_w=300, nvlink_domain=1, price_usd=5000)


def cloud(gid: str, k: int, price: float, domain: int | None = None) -> Offering:
    """A cloud instance of ``k`` GPUs ``gid`` at ``price`` USD/h (TP domain ``k`` unless given)."""
    return Offering(
        key=f"cloud:{gid}:{k}",
        kind="cloud",
        gpu_id=gid,
        gpus_per_unit=k,
        tp_domain=domain if domain is not None else k,
        usd_per_hour=price,
        provider="t",
        instance_id=f"{gid}x{k}",
    )


def owned(gid: str, s: int, capital: float, power: float = 1000.0, inv: int = 0, domain: int | None = None) -> Offering:
    """An owned server of ``s`` GPUs ``gid``: ``capital`` USD, ``power`` W at $0.10/kWh, ``inv`` in inventory."""
    return Offering(
        key=f"owned:{gid}:{s}",
        kind="owned",
        gpu_id=gid,
        gpus_per_unit=s,
        tp_domain=domain if domain is not None else s,
        capital_usd=capital,
        power_w=power,
        energy_usd_per_month=power / 1000 * 0.1 * 730,  # kW x $0.10/kWh x 730 h
        inventory_units=inv,
    )


def srow(
    gid: str,
    tp: int,
    rate: float,
    nolat: float | None = None,
    quant: str = "bf16",
    forbidden: tuple[tuple[str, str], ...] = (),
) -> ServingRow:
    """One replica shape: ``rate`` req/s with the targets met (``nolat`` without them; default the same)."""
    return ServingRow(
        gpu_id=gid,
        tp=tp,
        pp=1,
        quant=quant,
        batch=16,
        rate_rps=rate,
        rate_nolat_rps=nolat if nolat is not None else rate,
        p95_e2e_s=1.0,
        memory_gib=10,
        capacity_gib=80,
        forbidden_by=forbidden,
    )


def serving(
    rows: list[ServingRow], demand: float, *, k: int = 0, mixed: bool = False, idx: int = 0, targets: bool = True
) -> WorkloadCandidates:
    """A serving workload of ``demand`` req/s over ``rows`` with N+``k`` redundancy."""
    return WorkloadCandidates(
        index=idx,
        name=f"s{idx}",
        kind="serving",
        rows=tuple(rows),
        demand_rps=demand,
        average_rps=demand,
        output_tokens=100,
        targets=ServingTargets(p95_latency_s=5.0) if targets else ServingTargets(),
        redundancy=k,
        allow_mixed=mixed,
    )


def table(workloads: list[WorkloadCandidates], offerings: list[Offering], **limits: Any) -> CandidateTable:
    """A candidate table over ``GPU_A`` and ``GPU_P`` with ``limits`` (fields of :class:`Limits`)."""
    return CandidateTable(
        workloads=tuple(workloads), gpus={"a": GPU_A, "p": GPU_P}, offerings=tuple(offerings), limits=Limits(**limits)
    )


def serving_workload(rows: tuple[ServingRow, ...], exclusions: tuple[Exclusion, ...] = ()) -> WorkloadCandidates:
    """The explanation tests' one serving workload "svc" of model "M": 2 req/s, no latency targets."""
    return WorkloadCandidates(
        index=0,
        name="svc",
        kind="serving",
        rows=rows,
        exclusions=exclusions,
        model_name="M",
        demand_rps=2.0,
        average_rps=2.0,
        input_tokens=100,
        output_tokens=100,
        targets=ServingTargets(),
    )


def one_axis_variants(bases: list[dict[str, Any]], axes: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Each base, followed by every variant of it that changes one axis to another of its values (a memo's tests:
    each variant computed right after its base, so a key that drops an axis returns the base's answer)."""
    cases: list[dict[str, Any]] = []
    for base in bases:
        cases.append(base)
        for axis, values in axes.items():
            cases += [{**base, axis: v} for v in values if v is not base[axis]]
    return cases


def process_running(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False
