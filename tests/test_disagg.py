"""Disaggregated prefill/decode serving: the KV-transfer physics, the target split, and the planner choosing
pools where they are cheaper (long prompts, tight TPOT) and aggregated replicas where they are not (short
prompts), with the pool sizes checked by hand and the design re-checked without a solver."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from clusterplan.physics import disagg, queueing
from clusterplan.physics.factors import Assumptions
from clusterplan.plan import ServingPlan
from conftest import plan_file

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.plan import Plan


def _requirement(tmp_path: Path, name: str, **serving: Any) -> Path:
    """Llama 3.1 70B on cloud H100 SXM only (one GPU type keeps the solve small), on demand: the pool arithmetic here
    reads the instances' hourly rates (commitments are tests/test_cloud_terms.py's)."""
    doc = {
        "name": name,
        "model": "llama-3.1-70b",
        "deployment": "cloud",
        "constraints": {"allowed_gpus": ["h100-sxm"], "pricing": "on_demand"},
        "workloads": [{"kind": "serving", "name": "chat", **serving}],
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _groups(plan: Plan) -> list[tuple[str, int, int, int, str]]:
    w = plan.designs[0].workloads[0]
    assert isinstance(w, ServingPlan)
    return [(g.role, g.replicas, g.tp, g.pp, g.quant) for g in w.groups]


# ------------------------------------------------------------------------------------------------
# Physics
# ------------------------------------------------------------------------------------------------


def test_kv_bytes_and_transfer_by_hand(catalog: Catalog) -> None:
    arch = catalog.models["llama-3.1-70b"]
    h100 = catalog.gpus["h100-sxm"]
    a = Assumptions()
    # 80 layers x 8 KV heads x 128 dims x (K and V) x 1 byte (fp8) = 163,840 bytes a token.
    assert disagg.kv_bytes(arch, 1.0, "fp8") == 80 * 8 * 128 * 2 * 1
    # 1,000 tokens = 163.84 MB over 4 GPUs' NICs at 50 GB/s x 0.70 = 140 GB/s: 1.170 ms, + 20 us start-up.
    t = disagg.kv_transfer_s(arch, h100, input_tokens=1000, kv_precision="fp8", senders=4, assumptions=a)
    assert t == pytest.approx(163.84e6 / 140e9 + 20e-6, rel=1e-12)
    # TCP: 100 Gb/s per 8-GPU node = 1.5625 GB/s per GPU, x 0.70 x 4 senders = 4.375 GB/s: 37.4 ms.
    tcp = disagg.kv_transfer_s(arch, h100, input_tokens=1000, kv_precision="fp8", senders=4, assumptions=a, link="tcp")
    assert tcp == pytest.approx(163.84e6 / 4.375e9 + 20e-6, rel=1e-12)
    # NVLink (both pools in one node): 900 GB/s bidirectional = 450 one way per GPU.
    nv = disagg.kv_link_gb_per_s(h100, "nvlink", 4, a)
    assert nv == pytest.approx(4 * 450 * 0.7)


def test_targets_split_between_pools() -> None:
    # p95_ttft within half the end-to-end target: the prefill pool gets it, the decode pool the rest.
    assert disagg.budgets(5.0, 1.0, None) == disagg.Budgets(ttft_s=1.0, decode_e2e_s=4.0, tpot_s=None)
    # Only an end-to-end target: split evenly; a TTFT target above half of it is capped at half.
    assert disagg.budgets(4.0, None, None) == disagg.Budgets(ttft_s=2.0, decode_e2e_s=2.0, tpot_s=None)
    assert disagg.budgets(4.0, 3.0, 0.02) == disagg.Budgets(ttft_s=2.0, decode_e2e_s=2.0, tpot_s=0.02)
    assert disagg.budgets(None, 1.0, 0.02) == disagg.Budgets(ttft_s=1.0, decode_e2e_s=None, tpot_s=0.02)


def test_prefill_passes_pack_short_prompts() -> None:
    assert disagg.prefill_passes(1024, 8192) == 0.125  # eight 1,024-token prompts share one pass
    assert disagg.prefill_passes(20_000, 8192) == 3.0  # a long prompt takes whole chunks


def test_largest_rate_bisects_to_the_feasible_end() -> None:
    assert queueing.largest_rate(lambda r: r <= 3.0, 8.0, 8) == pytest.approx(3.0, abs=8 / 256)
    assert queueing.largest_rate(lambda r: r <= 3.0, 8.0, 8) <= 3.0
    assert queueing.largest_rate(lambda r: True, 8.0, 8) == 8.0
    assert queueing.largest_rate(lambda r: r < 0, 8.0, 8) == 0.0  # even idle it fails


# ------------------------------------------------------------------------------------------------
# The planner: wins and losses
# ------------------------------------------------------------------------------------------------


def test_disaggregation_wins_on_long_prompts_and_tight_tpot(tmp_path: Path, catalog: Catalog) -> None:
    """8k in / 256 out at 30 req/s, p95 TTFT 2 s, p95 TPOT 15 ms, H100 SXM fp8 (rates from the candidate rows).

    Aggregated, every replica's decode steps are stretched by the 8k-token prefills they interleave, and a request's
    p95 TPOT by how many of them land in its decode (a busy period): within 15 ms p95 TPOT TP8 takes 0.762 req/s
    (the scheduler simulation gives 15.5 ms there; the model took 1.383 before, where it simulates at 22.3 ms), TP8
    PP2 1.790, and the best aggregated shape is TP8 PP4 at 3.876 req/s: ceil(30 / 3.876) = 8 replicas, 256 GPUs.
    Disaggregated, the decode pool does not prefill: one TP4 decode replica
    takes 5.544 req/s within 15 ms, so ceil(30 / 5.544) = 6 replicas (5 give 27.7), 24 GPUs, or 3 TP8 replicas at
    12.985, also 24 GPUs: the pools' KV stream crosses over RDMA, so they sit on instances with a fabric
    (hyperstack:8x-h100-sxm, 8 GPUs each), where the TP8 replicas are the plan's; the prefill pool's TP8 PP4 replica takes 11.388
    prompts/s within the 2 s TTFT (KV transfer over RDMA included), so ceil(30 / 11.388) = 3 replicas (2 give
    22.8), 96 GPUs. 120 GPUs against 256, all on 8-GPU instances at the same price per GPU: disaggregated
    hardware costs 120/256 of aggregated; on top, each runs one GPU type ($1,550 a month, owned.yaml) and its pools
    ($775 each a month): one aggregated pool, or a prefill and a decode pool.
    """
    path = _requirement(
        tmp_path, "long", requests_per_min=1800, input_tokens=8000, output_tokens=256, p95_ttft="2s", p95_tpot="15ms"
    )
    plan = plan_file(path, catalog, top=1, explain=False)
    groups = _groups(plan)
    assert groups == [("prefill", 3, 8, 4, "fp8"), ("decode", 3, 8, 1, "fp8")]
    w = plan.designs[0].workloads[0]
    assert isinstance(w, ServingPlan) and w.disaggregated
    rates = {g.role: g.rate_rps for g in w.groups}
    assert rates["prefill"] == pytest.approx(11.388, abs=1e-3) and rates["decode"] == pytest.approx(12.985, abs=1e-3)
    assert math.ceil(30 / rates["prefill"]) == 3 and math.ceil(30 / rates["decode"]) == 3
    assert plan.designs[0].gpus_total == 120
    (note,) = plan.disaggregation
    assert note.chosen == "disaggregated"
    assert note.aggregated_design == "8x NVIDIA H100 SXM5 80GB TP8 PP4 fp8"
    assert note.disaggregated_total_usd is not None and note.aggregated_total_usd is not None
    ops_agg, ops_dis = 36 * (1550 + 775), 36 * (1550 + 2 * 775)
    hardware_agg = note.aggregated_total_usd - ops_agg
    assert note.disaggregated_total_usd - ops_dis == pytest.approx(hardware_agg * 120 / 256, rel=1e-9)
    assert note.saving_usd == pytest.approx(note.aggregated_total_usd - note.disaggregated_total_usd)
    # The solver-free checker re-evaluates both pools through the same functions and finds nothing wrong.
    from clusterplan.design.check import check_plan
    from clusterplan.requirement.load import load_requirement

    resolved = load_requirement(path, catalog)
    assert check_plan(plan.designs[0], resolved, catalog) == []
    # One decode replica fewer (2 x 12.985 = 26.0 < 30 req/s): the checker catches it on the decode side.
    short_groups = [g.model_copy(update={"replicas": 2}) if g.role == "decode" else g for g in w.groups]
    broken = plan.designs[0].model_copy(update={"workloads": [w.model_copy(update={"groups": short_groups})]})
    problems = check_plan(broken, resolved, catalog)
    assert any("within the p95 targets" in p for p in problems), problems


def test_disaggregation_loses_on_short_prompts(tmp_path: Path, catalog: Catalog) -> None:
    """200 in / 256 out at 10 req/s, same targets but TPOT 25 ms.

    Short prompts barely stretch decode: one aggregated TP2 replica takes 14.2 req/s within the targets, so one
    replica (2 GPUs) serves 10 req/s. Disaggregated needs at least one replica per pool: a TP1 prefill replica
    (30 prompts/s) and a TP2 decode replica (35 req/s), 3 GPUs. Aggregated rents one 2-GPU instance at $3.99 per
    H100-hour: 2 x 3.99 x 730 x 36 = $209,714.40. The pools' KV stream crosses over RDMA, so their 3 GPUs sit on an
    instance with a fabric between instances (the 2-GPU one has none, providers.yaml): one hyperstack:8x-h100-sxm at
    $25.60/h, $672,768. Each pays the operations of one GPU type ($1,550 a month, owned.yaml) and of its pools ($775
    each): one, or two.
    """
    path = _requirement(
        tmp_path, "short", requests_per_min=600, input_tokens=200, output_tokens=256, p95_ttft="2s", p95_tpot="25ms"
    )
    plan = plan_file(path, catalog, top=1, explain=False)
    assert _groups(plan) == [("aggregated", 1, 2, 1, "fp8")]
    (note,) = plan.disaggregation
    assert note.chosen == "aggregated"
    assert note.aggregated_total_usd == pytest.approx(2 * 3.99 * 730 * 36 + 36 * (1550 + 775))
    assert note.disaggregated_total_usd == pytest.approx(25.60 * 730 * 36 + 36 * (1550 + 2 * 775))
    assert note.disaggregated_design == (
        "1x prefill NVIDIA H100 SXM5 80GB TP1 PP1 fp8 + 1x decode NVIDIA H100 SXM5 80GB TP2 PP1 fp8"
    )
    assert note.saving_usd is not None and note.saving_usd < 0


@pytest.mark.parametrize(("switch", "roles"), [("off", {"both"}), ("required", {"prefill", "decode"})])
def test_switch_off_and_required(tmp_path: Path, catalog: Catalog, switch: str, roles: set[str]) -> None:
    from clusterplan.candidates.build import build_candidates
    from clusterplan.requirement.load import load_requirement

    path = _requirement(
        tmp_path, switch, requests_per_min=600, input_tokens=200, output_tokens=256, p95_ttft="2s",
        disaggregation=switch,
    )  # fmt: skip
    table = build_candidates(load_requirement(path, catalog), catalog)
    assert {r.role for r in table.workloads[0].serving_rows()} == roles


def test_unquoted_off_in_yaml_means_off(tmp_path: Path, catalog: Catalog) -> None:
    from clusterplan.requirement.load import load_requirement

    path = _requirement(tmp_path, "bool", requests_per_min=60)
    path.write_text(path.read_text().replace("name: chat", "name: chat\n  disaggregation: off"))
    w = load_requirement(path, catalog).requirement.workloads[0]
    assert w.kind == "serving" and w.disaggregation == "off"


def _seventy_b_pools(tmp_path: Path, *, mixed: bool) -> Path:
    """The README's 70B chat service, owned, on H100 SXM and RTX PRO 6000 only, served by a prefill and a decode pool."""
    doc = {
        "name": f"pools-mixed-{mixed}",
        "model": "llama-3.1-70b",
        "deployment": "owned",
        "constraints": {"allowed_gpus": ["h100-sxm", "rtx-pro-6000"], "allow_mixed": mixed},
        "workloads": [
            {
                "kind": "serving", "name": "chat", "requests_per_min": 1000, "input_tokens": 1000,
                "output_tokens": 200, "max_context": "8k", "p95_latency": "5s", "p95_ttft": "1s",
                "peak_to_average": 1.2, "disaggregation": "required",
            }
        ],
    }  # fmt: skip
    path = tmp_path / f"pools-{mixed}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_one_gpu_type_holds_for_pools_unless_mixing_is_allowed(tmp_path: Path, catalog: Catalog) -> None:
    """With ``allow_mixed: false`` (the default) a disaggregated workload's prefill and decode pools sit on one GPU
    type, as an aggregated workload's replicas do; allowed to mix, the cheapest design puts prefill on the RTX PRO 6000
    and decode on the H100 (the README example's old design 1). The checker holds the same rule."""
    from clusterplan.design.check import check_plan
    from clusterplan.requirement.load import load_requirement

    one = plan_file(_seventy_b_pools(tmp_path, mixed=False), catalog, top=3, explain=False)
    for d in one.designs:
        (w,) = d.workloads
        assert isinstance(w, ServingPlan) and w.disaggregated
        assert len({g.gpu for g in w.groups}) == 1, [(g.role, g.gpu) for g in w.groups]
    mixed_path = _seventy_b_pools(tmp_path, mixed=True)
    mixed = plan_file(mixed_path, catalog, top=1, explain=False)
    (w,) = mixed.designs[0].workloads
    assert isinstance(w, ServingPlan)
    assert {g.role: g.gpu for g in w.groups} == {"prefill": "rtx-pro-6000", "decode": "h100-sxm"}
    assert mixed.designs[0].costs.total_usd < one.designs[0].costs.total_usd
    # The mixed design is a candidate of the unmixed requirement's table, but breaks its one-GPU-type rule.
    resolved = load_requirement(mixed_path, catalog)
    assert check_plan(mixed.designs[0], resolved, catalog) == []
    req = resolved.requirement
    unmixed = req.model_copy(update={"constraints": req.constraints.model_copy(update={"allow_mixed": False})})
    strict = dataclasses.replace(resolved, requirement=unmixed)
    problems = check_plan(mixed.designs[0], strict, catalog)
    assert "chat: several GPU types but mixing is not allowed" in problems, problems


