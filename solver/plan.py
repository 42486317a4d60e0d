"""The plan: what ``clusterplan solve`` returns. Pydantic v2, ``extra="forbid"``, units in field names.

This is the stable ``--json`` schema, documented in ``specs/plan.md`` with its JSON Schema in
``specs/plan.schema.json`` (``SCHEMA_VERSION`` changes when a field changes meaning or goes away).
The explanation is data here; tables, Markdown and JSON are rendered from it elsewhere.
Nothing time-dependent is in it (no wall times): the same input gives byte-identical JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from clusterplan.physics.reasons import Reason

SCHEMA_VERSION = "1"

Status = Literal["optimal", "feasible", "infeasible", "unknown"]
FamilyStatus = Literal["binding", "slack", "satisfied", "violated"]


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReplicaGroup(Out):
    """Replicas of one shape serving one workload."""

    gpu: str = Field(description="catalog GPU id")
    gpu_name: str
    tp: int = Field(
        description="GPUs of one stage: the tensor-parallel degree, on one NVLink group (wide EP: the stage's GPUs over servers_per_stage servers)"
    )
    pp: int = Field(description="pipeline-parallel stages")
    quant: str = Field(description="weight precision")
    kv_cache: str = Field(description="KV-cache precision")
    batch: int = Field(description="concurrency cap per replica, sequences")
    replicas: int
    cloud_replicas: int
    owned_replicas: int
    gpus: int = Field(description="replicas x tp x pp")
    rate_rps: float = Field(description="requests/s one replica takes with the p95 targets met")
    rate_no_targets_rps: float = Field(description="requests/s one replica takes at the utilisation ceiling")
    output_tokens_per_s: float = Field(description="saturated output tokens/s of one replica")
    ttft_s: float = Field(description="unloaded time to first token, s")
    tpot_s: float | None = Field(description="time per output token at the batch cap, s (None: a prefill pool's)")
    p95_ttft_s: float = Field(description="p95 TTFT of one replica at its rated load, s")
    p95_tpot_s: float | None = Field(
        description="p95 TPOT of one replica at its rated load, s (None: a prefill pool's)"
    )
    p95_latency_s: float = Field(description="p95 end-to-end latency of one replica at its rated load, s")
    mean_ttft_s: float | None = Field(
        None, description="mean TTFT of one replica at its rated load, s (None: not modelled, a pool's)"
    )
    mean_tpot_s: float | None = Field(
        None, description="mean TPOT of one replica at its rated load, s (None: not modelled, a pool's)"
    )
    mean_latency_s: float | None = Field(
        None, description="mean end-to-end latency of one replica at its rated load, s (None: not modelled, a pool's)"
    )
    memory_gib_per_gpu: float = Field(description="memory used on the most loaded GPU, GiB")
    gpu_memory_gib: float = Field(description="usable capacity of one GPU, GiB")
    bound: str = Field(description="resource bounding decode: memory_bandwidth, compute, ...")
    ep: int = Field(1, description="expert-parallel degree of each stage (MoE; 1: experts tensor-parallel)")
    attention_dp: bool = Field(False, description="attention data-parallel over each stage's GPUs (MoE)")
    servers_per_stage: int = Field(
        1,
        exclude_if=lambda v: v == 1,
        description="servers one stage spans (wide EP: its experts over several NVLink domains, joined by the "
        "fabric's all-to-all; absent: 1, the stage on one NVLink domain)",
    )
    role: Literal["aggregated", "prefill", "decode"] = Field(
        "aggregated", description="aggregated replicas, or the prefill or decode pool of a disaggregated design"
    )
    burst_replicas: int = Field(
        0,
        exclude_if=lambda v: not v,
        description="of the replicas, those rented on demand by the hour for a demand profile's busy hours (absent: "
        "none); the rest run every hour on the design's hardware",
    )


class Autoscaler(Out):
    """A demand profile's fleet over its period: a base that runs every hour and burst replicas for the busy hours."""

    min_replicas: int = Field(description="replicas that run every hour (the base: the design's hardware)")
    max_replicas: int = Field(description="replicas running at the peak hour (base + burst)")
    period: Literal["daily", "weekly"]
    replicas_by_hour: list[int] = Field(description="replicas running in each hour of the period, hour 0 first")
    burst_offering: str | None = Field(description="the cloud offering burst replicas are rented on (None: no burst)")
    burst_usd_per_replica_hour: float = Field(description="one burst replica's instances x $/h, USD")
    burst_replica_hours_per_period: int = Field(description="burst replica-hours in one day or week")
    burst_usd_per_month: float = Field(
        description="burst replica-hours a period x $/replica-hour x periods a month (730 h / 24 or 168), USD"
    )


