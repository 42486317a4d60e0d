"""``clusterplan export`` of a serving design: the layout ``solve`` chose (expert parallelism, attention
data-parallelism, disaggregation with a router in front), every flag one the engine version's own argument parser
defines (catalog/engine_args.yaml), the chat checkpoint, and expected figures in the benchmark's own terms that meet
the requirement's load. The user cases of tests/data/cases/ are the failing cases issue 30 was measured on."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest

from clusterplan.catalog.engine_args import engine_arguments
from clusterplan.catalog.load import Catalog
from clusterplan.design import export as export_mod
from clusterplan.design.check import check_plan
from clusterplan.design.export import Launch, export_design
from clusterplan.errors import ClusterplanError
from clusterplan.physics.factors import Assumptions, SpeculativeDecoding
from clusterplan.plan import Plan, ServingPlan
from clusterplan.render.export_view import export_files
from clusterplan.requirement.load import ResolvedRequirement, load_requirement
from conftest import DATA, EXAMPLES, example, shared_plan

CASES = sorted((DATA / "cases").glob("*.yaml"))
DEEPSEEK = DATA / "cases" / "deepseek-r1-serving.yaml"
ENGINES = ("vllm", "sglang", "tensorrt-llm")


def _planned(path: Path, catalog: Catalog) -> tuple[ResolvedRequirement, Plan]:
    return load_requirement(path, catalog), shared_plan(path, catalog, top=1, explain=False)


def _exported(path: Path, catalog: Catalog, engine: str | None = None) -> tuple[list[Launch], dict[str, str]]:
    resolved, plan = _planned(path, catalog)
    launches = export_design(resolved, catalog, plan, engine=engine)
    return launches, export_files(launches) if launches else {}


def commands(files: dict[str, str]) -> list[tuple[str, list[str]]]:
    """Every command line of the exported scripts as (file, argv): comments, ``wait``, a trailing ``&`` and leading
    ``NAME=value`` environment settings left out; a line that starts an MPI world (``srun ... trtllm-llmapi-launch
    trtllm-serve ...``) as two commands, the launcher's and the one it starts."""
    out = []
    for name, text in files.items():
        if not name.endswith(".sh"):
            continue
        for line in text.splitlines():
            if not line or line.startswith("#") or line == "wait":
                continue
            argv = shlex.split(line)
            argv = argv[:-1] if argv[-1] == "&" else argv
            while argv and "=" in argv[0] and argv[0].split("=")[0].isupper():
                argv = argv[1:]
            if "trtllm-llmapi-launch" in argv:
                at = argv.index("trtllm-llmapi-launch")
                out.append((name, argv[:at]))
                argv = argv[at + 1 :]
            out.append((name, argv))
    return out


def undocumented(engine: str, files: dict[str, str]) -> list[str]:
    """Every command that is not one of ``engine``'s documented commands, every ``--flag`` its parser does not
    define, and every TensorRT-LLM options-file key its LLM API does not define."""
    known = engine_arguments()[engine]
    problems = []
    for name, argv in commands(files):
        command = known.command_for(argv)
        if command is None:
            problems.append(f"{name}: {' '.join(argv[:3])} is no documented {engine} command")
            continue
        problems += [f"{name}: {a}" for a in argv if a.startswith("--") and a not in command.flags]
    options = known.command_for(["trtllm-serve"])
    for name, text in files.items():
        if name.endswith("-llm-api-options.yaml"):
            assert options is not None
            problems += [f"{name}: {k}" for k in json.loads(text) if k not in options.keys]
    return problems


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _launch_lines(files: dict[str, str], marker: str) -> list[list[str]]:
    return [argv for name, argv in commands(files) if name.endswith("-launch.sh") and marker in " ".join(argv)]


