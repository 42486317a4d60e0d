"""The scheduler simulation (physics/schedule_sim.py) and ``estimate --arrival``: queued prefills in TTFT, spread
below saturation, trace replay, determinism, and the saturated rate the analytical model gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clusterplan import pipeline
from clusterplan.catalog.load import Catalog
from clusterplan.cli import app
from clusterplan.evaluation import simulated
from clusterplan.physics import queueing
from clusterplan.physics import schedule_sim as sim
from clusterplan.physics.step import decode_step_s
from clusterplan.physics.types import DecodeStepModel
from clusterplan.plan import ServingPlan
from clusterplan.render import plan_markdown
from clusterplan.requirement.load import load_requirement
from conftest import ROOT, plan_file

runner = CliRunner()
EXAMPLE_70B = ROOT / "examples" / "requirements" / "70b-serving.yaml"
PINNED_70B = [str(EXAMPLE_70B), "--gpu", "h100-sxm", "--count", "8", "--tp", "8", "--quant", "fp8"]

# A toy replica: a 20 ms decode step plus 0.1 ms a sequence; 20 us a prompt token alone, 10 us riding a step.
STEP = DecodeStepModel(pp=1, dense_weights_s=0.02, expert_weights_s=0.0, kv_per_seq_s=1e-4, compute_per_seq_s=0.0)


def _replica(**update: object) -> sim.SimReplica:
    values: dict = dict(
        step_model=STEP, prefill_token_busy_s=1e-5, prefill_token_alone_s=2e-5, chunk_tokens=2048, max_seqs=256,
        kv_pool_tokens=10_000_000, kv_block_tokens=16,
    )  # fmt: skip
    values.update(update)
    return sim.SimReplica(**values)


def test_closed_loop_ttft_includes_the_clients_queued_prefills() -> None:
    # 8 clients, identical 1,000-token prompts, a budget of one prompt (plus the running decodes) a step: client k
    # waits for the k - 1 prompts before its own, each prefill step riding the decodes already running.
    clients, prompt = 8, 1000
    replica = _replica(chunk_tokens=prompt + clients)
    requests = [sim.SimRequest(0.0, prompt, 500) for _ in range(clients)]
    run = sim.simulate(replica, requests, sim.Arrival("closed", concurrency=clients))
    expected, t = [], 0.0
    for k in range(clients):  # step k: k sequences decode beside the k-th prompt
        t += replica.step_s(k, prompt)
        expected.append(t)
    for got, want in zip(run.ttft_s, expected, strict=True):
        assert got == pytest.approx(want, rel=0.03)
    lone = replica.step_s(0, prompt)
    assert run.ttft_s[-1] > 7 * lone  # the last client waits for seven prefills before its own


def test_poisson_below_saturation_has_a_tail_above_the_mean() -> None:
    replica = _replica()
    arrival = sim.Arrival("poisson", rate_per_s=20.0)
    requests = sim.draw_requests(arrival, sim.Lengths(1000, 200, 0.5), 2000, seed=1)
    run = sim.simulate(replica, requests, arrival)
    assert run.requests_per_s == pytest.approx(20.0, rel=0.1)  # below saturation: it serves what arrives
    for d in (run.ttft, run.tpot, run.e2e):
        assert d.mean_s < d.p95_s < d.p99_s + 1e-12
        assert d.p50_s < d.p95_s


def test_the_simulation_is_deterministic_for_a_seed() -> None:
    replica = _replica()
    arrival = sim.Arrival("gamma", rate_per_s=30.0, cv=2.0)
    runs = [
        sim.simulate(replica, sim.draw_requests(arrival, sim.Lengths(800, 300, 0.3), 500, seed), arrival)
        for seed in (7, 7, 8)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_kv_exhaustion_preempts_and_every_request_still_finishes() -> None:
    # a pool of 6,000 tokens: eight 1,000-token prompts are admitted as blocks allow, decoding grows them, and the
    # latest admitted is preempted and recomputed when the pool runs out
    replica = _replica(kv_pool_tokens=6000)
    requests = [sim.SimRequest(0.0, 1000, 800) for _ in range(40)]
    run = sim.simulate(replica, requests, sim.Arrival("closed", concurrency=8))
    assert run.preemptions > 0
    assert run.requests == 40 and run.e2e.mean_s > 0


def test_saturated_throughput_matches_the_analytical_rate() -> None:
    # A replica kept full at batch B: the analytical rate is 1 / (P_b + O·t/B) (physics/step.py saturated_rates).
    # The simulation's first token comes from the prefill step, so O - 1 decode steps: within 5 %.
    replica = _replica(max_seqs=64)
    batch, prompt, output = 64, 1000, 200
    analytical = 1.0 / (prompt * replica.prefill_token_busy_s + output * decode_step_s(STEP, batch) / batch)
    requests = [sim.SimRequest(0.0, prompt, output) for _ in range(3000)]
    run = sim.simulate(replica, requests, sim.Arrival("closed", concurrency=batch))
    assert run.requests_per_s == pytest.approx(analytical, rel=0.05)


def _cli(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(app, ["estimate", *args])
    return result.exit_code, result.output


def test_estimate_closed_64_on_a_70b_replica_queues_prefills_and_matches_the_saturated_rate() -> None:
    code, out = _cli([*PINNED_70B, "--arrival", "closed:64", "--json"])
    assert code == 0, out
    data = json.loads(out)
    s, est = data["simulation"], data["serving"]
    assert s["tpot_includes_first_token"] is False and s["definitions"] == "vllm bench serve"
    assert s["ttft"]["mean_s"] > 3 * est["prefill_s"]  # the 64 clients' prefills queue
    code, out = _cli([*PINNED_70B, "--batch", "64", "--arrival", "closed:64:n=640", "--json"])
    data = json.loads(out)
    # kept full at its batch, the replica serves the analytical saturated rate (13.63 against 13.66 req/s)
    assert data["simulation"]["requests_per_s"] == pytest.approx(data["serving"]["requests_per_s"], rel=0.05)


def test_estimate_poisson_table_prints_the_simulated_percentiles() -> None:
    code, out = _cli([*PINNED_70B, "--arrival", "poisson:10/s:n=300:range=0.5"])
    assert code == 0, out
    assert "Simulated one replica under poisson:10/s:n=300:range=0.5" in out
    assert "TPOT (first token excluded)" in out and "goodput" in out
    code, out = _cli([*PINNED_70B, "--arrival", "poisson:10/s:n=300", "--json"])
    s = json.loads(out)["simulation"]
    assert s["requests_per_s"] < json.loads(out)["serving"]["requests_per_s"] / 2  # well below saturation
    for figure in ("ttft", "tpot", "e2e"):
        assert s[figure]["mean_s"] < s[figure]["p95_s"]  # fixed lengths: the spread is the scheduler's


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("trace.csv", "arrival_s,input_tokens,output_tokens\n0,1000,200\n0.5,800,100\n1.0,1200,300\n"),
        ("trace.jsonl", '{"arrival_s": 0, "input_tokens": 1000, "output_tokens": 200}\n\n'
                        '{"arrival_s": 0.5, "input_tokens": 800, "output_tokens": 100}\n'
                        '{"arrival_s": 1.0, "input_tokens": 1200, "output_tokens": 300}\n'),
    ],
)  # fmt: skip
def test_a_trace_replays_from_csv_and_jsonl(tmp_path: Path, name: str, text: str) -> None:
    trace = tmp_path / name
    trace.write_text(text)
    code, out = _cli([*PINNED_70B, "--arrival", f"trace:{trace}", "--json"])
    assert code == 0, out
    assert json.loads(out)["simulation"]["requests"] == 3


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("bad.csv", "arrival_s,input_tokens,output_tokens\n0,1000,200\n0.5,eight,100\n", "bad.csv:3"),
        ("bad.csv", "arrival,input_tokens,output_tokens\n0,1000,200\n", "bad.csv:1"),
        ("bad.jsonl", '{"arrival_s": 0, "input_tokens": 1000, "output_tokens": 200}\n{"arrival_s": 1,\n', "bad.jsonl:2"),
        ("bad.jsonl", '{"arrival_s": 0, "input_tokens": 0, "output_tokens": 200}\n', "bad.jsonl:1"),
    ],
)  # fmt: skip
def test_a_malformed_trace_is_refused_with_its_location(tmp_path: Path, name: str, text: str, where: str) -> None:
    trace = tmp_path / name
    trace.write_text(text)
    code, out = _cli([*PINNED_70B, "--arrival", f"trace:{trace}"])
    assert code == 2, out
    assert where in out.replace("\n", "")
    assert "Traceback" not in out


@pytest.mark.parametrize("arrival", ["open:5", "closed:0", "poisson:fast", "gamma:10/s:cv=0", "closed:8:x=1"])
def test_a_bad_arrival_is_refused_naming_the_flag(arrival: str) -> None:
    code, out = _cli([*PINNED_70B, "--arrival", arrival])
    assert code == 2, out
    assert "--arrival" in out


def test_speculative_steps_keep_tpot_and_stretch_itl_to_a_verification_step() -> None:
    # the step model is per kept token; a verification step keeps tau tokens and takes tau times as long, so TPOT
    # (per token) holds while ITL (per streamed chunk, one a step) is tau times longer
    requests = [sim.SimRequest(0.0, 1000, 401) for _ in range(4)]
    arrival = sim.Arrival("closed", concurrency=4)
    plain = sim.simulate(_replica(), requests, arrival)
    spec = sim.simulate(_replica(acceptance_length=2.0), requests, arrival)
    assert spec.tpot.mean_s == pytest.approx(plain.tpot.mean_s, rel=0.02)
    assert spec.itl.p50_s == pytest.approx(2 * plain.itl.p50_s, rel=0.02)


def test_a_prefix_cache_hit_shortens_the_queued_prefills() -> None:
    requests = [sim.SimRequest(0.0, 4000, 100) for _ in range(16)]
    arrival = sim.Arrival("closed", concurrency=16)
    cold = sim.simulate(_replica(), requests, arrival)
    warm = sim.simulate(_replica(prefix_hit_rate=0.75), requests, arrival)
    assert warm.ttft.mean_s < 0.5 * cold.ttft.mean_s


def _aggregated_70b(tmp_path: Path) -> Path:
    """The 70B example served aggregated only (``disaggregation: off``): every design it returns is simulated."""
    text = EXAMPLE_70B.read_text().replace(
        "    peak_to_average: 1.2", "    disaggregation: 'off'\n    peak_to_average: 1.2"
    )
    path = tmp_path / "70b-aggregated.yaml"
    path.write_text(text)
    return path


def _p95_at_the_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    """The analytical model as it was before its p95s took the spread of the decode phase (issue 31): end-to-end and
    TPOT p95 at their means, so its first choice of the aggregated 70B misses in the simulation again. The planner's
    re-search is checked on that optimistic model; the shipped one passes its simulation on every example."""
    monkeypatch.setattr(queueing, "gamma_p95", lambda mean, variance: mean)


@pytest.mark.slow
def test_without_the_search_again_the_analytical_first_choice_misses_its_simulated_target(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mean-based analytical model plans 4 MI300X TP2 replicas within a 5 s target; simulated at its share of peak
    # demand (Poisson, 1,000 requests) a replica takes longer. With the re-search off, the plan only flags it.
    _p95_at_the_mean(monkeypatch)
    monkeypatch.setattr(pipeline, "SIM_ROUNDS", 0)
    plan = plan_file(_aggregated_70b(tmp_path), catalog, top=3, explain=False)
    first = plan.designs[0]
    assert "MI300X" in first.summary and not plan.simulation_rejected
    misses = {m.figure: m for m in first.simulation_misses}
    m = misses["p95_latency"]
    assert m.planned_s <= m.target_s < m.simulated_s
    assert json.loads(first.model_dump_json())["simulation_misses"][0]["figure"] == "p95_latency"
    assert "Simulated at peak load" in plan_markdown.render(plan)


@pytest.mark.slow
def test_a_design_whose_simulated_p95_misses_is_rejected_and_the_plan_searched_again(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same requirement and mean-based model searched again: the MI300X TP2 replica holds the 5 s target simulated
    # only up to the load bisected below 5.00 req/s, so the latency family allows it no more; the design returned passes.
    _p95_at_the_mean(monkeypatch)
    path = _aggregated_70b(tmp_path)
    plan = plan_file(path, catalog, top=3, explain=False)
    rejected = plan.simulation_rejected[0]
    assert rejected.round == 1 and "MI300X" in rejected.summary
    m = rejected.misses[0]
    assert m.figure == "p95_latency" and m.target_s < m.simulated_s
    assert m.held_rps is not None and 0 < m.held_rps < m.load_rps
    assert plan.designs[0].costs.total_usd > rejected.total_usd  # passing costs more than the rejected choice
    resolved = load_requirement(path, catalog)
    # design 1 passes the simulation (checked afresh, not read from the plan); an alternative the capped rounds
    # (SIM_ROUNDS) did not reach passes too or states its misses: never shown as meeting targets it misses
    first = plan.designs[0]
    assert not first.simulation_misses and not simulated.design_misses(first, resolved, catalog), first.summary
    for d in plan.designs:
        assert bool(d.simulation_misses) == bool(simulated.design_misses(d, resolved, catalog)), d.summary
        wp = d.workloads[0]
        assert isinstance(wp, ServingPlan)
        for g in wp.groups:  # an MI300X TP2 design now takes at most the held load a replica
            if (g.gpu, g.tp) == ("mi300x", 2):
                assert wp.demand_rps / g.replicas <= m.held_rps
    text = plan_markdown.render(plan)
    assert "Rejected by simulation" in text and "meets every target up to" in text
    assert json.loads(plan.model_dump_json())["simulation_rejected"][0]["misses"][0]["held_rps"] == m.held_rps
