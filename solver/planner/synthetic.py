"""Synthetic candidate tables: the model tested (and benchmarked) without the physics or the catalog.

Numbers are plausible, not measured: a GPU type's speed and price scale together, rates grow with
batch and TP with diminishing returns, latency targets cut the rate. Deterministic per seed.
"""

from __future__ import annotations

import random

from clusterplan.candidates.prune import prune_serving_rows, prune_training_rows
from clusterplan.candidates.table import (
    ALLOWED_GPUS,
    DEADLINE,
    DEPLOYMENT,
    TP_NVLINK,
    CandidateTable,
    GpuType,
    Limits,
    Offering,
    ServingRow,
    ServingTargets,
    TrainingRow,
    WorkloadCandidates,
)
from clusterplan.physics.reasons import TpNeedsNvlink
from clusterplan.units import HOURS_PER_MONTH
from clusterplan.wording.reasons import render_reason


def synthetic_gpus(n: int, seed: int = 0) -> dict[str, GpuType]:
    rng = random.Random(seed)
    out: dict[str, GpuType] = {}
    for i in range(n):
        speed = 0.5 + 3.0 * rng.random()
        pcie = rng.random() < 0.3
        gid = f"gpu{i:02d}"
        out[gid] = GpuType(
            id=gid,
            name=f"GPU-{i:02d}",
            gpu_class="datacenter" if not pcie else "workstation",
            tdp_w=round(300 + 400 * speed / 3.5),
            memory_gib=[24, 48, 80, 141][rng.randrange(4)],
            nvlink_domain=1 if pcie else 8,
            max_gpus_per_node=8,
            price_usd=round(5000 + 9000 * speed * (0.8 + 0.4 * rng.random())),
        )
    return out


def synthetic_offerings(
    gpus: dict[str, GpuType], seed: int = 0, *, deployment: str = "either", inventory: dict[str, int] | None = None
) -> list[Offering]:
    rng = random.Random(seed + 1)
    offs: list[Offering] = []
    for gid in sorted(gpus):
        g = gpus[gid]
        per_gpu = (g.price_usd or 10000) / 10000 * (0.9 + 0.5 * rng.random())
        cloud_fb = ((DEPLOYMENT, "deployment: owned excludes cloud instances"),) if deployment == "owned" else ()
        owned_fb = ((DEPLOYMENT, "deployment: cloud excludes owned servers"),) if deployment == "cloud" else ()
        for k in (1, 8) if rng.random() < 0.6 else (8,):
            offs.append(
                Offering(
                    key=f"cloud:{gid}:{k}",
                    kind="cloud",
                    gpu_id=gid,
                    gpus_per_unit=k,
                    tp_domain=min(k, g.nvlink_domain),
                    usd_per_hour=round(per_gpu * k * (1.0 if k == 8 else 1.1), 4),
                    provider="synth",
                    instance_id=f"{gid}.{k}x",
                    forbidden_by=cloud_fb,
                )
            )
        inv = (inventory or {}).get(gid, 0)
        for s in (1, 2, 4, 8):
            power = s * g.tdp_w + 1500 * s / 8
            offs.append(
                Offering(
                    key=f"owned:{gid}:{s}",
                    kind="owned",
                    gpu_id=gid,
                    gpus_per_unit=s,
                    tp_domain=min(s, g.nvlink_domain),
                    # Chassis and network pro rata to GPU slots: the catalog's rule for owned nodes.
                    capital_usd=(g.price_usd or 0) * s + 24000 * s / 8,
                    power_w=power,
                    energy_usd_per_month=power / 1000 * 1.3 * 0.12 * HOURS_PER_MONTH,
                    inventory_units=inv // s if s == 8 else 0,
                    forbidden_by=owned_fb,
                )
            )
    return offs


def synthetic_serving(
    index: int,
    gpus: dict[str, GpuType],
    seed: int,
    *,
    demand_rps: float = 20.0,
    targets: bool = True,
    redundancy: int = 0,
    allow_mixed: bool = False,
    allowed: frozenset[str] | None = None,
) -> WorkloadCandidates:
    rng = random.Random(seed * 7919 + index)
    rows: list[ServingRow] = []
    need_gib = rng.choice([14, 40, 140])
    for gid in sorted(gpus):
        g = gpus[gid]
        speed = (g.price_usd or 10000) / 10000 * (0.7 + 0.6 * rng.random())
        for quant, qf, mem_f in (("bf16", 1.0, 1.0), ("fp8", 1.6, 0.5), ("int4", 1.9, 0.27)):
            for tp in (1, 2, 4, 8):
                if need_gib * mem_f > tp * g.memory_gib * 0.85:
                    continue
                for batch in (1, 4, 16, 64):
                    base = speed * qf * tp**0.85 * batch**0.6
                    nolat = round(base * 0.9, 4)
                    lat = round(nolat * (1.0 - 0.5 * batch / 64), 4) if targets else nolat
                    fb: list[tuple[str, str]] = []
                    if tp > g.nvlink_domain:
                        fb.append((TP_NVLINK, render_reason(TpNeedsNvlink(gpu=g.name, tp=tp))))
                    if allowed is not None and gid not in allowed:
                        fb.append((ALLOWED_GPUS, f"{g.name}: not in constraints.allowed_gpus"))
                    rows.append(
                        ServingRow(
                            gpu_id=gid,
                            tp=tp,
                            pp=1,
                            quant=quant,
                            batch=batch,
                            rate_rps=lat,
                            rate_nolat_rps=nolat,
                            p95_e2e_s=round(1.0 + batch / 16 / speed, 4),
                            memory_gib=need_gib * mem_f / tp,
                            capacity_gib=g.memory_gib,
                            forbidden_by=tuple(fb),
                        )
                    )
    pruned = prune_serving_rows(rows, cross_shape=(not allow_mixed) or redundancy == 0)
    return WorkloadCandidates(
        index=index,
        name=f"serve{index}",
        kind="serving",
        rows=tuple(pruned),
        demand_rps=demand_rps,
        average_rps=demand_rps,
        input_tokens=500,
        output_tokens=200,
        targets=ServingTargets(p95_latency_s=5.0) if targets else ServingTargets(),
        redundancy=redundancy,
        allow_mixed=allow_mixed,
        considered=len(rows),
    )


