"""The training rows' dominance filter (candidates/prune.py) keeps what comparing every pair keeps, in the same order.

The filter looks earlier rows up in sorted staircases instead of comparing every pair (issue 33: 1.15M comparisons
for a 456-row table); the pairwise filter below is the specification it replaced, run on random tables with many
ties (equal GPUs, widths, times and costs; few forbidding families; rentable or not).
"""

from __future__ import annotations

import random

import pytest

from clusterplan.candidates.offerings import _without_slower_fabrics
from clusterplan.candidates.prune import _training_dominates, prune_training_rows
from clusterplan.candidates.table import Offering, TrainingRow


def pairwise(rows: list[TrainingRow]) -> list[TrainingRow]:
    """The filter as it was: every row against every kept one, in the same visiting order."""
    ordered = sorted(
        rows,
        key=lambda r: (
            r.gpu_id, r.gpus, r.tp, r.time_to_train_s, r.cloud_cost_usd, r.pp, r.zero_stage, r.recompute, r.micro_batch,
        ),
    )  # fmt: skip
    kept: list[TrainingRow] = []
    for r in ordered:
        if any(_training_dominates(s, r) for s in kept):
            continue
        kept = [s for s in kept if not _training_dominates(r, s)]
        kept.append(r)
    return sorted(kept, key=lambda r: (r.gpu_id, r.tp, r.pp, r.dp, r.zero_stage, r.recompute, r.micro_batch))


FAMILIES = [(), (("tp_nvlink", "x"),), (("power", "y"),), (("tp_nvlink", "x"), ("power", "y"))]


def random_rows(rng: random.Random, n: int) -> list[TrainingRow]:
    rows = []
    for i in range(n):
        rows.append(
            TrainingRow(
                gpu_id=rng.choice(["h100", "a100"]),
                tp=rng.choice([1, 2, 4, 8]),
                pp=rng.choice([1, 2]),
                dp=rng.choice([1, 2, 3, 4]),
                zero_stage=rng.choice([0, 1, 3]),
                recompute=rng.choice(["none", "full"]),
                micro_batch=rng.choice([1, 2]),
                time_to_train_s=float(rng.choice([1, 2, 3, 5, 8, float("inf")])),
                cloud_cost_usd=float(rng.choice([0, 10, 20, 30])),
                forbidden_by=rng.choice(FAMILIES),
                cloud_offering=rng.choice([None, "gcp:a3"]),
                cp=rng.choice([1, 1, 2]),
                tokens_per_s=float(i),  # tells rows equal on every other field apart
            )
        )
    return rows


@pytest.mark.parametrize("seed", range(40))
def test_sorted_filter_keeps_what_the_pairwise_one_keeps(seed: int) -> None:
    rng = random.Random(seed)
    rows = random_rows(rng, rng.choice([0, 1, 5, 30, 200]))
    assert prune_training_rows(rows) == pairwise(rows)


def test_a_row_beaten_only_by_a_later_equal_one_is_dropped() -> None:
    """Equal on GPUs, width, time and cost, the rentable row beats the one that is not, whichever comes first."""
    base = TrainingRow("h100", 2, 1, 2, 1, "none", 1, 5.0, cloud_cost_usd=10.0)
    rentable = TrainingRow("h100", 2, 1, 2, 0, "none", 1, 5.0, cloud_cost_usd=10.0, cloud_offering="gcp:a3")
    assert prune_training_rows([base, rentable]) == [rentable]
    wider = TrainingRow("h100", 4, 1, 1, 1, "none", 1, 4.0, cloud_cost_usd=9.0)
    assert prune_training_rows([base, wider]) == [base, wider]  # wider TP: neither beats the other


def _pairwise_without_slower_fabrics(offerings: list[Offering]) -> list[Offering]:
    """The rule written as every pair compared: a fabric offer goes when another of its GPU, size, TP domain, fabric
    and term has at least its network per GPU for a lower (price, key)."""
    return [
        o
        for o in offerings
        if not (
            o.fabric
            and any(
                x is not o
                and (x.gpu_id, x.gpus_per_unit, x.tp_domain, x.fabric, x.term)
                == (o.gpu_id, o.gpus_per_unit, o.tp_domain, o.fabric, o.term)
                and x.network_gb_per_s_per_gpu >= o.network_gb_per_s_per_gpu
                and (x.usd_per_hour, x.key) < (o.usd_per_hour, o.key)
                for x in offerings
            )
        )
    ]


def test_a_slower_fabric_offer_goes_only_for_a_cheaper_one_of_its_shape() -> None:
    """offerings._without_slower_fabrics (offers compared within their shape) keeps what comparing every pair keeps,
    in order, on random cloud offers."""
    rng = random.Random(33)
    dropped = 0
    for _ in range(200):
        offers = [
            Offering(
                key=f"cloud:{i}", kind="cloud", gpu_id=rng.choice(["a", "b"]), gpus_per_unit=rng.choice([1, 8]),
                tp_domain=rng.choice([1, 8]), usd_per_hour=rng.choice([10.0, 20.0, 30.0]), fabric=rng.random() < 0.7,
                network_gb_per_s_per_gpu=rng.choice([0.0, 6.25, 50.0]), term=rng.choice(["on_demand", "spot"]),
            )
            for i in range(rng.randint(1, 30))
        ]  # fmt: skip
        kept = _without_slower_fabrics(offers)
        assert kept == _pairwise_without_slower_fabrics(offers)
        dropped += len(offers) - len(kept)
    assert dropped > 100  # the rule is exercised, not only its keeping side
