"""``clusterplan calibrate``'s text and its overlay YAML. Formatting only; the data is
:mod:`clusterplan.design.calibrate`'s fits."""

from __future__ import annotations

import math
from typing import Any

import yaml

from clusterplan.design.calibrate import (
    SERVING_BOUNDS,
    TRAINING_BOUNDS,
    DesignOne,
    FlagIgnored,
    ServingFit,
    TrainingFit,
)
from clusterplan.errors import printable
from clusterplan.wording.fmt import usd

_UNITS = {
    "ttft_s": ("mean TTFT ms", 1e3),
    "tpot_s": ("mean TPOT ms", 1e3),
    "output_tokens_per_s": ("output tok/s", 1.0),
}


def overlay_yaml(doc: dict[str, Any], header: str) -> str:
    """The overlay as a catalog file, a comment header first."""
    lines = "".join(f"# {line}\n" for line in header.splitlines())
    return lines + yaml.safe_dump(doc, sort_keys=False, allow_unicode=False, width=120)


def serving_lines(fit: ServingFit) -> list[str]:
    """The factors before and after, their bounds, and each figure's residual before and after."""
    out = [
        f"calibrated {fit.engine} on {printable(fit.gpu.name)} ({fit.gpu.id})",
        "",
        "factor                        before     after    bounds",
    ]
    for name, (lo, hi) in SERVING_BOUNDS.items():
        mark = "  (at its bound)" if name in fit.at_bound else ""
        out.append(f"{name:<28} {fit.before[name]:>8.4g} {fit.after[name]:>9.4g}    [{lo:g}, {hi:g}]{mark}")
    out += [
        "",
        "run / figure                                  measured     before      after   log error before -> after",
    ]
    for r in fit.residuals:
        label, scale = _UNITS[r.figure]
        name = f"{printable(r.run)[-30:]} {label}"
        out.append(
            f"{name:<44} {r.measured * scale:>9.4g}   {r.before * scale:>9.4g} {r.after * scale:>9.4g}   "
            f"{math.log(r.before / r.measured):+.3f} -> {math.log(r.after / r.measured):+.3f}"
        )
    before = sum(math.log(r.before / r.measured) ** 2 for r in fit.residuals)
    after = sum(math.log(r.after / r.measured) ** 2 for r in fit.residuals)
    out.append(f"summed squared log error {before:.4f} -> {after:.4f} over {len(fit.residuals)} figures")
    return out


def training_lines(fit: TrainingFit) -> list[str]:
    lo, hi = TRAINING_BOUNDS
    mark = "  (at its bound)" if fit.at_bound else ""
    return [
        f"calibrated training on {printable(fit.gpu.name)} ({fit.gpu.id})",
        f"training_mfu   before {fit.before:.4g}   after {fit.after:.4g}   bounds [{lo:g}, {hi:g}]{mark}",
        f"step time      measured {fit.measured_s:.4g} s   predicted before {fit.predicted_before_s:.4g} s   "
        f"after {fit.predicted_after_s:.4g} s",
    ]


def replan_lines(before: DesignOne, after: DesignOne) -> list[str]:
    """Design 1 of the requirement's plan under the catalog, then under the catalog and the overlay."""

    def line(d: DesignOne) -> str:
        if d.summary is None:
            return f"no design ({d.status})"
        return f"{printable(d.summary)}, {usd(d.total_usd or 0.0)}"

    moved = "design 1 moved" if (before.summary, before.total_usd) != (after.summary, after.total_usd) else "unchanged"
    return ["", f"re-planned with the overlay ({moved}):", f"  before: {line(before)}", f"  after:  {line(after)}"]


def ignored_lines(ignored: list[FlagIgnored]) -> list[str]:
    """One note per flag a file overrode (the file records what the run used)."""
    return [
        f"note: {printable(i.file)} records {i.field} {printable(i.recorded)}; --{i.field} {printable(i.given)} "
        "is not used for it"
        for i in ignored
    ]
