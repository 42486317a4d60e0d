"""Each class of hostile input from issue 16 ends in exit 2 with a located message, never exit 3.

Through the CLI (``validate`` and ``solve``), one parametrised case per class; the slow classes also
hold a time bound (generous: CI has two cores).
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from clusterplan.catalog import schema as catalog_schema
from clusterplan.catalog.load import load_catalog
from clusterplan.design.check import _totals
from clusterplan.errors import printable, quoted
from conftest import cpu_s, run_cli

BASE = """name: hostile
model: llama-3.1-8b
workloads:
  - kind: serving
    name: chat
    requests_per_min: {rpm}
    input_tokens: {inp}
    output_tokens: 250
    p95_latency: {lat}
budget:
  monthly: $20k
deployment: cloud
"""


def requirement(rpm: str = "100", inp: str = "800", lat: str = "4s") -> str:
    return BASE.format(rpm=rpm, inp=inp, lat=lat)


INLINE = "model: {{name: x, layers: 32, hidden_size: {h}, attention_heads: 32, kv_heads: 8, ffn_size: 14336, vocab_size: 128000}}"

REQUIREMENTS: dict[str, tuple[str, str]] = {
    # 1. numbers beyond the int-conversion limit or the float range
    "int-5000-digits": (requirement(rpm="1" + "0" * 5000), r"hostile\.yaml:6:\d+: workloads\[0\]\.requests_per_min"),
    "int-beyond-float": (requirement(rpm="1" + "0" * 310), r"hostile\.yaml:6:\d+: workloads\[0\]\.requests_per_min"),
    "tokens-beyond-float": (requirement(inp="1" + "0" * 310), r"hostile\.yaml:7:\d+: workloads\[0\]\.input_tokens"),
    "tokens-1e99": (requirement(inp="1" + "0" * 99), r"hostile\.yaml:7:\d+: workloads\[0\]\.input_tokens"),
    # 2. explicit scalar tags on values they cannot hold
    "tag-int": (requirement(rpm="!!int abc"), r"hostile\.yaml:6:\d+: .*'abc' is not a whole number"),
    "tag-float": (requirement(rpm="!!float fast"), r"hostile\.yaml:6:\d+: .*'fast' is not a number"),
    "tag-bool": (
        requirement() + "constraints:\n  allow_mixed: !!bool maybe\n",
        r"hostile\.yaml:14:\d+: constraints\.allow_mixed: 'maybe' is not true or false",
    ),
    "tag-timestamp": (requirement(lat="!!timestamp tomorrow"), r"hostile\.yaml:9:\d+: .*'tomorrow' is not a date"),
    # 3. an impossible calendar date
    "date-2024-02-30": (requirement(lat="2024-02-30"), r"hostile\.yaml:9:\d+: workloads\[0\]\.p95_latency"),
    # 4. a latency target below the documented millisecond
    "latency-1e-308": (requirement(lat="1.0e-308s"), r"hostile\.yaml:9:\d+: workloads\[0\]\.p95_latency: .*0\.001"),
    "latency-beyond-a-day": (requirement(lat="400d"), r"hostile\.yaml:9:\d+: workloads\[0\]\.p95_latency"),
    # 5. an inline architecture beyond the ranges
    "hidden-10^200": (
        requirement().replace("model: llama-3.1-8b", INLINE.format(h="1" + "0" * 200)),
        r"hostile\.yaml:2:\d+: model\.hidden_size",
    ),
    "hidden-1e200": (
        requirement().replace("model: llama-3.1-8b", INLINE.format(h="1.0e+200")),
        r"hostile\.yaml:2:\d+: model\.hidden_size: ",
    ),
    "hidden-10^99": (
        requirement().replace("model: llama-3.1-8b", INLINE.format(h="1" + "0" * 99)),
        r"hostile\.yaml:2:\d+: model\.hidden_size: .*less than or equal to",
    ),
}


@pytest.mark.parametrize("command", ["validate", "solve"])
@pytest.mark.parametrize("case", sorted(REQUIREMENTS))
def test_requirement_class_is_refused_located(case: str, command: str, tmp_path: Path) -> None:
    text, where = REQUIREMENTS[case]
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    start = cpu_s()
    result = run_cli(command, str(path))
    assert cpu_s() - start < 5
    assert result.exit_code == 2, result.output
    assert re.search(where, result.output), result.output


HF_CONFIGS = {
    "nan": '{"num_hidden_layers": NaN, "hidden_size": 4096, "num_attention_heads": 32}',
    "inf": '{"num_hidden_layers": 32, "hidden_size": Infinity, "num_attention_heads": 32}',
    "text": '{"num_hidden_layers": 32, "hidden_size": "big", "num_attention_heads": 32}',
    "list": '{"num_hidden_layers": 32, "hidden_size": [4096], "num_attention_heads": 32}',
    "experts-text": '{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_experts": "x"}',
    "deep": '{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "x": '
    + "[" * 100_000
    + "]" * 100_000
    + "}",
    "5000-digits": '{"num_hidden_layers": 32, "hidden_size": 1' + "0" * 5000 + ', "num_attention_heads": 32}',
    "1e400": '{"num_hidden_layers": 32, "hidden_size": 1e400, "num_attention_heads": 32}',
    "huge": '{"num_hidden_layers": 32, "hidden_size": 1e200, "num_attention_heads": 32}',
    # values that contradict each other: once read as a dense model, or the nested text model ignored
    "zero-experts-routed": '{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, '
    '"num_local_experts": 0, "num_experts_per_tok": 2}',
    "text-config-string": '{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, '
    '"text_config": "llama"}',
}


@pytest.mark.parametrize("case", sorted(HF_CONFIGS))
def test_hf_config_class_is_refused_located(case: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(HF_CONFIGS[case])
    path = tmp_path / "hostile.yaml"
    path.write_text(requirement().replace("model: llama-3.1-8b", "model: {hf_config: config.json}"))
    for command in ("validate", "solve"):
        result = run_cli(command, str(path))
        assert result.exit_code == 2, result.output
        assert re.search(r"hostile\.yaml:2:\d+: model: hf_config: .*config\.json", result.output), result.output


CATALOGS = {
    "memory-1e308": (
        "gpus:\n  - id: h100-sxm\n    override: true\n    memory_gib: 1.0e308\n    memory_gb: 1.0e308\n"
        "    source: https://example.invalid\n    as_of: 2026-11\n",
        r"cat\.yaml:\d+:\d+: gpus\[0\]\.memory_gib",
    ),
    "reference-node-0": (
        "owned:\n  reference_node_gpus: {datacenter: 0, workstation: 4, consumer: 4}\n",
        r"cat\.yaml:2:\d+: owned\.reference_node_gpus\.datacenter",
    ),
    "reference-node-negative": (
        "owned:\n  reference_node_gpus: {datacenter: -8, workstation: 4, consumer: 4}\n",
        r"cat\.yaml:2:\d+: owned\.reference_node_gpus\.datacenter",
    ),
    "as-of-2024-02-30": (
        "instances:\n  - provider: aws\n    id: p5.48xlarge\n    override: true\n    on_demand_usd_per_hour: 38.5\n"
        "    source: https://example.invalid\n    as_of: 2024-02-30\n",
        r"cat\.yaml:7:\d+: instances\[0\]\.as_of",
    ),
    "price-5000-digits": (
        "instances:\n  - provider: aws\n    id: p5.48xlarge\n    override: true\n    on_demand_usd_per_hour: 1"
        + "0" * 5000
        + "\n    source: https://example.invalid\n    as_of: 2026-11\n",
        r"cat\.yaml:5:\d+: instances\[0\]\.on_demand_usd_per_hour",
    ),
    "tdp-1e12": (
        "gpus:\n  - id: h100-sxm\n    override: true\n    tdp_w: 1.0e12\n"
        "    source: https://example.invalid\n    as_of: 2026-11\n",
        r"cat\.yaml:\d+:\d+: gpus\[0\]\.tdp_w",
    ),
}


@pytest.mark.parametrize("case", sorted(CATALOGS))
def test_user_catalog_class_is_refused_located(case: str, tmp_path: Path) -> None:
    text, where = CATALOGS[case]
    (tmp_path / "cat.yaml").write_text(text)
    req = tmp_path / "req.yaml"
    req.write_text(requirement())
    for command in ("validate", "solve"):
        result = run_cli(command, str(req), "--catalog", str(tmp_path / "cat.yaml"))
        assert result.exit_code == 2, result.output
        assert re.search(where, result.output), result.output


def test_shipped_catalog_obeys_the_user_catalog_ranges() -> None:
    """The ranges are the schema's, so loading the shipped catalog checks every row against them."""
    cat = load_catalog()
    assert max(g.memory_gib for g in cat.gpus.values()) <= catalog_schema.MAX_GPU_MEMORY_GIB
    assert max(g.tdp_w for g in cat.gpus.values()) <= catalog_schema.MAX_TDP_W
    assert max(m.hidden_size for m in cat.models.values()) <= catalog_schema.MAX_HIDDEN_SIZE
    assert min(cat.owned.reference_node_gpus.values()) >= 1


