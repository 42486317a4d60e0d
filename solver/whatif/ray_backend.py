"""Plan the points of a sweep or frontier on a Ray cluster (``--backend ray``): an optional extra,
``pip install 'clusterplan[ray]'``.

Each point is one Ray task running :func:`clusterplan.whatif.points.run_task`, exactly what a
``--jobs`` worker process runs, so the outcomes are the same (one search worker, a fixed seed, a
limit in deterministic time) and come back in point order. Without ``--ray-address`` a local Ray
instance is started for the command and stopped after it; with one (``auto``, ``ray://HOST:10001``)
the command connects to that cluster, whose nodes must have clusterplan installed, and reach any
``--catalog`` file and ``hf_config`` path at the same path (the tasks carry paths, not files). A Ray
already initialised in this process (a notebook, a test) is used as it is and left running.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from clusterplan.errors import BackendError
from clusterplan.whatif.points import PointOutcome, PointTask, run_task, use_runner

BACKENDS = ("local", "ray")
INSTALL_HINT = "pip install 'clusterplan[ray]'"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BackendError(
            "--backend ray needs Ray, which is not installed", fix=INSTALL_HINT, hint="or plan with --jobs N"
        ) from None
    return ray


def ray_runner(ray: Any) -> Callable[[Sequence[PointTask], Callable[[int], None] | None], list[PointOutcome]]:
    """A :data:`~clusterplan.whatif.points.Runner` that plans each task as one Ray task (one CPU each)."""
    remote = ray.remote(num_cpus=1)(run_task)

    def run(tasks: Sequence[PointTask], on_done: Callable[[int], None] | None) -> list[PointOutcome]:
        pending = [remote.remote(t) for t in tasks]
        results: dict[int, PointOutcome] = {}
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                out: PointOutcome = ray.get(ref)
                results[out.index] = out
                if on_done is not None:
                    on_done(len(results))
        return [results[t.index] for t in tasks]

    return run


@contextlib.contextmanager
def points_backend(backend: str, address: str | None = None) -> Iterator[None]:
    """Within the block, sweep and frontier points run on ``backend``: ``local`` (``--jobs`` processes,
    nothing changes) or ``ray`` (the cluster at ``address``; None: a local Ray instance)."""
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}", fix="use --backend local or --backend ray")
    if backend == "local":
        if address is not None:
            raise BackendError("--ray-address is for --backend ray", fix="add --backend ray, or drop --ray-address")
        yield
        return
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = address or "a local Ray instance"
            raise BackendError(
                f"cannot start or reach {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                fix="check --ray-address (for example auto, or ray://HOST:10001), or plan with --jobs N",
            ) from None
    try:
        with use_runner(ray_runner(ray)):
            yield
    finally:
        if started:
            ray.shutdown()


__all__ = ["BACKENDS", "points_backend", "ray_runner"]
