"""Offerings: every way to obtain a GPU type (a cloud instance or an owned server size), and the requirement's limits."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from clusterplan.physics import cost
from clusterplan.physics.reasons import NoFabric, Reason, TierNotAllowed, TpExceedsNvlinkDomain, TpNeedsNvlink
from clusterplan.wording.reasons import render_reason

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.catalog.schema import CloudInstance, GpuSpec
    from clusterplan.requirement.schema import Requirement
from clusterplan.candidates.table import (
    ALLOWED_GPUS,
    ALLOWED_QUANT,
    DEPLOYMENT,
    TP_NVLINK,
    Exclusion,
    GpuType,
    Limits,
    Offering,
    excluded,
    half_equivalent,
)
from clusterplan.requirement.schema import DEFAULT_PROVIDER_TIERS


def limits_of(req: Requirement, catalog: Catalog) -> Limits:
    c = req.constraints
    allowed: frozenset[str] | None = None
    if c.allowed_gpus is not None or c.excluded_gpus:
        ids = {catalog.gpu(n).id for n in c.allowed_gpus} if c.allowed_gpus is not None else set(catalog.gpus)
        ids -= {catalog.gpu(n).id for n in c.excluded_gpus}
        allowed = frozenset(ids)
    # The quality gate decides (Requirement.allowed_precisions); the allowed_quant family enforces it.
    quants = req.allowed_precisions()
    inventory: dict[str, int] = defaultdict(int)
    for item in c.inventory:
        inventory[catalog.gpu(item.gpu).id] += item.count
    return Limits(
        horizon_months=req.budget.horizon,
        budget_capital_usd=req.budget.capital,
        budget_monthly_usd=req.budget.monthly,
        budget_total_usd=req.budget.total,
        max_gpus=c.max_gpus,
        max_power_w=c.max_power,
        deployment=req.deployment,
        schedule=req.schedule,
        allowed_gpus=allowed,
        quantizations=quants,
        max_loss=req.max_loss,
        inventory=tuple(sorted(inventory.items())),
        max_gpu_types=req.fleet.max_gpu_types,
        operations_usd_per_gpu_type_month=req.owned_costs(catalog.owned).gpu_type_operations_rate(),
        operations_usd_per_pool_month=req.owned_costs(catalog.owned).pool_operations_rate(),
    )


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def gpu_type_of(spec: GpuSpec) -> GpuType:
    domain = _pow2_floor(spec.scale_up_domain)  # 1 for PCIe-only; never above max_gpus_per_node (schema)
    return GpuType(
        id=spec.id,
        name=spec.name,
        gpu_class=spec.gpu_class,
        tdp_w=spec.tdp_w,
        memory_gib=spec.memory_gib,
        nvlink_domain=domain,
        max_gpus_per_node=spec.max_gpus_per_node,
        price_usd=spec.price.usd if spec.price is not None else None,
    )


def inventory_servers(count: int, max_per_node: int, sizes: Sequence[int]) -> Counter[int]:
    """Servers an inventory of ``count`` GPUs is assumed to sit in: as many of the largest size the GPU
    ships in as fit, the remainder in smaller power-of-two sizes (binary decomposition)."""
    usable = sorted((s for s in sizes if s <= max_per_node), reverse=True)
    out: Counter[int] = Counter()
    left = count
    for s in usable:
        if s <= 0:
            continue
        out[s] += left // s
        left %= s
    return Counter({s: n for s, n in out.items() if n})


def _instances_in_scope(catalog: Catalog, req: Requirement, gpus: dict[str, GpuType]) -> Iterator[CloudInstance]:
    """Instances of a GPU type in the table, in the allowed clouds and regions, with a price of the kind asked."""
    c = req.constraints
    providers = [p.lower() for p in c.clouds] if c.clouds else None
    for key in sorted(catalog.instances):
        inst = catalog.instances[key]
        if inst.gpu_id not in gpus:
            continue
        if providers is not None and inst.provider.lower() not in providers:
            continue
        if c.regions and inst.region not in c.regions:
            continue
        if c.pricing == "spot" and inst.spot_usd_per_hour is None:
            continue
        yield inst


def _tier_allowed(catalog: Catalog, req: Requirement, inst: CloudInstance) -> bool:
    """Whether the offer's provider tier is one the requirement plans with (default: no marketplace)."""
    tiers = req.constraints.provider_tiers or DEFAULT_PROVIDER_TIERS
    return catalog.tier_of(inst) in tiers