# ------------------------------------------------------------------------------------------------
# The design's own layout
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_deepseek_r1_export_carries_expert_parallelism_and_attention_dp(catalog: Catalog) -> None:
    """solve picks 8x H200 with EP 8 and attention DP at batch 1,000 for the DeepSeek-R1 case; each engine's launch
    carries that layout and that batch (not the dense TP 8 layout's 170)."""
    _, plan = _planned(DEEPSEEK, catalog)
    (g,) = plan.designs[0].workloads[0].groups  # type: ignore[union-attr]
    assert (g.tp, g.ep, g.attention_dp) == (8, 8, True) and g.batch > 500
    _, vllm = _exported(DEEPSEEK, catalog, "vllm")
    (argv,) = _launch_lines(vllm, "vllm serve")
    assert "--enable-expert-parallel" in argv
    assert (_flag(argv, "--data-parallel-size"), _flag(argv, "--tensor-parallel-size")) == ("8", "1")
    assert int(_flag(argv, "--max-num-seqs")) * 8 == g.batch  # per data-parallel engine
    (x,), sglang = _exported(DEEPSEEK, catalog, "sglang")  # re-evaluated under SGLang's memory policy
    (argv,) = _launch_lines(sglang, "sglang.launch_server")
    assert "--enable-dp-attention" in argv
    assert (_flag(argv, "--tp-size"), _flag(argv, "--dp-size"), _flag(argv, "--ep-size")) == ("8", "8", "8")
    assert int(_flag(argv, "--max-running-requests")) == x.max_batch > 500  # the replica's, all DP ranks
    (x,), trt = _exported(DEEPSEEK, catalog, "tensorrt-llm")
    (argv,) = _launch_lines(trt, "trtllm-serve")
    assert (_flag(argv, "--tp_size"), _flag(argv, "--ep_size")) == ("8", "8")
    assert int(_flag(argv, "--max_batch_size")) == x.max_batch // 8  # per attention-DP rank
    options = next(json.loads(t) for n, t in trt.items() if n.endswith("-llm-api-options.yaml"))
    assert options["enable_attention_dp"] is True
    for files in (vllm, sglang, trt):
        assert "unbounded" not in files["expected.txt"]


@pytest.mark.slow
def test_the_checker_reads_the_batch_at_the_designs_own_layout(catalog: Catalog) -> None:
    """The checker passes the DeepSeek-R1 design (batch 1,000 under EP 8 with attention DP) and still catches a
    batch beyond what that layout holds."""
    resolved, plan = _planned(DEEPSEEK, catalog)
    design = plan.designs[0]
    assert check_plan(design, resolved, catalog) == []
    wp = design.workloads[0]
    assert isinstance(wp, ServingPlan)
    over = wp.model_copy(update={"groups": [wp.groups[0].model_copy(update={"batch": 2 * wp.groups[0].batch})]})
    problems = check_plan(design.model_copy(update={"workloads": [over]}), resolved, catalog)
    assert any("the vllm engine runs" in p for p in problems), problems


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_disaggregated_export_has_a_router_in_front_on_distinct_ports(
    engine: str, catalog: Catalog, tmp_path: Path
) -> None:
    """The 70B example with ``disaggregation: required``: each pool's replicas listen on their own ports, and a
    router (vLLM's NIXL proxy, sglang_router --pd-disaggregation, trtllm-serve disaggregated) listens on the port
    the benchmark calls and names every prefill and decode port."""
    pooled = tmp_path / "70b-pools.yaml"
    pooled.write_text(
        example("70b-serving")
        .read_text()
        .replace("    peak_to_average: 1.2", "    peak_to_average: 1.2\n    disaggregation: required")
    )
    launches, files = _exported(pooled, catalog, engine)
    assert {x.role for x in launches} == {"prefill", "decode"}
    ports: dict[str, list[str]] = {"prefill": [], "decode": []}
    for name, argv in commands(files):
        if name.endswith("-launch.sh"):
            role = "prefill" if "prefill" in " ".join(argv) else "decode"
            ports[role].append(_flag(argv, "--port"))
    served = ports["prefill"] + ports["decode"]
    assert len(served) == sum(x.replicas for x in launches) and len(set(served)) == len(served)
    (router,) = [argv for name, argv in commands(files) if name.endswith("-router.sh")]
    (bench,) = [argv for name, argv in commands(files) if name.endswith("-bench.sh")]
    if engine == "tensorrt-llm":
        config = json.loads(files[_flag(router, "--config_file")])
        assert str(config["port"]) == _flag(bench, "--port") and str(config["port"]) not in served
        named = [u.split(":")[-1] for k in ("context_servers", "generation_servers") for u in config[k]["urls"]]
    else:
        assert _flag(router, "--port") == _flag(bench, "--port") and _flag(router, "--port") not in served
        named = [a.split(":")[-1] for a in router if a.startswith("http://")] + [
            a for a in router if a.isdigit() and a in served
        ]
    assert set(served) <= set(named)


@pytest.mark.slow
def test_a_chat_service_serves_the_instruct_checkpoint(catalog: Catalog) -> None:
    """The 70B chat example serves meta-llama/Llama-3.1-70B-Instruct (catalog/models.yaml chat_checkpoint), says
    so, and benchmarks the same model it launches."""
    launches, files = _exported(example("70b-serving"), catalog)
    assert {x.model for x in launches} == {"meta-llama/Llama-3.1-70B-Instruct"}
    assert "instruct/chat checkpoint of meta-llama/Llama-3.1-70B" in files["expected.txt"]
    for name, argv in commands(files):
        assert "meta-llama/Llama-3.1-70B" not in argv, name  # no launch or benchmark names the base checkpoint


