"""The scheduler simulation's pooled ITL statistics (physics/schedule_sim.py): kept as (gap, count) runs of steps, they
are the statistics of every gap written out, bit for bit whatever the order, repeats or signs of the runs: numpy's
linear percentiles and the mean, over the runs sorted by (gap, count)."""

from __future__ import annotations

import random

import pytest

from clusterplan.physics import schedule_sim as sim

NAN = float("nan")


@pytest.mark.parametrize("kind", ["distinct", "repeated", "signed zeros", "a nan"])
def test_pooled_gaps_have_the_statistics_of_every_gap_written_out(kind: str) -> None:
    for seed in range(40):
        rng = random.Random(seed)
        values = {
            "distinct": [rng.uniform(0.01, 0.05) for _ in range(6)],
            "repeated": [0.02, 0.021, 0.035],
            "signed zeros": [0.02, 0.0, -0.0],
            "a nan": [0.02, NAN, 0.035, 0.01],
        }[kind]
        runs = [(rng.choice(values), rng.choice([0, 1, 2, 3, 7])) for _ in range(rng.randint(1, 60))]
        pooled = sim._weighted_distribution(runs)
        ordered = sorted(r for r in runs if r[1] > 0)
        every = sim.distribution([gap for gap, count in ordered for _ in range(count)])
        total = sum(c for _, c in ordered)
        mean = sum(v * c for v, c in ordered) / total if total else 0.0
        assert str(pooled) == str(sim.Distribution(mean, every.p50_s, every.p90_s, every.p95_s, every.p99_s))