def has_fabric(catalog: Catalog, inst: CloudInstance) -> bool:
    """Several instances can train together: the provider sells a fabric and the row gives its bandwidth."""
    return catalog.providers[inst.provider].has_fabric and inst.network_gbit_per_s is not None


def tier_exclusions(catalog: Catalog, req: Requirement, gpus: dict[str, GpuType]) -> list[Exclusion]:
    """Cloud offers ruled out before the model because their provider tier is not allowed, one per offer."""
    return [
        excluded(inst.gpu_id, TierNotAllowed(gpu=gpus[inst.gpu_id].name, offer=inst.key, tier=catalog.tier_of(inst)))
        for inst in _instances_in_scope(catalog, req, gpus)
        if not _tier_allowed(catalog, req, inst)
    ]


def network_per_gpu(catalog: Catalog, inst: CloudInstance) -> float:
    """GB/s of the instance's fabric per GPU (``network_gbit_per_s`` / 8 / GPUs; units.py's 8 bits a byte), 0 with
    no fabric: what an all-to-all across instances gets per GPU (p5 3,200 Gbit/s over 8 GPUs: 50 GB/s)."""
    if not has_fabric(catalog, inst) or inst.network_gbit_per_s is None:
        return 0.0
    return inst.network_gbit_per_s / 8.0 / inst.gpus_per_instance


