"""Time the training candidate preparation of a 16k-GPU search (issue #12: < 2 s on 2 cores).

    python bench/training_prep.py              # median of 3 builds
    python bench/training_prep.py --repeats 5

The case: Llama-3.1-405B pretraining, 15T tokens at 8k sequences, 16M-token global batch, H100 SXM only,
owned, with a deadline that needs about 16,000 GPUs. Prints the time of ``build_candidates`` (every training
layout estimated and pruned), the layouts evaluated, the rows kept and the fewest GPUs meeting the deadline.
"""

from __future__ import annotations

import argparse
import statistics
import time

REQUIREMENT = """
name: 405B pretraining at 16k H100
model: llama-3.1-405b
workloads:
  - kind: training
    name: pretrain
    tokens: 15T
    deadline: 80d
    sequence_length: 8k
    global_batch_tokens: 16M
    precision: bf16
constraints:
  allowed_gpus: [h100-sxm]
deployment: owned
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from clusterplan.candidates.build import build_candidates
    from clusterplan.catalog.load import load_catalog
    from clusterplan.requirement.load import load_requirement_text

    catalog = load_catalog()
    resolved = load_requirement_text(REQUIREMENT, "training_prep", catalog)
    times: list[float] = []
    cpu: list[float] = []
    table = None
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        table = build_candidates(resolved, catalog)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    assert table is not None
    (wc,) = table.workloads
    deadline = wc.deadline_s or float("inf")
    meeting = [r for r in wc.rows if r.time_to_train_s <= deadline and not r.forbidden_by]
    fewest = min(meeting, key=lambda r: (r.gpus, r.time_to_train_s), default=None)
    print(
        f"candidate preparation: median {statistics.median(times):.2f} s wall, {statistics.median(cpu):.2f} s CPU "
        f"over {args.repeats} (CPU time is what a loaded machine inflates least)"
    )
    print(f"layouts evaluated: {wc.considered:,}; rows kept: {len(wc.rows):,}")
    if fewest is not None:
        print(
            f"fewest GPUs meeting {deadline / 86400:.0f} d: {fewest.gpus:,} "
            f"({fewest.time_to_train_s / 86400:.1f} d; {fewest.gpu_id} tp {fewest.tp} cp {fewest.cp} pp {fewest.pp} "
            f"x {fewest.virtual_stages} virtual dp {fewest.dp}, "
            f"ZeRO {fewest.zero_stage}, recompute {fewest.recompute}, micro-batch {fewest.micro_batch})"
        )
    else:
        print("no layout meets the deadline")


if __name__ == "__main__":
    main()