# ------------------------------------------------------------------------------------------------
# Flags in the engine version's argument list
# ------------------------------------------------------------------------------------------------


def test_every_argument_list_names_its_source_and_version() -> None:
    for engine, known in engine_arguments().items():
        assert known.version and known.as_of, engine
        for command in known.commands:
            assert command.source.startswith("https://") and command.flags, (engine, command.invocation)


@pytest.mark.slow
@pytest.mark.parametrize("path", [*EXAMPLES, *CASES], ids=lambda p: p.stem)
def test_every_exported_flag_is_in_the_engine_versions_argument_list(path: Path, catalog: Catalog) -> None:
    """Every example's and every case's design 1, exported for every engine: each command is a documented one and
    each flag one its parser defines."""
    for engine in ENGINES:
        launches, files = _exported(path, catalog, engine)
        if not launches:
            continue  # training only: no serving export
        assert commands(files), path
        assert undocumented(engine, files) == [], (path.stem, engine)


@pytest.mark.slow
def test_an_invented_flag_is_caught(catalog: Catalog) -> None:
    _, files = _exported(DEEPSEEK, catalog)
    name = next(n for n in files if n.endswith("-launch.sh"))
    broken = {**files, name: files[name].replace(" --port ", " --invented-flag 1 --port ")}
    assert undocumented("vllm", broken) == [f"{name}: --invented-flag"]


# ------------------------------------------------------------------------------------------------
# Expected figures in the benchmark's terms
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("path", [*EXAMPLES, *CASES], ids=lambda p: p.stem)
def test_expected_figures_of_design_1_meet_the_load(path: Path, catalog: Catalog) -> None:
    """What the benchmark should report for the design solve says meets the load (no target missed simulated:
    ``simulation_misses`` empty): every figure bounded, each p95 within its target, and each replica's own share of
    them (a prefill pool's TTFT within the TTFT target, a decode pool's TPOT within the TPOT target), no replica
    saturated, the run's throughput the rate it sends (less the drain). Export never writes a deployment its own
    figures say fails."""
    resolved, plan = _planned(path, catalog)
    assert not plan.designs or plan.designs[0].simulation_misses == [], "design 1 is returned missing a target"
    launches = export_design(resolved, catalog, plan) if plan.designs else []
    files = export_files(launches) if launches else {}
    for x in launches:
        b, e, limit = x.bench, x.expected, x.targets
        tag = (path.stem, x.workload, x.role)
        figures = [b.p95_ttft_s, b.p95_e2el_s, b.request_throughput_rps, b.output_throughput_tokens_per_s]
        assert all(math.isfinite(f) and f > 0 for f in figures), tag
        assert b.max_utilisation < 1.0
        assert b.p95_ttft_s <= limit.get("ttft", math.inf), tag
        assert (b.p95_tpot_s or 0.0) <= limit.get("tpot", math.inf), tag
        assert b.p95_e2el_s <= limit.get("latency", math.inf), tag
        assert e.p95_ttft_s <= limit.get("ttft", math.inf), tag  # a decode replica's is 0: the first token is prefill's
        assert (e.p95_tpot_s or 0.0) <= limit.get("tpot", math.inf), tag
        assert e.p95_e2e_s <= limit.get("latency", math.inf), tag
        drain = b.arrivals_s / (b.arrivals_s + (b.mean_e2el_s or b.p95_e2el_s))
        assert b.request_throughput_rps == pytest.approx(x.average_rate_rps * drain)
    if launches:
        text = files["expected.txt"]
        assert "unbounded" not in text and "TPOT: per request, (latency - TTFT)" in text
        assert json.loads(files["expected.json"])["workloads"]


@pytest.mark.slow
def test_an_engine_export_cannot_write_is_refused_not_written_as_vllm(tmp_path: Path) -> None:
    """A workload on llama.cpp has no launch export writes: exit 2 naming the engines it can write, never a vLLM
    command under llama.cpp's name."""
    from conftest import run_cli

    req = tmp_path / "llamacpp.yaml"
    req.write_text(
        example("70b-serving")
        .read_text()
        .replace("    requests_per_min", "    engine: llama.cpp\n    requests_per_min")
    )
    result = run_cli("export", str(req))
    assert result.exit_code == 2 and "not llama.cpp's" in result.output and "--engine vllm" in result.output


