"""Fit the decode GEMMs' ramp at small M (physics/factors.py ``decode_gemm_knee_tokens``) on measured kernel tables.

A dense GEMM of ``M`` rows reaches a share of peak that falls at small ``M``; per GPU and precision this fits
``share(M) / share(M >= 4096) = M / (M + M0)`` by least squares in log over the tables' GEMMs with ``N`` and ``K`` in
4,096-16,384 and ``M`` in 128-2,048 (the sequences a decode step multiplies), and prints ``M0``. The planner's compute
factors were read at large ``M`` on the reference architecture (Hopper FP8), whose decode rows absorb its own ramp,
so only the ratio of ramps enters a step (physics/step.py ``linear_ramp``).

It needs what the planner does not: ``pip install aiconfigurator-core==0.12.0 pandas pyarrow scipy`` (the tables
ship inside that wheel: ``aiconfigurator_core/systems/data/<gpu>/gemm/trtllm/1.3.0rc20/gemm_perf.parquet``).

    python bench/gemm_knee_fit.py --data <site-packages>/aiconfigurator_core/systems/data
"""

from __future__ import annotations

import argparse
from pathlib import Path

TABLES = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200", "gb200": "GB200"}
DTYPES = ("fp8", "nvfp4", "bfloat16")
VERSION = "1.3.0rc20"
NK_RANGE = (4096, 16384)
M_RANGE = (128, 2048)
LARGE_M = 4096


def knee(data: Path, table: str, dtype: str) -> tuple[float, int] | None:
    """(M0, GEMMs fitted) of one GPU's table at one precision; None where the table lacks it."""
    import numpy as np
    import pandas as pd
    from scipy.optimize import least_squares

    df = pd.read_parquet(data / table / "gemm" / "trtllm" / VERSION / "gemm_perf.parquet")
    df = df[(df.gemm_dtype == dtype) & df.n.between(*NK_RANGE) & df.k.between(*NK_RANGE)]
    if df.empty:
        return None
    df = df.assign(rate=2.0 * df.m * df.n * df.k / df.latency)  # FLOPs per latency unit: only ratios are used
    large = df[df.m >= LARGE_M].groupby(["n", "k"]).rate.median().rename("large")
    small = df[df.m.between(*M_RANGE)].join(large, on=["n", "k"], how="inner")
    m, ratio = small.m.to_numpy(dtype=float), (small.rate / small.large).to_numpy()
    result = least_squares(lambda p: np.log(m / (m + p[0])) - np.log(ratio), [200.0], bounds=([0.0], [1e5]))
    return float(result.x[0]), len(small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="aiconfigurator_core/systems/data")
    args = parser.parse_args()
    for table, name in TABLES.items():
        for dtype in DTYPES:
            fitted = knee(args.data, table, dtype)
            if fitted is not None:
                print(f"{name:6s} {dtype:9s} M0 {fitted[0]:6.0f}  ({fitted[1]} GEMMs)")


if __name__ == "__main__":
    main()
