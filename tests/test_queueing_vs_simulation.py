"""The queueing model's p95s against the scheduler simulation of the same replica (issue 31): below saturation the
formulas' TTFT waits for the prompts queued ahead and a request's decode time spreads with the prompts that ride its
steps, so the planner's analytical p95 is the one its simulated check then measures."""

from __future__ import annotations

import pytest

from clusterplan import api
from clusterplan.evaluation import evaluate, simulated
from clusterplan.physics import queueing
from clusterplan.physics.layout import Layout

LONG_PROMPTS = """
name: long prompts
model: llama-3.1-8b
deployment: cloud
workloads:
  - {kind: serving, name: chat, requests_per_min: 600, input_tokens: 4000, output_tokens: 300, p95_latency: 30s}
"""


@pytest.mark.parametrize("share", [0.4, 0.7])
def test_p95s_are_the_simulations_below_saturation(share: float) -> None:
    """Llama 3.1 8B on one H100 at fp8, 4,000-token prompts: each prompt's prefill rides the running steps for a
    good share of the replica's time, so a request's TTFT waits for the prompts ahead and its decode time depends
    on how many prompts arrive during it. At 40% and 70% of the saturated rate the analytical p95 end-to-end and
    TPOT are within 8% of the simulated ones (Poisson, 1,000 requests, seed 0), the p95 TTFT within 25%, and each
    p95 lies well above its mean (a mean-based p95 misses the simulated one by more than 10%)."""
    loaded = api.load(text=LONG_PROMPTS)
    req = loaded.requirement.requirement
    w = req.workloads[0]
    assert w.kind == "serving"
    arch, spec = loaded.requirement.model_for(0), loaded.catalog.gpus["h100-sxm"]
    layout = Layout(quant="fp8", kv_precision="fp8")
    batch = evaluate.max_batch(arch, spec, w, layout, req.assumptions)
    est = evaluate.serving_estimate(arch, spec, w, layout, batch=batch, assumptions=req.assumptions)
    a = evaluate.serving_assumptions(req.assumptions, w)
    load = share * est.requests_per_s
    lat = queueing.latency_at_load(est, load, input_tokens=w.input_tokens, output_tokens=w.output_tokens, assumptions=a)
    run = simulated.poisson_run(est, w, a, batch, load)
    assert lat.p95_e2e_s == pytest.approx(run.e2e.p95_s, rel=0.08)
    assert lat.p95_tpot_s == pytest.approx(run.tpot.p95_s, rel=0.08)
    assert lat.p95_ttft_s == pytest.approx(run.ttft.p95_s, rel=0.25)
    assert lat.p95_ttft_s > 1.5 * est.prefill_s  # the prompts queued ahead, not one lone prefill
    assert run.e2e.p95_s > 1.1 * lat.mean_e2e_s and run.tpot.p95_s > 1.1 * lat.mean_tpot_s