class ServingPlan(Out):
    kind: Literal["serving"] = "serving"
    workload: str
    model: str
    demand_rps: float = Field(description="peak demand: average x peak_to_average, requests/s")
    average_rps: float = Field(description="average demand, requests/s")
    output_tokens_per_s: float = Field(description="average output tokens/s demanded")
    capacity_rps: float = Field(description="sum of replicas' rates with the targets met, requests/s")
    capacity_no_targets_rps: float = Field(description="sum of replicas' rates at the utilisation ceiling")
    headroom_pct: float = Field(description="capacity over peak demand minus 1, percent")
    redundancy: int = Field(description="spare replicas required (N+k)")
    gpus: int
    groups: list[ReplicaGroup]
    disaggregated: bool = Field(False, description="served by a prefill pool and a decode pool")
    autoscaler: Autoscaler | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="a workload with a demand profile: the autoscaler's min and max replicas and the burst tier "
        "(absent: flat demand, every replica runs every hour)",
    )


class TrainingPlan(Out):
    kind: Literal["training", "finetune"]
    workload: str
    model: str
    gpu: str
    gpu_name: str
    tp: int
    pp: int
    dp: int
    zero_stage: int
    recompute: str
    micro_batch: int = Field(description="sequences per micro-batch per GPU")
    gpus: int
    cp: int = Field(1, description="context-parallel degree")
    ep: int = Field(1, description="expert-parallel degree (MoE), carved out of the data x context parallel GPUs")
    virtual_stages: int = Field(1, description="interleaved pipeline chunks per stage")
    recompute_layers: int = Field(0, description="layers of each pipeline stage fully recomputed")
    deployment: Literal["cloud", "owned"]
    time_to_train_s: float
    deadline_s: float | None
    tokens_per_s: float = Field(description="trained tokens/s, all GPUs")
    mfu: float = Field(description="model FLOPs utilisation, fraction")
    memory_gib_per_gpu: float
    gpu_memory_gib: float
    cloud_instance: str | None = Field(description="provider:instance used on cloud")
    cloud_instances: int
    cloud_cost_usd: float = Field(description="instances x $/h x billed hours, USD (cloud only)")
    memory_options: list[str] = Field(
        default_factory=list,
        description="memory options the layout needs to fit: bf16_weights, optimizer_in_backward, adamw8bit, "
        "activation_offload, paged_optimizer, optimizer_offload (none: mixed precision, AdamW, all on the GPU)",
    )
    framework: str = Field(
        "",
        description="the training framework the layout is one of (catalog/frameworks.yaml id: megatron-lm, "
        "torchtitan, deepspeed, torchtune, peft); empty in a plan written before frameworks were data",
    )


