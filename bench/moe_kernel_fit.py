"""Fit TensorRT-LLM's MoE kernel factors on NVIDIA aiconfigurator-core's measured MoE tables.

What it fits, per architecture and weight precision (catalog/engines.yaml ``moe_routed_token_s`` and
physics/factors.py ``moe_gemm_architecture_fraction``): one MoE layer of ``T`` tokens on an EP rank takes

    max(weights / g_weights, FLOPs / g + T·k/ep · rank_s + T·k · batch_s) + layer_s

with ``weights`` and ``FLOPs`` at this model's own rates (the engine's bandwidth and compute efficiency, the
architecture's compute share, the precision's matmul share, Hopper's block-scale share), ``g`` the grouped GEMM's
share of that roofline (``g_weights`` = ``g`` but for the groups in ``TWO_SHARES``), ``rank_s`` the kernel's time per token routed to the rank's experts and ``batch_s`` per
routed token of every token the rank receives, ``layer_s`` the kernels' fixed time per layer whatever its tokens
and weights, bounded by the group's fastest one-token layer (:func:`smallest_layer_s`); a kernel that pads each expert's rows to a row tile (the engine's
``row_tile_max``: Triton's MXFP4 MoE on Hopper) multiplies the padded rows (``moe.row_tile_padding``). The least
soft-L1 log error over the tables' balanced-routing, TP 1, EP 1-32 rows whose layer is model-sized (>= 100 us on
the roofline at g = 0.5).

It needs what the planner does not: ``pip install aiconfigurator-core==0.12.0 pandas pyarrow scipy`` (the tables
ship inside that wheel: ``aiconfigurator_core/systems/data/<gpu>/moe/trtllm/1.3.0rc20/moe_perf.parquet``).

    python bench/moe_kernel_fit.py --data <site-packages>/aiconfigurator_core/systems/data
"""

from __future__ import annotations

import argparse
import functools
import math
from pathlib import Path
from typing import Any

from clusterplan.catalog.load import load_catalog
from clusterplan.physics import memory, moe
from clusterplan.physics.factors import Assumptions
from clusterplan.physics.rules import compute_precision_for_weights
from clusterplan.physics.serving import peak_tflops

VERSION = "1.3.0rc20"
KERNEL = "moe_torch_flow_cutlass"  # TensorRT-LLM's default MoE backend; gpt-oss's MXFP4 on Hopper has its own
# (architecture, the table's moe_dtype) -> (catalog GPUs with tables, our weight precision, kernel, block-scaled)
GROUPS: dict[tuple[str, str], tuple[tuple[str, ...], str, str, bool]] = {
    ("Blackwell", "nvfp4"): (("b200", "gb200"), "fp4", KERNEL, False),
    ("Blackwell", "fp8"): (("b200", "gb200"), "fp8", KERNEL, False),
    ("Blackwell", "bfloat16"): (("b200", "gb200"), "bf16", KERNEL, False),
    ("Hopper", "fp8"): (("h100-sxm", "h200"), "fp8", KERNEL, False),
    ("Hopper", "fp8_block"): (("h100-sxm", "h200"), "fp8", KERNEL, True),
    ("Hopper", "bfloat16"): (("h100-sxm", "h200"), "bf16", KERNEL, False),
    ("Hopper", "w4a16_mxfp4"): (("h100-sxm", "h200"), "fp4", "moe_torch_flow", False),
}
# Groups whose weight stream gets a share of its own (factors.py moe_weight_stream_fraction): the Triton MXFP4 kernel
# dequantises its weights to BF16 inside the GEMM; one share for both leaves median |log residual| 0.119, two 0.069
TWO_SHARES = {("Hopper", "w4a16_mxfp4")}
TABLE_DIR = {"b200": "b200_sxm", "gb200": "gb200", "h100-sxm": "h100_sxm", "h200": "h200_sxm"}
MIN_ROOFLINE_S = 100e-6  # model-sized layers: launch-bound toy shapes would dominate a table-wide fit
MAX_EP = 32
# The routed tokens at which the unbalanced-routing ratios are tabulated (engines.yaml ``unbalanced.tokens``): the
# tables' own points from where the compute side can bind; below 128 tokens the weights bind and the ratio is 1
ROUTING_TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
ROUTING_ALPHAS = ("power_law_1.01", "power_law_1.2")  # aiconfigurator's defaults: DeepSeek-family, other MoE models


