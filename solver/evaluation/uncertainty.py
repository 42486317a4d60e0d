"""How far the performance model is from measurements, and what that means for a design's targets.

The model's error per kind of figure is data: ``catalog/model_error.yaml``, written by
``python bench/accuracy.py --write-errors`` from the unflagged rows of ``docs/accuracy.md``. For each kind
(serving throughput, latency, training throughput, memory) it holds the distribution of
``e = ln(predicted / measured)``: its mean (``bias``), standard deviation (``spread``) and empirical quantiles.

Model of the truth: ``measured = predicted x exp(-e)`` with ``e ~ Normal(bias, spread)`` (a normal fit of the
log error; docs/model.md, 'Uncertainty'). From it:

* :func:`chance_at_least` / :func:`chance_at_most`: the probability that a rate reaches what is needed, or that
  a latency or a time stays under its target;
* :func:`interval`: the central 80% range of the true figure;
* :class:`Derate` (``confidence: c`` in a requirement): the factors by which the planner scales its predicted
  rates and times *before* the constraint families see them, so that each target holds with probability ``c``.
  :func:`clusterplan.evaluation.evaluate.serving_rates` and the training estimates apply them; nothing else does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from clusterplan.catalog.load import Catalog
    from clusterplan.physics.types import LatencyAtLoad, TrainingEstimate
    from clusterplan.plan import Design, ServingPlan, TargetOdds
    from clusterplan.requirement.load import ResolvedRequirement

ErrorKind = Literal["serving_throughput", "latency", "training_throughput", "memory"]
ERROR_FILE = "model_error.yaml"  # in the package data clusterplan.catalog_data (the repository's catalog/)
INTERVAL = (0.10, 0.90)  # the range a design's figures are shown with, and "within the model's error" means


class KindError(BaseModel):
    """The distribution of ln(predicted / measured) for one kind of figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cases: int = Field(ge=2, description="unflagged measurements")
    bias: float = Field(description="mean of ln(predicted / measured); > 0: the model over-predicts")
    spread: float = Field(gt=0, description="sample standard deviation of ln(predicted / measured)")
    median_abs_error: float = Field(ge=0, description="median |predicted / measured - 1|, fraction")
    quantiles: dict[str, float] = Field(description="empirical quantiles of ln(predicted / measured): p05 ... p95")
    rows: list[str] = Field(description="the measurement ids it came from (bench/data/)")


class ModelError(BaseModel):
    """``catalog/model_error.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    as_of: str
    source: str
    statistic: Literal["ln(predicted / measured)"]
    kinds: dict[ErrorKind, KindError]


@lru_cache(maxsize=1)
def model_error() -> ModelError:
    """The shipped error table (read once)."""
    from importlib import resources

    text = resources.files("clusterplan.catalog_data").joinpath(ERROR_FILE).read_text(encoding="utf-8")
    # libyaml's parser where PyYAML has it (the same data as safe_load, a tenth of the time: ~15 ms a solve).
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return ModelError.model_validate(yaml.load(text, Loader=loader)["model_error"])


_Z = NormalDist()


def error_quantile(k: KindError, p: float) -> float:
    """The ``p`` quantile of ln(predicted / measured) under the normal fit: bias + spread x z_p."""
    return k.bias + k.spread * _Z.inv_cdf(p)


def chance_at_least(predicted: float, needed: float, k: KindError) -> float:
    """P(true >= needed) for a figure that should be large (a rate): P(e <= ln(predicted / needed))."""
    if needed <= 0:
        return 1.0
    if predicted <= 0:
        return 0.0
    return _Z.cdf((math.log(predicted / needed) - k.bias) / k.spread)


def chance_at_most(predicted: float, target: float, k: KindError) -> float:
    """P(true <= target) for a figure that should be small (a latency, a time to train)."""
    if predicted <= 0:
        return 1.0
    if not math.isfinite(predicted):
        return 0.0
    return _Z.cdf((math.log(target / predicted) + k.bias) / k.spread)


def chance_time_at_most(predicted_s: float, target_s: float, k: KindError) -> float:
    """P(true time <= target) when the error is the *throughput*'s (time = work / rate, so the sign flips)."""
    if predicted_s <= 0:
        return 1.0
    return _Z.cdf((math.log(target_s / predicted_s) - k.bias) / k.spread)


