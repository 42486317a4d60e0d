"""``clusterplan estimate`` as a user meets it, through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clusterplan.cli import app
from conftest import EXAMPLES, ROOT

runner = CliRunner()
EX = ROOT / "examples" / "requirements"


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    start = result.output.index("{")
    end = result.output.rindex("}") + 1
    return json.loads(result.output[start:end])


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_estimates_on_h100(example: Path) -> None:
    result = runner.invoke(app, ["estimate", str(example), "--gpu", "h100-sxm"])
    assert result.exit_code == 0, result.output
    assert "status: feasible" in result.output
    assert "Memory per GPU" in result.output and "Cost" in result.output


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_estimates_on_a_consumer_card(example: Path) -> None:
    result = runner.invoke(app, ["estimate", str(example), "--gpu", "rtx-4090"])
    assert result.exit_code in (0, 1), result.output  # impossible is an answer, never a crash
    assert "status:" in result.output


def test_impossible_configuration_exits_1_with_reasons() -> None:
    result = runner.invoke(app, ["estimate", str(EX / "70b-serving.yaml"), "--gpu", "l40s", "--tp", "4",
                                 "--quant", "fp8"])  # fmt: skip
    assert result.exit_code == 1
    assert "L40S 48GB: tensor parallel 4 needs NVLink; L40S 48GB has PCIe only" in result.output
    assert "configuration is impossible" in result.output


def test_weights_that_do_not_fit() -> None:
    data = _json([str(EX / "405b-serving.yaml"), "--gpu", "a100-80gb", "--tp", "8", "--pp", "1", "--quant", "bf16"])
    assert data["feasible"] is False
    assert any("no room for even one" in r for r in data["reasons"])
    assert data["serving"]["bound"] == "memory_capacity"


def test_json_is_complete() -> None:
    data = _json([str(EX / "70b-serving.yaml"), "--gpu", "h100-sxm", "--quant", "fp8"])
    assert data["feasible"] is True
    assert data["config"]["quant"] == "fp8" and data["config"]["kv_quant"] == "fp8"
    assert data["config"]["count"] == data["config"]["tp"] * data["config"]["pp"] * data["config"]["dp"]
    lat = data["load"]["latency"]
    assert lat["p95_e2e_s"] <= 5.0 and lat["p95_ttft_s"] <= 1.0  # replicas were chosen to meet the targets
    assert data["cloud"]["usd_per_month"] > 0 and data["owned"]["power_w"] > 0
    assert data["assumptions"]["utilisation_ceiling"] == 0.8


def test_pinned_replicas_set_the_per_replica_load() -> None:
    data = _json([str(EX / "70b-serving.yaml"), "--gpu", "h100-sxm", "--quant", "fp8", "--tp", "4", "--count", "8"])
    assert data["config"]["dp"] == 2
    peak = data["load"]["peak_requests_per_s"]
    assert data["load"]["per_replica_requests_per_s"] == pytest.approx(peak / 2)


def test_config_block_with_flag_overrides(tmp_path: Path) -> None:
    req = tmp_path / "r.yaml"
    req.write_text(
        "model: llama-3.1-70b\n"
        "workloads:\n  - kind: serving\n    requests_per_min: 60\n    p95_latency: 20s\n"
        "deployment: cloud\n"
        "config:\n  gpu: a100-80gb\n  tp: 2\n  quant: int4\n  batch: 16\n"
    )
    data = _json([str(req)])
    assert (data["config"]["gpu_id"], data["config"]["tp"], data["config"]["quant"]) == ("a100-80gb", 2, "int4")
    assert data["config"]["batch"] == 16
    over = _json([str(req), "--tp", "1", "--batch", "8"])
    assert (over["config"]["tp"], over["config"]["quant"], over["config"]["batch"]) == (1, "int4", 8)
    assert over["owned"] is None and over["cloud"] is not None


def test_training_workload_by_name_and_deployment() -> None:
    data = _json([str(EX / "13b-train-then-serve.yaml"), "--gpu", "h100-sxm", "--workload", "pretrain", "--count",
                  "32", "--deployment", "cloud"])  # fmt: skip
    assert data["config"]["kind"] == "training" and data["config"]["count"] == 32
    assert data["training"]["time_to_train_s"] > 0
    assert data["cloud"]["usd_total"] == pytest.approx(data["cloud"]["usd_per_hour"] * data["cloud"]["billed_hours"])
    serving = _json([str(EX / "13b-train-then-serve.yaml"), "--gpu", "h100-sxm", "--workload", "1"])
    assert serving["config"]["kind"] == "serving"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "h100"], "did you mean"),
        (["--quant", "fp7", "--gpu", "h100-sxm"], "--quant"),
        ([], "no GPU to estimate on"),
        (["--gpu", "h100-sxm", "--tp", "2", "--dp", "2", "--count", "8", "--pp", "1"], "does not equal"),
        (["--gpu", "h100-sxm", "--workload", "nope"], "no workload named 'nope'"),
        (["--gpu", "h100-sxm", "--workload", "9" * 5000], "no workload named '9999"),  # int() refuses 4,300+
        (["--gpu", "h100-sxm", "--workload", "²"], "no workload named '²'"),  # a digit int() cannot read
    ],
)
def test_bad_input_exits_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["estimate", str(EX / "70b-serving.yaml"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_owned_cost_is_solves_view_with_the_amortised_month_labelled() -> None:
    """8 H200 owned for the 70B example, as solve prices them: capital $384,996; a month of electricity
    (10.2 kW x PUE 1.56 x 730 h x $0.0977/kWh = $1,134.86) + colocation (10.2 kW x $184.06 = $1,877.41) + support
    ($384,996 x 10% / 12 = $3,208.30) = $6,220.57, plus operations of its one GPU type ($1,550) and one pool ($775,
    owned.yaml) = $8,545.57; $692,637 over 36 months, $2.20 per million tokens. Estimate once said $7,551/month
    (60-month amortisation) and $0.86; the amortised month is shown as such."""
    args = [str(EX / "70b-serving.yaml"), "--gpu", "h200", "--count", "8", "--tp", "2", "--quant", "fp8"]
    result = runner.invoke(app, ["estimate", *args, "--deployment", "owned"])
    assert result.exit_code == 0, result.output
    lines = {line.strip().rsplit("  ", 1)[0].strip(): line.split()[-1] for line in result.output.splitlines() if line}
    assert lines["capital"] == "$384,996"
    month = result.output.split("per month (energy, colocation, support, operations)")[1].splitlines()
    assert "$8,546" in month[0]
    assert "1 GPU type x $1,550 + 1 pool x $775 = $2,325/month" in month[1]
    assert lines["total over 36 months"] == "$692,637"
    assert lines["per million output tokens (36 months)"] == "$2.20"
    assert "amortised view: capital over 60 months + running costs" in result.output
    assert "$14,962/month" in result.output  # $384,996 / 60 + $8,545.57
    data = _json([*args, "--deployment", "owned"])
    assert data["config"]["batch"] == 146  # the planner's batch: the memory maximum
    assert data["owned"]["costs"]["monthly_usd"] == pytest.approx(1134.86 + 1877.41 + 3208.30 + 1550 + 775, abs=0.01)
    assert data["owned"]["power_usd_per_month"] == pytest.approx(1134.86, abs=0.005)


def test_ep_and_attention_dp_report_the_all_to_all() -> None:
    mixtral = str(EX / "mixtral-serving.yaml")
    result = runner.invoke(app, ["estimate", mixtral, "--gpu", "h100-sxm", "--ep", "8", "--attention-dp"])
    assert result.exit_code == 0, result.output
    assert "tp 8 (ep 8) (attention DP)" in result.output
    assert "of which MoE all-to-all (EP8)" in result.output
    bad = runner.invoke(app, ["estimate", mixtral, "--gpu", "h100-sxm", "--tp", "8", "--ep", "3"])
    assert bad.exit_code == 2 and "--ep must divide --tp" in bad.output


def test_a_pinned_precision_outside_the_quality_gate_is_estimated_and_said() -> None:
    # The 70B example keeps the default gate (fp8_class): int4 is estimated as asked, never silently.
    data = _json([str(EX / "70b-serving.yaml"), "--gpu", "h100-sxm", "--quant", "int4"])
    said = [n for n in data["notes"] if "quality gate" in n]
    assert said and "solve would not choose them" in said[0] and "quality.max_loss: any" in said[0], data["notes"]
    inside = _json([str(EX / "70b-serving.yaml"), "--gpu", "h100-sxm", "--quant", "fp8"])
    assert not [n for n in inside["notes"] if "quality gate" in n]


R1 = """name: r1
model: deepseek-r1
workloads:
  - kind: serving
    requests_per_min: 300
    input_tokens: 1500
    output_tokens: 1500
    max_context: 8k
    p95_ttft: 2s
    p95_tpot: 60ms