def rates(gpu_id: str, precision: str, block: bool) -> tuple[float, float, float]:
    """(bytes/s, FLOP/s, bytes per weight) this model gives an MoE layer on ``gpu_id`` before the grouped-GEMM share."""
    catalog = load_catalog()
    gpu = catalog.gpu(gpu_id)
    a = Assumptions(engine="tensorrt-llm", fp8_weight_scaling="block" if block else "tensor")
    cls = gpu.gpu_class
    cprec = compute_precision_for_weights(gpu, precision)  # MXFP4 on Hopper dequantises to 16-bit
    flops = (
        peak_tflops(gpu, cprec)
        * 1e12
        * a.compute_efficiency.of(cls)
        * a.sustained_clock_fraction.of(cls)
        * a.compute_fraction(gpu.architecture, cprec)
        * a.moe_compute_fraction(gpu.architecture, precision)
    )
    fmt = "mxfp4" if gpu.architecture == "Hopper" else "nvfp4"
    bpp = memory.weight_bytes_per_param(precision, fp4_format=fmt)
    return gpu.bandwidth_gb_per_s * 1e9 * a.memory_bandwidth_efficiency.of(cls), flops, bpp


def catalog_architecture(gpu_id: str) -> str:
    """The catalog's architecture name of ``gpu_id``."""
    return load_catalog().gpu(gpu_id).architecture


def catalog_shapes() -> dict[tuple[int, int, int, int], str]:
    """(hidden, expert width, experts per token, experts) -> the catalog's MoE models of that shape."""
    names: dict[tuple[int, int, int, int], str] = {}
    for model_id, arch in load_catalog().models.items():
        if arch.moe_experts > 1:
            key = (arch.hidden_size, arch.expert_ffn_size, arch.experts_per_token, arch.moe_experts)
            names[key] = "/".join(filter(None, [names.get(key), model_id]))
    return names


@functools.cache
def table(data: Path, gpu_id: str) -> Any:
    """One GPU's MoE kernel table, read once for every group that uses it."""
    import pandas as pd

    return pd.read_parquet(data / TABLE_DIR[gpu_id] / "moe" / "trtllm" / VERSION / "moe_perf.parquet")


def rows(data: Path, key: tuple[str, str]) -> Any:
    """The table rows of one group, with this model's weight and FLOP times per row (``tw``, ``tf``, seconds)."""
    import pandas as pd

    gpus, precision, kernel, block = GROUPS[key]
    parts = []
    for gpu_id in gpus:
        df = table(data, gpu_id)
        df = df[
            (df.distribution == "balanced")
            & (df.moe_dtype == key[1])
            & (df.kernel_source == kernel)
            & (df.moe_tp_size == 1)
            & (df.moe_ep_size <= MAX_EP)
        ].copy()
        bw, flops, bpp = rates(gpu_id, precision, block)
        ep, tokens, k = df.moe_ep_size, df.num_tokens, df.topk
        layer_params = 3.0 * df.hidden_size * df.inter_size  # gated: up, gate and down projections
        triples = zip(df.num_experts, k, tokens, strict=True)
        touched = [moe.experts_touched(int(e), int(kk), float(t)) for e, kk, t in triples]
        df["tw"] = pd.Series(touched, index=df.index) / ep * layer_params * bpp / bw
        # a kernel that pads each expert's rows to its row tile multiplies the padded rows (Triton matmul_ogs)
        tile_max = Assumptions(engine="tensorrt-llm").moe_row_tile_max(catalog_architecture(gpu_id), precision)
        quads = zip(tokens, k, df.num_experts, ep, strict=True)
        padding = [moe.row_tile_padding(float(t), int(kk), int(e), int(p), tile_max) for t, kk, e, p in quads]
        df["tf"] = 2.0 * tokens * k * layer_params / ep / flops
        df["gpu"] = gpu_id
        df = df[((df[["tw", "tf"]].max(axis=1) / 0.5) >= MIN_ROOFLINE_S) & (tokens >= 8)]  # on the real rows
        parts.append(df.assign(tf=df.tf * pd.Series(padding, index=tokens.index)[df.index]))
    return pd.concat(parts)