class HardwareLine(Out):
    kind: Literal["cloud", "owned"]
    gpu: str
    gpu_name: str
    offering: str = Field(description="cloud:provider:instance or owned:gpu:size")
    label: str
    provider: str = Field("", description="cloud provider id (catalog providers.yaml); empty for owned servers")
    units: int = Field(description="instances (cloud) or servers (owned) in use")
    gpus_per_unit: int
    gpus: int
    bought: int = Field(description="owned servers to buy")
    from_inventory: int = Field(description="owned servers already in inventory")
    usd_per_hour: float = Field(description="one instance, USD/h (cloud)")
    region: str = ""
    capital_usd: float = Field(description="purchase of the servers bought, USD")
    monthly_usd: float = Field(
        description="recurring per month: instances x $/h x 730 (cloud), or energy + colocation + support + "
        "operations (owned), USD"
    )
    energy_usd_per_month: float = Field(0.0, description="owned: electricity, IT power x PUE x $/kWh x 730 h, USD")
    colocation_usd_per_month: float = Field(0.0, description="owned: colocation, IT kW x $/kW-month, USD")
    support_usd_per_month: float = Field(
        0.0, description="owned: support contract, servers' price x fraction per year / 12, USD"
    )
    operations_usd_per_month: float = Field(
        0.0, description="owned: operations per server where the catalog gives a figure (none shipped), USD"
    )
    power_w: float = Field(description="owned servers at full power, W")
    term: Literal["on_demand", "1y", "3y", "spot"] = Field(
        "on_demand",
        description="cloud: the term it is rented on: on demand, a 1- or 3-year commitment (owed for whole terms), "
        "or spot (interruptible workloads only)",
    )
    term_months: int = Field(0, description="cloud: the commitment's length, months (0: on demand or spot)")
    purpose: str = Field("", description="serving, or the training workload it runs")
    trains: str | None = Field(
        None, description="the training or fine-tuning workload this cloud line runs, billed once (None: serving)"
    )

    @property
    def instance_key(self) -> str:
        """Cloud: the catalog instance ``provider:id`` the line rents (its offering without the term)."""
        return self.offering.removeprefix("cloud:").removesuffix(f":{self.term}")


class Costs(Out):
    capital_usd: float = Field(description="owned servers bought, USD")
    monthly_usd: float = Field(
        description="recurring per month (cloud serving; owned energy, colocation, support, operations; operations of "
        "each GPU type and serving pool), USD/month"
    )
    one_off_usd: float = Field(description="cloud training runs, USD")
    total_usd: float = Field(
        description="capital + horizon x monthly + one-off + commitment months owed beyond the horizon, USD"
    )
    unused_commitment_usd: float = Field(
        0.0,
        description="cloud commitments paid for months beyond the horizon (a commitment is owed for whole terms), USD",
    )
    horizon_months: float
    usd_per_million_output_tokens: float | None = Field(
        description="total over the horizon / output tokens served at average demand, USD per 1e6 tokens"
    )
    gpu_types_operated: int = Field(0, description="distinct GPU types held (owned servers or cloud serving)")
    pools: int = Field(0, description="serving pools: per workload, role (aggregated, prefill, decode), GPU type, side")
    gpu_type_operations_usd_per_month: float = Field(
        0.0, description="operations of the GPU types held: types x the catalog's figure per type, USD/month"
    )
    pool_operations_usd_per_month: float = Field(
        0.0, description="operations of the serving pools: pools x the catalog's figure per pool, USD/month"
    )
    burst_usd_per_month: float = Field(
        0.0,
        exclude_if=lambda v: not v,
        description="demand profiles' burst replicas rented on demand for the hours they run, in monthly, USD/month "
        "(absent: none)",
    )


class Trade(Out):
    """A binding constraint's marginal trade: the least move of it that admits a cheaper design."""

    change: str = Field(description="the move, readable: 'chat: p95_latency 5s → 5.8s', 'budget.capital >= $120,000'")
    total_usd: float = Field(description="the cheapest design's total once the constraint has moved that far")
    saving_usd: float = Field(description="what that move saves against the best design (total cost)")
    design: str = Field(description="that design, in brief")
    least: bool = Field(
        description="the least such move (searched); false: the constraint switched off, an upper bound"
    )


class ConstraintCheck(Out):
    family: str
    title: str
    status: FamilyStatus
    margin: float | None = Field(description="how far inside the constraint, in 'unit' (negative: violated)")
    unit: str
    detail: str
    relaxed_total_usd: float | None = Field(None, description="optimal total cost with this family switched off")
    relaxed_design: str | None = None
    trade: Trade | None = Field(
        None, description="binding: how far it must move for a cheaper design, and what that saves"
    )