def fabric_exclusion(o: Offering, gpu_name: str, gpus: int) -> Exclusion | None:
    """The exclusion of a fabric-less cloud offer a training layout of ``gpus`` GPUs would need several of."""
    if o.kind != "cloud" or o.fabric or gpus <= o.gpus_per_unit:
        return None
    return excluded(o.gpu_id, NoFabric(gpu=gpu_name, offer=o.label, instances=-(-gpus // o.gpus_per_unit)))


def serving_on_spot(req: Requirement) -> bool:
    """Serving replicas may run on spot: every serving workload says it is interruptible (the model pools a GPU
    type's cloud instances across serving workloads, so one that is not would share them)."""
    serving = [w for w in req.workloads if w.kind == "serving"]
    return bool(serving) and all(w.interruptible for w in serving)


def _terms_of(
    catalog: Catalog, req: Requirement, inst: CloudInstance, g: GpuType, limits: Limits
) -> Iterator[Offering]:
    """The offerings one instance row gives under the requirement's pricing: on demand; each commitment the row
    prices (``auto`` only; for serving, since a training run is billed by the hour); spot where some workload is
    interruptible (``auto``) or always (``spot``, every workload interruptible)."""
    pricing = req.constraints.pricing
    domain = 1 if inst.gpu_link == "pcie" else _pow2_floor(min(inst.gpus_per_instance, g.nvlink_domain))
    span = 1 if inst.gpu_link == "pcie" else min(inst.gpus_per_instance, catalog.gpus[inst.gpu_id].scale_up_domain)
    forbidden = ((DEPLOYMENT, "deployment: owned excludes cloud instances"),) if limits.deployment == "owned" else ()
    base = Offering(
        key=f"cloud:{inst.key}",
        kind="cloud",
        gpu_id=inst.gpu_id,
        gpus_per_unit=inst.gpus_per_instance,
        tp_domain=domain,
        usd_per_hour=inst.on_demand_usd_per_hour,
        provider=inst.provider,
        region=inst.region,
        instance_id=inst.id,
        tier=catalog.tier_of(inst),
        fabric=has_fabric(catalog, inst),
        network_gb_per_s_per_gpu=network_per_gpu(catalog, inst),
        forbidden_by=forbidden,
        domain_gpus=span,
    )
    if pricing != "spot":
        yield base
    if pricing == "auto":
        for c in inst.commitments:
            term = cost.term_of(c.term_months)
            yield replace(
                base, key=f"{base.key}:{term}", usd_per_hour=c.usd_per_hour, term=term, term_months=c.term_months
            )
    interruptible = any(w.interruptible for w in req.workloads)
    if inst.spot_usd_per_hour is not None and (pricing == "spot" or (pricing == "auto" and interruptible)):
        yield replace(
            base, key=f"{base.key}:spot", usd_per_hour=inst.spot_usd_per_hour, term="spot", serves=serving_on_spot(req)
        )


def _without_slower_fabrics(offerings: list[Offering]) -> list[Offering]:
    """Drop a fabric offer that another of the same GPU, size, TP domain and term beats in price with at least its
    network per GPU (the slower one hosts nothing the other cannot, for no less)."""
    same_shape: dict[tuple[str, int, int, bool, str], list[Offering]] = {}
    for o in offerings:  # only an offer of the same shape can beat one: each compared within its shape
        same_shape.setdefault((o.gpu_id, o.gpus_per_unit, o.tp_domain, o.fabric, o.term), []).append(o)
    kept: list[Offering] = []
    for o in offerings:
        if o.fabric and any(
            x is not o
            and x.network_gb_per_s_per_gpu >= o.network_gb_per_s_per_gpu
            and (x.usd_per_hour, x.key) < (o.usd_per_hour, o.key)
            for x in same_shape[o.gpu_id, o.gpus_per_unit, o.tp_domain, o.fabric, o.term]
        ):
            continue
        kept.append(o)
    return kept


def _without_dominated_commitments(offerings: list[Offering], horizon_months: float) -> list[Offering]:
    """Drop a commitment that another offer of the same GPU, size, TP domain and fabric beats both over the horizon
    and by the month (a 3-year term on a 3-month horizon costs 36 months: on demand beats it on both)."""
    kept: list[Offering] = []
    for o in offerings:
        if o.term_months:
            shape = (o.gpu_id, o.gpus_per_unit, o.tp_domain, o.fabric)
            rivals = [
                x
                for x in offerings
                if x is not o
                and x.serves
                and x.term != "spot"
                and (x.gpu_id, x.gpus_per_unit, x.tp_domain, x.fabric) == shape
            ]
            if any(
                x.horizon_usd(horizon_months) <= o.horizon_usd(horizon_months) and x.usd_per_hour <= o.usd_per_hour
                for x in rivals
            ):
                continue
        kept.append(o)
    return kept


def _term_notes(req: Requirement, offerings: list[Offering]) -> list[str]:
    """The pricing rules the plan rests on, stated when they applied."""
    notes: list[str] = []
    if any(o.term_months for o in offerings):
        notes.append(
            "a cloud commitment (1- or 3-year) is paid for whole terms, term x ceil(horizon / term) months, whether "
            "used or not; it is offered for serving only (a training run is billed by the hour)"
        )
    spot = any(o.term == "spot" for o in offerings) and req.constraints.pricing == "auto"
    if spot and not serving_on_spot(req) and any(w.kind == "serving" and w.interruptible for w in req.workloads):
        notes.append(
            "spot instances are planned for interruptible training only: serving replicas share a GPU type's "
            "cloud instances across serving workloads, and not every serving workload is interruptible"
        )
    return notes


def build_offerings(
    catalog: Catalog, req: Requirement, gpus: dict[str, GpuType], limits: Limits
) -> tuple[list[Offering], list[str]]:
    """Cloud instance types (cheapest per GPU type, size and TP domain) and owned server sizes.

    Offers of a provider tier the requirement does not allow are left out (:func:`tier_exclusions`
    lists them); each cloud offering records its tier and whether it has a fabric between instances.
    """
    notes: list[str] = []
    cheapest: dict[tuple[str, int, int, bool, float, str], Offering] = {}
    for inst in _instances_in_scope(catalog, req, gpus):
        if not _tier_allowed(catalog, req, inst):
            continue
        for off in _terms_of(catalog, req, inst, gpus[inst.gpu_id], limits):
            # A fabric offer is kept beside a cheaper fabric-less one of the same shape: only it can train across
            # instances; each term keeps its cheapest offer of a shape.
            # A faster fabric is kept beside a cheaper slower one: a wide-EP replica needs its network per GPU.
            k = (inst.gpu_id, inst.gpus_per_instance, off.tp_domain, off.fabric, off.network_gb_per_s_per_gpu, off.term)
            if k not in cheapest or off.usd_per_hour < cheapest[k].usd_per_hour:
                cheapest[k] = off
    offerings = _without_slower_fabrics([cheapest[k] for k in sorted(cheapest)])
    offerings = _without_dominated_commitments(offerings, limits.horizon_months)
    notes += _term_notes(req, offerings)

    from clusterplan.evaluation.pricing import owned_server

    owned = req.owned_costs(catalog.owned)  # the catalog's figures, with the requirement's owned block
    for gid in sorted(gpus):
        g = gpus[gid]
        inv = limits.inventory_of(gid)
        if g.price_usd is None and not inv:
            continue
        spec = catalog.gpus.get(gid)
        all_sizes = [s for s in sorted(owned.node_sizes) if s <= g.max_gpus_per_node] or [1]
        # Sizes it can be bought in (HGX B200 comes on 8-GPU boards only); inventory may sit in any size.
        buy_sizes = owned.sizes_for(spec) if spec is not None else all_sizes
        inv_nodes = inventory_servers(inv, g.max_gpus_per_node, all_sizes)
        sizes = sorted(set(buy_sizes) | set(inv_nodes))
        cls = g.gpu_class
        for s in sizes:
            # The catalog's rule: a node of s GPU slots carries s / reference of a full node's
            # chassis, network and overhead figures (OwnedCosts.node_fraction).
            server = owned_server(owned, cls, g.tdp_w, g.price_usd, s)
            forbidden = (
                ((DEPLOYMENT, "deployment: cloud excludes owned servers"),) if limits.deployment == "cloud" else ()
            )
            offerings.append(
                Offering(
                    key=f"owned:{gid}:{s}",
                    kind="owned",
                    gpu_id=gid,
                    gpus_per_unit=s,
                    tp_domain=min(_pow2_floor(s), g.nvlink_domain),
                    capital_usd=server.capital_usd,
                    power_w=server.power_w,
                    energy_usd_per_month=server.energy_usd_per_month,
                    colocation_usd_per_month=server.colocation_usd_per_month,
                    support_usd_per_month=server.support_usd_per_month,
                    operations_usd_per_month=server.operations_usd_per_month,
                    inventory_units=inv_nodes.get(s, 0),
                    purchasable=g.price_usd is not None and s in buy_sizes,
                    forbidden_by=forbidden,
                    domain_gpus=min(s, spec.scale_up_domain) if spec is not None else 0,
                )
            )
    notes.append(
        "owned servers cost their purchase price (GPUs, plus chassis and network in proportion to the "
        "node's GPU slots, catalog OwnedCosts.node_fraction) and, each month, electricity at full power x PUE, "
        "colocation per kW of IT power and a support contract as a share of the price per year (catalog "
        "owned.yaml); spares and a resale value at the horizon are not priced (no catalog figure)"
    )
    if limits.operations_usd_per_gpu_type_month or limits.operations_usd_per_pool_month:
        notes.append(
            f"every design, cloud or owned, pays operations each month: ${limits.operations_usd_per_gpu_type_month:,.0f} "
            f"per distinct GPU type it holds and ${limits.operations_usd_per_pool_month:,.0f} per serving pool (a "
            "workload's aggregated, prefill or decode replicas of one GPU type on cloud or owned; owned.yaml, or the "
            "requirement's owned block), so a second GPU type or pool is chosen only when it pays for itself"
        )
    if limits.inventory:
        notes.append(
            "inventory GPUs are assumed to sit in servers of the largest size the GPU ships in "
            "(the remainder in smaller power-of-two servers); they cost power, not capital"
        )
    return offerings, notes


def forbidden_for(gpu: GpuType, limits: Limits, *, tp: int, quant: str | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if limits.allowed_gpus is not None and gpu.id not in limits.allowed_gpus:
        out.append((ALLOWED_GPUS, f"{gpu.name}: not in constraints.allowed_gpus (or excluded)"))
    if quant is not None and limits.quantizations is not None and half_equivalent(quant) not in limits.quantizations:
        out.append((ALLOWED_QUANT, f"{quant}: beyond the quality gate or constraints.quantizations"))
    if tp > gpu.nvlink_domain:
        link: Reason = (
            TpNeedsNvlink(gpu=gpu.name, tp=tp)
            if gpu.nvlink_domain == 1
            else TpExceedsNvlinkDomain(gpu=gpu.name, tp=tp, domain_gpus=gpu.nvlink_domain)
        )
        out.append((TP_NVLINK, render_reason(link)))
    return out
