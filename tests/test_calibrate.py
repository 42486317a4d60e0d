"""``clusterplan calibrate``: benchmark result files and training logs read in each tool's format (hand-made samples
in tests/data/bench, marked as samples), refused with their location when broken, fitted through the one
evaluation path, and written as a catalog overlay that ``--catalog`` loads and the physics then runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from clusterplan.catalog.load import load_catalog, load_catalog_text
from clusterplan.inputs.bench_results import read_serving_results, read_training_log
from clusterplan.physics.factors import Assumptions
from conftest import DATA, example, run_cli

BENCH = DATA / "bench"
VLLM = [BENCH / "vllm-bench-serve-c16.json", BENCH / "vllm-bench-serve-c64.json"]


@pytest.mark.parametrize(
    ("name", "tool", "engine", "gpu"),
    [
        ("vllm-bench-serve-c16.json", "vllm bench serve", "vllm", "h100-sxm"),
        ("sglang-bench-serving.jsonl", "sglang bench_serving", "sglang", None),
        ("trtllm-bench-report.json", "trtllm-bench", "tensorrt-llm", "NVIDIA H100 80GB HBM3"),
        ("aiperf-profile-export.json", "aiperf", "vllm", "h100-sxm"),
        ("genai-perf-export.csv", "genai-perf", None, None),
    ],
)
def test_each_format_reads_to_one_run(name: str, tool: str, engine: str | None, gpu: str | None) -> None:
    [run] = read_serving_results(BENCH / name)
    assert (run.tool, run.engine, run.gpu) == (tool, engine, gpu)
    assert run.input_tokens == pytest.approx(1000) and run.output_tokens == pytest.approx(200)
    assert run.output_tokens_per_s is not None and run.output_tokens_per_s > 1000
    assert run.mean_ttft_s is not None and 0.03 < run.mean_ttft_s < 0.1  # ms in the file, seconds here
    assert run.mean_tpot_s is not None and 0.01 < run.mean_tpot_s < 0.03


def test_the_vllm_file_records_its_settings() -> None:
    [run] = read_serving_results(VLLM[0])
    assert (run.model, run.tp, run.max_concurrency, run.request_rate_per_s) == (
        "meta-llama/Llama-3.1-8B-Instruct", 1, 16, None,
    )  # fmt: skip
    assert (run.tool_version, run.date) == ("0.11.0", "20261201-101500")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"model_id": "m", "completed": 3,\n "total_input_tokens": "lots"}', "bad.json:2"),
        ('{"model_id": "m",\n "completed": 3', "bad.json:2"),
        ('{"model_id": "m", "completed": 3}', "bad.json"),  # no token totals: not a complete result
        ('{"unrelated": 1}', "bad.json:1"),
        ("[1, 2]", "bad.json:1"),
    ],
)
def test_a_broken_file_exits_2_with_its_location(tmp_path: Path, text: str, where: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text, encoding="utf-8")
    result = run_cli("calibrate", str(bad), "--gpu", "h100-sxm", "-o", str(tmp_path / "o.yaml"))
    assert result.exit_code == 2, result.output
    assert where in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o.yaml").exists()


def test_a_broken_jsonl_line_is_named(tmp_path: Path) -> None:
    good = (BENCH / "sglang-bench-serving.jsonl").read_text(encoding="utf-8").strip()
    bad = tmp_path / "runs.jsonl"
    bad.write_text(good + "\n" + good.replace('"completed": 320', '"completed": -1') + "\n", encoding="utf-8")
    result = run_cli("calibrate", str(bad), "--gpu", "h100-sxm", "-o", str(tmp_path / "o.yaml"))
    assert result.exit_code == 2 and "runs.jsonl:2" in result.output, result.output


def test_a_log_without_iterations_exits_2(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("nothing to see\n", encoding="utf-8")
    result = run_cli("calibrate", str(log), "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--gpus", "8")
    assert result.exit_code == 2 and "train.log" in result.output


def _tpot_s(*catalog: str) -> float:
    args = ["estimate", str(example("7b-chat-serving")), "--gpu", "h100-sxm", "--count", "1", "--tp", "1", "--json"]
    result = run_cli(*args, *(a for c in catalog for a in ("--catalog", c)))
    assert result.exit_code == 0, result.output
    return float(json.loads(result.output)["serving"]["tpot_s"])


@pytest.mark.slow
def test_calibrate_writes_an_overlay_that_moves_the_estimate_toward_the_runs(tmp_path: Path) -> None:
    overlay = tmp_path / "mine.yaml"
    result = run_cli("calibrate", *map(str, VLLM), "--as-of", "2026-12-06", "-o", str(overlay))
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(overlay.read_text(encoding="utf-8"))
    [engine] = doc["engines"]
    measured = engine["measured"]["h100-sxm"]
    assert engine["id"] == "vllm" and engine["as_of"] == "2026-12-06"
    assert "measured on your hardware" in doc["sources"][engine["source"]]["title"]
    assert (
        "vllm bench serve 0.11.0" in measured["measured_by"] and "vllm-bench-serve-c16.json" in measured["measured_by"]
    )
    # the residual is printed per figure, before and after, and the fit leaves less of it
    assert "mean TTFT" in result.output and "mean TPOT" in result.output and "output tok/s" in result.output
    summary = next(line for line in result.output.splitlines() if line.startswith("summed squared log error"))
    before, after = (float(x) for x in summary.split()[4:7:2])
    assert after < 0.5 * before
    # round trip: --catalog loads it, the engine row carries the fit, and the physics runs it
    user = load_catalog([overlay])
    assert user.engine("vllm").measured["h100-sxm"].compute_efficiency == measured["compute_efficiency"]
    assert load_catalog().engine("vllm").measured == {}
    # the runs decode slower than the shipped factors predict: the calibrated estimate's TPOT rises toward them
    shipped, calibrated = _tpot_s(), _tpot_s(str(overlay))
    assert calibrated > 1.05 * shipped


def test_a_measured_factor_wins_on_its_gpu_only_and_a_requirements_own_wins_over_it() -> None:
    cat = load_catalog_text(
        """