@pytest.mark.slow
def test_each_workload_is_served_and_benchmarked_on_its_own_port(catalog: Catalog) -> None:
    """Three serving workloads of one design: three endpoints, each workload's benchmark calling its own."""
    launches, files = _exported(DATA / "cases" / "three-workload-fleet.yaml", catalog)
    served = {x.workload: _flag(argv, "--port") for x in launches for n, argv in commands(files) if
              n.endswith("-launch.sh") and x.model in argv}  # fmt: skip
    benched = {n.split("-")[1]: _flag(argv, "--port") for n, argv in commands(files) if n.endswith("-bench.sh")}
    assert len(set(served.values())) == len(launches) == 3
    assert benched == served


def _variant(tmp_path: Path, source: Path, after: str, extra: str) -> Path:
    """``source`` with ``extra`` lines added after the line ``after`` (a workload setting)."""
    path = tmp_path / f"{source.stem}-variant.yaml"
    path.write_text(source.read_text().replace(after, f"{after}\n{extra}"))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_disaggregation_speculation_and_prefix_caching_flags_are_documented(
    engine: str, catalog: Catalog, tmp_path: Path
) -> None:
    """The settings no shipped example uses: pools with their KV connector and router (70B, ``disaggregation:
    required``), MTP speculative decoding and a prefix-cache hit rate (DeepSeek-R1). Every flag is in the engine
    version's list; the benchmark reproduces the planned hit rate with a shared prefix where its client can."""
    pooled = _variant(tmp_path, example("70b-serving"), "    peak_to_average: 1.2", "    disaggregation: required")
    _, files = _exported(pooled, catalog, engine)
    assert undocumented(engine, files) == []
    spec = _variant(
        tmp_path, DEEPSEEK, "    peak_to_average: 1.3",
        "    speculative: {method: mtp, draft_tokens: 1, acceptance_length: 1.7}\n    prefix_cache_hit_rate: 0.3",
    )  # fmt: skip
    _, files = _exported(spec, catalog, engine)
    assert undocumented(engine, files) == []
    (launch,) = _launch_lines(files, "serve" if engine != "sglang" else "launch_server")
    (bench,) = [argv for name, argv in commands(files) if name.endswith("-bench.sh")]
    if engine == "vllm":
        assert "--enable-prefix-caching" in launch and '"method":"mtp"' in _flag(launch, "--speculative-config")
    if engine == "sglang":
        assert _flag(launch, "--speculative-algorithm") == "NEXTN" and "--disable-radix-cache" not in launch
    else:
        assert (_flag(bench, "--random-prefix-len"), _flag(bench, "--random-input-len")) == ("450", "1050")


@pytest.mark.parametrize(
    ("engine", "model", "flag"),
    [
        ("vllm", "deepseek-r1", "mtp"),
        ("vllm", "qwen3-next-80b-a3b", "mtp"),
        ("vllm", "glm-4.5", "mtp"),
        ("vllm", "minimax-m2.5", None),
        ("sglang", "qwen3-next-80b-a3b", "NEXTN"),
        ("tensorrt-llm", "deepseek-v3", "MTP"),
        ("tensorrt-llm", "qwen3-next-80b-a3b", None),
    ],
)
def test_mtp_drafter_is_named_per_model_family_from_the_engine_row(
    engine: str, model: str, flag: str | None, catalog: Catalog
) -> None:
    """vLLM runs every family's MTP drafter as method ``mtp`` (its ``deepseek_mtp``, ``qwen3_next_mtp`` ... are
    deprecated aliases) but loads one only for the model_types its speculative config maps (none for MiniMax-M2's);
    SGLang names it NEXTN, TensorRT-LLM MTP (DeepSeek-V3 only). A family the engine has no drafter for is refused
    with the fix, never exported as a flag the engine rejects."""
    a = Assumptions(engine=engine, speculative=SpeculativeDecoding(method="mtp", draft_tokens=1, acceptance_length=1.7))
    arch = catalog.models[model]
    if flag is None:
        with pytest.raises(ClusterplanError, match="loads no multi-token-prediction drafter"):
            export_mod._speculative_flag(catalog, a, arch, "chat")
    else:
        assert export_mod._speculative_flag(catalog, a, arch, "chat") == flag


