"""The candidate physics' fast paths give the figures of the paths they stand for, exactly: the queueing model's
decode steps (``step.decode_stepper``, the terms that do not depend on the batch read once) against
``step.decode_step_s`` over real replicas and fuzzed step models; a stepper kept across rates (``queueing.stepper``:
each batch's step remembered) and a loader kept across rates (``queueing.loader``) against ``latency_at_load``
computed afresh; a layout's reasons without its estimate (``evaluate.serving_reasons``) against the estimate's
``why_not``. The candidate rows and their exclusions, and so
every plan, rest on those figures."""

from __future__ import annotations

import random

from clusterplan.catalog.load import Catalog
from clusterplan.evaluation import evaluate
from clusterplan.physics import queueing, serving, step
from clusterplan.physics.factors import Assumptions, SpeculativeDecoding
from clusterplan.physics.layout import Layout
from clusterplan.physics.types import DecodeStepModel, ServingEstimate
from clusterplan.requirement.schema import ServingWorkload

SHAPE = serving.RequestShape(input_tokens=1000, output_tokens=400, context_tokens=2000)
TRT = Assumptions(engine="tensorrt-llm")
SPEC = Assumptions(
    speculative=SpeculativeDecoding(method="eagle", draft_tokens=3, acceptance_length=2.5, cost_fraction=0.05)
)
BATCHES = [0.0, 0.25, 1.0, 1.5, 2.0, 3.0, 4.0, 7.3, 16.0, 63.99, 64.0, 255.5, 1000.0, 4096.0, 1e5]


def _replicas(catalog: Catalog) -> list[ServingEstimate]:
    """Replicas whose step models take every branch: dense, pipeline stages, MoE with EP, row tiles and a routing
    curve (gpt-oss under TensorRT-LLM on Hopper), host time (TensorRT-LLM on GB200), speculative decoding."""
    cases = [
        ("llama-3.1-70b", "h100-sxm", Layout(tp=4, quant="fp8", kv_precision="fp8"), Assumptions()),
        ("llama-3.1-70b", "l40s", Layout(tp=1, pp=4, quant="int4", kv_precision="fp8"), Assumptions()),
        ("llama-3.1-70b", "h200", Layout(tp=2, quant="fp8", kv_precision="fp8"), SPEC),
        ("mixtral-8x7b", "h100-sxm", Layout(tp=4, quant="fp8", kv_precision="fp8", ep=4, attention_dp=True), TRT),
        ("gpt-oss-120b", "h100-sxm", Layout(tp=4, quant="fp4", kv_precision="fp8", ep=4, attention_dp=True), TRT),
        ("qwen3-30b-a3b", "gb200", Layout(pp=2, quant="fp4", kv_precision="fp8"), TRT),
    ]
    return [
        serving.estimate_serving(catalog.model(m), catalog.gpu(g), layout, SHAPE, batch=256, assumptions=a)
        for m, g, layout, a in cases
    ]


def _fuzzed(model: DecodeStepModel, rng: random.Random) -> DecodeStepModel:
    """``model`` with its times scaled at random and its switches (stages, experts, EP, tiles, routing curve, host
    time, GEMM knee, protocols) set at random: the stepper must follow every combination."""
    update: dict[str, object] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if name.endswith("_s") and isinstance(value, float):
            update[name] = value * rng.uniform(0.1, 10.0) if rng.random() < 0.8 else 0.0
    protocols = rng.randint(0, 3)
    update.update(
        pp=rng.choice([1, 2, 3, 4]),
        moe_experts=rng.choice([1, 8, 128]),
        experts_per_token=rng.choice([1, 2, 4]),
        expert_parallel=rng.choice([1, 2, 4, 8]),
        tokens_per_seq=rng.choice([1.0, 4.0]),
        expert_row_tile_max=rng.choice([0, 64, 128]),
        expert_load_skew=rng.uniform(1.0, 1.5),
        expert_routing_curve=rng.choice([(), ((16.0, 1.4), (1024.0, 1.1), (8192.0, 1.02))]),
        moe_weight_efficiency=rng.choice([None, rng.uniform(0.3, 1.2)]),
        moe_gemm_efficiency=rng.uniform(0.3, 1.2),
        linear_knee_seqs=rng.choice([(0.0, 0.0), (rng.uniform(1, 64), rng.uniform(1, 64))]),
        host_per_seq_s=rng.choice([0.0, rng.uniform(1e-6, 5e-5)]),
        host_rank_share=rng.choice([1.0, 0.25]),
        tp_allreduces=rng.choice([0, 160]),
        tp_allreduce_latency_s=[rng.uniform(1e-6, 2e-5) for _ in range(protocols)],
        tp_allreduce_per_seq_s=[rng.uniform(1e-9, 1e-6) for _ in range(protocols)],
        all_to_alls=rng.choice([0, 96]),
    )
    return model.model_copy(update=update)


