"""Provider tiers and fabric (catalog providers.yaml) and the quality gate on precision (quality.yaml).

Holds: marketplace offers are planned only when the requirement opts in, and each one left out is
counted with its own reason code; a training run across instances uses only offers with a fabric;
the designs name their provider; serving precisions stay within ``quality.max_loss`` (default
fp8_class), ``constraints.quantizations`` only narrows them and a listed precision beyond the gate is
refused, located; the plan says which precision it chose and cites the published delta.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterplan.candidates.build import build_candidates
from clusterplan.candidates.table import FABRIC, PROVIDER_TIER, CandidateTable
from clusterplan.catalog.load import Catalog, load_catalog_text
from clusterplan.errors import CatalogInputError, InputError
from clusterplan.physics.reasons import NoFabric, TierNotAllowed
from clusterplan.plan import Plan, ServingPlan
from clusterplan.render import plan_markdown
from clusterplan.requirement.load import ResolvedRequirement, load_requirement, load_requirement_text
from conftest import EXAMPLES, EXAMPLES_DIR, plan_file, run_cli, shared_plan

SERVING_8B = """
name: tiers
model: llama-3.1-8b
workloads:
  - kind: serving
    name: chat
    tokens_per_sec: 2k
    input_tokens: 500
    output_tokens: 200
    p95_latency: 5s