# ------------------------------------------------------------------------------------------------
# The fabric the KV stream crosses (issue 35): ruled out where the link cannot carry it, priced where it can
# ------------------------------------------------------------------------------------------------


def test_a_kv_stream_over_the_link_rules_the_pool_pair_out(tmp_path: Path, catalog: Catalog) -> None:
    """Llama 3.1 8B on RTX 6000 Ada (a workstation card: its pools talk over Ethernet, 12.5 GB/s per 8-GPU node,
    1.5625 GB/s per sending GPU x link efficiency 0.7 = 1.09 GB/s for a TP1 replica), 2,000-token prompts: a fp8 KV
    cache of 32 layers x 8 KV heads x 128 x 2 x 1 byte = 65,536 bytes a token, 131 MB a prompt. Every prefill replica
    sends more than its link carries at its rated rate, so each is ruled out with ``kv_stream_over_link``; with
    disaggregation required no design remains, and the plan says why."""
    from clusterplan.candidates.build import build_candidates
    from clusterplan.physics.reasons import KvStreamOverLink
    from clusterplan.requirement.load import load_requirement

    doc = {
        "name": "kv", "model": "llama-3.1-8b", "deployment": "owned",
        "constraints": {"allowed_gpus": ["rtx-6000-ada"]},
        "workloads": [{"kind": "serving", "name": "rag", "requests_per_min": 600, "input_tokens": 2000,
                       "output_tokens": 100, "p95_ttft": "3s", "disaggregation": "required"}],
    }  # fmt: skip
    path = tmp_path / "kv.yaml"
    path.write_text(yaml.safe_dump(doc))
    (wc,) = build_candidates(load_requirement(path, catalog), catalog).workloads
    assert not [r for r in wc.serving_rows() if r.role == "prefill"]
    over = [e.reason for e in wc.exclusions if isinstance(e.reason, KvStreamOverLink)]
    assert over and all(r.link == "tcp" and r.stream_gb_per_s > r.link_gb_per_s for r in over)
    tp1 = min(over, key=lambda r: r.link_gb_per_s)
    assert tp1.link_gb_per_s == pytest.approx(12.5 / 8 * 0.7)
    plan = plan_file(path, catalog, top=1, explain=False)
    assert not plan.designs and plan.infeasibility is not None
    assert "KV stream" in plan.infeasibility.text and "Ethernet (TCP)" in plan.infeasibility.text


