"""Triton's MXFP4 MoE kernel on Hopper pads each expert's rows to a row tile sized from every gathered token
(moe.row_tile_padding; catalog/engines.yaml ``row_tile_max``): under expert parallelism the tile is EP times too
tall, so a DEP4 gpt-oss step multiplies far more rows than it routes."""

from __future__ import annotations

import pytest

from clusterplan.catalog.load import Catalog
from clusterplan.physics import moe, serving, step
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.layout import Layout
from clusterplan.physics.types import ServingEstimate

TRT = Assumptions(engine="tensorrt-llm")


def test_the_tile_is_sized_from_every_gathered_token_not_the_ranks_share() -> None:
    # gpt-oss-120b (128 experts, top-4) at 1,632 gathered tokens: 6,528 routed slots, 51 rows an expert
    assert moe.row_tile_padding(1632, 4, 128, 1, 128) == pytest.approx(64 / 51, rel=0.01)  # tile 64 = next pow2 of 51
    assert moe.row_tile_padding(1632, 4, 128, 4, 128) == pytest.approx(128 / 51, rel=0.01)  # 204 a local expert -> 128
    assert moe.row_tile_padding(1632, 4, 128, 4, 0) == 1.0  # a kernel that does not pad
    # far past the largest tile every expert fills its tiles: the padding fades
    assert moe.row_tile_padding(65536, 4, 128, 4, 128) < 1.07


def _est(catalog: Catalog, gpu: str, quant: str, *, ep: int, a: Assumptions = TRT) -> ServingEstimate:
    layout = Layout(tp=ep, quant=quant, kv_precision="fp8", ep=ep, attention_dp=ep > 1)
    shape = serving.RequestShape(input_tokens=1000, output_tokens=1000, context_tokens=2000)
    return serving.estimate_serving(
        catalog.model("gpt-oss-120b"), catalog.gpu(gpu), layout, shape, batch=1600, assumptions=a
    )


def test_a_dep4_step_on_hopper_multiplies_the_padded_rows(catalog: Catalog) -> None:
    est = _est(catalog, "h100-sxm", "fp4", ep=4)
    m = est.step_model
    assert m is not None and m.expert_row_tile_max == 128
    unpadded = m.model_copy(update={"expert_row_tile_max": 0})
    n = 1600.0  # the replica's sequences, every one gathered by each rank's experts
    _, padded_c = step.expert_parts_s(m, n)
    _, plain_c = step.expert_parts_s(unpadded, n)
    assert padded_c > 1.5 * plain_c
    assert step.decode_step_s(m, n) > 1.1 * step.decode_step_s(unpadded, n)


def test_blackwell_kernels_do_not_pad(catalog: Catalog) -> None:
    m = _est(catalog, "b200", "fp4", ep=4).step_model
    assert m is not None and m.expert_row_tile_max == 0
