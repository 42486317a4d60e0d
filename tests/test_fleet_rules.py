"""Fleet rules a reviewer expects (issue 35): consumer (GeForce) cards only where the requirement opts in, with the
licence reason in the plan."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from clusterplan.physics.reasons import ConsumerLicence
from clusterplan.wording import fmt
from conftest import plan_file

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog


CONSUMER = {"rtx-5090", "rtx-4090", "rtx-4080-super", "rtx-3090", "rtx-3090-ti"}  # gpus.yaml's gpu_class: consumer


def _small_chat(tmp_path: Path, name: str, **constraints: Any) -> Path:
    """An 8B chat service at 1 req/s, owned: small enough that a single consumer card is the cheapest server."""
    doc: dict[str, Any] = {
        "name": name,
        "model": "llama-3.1-8b",
        "deployment": "owned",
        "workloads": [
            {"kind": "serving", "name": "chat", "requests_per_min": 60, "input_tokens": 500, "output_tokens": 200,
             "p95_latency": "10s"}
        ],
    }  # fmt: skip
    if constraints:
        doc["constraints"] = constraints
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _gpus(plan: Any) -> set[str]:
    return {g for d in plan.designs for g in d.gpus_by_type}


def test_consumer_cards_are_left_out_by_default_with_the_licence_reason(tmp_path: Path, catalog: Catalog) -> None:
    """By default no design holds a GeForce card; each is ruled out before the model for its driver licence (NVIDIA's
    GeForce EULA excludes datacenter deployment), and the cheaper cards that lost say so."""
    from clusterplan.candidates.build import build_candidates
    from clusterplan.requirement.load import load_requirement

    path = _small_chat(tmp_path, "default")
    table = build_candidates(load_requirement(path, catalog), catalog)
    (wc,) = table.workloads
    assert not {r.gpu_id for r in wc.rows} & CONSUMER
    licence = {e.gpu_id for e in wc.exclusions if isinstance(e.reason, ConsumerLicence)}
    assert licence == CONSUMER
    assert {e.family for e in wc.exclusions if isinstance(e.reason, ConsumerLicence)} == {"licence"}
    plan = plan_file(path, catalog, top=5)
    assert not _gpus(plan) & CONSUMER
    assert plan.explanation is not None
    lost = {g.gpu: g.reason for g in plan.explanation.lost_gpus}
    assert "rtx-4090" in lost and "GeForce driver licence excludes datacenter deployment" in lost["rtx-4090"]


def test_consumer_cards_are_planned_when_the_requirement_opts_in(tmp_path: Path, catalog: Catalog) -> None:
    """With constraints.allow_consumer_gpus the cheapest design is a single GeForce card; naming one card in
    allowed_gpus plans that card alone, without the flag."""
    opted = plan_file(_small_chat(tmp_path, "opted", allow_consumer_gpus=True), catalog, top=1, explain=False)
    assert set(opted.designs[0].gpus_by_type) <= CONSUMER
    named = plan_file(_small_chat(tmp_path, "named", allowed_gpus=["rtx-4090"]), catalog, top=1, explain=False)
    assert set(named.designs[0].gpus_by_type) == {"rtx-4090"}


def _seventy_b_mixed(tmp_path: Path, **fleet: Any) -> Path:
    """The README's 70B chat service, owned on H100 SXM and RTX PRO 6000, mixing allowed, pools required: its cheapest
    design puts prefill on the RTX PRO 6000 and decode on the H100 (tests/test_disagg.py)."""
    doc: dict[str, Any] = {
        "name": "fleet-types",
        "model": "llama-3.1-70b",
        "deployment": "owned",
        "constraints": {"allowed_gpus": ["h100-sxm", "rtx-pro-6000"], "allow_mixed": True},
        "workloads": [
            {"kind": "serving", "name": "chat", "requests_per_min": 1000, "input_tokens": 1000, "output_tokens": 200,
             "max_context": "8k", "p95_latency": "5s", "p95_ttft": "1s", "peak_to_average": 1.2,
             "disaggregation": "required"}
        ],
    }  # fmt: skip
    if fleet:
        doc["fleet"] = fleet
    path = tmp_path / f"fleet-{len(fleet)}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_max_gpu_types_one_is_honoured_and_says_what_raising_it_saves(tmp_path: Path, catalog: Catalog) -> None:
    """fleet.max_gpu_types: 1 holds every design to one GPU type; the cap binds, and its trade is the move to 2 GPU
    types, saving the difference to the two-type optimum. The checker holds the cap too."""
    from clusterplan.design.check import check_plan
    from clusterplan.requirement.load import load_requirement

    free = plan_file(_seventy_b_mixed(tmp_path), catalog, top=1, explain=False)
    assert len(free.designs[0].gpus_by_type) == 2
    path = _seventy_b_mixed(tmp_path, max_gpu_types=1)
    capped = plan_file(path, catalog, top=3)
    for d in capped.designs:
        assert len(d.gpus_by_type) == 1, d.gpus_by_type
    assert capped.explanation is not None
    (check,) = [c for c in capped.explanation.constraints if c.family == "max_gpu_types"]
    assert check.status == "binding" and check.margin == 0
    assert check.trade is not None and check.trade.change == "fleet.max_gpu_types >= 2"
    saving = capped.designs[0].costs.total_usd - free.designs[0].costs.total_usd
    assert saving > 0 and abs(check.trade.saving_usd - saving) < 0.05  # the model's whole cents
    resolved = load_requirement(path, catalog)
    assert check_plan(capped.designs[0], resolved, catalog) == []
    problems = check_plan(free.designs[0], resolved, catalog)  # two GPU types under a cap of one
    assert any("exceed max_gpu_types 1" in p for p in problems), problems


def _hardware(d: Any) -> tuple[object, ...]:
    """What a design buys or rents: GPUs per (type, cloud | owned), and aggregated or disaggregated per workload."""
    held: dict[tuple[str, str], int] = {}
    for h in d.hardware:
        held[h.gpu, h.kind] = held.get((h.gpu, h.kind), 0) + h.gpus
    return tuple(sorted(held.items())), tuple(getattr(w, "disaggregated", False) for w in d.workloads)


def test_the_70b_examples_top_five_differ_in_hardware_and_fold_layout_variants(catalog: Catalog) -> None:
    """The README example's top five designs are pairwise distinct in hardware; another layout of one design's
    servers is listed in its also_runs_as, not as a design of its own, and each alternative says what it is."""
    from conftest import EXAMPLES, shared_plan

    path = next(p for p in EXAMPLES if p.stem == "70b-serving")
    plan = shared_plan(path, catalog, top=5, explain=False)
    assert len(plan.designs) == 5
    kinds = [_hardware(d) for d in plan.designs]
    assert len(set(kinds)) == 5, kinds
    for d in plan.designs:
        (w,) = d.workloads
        assert len({g.gpu for g in w.groups}) == 1  # type: ignore[union-attr]  # allow_mixed: false
    assert plan.designs[0].labels[0] == "cheapest"
    assert sum("most headroom" in d.labels for d in plan.designs) == 1
    variants = [(d, v) for d in plan.designs for v in d.also_runs_as]
    assert variants, "some design has another layout on its hardware"
    layouts = {"; ".join(f"{w.workload}: {fmt.layout(w)}" for w in d.workloads) for d in plan.designs}
    for _, v in variants:
        assert v not in layouts  # a variant is not also a design of its own
