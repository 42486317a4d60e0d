"""The architectures deployed now: hybrid Gated DeltaNet / full attention (Qwen3.5, Qwen3-Next) and MTP modules
(MiniMax-M2.5, Qwen3.5).

Holds that their config.json files read (they were refused on unknown keys), their parameters and KV/state bytes
by hand, that a linear layer's fixed state lets more sequences fit than a KV cache would, that MTP modules count
as weights and as the proposer of ``speculative: {method: mtp}``, that each model plans and estimates from the
command line, and that what the reader cannot model is still refused, located.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.catalog.schema import ModelArchitecture
from clusterplan.errors import ClusterplanError
from clusterplan.physics import disagg, memory, params, serving
from clusterplan.physics.factors import Assumptions, SpeculativeDecoding
from clusterplan.physics.layout import Layout
from clusterplan.requirement.hf_config import parse_hf_config, read_hf_config
from conftest import run_cli, write_doc

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
FIXTURE_ROWS = {
    "qwen3.5-397b-a17b.json": "qwen3.5-397b-a17b",
    "qwen3-next-80b-a3b.json": "qwen3-next-80b-a3b",
    "minimax-m2.5.json": "minimax-m2.5",
}
SHAPE_FIELDS = set(ModelArchitecture.model_fields) - {"name", "published_params"}
# Qwen3.5-397B-A17B by hand: h 4096, 32 heads and 2 KV heads of 256, 15 of 60 layers full attention; linear
# layers 16 key heads and 64 value heads of 128, conv kernel 4, a float32 state.
H, HEADS, KV_HEADS, D = 4096, 32, 2, 256
FULL, LINEAR = 15, 45
KEY_DIM, VALUE_DIM, NV = 16 * 128, 64 * 128, 64
CONV_DIM = 2 * KEY_DIM + VALUE_DIM


def _text(name: str) -> dict[str, Any]:
    cfg = json.loads((CONFIGS / name).read_text())
    return cfg.get("text_config", cfg)


def _config(name: str, **changes: object) -> str:
    cfg = json.loads((CONFIGS / name).read_text())
    cfg.get("text_config", cfg).update(changes)
    return json.dumps(cfg, indent=2)


@pytest.mark.parametrize("fixture", sorted(FIXTURE_ROWS))
def test_config_reads_to_the_catalog_row(fixture: str, catalog: Catalog) -> None:
    arch = read_hf_config(CONFIGS / fixture)
    row = catalog.model(FIXTURE_ROWS[fixture])
    assert {f: getattr(arch, f) for f in SHAPE_FIELDS} == {f: getattr(row, f) for f in SHAPE_FIELDS}


def test_qwen35_parameters_by_hand(catalog: Catalog) -> None:
    m = catalog.model("qwen3.5-397b-a17b")
    gated_full = H * D * (2 * HEADS + 2 * KV_HEADS) + H * HEADS * D  # q, k, v, o and the output gate
    linear = H * (2 * KEY_DIM + 2 * VALUE_DIM + 2 * NV) + CONV_DIM * 4 + VALUE_DIM * H
    expert = 3 * H * 1024
    moe = 512 * expert + expert + H * 512  # routed, shared, router
    embeddings = 2 * 248320 * H
    assert params.total_params(m) == FULL * gated_full + LINEAR * linear + 60 * moe + embeddings
    assert params.total_params(m) == pytest.approx(397e9, rel=0.005)
    assert params.active_params(m) == pytest.approx(17e9, rel=0.03)
    # the MTP layer: one gated full-attention layer with its MoE block, plus the 2h x h projection
    assert params.mtp_params(m) == gated_full + moe + 2 * H * H
    assert (
        params.full_attention_params(m)
        - params.full_attention_params(m.model_copy(update={"attention_output_gate": False}))
        == H * HEADS * D
    )


def test_minimax_m25_parameters_and_mtp_modules_by_hand(catalog: Catalog) -> None:
    m = read_hf_config(CONFIGS / "minimax-m2.5.json")
    layer = 3072 * 128 * (2 * 48 + 2 * 8) + 256 * 3 * 3072 * 1536 + 3072 * 256
    assert params.total_params(m) == 62 * layer + 2 * 200064 * 3072
    assert params.total_params(m) == pytest.approx(230e9, rel=0.01)
    assert m.mtp_layers == 3  # num_mtp_modules 3 x mtp_transformer_layers 1
    assert params.mtp_params(m) == 3 * (layer + 2 * 3072 * 3072)
    assert read_hf_config(CONFIGS / "minimax-m2.5.json").mtp_layers == 3
    off = parse_hf_config(_config("minimax-m2.5.json", use_mtp=False), where="config.json").arch
    assert off.mtp_layers == 0


def test_only_full_attention_layers_cache_kv_and_linear_layers_hold_a_fixed_state(catalog: Catalog) -> None:
    m = catalog.model("qwen3.5-397b-a17b")
    assert memory.kv_bytes_per_token_per_gpu(m, tp=1, pp=1, kv_precision="bf16") == FULL * 2 * KV_HEADS * D * 2
    state = LINEAR * (NV * 128 * 128 * 4 + CONV_DIM * 3 * 2)
    for context in (1000, 100_000):
        kv = memory.kv_bytes_per_sequence_per_gpu(m, context, tp=1, pp=1, kv_precision="bf16")
        assert kv == FULL * 2 * KV_HEADS * D * 2 * context + state
    # TP 8: each GPU holds 8 of the 64 value heads' state and one of the 2 KV heads (replicated)
    kv8 = memory.kv_bytes_per_sequence_per_gpu(m, 1000, tp=8, pp=1, kv_precision="fp8")
    assert kv8 == FULL * 2 * 1 * D * 1 * 1000 + LINEAR * (8 * 128 * 128 * 4 + CONV_DIM / 8 * 3 * 2)
    nxt = catalog.model("qwen3-next-80b-a3b")  # no mamba_ssm_dtype: a 16-bit state
    assert memory.kv_bytes_per_token_per_gpu(nxt, tp=1, pp=1, kv_precision="bf16") == 12 * 2 * 2 * 256 * 2
    assert memory.kv_bytes_per_sequence_per_gpu(nxt, 0, tp=1, pp=1, kv_precision="bf16") == 36 * (
        32 * 128 * 128 * 2 + (2 * 2048 + 4096) * 3 * 2
    )


def test_a_disaggregated_handoff_carries_the_linear_state_with_the_kv(catalog: Catalog) -> None:
    m = catalog.model("qwen3.5-397b-a17b")
    state = LINEAR * (NV * 128 * 128 * 4 + CONV_DIM * 3 * 2)
    assert disagg.kv_bytes(m, 1000, "bf16") == 1000 * FULL * 2 * KV_HEADS * D * 2 + state


def _all_full(m: ModelArchitecture) -> ModelArchitecture:
    """The same model with every layer full attention (no linear layers)."""
    cleared = ("linear_key_heads", "linear_value_heads", "linear_key_head_dim", "linear_value_head_dim")
    return m.model_copy(update={"full_attention_every": None, "linear_conv_kernel": None, **dict.fromkeys(cleared)})


def test_a_hybrid_model_fits_more_sequences_than_all_full_attention(catalog: Catalog) -> None:
    m, gpu = catalog.model("qwen3.5-397b-a17b"), catalog.gpu("h200")
    layout = Layout(tp=8, quant="fp8", kv_precision="fp8")
    fits = [
        memory.max_batch_by_memory(a, gpu, layout, context_tokens=32_768, assumptions=Assumptions())
        for a in (m, _all_full(m))
    ]
    assert fits[0] > 2 * fits[1] > 0


def test_linear_layers_add_no_attention_flops_growing_with_the_context(catalog: Catalog) -> None:
    m = catalog.model("qwen3.5-397b-a17b")
    width = serving.attention_width(m)
    grow = serving.decode_attention_flops(m, 20_000) - serving.decode_attention_flops(m, 10_000)
    assert grow == pytest.approx(4.0 * FULL * 10_000 * width)
    assert serving.decode_attention_flops(m, 0) == pytest.approx(LINEAR * NV * 8.0 * 128 * 128)
    full = _all_full(m)
    assert serving.prefill_attention_flops(m, 32_000) < serving.prefill_attention_flops(full, 32_000) / 3


def test_mtp_speculative_decoding_holds_the_models_own_modules(catalog: Catalog) -> None:
    m, gpu = read_hf_config(CONFIGS / "minimax-m2.5.json"), catalog.gpu("h200")
    spec = SpeculativeDecoding(method="mtp", draft_tokens=3, acceptance_length=2.5)
    assert spec.held_fraction(m) == pytest.approx(params.mtp_params(m) / params.total_params(m))
    assert spec.cost_for(m) == pytest.approx(spec.held_fraction(m) / 3)  # one module per draft token
    layout, shape = Layout(tp=8, quant="fp8"), serving.RequestShape(2000.0, 500.0, 2500.0)
    plain = serving.estimate_serving(m, gpu, layout, shape, batch=64, assumptions=Assumptions())
    mtp = serving.estimate_serving(m, gpu, layout, shape, batch=64, assumptions=Assumptions(speculative=spec))
    added = mtp.memory.weights_gib - plain.memory.weights_gib
    assert added == pytest.approx(plain.memory.weights_gib * spec.held_fraction(m), rel=1e-9)
    assert mtp.decode_step_s < plain.decode_step_s  # 2.5 tokens kept per verification step


@pytest.mark.slow
@pytest.mark.parametrize("model", ["qwen3.5-397b-a17b", "{hf_config: config.json}"])
def test_each_model_plans_and_estimates_from_the_command_line(model: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "minimax-m2.5.json").read_text())
    doc = {
        "model": model if "{" not in model else {"hf_config": "config.json"},
        "workloads": [
            {"kind": "serving", "requests_per_min": 300, "input_tokens": 4000, "output_tokens": 500,
             "speculative": {"method": "mtp", "draft_tokens": 1, "acceptance_length": 1.7}},
        ],
    }  # fmt: skip
    path = write_doc(tmp_path, doc)
    solved = run_cli("solve", str(path))
    assert solved.exit_code == 0, solved.output
    estimated = run_cli("estimate", str(path), "--gpu", "h200", "--count", "8", "--tp", "8", "--quant", "fp8")
    assert estimated.exit_code == 0, estimated.output
    assert "speculative decoding (mtp)" in estimated.output


def test_mtp_on_a_model_without_mtp_modules_is_refused_located(tmp_path: Path) -> None:
    doc = {
        "model": "llama-3.1-70b",
        "workloads": [
            {"kind": "serving", "requests_per_min": 10,
             "speculative": {"method": "mtp", "draft_tokens": 1, "acceptance_length": 1.7}},
        ],
    }  # fmt: skip
    result = run_cli("validate", str(write_doc(tmp_path, doc)))
    assert result.exit_code == 2
    assert re.search(
        r"req\.yaml:\d+:\d+: workloads\[0\]\.speculative\.method: .*no multi-token-prediction", result.output
    )


@pytest.mark.parametrize(
    ("fixture", "changes", "key", "message"),
    [
        ("minimax-m2.5.json", {"attn_type_list": [0, *[1] * 61]}, "attn_type_list", "lightning"),
        (
            "qwen3.5-397b-a17b.json",
            {"layer_types": ["full_attention", *_text("qwen3.5-397b-a17b.json")["layer_types"][1:]]},
            "layer_types",
            "not every n-th layer",
        ),
        ("qwen3.5-397b-a17b.json", {"mtp_use_dedicated_embeddings": True}, "mtp_use_dedicated_embeddings", "own"),
        ("qwen3.5-397b-a17b.json", {"mamba_ssm_dtype": "int8"}, "mamba_ssm_dtype", "expected one of"),
        ("qwen3.5-397b-a17b.json", {"full_attention_interval": 3}, "full_attention_interval", "disagrees"),
        ("qwen3-next-80b-a3b.json", {"linear_num_key_heads": None}, "full_attention_interval", "lack"),
        ("qwen3-next-80b-a3b.json", {"linear_state_heads": 8}, "linear_state_heads", "is not understood"),
    ],
)
def test_what_the_reader_cannot_model_is_refused_located(
    fixture: str, changes: dict[str, object], key: str, message: str
) -> None:
    text = _config(fixture, **changes)
    with pytest.raises(ClusterplanError) as info:
        parse_hf_config(text, where="config.json")
    line = next(i for i, row in enumerate(text.splitlines(), 1) if f'"{key}"' in row)
    assert re.search(rf"config\.json:{line}:\d+: '?{key}'?:? .*{message}", info.value.message), info.value.message