def smallest_layer_s(data: Path, key: tuple[str, str]) -> float:
    """The group's fastest one-token layer, seconds: its fixed time per layer can be no longer."""
    gpus, _, kernel, _ = GROUPS[key]
    fastest = math.inf
    for gpu_id in gpus:
        df = table(data, gpu_id)
        one = df[(df.moe_dtype == key[1]) & (df.kernel_source == kernel) & (df.num_tokens == 1)]
        fastest = min(fastest, float(one.latency.min()) * 1e-3)
    return fastest


def routing_ratios(data: Path, key: tuple[str, str]) -> dict[int, list[float]]:
    """EP degree -> the group's layer time under power-law routing over balanced, at each of ``ROUTING_TOKENS``.

    The median over the group's GPUs, shapes and both power-law exponents the tables hold (aiconfigurator's
    defaults: 1.01 for DeepSeek-family models, 1.2 for the others; one curve per kernel, not per model), TP 1, EP
    1-32, floored at 1: below it the power-law rows touch fewer experts than balanced ones, which the weight side
    (uniform routing, ``moe.experts_touched``) already carries.
    """
    import pandas as pd

    gpus, _, kernel, _ = GROUPS[key]
    parts = []
    for gpu_id in gpus:
        df = table(data, gpu_id)
        parts.append(
            df[
                (df.moe_dtype == key[1])
                & (df.kernel_source == kernel)
                & (df.moe_tp_size == 1)
                & (df.moe_ep_size <= MAX_EP)
                & df.num_tokens.isin(ROUTING_TOKENS)
            ]
        )
    df = pd.concat(parts)
    shape = ["device", "hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size", "num_tokens"]
    wide = df.pivot_table(index=shape, columns="distribution", values="latency")
    ratios = pd.concat([wide[a] / wide["balanced"] for a in ROUTING_ALPHAS if a in wide]).dropna()
    median = ratios.groupby(level=["moe_ep_size", "num_tokens"]).median()
    return {
        int(ep): [round(max(1.0, float(median.get((ep, t), 1.0))), 2) for t in ROUTING_TOKENS]
        for ep in sorted(median.index.get_level_values(0).unique())
    }


