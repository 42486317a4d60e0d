"""Work shared with a forked worker (clusterplan.forks.shared_work): the results of running the jobs in turn, in
order, whichever process ran each; a job that fails in the worker or that the worker never sent back runs again in
the caller. Each case runs in a fresh interpreter (a pytest worker may have started threads, and then nothing forks).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from clusterplan.catalog.load import Catalog
from conftest import example, process_running

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks only on Linux")


# Every case's script starts with this: a busy machine (a test run beside) leaves no CPU free, and then nothing forks,
# so these cases pretend one is; ``mark(name)`` and ``wait_for(name)`` let one process wait for the other (20 s at most).
_PRELUDE = """
import os, pathlib, tempfile, time
from clusterplan import forks
forks.idle_cpu = lambda cpus: True
parent = os.getpid()
marks = pathlib.Path(tempfile.mkdtemp())
def mark(name):
    (marks / name).write_text("x")
def wait_for(name):
    t = time.monotonic()
    while not (marks / name).exists() and time.monotonic() - t < 20:
        time.sleep(0.01)
"""


def _run(body: str) -> str:
    script = _PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_jobs_are_shared_with_a_worker_and_come_back_in_order() -> None:
    # The first job (the worker's) and the last (the caller's) each wait until the other has started, so both
    # processes run some: the results carry the pid that ran each.
    out = _run(
        """
        def run(job):
            if job == 0:
                mark("first")
                wait_for("last")
            if job == 5:
                mark("last")
                wait_for("first")
            return (job * job, os.getpid())
        assert forks.may_fork()
        got = forks.shared_work(list(range(6)), run)
        assert [r for r, _ in got] == [j * j for j in range(6)], got
        print(len({pid for _, pid in got}), got[-1][1] == os.getpid(), got[0][1] != os.getpid())
        """
    )
    assert out == "2 True True"


def test_a_job_that_fails_in_the_worker_raises_in_the_caller() -> None:
    out = _run(
        """
        def run(job):
            if job == 0 and os.getpid() != parent:
                mark("worker-failed")
                raise ValueError("only in the worker")
            if job == 4:  # the caller's first job waits until the worker has failed its first
                wait_for("worker-failed")
            if job == 1:
                raise KeyError("bad job")
            return job
        print(forks.shared_work([0, 2, 3, 4], run))
        try:
            forks.shared_work([0, 1, 2, 3], run)  # job 1 fails wherever it runs
        except KeyError as e:
            print("raised", e)
        """
    )
    assert out == "[0, 2, 3, 4]\nraised 'bad job'"


def test_jobs_of_a_worker_that_died_run_in_the_caller() -> None:
    out = _run(
        """
        def run(job):
            if os.getpid() != parent:
                mark("worker-died")
                os._exit(9)  # the worker dies without sending anything back
            if job == 4:  # the caller's first job waits until the worker has taken one
                wait_for("worker-died")
            return job + 1
        print(forks.shared_work([1, 2, 3, 4], run))
        """
    )
    assert out == "[2, 3, 4, 5]"


def test_work_shared_out_shares_nothing_further() -> None:
    # Inside a job (a workload shared out), its own parts (the workload's GPU types) stay in its process: a second
    # worker would only contend for the same two cores.
    out = _run(
        """
        print(forks.may_fork(), forks.shared_work([1, 2, 3, 4], lambda j: forks.may_fork()), forks.may_fork())
        """
    )
    assert out == "True [False, False, False, False] True"


def test_nothing_forks_beside_another_thread() -> None:
    out = _run(
        """
        import threading
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        try:
            print(forks.may_fork(), {pid for pid in forks.shared_work([1, 2, 3], lambda j: os.getpid())} == {os.getpid()})
        finally:
            stop.set()
        """
    )
    assert out == "False True"


@pytest.mark.slow
def test_a_table_built_beside_a_worker_equals_one_built_in_turn() -> None:
    # A fine-tune (first: the worker takes it) and two serving workloads of one model whose prompts differ (two
    # physics memos, two jobs): the table, the cache's rows and its counts are the ones a build in turn leaves, and
    # the serving physics made in the worker comes back into the cache (a trade's probes and a sweep's points read
    # it): no memo is left empty.
    out = _run(
        """
        import pathlib, tempfile
        from clusterplan.candidates.build import CandidateCache, build_candidates
        from clusterplan.catalog.load import load_catalog
        from clusterplan.requirement.load import load_requirement
        text = '''
        name: shared build
        model: llama-3.1-8b
        workloads:
          - {kind: finetune, name: tune, model: mistral-7b, method: qlora, lora_rank: 16, tokens: 200M,
             deadline: 2d, sequence_length: 2k, global_batch_tokens: 64k}
          - {kind: serving, name: a, tokens_per_sec: 4k, input_tokens: 800, output_tokens: 250, p95_latency: 4s}
          - {kind: serving, name: b, tokens_per_sec: 2k, input_tokens: 1600, output_tokens: 250, p95_latency: 4s}
        deployment: cloud
        '''
        path = pathlib.Path(tempfile.mkdtemp()) / "req.yaml"
        path.write_text(text)
        catalog = load_catalog()
        resolved = load_requirement(path, catalog)
        built = {}
        for fork in (False, True):
            forks.may_fork = lambda fork=fork: fork
            cache = CandidateCache()
            first = build_candidates(resolved, catalog, cache=cache)
            memos = sorted(len(cache.physics_for(k).estimates) > 0 for k in [*cache.physics, *cache.shipped])
            again = build_candidates(resolved, catalog, cache=cache)
            built[fork] = (first, again, sorted(map(repr, cache.rows)), cache.hits, cache.misses)
        print(built[True] == built[False], built[True][0] == built[True][1], built[True][3:], memos)
        """
    )
    assert out == "True True (3, 3) [True, True]"


def test_a_memo_a_worker_sent_stays_pickled_until_a_build_reads_it(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A build whose rows are all in the cache reads no physics memo: one a worker sent back is not unpickled for it
    # (10-30 ms each); the next build that makes rows, at other targets, reads it.
    from clusterplan import forks
    from clusterplan.candidates.build import CandidateCache, build_candidates
    from clusterplan.requirement.load import load_requirement
    from clusterplan.requirement.schema import ServingWorkload

    monkeypatch.setattr(forks, "may_fork", lambda: False)
    resolved = load_requirement(example("70b-serving"), catalog)
    cache = CandidateCache()
    first = build_candidates(resolved, catalog, cache=cache)
    ((key, memo),) = cache.physics.items()
    cache.shipped[key] = pickle.dumps(cache.physics.pop(key))  # as a worker's job leaves it
    assert build_candidates(resolved, catalog, cache=cache) == first
    assert key in cache.shipped
    req = resolved.requirement
    w = req.workloads[0]
    assert isinstance(w, ServingWorkload) and w.p95_latency is not None
    looser = req.model_copy(update={"workloads": [w.model_copy(update={"p95_latency": w.p95_latency * 2})]})
    build_candidates(replace(resolved, requirement=looser), catalog, cache=cache)
    assert key not in cache.shipped and cache.physics[key].estimates.keys() == memo.estimates.keys()


@pytest.mark.slow
def test_one_workloads_gpu_types_worked_out_beside_a_worker_equal_those_in_turn() -> None:
    # One serving workload: its GPU types' layouts are shared out. The table is the one made in turn, and the memo
    # holds every GPU type's batches and estimates (the worker's come back), so a retargeted build finds them.
    out = _run(
        """
        from pathlib import Path
        from clusterplan.candidates.build import CandidateCache, build_candidates
        from clusterplan.catalog.load import load_catalog
        from clusterplan.requirement.load import load_requirement
        catalog = load_catalog()
        resolved = load_requirement(Path("examples/requirements/7b-chat-serving.yaml"), catalog)
        built = {}
        for fork in (False, True):
            forks.may_fork = lambda fork=fork: fork
            cache = CandidateCache()
            table = build_candidates(resolved, catalog, cache=cache)
            (memo,) = cache.physics.values()
            built[fork] = (table, sorted(map(repr, memo.estimates)), sorted(map(repr, memo.batches)))
        print(built[True] == built[False], len(built[True][1]) > 0)
        """
    )
    assert out == "True True"


def test_nothing_forks_without_a_free_cpu() -> None:
    out = _run(
        """
        forks.idle_cpu = lambda cpus: False
        print(forks.may_fork(), {pid for pid in forks.shared_work([1, 2, 3], lambda j: os.getpid())} == {os.getpid()})
        """
    )
    assert out == "False True"


def test_a_worker_whose_caller_was_killed_ends() -> None:
    # The caller dies (SIGKILL: nothing of it runs) while the worker builds a result larger than a pipe holds: the
    # worker, finding no reader, ends instead of waiting for good on a full pipe.
    script = _PRELUDE + textwrap.dedent(
        """
        print(marks, flush=True)
        def run(job):
            if os.getpid() != parent:
                mark(f"worker-{os.getpid()}")
                time.sleep(0.5)
                return b"x" * 4_000_000
            time.sleep(3600)  # the caller's job: killed in it
        forks.shared_work([1, 2], run)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    marks = Path(proc.stdout.readline().strip())
    worker = 0
    for _ in range(3000):  # the worker's mark, polled for a minute at most
        found = list(marks.glob("worker-*"))
        if found:
            worker = int(found[0].name.split("-")[1])
            break
        time.sleep(0.02)
    proc.kill()
    proc.wait(timeout=60)
    assert worker, "the worker never started"
    for _ in range(3000):
        if not process_running(worker):
            break
        time.sleep(0.02)
    assert not process_running(worker), "the worker waits for good on a dead caller"