engines:
- id: vllm
  override: true
  measured:
    h100-sxm: {memory_bandwidth_efficiency: 0.5, measured_by: sample}
  source: https://example.com/mine
  as_of: '2026-12'
""",
        "mine.yaml",
    )
    a = Assumptions().with_catalog_engines(cat.engines)
    h100, a100 = cat.gpu("h100-sxm"), cat.gpu("a100-sxm-80gb")
    assert a.engine_factor("memory_bandwidth_efficiency", h100) == 0.5
    assert a.engine_factor("memory_bandwidth_efficiency", a100) == 0.92  # the class's: measured on H100 only
    assert a.engine_factor("compute_efficiency", h100) == 0.72  # not measured: the class's
    own = Assumptions(memory_bandwidth_efficiency=0.8).with_catalog_engines(cat.engines)
    assert own.engine_factor("memory_bandwidth_efficiency", h100) == 0.8


def test_a_measured_row_on_an_unknown_gpu_is_refused() -> None:
    from clusterplan.catalog.load import CatalogInputError

    with pytest.raises(CatalogInputError, match="measured"):
        load_catalog_text(
            "engines:\n- id: vllm\n  override: true\n  measured: {h900: {compute_efficiency: 0.5, measured_by: x}}\n"
            "  source: https://example.com/mine\n  as_of: '2026-12'\n",
            "mine.yaml",
        )


@pytest.mark.parametrize(
    ("name", "tool"), [("megatron-train.log", "megatron-lm"), ("torchtitan-train.log", "torchtitan")]
)
def test_each_training_log_reads(name: str, tool: str) -> None:
    run = read_training_log(BENCH / name)
    assert run.tool == tool and run.iterations == 4
    if tool == "megatron-lm":
        assert run.step_time_s == pytest.approx(31.0124) and run.global_batch_sequences == 512  # warm-up skipped
    else:
        assert run.tokens_per_s_per_gpu == 7270


@pytest.mark.slow
def test_a_training_log_calibrates_training_mfu_and_moves_a_training_estimate(tmp_path: Path) -> None:
    overlay = tmp_path / "train.yaml"
    result = run_cli(
        "calibrate", str(BENCH / "megatron-train.log"), "--gpu", "h100-sxm", "--model", "llama-3.1-8b",
        "--gpus", "8", "--seq-len", "4096", "-o", str(overlay),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [gpu] = yaml.safe_load(overlay.read_text(encoding="utf-8"))["gpus"]
    assert 0.5 < gpu["measured_training_mfu"] < 0.78  # slower than the shipped 0.78 predicts
    args = ["estimate", str(example("13b-train-then-serve")), "--workload", "0", "--gpu", "h100-sxm", "--count", "8",
            "--tp", "2", "--json"]  # fmt: skip
    shipped, mine = run_cli(*args), run_cli(*args, "--catalog", str(overlay))
    assert shipped.exit_code == 0 and mine.exit_code == 0, mine.output
    step = lambda out: json.loads(out)["training"]["step_time_s"]  # noqa: E731
    assert step(mine.output) > step(shipped.output)


@pytest.mark.slow
def test_calibrate_with_a_requirement_replans_and_shows_what_moved(tmp_path: Path) -> None:
    requirement = DATA / "requirements" / "8b-chat-h100.yaml"
    result = run_cli("calibrate", *map(str, VLLM), "--requirement", str(requirement), "-o", str(tmp_path / "o.yaml"))
    assert result.exit_code == 0, result.output
    assert "re-planned with the overlay (design 1 moved)" in result.output
    before = next(line for line in result.output.splitlines() if line.strip().startswith("before:"))
    after = next(line for line in result.output.splitlines() if line.strip().startswith("after:"))
    assert "H100" in before and "H100" in after and before.split(":", 1)[1] != after.split(":", 1)[1]


def test_a_run_without_its_gpu_asks_for_the_flag(tmp_path: Path) -> None:
    result = run_cli("calibrate", str(BENCH / "sglang-bench-serving.jsonl"), "-o", str(tmp_path / "o.yaml"))
    assert result.exit_code == 2 and "--gpu" in result.output, result.output


def test_runs_of_two_engines_are_refused(tmp_path: Path) -> None:
    args = [str(VLLM[0]), str(BENCH / "sglang-bench-serving.jsonl"), "--gpu", "h100-sxm"]
    result = run_cli("calibrate", *args, "-o", str(tmp_path / "o.yaml"))
    assert result.exit_code == 2 and "mix engines" in result.output, result.output


@pytest.mark.slow
def test_the_file_wins_over_a_flag_and_says_so(tmp_path: Path) -> None:
    # the vLLM sample records gpu h100-sxm (its --metadata); a --gpu naming the same GPU by alias is no conflict
    args = [str(VLLM[0]), "-o", str(tmp_path / "o.yaml"), "--force"]
    other = run_cli("calibrate", *args, "--gpu", "h200")
    assert other.exit_code == 0, other.output
    assert "records gpu h100-sxm; --gpu h200 is not used" in other.output
    assert "calibrated vllm on NVIDIA H100 SXM5 80GB" in other.output
    same = run_cli("calibrate", *args, "--gpu", "NVIDIA H100 80GB HBM3", "--model", "llama-3.1-8b")
    assert same.exit_code == 0 and "note:" not in same.output, same.output


@pytest.mark.slow
def test_a_plan_lists_the_measured_factors_it_ran(tmp_path: Path) -> None:
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(
        "engines:\n- id: vllm\n  override: true\n  measured: {h100-sxm: {compute_efficiency: 0.5, measured_by: "
        "sample.json}}\n  source: https://example.com/mine\n  as_of: '2026-12'\n",
        encoding="utf-8",
    )
    args = ["solve", str(DATA / "requirements" / "8b-chat-h100.yaml"), "--json"]
    shipped, mine = run_cli(*args), run_cli(*args, "--catalog", str(overlay))
    assert shipped.exit_code == 0 and mine.exit_code == 0, mine.output

    def measured(out: str) -> list[str]:
        return [a for a in json.loads(out)["explanation"]["assumptions"] if "measured" in a]

    assert measured(shipped.output) == []
    assert measured(mine.output) == [
        "vllm on h100-sxm: measured compute_efficiency 0.5 (https://example.com/mine: sample.json)"
    ]


def test_an_overlay_keeps_the_engines_measurements_on_other_gpus() -> None:
    from clusterplan.design.calibrate import ServingFit, serving_overlay

    earlier = load_catalog_text(
        "engines:\n- id: vllm\n  override: true\n  measured: {h200: {compute_efficiency: 0.6, measured_by: a.json}}\n"
        "  source: https://example.com/mine\n  as_of: '2026-12'\n",
        "earlier.yaml",
    )
    [run] = read_serving_results(VLLM[0])
    values = {"memory_bandwidth_efficiency": 0.8, "compute_efficiency": 0.5, "decode_step_overhead_s": 0.004}
    fit = ServingFit("vllm", earlier.gpu("h100-sxm"), values, values, [], [])
    doc = serving_overlay(fit, [run], earlier, "2026-12-06")
    measured = doc["engines"][0]["measured"]
    assert measured["h200"] == {"compute_efficiency": 0.6, "measured_by": "a.json"}
    assert measured["h100-sxm"]["compute_efficiency"] == 0.5
    assert (
        "vllm bench serve 0.11.0: vllm-bench-serve-c16.json, run 20261201-101500" in measured["h100-sxm"]["measured_by"]
    )
    # the overlay is a catalog file: it loads on top of the earlier one
    both = load_catalog_text(yaml.safe_dump(doc), "new.yaml")
    assert set(both.engine("vllm").measured) == {"h200", "h100-sxm"}


def test_an_existing_output_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    existing = tmp_path / "mine.yaml"
    existing.write_text("kept\n", encoding="utf-8")
    result = run_cli("calibrate", str(tmp_path / "missing.json"), "-o", str(existing))
    assert result.exit_code == 2 and "already exists" in result.output and "missing.json" not in result.output
    assert existing.read_text(encoding="utf-8") == "kept\n"
    folder = run_cli("calibrate", str(tmp_path), "--gpu", "h100-sxm", "-o", str(tmp_path / "o.yaml"))
    assert folder.exit_code == 2 and "not a regular file" in folder.output