class TargetOdds(Out):
    """The chance one design meets one target, under the model's measured error (evaluation/uncertainty.py)."""

    workload: str
    figure: Literal["throughput", "p95_latency", "p95_ttft", "p95_tpot", "time_to_train"]
    error_kind: str = Field(description="the model-error kind it uses (catalog/model_error.yaml)")
    predicted: float = Field(description="the model's point figure (not derated), in unit")
    target: float = Field(description="peak demand (throughput), the p95 target or the deadline, in unit")
    unit: str = Field(description="'req/s' or 's'")
    low: float = Field(description="10th percentile of the true figure, in unit")
    high: float = Field(description="90th percentile of the true figure, in unit")
    probability: float = Field(description="chance the target is met, 0..1")
    within_error: bool = Field(description="the target lies between low and high: inside the model's error")


class SimulatedMiss(Out):
    """A target the design's replica misses when its scheduler is simulated (evaluation/simulated.py): Poisson
    arrivals at the load the replica receives at peak demand, statistics as ``vllm bench serve`` reports them."""

    workload: str
    figure: Literal["p95_latency", "p95_ttft", "p95_tpot"]
    group: str = Field(description="the replica group simulated, as 'h200 TP2 fp8'")
    load_rps: float = Field(description="requests/s one replica receives at peak demand (the Poisson rate)")
    requests: int = Field(description="requests simulated")
    simulated_s: float = Field(description="the simulated p95, s")
    planned_s: float = Field(description="the analytical p95 at the group's rated load, as planned, s")
    target_s: float = Field(description="the workload's p95 target, s")
    held_rps: float | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="the largest load per replica at which the simulation meets every target (bisected; 0: none "
        "tried did), requests/s",
    )


class SimulatedRejection(Out):
    """A design the analytical model chose first that the scheduler simulation rejected: its replicas miss a p95
    target at peak load, so the planner allowed that replica shape only the load the simulation holds the targets
    at (the latency family) and searched again (pipeline.py)."""

    round: int = Field(description="the search round that chose it, from 1 (the analytical model's first choice)")
    summary: str = Field(description="the rejected design's hardware, as Design.summary")
    total_usd: float = Field(description="its total cost over the horizon, USD")
    misses: list[SimulatedMiss] = Field(description="the targets its replicas miss simulated, with the held load")


class ProvisionalFigure(Out):
    """A catalog figure a design rests on that the catalog marks provisional: recalled or derived, not read from a
    stored copy of its source (``provisional: true``, † in the reference sheet)."""

    figure: str = Field(description="which figure: 'instance hyperstack:8x-h200 3y rate', 'owned pue', ...")
    value: str = Field(description="the figure with its unit, as the catalog gives it")
    source: str = Field(description="the catalog source key (or URL) the figure cites")
    as_of: str = Field(description="the date the catalog gives it")
    notes: str = Field("", description="the catalog row's caveat, where it gives one")


class Design(Out):
    rank: int
    summary: str
    signature: list[str] = Field(description="what makes this design distinct from the others")
    costs: Costs
    gpus_total: int = Field(description="GPUs in use at any one time")
    gpus_by_type: dict[str, int]
    owned_power_w: float
    hardware: list[HardwareLine]
    workloads: list[ServingPlan | TrainingPlan]
    constraints: list[ConstraintCheck]
    cut_short: bool = Field(
        False, description="its solve stopped at the time limit: a design of this kind may exist that is better"
    )
    odds: list[TargetOdds] = Field(default_factory=list, description="chance of meeting each target (model error)")
    labels: list[str] = Field(
        default_factory=list,
        description="what this alternative is among the designs listed: 'cheapest', 'cheapest with one GPU type', "
        "'cheapest cloud', 'cheapest owned', 'cheapest aggregated', 'most headroom'",
    )
    also_runs_as: list[str] = Field(
        default_factory=list,
        description="other layouts of the same hardware (GPU counts per type and deployment, aggregated or not), "
        "each as its layout line; the designs listed differ in hardware",
    )
    simulation_misses: list[SimulatedMiss] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="p95 targets an aggregated replica misses when its scheduler is simulated at peak load (absent "
        "when every simulated p95 meets its target): planned as meeting them by the analytical model only",
    )
    provisional: list[ProvisionalFigure] = Field(
        default_factory=list,
        description="the catalog figures this design's price or physics rests on that are recalled or derived "
        "(provisional), each with its source; empty: every figure it uses was read from a stored source",
    )


