"""Disaggregated pools in the scheduler simulation (physics/schedule_sim.py roles, evaluation/simulated.py): a
prefill-only replica's TTFT is its prompt's prefill plus the KV transfer and queues behind whole passes; a
decode-only replica's TPOT is the decode step at its batch, its KV blocks taken on arrival; and a disaggregated
design whose pool misses a target simulated is searched again, that pool held apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterplan.candidates.build import build_candidates
from clusterplan.catalog.load import Catalog
from clusterplan.evaluation import evaluate, pools, simulated
from clusterplan.physics import disagg
from clusterplan.physics import schedule_sim as sim
from clusterplan.physics.layout import Layout
from clusterplan.physics.step import decode_step_s
from clusterplan.plan import ServingPlan
from clusterplan.planner.families import latency
from clusterplan.render import plan_markdown
from clusterplan.requirement.load import load_requirement
from conftest import ROOT, plan_file
from test_schedule_sim import STEP, _replica  # the toy replica both files simulate

EXAMPLE_70B = ROOT / "examples" / "requirements" / "70b-serving.yaml"


def test_a_prefill_replica_at_low_load_takes_one_prefill_and_the_transfer() -> None:
    # 1,000-token prompts 10 s apart: each runs alone, one pass (20 ms of compute + 5 ms of weights), then its KV
    # crosses to the decode pool (3 ms). The request leaves the prefill pool there: no decode step on it.
    replica = _replica(role="prefill", prefill_pass_s=0.005, kv_transfer_s=0.003)
    requests = [sim.SimRequest(10.0 * i, 1000, 200) for i in range(20)]
    run = sim.simulate(replica, requests, sim.Arrival("trace"))
    assert run.ttft.mean_s == pytest.approx(1000 * 2e-5 + 0.005 + 0.003)
    assert run.ttft.p95_s == pytest.approx(run.ttft.mean_s)
    assert run.e2e.mean_s == pytest.approx(run.ttft.mean_s) and run.tpot.mean_s == 0.0
    assert run.mean_running == 0.0


def test_a_prefill_replica_packs_queued_prompts_into_one_pass() -> None:
    # Eight 200-token prompts at once fit one 2,048-token budget: one pass for all (the weights streamed once), so
    # the last one's TTFT is one step of 1,600 tokens, not eight passes.
    replica = _replica(role="prefill", prefill_pass_s=0.005)
    run = sim.simulate(replica, [sim.SimRequest(0.0, 200, 50) for _ in range(8)], sim.Arrival("trace"))
    assert max(run.ttft_s) == pytest.approx(1600 * 2e-5 + 0.005)
    assert max(run.ttft_s) < 8 * (200 * 2e-5 + 0.005)


def test_a_decode_replica_runs_the_decode_step_at_its_batch() -> None:
    # 16 clients whose KV arrives computed: all decode from the first step, nothing prefills, so every request's
    # TPOT is the step at 16 sequences and its time in the pool is output - 1 steps.
    clients, output = 16, 100
    replica = _replica(role="decode")
    run = sim.simulate(
        replica, [sim.SimRequest(0.0, 1000, output) for _ in range(64)], sim.Arrival("closed", concurrency=clients)
    )
    step = decode_step_s(STEP, clients)
    assert run.tpot.mean_s == pytest.approx(step, rel=1e-6)
    assert run.ttft.p95_s == 0.0  # the first token came from the prefill pool
    assert run.e2e.mean_s == pytest.approx((output - 1) * step, rel=1e-6)
    assert run.mean_running == pytest.approx(clients, rel=0.01)


def test_a_decode_replica_allocates_the_kv_on_arrival() -> None:
    # A pool of 2,200 tokens holds two 1,000-token prompts and their growth, not three: the third waits for a slot
    # (its TPOT then holds the wait), or runs and is preempted as the others grow.
    replica = _replica(role="decode", kv_pool_tokens=2200)
    requests = [sim.SimRequest(0.0, 1000, 200) for _ in range(3)]
    run = sim.simulate(replica, requests, sim.Arrival("trace"))
    alone = decode_step_s(STEP, 2)
    assert run.mean_running <= 2.0 + 1e-9
    assert run.tpot.p95_s > 1.5 * alone  # the last request waited for a pool slot
    assert run.requests == 3


def test_pools_below_saturation_have_a_tail_above_the_mean() -> None:
    arrival = sim.Arrival("poisson", rate_per_s=20.0)
    requests = sim.draw_requests(arrival, sim.Lengths(1000, 200), 2000, seed=1)
    pre = sim.simulate(_replica(role="prefill", prefill_pass_s=0.005, kv_transfer_s=0.003), requests, arrival)
    dec = sim.simulate(_replica(role="decode"), requests, arrival)
    assert pre.requests_per_s == pytest.approx(20.0, rel=0.1) and dec.requests_per_s == pytest.approx(20.0, rel=0.1)
    assert pre.ttft.mean_s < pre.ttft.p95_s
    assert dec.tpot.mean_s < dec.tpot.p95_s and dec.e2e.mean_s < dec.e2e.p95_s


def test_the_70b_pools_simulated_match_the_pool_model_where_it_is_exact(catalog: Catalog) -> None:
    # The 70B example's MI300X TP2 replica as a prefill pool's: nearly idle, its TTFT is the pool model's unloaded
    # TTFT (the prompt's prefill and the KV transfer, physics/disagg.py); as a decode pool's under 16 clients, its
    # TPOT is the analytical decode step at 16 sequences.
    resolved = load_requirement(EXAMPLE_70B, catalog)
    sw = resolved.requirement.workloads[0]
    assert sw.kind == "serving"
    a = evaluate.serving_assumptions(resolved.requirement.assumptions, sw)
    spec = catalog.gpus["mi300x"]
    arch = resolved.model_for(0)
    layout = Layout(tp=2, pp=1, quant="fp8", kv_precision="fp8")
    est = evaluate.serving_estimate(arch, spec, sw, layout, batch=64, assumptions=resolved.requirement.assumptions)
    rates = pools.prefill_rates(est, arch, spec, sw, resolved.requirement.assumptions)
    arrival = sim.Arrival("poisson", rate_per_s=0.05)
    requests = sim.draw_requests(arrival, sim.Lengths(1000, 200), 200, seed=0)
    pre = sim.simulate(simulated.sim_replica(est, sw, a, 64, "prefill", rates.kv_transfer_s), requests, arrival)
    assert pre.ttft.mean_s == pytest.approx(rates.ttft_s, rel=0.05)
    assert rates.kv_transfer_s > 0 and pre.ttft.p50_s > est.prefill_alone_busy_s + rates.kv_transfer_s
    closed = sim.Arrival("closed", concurrency=16)
    dec = sim.simulate(simulated.sim_replica(est, sw, a, 64, "decode"), requests, closed)
    assert est.step_model is not None
    assert dec.tpot.mean_s == pytest.approx(decode_step_s(est.step_model, 16), rel=0.01)
    assert disagg.prefill_pass_s(est, input_tokens=1000, assumptions=a) > 0


def _short_prompts_70b(tmp_path: Path) -> Path:
    """The 70B example with 128-token prompts, a 50 ms p95 TTFT, pools required, on H200 only: a prefill pass of
    the whole model is most of such a prompt's prefill, so a prompt arriving mid-pass waits for it, which the pool
    model's M/G/1 queue (service: the prompt's share of a packed pass) does not see."""
    text = (
        EXAMPLE_70B.read_text()
        .replace("input_tokens: 1000", "input_tokens: 128")
        .replace("p95_ttft: 1s", "p95_ttft: 50ms")
        .replace("    peak_to_average: 1.2", "    disaggregation: required\n    peak_to_average: 1.2")
        .replace("deployment: either", "deployment: either\nconstraints:\n  allowed_gpus: [h200]")
    )
    path = tmp_path / "70b-short-prompts.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_a_disaggregated_first_choice_that_misses_simulated_is_searched_again(catalog: Catalog, tmp_path: Path) -> None:
    # The analytical first choice, one H200 TP2 prefill replica and one decode replica, misses the 50 ms TTFT
    # simulated at its 20 req/s; the prefill row is held to the load it meets it at, and the search adds prefill
    # replicas, leaving the decode pool sized by its own rate (each pool held apart).
    path = _short_prompts_70b(tmp_path)
    plan = plan_file(path, catalog, top=1, explain=False)
    assert plan.simulation_rejected, "the analytical first choice's prefill pool misses 50 ms simulated"
    rejected = plan.simulation_rejected[0]
    m = rejected.misses[0]
    assert m.figure == "p95_ttft" and "prefill pool" in m.group and m.target_s < m.simulated_s
    assert m.held_rps is not None and 0 < m.held_rps < m.load_rps
    assert plan.designs[0].costs.total_usd > rejected.total_usd
    resolved = load_requirement(path, catalog)
    d = plan.designs[0]
    assert not d.simulation_misses and not simulated.design_misses(d, resolved, catalog), d.summary
    wp = d.workloads[0]
    assert isinstance(wp, ServingPlan) and {g.role for g in wp.groups} == {"prefill", "decode"}
    prefill = [g for g in wp.groups if g.role == "prefill"]
    decode = [g for g in wp.groups if g.role == "decode"]
    for g in prefill:  # a replica of the held shape takes at most the held load (demand split over its pool)
        if g.tp == 2:
            assert wp.demand_rps * g.rate_rps / sum(x.rate_rps * x.replicas for x in prefill) <= m.held_rps
    # the decode pool is not enlarged by the prefill pool's held load: one replica fewer would not serve the demand
    assert sum(g.rate_rps * g.replicas for g in decode) - max(g.rate_rps for g in decode) < wp.demand_rps
    assert "prefill pool's share of the targets" in plan_markdown.render(plan)
    # the latency family holds the prefill pool's row, not the aggregated or decode row of that shape
    table = build_candidates(resolved, catalog)
    held = [simulated.HeldLoad(wp.workload, g, m.held_rps) for g in prefill if g.tp == 2]
    capped = latency.with_held(table, held)
    rows = [r for r in capped.workloads[0].serving_rows() if r.held_rps is not None]
    assert rows and {r.role for r in rows} == {"prefill"}