def test_checker_rejects_a_negative_cost_line(catalog: object) -> None:
    from clusterplan.design.check import Priced, Unit
    from clusterplan.plan import Costs, Design, HardwareLine

    line = HardwareLine(
        kind="owned",
        gpu="h100-sxm",
        gpu_name="H100",
        offering="owned:h100-sxm:8",
        label="8x H100",
        units=1,
        gpus_per_unit=8,
        gpus=8,
        bought=1,
        from_inventory=0,
        usd_per_hour=0.0,
        capital_usd=-1000.0,
        monthly_usd=10.0,
        power_w=1.0,
    )
    costs = Costs(
        capital_usd=-1000.0,
        monthly_usd=10.0,
        one_off_usd=0.0,
        total_usd=-1000.0 + 360.0,
        horizon_months=36,
        usd_per_million_output_tokens=None,
    )
    design = cast(Design, SimpleNamespace(costs=costs))  # _totals reads only the costs
    problems: list[str] = []
    _totals(design, [Priced(line, Unit(8, 8), -1000.0, 10.0, 1.0)], 0.0, 36, 0.0, problems)
    assert any("never negative" in p for p in problems), problems
    problems = []
    _totals(design, [Priced(line, Unit(8, 8), 500.0, 10.0, 1.0)], 0.0, 36, 0.0, problems)
    assert any("capital stated" in p for p in problems), problems


