"""Work shared with forked worker processes: when this process may fork, and the pools' start, stop and signals.

A candidate table's workloads are independent of one another (each its own rows and physics), and their Python
physics holds the interpreter lock: threads cannot run two at once, processes can. :func:`shared_work` runs a list
of jobs on this process and one forked worker side by side, each taking the next job as it frees. The what-if
points' process pools (:mod:`clusterplan.whatif.points`) start, hold signals and stop through the same helpers.

Forking is safe and cheap only where nothing else runs: Linux, before any thread starts (a thread holding a lock
as the process forks leaves the lock held in the child for good), and not inside a worker that a pool itself
forked (the pool already gives every core work). :func:`may_fork` says so.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

J = TypeVar("J")
R = TypeVar("R")

# Signals held back while a pool forks its workers (signals_held).
HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def pool_context() -> Any:
    """Fork where it is safe and cheap (Linux: the pool forks every worker before any thread starts);
    spawn elsewhere."""
    import multiprocessing

    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity where the system says (else the machine's count), and no more
    than its control group's CPU quota allows in whole CPUs (a container limited to one CPU on a large machine sees
    every CPU in its affinity; a worker there would only take turns with this process under the quota)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota()
    return cpus if quota is None else max(1, min(cpus, int(quota)))


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup"), cgroups: Path = Path("/proc/self/cgroup")) -> float | None:
    """CPUs per period this process's control group may use (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``); None where there is no quota or it cannot be read."""
    try:
        lines = cgroups.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, controllers, path = [*line.split(":", 2), "", ""][:3]
        try:
            if hierarchy == "0" and controllers == "":  # v2: one hierarchy
                quota, period = (root / path.lstrip("/") / "cpu.max").read_text(encoding="ascii").split()[:2]
                if quota != "max":
                    return int(quota) / int(period)
            elif "cpu" in controllers.split(","):  # v1: the cpu controller's own hierarchy
                folder = root / controllers / path.lstrip("/")
                quota_us = int((folder / "cpu.cfs_quota_us").read_text(encoding="ascii"))
                if quota_us > 0:
                    return quota_us / int((folder / "cpu.cfs_period_us").read_text(encoding="ascii"))
        except (OSError, ValueError):
            continue
    return None


def idle_cpu(cpus: int) -> bool:
    """Whether a CPU is free for a worker now: fewer tasks runnable this instant (``/proc/loadavg``'s count, this
    process included) than ``cpus``, the CPUs this process may use. On a busy machine a worker only takes turns with this process
    and costs the fork: the 70B example's candidates took 0.23 s in turn and 0.27 s shared with a test run beside,
    0.195 s shared on a quiet machine. Where the count cannot be read: True."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            runnable = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return runnable < cpus


# Whether a shared_work call is running in this process: work inside one (a workload's GPU types, inside the
# workloads shared out) stays in its process, which already has a worker beside it.
_sharing = False


def may_fork() -> bool:
    """Whether work may be handed to a forked process now: Linux, a second CPU to run it on and free
    (:func:`idle_cpu`), no other thread alive in this process, this process not itself a pool's worker, and no work
    shared out already."""
    import multiprocessing

    if _sharing or not sys.platform.startswith("linux") or threading.active_count() > 1:
        return False
    if multiprocessing.parent_process() is not None:
        return False
    cpus = usable_cpus()  # read once: affinity and the control group's files
    return cpus >= 2 and idle_cpu(cpus)


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back while a pool forks its workers, delivered when the block ends: one arriving
    during a fork landed in logging's after-fork hook, where it was printed and ignored, and the report then
    finished with exit 0."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def worker_signals() -> None:
    """A forked worker's signals: Ctrl-C is the parent's to handle (a terminal sends it to the whole process
    group), SIGTERM ends the worker at once (the parent sends it when the command stops early)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):  # forked while the parent held them back (signals_held)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)


