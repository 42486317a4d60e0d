"""The shipped catalog: every row validates, cites a source that resolves, and agrees with itself.

Parameter counts are checked against what each model's publisher states (within 2%), GPU figures
against the datasheet values the reference sheet gives, and lookups against the names people type.
"""

from __future__ import annotations

import re

import pytest

from clusterplan.catalog.load import Catalog, load_catalog
from clusterplan.catalog.schema import OwnedFigure
from clusterplan.errors import ClusterplanError, UnknownNameError
from clusterplan.physics.params import active_params, total_params

SHIPPED = load_catalog()
AS_OF = re.compile(r"\d{4}(-\d{2}(-\d{2})?)?")


def _resolves(cat: Catalog, ref: str) -> bool:
    return cat.source(ref) is not None


# ---------------------------------------------------------------- models


@pytest.mark.parametrize("model_id", sorted(SHIPPED.models))
def test_computed_params_are_within_2_percent_of_published(model_id: str) -> None:
    model = SHIPPED.models[model_id]
    assert model.published_params is not None, f"{model_id} has no published_params"
    computed = total_params(model)
    assert computed == pytest.approx(model.published_params, rel=0.02), (
        f"{model_id}: computed {computed / 1e9:.3f}B vs published {model.published_params / 1e9:.3f}B"
    )


def test_moe_models_count_active_experts_only() -> None:
    mixtral = SHIPPED.model("mixtral-8x7b")
    assert active_params(mixtral) / 1e9 == pytest.approx(12.9, rel=0.02)
    assert active_params(SHIPPED.model("mixtral-8x22b")) / 1e9 == pytest.approx(39.0, rel=0.02)


def test_gelu_models_are_not_gated_and_falcon_uses_grouped_kv_heads() -> None:
    for model_id in ("gpt-j-6b", "falcon-40b", "falcon-180b", "mpt-7b", "bloom-176b"):
        assert SHIPPED.model(model_id).gated_mlp is False, model_id
    f40, f180 = SHIPPED.model("falcon-40b"), SHIPPED.model("falcon-180b")
    assert (f40.attention_heads, f40.kv_heads, f40.head_dim_eff) == (128, 8, 64)
    assert (f180.attention_heads, f180.kv_heads, f180.head_dim_eff) == (232, 8, 64)
    assert SHIPPED.model("gpt-j-6b").head_dim_eff == 256


@pytest.mark.parametrize(
    "name",
    [
        # the names the calibration measurements use, verbatim
        "GPT-J-6B",
        "Llama-2-7B",
        "Llama-2-70B",
        "LLaMA-7B (v1)",
        "LLaMA-33B (v1, a.k.a. 30B)",
        "LLaMA-65B (v1)",
        "LLaMA-family 7B (6.74B params; exact checkpoint not named)",
        "CodeLlama-7B (Llama-2-7B architecture, vocab 32016)",
        "Falcon-180B",
        "Llama-3.1-8B",
        "Llama-3.1-70B",
        "Llama-3.1-405B",
        "Mistral-7B",
        "Mixtral-8x7B",
        "Mixtral-8x22B",
        "MPT-3b",
        "MPT-7b",
        "MPT-13b",
        "MPT-30b",
        "MPT-70b",
        "GPT-13B (FasterTransformer test model)",
        "Megatron-Turing-NLG-530B",
        "BLOOM-176B",
    ],
)
def test_measurement_model_names_resolve(name: str) -> None:
    assert SHIPPED.model(name).id


@pytest.mark.parametrize(
    "model_id",
    [
        "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
        "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-32b", "qwen2.5-72b",
        "gpt-j-6b", "falcon-40b", "falcon-180b", "llama-65b", "llama-33b",
    ],
)  # fmt: skip
def test_required_models_are_present(model_id: str) -> None:
    assert model_id in SHIPPED.models


def test_unknown_model_suggests_the_closest() -> None:
    with pytest.raises(UnknownNameError) as info:
        SHIPPED.model("llama-3.1-70")
    assert info.value.suggestions[0] == "llama-3.1-70b"
    assert "did you mean 'llama-3.1-70b'" in info.value.render()


# ---------------------------------------------------------------- GPUs


