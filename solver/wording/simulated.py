"""How a target missed in simulation reads (``plan.SimulatedMiss``): words and figures only."""

from __future__ import annotations

from clusterplan.plan import SimulatedMiss
from clusterplan.wording.fmt import rps, seconds
from clusterplan.wording.odds import FIGURE_LABEL

HEADING = (
    "Simulated at peak load (each replica's scheduler stepped under Poisson arrivals, vllm bench serve's "
    "definitions), these targets are missed:"
)


def sentence(m: SimulatedMiss) -> str:
    """``chat: p95 latency 5.49 s simulated on h200 TP2 fp8 at 5.00 req/s a replica (planned 4.99 s), target 5 s``."""
    return (
        f"{m.workload}: {FIGURE_LABEL[m.figure]} {seconds(m.simulated_s)} simulated on {m.group} at "
        f"{rps(m.load_rps)} req/s a replica ({m.requests:,} requests; planned {seconds(m.planned_s)}), "
        f"target {seconds(m.target_s)}"
    )
