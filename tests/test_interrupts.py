"""Ctrl-C and SIGTERM end a command cleanly (docs/guarantees.md, section 10): exit 130 or 143 with one line, no
pool worker outliving the command, no partial report and no image folder without its review.

``report`` is run as the ``clusterplan`` process itself, and signalled at several points: while it starts, while
it plans, and while its what-if pool runs. The points are reached by polling what the process has done (its
children), never by asserting how long anything took.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import example, process_running

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self").exists(), reason="reads /proc")]
CLI = Path(sys.executable).parent / "clusterplan"
POLL_S = 0.02
MAX_POLLS = 6000  # two minutes of polling at most, whatever the machine's load


def children(pid: int) -> set[int]:
    """The processes ``pid`` started, from /proc (every thread's list)."""
    found: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found |= {int(c) for c in f.read().split()}
    except OSError:
        pass
    return found


def start(out: Path) -> subprocess.Popen[str]:
    command = [str(CLI)] if CLI.exists() else [sys.executable, "-c", _AS_CLUSTERPLAN]
    # --jobs 3: two what-if workers beside the planning process (the sweep starts with the plan, on jobs - 1)
    args = ["report", str(example("7b-chat-serving")), "-o", str(out / "r.md"), "--jobs", "3", "--time-limit", "2"]
    env = {**os.environ, "CLUSTERPLAN_NO_CACHE": "1"}
    return subprocess.Popen(
        [*command, *args], cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


_AS_CLUSTERPLAN = "import sys; sys.argv[0] = 'clusterplan'; from clusterplan.cli import entry; entry()"


# Each point by a library the process has mapped by then: pydantic's core while the command's modules load (the
# requirement and catalog schemas), OR-Tools' once it plans; then the what-if pool's workers.
LOADED = {"starting": "pydantic_core", "planning": "ortools"}


def wait_for(proc: subprocess.Popen[str], point: str, seen: set[int]) -> bool:
    """Poll until ``point`` is reached; False if the command ended first."""
    for _ in range(MAX_POLLS):
        if proc.poll() is not None:
            return False
        seen |= children(proc.pid)
        if point == "workers" and len(children(proc.pid)) >= 2:
            return True
        if point in LOADED and LOADED[point] in _maps(proc.pid):
            return True
        time.sleep(POLL_S)
    raise AssertionError(f"{point} was not reached")


def _maps(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return f.read()
    except OSError:
        return ""


@pytest.mark.parametrize("point", ["starting", "planning", "workers"])
@pytest.mark.parametrize(
    ("sig", "code", "line"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_an_interrupted_report_ends_cleanly(tmp_path: Path, point: str, sig: int, code: int, line: str) -> None:
    proc = start(tmp_path)
    seen: set[int] = set()
    reached = wait_for(proc, point, seen)
    if reached:
        seen |= children(proc.pid)
        proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=300)  # a worker holding stderr open would hang here
    if not reached:  # finished before the point: nothing was interrupted (a fast machine)
        assert proc.returncode == 0, stderr
        pytest.skip(f"the report finished before {point}")
    assert proc.returncode == code, stderr
    assert stderr.strip().splitlines()[-1] == line, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a partial report was left"
    for _ in range(MAX_POLLS):
        if not any(process_running(pid) for pid in seen):
            break
        time.sleep(POLL_S)
    assert not any(process_running(pid) for pid in seen), f"workers outlived the command: {sorted(seen)}"


# solve with the candidate worker forked whatever the machine's load (a test run beside leaves no CPU free, and then
# nothing forks): the eight-workload fleet's workloads are built beside one worker for about a second.
_SOLVE_FORKING = (
    "import sys; sys.argv[0] = 'clusterplan'; from clusterplan import forks; forks.idle_cpu = lambda cpus: True; "
    "from clusterplan.cli import entry; entry()"
)


@pytest.mark.parametrize(
    ("sig", "code", "line"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_solve_interrupted_while_its_candidate_worker_runs_ends_cleanly(
    tmp_path: Path, sig: int, code: int, line: str
) -> None:
    fleet = Path(__file__).resolve().parents[1] / "bench" / "data" / "fleet-8.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SOLVE_FORKING, "solve", str(fleet)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: set[int] = set()
    for _ in range(MAX_POLLS):
        if proc.poll() is not None or children(proc.pid):
            break
        time.sleep(POLL_S)
    seen |= children(proc.pid)
    if not seen:  # ended, or built its candidates without a worker: nothing to interrupt there
        proc.kill()
        proc.communicate(timeout=300)
        pytest.skip("no candidate worker was seen")
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=300)  # a worker holding stderr open would hang here
    assert proc.returncode == code, stderr
    assert stderr.strip().splitlines()[-1] == line, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    # The command stops and reaps its worker before it exits (the worker would otherwise build on for a second).
    assert not any(process_running(pid) for pid in seen), f"the candidate worker outlived the command: {sorted(seen)}"