@pytest.mark.parametrize(
    "gpu_id",
    [
        "h200", "h100-sxm", "h100-pcie", "a100-40gb", "a100-80gb", "l40s", "l40", "l4", "a10g", "t4",
        "rtx-a6000", "rtx-5090", "rtx-4090", "rtx-4080-super", "rtx-3090", "b200", "mi300x",
    ],
)  # fmt: skip
def test_required_gpus_are_present(gpu_id: str) -> None:
    assert gpu_id in SHIPPED.gpus


def test_datasheet_figures_win_over_seed_articles() -> None:
    assert SHIPPED.gpu("h100-sxm").dense.bf16_tflops == pytest.approx(989, abs=1)
    assert SHIPPED.gpu("l40s").dense.bf16_tflops == pytest.approx(362, abs=1)
    assert SHIPPED.gpu("h100-sxm").bandwidth_gb_per_s == 3350


@pytest.mark.parametrize(("gpu_id", "gib"), [("h100-sxm", 79.6), ("a100-40gb", 39.4), ("rtx-4090", 23.99)])
def test_memory_gib_is_what_the_driver_reports(gpu_id: str, gib: float) -> None:
    gpu = SHIPPED.gpu(gpu_id)
    assert gpu.memory_gib == pytest.approx(gib, abs=0.05)
    assert gpu.memory_gib <= gpu.memory_gb


def test_fp8_is_native_only_on_hopper_ada_blackwell_and_cdna3() -> None:
    for gpu in SHIPPED.gpus.values():
        fp8_arch = any(a in gpu.architecture for a in ("Hopper", "Ada", "Blackwell", "CDNA 3", "CDNA 4"))
        assert ("fp8" in gpu.native_precisions) == fp8_arch, gpu.id
        for precision in gpu.native_precisions:
            assert gpu.tflops(precision) is not None, (gpu.id, precision)


def test_fp4_is_native_only_on_blackwell_and_cdna4() -> None:
    for gpu in SHIPPED.gpus.values():
        fp4_arch = any(a in gpu.architecture for a in ("Blackwell", "CDNA 4"))
        assert ("fp4" in gpu.native_precisions) == fp4_arch, gpu.id
        assert (gpu.dense.fp4_tflops is not None) == fp4_arch, gpu.id


def test_nvl72_racks_are_one_72_gpu_nvlink_domain_bought_whole() -> None:
    for gpu_id in ("gb200", "gb300"):
        gpu = SHIPPED.gpu(gpu_id)
        assert (gpu.scale_up, gpu.scale_up_domain, gpu.max_gpus_per_node) == ("nvlink", 72, 72), gpu_id
        assert gpu.owned_node_sizes == [72], gpu_id
    for gpu_id in ("b200", "b300", "h20"):
        assert SHIPPED.gpu(gpu_id).scale_up_domain == 8, gpu_id


def test_scale_up_domains() -> None:
    for gpu_id in ("h100-sxm", "h200", "a100-40gb", "a100-80gb", "b200"):
        gpu = SHIPPED.gpu(gpu_id)
        assert (gpu.scale_up, gpu.scale_up_domain) == ("nvlink", 8), gpu_id
    assert (SHIPPED.gpu("mi300x").scale_up, SHIPPED.gpu("mi300x").scale_up_domain) == ("infinity_fabric", 8)
    for gpu_id in ("l40s", "l40", "l4", "a10g", "t4", "rtx-4090", "rtx-5090", "rtx-4080-super"):
        gpu = SHIPPED.gpu(gpu_id)
        assert (gpu.scale_up, gpu.scale_up_domain) == ("pcie", 1), gpu_id
    for gpu_id in ("rtx-a6000", "rtx-3090", "h100-pcie"):  # 2-way NVLink bridges, figures in the reference
        assert SHIPPED.gpu(gpu_id).scale_up_domain == 2, gpu_id


def test_gpu_classes() -> None:
    assert SHIPPED.gpu("rtx-a6000").gpu_class == "workstation"
    assert {SHIPPED.gpu(g).gpu_class for g in ("rtx-5090", "rtx-4090", "rtx-4080-super", "rtx-3090")} == {"consumer"}
    assert SHIPPED.gpu("h100-sxm").gpu_class == "datacenter"


