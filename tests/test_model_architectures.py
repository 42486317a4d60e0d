"""What a model is: MLA, shared experts, dense-first layers, local attention, MTP, and the HF config reader.

Holds the arithmetic that follows from the schema (parameters, KV bytes per token, FLOPs) on the 2025 models,
that a model read from its config.json and the catalog row give the same memory and speed, and that a config
with an attention or MoE field the reader does not understand is refused, located, naming the field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import ModelArchitecture
from clusterplan.errors import ClusterplanError
from clusterplan.physics import kernels, memory, params, serving
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.requirement.hf_config import derived_line, load_hf_config, parse_hf_config, read_hf_config
from conftest import run_cli

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
# Each fixture and the catalog row it must agree with, field by field.
FIXTURE_ROWS = {
    "deepseek-v3.json": "deepseek-v3",
    "kimi-k2.json": "kimi-k2",
    "qwen3-32b.json": "qwen3-32b",
    "qwen3-30b-a3b.json": "qwen3-30b-a3b",
    "llama-4-scout.json": "llama-4-scout",
    "llama-4-maverick.json": "llama-4-maverick",
    "gpt-oss-120b.json": "gpt-oss-120b",
    "glm-4.5.json": "glm-4.5",
}
SHAPE_FIELDS = set(ModelArchitecture.model_fields) - {"name", "published_params"}
DEEPSEEK_LATENT = 512 + 64


def _config(name: str, **changes: object) -> str:
    cfg = json.loads((CONFIGS / name).read_text())
    cfg.update(changes)
    return json.dumps(cfg, indent=2)


@pytest.mark.parametrize("fixture", sorted(FIXTURE_ROWS))
def test_config_reads_to_the_catalog_row(fixture: str, catalog: Catalog) -> None:
    arch = read_hf_config(CONFIGS / fixture)
    row = catalog.model(FIXTURE_ROWS[fixture])
    assert {f: getattr(arch, f) for f in SHAPE_FIELDS} == {f: getattr(row, f) for f in SHAPE_FIELDS}


def test_deepseek_v3_from_config_gives_the_catalog_rows_memory_and_speed(catalog: Catalog) -> None:
    from_config = read_hf_config(CONFIGS / "deepseek-v3.json")
    row = catalog.model("deepseek-v3")
    gpu = catalog.gpu("h200")
    layout, shape = Layout(tp=8, quant="fp8", kv_precision="fp8"), serving.RequestShape(4000.0, 1000.0, 8192.0)
    a, b = (
        serving.estimate_serving(m, gpu, layout, shape, batch=64, assumptions=Assumptions()) for m in (row, from_config)
    )
    assert a.memory == b.memory
    assert (a.max_batch_by_memory, a.decode_step_s, a.prefill_s, a.requests_per_s) == (
        b.max_batch_by_memory,
        b.decode_step_s,
        b.prefill_s,
        b.requests_per_s,
    )
    assert params.active_params(row) == params.active_params(from_config)


def test_deepseek_v3_caches_the_mla_latent_not_128_heads(catalog: Catalog) -> None:
    ds = catalog.model("deepseek-v3")
    for kv, size in (("fp8", 1), ("bf16", 2)):
        latent = DEEPSEEK_LATENT * 61 * size
        assert memory.kv_bytes_per_token_per_gpu(ds, tp=1, pp=1, kv_precision=kv, attention_dp=True) == latent
        # Attention TP replicates the latent on every GPU of the group; it is not split by heads.
        assert memory.kv_bytes_per_token_per_gpu(ds, tp=8, pp=1, kv_precision=kv) == latent
    mha_misread = 2 * 128 * 128 * 61  # 128 K and V heads of 128: the old reading, 57x too large
    assert memory.kv_bytes_per_token_per_gpu(ds, tp=1, pp=1, kv_precision="fp8") * 50 < mha_misread
    assert memory.kv_bytes_per_token_per_gpu(ds, tp=1, pp=2, kv_precision="fp8") == DEEPSEEK_LATENT * 31


def test_deepseek_v3_on_8_h200_at_fp8_holds_hundreds_of_8k_sequences(catalog: Catalog) -> None:
    batch = memory.max_batch_by_memory(
        catalog.model("deepseek-v3"), catalog.gpu("h200"), Layout(tp=8, quant="fp8", kv_precision="fp8"),
        context_tokens=8192, assumptions=Assumptions(),
    )  # fmt: skip
    assert 100 <= batch < 1000


def test_parameter_counts_follow_the_new_fields(catalog: Catalog) -> None:
    ds = catalog.model("deepseek-v3")
    assert params.total_params(ds) == pytest.approx(671e9, rel=0.005)
    assert params.active_params(ds) == pytest.approx(37.5e9, rel=0.02)  # DeepSeek-V3 report: 37B activated
    assert params.total_params(ds) + params.mtp_params(ds) == pytest.approx(685e9, rel=0.02)  # the Hub's count
    assert ds.moe_layer_count == 58
    maverick = catalog.model("llama-4-maverick")
    assert maverick.moe_layer_count == 24 and params.active_params(maverick) == pytest.approx(17e9, rel=0.02)
    assert params.active_params(catalog.model("qwen3-235b-a22b")) == pytest.approx(22e9, rel=0.02)
    # gpt-oss: OpenAI counts the unembedding but not the input embedding as active (5.13B).
    oss = catalog.model("gpt-oss-120b")
    assert params.active_params(oss) - oss.vocab_size * oss.hidden_size == pytest.approx(5.13e9, rel=0.02)


def test_weights_per_gpu_split_experts_and_replicate_the_mla_down_projections(catalog: Catalog) -> None:
    ds = catalog.model("deepseek-v3")
    one = memory.serving_weight_bytes_per_gpu(ds, tp=1, pp=1, quant="fp8")
    eight = memory.serving_weight_bytes_per_gpu(ds, tp=8, pp=1, quant="fp8")
    # kv_a and q_a projections in every layer and the routers of the 58 MoE layers stay whole on every rank.
    replicated = 61 * (7168 * (512 + 64) + 7168 * 1536) + 58 * 256 * 7168
    assert eight == pytest.approx((one - replicated) / 8 + replicated, rel=1e-9)
    # Of two stages (31 + 30 layers) the second is heavier: 30 MoE layers against 28 and the 3 dense ones.
    stage = memory.stage_params_per_gpu(ds, tp=1, pp=2)
    assert (stage.layers, stage.moe_layers) == (30, 30)


def test_local_layers_cap_their_cache_and_attention_at_the_window(catalog: Catalog) -> None:
    oss = catalog.model("gpt-oss-120b")
    per_layer_token = 2 * 8 * 64 * 2  # K and V, 8 heads of 64, 16 bits
    kv = memory.kv_bytes_per_sequence_per_gpu(oss, 8192, tp=1, pp=1, kv_precision="bf16")
    assert kv == per_layer_token * (18 * 8192 + 18 * 128)
    scout = catalog.model("llama-4-scout")
    kv = memory.kv_bytes_per_sequence_per_gpu(scout, 100_000, tp=1, pp=1, kv_precision="bf16")
    assert kv == 2 * 8 * 128 * 2 * (12 * 100_000 + 36 * 8192)
    width = serving.attention_width(oss)
    assert serving.decode_attention_flops(oss, 8192) == 4.0 * (18 * 8192 + 18 * 128) * width
    assert serving.causal_pairs(1000, 128) == 128 * 128 / 2 + (1000 - 128) * 128
    assert serving.causal_pairs(20_000, 8192, "chunked") == 2 * 8192**2 / 2 + 3616**2 / 2
    assert kernels.attention_span_tokens(oss, 4096) == 18 * 4096 + 18 * 128


def test_decode_reads_a_chunked_layer_from_its_own_chunk_only(catalog: Catalog) -> None:
    """Decoding positions 8,192-9,216 with 8,192-token chunks attends the new chunk's 0-1,023 keys (mean 512) on a
    chunked layer, not 8,192; a sliding window past its width attends the window throughout."""
    scout, oss = catalog.model("llama-4-scout"), catalog.model("gpt-oss-120b")
    assert serving.decode_local_tokens(scout, 8192, 1024) == pytest.approx(512)
    assert serving.decode_local_tokens(scout, 1024, 1024) == pytest.approx(1024 + 512)  # within the first chunk
    assert serving.decode_local_tokens(oss, 1024, 1024) == pytest.approx(128)
    assert serving.decode_local_tokens(catalog.model("llama-3.1-8b"), 1024, 1024) is None
    per_layer_token = 2 * 8 * 128 * 2
    read = memory.kv_bytes_per_sequence_per_gpu(scout, 8704, tp=1, pp=1, kv_precision="bf16", local_tokens=512)
    assert read == per_layer_token * (12 * 8704 + 36 * 512)
    est = serving.estimate_serving(
        scout, catalog.gpu("h200"), Layout(quant="fp8", kv_precision="bf16"), serving.RequestShape(8192, 1024, 9216),
        batch=8, assumptions=Assumptions(engine="tensorrt-llm"),
    )  # fmt: skip
    assert est.step_model is not None
    bw = (
        catalog.gpu("h200").bandwidth_gb_per_s
        * 1e9
        * Assumptions(engine="tensorrt-llm").memory_bandwidth_efficiency.of("datacenter")
    )
    assert est.step_model.kv_per_seq_s == pytest.approx(read / bw)


def test_mla_attention_flops_are_the_absorbed_form_in_decode(catalog: Catalog) -> None:
    ds = catalog.model("deepseek-v3")
    # Decode (FlashMLA, SGLang forward_absorb): 2·heads·(576 + 512) per cached token per layer.
    assert 4 * serving.decode_attention_width(ds) == 2 * 128 * (DEEPSEEK_LATENT + 512)
    # Prefill and training in the multi-head form: 2·heads·(192 + 128) per (query, key) pair.
    assert 4 * serving.attention_width(ds) == 2 * 128 * (192 + 128)
    n = params.non_embedding_params(ds, active=True)
    assert serving.decode_flops_per_token(ds, 1000) == 2.0 * n + 61 * 1000 * 2 * 128 * 1088 + 2.0 * 129280 * 7168


@pytest.mark.parametrize(
    ("key", "word"),
    [("kv_window_size", "window"), ("o_lora_rank", "lora"), ("index_topk", "topk"), ("n_expert_groups", "expert")],
)
def test_an_unknown_attention_or_moe_field_is_refused_located(key: str, word: str) -> None:
    text = _config("deepseek-v3.json", **{key: 4})
    with pytest.raises(ClusterplanError) as info:
        parse_hf_config(text, where="config.json")
    line = next(i for i, row in enumerate(text.splitlines(), 1) if f'"{key}"' in row)
    assert re.search(rf"config\.json:{line}:3: '{key}' is not understood; a field about '{word}'", info.value.message)


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"use_sliding_window": True, "sliding_window": 4096}, "use_sliding_window"),
        ({"mlp_only_layers": [0, 1]}, "mlp_only_layers"),
        ({"moe_layer_freq": 2}, "moe_layer_freq"),
        ({"qk_head_dim": 100}, "qk_head_dim"),
    ],
)
def test_a_known_field_with_a_value_not_modelled_is_refused(changes: dict[str, object], key: str) -> None:
    name = "qwen3-30b-a3b.json" if key in {"use_sliding_window", "mlp_only_layers"} else "deepseek-v3.json"
    with pytest.raises(ClusterplanError, match=rf"config\.json:\d+:\d+: {key}: "):
        parse_hf_config(_config(name, **changes), where="config.json")


def test_irregular_local_layer_patterns_are_refused() -> None:
    types = ["sliding_attention", "sliding_attention", "full_attention", *["full_attention"] * 33]
    with pytest.raises(ClusterplanError, match="layer_types: the global layers are not every n-th layer"):
        parse_hf_config(_config("gpt-oss-120b.json", layer_types=types), where="config.json")


def test_a_harmless_unknown_key_is_read_and_listed_as_ignored() -> None:
    read = parse_hf_config(_config("qwen3-32b.json", my_note=1), where="config.json")
    assert read.ignored == ("my_note",)
    assert "ignored: my_note" in derived_line(read)


def test_validate_prints_what_the_reader_derived_and_refuses_located(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "model: {hf_config: config.json}\nworkloads: [{kind: serving, requests_per_min: 10}]\n"
    )
    (tmp_path / "config.json").write_text(_config("deepseek-v3.json"))
    result = run_cli("validate", str(tmp_path / "r.yaml"))
    assert result.exit_code == 0, result.output
    assert re.search(r"671\.0B parameters, 37\.\dB active per token .* KV cache 70,272 B/token", result.output)
    (tmp_path / "config.json").write_text(_config("deepseek-v3.json", sliding_window_layers=[1, 2]))
    result = run_cli("validate", str(tmp_path / "r.yaml"))
    assert result.exit_code == 2
    # (a long temporary path is quoted cut in the middle: "...config.json (84 characters):70:3")
    located = r"r\.yaml:1:\d+: model: hf_config: .*config\.json( \(\d+ characters\))?:\d+:3: 'sliding_window_layers'"
    assert re.search(located, result.output)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kv_lora_rank": 512}, "needs kv_lora_rank, qk_rope_head_dim"),
        ({"shared_experts": 1}, "shared_experts describes MoE layers"),
        ({"global_attention_every": 2}, "global_attention_every is set, but attention_window is not"),
        ({"moe_experts": 8, "experts_per_token": 2, "first_k_dense_replace": 32}, "leave none of the 32 layers"),
        (
            {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128},
            "kv_heads \\(8\\) must equal attention_heads",
        ),
    ],
)
def test_inconsistent_shapes_are_refused(changes: dict[str, object], message: str) -> None:
    base = dict(name="m", layers=32, hidden_size=4096, attention_heads=32, kv_heads=8, ffn_size=14336, vocab_size=1000)
    with pytest.raises(ValueError, match=message):
        ModelArchitecture.model_validate({**base, **changes})


def test_loader_stays_importable_from_the_requirement_module() -> None:
    assert load_hf_config(CONFIGS / "qwen3-32b.json").arch == read_hf_config(CONFIGS / "qwen3-32b.json")