deployment: cloud
"""


def _table(text: str, catalog: Catalog) -> CandidateTable:
    return build_candidates(load_requirement_text(text, "req.yaml", catalog), catalog)


def _resolved(text: str, catalog: Catalog) -> ResolvedRequirement:
    return load_requirement_text(text, "req.yaml", catalog)


# ------------------------------------------------------------------------------------------------
# The catalog
# ------------------------------------------------------------------------------------------------


def test_every_instance_provider_has_a_tier(catalog: Catalog) -> None:
    assert set(catalog.provider_ids()) <= set(catalog.providers)
    assert catalog.providers["vast"].tier == "marketplace"
    assert {catalog.providers[p].tier for p in ("aws", "azure", "gcp")} == {"hyperscaler"}
    community = [i for i in catalog.instances.values() if i.provider == "runpod" and i.id.endswith("-community")]
    assert community and all(catalog.tier_of(i) == "marketplace" for i in community)
    secure = [i for i in catalog.instances.values() if i.provider == "runpod" and i.id.endswith("-secure")]
    assert secure and all(catalog.tier_of(i) == "gpu_cloud" for i in secure)


def test_a_user_instance_of_an_unlisted_provider_is_refused_located() -> None:
    text = (
        "instances:\n"
        "  - {provider: acme, id: box, gpu_id: l4, gpus_per_instance: 1, gpu_link: pcie,\n"
        "     on_demand_usd_per_hour: 1.0, region: eu, source: https://example.invalid/q, as_of: 2026-11}\n"
    )
    with pytest.raises(CatalogInputError) as info:
        load_catalog_text(text, "mine.yaml")
    assert "mine.yaml:2:" in str(info.value) and "provider 'acme'" in str(info.value)
    listed = text + (
        "providers:\n  - {id: acme, name: ACME, tier: marketplace, interconnect: none,\n"
        "     source: https://example.invalid/q, as_of: 2026-11}\n"
    )
    assert load_catalog_text(listed, "mine.yaml").providers["acme"].tier == "marketplace"


def test_quality_rows_cite_sources_and_cover_the_planned_precisions(catalog: Catalog) -> None:
    for q in catalog.quality.values():
        assert catalog.source(q.source) is not None, q.id
    for precision in ("fp8", "int8", "int4"):
        assert catalog.quality_for("llama-3.1-70b", precision), precision
        assert catalog.quality_for("falcon-40b", precision), precision  # the cross-family figure


def test_catalog_lists_providers_and_quality() -> None:
    import json

    result = run_cli("catalog", "providers")
    assert result.exit_code == 0 and "marketplace" in result.output and "infiniband" in result.output
    rows = json.loads(run_cli("catalog", "quality", "--json").output)
    assert {r["precision"] for r in rows} >= {"fp8", "int8", "int4", "fp4"}


# ------------------------------------------------------------------------------------------------
# Provider tiers and fabric
# ------------------------------------------------------------------------------------------------


def test_marketplace_offers_are_excluded_by_default_and_counted(catalog: Catalog) -> None:
    table = _table(SERVING_8B, catalog)
    clouds = [o for o in table.offerings if o.kind == "cloud"]
    assert clouds and all(o.tier in ("hyperscaler", "gpu_cloud") for o in clouds)
    assert table.offer_exclusions
    assert all(e.family == PROVIDER_TIER and isinstance(e.reason, TierNotAllowed) for e in table.offer_exclusions)
    assert any(e.reason.offer.startswith("vast:") for e in table.offer_exclusions)  # type: ignore[attr-defined]


def test_a_requirement_opts_in_to_marketplace_offers(catalog: Catalog) -> None:
    text = SERVING_8B + "constraints:\n  provider_tiers: [hyperscaler, gpu_cloud, marketplace]\n"
    table = _table(text, catalog)
    assert any(o.provider == "vast" for o in table.offerings)
    assert not table.offer_exclusions


@pytest.mark.slow
def test_naming_a_marketplace_cloud_without_opting_in_is_refused_located(catalog: Catalog) -> None:
    text = SERVING_8B + "constraints:\n  clouds: [aws, vast]\n"
    with pytest.raises(InputError) as info:
        _resolved(text, catalog)
    assert "req.yaml:" in str(info.value) and "clouds[1]" in str(info.value) and "provider_tiers" in str(info.value)
    opted = text + "  provider_tiers: [hyperscaler, marketplace]\n"
    assert _table(opted, catalog).offer_exclusions == ()
    assert {o.provider for o in _table(opted, catalog).offerings if o.kind == "cloud"} == {"aws", "vast"}


def test_the_70b_examples_cloud_designs_use_no_marketplace_offer(catalog: Catalog, tmp_path: Path) -> None:
    # Its five best designs are owned servers (disaggregated and aggregated): held to cloud, it rents.
    path = tmp_path / "70b-cloud.yaml"
    path.write_text((EXAMPLES_DIR / "70b-serving.yaml").read_text().replace("deployment: either", "deployment: cloud"))
    plan = plan_file(path, catalog, top=5, explain=False)
    cloud = [x for d in plan.designs for x in d.hardware if x.kind == "cloud"]
    assert cloud, "the example should still show a cloud design among its five"
    assert all(catalog.providers[x.provider].tier != "marketplace" for x in cloud)
    assert all(catalog.tier_of(catalog.instance(x.instance_key)) != "marketplace" for x in cloud)


@pytest.mark.slow
def test_multi_instance_training_uses_only_offers_with_a_fabric(catalog: Catalog) -> None:
    resolved = load_requirement(EXAMPLES_DIR / "13b-train-then-serve.yaml", catalog)
    table = build_candidates(resolved, catalog)
    wc = next(w for w in table.workloads if not w.is_serving)
    multi = [r for r in wc.training_rows() if r.cloud_offering is not None and r.cloud_instances > 1]
    assert multi, "the example should plan some layout across several instances"
    assert all(table.offering(r.cloud_offering).fabric for r in multi if r.cloud_offering is not None)
    fabric = [e for e in wc.exclusions if e.family == FABRIC]
    assert fabric and all(isinstance(e.reason, NoFabric) for e in fabric)
    assert len({e.reason.offer for e in fabric}) == len(fabric)  # type: ignore[attr-defined]


def test_the_designs_table_names_the_provider(catalog: Catalog) -> None:
    plan = shared_plan(EXAMPLES_DIR / "mixtral-serving.yaml", catalog, top=1, explain=False)
    d = plan.designs[0]
    # Every provider the design rents from is named (since MoE layers run at the grouped-GEMM efficiency the
    # example's design is three B200 on one provider; before, one B200 on lambda and two H100 NVL on runpod).
    providers = {x.provider for x in d.hardware}
    assert providers and all(f"({p})" in d.summary for p in providers), d.summary
    assert all(f"({p})" in plan_markdown.render(plan) for p in providers)


# ------------------------------------------------------------------------------------------------
# The quality gate
# ------------------------------------------------------------------------------------------------


def _served(plan: Plan) -> set[str]:
    return {g.quant for d in plan.designs for w in d.workloads if isinstance(w, ServingPlan) for g in w.groups}


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_no_example_serves_a_precision_its_gate_refuses(path: Path, catalog: Catalog) -> None:
    plan = shared_plan(path, catalog, top=3, explain=False)
    allowed = {q for g in plan.precision for q in g.allowed}
    served = {"bf16" if q == "fp16" else q for q in _served(plan)}
    assert served <= allowed, (served, allowed)
    assert "int4" not in served or all(g.max_loss == "any" for g in plan.precision)


def test_the_default_gate_is_fp8_class_and_quantizations_only_narrow_it(catalog: Catalog) -> None:
    assert _resolved(SERVING_8B, catalog).requirement.allowed_precisions() == {"bf16", "fp8"}
    anyq = _resolved(SERVING_8B + "quality: {max_loss: any}\n", catalog).requirement
    assert anyq.allowed_precisions() == {"bf16", "fp8", "int8", "fp4", "int4"}
    narrowed = SERVING_8B + "quality: {max_loss: any}\nconstraints:\n  quantizations: [fp16, int4]\n"
    assert _resolved(narrowed, catalog).requirement.allowed_precisions() == {"bf16", "int4"}
    table = _table(SERVING_8B, catalog)
    assert table.limits.quantizations == {"bf16", "fp8"} and table.limits.max_loss == "fp8_class"
    beyond = ("int8", "fp4", "int4")
    assert all(r.quant not in beyond or r.forbidden_by for wc in table.workloads for r in wc.serving_rows())


def test_a_listed_precision_beyond_the_gate_is_refused_located(catalog: Catalog) -> None:
    text = SERVING_8B + "constraints:\n  quantizations: [bf16, int4]\n"
    with pytest.raises(InputError) as info:
        _resolved(text, catalog)
    message = str(info.value)
    assert "req.yaml:" in message and "quantizations[1]" in message
    assert "max_loss: any" in message


@pytest.mark.slow
def test_allowing_int4_lets_a_cheaper_int4_design_win(catalog: Catalog) -> None:
    from clusterplan.pipeline import PlanOptions, plan_requirement

    default = plan_requirement(_resolved(SERVING_8B, catalog), catalog, PlanOptions(top=1, explain=False))
    anyq = plan_requirement(
        _resolved(SERVING_8B + "quality: {max_loss: any}\n", catalog), catalog, PlanOptions(top=1, explain=False)
    )
    assert "int4" not in _served(default)
    assert anyq.designs[0].costs.total_usd <= default.designs[0].costs.total_usd


def test_the_plan_says_which_precision_and_why(catalog: Catalog) -> None:
    plan = plan_file(EXAMPLES_DIR / "70b-serving.yaml", catalog, top=1, explain=False)
    (gate,) = plan.precision
    assert gate.max_loss == "fp8_class" and not gate.from_requirement and gate.allowed == ["bf16", "fp8"]
    assert {q.source for q in gate.evidence if q.precision == "fp8"} == {"NM-L31-70B-FP8"}
    md = plan_markdown.render(plan)
    line = next(x for x in md.splitlines() if "precision:" in x)
    assert "chat serves fp8" in line and "fp8_class (default)" in line and "NM-L31-70B-FP8" in line
    assert "not allowed: int8" in line and "int4" in line
