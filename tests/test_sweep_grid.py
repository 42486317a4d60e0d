"""Grids at interactive speed (issue 33): per-point work only where it is read, the same designs as planning
each point alone, and the progress a terminal shows.

- ``--binding changes`` (the sweep command's default) works binding constraints (the conflict where a point has
  no design) out for the rows whose outcome differs from their neighbour's; those rows equal ``--binding all``'s,
  every other row is the same apart from ``binding`` None, and a note says so.
- A grid row's design equals the single-point solve of that row's requirement (its file and catalog override
  planned alone, as ``clusterplan solve`` plans).
- Progress on stderr: points done and the time left on a terminal; nothing when stderr is not one.
- A sweep's phases run on one pool of workers (``one_pool``), gone when it ends; a grid's tasks share their
  documents yet equal tasks made one by one; a what-if point looks for no other layouts of its design's hardware
  and otherwise has the same design.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import replace

import pytest
from rich.console import Console

from clusterplan.commands import sweep as sweep_command
from clusterplan.pipeline import PlanOptions, plan_requirement
from clusterplan.planner.solve import SolverSettings
from clusterplan.whatif.points import (
    PointCache,
    PointOutcome,
    PointTask,
    in_pool,
    load_base,
    one_pool,
    point_task,
    pool_open,
    shape_of,
)
from clusterplan.whatif.sweep import build_tasks, changed_rows, run_sweep
from clusterplan.whatif.vary import make_axis
from conftest import example, point_alone

SERVING_70B = example("70b-serving")


def _outcome(index: int, status: str) -> PointOutcome:
    return PointOutcome(index=index, values=[float(index)], status=status)


def test_changed_rows_are_where_the_outcome_differs_from_the_neighbours() -> None:
    base, _ = load_base(SERVING_70B)
    axis = make_axis("budget=1M,2M,3M", base.data, base.catalog, steps=3, log=False)
    statuses = ["infeasible", "infeasible", "invalid", "infeasible", "infeasible", "infeasible"]
    outcomes = [_outcome(i, s) for i, s in enumerate(statuses)]
    # Two runs of three along the first axis: 0 starts the grid; 2 differs from 1; 3 starts the second run as
    # 0 started the first, and 4 and 5 repeat 3.
    assert changed_rows(outcomes, [axis, axis]) == {0, 2}
    # ... unless the second run starts otherwise.
    outcomes[3] = _outcome(3, "invalid")
    assert changed_rows(outcomes, [axis, axis]) == {0, 2, 3, 4}
    # One run of six (infeasible, infeasible, invalid, invalid, infeasible, infeasible): 0, and where it changes.
    assert changed_rows(outcomes, [axis.model_copy(update={"values": [1.0] * 6})]) == {0, 2, 4}


@pytest.mark.slow
def test_binding_worked_out_where_the_outcome_changes_equals_every_row() -> None:
    base, _ = load_base(SERVING_70B)
    axis = make_axis("budget=300k..2M", base.data, base.catalog, steps=6, log=False)
    every = run_sweep(base, [axis], switch_tolerance=None, binding="all")
    some = run_sweep(base, [axis], switch_tolerance=None, binding="changes")
    shown = [r for r in some.rows if r.binding is not None]
    assert some.rows[0].binding is not None and 1 < len(shown) < len(some.rows)
    assert any(r.shape is None for r in shown) and any(r.shape is not None for r in shown)
    for a, b in zip(every.rows, some.rows, strict=True):
        changed = b.index == 0 or b.switch or bool(b.change)
        assert (b.binding is not None) == changed, b.index
        assert b == (a if changed else a.model_copy(update={"binding": None, "detail": b.detail})), b.index
        if b.shape is not None:
            assert b.detail == a.detail
    assert some.notes[:-1] == every.notes
    assert f"{len(shown)} of {len(some.rows)} rows" in some.notes[-1]


def _solve_alone(task: PointTask) -> tuple[str, str | None, float | None]:
    """The point as its own requirement file and catalog, planned as ``clusterplan solve`` plans it."""
    resolved, catalog = point_alone(task)
    plan = plan_requirement(resolved, catalog, PlanOptions())
    if not plan.designs:
        return plan.status, None, None
    return plan.status, shape_of(plan.designs[0]), plan.designs[0].costs.total_usd


@pytest.mark.slow
def test_grid_rows_equal_each_point_solved_alone() -> None:
    base, _ = load_base(SERVING_70B)
    axes = [
        make_axis(v, base.data, base.catalog, steps=2, log=False) for v in ("budget=400k,2M", "gpu_price.h200=20k,45k")
    ]
    result = run_sweep(base, axes, switch_tolerance=None, jobs=2)
    tasks = build_tasks(base, axes, objective="min_cost", solver=SolverSettings())
    assert len(result.rows) == len(tasks) == 4
    designs = 0
    for row, task in zip(result.rows, tasks, strict=True):
        status, shape, total = _solve_alone(task)
        assert (row.status, row.shape, row.total_usd) == (status, shape, total), task.values
        designs += shape is not None
    assert 0 < designs < len(tasks)  # the grid holds points with and without a design


def test_progress_shows_points_done_and_time_left_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    terminal = Console(file=buf, force_terminal=True, width=100)
    monkeypatch.setattr("clusterplan.console.err_console", terminal)
    with sweep_command.progress(4, "planning") as done:
        assert done is not None
        for n in range(1, 5):
            done(n)
    text = buf.getvalue()
    assert "4/4" in text and "ETA" in text


def test_no_progress_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr("clusterplan.console.err_console", Console(file=buf, force_terminal=False))
    with sweep_command.progress(4, "planning") as done:
        assert done is None
    assert buf.getvalue() == ""


@pytest.mark.slow
def test_grid_switch_points_do_not_depend_on_jobs() -> None:
    """Each run's switch is bisected as one job of the pool with two jobs, in turn here with one: the same
    switch points, in the same order."""
    base, _ = load_base(SERVING_70B)
    axes = [
        make_axis(v, base.data, base.catalog, steps=2, log=False)
        for v in ("budget=400k,700k", "gpu_price.h200=20k,45k")
    ]
    alone = run_sweep(base, axes, switch_tolerance=0.01, jobs=1, binding="changes")
    pooled = run_sweep(base, axes, switch_tolerance=0.01, jobs=2, binding="changes")
    assert len(alone.switches) == 2 and all(sp.bisections > 0 for sp in alone.switches)
    assert pooled == alone


def _worker_pid(_: int, cache: PointCache) -> int:
    time.sleep(0.05)  # long enough that both workers take some
    return os.getpid()


def test_a_sweeps_phases_run_on_one_pool_of_workers_gone_when_it_ends() -> None:
    with one_pool(2):
        first = set(in_pool(_worker_pid, list(range(8)), jobs=2))
        assert pool_open()
        again = set(in_pool(_worker_pid, list(range(8)), jobs=2))
    assert first == again and len(first) == 2 and os.getpid() not in first
    assert not pool_open()
    for pid in first:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_grid_tasks_sharing_their_documents_equal_tasks_made_one_by_one() -> None:
    base, _ = load_base(SERVING_70B)
    axes = [
        make_axis(v, base.data, base.catalog, steps=3, log=False)
        for v in ("budget=400k..2M", "gpu_price.h200=20k..45k")
    ]
    tasks = build_tasks(base, axes, objective="min_cost", solver=SolverSettings())
    assert len(base.texts) == 3 + 3  # one document per budget, one override per price
    fresh, _ = load_base(SERVING_70B)
    for task in tasks:
        fresh.texts.clear()
        settings = list(zip((a.target for a in axes), task.values, strict=True))
        alone = point_task(fresh, task.index, settings, objective="min_cost", solver=SolverSettings())
        assert alone == task, task.values


@pytest.mark.slow
def test_what_if_designs_are_the_same_without_other_layouts() -> None:
    base, resolved = load_base(SERVING_70B)
    options = PlanOptions(top=5, explain="binding", annotate=False)
    full = plan_requirement(resolved, base.catalog, options).designs
    bare = plan_requirement(resolved, base.catalog, replace(options, variants=False)).designs
    assert any(d.also_runs_as for d in full)  # the 70B example's second design runs as other layouts too
    assert bare == [d.model_copy(update={"also_runs_as": []}) for d in full]
