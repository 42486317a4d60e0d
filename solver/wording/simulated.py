"""How a target missed in simulation reads (``plan.SimulatedMiss``, ``plan.SimulatedRejection``): words and figures
only."""

from __future__ import annotations

from clusterplan.plan import SimulatedMiss, SimulatedRejection
from clusterplan.wording.fmt import rps, seconds, usd
from clusterplan.wording.odds import FIGURE_LABEL

HEADING = (
    "Simulated at peak load (each replica's scheduler stepped under Poisson arrivals, vllm bench serve's "
    "definitions), these targets are missed:"
)
REJECTED_HEADING = (
    "Rejected by simulation (the analytical latency model chose these first; each replica's scheduler, stepped "
    "under Poisson arrivals at peak load, misses a target, so that replica shape was allowed only the load the "
    "simulation holds the targets at, and the plan was searched again):"
)


def sentence(m: SimulatedMiss) -> str:
    """``chat: p95 latency 5.49 s simulated on h200 TP2 fp8 at 5.00 req/s a replica (planned 4.99 s), target 5 s``,
    and the load the simulation holds every target at where it was searched."""
    text = (
        f"{m.workload}: {FIGURE_LABEL[m.figure]} {seconds(m.simulated_s)} simulated on {m.group} at "
        f"{rps(m.load_rps)} req/s a replica ({m.requests:,} requests; planned {seconds(m.planned_s)}), "
        f"target {seconds(m.target_s)}"
    )
    if m.group.endswith("prefill pool"):
        text += " (the prefill pool's share of the targets)"
    if m.held_rps is None:
        return text
    if m.held_rps <= 0:
        return text + "; the simulation meets the targets at no load tried"
    return text + f"; the simulation meets every target up to {rps(m.held_rps)} req/s a replica"


def rejection(r: SimulatedRejection) -> list[str]:
    """``search 1: 8x MI300X (owned), $493,444 — chat: p95 latency 5.65 s simulated ...``: the design, then each
    target it missed."""
    return [f"search {r.round}: {r.summary}, {usd(r.total_usd)}", *(f"  {sentence(m)}" for m in r.misses)]


def unverified_relaxation(code: str, change: str, time_limit_s: float) -> str:
    """A p95-target relaxation (``change``, e.g. ``chat: p95_latency >= 1.4s``) that the analytical latency model
    admits and planning at it did not confirm, by its code (``plan.Relaxation.unverified``)."""
    head = f"{change} admits a design in the analytical latency model"
    if code == "simulation_rejects":
        return (
            f"{head}, but the scheduler simulation rejects the design solve plans there and at every looser target "
            "tried (up to an hour or more each)"
        )
    return (
        f"{head}, but whether solve there returns a design the scheduler simulation does not reject (or at which "
        f"looser targets it does) was not found within the time limit (--time-limit {time_limit_s:g} s for the whole "
        "command); raise --time-limit"
    )