def test_cloud_pools_pay_for_a_fabric_and_the_checker_holds_it(tmp_path: Path, catalog: Catalog) -> None:
    """Short prompts, disaggregation required: 3 H100 GPUs of pools. Their KV stream crosses over RDMA, so they sit on
    an instance whose provider sells a fabric (hyperstack:8x-h100-sxm at $25.60/h), not on the cheaper fabric-less
    2-GPU ones ($3.99 per GPU-hour); moved onto fabric-less instances, the checker refuses the design."""
    from clusterplan.design.check import check_plan
    from clusterplan.requirement.load import load_requirement

    path = _requirement(
        tmp_path, "pools", requests_per_min=600, input_tokens=200, output_tokens=256, p95_ttft="2s",
        p95_tpot="25ms", disaggregation="required",
    )  # fmt: skip
    plan = plan_file(path, catalog, top=1, explain=False)
    d = plan.designs[0]
    (line,) = d.hardware
    assert (line.offering, line.units) == ("cloud:hyperstack:8x-h100-sxm", 1)
    assert d.costs.total_usd == pytest.approx(25.60 * 730 * 36 + 36 * (1550 + 2 * 775))
    resolved = load_requirement(path, catalog)
    assert check_plan(d, resolved, catalog) == []
    fabricless = line.model_copy(
        update={"offering": "cloud:runpod:2x-h100-sxm-secure", "units": 2, "gpus_per_unit": 2, "gpus": 4}
    )
    moved = d.model_copy(update={"hardware": [fabricless]})
    assert any("fabric" in p for p in check_plan(moved, resolved, catalog))