def _hex(x: float) -> str:
    return x.hex()


def test_the_stepper_is_the_step_model_bit_for_bit(catalog: Catalog) -> None:
    rng = random.Random(20251206)
    models = [est.step_model for est in _replicas(catalog) if est.step_model is not None]
    assert len(models) == 6
    # the real replicas take the branches the fuzz also forces: MoE, row tiles, a routing curve, host time, stages
    assert any(m.expert_row_tile_max for m in models) and any(m.expert_routing_curve for m in models)
    assert any(m.host_per_seq_s for m in models) and any(m.pp > 1 for m in models)
    models += [_fuzzed(m, rng) for m in models for _ in range(40)]
    compared = 0
    for model in models:
        at = step.decode_stepper(model)
        for n in [*BATCHES, *(rng.uniform(0.0, 3000.0) for _ in range(10))]:
            assert _hex(at(n)) == _hex(step.decode_step_s(model, n)), (model, n)
            compared += 1
    assert compared == len(models) * (len(BATCHES) + 10)


def _figures(lat: object) -> list[str]:
    """Every figure of a LatencyAtLoad, exactly (hex of each float)."""
    dumped = lat.model_dump()  # type: ignore[attr-defined]
    return [f"{k}={v.hex() if isinstance(v, float) else v}" for k, v in dumped.items()]


def test_a_stepper_kept_across_rates_gives_the_fresh_figures(catalog: Catalog) -> None:
    kept_rates = 0
    for est in _replicas(catalog):
        assert est.feasible and est.step_model is not None
        kept = queueing.stepper(est)
        # loaders kept across every rate below, each holding one stepper (the default engine's, TensorRT-LLM's)
        shared = queueing.loader(
            est, input_tokens=SHAPE.input_tokens, output_tokens=SHAPE.output_tokens, assumptions=Assumptions()
        )
        loader = queueing.loader(
            est, input_tokens=SHAPE.input_tokens, output_tokens=SHAPE.output_tokens, assumptions=TRT
        )
        # the rate searches' halvings of [0, ceiling], then rates past it (unstable) and a fine sweep
        ceiling = 0.9 * est.requests_per_s
        rates = [ceiling * k / 256 for k in range(0, 257, 8)] + [est.requests_per_s * f for f in (0.95, 1.0, 1.2)]
        for rate in rates:
            args = {
                "input_tokens": SHAPE.input_tokens,
                "output_tokens": SHAPE.output_tokens,
                "assumptions": Assumptions(),
            }
            fresh = queueing.latency_at_load(est, rate, **args)  # type: ignore[arg-type]
            assert _figures(shared(rate)) == _figures(fresh), (est.gpu_id, est.tp, rate)
            at_trt = queueing.latency_at_load(est, rate, **{**args, "assumptions": TRT})  # type: ignore[arg-type]
            assert _figures(loader(rate)) == _figures(at_trt), (est.gpu_id, est.tp, rate)
            kept_rates += 1
        # and the kept steps are the step model's at the clamped batch
        assert _hex(kept(0.3)) == _hex(step.decode_step_s(est.step_model, 1.0))
        assert _hex(kept(1e9)) == _hex(step.decode_step_s(est.step_model, float(est.batch)))
    assert kept_rates == 6 * 36


def test_a_layouts_reasons_are_its_estimates(catalog: Catalog) -> None:
    """Every GPU x precision x TP of a 70B and a 405B service at one sequence and at 64: the reasons alone are the
    estimate's ``why_not``, in order (the candidates quote the first hard one for a layout that holds no sequence)."""
    compared = unfit = 0
    for model in ("llama-3.1-70b", "llama-3.1-405b"):
        w = ServingWorkload(kind="serving", name="chat", requests_per_min=60, input_tokens=2000, output_tokens=300)
        arch = catalog.model(model)
        for _, spec in sorted(catalog.gpus.items()):
            for quant in ("bf16", "fp8", "int4"):
                for tp, pp in ((1, 1), (8, 1), (8, 2)):
                    layout = Layout(tp=tp, pp=pp, quant=quant, kv_precision="fp8" if quant == "fp8" else "bf16")
                    for batch in (1, 64):
                        args = {"batch": batch, "assumptions": Assumptions()}
                        est = evaluate.serving_estimate(arch, spec, w, layout, **args)  # type: ignore[arg-type]
                        assert evaluate.serving_reasons(arch, spec, w, layout, **args) == est.why_not  # type: ignore[arg-type]
                        compared += 1
                        unfit += any(type(r).__name__ == "WeightsDoNotFit" for r in est.why_not)
    assert compared == 2 * len(catalog.gpus) * 3 * 3 * 2
    assert unfit > 50  # the case the candidates read it for: weights that do not fit
