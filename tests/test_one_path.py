"""One path per design: ``estimate`` pinned to ``solve``'s top design reports the same figures.

For every example: plan it through the entry point ``clusterplan solve`` uses, take design 1, run
``estimate`` pinned to each replica group's (or training workload's) layout and deployment, and
compare throughput, latencies, memory per GPU and every cost. Costs are compared to the cent; the
physics to a relative 1e-9 (they come from the same functions, so any difference is a second path).

Costs: a single-workload design's costs are the sum of its replica groups' estimates (cloud lines are
per group; per-million-token figures are over the workload's average demand, so they add up too). In
a multi-workload design the hardware may be shared (``schedule: sequential`` trains, then serves, on
the same owned servers): there each workload whose own hardware is the whole design's is compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, ROOT, shared_plan

# Design 1 of this requirement is an MoE expert-parallel layout (EP with attention data-parallel).
EP_CASE = ROOT / "tests" / "data" / "requirements" / "mixtral-h100-ep.yaml"

CENT = 0.005
REL = 1e-9


@dataclass
class Mismatches:
    found: list[str] = field(default_factory=list)

    def close(self, what: str, solve: float | None, estimate: float | None, *, money: bool = False) -> None:
        if solve is None or estimate is None:
            if solve != estimate:
                self.found.append(f"{what}: solve {solve}, estimate {estimate}")
            return
        tol = CENT if money else max(abs(solve), abs(estimate)) * REL
        if abs(solve - estimate) > tol:
            self.found.append(f"{what}: solve {solve:,.6f}, estimate {estimate:,.6f}")


def _plan(path: Path, catalog: Any) -> tuple[Any, Any]:
    from clusterplan.requirement.load import load_requirement

    resolved = load_requirement(path, catalog)
    plan = shared_plan(path, catalog, top=1, explain=False)  # plan_requirement, the entry point solve uses
    assert plan.designs, f"{path.name}: no design"
    return resolved, plan.designs[0]


def _estimate(resolved: Any, catalog: Any, **pins: Any) -> Any:
    from clusterplan.design.estimate import estimate_requirement
    from clusterplan.requirement.schema import PinnedConfig

    return estimate_requirement(resolved.requirement, list(resolved.models), catalog, PinnedConfig(**pins))


def _money(result: Any) -> tuple[float, float, float, float | None, Any]:
    """(capital, monthly, total over the horizon, $ per million output tokens, hardware) of one estimate."""
    priced = result.owned if result.owned is not None else result.cloud
    assert priced is not None, "the estimate priced nothing"
    c = priced.costs
    return c.capital_usd, c.monthly_usd, c.total_usd, c.usd_per_million_output_tokens, priced.hardware


def _hardware_key(lines: Any) -> list[tuple[str, str, int, int]]:
    """GPUs per (kind, GPU type), bought and in total: the same GPUs in servers of another size priced alike (30
    RTX 6000 Ada as 7 x 4 + 1 x 2 or as 15 x 2 GPUs, both at half a 4-GPU server per pair) are the same hardware."""
    gpus: dict[tuple[str, str], list[int]] = {}
    for x in lines or []:
        count = gpus.setdefault((x.kind, x.gpu), [0, 0])
        count[0] += x.units * x.gpus_per_unit
        count[1] += x.bought * x.gpus_per_unit
    return sorted((kind, gpu, total, bought) for (kind, gpu), (total, bought) in gpus.items())


@pytest.mark.slow
@pytest.mark.parametrize("example", [*EXAMPLES, EP_CASE], ids=lambda p: p.stem)
def test_estimate_agrees_with_solve_on_design_1(example: Path, catalog: Any) -> None:
    from clusterplan.plan import ServingPlan

    resolved, design = _plan(example, catalog)
    if example == EP_CASE:
        from clusterplan.design.check import check_plan

        assert any(g.ep > 1 and g.attention_dp for w in design.workloads for g in getattr(w, "groups", []))
        assert check_plan(design, resolved, catalog) == []  # the checker reprices the EP layout as solve did
    names = [w.name for w in resolved.requirement.workloads]
    bad = Mismatches()
    priced: list[tuple[str, tuple[float, float, float, float | None, Any]]] = []
    for wp in design.workloads:
        index = names.index(wp.workload)
        if isinstance(wp, ServingPlan):
            group_money = []
            for g in wp.groups:
                where = "owned" if g.owned_replicas else "cloud"
                assert g.owned_replicas == 0 or g.cloud_replicas == 0, "a group on both cloud and owned"
                tag = f"{wp.workload} {g.gpu} TP{g.tp} PP{g.pp} EP{g.ep} {g.quant}"
                est = _estimate(
                    resolved, catalog, workload=index, gpu=g.gpu, dp=g.replicas, tp=g.tp, pp=g.pp, quant=g.quant,
                    kv_quant=g.kv_cache, deployment=where, ep=g.ep, attention_dp=g.attention_dp,
                )  # fmt: skip
                s, load = est.serving, est.load
                assert est.feasible, est.reasons
                assert (est.config.batch, est.config.count) == (g.batch, g.gpus), tag
                if g.role != "aggregated":
                    # A pool replica: the estimate's replica through evaluation/pools.py, as the candidate rows are.
                    from clusterplan.evaluation import pools

                    w = resolved.requirement.workloads[index]
                    a = resolved.requirement.assumptions
                    pr = (
                        pools.prefill_rates(s, resolved.model_for(index), catalog.gpus[g.gpu], w, a)
                        if g.role == "prefill"
                        else pools.decode_rates(s, w, a)
                    )
                    tag = f"{tag} {g.role}"
                    for what, got, want in (
                        ("rate within targets", g.rate_rps, pr.rate_rps),
                        ("rate at the ceiling", g.rate_no_targets_rps, pr.rate_no_targets_rps),
                        ("TTFT", g.ttft_s, pr.ttft_s),
                        ("TPOT", g.tpot_s, pr.tpot_s),
                        ("p95 TTFT", g.p95_ttft_s, pr.p95_ttft_s),
                        ("p95 TPOT", g.p95_tpot_s, pr.p95_tpot_s),
                        ("p95 latency", g.p95_latency_s, pr.p95_e2e_s),
                        ("memory per GPU", g.memory_gib_per_gpu, s.memory.total_gib),
                    ):
                        bad.close(f"{tag} {what}", got, want)
                    group_money.append(_money(est))
                    continue
                bad.close(f"{tag} output tokens/s", g.output_tokens_per_s, s.output_tokens_per_s)
                bad.close(f"{tag} TTFT", g.ttft_s, s.ttft_s)
                bad.close(f"{tag} TPOT", g.tpot_s, s.tpot_s)
                bad.close(f"{tag} rate within targets", g.rate_rps, load.max_rate_for_targets_per_replica)
                rated = load.rated
                bad.close(f"{tag} p95 TTFT", g.p95_ttft_s, rated.p95_ttft_s)
                bad.close(f"{tag} p95 TPOT", g.p95_tpot_s, rated.p95_tpot_s)
                bad.close(f"{tag} p95 latency", g.p95_latency_s, rated.p95_e2e_s)
                bad.close(f"{tag} memory per GPU", g.memory_gib_per_gpu, s.memory.total_gib)
                group_money.append(_money(est))
            hardware = [x for m in group_money for x in (m[4] or [])]
            group_per_m = [m[3] for m in group_money]
            priced.append(
                (
                    wp.workload,
                    (
                        sum(m[0] for m in group_money),
                        sum(m[1] for m in group_money),
                        sum(m[2] for m in group_money),
                        None if None in group_per_m else sum(x for x in group_per_m if x is not None),
                        hardware,
                    ),
                )
            )
        else:
            tag = f"{wp.workload} {wp.gpu} TP{wp.tp} PP{wp.pp} DP{wp.dp}"
            est = _estimate(
                resolved, catalog, workload=index, gpu=wp.gpu, tp=wp.tp, pp=wp.pp, dp=wp.dp, zero=wp.zero_stage,
                recompute=wp.recompute, batch=wp.micro_batch, deployment=wp.deployment, cp=wp.cp,
                vpp=wp.virtual_stages, recompute_layers=wp.recompute_layers or None,
            )  # fmt: skip
            t = est.training
            assert est.feasible, est.reasons
            bad.close(f"{tag} time to train", wp.time_to_train_s, t.time_to_train_s)
            bad.close(f"{tag} tokens/s", wp.tokens_per_s, t.tokens_per_s)
            bad.close(f"{tag} MFU", wp.mfu, t.mfu)
            bad.close(f"{tag} memory per GPU", wp.memory_gib_per_gpu, t.memory.total_gib)
            priced.append((wp.workload, _money(est)))
    c = design.costs
    compared = 0
    for name, (capital, monthly, total, per_m, hardware) in priced:
        whole = len(priced) == 1 or _hardware_key(hardware) == _hardware_key(design.hardware)
        if not whole:
            continue
        compared += 1
        bad.close(f"{name} capital", c.capital_usd, capital, money=True)
        bad.close(f"{name} monthly", c.monthly_usd, monthly, money=True)
        bad.close(f"{name} total over {c.horizon_months:g} months", c.total_usd, total, money=True)
        if len(priced) == 1:
            bad.close(f"{name} $ per million output tokens", c.usd_per_million_output_tokens, per_m, money=True)
    assert compared, f"{example.name}: no workload's estimate covers the design's hardware"
    assert not bad.found, f"{example.name}: estimate and solve disagree:\n  " + "\n  ".join(bad.found)