budget: {horizon: 24}
deployment: cloud
"""


def test_ep32_across_four_h200_servers_estimates_on_a_fabric(tmp_path: Path) -> None:
    req = tmp_path / "r1.yaml"
    req.write_text(R1)
    wide = ["--count", "32", "--tp", "32", "--ep", "32", "--attention-dp", "--quant", "fp8", "--engine", "sglang"]
    data = _json([str(req), "--gpu", "h200", *wide])
    assert data["feasible"], data["reasons"]
    assert data["serving"]["all_to_all_s"] > 0.01  # exposed in the decode step, over the network
    assert any("inter-node network" in n for n in data["serving"]["notes"])
    # four 8-GPU instances of an offer whose provider sells a fabric between them
    assert data["cloud"]["instances"] == 4 and data["cloud"]["gpus_per_instance"] == 8


def test_ep_across_instances_without_a_fabric_is_refused(tmp_path: Path) -> None:
    req = tmp_path / "r1.yaml"
    req.write_text(R1)
    # H100 NVL: NVLink pairs, sold only by providers without a fabric between instances
    wide = ["--count", "16", "--tp", "16", "--ep", "16", "--attention-dp", "--quant", "fp8"]
    data = _json([str(req), "--gpu", "h100-nvl", *wide])
    assert not data["feasible"]
    assert data["reasons"] and "no offer has a fabric" in data["reasons"][-1]  # wording of ep_needs_fabric


EIGHT_B = """name: eightb
model: llama-3.1-8b
workloads:
  - kind: serving
    requests_per_min: 600
    input_tokens: 512
    output_tokens: 256
budget: {horizon: 36}
deployment: either
"""


def test_amd_cdna_carries_its_own_compute_share_against_blackwell(tmp_path: Path) -> None:
    """MI355X against B200 on Llama-3.1-8B bf16: peak compute 1.12x, bandwidth 1.04x. Blackwell carries its fitted
    share of the class compute factor, CDNA its own (MAMF-TABLE), so MI355X no longer comes out 1.44x B200."""
    req = tmp_path / "8b.yaml"
    req.write_text(EIGHT_B)

    def tokens_per_s(gpu: str) -> float:
        data = _json([str(req), "--gpu", gpu, "--tp", "1", "--quant", "bf16"])
        return float(data["serving"]["output_tokens_per_s"])

    ratio = tokens_per_s("mi355x") / tokens_per_s("b200")
    assert 0.9 < ratio <= 1.12