@pytest.mark.parametrize(
    ("cgroup", "files", "cpus"),
    [
        ("0::/pod\n", {"pod/cpu.max": "150000 100000\n"}, 1.5),  # v2, a limit of one and a half CPUs
        ("0::/pod\n", {"pod/cpu.max": "max 100000\n"}, None),  # v2, no limit
        (
            "3:cpu,cpuacct:/ct\n",
            {"cpu,cpuacct/ct/cpu.cfs_quota_us": "200000\n", "cpu,cpuacct/ct/cpu.cfs_period_us": "100000\n"},
            2.0,
        ),
        ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no limit
        ("0::/gone\n", {}, None),  # nothing readable
    ],
)
def test_a_control_groups_cpu_quota_is_read(
    tmp_path: Path, cgroup: str, files: dict[str, str], cpus: float | None
) -> None:
    # A container limited to fewer CPUs than its affinity shows (a Kubernetes pod's CPU limit) has no CPU free for a
    # worker: usable_cpus takes the quota's whole CPUs.
    from clusterplan import forks

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "self-cgroup").write_text(cgroup)
    assert forks.cgroup_cpu_quota(tmp_path, tmp_path / "self-cgroup") == cpus


def test_a_sweeps_default_jobs_keep_to_the_cpus_it_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pod limited to two CPUs on a 64-core node: the machine's count would start 64 point workers, each taking
    # turns under the quota; the default is the quota's whole CPUs, and without a quota the affinity's count.
    import os

    from clusterplan import forks
    from clusterplan.whatif import points

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(forks, "cgroup_cpu_quota", lambda: 2.0)
    assert points.default_jobs() == 2
    monkeypatch.setattr(forks, "cgroup_cpu_quota", lambda: None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)  # taskset -c 0-2
    assert points.default_jobs() == 3


def test_a_quota_under_two_cpus_leaves_no_cpu_for_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterplan import forks

    monkeypatch.setattr(forks, "cgroup_cpu_quota", lambda: 1.5)
    assert forks.usable_cpus() == 1
    assert not forks.may_fork()