@pytest.mark.slow
def test_expected_figures_of_an_aggregated_replica_are_the_planners_simulation(catalog: Catalog) -> None:
    """The figures export expects of an aggregated replica come from the scheduler simulation the planner checks its
    designs with (evaluation/simulated.py), at the replica's share of the average rate: a p95 above the mean below
    saturation, as a benchmark measures, where the queueing model gave p95 TTFT equal to its mean."""
    from clusterplan.evaluation import evaluate, simulated

    path = example("7b-chat-serving")
    resolved, plan = _planned(path, catalog)
    launches = export_design(resolved, catalog, plan)
    x = launches[0]
    assert x.role == "aggregated"
    w = resolved.requirement.workloads[0]
    assert w.kind == "serving"
    g = next(g for wp in plan.designs[0].workloads if isinstance(wp, ServingPlan) for g in wp.groups)
    est = evaluate.serving_estimate(
        resolved.model_for(0), catalog.gpus[g.gpu], w, evaluate.replica_layout(g), batch=x.max_batch,
        assumptions=resolved.requirement.assumptions,
    )  # fmt: skip
    a = evaluate.serving_assumptions(resolved.requirement.assumptions, w)
    run = simulated.poisson_run(est, w, a, x.max_batch, x.expected.request_rate_rps)
    e = x.expected
    assert (e.p95_ttft_s, e.mean_ttft_s, e.p95_e2e_s, e.mean_e2e_s) == (
        run.ttft.p95_s,
        run.ttft.mean_s,
        run.e2e.p95_s,
        run.e2e.mean_s,
    )
    assert e.p95_tpot_s == run.tpot.p95_s and e.mean_tpot_s == run.tpot.mean_s
    assert e.mean_ttft_s is not None and e.mean_e2e_s is not None
    assert e.p95_ttft_s > e.mean_ttft_s and e.p95_e2e_s > e.mean_e2e_s  # the scheduler's spread
    assert x.bench.p95_ttft_s == e.p95_ttft_s  # one replica shape: the benchmark's p95 is the replica's
    assert "scheduler simulation" in export_files(launches)["expected.txt"]


@pytest.mark.slow
def test_expected_figures_of_a_disaggregated_design_are_the_pool_simulation(catalog: Catalog) -> None:
    """The 70B example's design 1 (3 prefill + 1 decode pool): each pool replica's figures are the scheduler simulation
    the planner checks pools with (evaluation/simulated.pool_run, in its role, at its share of the average rate), and
    the benchmark's TTFT and end-to-end pair each request's prefill TTFT (queue, prefill and the KV transfer) with its
    run on the decode replica, as the check pairs them: means given and p95s above them, where the analytical pool
    model gave no means and summed the pools' p95s."""
    from clusterplan.evaluation import simulated
    from clusterplan.physics import schedule_sim as sim

    resolved, plan = _planned(example("70b-serving"), catalog)
    launches = export_design(resolved, catalog, plan)
    assert [x.role for x in launches] == ["prefill", "decode"], "the 70B example is no longer disaggregated"
    w = resolved.requirement.workloads[0]
    assert w.kind == "serving"
    groups = [g for wp in plan.designs[0].workloads if isinstance(wp, ServingPlan) for g in wp.groups]
    runs = [
        simulated.pool_run(g, w, x.expected.request_rate_rps, resolved, catalog)
        for g, x in zip(groups, launches, strict=True)
    ]
    (prefill, p_run), (decode, d_run) = zip(launches, runs, strict=True)
    pe, de = prefill.expected, decode.expected
    assert (pe.mean_ttft_s, pe.p95_ttft_s, pe.p95_e2e_s) == (p_run.ttft.mean_s, p_run.ttft.p95_s, p_run.e2e.p95_s)
    assert pe.p95_tpot_s is None  # a prefill replica emits no further token
    assert (de.mean_tpot_s, de.p95_tpot_s) == (d_run.tpot.mean_s, d_run.tpot.p95_s)
    assert (de.mean_e2e_s, de.p95_e2e_s) == (d_run.e2e.mean_s, d_run.e2e.p95_s)
    e2e = sim.distribution([p + d for p, d in zip(p_run.ttft_s, d_run.e2e_s, strict=True)])
    b = decode.bench
    assert (b.mean_e2el_s, b.p95_e2el_s) == pytest.approx((e2e.mean_s, e2e.p95_s), rel=1e-12)
    assert (b.mean_ttft_s, b.p95_ttft_s) == pytest.approx((p_run.ttft.mean_s, p_run.ttft.p95_s), rel=1e-12)
    assert b.p95_tpot_s == d_run.tpot.p95_s and b.mean_itl_s == d_run.tpot.mean_s
    assert b.mean_ttft_s is not None and b.mean_e2el_s is not None
    assert b.p95_ttft_s > b.mean_ttft_s and b.p95_e2el_s > b.mean_e2el_s  # the scheduler's spread
    assert b.p95_e2el_s < pe.p95_ttft_s + de.p95_e2e_s  # paired per request, not two p95s added
    text = export_files(launches)["expected.txt"]
    assert "through the pools, each request simulated on both" in text and "queueing model" not in text