LostKind = Literal["no_candidate", "dearer", "ruled_out"]


@dataclass(frozen=True, slots=True)
class LostCause:
    """Why a cheaper GPU type lost, as a code and its parameters (:func:`clusterplan.wording.reasons.render_lost`
    writes :attr:`LostGpu.reason` from it).

    ``no_candidate``: no row of it runs the workload (``excluded``: the most common exclusion, else none
    recorded); ``dearer``: it plans, ``extra_usd`` dearer (``design``: that design in brief); ``ruled_out``:
    the ``conflicts`` (each family's sentence, in conflict order; none: it cannot be placed) rule it out, and
    ``excluded`` says why its other layouts cannot run (None where the family's sentence says it already).
    """

    kind: LostKind
    gpu_name: str
    model: str = ""
    excluded: Reason | None = None
    extra_usd: float = 0.0
    design: str = ""
    conflicts: tuple[str, ...] = ()


class LostGpu(Out):
    workload: str
    gpu: str
    gpu_name: str
    usd_per_gpu_hour: float | None = Field(description="cheapest cost of one GPU-hour of it over the horizon")
    reason: str
    families: list[str] = Field(description="constraint families that rule it out (empty: it is just dearer)")
    extra_cost_usd: float | None = Field(description="how much more the best design with it costs")
    # The code beside the sentence, for layers that decide; not in the JSON (the schema is stable), so None in
    # a plan read back from a file.
    cause: LostCause | None = Field(None, exclude=True)


class MixNote(Out):
    workload: str
    mixed_total_usd: float
    best_single_gpu: str | None
    best_single_total_usd: float | None
    saving_usd: float | None
    text: str


class CandidateSummary(Out):
    workload: str
    considered: int = Field(description="shapes or layouts evaluated")
    rows: int = Field(description="candidates the model chose from after pruning dominated ones")
    excluded: int
    gpus_with_candidates: list[str]


class Explanation(Out):
    constraints: list[ConstraintCheck]
    lost_gpus: list[LostGpu]
    mixes: list[MixNote]
    candidates: list[CandidateSummary]
    assumptions: list[str]
    notes: list[str]
    complete: bool = Field(True, description="false: the time limit stopped the explanation; some parts are missing")


class FamilyRef(Out):
    id: str
    title: str
    sentence: str


class Relaxation(Out):
    family: str
    change: str = Field(description="the least change to the requirement, readable")
    value: float | None
    unit: str
    restores_feasibility: bool = Field(description="this change alone makes the requirement feasible")
    still_conflicting: list[str] = Field(
        default_factory=list,
        description="when this change alone is not enough: the families (ids) that still cannot all hold "
        "with it made, a minimal set; empty otherwise",
    )
    unverified: Literal["time_limit", "simulation_rejects"] | None = Field(
        default=None,
        description="a p95-target relaxation the analytical latency model admits that planning at it (the scheduler "
        "simulation's re-search included) did not confirm, so restores_feasibility is false: 'time_limit' (the "
        "check, or the search for looser targets it passes, ran out of time), 'simulation_rejects' (the simulation "
        "rejects the design planned at every looser target tried); null otherwise",
    )


class Infeasibility(Out):
    conflict: list[FamilyRef] = Field(description="a minimal set of requirement constraints that cannot hold together")
    relaxations: list[Relaxation]
    unplaceable: list[str] = Field(description="workloads no candidate can run, and why")
    text: str
    causes: list[str] = Field(
        default_factory=list,
        description="the real cause, said before any conflict: a workload fits no layout the requirement allows, "
        "the budget buys nothing that runs it, and what change together with it restores feasibility",
    )


