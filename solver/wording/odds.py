"""How a design's chance of meeting its targets reads (``plan.TargetOdds``): words and figures only."""

from __future__ import annotations

from clusterplan.plan import Design, TargetOdds
from clusterplan.wording.fmt import rps, seconds

FIGURE_LABEL = {
    "throughput": "throughput",
    "p95_latency": "p95 latency",
    "p95_ttft": "p95 TTFT",
    "p95_tpot": "p95 TPOT",
    "time_to_train": "deadline",
}


def chance(probability: float) -> str:
    """A probability as a percentage that never reads as a certainty: a normal fit of the model's error puts some
    chance on either side of any target, so 0.996 is "over 99%", not "100%"."""
    if probability > 0.99:
        return "over 99%"
    if probability < 0.01:
        return "under 1%"
    return f"{probability:.0%}"


def _value(o: TargetOdds, x: float) -> str:
    return f"{rps(x)} req/s" if o.unit == "req/s" else seconds(x)


def short(o: TargetOdds) -> str:
    """``pretrain: deadline 58%``."""
    return f"{o.workload}: {FIGURE_LABEL[o.figure]} {chance(o.probability)}"


def sentence(o: TargetOdds) -> str:
    """One target's odds with the model's 80% range of the true figure."""
    what = "needed" if o.figure == "throughput" else "target"
    flag = "; within the model's error" if o.within_error else ""
    return (
        f"{o.workload}: {FIGURE_LABEL[o.figure]} {_value(o, o.predicted)} predicted, 80% range "
        f"{_value(o, o.low)} to {_value(o, o.high)}, {what} {_value(o, o.target)}: "
        f"{chance(o.probability)} chance to meet{flag}"
    )


def flagged(d: Design) -> list[TargetOdds]:
    """The design's targets that lie inside the model's error."""
    return [o for o in d.odds if o.within_error]


def cell(d: Design) -> str:
    """The designs table's cell: each target within the model's error, or '-'."""
    return "\n".join(short(o) for o in flagged(d)) or "-"


def confidence_note(confidence: float | None) -> str | None:
    if confidence is None:
        return None
    return (
        f"Planned at confidence {confidence:g}: rates, p95 latencies and times to train are derated by the "
        "model's measured error so that each target holds with that probability (the chances shown start from "
        "the point predictions)."
    )