def stop_pool(pool: Any) -> None:
    """Stop a process pool now: queued tasks cancelled, every worker terminated and reaped, so none outlives an
    interrupted command (shutting down with ``wait`` let running points finish first, and Ctrl-C once left two
    workers sleeping for good, holding the caller's stderr open)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # the executor's own table of its workers
    manager = getattr(pool, "_executor_manager_thread", None)  # the thread that feeds them (shutdown forgets it)
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        with contextlib.suppress(Exception):
            worker.terminate()
    for worker in workers:
        with contextlib.suppress(Exception):
            worker.join(timeout=10)
    if manager is not None:  # it sees its workers gone and closes its pipe; at exit Python then has nothing to wake
        manager.join(timeout=10)


def _worker_loop(run: Callable[[Any], Any], jobs: Sequence[Any], ends: Any, lock: Any, pipe: tuple[Any, Any]) -> None:
    """The forked worker of :func:`shared_work`: take jobs from the front until the two ends meet, then send back
    each job's result (or None where it failed: the caller runs it again) in one message."""
    worker_signals()
    theirs, out = pipe
    # The caller's end, inherited: closed, so that a caller gone (killed) leaves no reader, and the send below fails
    # and ends this worker instead of waiting for good on a full pipe.
    theirs.close()
    done: dict[int, bytes | None] = {}
    while True:
        with lock:
            i = ends[0]
            if i > ends[1]:
                break
            ends[0] = i + 1
        try:
            # Pickled now, while the caller still works: sending one message of bytes at the end is then quick (the
            # eight-workload fleet's results, their physics memos included, took ~0.1 s to pickle after the last job).
            done[i] = pickle.dumps(run(jobs[i]), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # its error is raised again in the caller, where the job runs in turn
            done[i] = None
    with contextlib.suppress(OSError):  # the caller is gone: nothing to send to, and nothing to say
        out.send(done)
    out.close()


def shared_work(jobs: Sequence[J], run: Callable[[J], R]) -> list[R]:
    """``[run(job) for job in jobs]``, shared with one forked worker where :func:`may_fork` allows (else in turn).

    The worker takes jobs from the front of the list, this process from the back, each the next one as it frees,
    until they meet (two shared indices under a lock): heavy jobs first keeps the two busy to the end. The worker
    keeps its results until it has no job left (a pipe's buffer would stall it while this process works), then
    sends them in one message. ``run`` must be a pure function of its job whose result pickles. A job that failed
    in the worker, or that it could not send (it died), runs again here, so an error is raised as it would be in
    turn."""
    global _sharing
    if len(jobs) < 2 or not may_fork():
        return [run(job) for job in jobs]
    ctx = pool_context()
    lock = ctx.Lock()
    ends = ctx.RawArray("q", [0, len(jobs) - 1])  # the worker's next job, this process's next job
    reader, writer = ctx.Pipe(duplex=False)
    for stream in (sys.stdout, sys.stderr):  # what this process has buffered is written once, not by the worker too
        stream.flush()
    worker = ctx.Process(target=_worker_loop, args=(run, jobs, ends, lock, (reader, writer)), daemon=True)
    results: dict[int, R] = {}
    _sharing = True
    try:
        with signals_held():
            worker.start()
        writer.close()
        while True:
            with lock:
                i = ends[1]
                if i < ends[0]:
                    break
                ends[1] = i - 1
            results[i] = run(jobs[i])
        try:
            sent: dict[int, bytes | None] = reader.recv()
        except (EOFError, OSError):  # the worker died: what it took runs here
            sent = {}
        worker.join()
        for i in range(len(jobs)):
            if i not in results:
                got = sent.get(i)
                results[i] = pickle.loads(got) if got is not None else run(jobs[i])  # bytes its own worker wrote
    except BaseException:
        with contextlib.suppress(Exception):
            worker.terminate()
            worker.join(timeout=10)
        raise
    finally:
        _sharing = False
        reader.close()
    return [results[i] for i in range(len(jobs))]