def _slow_cases() -> dict[str, str]:
    base = requirement()
    return {
        "30k-unknown-gpus": base
        + "constraints:\n  allowed_gpus:\n"
        + "".join(f"    - zz{i}x\n" for i in range(30_000)),
        "150k-unknown-keys": base + "".join(f"k{i}: 1\n" for i in range(150_000)),
        "45k-unknown-keys": base + "".join(f"k{i}: 1\n" for i in range(45_000)),
        "3M-character-name": base.replace("name: chat", "name: " + "a" * 3_000_000),
        "3M-character-model": base.replace("model: llama-3.1-8b", "model: " + "b" * 3_000_000),
        "1M-item-list": "a: [" + "1," * 1_000_000 + "1]\n",
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(_slow_cases()))
def test_large_refusal_is_quick_and_short(case: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(_slow_cases()[case])
    start = cpu_s()
    result = run_cli("validate", str(path))
    cpu = cpu_s() - start
    assert result.exit_code == 2, result.output[:2000]
    assert re.search(r"hostile\.yaml:\d+:\d+: ", result.output), result.output[:2000]
    assert len(result.output) < 20_000
    # linear work: 0.1-1.3 s of CPU (wall time stretched it to 2.6-6 s when other jobs shared the machine); anything
    # quadratic in 45k-1M items takes minutes, so 8 s separates the two
    assert cpu < 8.0, f"{case}: {cpu:.2f} s of CPU"


@pytest.mark.parametrize("command", ["validate", "solve"])
def test_control_characters_are_escaped(command: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(requirement().replace("model: llama-3.1-8b", 'model: "\\e[2Jx\\u202e"'))
    result = run_cli(command, str(path))
    assert result.exit_code == 2
    assert "\x1b" not in result.output and "\u202e" not in result.output
    assert "\\x1b[2Jx\\u202e" in result.output


def test_validate_refuses_names_with_control_characters_escaped(tmp_path: Path) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(requirement().replace("name: chat", 'name: "\\e[31mRED\\e[0m"'))
    result = run_cli("validate", str(path))
    assert result.exit_code == 2, result.output
    assert "\x1b" not in result.output and "\\x1b[31mRED\\x1b[0m" in result.output


def test_one_escaping_function() -> None:
    assert printable("a\x1bb\x07\x9b") == "a\\x1bb\\x07\\x9b"
    assert printable("a\nb", keep_newlines=True) == "a\nb"
    assert quoted("x" * 1000).endswith("..." + "x" * 20 + " (1,000 characters)'")
    # A long path keeps its file name in view (cut in the middle).
    assert "config.json" in quoted("/tmp/" + "d" * 200 + "/config.json")
