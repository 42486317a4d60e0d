"""The process-wide memo of simulated runs (evaluation/simulated.py ``RUN_MEMO``): a remembered run is the run a
fresh simulation makes, bit for bit; its key tells apart every input that changes a run and is the same for equal
inputs built apart; it stays bounded."""

from __future__ import annotations

import dataclasses
import os

from clusterplan.catalog.load import Catalog
from clusterplan.evaluation import evaluate, simulated
from clusterplan.physics import schedule_sim as sim
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.types import ServingEstimate
from clusterplan.requirement.load import load_requirement
from clusterplan.requirement.schema import ServingWorkload
from conftest import ROOT
from test_schedule_sim import _replica  # the toy replica the simulation's tests run

EXAMPLE_70B = ROOT / "examples" / "requirements" / "70b-serving.yaml"


def _mi300x_tp2(catalog: Catalog, batch: int = 64) -> tuple[ServingEstimate, ServingWorkload, Assumptions]:
    """The 70B example's MI300X TP2 fp8 replica (its first design's), evaluated afresh on every call."""
    resolved = load_requirement(EXAMPLE_70B, catalog)
    sw = resolved.requirement.workloads[0]
    assert sw.kind == "serving"
    layout = Layout(tp=2, pp=1, quant="fp8", kv_precision="fp8")
    est = evaluate.serving_estimate(
        resolved.model_for(0), catalog.gpus["mi300x"], sw, layout, batch=batch,
        assumptions=resolved.requirement.assumptions,
    )  # fmt: skip
    return est, sw, evaluate.serving_assumptions(resolved.requirement.assumptions, sw)


def _fresh(est: ServingEstimate, sw: ServingWorkload, a: Assumptions, load: float) -> sim.SimResult:
    """The run :func:`simulated.poisson_run` makes, simulated here without the memo."""
    arrival = sim.Arrival("poisson", rate_per_s=load)
    lengths = sim.Lengths(round(sw.input_tokens), round(sw.output_tokens))
    requests = sim.draw_requests(arrival, lengths, simulated.VERIFY_REQUESTS, simulated.VERIFY_SEED)
    return sim.simulate(simulated.sim_replica(est, sw, a, 64), requests, arrival)


def test_a_remembered_run_is_the_fresh_run_bit_for_bit(catalog: Catalog) -> None:
    est, sw, a = _mi300x_tp2(catalog)
    simulated.RUN_MEMO.clear()
    first = simulated.poisson_run(est, sw, a, 64, 3.0)
    again = simulated.poisson_run(*_mi300x_tp2(catalog), 64, 3.0)  # equal inputs, other objects: remembered
    assert len(simulated.RUN_MEMO) == 1
    fresh = _fresh(est, sw, a, 3.0)
    assert first == fresh and again == fresh
    assert [x.hex() for x in again.ttft_s + again.e2e_s] == [x.hex() for x in fresh.ttft_s + fresh.e2e_s]
    other = simulated.poisson_run(est, sw, a, 64, 4.0)
    assert other == _fresh(est, sw, a, 4.0) and other != fresh and len(simulated.RUN_MEMO) == 2


def test_the_key_tells_apart_what_changes_a_run(catalog: Catalog) -> None:
    est, sw, a = _mi300x_tp2(catalog)
    poisson = sim.Arrival("poisson", rate_per_s=3.0)
    lengths = sim.Lengths(round(sw.input_tokens), round(sw.output_tokens))
    base = simulated.sim_replica(est, sw, a, 64)
    key = simulated.run_key(base, poisson, lengths)
    # equal values built apart share a key: the memo never keys on an object's identity
    assert simulated.run_key(simulated.sim_replica(*_mi300x_tp2(catalog), 64), poisson, lengths) == key
    other_step = base.step_model.model_copy(update={"overhead_s": base.step_model.overhead_s + 1e-9})
    others = [
        simulated.run_key(base, sim.Arrival("poisson", rate_per_s=3.0 + 1e-12), lengths),  # another load
        simulated.run_key(base, poisson, sim.Lengths(lengths.input_tokens + 1, lengths.output_tokens)),
        simulated.run_key(simulated.sim_replica(est, sw, a, 64, "decode"), poisson, lengths),  # another role
        simulated.run_key(simulated.sim_replica(est, sw, a, 64, "prefill"), poisson, lengths),
        simulated.run_key(simulated.sim_replica(est, sw, a, 64, "prefill", 0.01), poisson, lengths),  # a KV transfer
        simulated.run_key(simulated.sim_replica(est, sw, a, 32), poisson, lengths),  # another max_num_seqs
        simulated.run_key(dataclasses.replace(base, step_model=other_step), poisson, lengths),  # a step-model field
        simulated.run_key(dataclasses.replace(base, prefill_token_busy_s=-0.0), poisson, lengths),
        simulated.run_key(dataclasses.replace(base, prefill_token_busy_s=0.0), poisson, lengths),
    ]
    assert len({key, *others}) == len(others) + 1


def test_the_memo_forgets_the_least_recently_used_past_its_size() -> None:
    memo = simulated.RunMemo(2)
    runs = {
        c: sim.simulate(_replica(), [sim.SimRequest(0.0, 100, 10)] * c, sim.Arrival("closed", concurrency=c))
        for c in (1, 2, 3)
    }
    memo.put("one", runs[1])
    memo.put("two", runs[2])
    assert memo.get("one") == runs[1]  # now the most recently used
    memo.put("three", runs[3])
    assert len(memo) == 2 and memo.get("two") is None
    assert memo.get("one") == runs[1] and memo.get("three") == runs[3]


def test_a_forked_worker_uses_the_memo_though_a_thread_held_it_as_the_process_forked() -> None:
    # sweep --jobs forks its workers: a memo lock copied held would hang the worker's first simulation
    simulated.RUN_MEMO._lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # the worker: the memo answers at once
            os._exit(0 if simulated.RUN_MEMO._lock.acquire(timeout=5) else 1)
    finally:
        simulated.RUN_MEMO._lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