def test_gpu_lookup_accepts_case_and_aliases() -> None:
    assert SHIPPED.gpu("H100-SXM").id == "h100-sxm"
    assert SHIPPED.gpu("H100-SXM-80GB").id == "h100-sxm"  # calibration name
    assert SHIPPED.gpu("RTX-4090-24GB").id == "rtx-4090"
    assert SHIPPED.gpu("NVIDIA H100 80GB HBM3").id == "h100-sxm"  # nvidia-smi name
    assert SHIPPED.gpu("a100_sxm4_80gb").id == "a100-80gb"


def test_unknown_gpu_suggests_h100_variants() -> None:
    with pytest.raises(ClusterplanError) as info:
        SHIPPED.gpu("h100")
    hint = info.value.hint
    assert hint is not None, "an unknown GPU name carries a did-you-mean hint"
    assert "h100-sxm" in hint and "h100-pcie" in hint
    assert info.value.exit_code == 2


# ---------------------------------------------------------------- provenance


def _rows_with_provenance(cat: Catalog) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    rows += [(f"gpus.{k}", g) for k, g in cat.gpus.items()]
    rows += [(f"gpus.{k}.price", g.price) for k, g in cat.gpus.items() if g.price is not None]
    rows += [(f"instances.{k}", i) for k, i in cat.instances.items()]
    rows += [(f"models.{k}", m) for k, m in cat.models.items()]
    for name in type(cat.owned).model_fields:
        value = getattr(cat.owned, name)
        if isinstance(value, OwnedFigure):
            rows.append((f"owned.{name}", value))
        elif isinstance(value, dict):
            rows += [(f"owned.{name}.{c}", f) for c, f in value.items() if isinstance(f, OwnedFigure)]
    return rows


@pytest.mark.parametrize(
    ("where", "row"), _rows_with_provenance(SHIPPED), ids=lambda x: x if isinstance(x, str) else ""
)
def test_every_figure_has_a_source_that_resolves_and_a_date(where: str, row: object) -> None:
    source = getattr(row, "source", None)
    assert source and _resolves(SHIPPED, source), f"{where}: source {source!r}"
    for extra in getattr(row, "also_sources", []):
        assert _resolves(SHIPPED, extra), f"{where}: also_sources {extra!r}"
    assert AS_OF.fullmatch(getattr(row, "as_of", "")), f"{where}: as_of {getattr(row, 'as_of', None)!r}"


def test_rows_with_provisional_fields_are_provisional() -> None:
    marked = [(where, row) for where, row in _rows_with_provenance(SHIPPED) if getattr(row, "provisional_fields", None)]
    assert marked  # the shipped catalog has such rows (runpod's secure-cloud on-demand prices, ...)
    assert [where for where, row in marked if not getattr(row, "provisional", False)] == []


def test_rows_citing_recalled_or_derived_figures_are_provisional() -> None:
    cited = [
        (w, row) for w, row in _rows_with_provenance(SHIPPED) if getattr(row, "source", None) in {"RECALLED", "DERIVED"}
    ]
    assert cited  # the shipped catalog has such rows (owned.yaml's workstation host price, ...)
    assert [where for where, row in cited if not getattr(row, "provisional", False)] == []


def test_sources_have_titles() -> None:
    assert len(SHIPPED.sources) >= 40
    assert all(s.title for s in SHIPPED.sources.values())


# ---------------------------------------------------------------- instances


def test_instance_gpus_resolve_and_fit_in_one_node() -> None:
    for key, inst in SHIPPED.instances.items():
        assert key == inst.key
        gpu = SHIPPED.gpus[inst.gpu_id]
        assert inst.gpus_per_instance <= gpu.max_gpus_per_node, key
    spot = {
        key: inst.spot_usd_per_hour for key, inst in SHIPPED.instances.items() if inst.spot_usd_per_hour is not None
    }
    assert spot and all(price > 0 for price in spot.values()), spot