def synthetic_training(
    index: int, gpus: dict[str, GpuType], offerings: list[Offering], seed: int, *, deadline_days: float = 30.0
) -> WorkloadCandidates:
    rng = random.Random(seed * 104729 + index)
    work = 2e5 * (0.5 + rng.random())  # GPU-hours on a speed-1 GPU
    rows: list[TrainingRow] = []
    for gid in sorted(gpus):
        g = gpus[gid]
        speed = (g.price_usd or 10000) / 10000
        cloud = sorted(
            (o for o in offerings if o.kind == "cloud" and o.gpu_id == gid),
            key=lambda o: o.usd_per_hour / o.gpus_per_unit,
        )
        for tp in (1, 2, 4, 8):
            for dp in (8, 32, 128, 512):
                n = tp * dp
                eff = 0.9 ** (tp.bit_length() - 1) * 0.97 ** (dp.bit_length() - 1)
                hours = work / (n * speed * eff)
                fb: list[tuple[str, str]] = []
                if tp > g.nvlink_domain:
                    fb.append((TP_NVLINK, f"{g.name}: tensor parallel {tp} needs NVLink"))
                if hours * 3600 > deadline_days * 86400:
                    fb.append((DEADLINE, f"{g.name} x{n}: {hours / 24:.1f} d > {deadline_days:g} d"))
                best = None
                for o in cloud:
                    if tp <= o.tp_domain:
                        inst = -(-n // o.gpus_per_unit)
                        best = (o, inst, inst * o.usd_per_hour * hours)
                        break
                rows.append(
                    TrainingRow(
                        gpu_id=gid,
                        tp=tp,
                        pp=1,
                        dp=dp,
                        zero_stage=1,
                        recompute="selective",
                        micro_batch=1,
                        time_to_train_s=hours * 3600,
                        tokens_per_s=1e6 / hours,
                        memory_gib=40,
                        capacity_gib=g.memory_gib,
                        forbidden_by=tuple(fb),
                        cloud_offering=best[0].key if best else None,
                        cloud_instances=best[1] if best else 0,
                        cloud_cost_usd=best[2] if best else 0.0,
                    )
                )
    return WorkloadCandidates(
        index=index,
        name=f"train{index}",
        kind="training",
        rows=tuple(prune_training_rows(rows)),
        deadline_s=deadline_days * 86400,
        tokens=1e11,
        considered=len(rows),
    )


def synthetic_table(
    *,
    gpu_types: int = 3,
    serving: int = 1,
    training: int = 0,
    seed: int = 0,
    mixed: bool = False,
    redundancy: int = 0,
    limits: Limits | None = None,
    demand_rps: float = 20.0,
) -> CandidateTable:
    """A table of ``serving`` and ``training`` workloads on ``gpu_types`` synthetic GPU types; ``limits``
    (default: a 36-month horizon) carries the deployment, allowed GPUs and the inventory the owned
    servers hold."""
    lim = limits or Limits(horizon_months=36)
    inventory = {g: lim.inventory_of(g) for g, _ in lim.inventory} or None  # GPUs owned per type
    gpus = synthetic_gpus(gpu_types, seed)
    offs = synthetic_offerings(gpus, seed, deployment=lim.deployment, inventory=inventory)
    wls: list[WorkloadCandidates] = []
    for _i in range(training):
        wls.append(synthetic_training(len(wls), gpus, offs, seed))
    for _ in range(serving):
        wls.append(
            synthetic_serving(
                len(wls),
                gpus,
                seed,
                demand_rps=demand_rps,
                redundancy=redundancy,
                allow_mixed=mixed,
                allowed=lim.allowed_gpus,
            )
        )
    return CandidateTable(
        workloads=tuple(wls),
        gpus=gpus,
        offerings=tuple(offs),
        limits=lim,
        name=f"synthetic-{gpu_types}x{serving}s{training}t-seed{seed}",
    )