class SolverInfo(Out):
    status: Status
    objective: str = Field(description="min_cost, max_throughput or min_latency")
    objective_unit: str = Field(
        description="unit of objective_value and best_bound: 'US cents' (min_cost), "
        "'ppm of peak demand' (max_throughput), 'ms' (min_latency)"
    )
    objective_value: float | None = Field(description="the best design's objective, in objective_unit")
    best_bound: float | None = Field(description="CP-SAT's proven bound on the objective, in objective_unit")
    gap: float | None = Field(description="relative gap between objective and bound; 0 when optimal")
    num_workers: int
    random_seed: int
    time_limit_s: float


class QualityEvidence(Out):
    """A published quality delta of one precision (catalog quality.yaml)."""

    precision: str
    method: str
    loss_pct: float = Field(description="quality lost vs 16-bit on metric, percent (negative: gain)")
    metric: str
    models: list[str] = Field(description="catalog models it was measured on (empty: a cross-family figure)")
    source: str
    provisional: bool


class PrecisionGate(Out):
    """Which weight precisions one serving workload may use, and why (requirement quality.max_loss)."""

    workload: str
    max_loss: str = Field(description="quality class accepted: none, fp8_class, int8_class or any")
    from_requirement: bool = Field(description="false: the default class (fp8_class)")
    allowed: list[str] = Field(description="precisions the gate and constraints.quantizations allow")
    evidence: list[QualityEvidence]


class RequirementRef(Out):
    name: str
    file: str


INVENTORY_IGNORED = "inventory_ignored_by_cloud_deployment"  # a RequirementWarning code


class RequirementWarning(Out):
    """Parts of the requirement that contradict each other (it is planned as written)."""

    code: str = Field(description="what contradicts, e.g. 'inventory_ignored_by_cloud_deployment'")
    fields: list[str] = Field(description="the requirement fields involved")
    gpus: list[str] = Field(default_factory=list, description="the GPUs concerned, as '4x h200'")


class DisaggregationNote(Out):
    """Per serving workload that may be disaggregated: the best design of each kind, and what it saves."""

    workload: str
    chosen: Literal["aggregated", "disaggregated"] = Field(description="what design 1 uses for this workload")
    disaggregated_total_usd: float | None = Field(description="the cheapest design with prefill and decode pools")
    disaggregated_design: str | None = Field(description="its pools, e.g. '3x prefill H100 TP8 fp8 + 5x decode ...'")
    aggregated_total_usd: float | None = Field(description="the cheapest design with aggregated replicas")
    aggregated_design: str | None = None
    saving_usd: float | None = Field(description="aggregated total minus disaggregated total (positive: pools cheaper)")


class Plan(Out):
    schema_version: str = SCHEMA_VERSION
    requirement: RequirementRef
    catalog_fingerprint: str
    status: Status
    solver: SolverInfo
    designs: list[Design]
    explanation: Explanation | None
    infeasibility: Infeasibility | None
    confidence: float | None = Field(None, description="the requirement's: figures derated to hold at it")
    precision: list[PrecisionGate] = Field(default_factory=list, description="the quality gate per serving workload")
    warnings: list[RequirementWarning] = Field(default_factory=list, description="contradictions in the requirement")
    simulation_rejected: list[SimulatedRejection] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="design 1 of each search round that the scheduler simulation rejected, in order (absent when "
        "the analytical model's first choice passed)",
    )
    disaggregation: list[DisaggregationNote] = Field(
        default_factory=list, description="aggregated against disaggregated serving, per workload that allows both"
    )


def plan_schema() -> dict[str, object]:
    """The JSON Schema of ``clusterplan solve --json``, as checked in at specs/plan.schema.json."""
    schema = Plan.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://clusterplan.dev/specs/plan.schema.json"
    return schema


def plan_schema_text() -> str:
    import json

    return json.dumps(plan_schema(), indent=2, sort_keys=True) + "\n"
