"""``clusterplan compare``: derived metrics by hand from catalog rows, one path with ``estimate``, clean errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import example, run_cli

CENT = 0.005


def _compare(*args: str) -> dict[str, Any]:
    result = run_cli("compare", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _row(doc: dict[str, Any], gpu: str) -> dict[str, Any]:
    return next(r for r in doc["rows"] if r["gpu_id"] == gpu)


@pytest.mark.slow
def test_without_precision_the_row_is_solves_choice_within_the_quality_gate() -> None:
    """The 70B example's best aggregated design is 4x h200 TP2 fp8 on one Hyperstack 8x H200 instance on a 3-year
    term: compare's h200 row, with no --precision, is that layout and its cloud figures that total (fp8 is inside the
    default gate; int4 is not tried)."""
    plan = json.loads(run_cli("solve", str(example("70b-serving")), "--json").stdout)
    (note,) = plan["disaggregation"]
    assert note["aggregated_design"] == "4x NVIDIA H200 SXM 141GB TP2 PP1 fp8"
    row = _row(_compare(str(example("70b-serving")), "--gpus", "h200"), "h200")
    assert (row["tp"], row["pp"], row["quant"]) == (2, 1, "fp8")
    assert row["cloud"]["term"] == "3y"
    assert row["cloud"]["costs"]["total_usd"] == pytest.approx(note["aggregated_total_usd"], abs=CENT)


def test_h100_metrics_by_hand_from_catalog_rows(catalog: Any) -> None:
    doc = _compare(str(example("70b-serving")), "--gpus", "h100-sxm", "--precision", "bf16")
    row = _row(doc, "h100-sxm")
    # catalog/gpus.yaml h100-sxm: 3,350 GB/s, 989.5 dense bf16 TFLOPS, 700 W, $27,500 (EPOCH estimate).
    g = catalog.gpus["h100-sxm"]
    assert (g.bandwidth_gb_per_s, g.dense.bf16_tflops, g.tdp_w, g.price.usd) == (3350.0, 989.5, 700.0, 27500.0)
    assert row["bandwidth_tb_per_s"] == pytest.approx(3.35)
    assert row["dense_tflops"] == pytest.approx(989.5)
    assert row["compute_precision"] == "bf16"

    # Cloud: the instance the row names, at its catalog price per GPU-hour. Over the example's 36 months the
    # cheapest is a 3-year commitment (instances.yaml hyperstack 8x-h100-sxm: 2.72 x 8 = $21.76/h against $25.60
    # on demand), owed for exactly one term.
    cloud = row["cloud"]
    assert (cloud["offering"], cloud["term"]) == ("cloud:hyperstack:8x-h100-sxm:3y", "3y")
    inst = catalog.instances["hyperstack:8x-h100-sxm"]
    committed = inst.commitment(36)
    assert committed is not None and committed.usd_per_hour == 21.76
    per_gpu_hour = committed.usd_per_hour / inst.gpus_per_instance
    assert cloud["usd_per_gpu_hour"] == pytest.approx(per_gpu_hour)
    assert cloud["usd_per_tb_per_s"] == pytest.approx(per_gpu_hour / 3.35)
    assert cloud["usd_per_dense_tflops"] == pytest.approx(per_gpu_hour / 989.5)
    assert cloud["power_w_per_gpu"] == 700.0

    # Owned, an 8-GPU server (owned.yaml): $27,500 x 8 + $93,500 host + $15,000 network = $328,500, so
    # $41,062.50 per GPU slot; power (8 x 700 W + 4,600 W overhead) / 8 = 1,275 W per GPU.
    owned = row["owned"]
    assert owned["offering"] == "owned:h100-sxm:8"
    assert owned["capital_usd_per_gpu"] == pytest.approx(41062.5)
    assert owned["usd_per_tb_per_s"] == pytest.approx(41062.5 / 3.35)
    assert owned["usd_per_dense_tflops"] == pytest.approx(41062.5 / 989.5)
    assert owned["power_w_per_gpu"] == pytest.approx(1275.0)
    assert owned["power_w_per_replica"] == pytest.approx(1275.0 * row["tp"] * row["pp"])
    assert cloud["power_w_per_replica"] == pytest.approx(700.0 * row["tp"] * row["pp"])

    # $ per million output tokens: total over 36 months / (1,000 req/min / 60 x 200 tokens x 3,600 s x 730 h x 36).
    tokens_m = 1000 / 60 * 200 * 3600 * 730 * 36 / 1e6
    for d in (cloud, owned):
        assert d["usd_per_million_tokens"] == pytest.approx(d["costs"]["total_usd"] / tokens_m)
    # Owned total: servers x $328,500 + 36 months x servers x (electricity 10,200 W x PUE 1.56 x 730 h x $0.0977/kWh
    # + colocation 10.2 kW x $184.06/kW-month + support $328,500 x 10% a year / 12), owned.yaml.
    servers = owned["units"]
    month = 10_200 / 1000 * 1.56 * 730 * 0.0977 + 10.2 * 184.06 + 328_500 * 0.10 / 12
    assert owned["costs"]["total_usd"] == pytest.approx(servers * 328_500 + 36 * servers * month, abs=CENT)


def test_figures_are_estimates_for_the_same_layout(catalog: Any) -> None:
    """One path: every cost and speed in a row is ``estimate``'s for the row's layout, to the cent."""
    from clusterplan.design.estimate import estimate_requirement
    from clusterplan.requirement.load import load_requirement
    from clusterplan.requirement.schema import PinnedConfig

    doc = _compare(str(example("70b-serving")), "--gpus", "h200,h100-sxm", "--precision", "fp8")
    resolved = load_requirement(example("70b-serving"), catalog)
    for row in doc["rows"]:
        for kind in ("cloud", "owned"):
            pins = PinnedConfig(
                gpu=row["gpu_id"],
                tp=row["tp"],
                pp=row["pp"],
                quant=row["quant"],
                deployment=kind,
            )
            est = estimate_requirement(resolved.requirement, list(resolved.models), catalog, pins)
            priced = getattr(est, kind)
            assert est.config.count == row["count"]
            assert priced.costs.total_usd == pytest.approx(row[kind]["costs"]["total_usd"], abs=CENT)
            assert est.serving is not None
            assert est.serving.output_tokens_per_s == pytest.approx(row["output_tokens_per_s_per_replica"], rel=1e-12)
        assert row["quant"] == "fp8"


TIGHT_TTFT = """
model: llama-3.1-8b
workloads:
  - kind: serving
    tokens_per_sec: 2k
    input_tokens: 2000
    output_tokens: 200
    p95_ttft: 40ms
