"""One path per design: ``estimate`` given ``solve``'s top design reports the same figures.

For every example (and the shared cases beside the checkout, where present), a disaggregated variant of the 70B
example and an MoE expert-parallel case: plan it through the entry point ``clusterplan solve`` uses, take design 1,
and estimate each of its workloads three ways:

* the service: :func:`clusterplan.design.estimate_design.design_pins` of the design, through
  :func:`~clusterplan.design.estimate_design.estimate_design`;
* ``clusterplan estimate FILE --design PLAN.json --workload W --json``, the plan written as ``solve --json`` writes it;
* ``clusterplan estimate`` with the flags a user would type for the same design (``--prefill-*`` / ``--decode-*``
  per pool group).

Each replica group (or pool) is compared with the plan's group: throughput, latencies, rates and memory per GPU
to a relative 1e-9 (they come from the same functions, so any difference is a second path); the design's costs to
the cent. The three ways must give the same figures.

A demand profile's design (``8b-daily-profile``) runs a base every hour and burst replicas rented by the hour: the
estimate pins both (``--burst``), builds the same autoscaler and prices the burst in its costs as ``solve`` does.

Costs: in a multi-workload design the hardware may be shared (``schedule: sequential`` trains, then serves, on the
same owned servers): there each workload whose own hardware is the whole design's is compared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, EXAMPLES_DIR, ROOT, run_cli, shared_plan

# Design 1 of this requirement is an MoE expert-parallel layout (EP with attention data-parallel).
EP_CASE = ROOT / "tests" / "data" / "requirements" / "mixtral-h100-ep.yaml"
# Design 1 of this one is wide EP: an expert-parallel stage over two 8-GPU servers (issue 31).
WIDE_EP_CASE = ROOT / "tests" / "data" / "requirements" / "deepseek-v3-wide-ep.yaml"
SHARED_CASES = sorted((ROOT.parent / "shared" / "cases").glob("*.yaml"))
POOLED_70B = "70b-serving-pools"  # the 70B example with disaggregation: required (written per test)

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


def _hardware_key(lines: Any) -> list[tuple[str, str, int, int]]:
    """GPUs per (kind, GPU type), bought and in total: the same GPUs in servers of another size priced alike (30
    RTX 6000 Ada as 7 x 4 + 1 x 2 or as 15 x 2 GPUs, both at half a 4-GPU server per pair) are the same hardware."""
    gpus: dict[tuple[str, str], list[int]] = {}
    for x in lines or []:
        count = gpus.setdefault((x.kind, x.gpu), [0, 0])
        count[0] += x.units * x.gpus_per_unit
        count[1] += x.bought * x.gpus_per_unit
    return sorted((kind, gpu, total, bought) for (kind, gpu), (total, bought) in gpus.items())


def _case_path(case: str, tmp_path: Path) -> Path:
    if case == POOLED_70B:
        pooled = tmp_path / f"{POOLED_70B}.yaml"
        text = (EXAMPLES_DIR / "70b-serving.yaml").read_text()
        pooled.write_text(
            text.replace("    peak_to_average: 1.2", "    peak_to_average: 1.2\n    disaggregation: required")
        )
        return pooled
    return Path(case)


def _group_figures(g: Any, part: Any, tag: str, bad: Mismatches) -> None:
    """One planned replica group against its estimate (an aggregated group, or a pool through evaluation/pools.py)."""
    s = part.serving
    assert (part.config.batch, part.config.count, part.config.role) == (g.batch, g.gpus, g.role), tag
    if g.role != "aggregated":
        pool = part.pool
        for what, got, want in (
            ("rate within targets", g.rate_rps, pool.rate_rps),
            ("rate at the ceiling", g.rate_no_targets_rps, pool.rate_no_targets_rps),
            ("TTFT", g.ttft_s, pool.ttft_s),
            ("TPOT", g.tpot_s, pool.tpot_s),  # a prefill pool's: None, it emits no output tokens
            ("p95 TTFT", g.p95_ttft_s, pool.rated_p95_ttft_s),
            ("p95 TPOT", g.p95_tpot_s, pool.rated_p95_tpot_s),
            ("mean TTFT", g.mean_ttft_s, None),  # a pool's means are not modelled: absent in both
            ("p95 latency", g.p95_latency_s, pool.rated_p95_e2e_s),
            ("memory per GPU", g.memory_gib_per_gpu, s.memory.total_gib),
        ):
            bad.close(f"{tag} {what}", got, want)
        return
    load = part.load
    bad.close(f"{tag} output tokens/s", g.output_tokens_per_s, s.output_tokens_per_s)
    bad.close(f"{tag} TTFT", g.ttft_s, s.ttft_s)
    bad.close(f"{tag} TPOT", g.tpot_s, s.tpot_s)
    bad.close(f"{tag} rate within targets", g.rate_rps, load.max_rate_for_targets_per_replica)
    bad.close(f"{tag} p95 TTFT", g.p95_ttft_s, load.rated.p95_ttft_s)
    bad.close(f"{tag} p95 TPOT", g.p95_tpot_s, load.rated.p95_tpot_s)
    bad.close(f"{tag} p95 latency", g.p95_latency_s, load.rated.p95_e2e_s)
    bad.close(f"{tag} mean TTFT", g.mean_ttft_s, load.rated.mean_ttft_s)
    bad.close(f"{tag} memory per GPU", g.memory_gib_per_gpu, s.memory.total_gib)


def _training_figures(wp: Any, part: Any, bad: Mismatches) -> None:
    tag = f"{wp.workload} {wp.gpu} TP{wp.tp} PP{wp.pp} DP{wp.dp}"
    t = part.training
    assert part.feasible, part.reasons
    bad.close(f"{tag} time to train", wp.time_to_train_s, t.time_to_train_s)
    bad.close(f"{tag} tokens/s", wp.tokens_per_s, t.tokens_per_s)
    bad.close(f"{tag} MFU", wp.mfu, t.mfu)
    bad.close(f"{tag} memory per GPU", wp.memory_gib_per_gpu, t.memory.total_gib)


def _flags(wp: Any) -> list[str] | None:
    """The ``clusterplan estimate`` flags a user types for one workload of a design (None: several aggregated groups,
    which the flags cannot name: ``--design`` can)."""
    from clusterplan.plan import ServingPlan

    if not isinstance(wp, ServingPlan):
        opts = set(wp.memory_options)
        args = ["--gpu", wp.gpu, "--tp", wp.tp, "--pp", wp.pp, "--dp", wp.dp, "--zero", wp.zero_stage]
        args += ["--recompute", wp.recompute, "--batch", wp.micro_batch, "--deployment", wp.deployment]
        args += ["--cp", wp.cp, "--vpp", wp.virtual_stages, "--ep", wp.ep]
        args += ["--recompute-layers", wp.recompute_layers] if wp.recompute_layers else []
        if "adamw8bit" in opts:
            args += ["--optimizer", "paged_adamw8bit" if "paged_optimizer" in opts else "adamw8bit"]
        offload = {"optimizer_offload", "activation_offload"} & opts
        args += ["--offload", "both" if len(offload) == 2 else "none" if not offload else offload.pop().split("_")[0]]
        return [str(a) for a in args]
    if not wp.disaggregated:
        if len(wp.groups) > 1:
            return None
        g = wp.groups[0]
        where = "owned" if g.owned_replicas else "cloud"
        args = ["--gpu", g.gpu, "--dp", g.replicas - g.burst_replicas, "--tp", g.tp, "--pp", g.pp, "--quant", g.quant]
        args += ["--kv-quant", g.kv_cache, "--batch", g.batch, "--deployment", where, "--ep", g.ep]
        args += ["--burst", g.burst_replicas] if g.burst_replicas else []  # a demand profile's, rented by the hour
        return [str(a) for a in args] + (["--attention-dp"] if g.attention_dp else [])
    args = []
    for g in wp.groups:
        r = g.role
        where = "owned" if g.owned_replicas else "cloud"
        args += [f"--{r}-gpu", g.gpu, f"--{r}-count", g.gpus, f"--{r}-tp", g.tp, f"--{r}-pp", g.pp]
        args += [f"--{r}-quant", g.quant, f"--{r}-kv-quant", g.kv_cache, f"--{r}-batch", g.batch]
        args += [f"--{r}-deployment", where, f"--{r}-ep", g.ep]
    return [str(a) for a in args]


def _without(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``data`` less ``keys`` at any depth (what differs by how the design was given: its source, the choices)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        if k in keys:
            continue
        if isinstance(v, dict):
            v = _without(v, *keys)
        elif isinstance(v, list):
            v = [_without(x, *keys) if isinstance(x, dict) else x for x in v]
        out[k] = v
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [*map(str, EXAMPLES), POOLED_70B, str(EP_CASE), str(WIDE_EP_CASE), *map(str, SHARED_CASES)],
    ids=lambda p: Path(p).stem,
)
def test_estimate_reproduces_design_1(case: str, catalog: Any, tmp_path: Path) -> None:
    from clusterplan.design.estimate_design import design_pins, estimate_design
    from clusterplan.plan import ServingPlan
    from clusterplan.render import jsonout
    from clusterplan.requirement.load import load_requirement

    path = _case_path(case, tmp_path)
    resolved = load_requirement(path, catalog)
    plan = shared_plan(path, catalog, top=1, explain=False)  # plan_requirement, the entry point solve uses
    assert plan.designs, f"{path.name}: no design"
    design = plan.designs[0]
    if case == POOLED_70B:
        assert all(isinstance(w, ServingPlan) and w.disaggregated for w in design.workloads)
    if "profile:" in path.read_text():  # the burst tier is exercised, not only a flat base
        assert any(g.burst_replicas for w in design.workloads for g in getattr(w, "groups", []))
    if case == str(EP_CASE):
        assert any(g.ep > 1 and g.attention_dp for w in design.workloads for g in getattr(w, "groups", []))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(jsonout.render(plan))
    bad = Mismatches()
    compared = 0
    every: list[tuple[Any, Any]] = []
    for wp in design.workloads:
        est = estimate_design(
            resolved.requirement, list(resolved.models), catalog, design_pins(design, resolved.requirement, wp.workload),
            "plan.json design 1",
        )  # fmt: skip
        assert est.feasible, [p.reasons for p in est.parts]
        if isinstance(wp, ServingPlan):
            groups = [g for g in wp.groups for n in (g.owned_replicas, g.cloud_replicas) if n > 0]
            assert len(groups) == len(est.parts)
            for g, part in zip(groups, est.parts, strict=True):
                _group_figures(g, part, f"{wp.workload} {g.gpu} TP{g.tp} PP{g.pp} EP{g.ep} {g.quant} {g.role}", bad)
            bad.close(f"{wp.workload} capacity", wp.capacity_rps, est.capacity_rps)
            # A demand profile's fleet (base every hour, burst replicas by the hour): the same autoscaler, its burst
            # in the costs below.
            assert est.autoscaler == wp.autoscaler, f"{wp.workload}: autoscaler {est.autoscaler} != {wp.autoscaler}"
        else:
            _training_figures(wp, est.parts[0], bad)
        c, e = design.costs, est.costs
        assert e is not None, f"{wp.workload}: the estimate priced nothing"
        if len(design.workloads) == 1 or _hardware_key(est.hardware) == _hardware_key(design.hardware):
            compared += 1
            # On the same servers one after another (sequential), the design also operates the other workloads'
            # serving pools, which this workload's estimate does not hold (13B: the pretrain run beside product's
            # pool): those pools' operations are the only difference.
            others = c.pool_operations_usd_per_month - e.pool_operations_usd_per_month
            bad.close(f"{wp.workload} capital", c.capital_usd, e.capital_usd, money=True)
            bad.close(f"{wp.workload} monthly", c.monthly_usd - others, e.monthly_usd, money=True)
            bad.close(
                f"{wp.workload} total over {c.horizon_months:g} months",
                c.total_usd - others * c.horizon_months,
                e.total_usd,
                money=True,
            )
            if len(design.workloads) == 1:
                per_m = (c.usd_per_million_output_tokens, e.usd_per_million_output_tokens)
                bad.close(f"{wp.workload} $ per million output tokens", *per_m, money=True)
        if len(est.parts) == 1:  # one group: its own pricing (what the flags print) is the design's
            part = est.parts[0]
            alone = min((x for x in (part.cloud, part.owned) if x is not None), key=lambda x: x.costs.total_usd)
            bad.close(f"{wp.workload} the group's own monthly", e.monthly_usd, alone.costs.monthly_usd, money=True)
            bad.close(f"{wp.workload} the group's own total", e.total_usd, alone.costs.total_usd, money=True)

        # The same design through the command: --design PLAN.json, then the flags a user would type.
        wanted = est.model_dump(mode="json")
        by_file = run_cli("estimate", str(path), "--design", str(plan_file), "--workload", wp.workload, "--json")
        assert by_file.exit_code == 0, by_file.output
        got = json.loads(by_file.stdout)
        assert _without(got, "source") == _without(wanted, "source"), f"{wp.workload}: --design differs"
        flags = _flags(wp)
        if flags is not None:
            by_flags = run_cli("estimate", str(path), "--workload", wp.workload, *flags, "--json")
            assert by_flags.exit_code == 0, by_flags.output
            typed = json.loads(by_flags.stdout)
            if "parts" not in typed:  # one aggregated group or a training layout: the plain estimate
                typed, wanted = {"parts": [typed]}, {"parts": wanted["parts"]}
            assert _without(typed, "source", "choices") == _without(wanted, "source", "choices"), (
                f"{wp.workload}: the flags {' '.join(flags)} differ from the design"
            )
        every.append((e, est.hardware))
    if not compared:  # concurrent workloads on hardware of their own: the design is their sum
        together = [x for _, lines in every for x in lines]
        assert _hardware_key(together) == _hardware_key(design.hardware), f"{path.name}: hardware differs"
        compared += 1
        c = design.costs
        # A GPU type two workloads both hold is operated once by the fleet (pricing.operated_gpu_types), while each
        # workload's estimate pays it alone: the sum less the types counted twice.
        from clusterplan.evaluation.pricing import Operations, operated_gpu_types

        rate = Operations.of(resolved.requirement.owned_costs(catalog.owned)).usd_per_gpu_type_month
        twice = sum(e.gpu_types_operated for e, _ in every) - len(operated_gpu_types(together))
        shared = {"capital_usd": 0.0, "monthly_usd": rate * twice, "total_usd": rate * twice * c.horizon_months}
        for what in ("capital_usd", "monthly_usd", "total_usd"):
            summed = sum(getattr(e, what) for e, _ in every) - shared[what]
            bad.close(f"design {what}", getattr(c, what), summed, money=True)
    assert compared, f"{path.name}: no workload's estimate covers the design's hardware"
    assert not bad.found, f"{path.name}: estimate and solve disagree:\n  " + "\n  ".join(bad.found)