def fit(
    df: Any, *, token_terms: bool = True, two_shares: bool = False, layer_max_s: float = 0.0
) -> tuple[tuple[float, float, float, float, float], Any]:
    """(g, rank_s, batch_s, g_weights, layer_s) and the log residuals (model over measured) of one group (``g`` alone
    without the token terms: the model before 2026-11-24). ``two_shares``: the weight stream gets a share of its own
    (``g_weights``; else ``g``). ``layer_max_s``: the bound on the kernels' fixed time per layer (``layer_s``; 0: none
    fitted), the group's fastest one-token layer (:func:`smallest_layer_s`)."""
    import numpy as np
    from scipy.optimize import least_squares

    measured = np.log(df.latency.to_numpy() * 1e-3)
    tokens, k, ep = df.num_tokens.to_numpy(), df.topk.to_numpy(), df.moe_ep_size.to_numpy()
    tw, tf = df.tw.to_numpy(), df.tf.to_numpy()

    def model(p: Any) -> Any:
        g, rank_ns, batch_ns, g_weights, layer_us = p
        g_w = g_weights if two_shares else g
        tokens_s = tokens * k / ep * rank_ns * 1e-9 + tokens * k * batch_ns * 1e-9
        return np.maximum(tw / g_w, tf / g + tokens_s) + layer_us * 1e-6

    tiny = 1e-9  # an upper bound that pins a term left out at 0
    result = least_squares(
        lambda p: np.log(model(p)) - measured,
        [0.6, 1.0 if token_terms else 0.0, 0.1 if token_terms else 0.0, 0.6, layer_max_s * 0.5e6],
        bounds=(
            [0.05, 0.0, 0.0, 0.05, 0.0],
            [2.0, 100.0 if token_terms else tiny, 100.0 if token_terms else tiny, 2.0, max(layer_max_s * 1e6, tiny)],
        ),
        loss="soft_l1",
        f_scale=0.05,
    )
    g, rank_ns, batch_ns, g_weights, layer_us = (float(x) for x in result.x)
    params = (g, rank_ns * 1e-9, batch_ns * 1e-9, g_weights if two_shares else g, layer_us * 1e-6)
    return params, np.log(model(result.x)) - measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="aiconfigurator_core/systems/data")
    parser.add_argument("--without-token-terms", action="store_true", help="fit g alone, as before 2026-11-24")
    parser.add_argument(
        "--without-layer-term", action="store_true", help="no fixed time per layer (the MoE kernels without layer_s)"
    )
    parser.add_argument("--routing", action="store_true", help="print the unbalanced-routing tables (engines.yaml)")
    args = parser.parse_args()
    if args.routing:
        for key in GROUPS:  # engines.yaml's shape: moe_routed_token_s.<architecture>.<precision>.unbalanced
            precision = "fp8_block" if GROUPS[key][3] else GROUPS[key][1]
            print(f"{key[0]} {precision}:\n  unbalanced:\n    tokens: {list(ROUTING_TOKENS)}\n    by_ep:")
            for ep, row in routing_ratios(args.data, key).items():
                print(f"      {ep}: [{', '.join(f'{r:.2f}' for r in row)}]")
        return
    shapes = catalog_shapes()
    engine_g = Assumptions(engine="tensorrt-llm").moe_gemm_efficiency.datacenter
    print(f"engine moe_gemm_efficiency (datacenter): {engine_g:.3f}")
    for key in GROUPS:
        df = rows(args.data, key)
        two = key in TWO_SHARES
        layer_max_s = 0.0 if args.without_layer_term else smallest_layer_s(args.data, key)
        (g, rank_s, batch_s, g_w, layer_s), residual = fit(
            df, token_terms=not args.without_token_terms, two_shares=two, layer_max_s=layer_max_s
        )
        df = df.assign(res=residual)
        median = float(abs(df.res).median())
        weights = f"  g_weights {g_w:.3f} (fraction {g_w / engine_g:.2f})" if two else ""
        print(
            f"{key[0]:9s} {key[1]:12s} rows {len(df):5d}  g {g:.3f} (fraction {g / engine_g:.2f}){weights}  "
            f"rank_s {rank_s:.2e}  batch_s {batch_s:.2e}  layer_s {layer_s:.2e} (<= {layer_max_s:.2e})  "
            f"median |log residual| {median:.3f}"
        )
        by_shape = df.groupby(["hidden_size", "inter_size", "topk", "num_experts"]).res.median()
        named = [f"{shapes[s]} {v:+.2f}" for s, v in by_shape.items() if s in shapes]
        by_ep = ", ".join(f"EP{e} {v:+.2f}" for e, v in df.groupby("moe_ep_size").res.median().items())
        print(f"    catalog shapes: {'; '.join(named) or '-'}")
        print(f"    by EP: {by_ep}")
        if not math.isfinite(median):
            raise SystemExit(f"{key}: no rows")


if __name__ == "__main__":
    main()