"""


def test_best_layout_meets_targets_before_it_is_cheap(tmp_path: Any) -> None:
    """8B at 16-bit with a 40 ms p95 TTFT on H100: TP1 is the cheapest layout but never meets the TTFT target
    (its prefill alone is too slow); TP2 meets it. The row shows TP2 and says it meets the targets."""
    path = tmp_path / "ttft.yaml"
    path.write_text(TIGHT_TTFT)
    row = _row(_compare(str(path), "--gpus", "h100-sxm", "--precision", "bf16"), "h100-sxm")
    assert row["layouts_tried"] == 6  # the planner's shapes: TP 1, 2, 4, 8 and PP 2, 4 on top of TP 8
    assert (row["tp"], row["pp"], row["meets_targets"]) == (2, 1, True)


def test_training_workload_and_markdown() -> None:
    doc = _compare(str(example("13b-train-then-serve")), "--workload", "pretrain", "--gpus", "h100-sxm,t4")
    assert doc["kind"] == "training"
    h100, t4 = _row(doc, "h100-sxm"), _row(doc, "t4")
    assert h100["tokens_per_s"] > 0 and h100["time_to_train_s"] > 0
    tokens = 260e9  # the example's pretrain: 260B tokens
    assert h100["owned"]["usd_per_million_tokens"] == pytest.approx(
        h100["owned"]["costs"]["total_usd"] / (tokens / 1e6)
    )
    assert t4["feasible"] is False and t4["reasons"] and t4["cloud"] is None  # an impossible layout is not priced
    assert doc["rows"][-1]["gpu_id"] == "t4"  # impossible rows last
    md = run_cli("compare", str(example("7b-chat-serving")), "--gpus", "l4,rtx-5090", "--markdown")
    assert md.exit_code == 0, md.output
    assert "| GPU | deployment | offering |" in md.stdout and "NVIDIA L4" in md.stdout


def test_model_on_the_command_line() -> None:
    doc = _compare("--model", "llama-3.1-8b", "--input-tokens", "1000", "--output-tokens", "200", "--gpus", "l4")
    assert doc["model"].startswith("Llama 3.1 8B") and doc["rows"][0]["feasible"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpus", "h100,l4"], "command line: --gpus: unknown GPU 'h100'; did you mean"),
        (["--workload", "nope"], "no workload named 'nope'"),
        (["--workload", "7"], "no workload 7"),
        (["--precision", "fp6"], "--precision: 'fp6' is not one of"),
        (["--workload", "9" * 5000], "no workload named '9999"),
        (["--workload", "²"], "no workload named '²'"),
    ],
)
def test_bad_input_is_a_clean_exit_2(args: list[str], needle: str) -> None:
    result = run_cli("compare", str(example("70b-serving")), *args)
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output


def test_bad_model_and_missing_input_exit_2() -> None:
    unknown = run_cli("compare", "--model", "llama-9")
    assert unknown.exit_code == 2 and "unknown model 'llama-9'" in unknown.output
    neither = run_cli("compare")
    assert neither.exit_code == 2 and "give a requirement file or --model" in neither.output
    for flag in ("--horizon", "--tokens-per-s"):
        bad = run_cli("compare", "--model", "llama-3.1-8b", flag, "-1")
        assert bad.exit_code == 2 and f"command line: {flag}: must be positive" in bad.output
    missing = run_cli("compare", "no-such-file.yaml")
    assert missing.exit_code == 2 and "Traceback" not in missing.output