def interval(predicted: float, k: KindError, *, inverse: bool = False) -> tuple[float, float]:
    """The central 80% range of the true figure: predicted x exp(-e) at e's 90th and 10th percentiles
    (``inverse``: the figure is a time whose error is its rate's, true = predicted x exp(e))."""
    lo_e, hi_e = error_quantile(k, INTERVAL[0]), error_quantile(k, INTERVAL[1])
    if not math.isfinite(predicted):
        return predicted, predicted
    if inverse:
        return predicted * math.exp(lo_e), predicted * math.exp(hi_e)
    return predicted * math.exp(-hi_e), predicted * math.exp(-lo_e)


# ------------------------------------------------------------------------------------------------
# Planning at a confidence: the one place predicted figures are derated
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Derate:
    """Factors applied to the model's figures before the constraints see them (all 1: ``confidence`` unset).

    At confidence c, each figure is moved to the c-quantile of its true value under the error model
    (docs/model.md 'Uncertainty'): rates x exp(-q_c), latencies x exp(-q_(1-c)), times x exp(q_c) of the
    kind's ln(predicted / measured). A factor that would loosen a figure is 1: confidence never plans
    above the point prediction.
    """

    confidence: float | None = None
    rate_factor: float = 1.0  # serving requests/s x this (<= 1)
    latency_factor: float = 1.0  # p95 TTFT, TPOT and end-to-end x this (>= 1)
    time_factor: float = 1.0  # time to train x this (>= 1); tokens/s and MFU divided by it

    @property
    def active(self) -> bool:
        return self.confidence is not None

    def target(self, target_s: float | None) -> float | None:
        """A p95 target as the undisturbed model must meet it: target / latency_factor."""
        return None if target_s is None else target_s / self.latency_factor

    def latency(self, lat: LatencyAtLoad) -> LatencyAtLoad:
        if self.latency_factor == 1.0:
            return lat
        f = self.latency_factor
        return lat.model_copy(
            update={
                name: getattr(lat, name) * f
                for name in ("p95_ttft_s", "p95_tpot_s", "p95_e2e_s", "mean_ttft_s", "mean_tpot_s", "mean_e2e_s")
            }
        )

    def training(self, est: TrainingEstimate) -> TrainingEstimate:
        if self.time_factor == 1.0:
            return est
        f = self.time_factor
        return est.model_copy(
            update={
                "time_to_train_s": est.time_to_train_s * f,
                "tokens_per_s": est.tokens_per_s / f,
                "mfu": est.mfu / f,
            }
        )


NO_DERATE = Derate()


def derate_for(confidence: float | None, errors: ModelError | None = None) -> Derate:
    """The factors of ``confidence`` (None: none) from the model's measured error."""
    if confidence is None:
        return NO_DERATE
    e = errors or model_error()
    q_rate = error_quantile(e.kinds["serving_throughput"], confidence)  # over-prediction at c: rates too high
    q_lat = error_quantile(e.kinds["latency"], 1.0 - confidence)  # under-prediction at c: latencies too low
    q_train = error_quantile(e.kinds["training_throughput"], confidence)
    return Derate(
        confidence=confidence,
        rate_factor=min(1.0, math.exp(-q_rate)),
        latency_factor=max(1.0, math.exp(-q_lat)),
        time_factor=max(1.0, math.exp(q_train)),
    )


# ------------------------------------------------------------------------------------------------
# A design's chance of meeting its targets
# ------------------------------------------------------------------------------------------------


def _odds(
    workload: str,
    figure: str,
    kind: ErrorKind,
    predicted: float,
    target: float,
    unit: str,
    errors: ModelError,
) -> TargetOdds:
    from clusterplan.plan import TargetOdds

    k = errors.kinds[kind]
    if figure == "throughput":
        p, (lo, hi) = chance_at_least(predicted, target, k), interval(predicted, k)
    elif figure == "time_to_train":
        p, (lo, hi) = chance_time_at_most(predicted, target, k), interval(predicted, k, inverse=True)
    else:
        p, (lo, hi) = chance_at_most(predicted, target, k), interval(predicted, k)
    return TargetOdds(
        workload=workload, figure=figure, error_kind=kind, predicted=predicted, target=target, unit=unit,
        low=lo, high=hi, probability=p, within_error=lo <= target <= hi,
    )  # fmt: skip