@pytest.mark.parametrize(
    "key",
    [
        "aws:p4d.24xlarge", "aws:p4de.24xlarge", "aws:p5.48xlarge", "aws:g5.xlarge", "aws:g5.12xlarge",
        "aws:g5.48xlarge", "aws:g6.xlarge", "aws:g6e.48xlarge", "gcp:a2-highgpu-8g", "gcp:a3-highgpu-8g",
        "azure:Standard_ND96asr_v4", "azure:Standard_ND96isr_H100_v5", "lambda:gpu_8x_h100_sxm5",
        "runpod:1x-h100-sxm-secure", "coreweave:hgx-h100-8x",
    ],
)  # fmt: skip
def test_required_instances_are_present(key: str) -> None:
    assert SHIPPED.instance(key).key == key


def test_per_gpu_priced_rows_are_n_times_the_per_gpu_price() -> None:
    rows = [i for i in SHIPPED.instances.values() if i.per_gpu_pricing]
    assert {i.provider for i in rows} >= {"lambda", "runpod"}
    for inst in rows:
        match = re.match(r"([\d.]+) USD per GPU-hour x (\d+)", inst.notes or "")
        assert match, inst.key
        per_gpu, n = float(match.group(1)), int(match.group(2))
        assert n == inst.gpus_per_instance
        assert inst.on_demand_usd_per_hour == pytest.approx(n * per_gpu, abs=1e-4), inst.key
    runpod_sizes = {i.gpus_per_instance for i in rows if i.provider == "runpod" and i.gpu_id == "h100-sxm"}
    assert runpod_sizes == {1, 2, 4, 8}


def test_instances_for_filters_and_sorts_by_price_per_gpu() -> None:
    rows = SHIPPED.instances_for("H100-SXM", providers=["AWS", "azure"])
    assert {i.provider for i in rows} == {"aws", "azure"}
    per_gpu = [i.on_demand_usd_per_hour / i.gpus_per_instance for i in rows]
    assert per_gpu == sorted(per_gpu)
    assert [i.key for i in SHIPPED.instances_for("h100-sxm", regions=["eastus"])] == ["azure:Standard_ND96isr_H100_v5"]
    with pytest.raises(UnknownNameError):
        SHIPPED.instances_for("h100")


def test_providers_are_lower_case() -> None:
    assert all(p == p.lower() for p in SHIPPED.provider_ids())
    assert {"aws", "gcp", "azure", "lambda", "runpod", "coreweave"} <= set(SHIPPED.provider_ids())


# ---------------------------------------------------------------- owned, fingerprint, loading


def test_owned_costs_cover_every_gpu_class() -> None:
    owned = SHIPPED.owned
    assert set(owned.server_usd_per_node) == {"datacenter", "workstation", "consumer"}
    assert owned.pue.value >= 1
    assert owned.electricity_usd_per_kwh.value == pytest.approx(0.0977)
    assert owned.power_overhead_w_for("consumer").value < owned.power_overhead_w_for("datacenter").value


def test_fingerprint_is_stable_and_a_sha256() -> None:
    again = load_catalog()
    assert again.fingerprint() == SHIPPED.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{64}", SHIPPED.fingerprint())


def test_catalog_data_is_package_data() -> None:
    from importlib import resources

    names = {p.name for p in resources.files("clusterplan.catalog_data").iterdir()}
    assert {"gpus.yaml", "instances.yaml", "models.yaml", "owned.yaml", "sources.yaml"} <= names


def test_counts() -> None:
    assert len(SHIPPED.gpus) >= 17
    assert len(SHIPPED.instances) >= 60
    assert len(SHIPPED.models) >= 20


def test_mi300x_has_a_sourced_cloud_price_and_purchase_price() -> None:
    """An AMD MI300X can be rented (Azure ND MI300X v5, with its InfiniBand fabric) and bought, each price cited."""
    rows = [i for i in SHIPPED.instances.values() if i.gpu_id == "mi300x"]
    assert rows, "no cloud row rents an MI300X"
    azure = next(i for i in rows if i.provider == "azure")
    assert azure.gpus_per_instance == 8 and azure.on_demand_usd_per_hour > 0 and azure.network_gbit_per_s
    assert azure.source in SHIPPED.sources
    price = SHIPPED.gpu("mi300x").price
    assert price is not None and price.usd > 0 and price.source in SHIPPED.sources
