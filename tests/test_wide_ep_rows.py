"""Wide expert parallelism as planner rows (issue 31): an MoE replica whose expert-parallel stage spans several
8-GPU servers, attention data-parallel on every GPU, joined by the all-to-all over the servers' fabric.

The rows carry the GPUs that share one NVLink domain (``ServingRow.nvlink_group``: 8 of an EP-32 stage) beside the
replica's GPUs (``tp x pp``: 32), and placement, the fabric rule, the checker and the estimate read them."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from clusterplan.candidates.serving import wide_ep_degrees
from clusterplan.candidates.table import GpuType
from clusterplan.catalog.load import Catalog
from clusterplan.design.check import check_plan
from clusterplan.physics.layout import Layout
from clusterplan.plan import ServingPlan
from clusterplan.requirement.load import load_requirement
from clusterplan.wording.fmt import group_layout
from conftest import ROOT, run_cli, shared_plan

WIDE_EP = ROOT / "tests" / "data" / "requirements" / "deepseek-v3-wide-ep.yaml"


def test_an_ep32_stage_sits_on_four_8_gpu_servers() -> None:
    wide = Layout(tp=32, ep=32, attention_dp=True, quant="fp8")
    assert (wide.nvlink_group(8), wide.servers(8)) == (8, 4)
    assert (wide.nvlink_group(72), wide.servers(72)) == (32, 1)  # inside one NVL72 rack
    tp = Layout(tp=16)  # a tensor-parallel group is never split over servers
    assert (tp.nvlink_group(8), tp.servers(8)) == (16, 1)


def test_wide_ep_degrees_only_for_moe_models_on_8_gpu_boards(catalog: Catalog) -> None:
    h100 = GpuType(id="h100-sxm", name="H100", nvlink_domain=8)
    rack = GpuType(id="gb200", name="GB200", nvlink_domain=72, max_gpus_per_node=72)
    l40s = GpuType(id="l40s", name="L40S", nvlink_domain=1)
    assert wide_ep_degrees(catalog.models["deepseek-v3"], h100) == [16, 32, 64]
    assert wide_ep_degrees(catalog.models["llama-3.1-70b"], h100) == []
    assert wide_ep_degrees(catalog.models["deepseek-v3"], rack) == []
    assert wide_ep_degrees(catalog.models["deepseek-v3"], l40s) == []


@pytest.mark.slow
def test_deepseek_v3_chooses_wide_ep_when_it_is_cheaper(catalog: Catalog) -> None:
    """50 req/s of DeepSeek-V3 on rented H100s: EP 16 over two servers takes 27 req/s a replica where TP 8 x PP 2
    takes 24.4, so four wide-EP replicas (64 GPUs) serve what five TP x PP ones (80 GPUs) did. The design passes
    the solver-free checker (each server holds its 8 GPUs of a stage; the instances have a fabric)."""
    plan = shared_plan(WIDE_EP, catalog, top=2, explain=False)
    design = plan.designs[0]
    (wp,) = design.workloads
    assert isinstance(wp, ServingPlan)
    (g,) = wp.groups
    assert g.ep == g.tp > 8 and g.attention_dp and g.pp == 1
    # the plan says the stage spans servers, in its JSON and its layout line (not a TP16 on one NVLink group)
    assert g.servers_per_stage == g.tp // 8 and g.model_dump(mode="json")["servers_per_stage"] == g.tp // 8
    assert f"attention-DP over {g.tp // 8} servers" in group_layout(g)
    assert sum(x.gpus for x in design.hardware) == g.replicas * g.tp
    offers = {x.offering for x in design.hardware}
    assert all(catalog.providers[o.split(":")[1]].has_fabric for o in offers)
    assert check_plan(design, load_requirement(WIDE_EP, catalog), catalog) == []
    others = [d for d in plan.designs[1:] if all(grp.tp <= 8 for w in d.workloads for grp in getattr(w, "groups", []))]
    assert not others or others[0].costs.total_usd > design.costs.total_usd


@pytest.mark.slow
def test_wide_ep_export_starts_each_server_of_a_replica(catalog: Catalog) -> None:
    """vLLM runs a replica over two servers as 16 data-parallel engines, 8 per server: the first server's line
    serves the API, the second joins it ``--headless`` from rank 8, both at the head's address. Every flag is in
    vLLM's documented list. SGLang runs the same command on each server with its node rank and the head's address;
    TensorRT-LLM starts both servers as one MPI world from one ``srun`` line (its multi-node serving guide)."""
    from clusterplan.design.export import export_design
    from clusterplan.render.export_view import export_files
    from test_export_serving import commands, undocumented

    resolved, plan = load_requirement(WIDE_EP, catalog), shared_plan(WIDE_EP, catalog, top=1, explain=False)
    launches = export_design(resolved, catalog, plan)
    (x,) = launches
    assert (x.tp, x.servers_per_replica) == (16, 2)
    files = export_files(launches)
    assert undocumented("vllm", files) == []
    lines = [argv for name, argv in commands(files) if name.endswith("-launch.sh")]
    assert len(lines) == 2
    first, second = lines
    for argv in lines:
        at = argv.index("--data-parallel-size-local")
        assert argv[at + 1] == "8" and "--data-parallel-address" in argv
    assert "--headless" not in first and "--data-parallel-start-rank" not in first
    assert second[second.index("--data-parallel-start-rank") + 1] == "8" and "--headless" in second
    # SGLang: the same command on each server, --tp-size over both, its rank, the head's address, DeepEP's all-to-all
    sglang = export_files(export_design(resolved, catalog, plan, engine="sglang"))
    assert undocumented("sglang", sglang) == []
    lines = [argv for name, argv in commands(sglang) if name.endswith("-launch.sh")]
    assert len(lines) == 2
    for rank, argv in enumerate(lines):
        flags = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        assert (flags["--tp-size"], flags["--nnodes"], flags["--node-rank"]) == ("16", "2", str(rank))
        assert flags["--dist-init-addr"].startswith("$HEAD_IP:") and flags["--moe-a2a-backend"] == "deepep"
    assert lines[0][lines[0].index("--dist-init-addr") + 1] == lines[1][lines[1].index("--dist-init-addr") + 1]
    # ... and the shell expands the head's address in the script as written (for both engines' scripts)
    for written in (files, sglang):
        (script,) = [text for name, text in written.items() if name.endswith("-launch.sh")]
        line = script.splitlines()[-1]
        shown = subprocess.run(
            ["sh", "-c", "printf '%s\\n' " + line.split(" ", 1)[1]],
            env={"HEAD_IP": "10.1.2.3", "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert any(a.startswith("10.1.2.3") for a in shown), shown
    # TensorRT-LLM: one MPI world over both servers, started once under Slurm; trtllm-serve counts every GPU
    trt = export_files(export_design(resolved, catalog, plan, engine="tensorrt-llm"))
    assert undocumented("tensorrt-llm", trt) == []
    (script,) = [text for name, text in trt.items() if name.endswith("-launch.sh")]
    (line,) = [s for s in script.splitlines() if s and not s.startswith("#")]
    argv = shlex.split(line)
    at = argv.index("trtllm-llmapi-launch")
    world = {argv[i]: argv[i + 1] for i in range(at - 1) if argv[i].startswith("--")}
    assert argv[0] == "srun" and world == {"--nodes": "2", "--ntasks": "16", "--ntasks-per-node": "8", "--mpi": "pmix"}
    serve = argv[at + 1 :]
    assert serve[0] == "trtllm-serve" and serve[serve.index("--tp_size") + 1] == "16"
    assert serve[serve.index("--ep_size") + 1] == str(x.ep)


def test_network_per_gpu_is_read_from_each_instance_row(catalog: Catalog) -> None:
    """Providers differ for one GPU: p5 and ND H100 v5 give 3,200 Gbit/s over 8 H100s (50 GB/s each), GCP's
    a3-highgpu-8g 1,000 (15.6), p4d 400 over 8 A100s (6.25); an instance with no fabric gives 0."""
    from clusterplan.candidates.offerings import network_per_gpu

    def at(key: str) -> float:
        return network_per_gpu(catalog, catalog.instances[key])

    assert at("aws:p5.48xlarge") == 50.0
    assert at("gcp:a3-highgpu-8g") == 15.625
    assert at("aws:p4d.24xlarge") == 6.25
    assert at("lambda:gpu_8x_h100_sxm5") == 0.0


@pytest.mark.slow
def test_wide_ep_runs_only_on_a_fabric_as_fast_as_it_was_rated(catalog: Catalog, tmp_path: Path) -> None:
    """The wide-EP rows are rated at the requirement's 50 GB/s per GPU (400 Gbit/s a GPU). On GCP alone, whose
    a3-highgpu-8g gives 15.6 GB/s per GPU, the same requirement is served by TP 8 x PP 2 replicas instead; the
    checker refuses a wide-EP design placed there."""
    text = WIDE_EP.read_text().replace("  allowed_gpus: [h100-sxm]", "  allowed_gpus: [h100-sxm]\n  clouds: [gcp]")
    path = tmp_path / "gcp.yaml"
    path.write_text(text)
    plan = shared_plan(path, catalog, top=1, explain=False)
    (wp,) = plan.designs[0].workloads
    assert isinstance(wp, ServingPlan)
    assert all(g.tp <= 8 for g in wp.groups)
    wide = shared_plan(WIDE_EP, catalog, top=1, explain=False).designs[0]
    moved = wide.model_copy(
        update={
            "hardware": [
                x.model_copy(update={"offering": "cloud:gcp:a3-highgpu-8g", "provider": "gcp"}) for x in wide.hardware
            ]
        }
    )
    problems = check_plan(moved, load_requirement(WIDE_EP, catalog), catalog)
    assert any("wide-EP" in p for p in problems)
    # estimate prices a pinned wide-EP layout the same way: no GCP instance hosts it at its rating
    flags = ["--gpu", "h100-sxm", "--tp", "16", "--ep", "16", "--attention-dp", "--quant", "fp8"]
    out = run_cli("estimate", str(path), *flags)
    assert out.exit_code == 1 and "at 50 GB/s per GPU" in out.output