def _peak_p95s(w: ServingPlan, resolved: ResolvedRequirement, catalog: Catalog) -> dict[str, float]:
    """The worst replica group's point-predicted p95s at the load it receives at peak demand, s.

    Demand splits over replicas in proportion to their rates (as the checker splits it); each group's
    replica is estimated as planned (same layout, precision and batch cap) without any derating.
    """
    from clusterplan.evaluation import evaluate
    from clusterplan.physics import queueing

    names = [x.name for x in resolved.requirement.workloads]
    i = names.index(w.workload)
    sw = resolved.requirement.workloads[i]
    assert sw.kind == "serving"
    a = resolved.requirement.assumptions
    arch = resolved.model_for(i)
    has_targets = any(t is not None for t in (sw.p95_latency, sw.p95_ttft, sw.p95_tpot))
    total = w.capacity_rps if has_targets else w.capacity_no_targets_rps
    worst = {"p95_latency": 0.0, "p95_ttft": 0.0, "p95_tpot": 0.0}
    pool_worst = {"prefill": 0.0, "decode": 0.0}  # a disaggregated design: prefill p95 TTFT, decode p95 e2e
    for g in w.groups:
        est = evaluate.serving_estimate(
            arch, catalog.gpus[g.gpu], sw, evaluate.replica_layout(g), batch=g.batch, assumptions=a
        )
        rate = g.rate_rps if has_targets else g.rate_no_targets_rps
        load = w.demand_rps * rate / total if total > 0 else math.inf
        if g.role != "aggregated":
            from clusterplan.evaluation import pools

            side = sum(
                (x.rate_rps if has_targets else x.rate_no_targets_rps) * x.replicas
                for x in w.groups
                if x.role == g.role
            )
            at = pools.pool_at_load(est, arch, catalog.gpus[g.gpu], sw, g.role, w.demand_rps * rate / side, a)
            lat_e2e = at.p95_e2e_s if at.stable else math.inf
            pool_worst[g.role] = max(pool_worst[g.role], lat_e2e)
            if g.role == "prefill":
                worst["p95_ttft"] = max(worst["p95_ttft"], lat_e2e)
            else:
                worst["p95_tpot"] = max(worst["p95_tpot"], at.p95_tpot_s if at.stable else math.inf)
            worst["p95_latency"] = max(worst["p95_latency"], pool_worst["prefill"] + pool_worst["decode"])
            continue
        lat = queueing.latency_at_load(
            est, load, input_tokens=sw.input_tokens, output_tokens=sw.output_tokens, assumptions=a
        )
        for key, value in (("p95_latency", lat.p95_e2e_s), ("p95_ttft", lat.p95_ttft_s), ("p95_tpot", lat.p95_tpot_s)):
            worst[key] = max(worst[key], value if lat.stable else math.inf)
    return worst


def design_odds(
    design: Design, resolved: ResolvedRequirement, catalog: Catalog, errors: ModelError | None = None
) -> list[TargetOdds]:
    """Per workload and target, the chance the design meets it, from the model's point figures.

    The design's figures are the planned ones (derated when the requirement sets ``confidence``); the odds
    start from the point prediction. Serving: throughput is the capacity at the utilisation ceiling with the
    derating undone, against peak demand; each p95 target against the worst replica group's p95 at the load
    it receives at peak demand (:func:`_peak_p95s`). Training: time to train, derating undone, against the
    deadline.
    """
    from clusterplan.plan import ServingPlan

    e = errors or model_error()
    d = derate_for(resolved.requirement.confidence, e)
    out: list[TargetOdds] = []
    for w in design.workloads:
        if isinstance(w, ServingPlan):
            cap = w.capacity_no_targets_rps / d.rate_factor
            out.append(_odds(w.workload, "throughput", "serving_throughput", cap, w.demand_rps, "req/s", e))
            sw = next(x for x in resolved.requirement.workloads if x.name == w.workload)
            assert sw.kind == "serving"
            targets = {"p95_latency": sw.p95_latency, "p95_ttft": sw.p95_ttft, "p95_tpot": sw.p95_tpot}
            if not w.groups or all(t is None for t in targets.values()):
                continue
            peak = _peak_p95s(w, resolved, catalog)
            for figure, target in targets.items():
                if target is not None:
                    out.append(_odds(w.workload, figure, "latency", peak[figure], target, "s", e))
        elif w.deadline_s is not None:
            t_s = w.time_to_train_s / d.time_factor
            out.append(_odds(w.workload, "time_to_train", "training_throughput", t_s, w.deadline_s, "s", e))
    return out


def with_odds(designs: list[Design], resolved: ResolvedRequirement, catalog: Catalog) -> list[Design]:
    """Each design with its :func:`design_odds`."""
    return [d.model_copy(update={"odds": design_odds(d, resolved, catalog)}) for d in designs]
