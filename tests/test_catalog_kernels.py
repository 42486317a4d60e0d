"""Kernel fits as catalog rows (catalog/kernels.yaml): shipped with sources, matched to GPUs by their architecture
field, and overridden by a user catalog the way engine and GPU rows are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterplan.catalog.load import Catalog, CatalogInputError, load_catalog_text
from clusterplan.evaluation.evaluate import training_job
from clusterplan.physics import rules, serving, training
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.training_job import TrainingSettings
from clusterplan.requirement.schema import TrainingWorkload
from conftest import example, run_cli

# A user catalog's override of the Hopper row's GEMM curve: ten times the fixed cost per output row and column.
SLOW_HOPPER_GEMMS = """
kernels:
- id: hopper
  override: true
  gemm_shape: {per_output_dim_elements: 2690.0, per_reduction_dim_elements: 419.0}
  source: https://example.com/my-gemm-tables
  as_of: '2026-12'
"""
PRETRAIN = TrainingWorkload(kind="training", tokens=1e11, deadline=60 * 86400, sequence_length=4096,
                            global_batch_tokens=4096 * 512)  # fmt: skip


def test_the_shipped_rows_load_with_their_sources(catalog: Catalog) -> None:
    assert set(catalog.kernels) == {"hopper", "ampere"}
    for row in catalog.kernels.values():
        assert catalog.source(row.source) is not None and row.as_of and row.fitted_to
    assert [row.id for row in catalog.kernels.values() if row.default] == ["ampere"]


def test_every_shipped_gpu_takes_its_architectures_row(catalog: Catalog) -> None:
    # Hopper and both Blackwell dies carry the Hopper fits (and run Megatron's TP overlap); every other shipped
    # architecture is listed on the Ampere row, which is also the default for one no row lists.
    hopper = {"Hopper", "Blackwell", "Blackwell (GB202)"}
    for gpu in catalog.gpus.values():
        row = rules.architecture_kernels(gpu)
        assert row is gpu.kernels and row.applies_to(gpu.architecture)
        assert row.id == ("hopper" if gpu.architecture in hopper else "ampere"), gpu.id
        assert row.tp_comm_overlap == (gpu.architecture in hopper)


def test_an_overlay_of_a_kernel_curve_changes_a_training_estimate(catalog: Catalog) -> None:
    user = load_catalog_text(SLOW_HOPPER_GEMMS, "mine.yaml")
    assert user.kernels["hopper"].gemm_shape.per_output_dim_elements == 2690.0
    assert catalog.kernels["hopper"].gemm_shape.per_output_dim_elements == 269.0  # the shipped catalog untouched

    def days(cat: Catalog) -> float:
        est = training.estimate_training(
            cat.model("llama-3.1-8b"), cat.gpu("h100-sxm"), job=training_job(PRETRAIN), layout=Layout(),
            settings=TrainingSettings(dp=8, zero_stage=1, micro_batch=1), nodes_gpus_per_node=8,
            assumptions=Assumptions(),
        )  # fmt: skip
        return est.time_to_train_s / 86400

    assert days(user) > 1.05 * days(catalog)
    # the A100's row was not overridden: its estimate does not move
    assert user.gpu("a100-sxm-80gb").kernels == catalog.gpu("a100-sxm-80gb").kernels


def test_an_overlay_of_the_routing_law_changes_a_serving_estimate(catalog: Catalog) -> None:
    user = load_catalog_text(
        """
kernels:
- id: hopper
  override: true
  unbalanced_routing: {skew_per_doubling: 0.3}
  source: https://example.com/my-moe-tables
  as_of: '2026-12'
""",
        "mine.yaml",
    )

    def skew(cat: Catalog) -> float:
        est = serving.estimate_serving(
            cat.model("qwen3-235b-a22b"), cat.gpu("h200"),
            Layout(tp=8, quant="fp8", kv_precision="fp8", ep=8, attention_dp=True),
            serving.RequestShape(input_tokens=1024, output_tokens=1024, context_tokens=2048),
            batch=630, assumptions=Assumptions(engine="vllm"),
        )  # fmt: skip
        assert est.step_model is not None
        return est.step_model.expert_load_skew

    assert skew(catalog) == pytest.approx(1.0 + 0.12 * 3)
    assert skew(user) == pytest.approx(1.0 + 0.3 * 3)


def test_an_overlay_reaches_the_estimate_command(tmp_path: Path) -> None:
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(SLOW_HOPPER_GEMMS, encoding="utf-8")
    args = ["estimate", str(example("13b-train-then-serve")), "--workload", "0", "--gpu", "h100-sxm", "--count", "8",
            "--tp", "2", "--json"]  # fmt: skip
    shipped, mine = run_cli(*args), run_cli(*args, "--catalog", str(overlay))
    assert shipped.exit_code == 0 and mine.exit_code == 0, mine.output
    assert json.loads(mine.output) != json.loads(shipped.output)


def test_a_new_architecture_gets_its_own_row_and_rows_may_not_collide() -> None:
    user = load_catalog_text(
        """
kernels:
- id: rubin
  architectures: [Rubin]
  gemm_shape: {per_output_dim_elements: 200.0, per_reduction_dim_elements: 300.0}
  grouped_gemm: {peak_share: 0.98, half_tokens: 360.0, dense_peak_share: 0.78}
  unbalanced_routing: {skew_per_doubling: 0.12}
  tp_comm_overlap: true
  fitted_to: my tables
  source: https://example.com/rubin
  as_of: '2027-01'
""",
        "mine.yaml",
    )
    assert user.kernels_for("rubin") is user.kernels["rubin"]
    assert user.kernels_for("Some Future Part") is user.kernels["ampere"]  # the default row
    with pytest.raises(CatalogInputError, match="listed by kernels 'hopper' too"):
        load_catalog_text(
            "kernels:\n- {id: hopper, override: true, architectures: [Hopper, Ampere], source: https://x.org, "
            "as_of: '2026-12'}\n",
            "mine.yaml",
        )
    with pytest.raises(CatalogInputError, match="exactly one kernels row is the default"):
        load_catalog_text(
            "kernels:\n- {id: hopper, override: true, default: true, source: https://x.org, as_of: '2026-12'}\n",
            "mine.yaml",
        )
