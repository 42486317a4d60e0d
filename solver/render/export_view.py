"""Engine launch commands, benchmark commands and expectations for ``clusterplan export`` (no logic: every
number comes from a :class:`clusterplan.design.export.Launch`).

Flags as each engine names them: vLLM ``vllm serve`` / ``vllm bench serve`` (docs.vllm.ai engine args and
benchmark CLI); SGLang ``python -m sglang.launch_server`` / ``python -m sglang.bench_serving`` (server_args.py,
bench_serving.py); TensorRT-LLM ``trtllm-serve`` and its ``benchmark_serving`` client (tensorrt_llm/commands/serve.py,
tensorrt_llm/serve/scripts/benchmark_serving.py).
"""

from __future__ import annotations

import json
import shlex

from clusterplan.design.export import Launch
from clusterplan.wording.fmt import seconds
from clusterplan.wording.safe import file_slug, shell_comment, visible_lines

# Ports of the w-th served workload (from 0), so that workloads and pools can share a host: its endpoint (the one
# group's server, or the router of a disaggregated workload: what the benchmark calls) PORT + w; its prefill replica i
# PREFILL_PORT + 200 w + i, decode replica i DECODE_PORT + 200 w + i; SGLang's bootstrap port of prefill replica i
# SGLANG_BOOTSTRAP_PORT + 100 w + i; vLLM's NIXL side channel of the k-th pool instance of the design
# NIXL_SIDE_CHANNEL_PORT + 100 k (an instance uses its base + DP rank x TP: docs/features/nixl_connector_usage.md).
PORT = 8000
# Every engine listens on all interfaces, as vLLM does by default (SGLang and trtllm-serve default to loopback), so a
# router on another host or a Kubernetes Service reaches it.
SERVE_HOST = "0.0.0.0"
PREFILL_PORT = 9000
DECODE_PORT = 9100
SGLANG_BOOTSTRAP_PORT = 7000
NIXL_SIDE_CHANNEL_PORT = 5600
VLLM_PROXY = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"  # in a vLLM checkout (its NIXL guide)
_VLLM_QUANT = {"fp8": "fp8", "int8": "compressed-tensors", "int4": "awq"}  # bf16/fp16: none (the checkpoint's dtype)
_SGLANG_QUANT = {"fp8": "fp8", "int8": "w8a8_int8", "int4": "awq"}
_KV_DTYPE = {"fp8": "fp8", "int8": "int8"}  # bf16/fp16 KV: the engine's default ("auto")
# Disaggregated pools. vLLM: a NixlConnector on both pools, the NIXL guide's proxy in front routing prefill then
# decode (docs/features/nixl_connector_usage.md); SGLang: --disaggregation-mode prefill|decode behind
# sglang_router --pd-disaggregation (docs/advanced_features/pd_disaggregation.md); TensorRT-LLM: a cache
# transceiver in each server's options, trtllm-serve disaggregated in front (docs/source/advanced/disaggregated-service.md).
_VLLM_KV_TRANSFER = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
BENCH_PERCENTILES = "95"  # the requirement's targets are p95s


def _join(argv: list[str]) -> str:
    """One shell line; the head server's address stays a variable the shell expands (HEAD_ADDRESS, alone or with a
    port: ``$HEAD_IP:20000``)."""
    return " ".join(f'"{a}"' if _at_head(a) else shlex.quote(a) for a in argv)


def _at_head(arg: str) -> bool:
    """``arg`` is the head server's address, or that address and a port (digits only: nothing else is expanded)."""
    host, _, port = arg.partition(":")
    return host == HEAD_ADDRESS and (arg == HEAD_ADDRESS or port.isdigit())


def _dtype(quant: str) -> str:
    return "float16" if quant == "fp16" else "bfloat16"


def replica_port(x: Launch, replica: int) -> int:
    """The port replica ``replica`` (0-based) of ``x`` listens on."""
    if x.role == "aggregated":
        return _endpoint(x)
    return {"prefill": PREFILL_PORT, "decode": DECODE_PORT}[x.role] + 200 * x.workload_index + replica


def _endpoint(x: Launch) -> int:
    """The port ``x``'s workload is served on: its aggregated replicas' or its router's (the benchmark's)."""
    return PORT + x.workload_index


def _bootstrap_port(x: Launch, replica: int) -> int:
    """SGLang's bootstrap port of prefill replica ``replica`` of ``x``."""
    return SGLANG_BOOTSTRAP_PORT + 100 * x.workload_index + replica


DP_RPC_PORT = 13345  # vLLM's multi-node data-parallel handshake port (its data-parallel deployment guide's example)
# SGLang's multi-node init port on a replica's first server (docs/references/multi_node_deployment/multi_node.md: "your
# own node ip address and port of the first node", 20000 in its example), one per replica
SGLANG_DIST_INIT_PORT = 20000
HEAD_ADDRESS = "$HEAD_IP"  # the replica's first server, as the script's user sets it


def vllm_launch(x: Launch, replica: int = 0, server: int = 0) -> list[str]:
    """``vllm serve`` for one replica. Attention DP: one engine per GPU (``--data-parallel-size``, TP 1 inside
    it), ``--max-num-seqs`` per engine; experts over every GPU of the replica with ``--enable-expert-parallel``.
    A wide-EP replica over several servers: ``--data-parallel-size-local`` engines on each, the first server's
    address and handshake port, the others ``--headless`` from ``--data-parallel-start-rank`` (vLLM's multi-node
    data parallelism)."""
    tp = ["--tensor-parallel-size", "1", "--data-parallel-size", str(x.tp)] if x.attention_dp else [
        "--tensor-parallel-size", str(x.tp)
    ]  # fmt: skip
    if x.servers_per_replica > 1:
        local = x.tp // x.servers_per_replica
        tp += ["--data-parallel-size-local", str(local), "--data-parallel-address", HEAD_ADDRESS]
        tp += ["--data-parallel-rpc-port", str(DP_RPC_PORT + replica)]
        if server > 0:
            tp += ["--data-parallel-start-rank", str(server * local), "--headless"]
    argv = ["vllm", "serve", x.model, *tp, "--pipeline-parallel-size", str(x.pp)]
    if x.ep > 1:
        argv += ["--enable-expert-parallel"]
    if x.quant in _VLLM_QUANT:
        argv += ["--quantization", _VLLM_QUANT[x.quant]]
    else:
        argv += ["--dtype", _dtype(x.quant)]
    if x.kv_cache in _KV_DTYPE:
        argv += ["--kv-cache-dtype", _KV_DTYPE[x.kv_cache]]
    argv += [
        "--gpu-memory-utilization", f"{x.memory_fraction:g}", "--max-num-seqs", str(x.rank_batch),
        "--max-num-batched-tokens", str(x.prefill_chunk_tokens), "--enable-chunked-prefill",
        "--max-model-len", str(x.max_model_len), "--port", str(replica_port(x, replica)),
    ]  # fmt: skip
    argv += ["--enable-prefix-caching"] if x.prefix_cache_hit_rate > 0 else ["--no-enable-prefix-caching"]
    if x.role != "aggregated":
        argv += ["--kv-transfer-config", json.dumps(_VLLM_KV_TRANSFER, separators=(",", ":"))]
    if x.speculative is not None:
        cfg: dict[str, object] = {
            "method": x.speculative_flag,
            "num_speculative_tokens": x.speculative.draft_tokens,
        }
        if x.speculative.draft_model:
            cfg["model"] = x.speculative.draft_model
        argv += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    return argv


def sglang_launch(x: Launch, replica: int = 0, server: int = 0) -> list[str]:
    """``python -m sglang.launch_server`` for one replica. Attention DP: ``--enable-dp-attention --dp-size`` (one
    attention rank per GPU of the TP group); experts over ``--ep-size`` GPUs; ``--max-running-requests`` is the
    replica's total (the scheduler splits it over the DP ranks). A wide-EP replica over several servers: the same
    command on each with ``--nnodes``, its ``--node-rank`` and the first server's ``--dist-init-addr`` (SGLang's
    multi-node deployment; ``--tp-size`` counts every server's GPUs), the experts' all-to-all over DeepEP
    (``--moe-a2a-backend deepep``: the fabric all-to-all the plan rated)."""
    argv = ["python", "-m", "sglang.launch_server", "--model-path", x.model, "--tp-size", str(x.tp)]
    argv += ["--pp-size", str(x.pp)]
    if x.servers_per_replica > 1:
        argv += ["--nnodes", str(x.servers_per_replica), "--node-rank", str(server)]
        argv += ["--dist-init-addr", f"{HEAD_ADDRESS}:{SGLANG_DIST_INIT_PORT + replica}", "--moe-a2a-backend", "deepep"]
    if x.attention_dp:
        argv += ["--dp-size", str(x.tp), "--enable-dp-attention"]
    if x.ep > 1:
        argv += ["--ep-size", str(x.ep)]
    if x.quant in _SGLANG_QUANT:
        argv += ["--quantization", _SGLANG_QUANT[x.quant]]
    else:
        argv += ["--dtype", _dtype(x.quant)]
    if x.kv_cache == "fp8":
        argv += ["--kv-cache-dtype", "fp8_e4m3"]
    argv += [
        "--mem-fraction-static", f"{x.memory_fraction:g}", "--max-running-requests", str(x.max_batch),
        "--chunked-prefill-size", str(x.prefill_chunk_tokens), "--context-length", str(x.max_model_len),
        "--host", SERVE_HOST, "--port", str(replica_port(x, replica)),
    ]  # fmt: skip
    if x.prefix_cache_hit_rate == 0:
        argv += ["--disable-radix-cache"]
    if x.role != "aggregated":
        argv += ["--disaggregation-mode", x.role, "--disaggregation-transfer-backend", "nixl"]
    if x.role == "prefill":
        argv += ["--disaggregation-bootstrap-port", str(_bootstrap_port(x, replica))]
    if x.speculative is not None:
        argv += [
            "--speculative-algorithm", str(x.speculative_flag),
            "--speculative-num-steps", str(x.speculative.draft_tokens),
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(x.speculative.draft_tokens + 1),
        ]  # fmt: skip
        if x.speculative.draft_model:
            argv += ["--speculative-draft-model-path", x.speculative.draft_model]
    return argv


def trtllm_options(x: Launch) -> dict[str, object]:
    """``--extra_llm_api_options`` YAML for trtllm-serve (KV cache, chunked prefill, attention DP, the cache
    transceiver of a disaggregated pool, speculative decoding)."""
    options: dict[str, object] = {
        "kv_cache_config": {
            "free_gpu_memory_fraction": x.memory_fraction,
            "enable_block_reuse": x.prefix_cache_hit_rate > 0,
            **({"dtype": "fp8"} if x.kv_cache == "fp8" else {}),
        },
        "enable_chunked_prefill": True,
    }
    if x.attention_dp:
        options["enable_attention_dp"] = True
    if x.role != "aggregated":
        options["cache_transceiver_config"] = {"backend": "DEFAULT"}
    if x.speculative is not None:
        spec: dict[str, object] = {
            "decoding_type": x.speculative_flag,
            "max_draft_len": x.speculative.draft_tokens,
        }
        if x.speculative.method == "mtp":
            spec = {"decoding_type": x.speculative_flag, "num_nextn_predict_layers": x.speculative.draft_tokens}
        if x.speculative.draft_model:
            spec["speculative_model_dir"] = x.speculative.draft_model
        options["speculative_config"] = spec
    return options


def trtllm_world(x: Launch) -> list[str]:
    """The MPI world of a TensorRT-LLM replica over several servers: one rank per GPU, started together by Slurm and
    handed to ``trtllm-serve`` by ``trtllm-llmapi-launch`` (TensorRT-LLM's "Multi-node Serving with Slurm":
    ``srun -N 2 --ntasks 16 --ntasks-per-node=8 --mpi=pmix ... trtllm-llmapi-launch trtllm-serve ... --tp_size 16``);
    the server that runs rank 0, the replica's first, serves the API."""
    ranks = x.tp * x.pp
    return [
        "srun", "--nodes", str(x.servers_per_replica), "--ntasks", str(ranks),
        "--ntasks-per-node", str(ranks // x.servers_per_replica), "--mpi", "pmix", "trtllm-llmapi-launch",
    ]  # fmt: skip


def trtllm_launch(x: Launch, options_file: str, replica: int = 0) -> list[str]:
    """``trtllm-serve`` for one replica (quantization: serve the pre-quantized checkpoint, e.g. an FP8 one).
    Attention DP: ``enable_attention_dp`` in the options, ``--max_batch_size`` per rank; experts over ``--ep_size``.
    A replica over several servers: the same command in one MPI world over them (:func:`trtllm_world`)."""
    argv = ["trtllm-serve", x.model, "--backend", "pytorch", "--tp_size", str(x.tp), "--pp_size", str(x.pp)]
    if x.servers_per_replica > 1:
        argv = [*trtllm_world(x), *argv]
    if x.ep > 1:
        argv += ["--ep_size", str(x.ep)]
    return [
        *argv, "--max_batch_size", str(x.rank_batch), "--max_num_tokens", str(x.prefill_chunk_tokens),
        "--max_seq_len", str(x.max_model_len), "--kv_cache_free_gpu_memory_fraction", f"{x.memory_fraction:g}",
        "--host", SERVE_HOST, "--port", str(replica_port(x, replica)), "--extra_llm_api_options", options_file,
    ]  # fmt: skip


def launch_argv(
    x: Launch, options_file: str = "extra-llm-api-options.yaml", replica: int = 0, server: int = 0
) -> list[str]:
    """The launch command of one replica in its engine's own CLI (``server``: which of a wide-EP replica's servers
    runs it; TensorRT-LLM starts all of them from one command)."""
    if x.engine == "sglang":
        return sglang_launch(x, replica, server)
    if x.engine == "tensorrt-llm":
        return trtllm_launch(x, options_file, replica)
    return vllm_launch(x, replica, server)


def _pool_ports(pools: list[Launch], role: str) -> list[int]:
    """The ports of every replica of the ``role`` pool, in launch order."""
    return [replica_port(x, i) for x in pools if x.role == role for i in range(x.replicas)]


def router_argv(pools: list[Launch], config_file: str = "disagg-config.yaml") -> list[str]:
    """The router in front of a disaggregated workload's pools, listening on the workload's endpoint port: vLLM's NIXL proxy, SGLang's
    ``sglang_router --pd-disaggregation`` or ``trtllm-serve disaggregated`` (its pools in ``config_file``)."""
    engine = pools[0].engine
    prefill, decode = _pool_ports(pools, "prefill"), _pool_ports(pools, "decode")
    if engine == "sglang":
        argv = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        for i, p in enumerate(prefill):
            argv += ["--prefill", f"http://localhost:{p}", str(_bootstrap_port(pools[0], i))]
        for p in decode:
            argv += ["--decode", f"http://localhost:{p}"]
        return [*argv, "--host", "0.0.0.0", "--port", str(_endpoint(pools[0]))]
    if engine == "tensorrt-llm":
        return ["trtllm-serve", "disaggregated", "--config_file", config_file]
    return [
        "python", VLLM_PROXY, "--host", "0.0.0.0", "--port", str(_endpoint(pools[0])),
        "--prefiller-hosts", *(["localhost"] * len(prefill)), "--prefiller-ports", *map(str, prefill),
        "--decoder-hosts", *(["localhost"] * len(decode)), "--decoder-ports", *map(str, decode),
    ]  # fmt: skip


def trtllm_disagg_config(pools: list[Launch]) -> dict[str, object]:
    """``trtllm-serve disaggregated -c``: the router's port and its context (prefill) and generation servers."""
    prefill, decode = _pool_ports(pools, "prefill"), _pool_ports(pools, "decode")
    return {
        "hostname": "0.0.0.0",
        "port": _endpoint(pools[0]),
        "backend": "pytorch",
        "context_servers": {"num_instances": len(prefill), "urls": [f"localhost:{p}" for p in prefill]},
        "generation_servers": {"num_instances": len(decode), "urls": [f"localhost:{p}" for p in decode]},
    }


def bench_argv(x: Launch, host: str = "localhost", result_file: str = "bench-result.json") -> list[str]:
    """The engine's own benchmark client: the requirement's lengths (every request exactly that long: EOS ignored),
    open-loop Poisson arrivals at its average request rate, enough prompts for a steady state, the result saved."""
    rate = f"{x.average_rate_rps:.4g}"
    lengths = ["--random-input-len", str(x.input_tokens), "--random-output-len", str(x.output_tokens)]
    if x.engine == "sglang":  # ignores EOS unless --disable-ignore-eos; --random-range-ratio 1: fixed lengths; no
        return [  # shared-prefix option in its random dataset
            "python", "-m", "sglang.bench_serving", "--backend", "sglang", "--host", host, "--port", str(_endpoint(x)),
            "--dataset-name", "random", *lengths, "--random-range-ratio", "1", "--request-rate", rate,
            "--num-prompts", str(x.num_prompts), "--output-file", result_file,
        ]  # fmt: skip
    head = ["vllm", "bench", "serve"]
    if x.engine == "tensorrt-llm":
        head = ["python", "-m", "tensorrt_llm.serve.scripts.benchmark_serving"]
    if x.shared_prefix_tokens:  # a prefix every prompt shares, then the rest random: the planned hit rate
        lengths = [
            "--random-prefix-len", str(x.shared_prefix_tokens),
            "--random-input-len", str(x.input_tokens - x.shared_prefix_tokens),
            "--random-output-len", str(x.output_tokens),
        ]  # fmt: skip
    return [
        *head, "--model", x.model, "--backend", "openai", "--host", host, "--port", str(_endpoint(x)), "--dataset-name",
        "random", *lengths, "--random-range-ratio", "0", "--ignore-eos", "--request-rate", rate, "--burstiness", "1",
        "--num-prompts", str(x.num_prompts), "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles",
        BENCH_PERCENTILES, "--save-result", "--result-filename", result_file,
    ]  # fmt: skip


DEFINITIONS = [
    "What the benchmark reports, in its own definitions (vllm bench serve: vllm/benchmarks/serve.py calculate_metrics;",
    "SGLang's bench_serving and TensorRT-LLM's benchmark_serving compute the same):",
    "  TTFT: from sending a request to its first streamed token. TPOT: per request, (latency - TTFT) / (output tokens",
    "  - 1), the first token excluded; the mean is over requests. ITL: every gap between streamed chunks. E2EL: from",
    "  sending a request to its last token. Request throughput: completed requests / the run's duration (first send to",
    "  last completion); output throughput: output tokens / the same duration.",
    "  Arrivals: open loop, Poisson (--request-rate at --burstiness 1) at the requirement's average rate, every prompt",
    "  and answer exactly the requirement's lengths (EOS ignored). Not closed loop: no --max-concurrency cap.",
    "  The expected figures of aggregated replicas come from the scheduler simulation the planner checks its designs",
    "  with (each replica stepped under Poisson arrivals at its share of the rate, 1,000 requests, seed 0); a",
    "  disaggregated design's pools from it too, each in its role. The run spans at least ten request",
    "  lifetimes so that the first (filling) and last (draining) lifetime weigh little. p95s are upper bounds",
    "  where a workload has several replica shapes. '-': not modelled. SGLang's bench_serving prints mean, median and",
    "  p99 only: compare its means.",
    "",
]


def _layout(x: Launch) -> str:
    parts = [f"TP {x.tp}", f"PP {x.pp}"]
    if x.ep > 1:
        parts.append(f"EP {x.ep}")
    if x.attention_dp:
        parts.append(f"attention DP {x.dp_ranks} ranks")
    return ", ".join([*parts, f"{x.quant} weights", f"{x.kv_cache} KV"])


def _checkpoint(x: Launch) -> str:
    if x.model != x.planned_model:
        return f"  serves {x.model}: the instruct/chat checkpoint of {x.planned_model} (same architecture; catalog/models.yaml chat_checkpoint)"
    return f"  serves {x.model}: the catalog names no separate chat checkpoint for it"


def expectations(x: Launch) -> list[str]:
    """One replica group: its layout, the checkpoint it serves, and each replica's figures at its share of the rate."""
    e = x.expected
    pool = "" if x.role == "aggregated" else f" {x.role} pool:"
    per_rank = f" ({x.rank_batch} per attention-DP rank)" if x.attention_dp else ""
    lines = [
        f"{x.workload}:{pool} {x.replicas} x {x.engine} {x.engine_version} on {x.tp * x.pp} x {x.gpu_name} "
        f"({_layout(x)}), batch cap {x.max_batch}{per_rank}",
        _checkpoint(x),
        f"  each replica receives {e.request_rate_rps:,.2f} req/s, {e.utilisation:.0%} of its saturated rate: "
        f"TTFT mean {seconds(e.mean_ttft_s)}, p95 {seconds(e.p95_ttft_s)}; TPOT mean {seconds(e.mean_tpot_s)}, "
        f"p95 {seconds(e.p95_tpot_s)}; end-to-end mean {seconds(e.mean_e2e_s)}, p95 {seconds(e.p95_e2e_s)}",
    ]
    if x.role == "prefill":
        lines[2] = (
            f"  each replica receives {e.request_rate_rps:,.2f} prompts/s through the router, {e.utilisation:.0%} of "
            f"its saturated rate: TTFT mean {seconds(e.mean_ttft_s)}, p95 {seconds(e.p95_ttft_s)} (queueing, prefill "
            "and the KV transfer)"
        )
    elif x.role == "decode":
        lines[2] = (
            f"  each replica receives {e.request_rate_rps:,.2f} req/s, {e.utilisation:.0%} of its saturated rate: "
            f"TPOT mean {seconds(e.mean_tpot_s)}, p95 {seconds(e.p95_tpot_s)}; from the KV's arrival to the last "
            f"token mean {seconds(e.mean_e2e_s)}, p95 {seconds(e.p95_e2e_s)} (the first token comes from the prefill "
            "pool)"
        )
    if e.saturated_output_tokens_per_s is not None:
        lines.append(f"  saturated (every slot busy): {e.saturated_output_tokens_per_s:,.0f} output tok/s per replica")
    return lines


def bench_expectations(x: Launch, script: str) -> list[str]:
    """What the workload's benchmark command (``script``) reports if the plan is right, and the targets to check."""
    b = x.bench
    where = "the one endpoint" if x.role == "aggregated" else "the router in front of the prefill and decode pools"
    lines = [
        f"{x.workload}: {script} sends {b.num_prompts:,} requests of {x.input_tokens:,} in / {x.output_tokens:,} out "
        f"to {where} at {b.request_rate_rps:,.2f} req/s (the requirement's average; peak {x.peak_rate_rps:,.2f}), "
        f"arriving over {seconds(b.arrivals_s)}",
        f"  expected: request throughput {b.request_throughput_rps:,.2f} req/s, output throughput "
        f"{b.output_throughput_tokens_per_s:,.0f} tok/s",
        f"  TTFT mean {seconds(b.mean_ttft_s)}, p95 {seconds(b.p95_ttft_s)}; TPOT mean {seconds(b.mean_tpot_s)}, "
        f"p95 {seconds(b.p95_tpot_s)}; ITL mean {seconds(b.mean_itl_s)}; E2EL mean {seconds(b.mean_e2el_s)}, "
        f"p95 {seconds(b.p95_e2el_s)}",
        f"  the busiest replica runs at {b.max_utilisation:.0%} of its saturated rate",
    ]
    if x.role != "aggregated":
        lines.append(
            "  through the pools, each request simulated on both: TTFT is its prefill replica's (queueing, prefill "
            "and the KV transfer); E2EL that TTFT plus its time on the decode replica from the KV's arrival to the "
            "last token; TPOT and ITL the decode replica's"
        )
    if x.shared_prefix_tokens and x.engine == "sglang":
        lines.append(
            f"  the plan assumes {x.prefix_cache_hit_rate:.0%} of prompt tokens hit the prefix cache; SGLang's random "
            "dataset shares no prefix, so its TTFT will run above these"
        )
    elif x.shared_prefix_tokens:
        lines.append(
            f"  every prompt shares its first {x.shared_prefix_tokens:,} tokens: the planned prefix-cache hit rate "
            f"{x.prefix_cache_hit_rate:.0%}"
        )
    if x.speculative is not None:
        lines.append(
            f"  speculative decoding ({x.speculative.method}): the figures assume {x.speculative.acceptance_length:g} "
            "tokens kept per step, stated for real text; random prompts may keep fewer (a slower TPOT)"
        )
    if x.targets:
        lines.append(
            "  p95 targets to check: " + ", ".join(f"{k} <= {seconds(v)}" for k, v in sorted(x.targets.items()))
        )
    return lines


def _placed(x: Launch, first_gpu: int) -> tuple[list[int], int]:
    """Each replica's first GPU on its server, the workload's pool GPUs numbered from ``first_gpu`` over servers of
    ``gpus_per_node`` (a replica that would straddle two servers starts on the next), and where the next pool starts."""
    n, width, pos, out = x.gpus_per_node, x.tp * x.pp, first_gpu, []
    for _ in range(x.replicas):
        if pos % n and pos % n + width > n:
            pos += n - pos % n
        out.append(pos % n)
        pos += width
    return out, pos


def _launch_script(x: Launch, options: str, first_gpu: int, first_instance: int) -> str:
    """One group's launch script: one command for aggregated replicas (each on its own GPUs, behind one endpoint),
    one per replica for a pool, each on its own port and GPUs (``CUDA_VISIBLE_DEVICES``, counted from
    ``first_gpu`` over servers of ``gpus_per_node``) and, for vLLM, its own NIXL side-channel port."""
    head = (
        "#!/bin/sh\n"
        + shell_comment(f"{x.workload}: start {x.replicas} replica(s) like this, each on {x.tp * x.pp} GPU(s)")
        + "\n"
    )
    if x.role == "aggregated" and x.servers_per_replica > 1 and x.engine == "tensorrt-llm":
        comment = (
            f"# wide EP: each replica spans {x.servers_per_replica} servers of {x.gpus_per_node} GPUs in one MPI world;"
            f" run this\n# line once from a Slurm allocation of them (its first server serves the API)"
        )
        return head + comment + "\n" + _join(launch_argv(x, options)) + "\n"
    if x.role == "aggregated" and x.servers_per_replica > 1:
        lines = [
            f"# wide EP: each replica spans {x.servers_per_replica} servers of {x.gpus_per_node} GPUs; set HEAD_IP to\n"
            "# its first server's address and run line k on its server k (the first serves the API)"
        ]
        for k in range(x.servers_per_replica):
            lines.append(_join(launch_argv(x, options, 0, k)))
        return head + "\n".join(lines) + "\n"
    if x.role == "aggregated":
        return head + _join(launch_argv(x, options)) + "\n"
    head += (
        f"# one line per replica, each on its own port; GPUs numbered over servers of {x.gpus_per_node}: a line whose\n"
        "# GPUs fall on the next server runs there (then name that host instead of localhost in the router)\n"
    )
    lines = []
    for i, start in enumerate(_placed(x, first_gpu)[0]):
        devices = range(start, start + min(x.tp * x.pp, x.gpus_per_node))
        env = [f"CUDA_VISIBLE_DEVICES={','.join(map(str, devices))}"]
        if x.engine == "vllm":
            env.append(f"VLLM_NIXL_SIDE_CHANNEL_PORT={NIXL_SIDE_CHANNEL_PORT + 100 * (first_instance + i)}")
        lines.append(_join([*env, *launch_argv(x, options, i)]) + " &")
    return head + "\n".join(lines) + "\nwait\n"


def _stem(n: int, x: Launch) -> str:
    """The file-name stem of the ``n``-th launch: its number, workload and engine as safe slugs."""
    return f"{n}-{file_slug(x.workload, 'workload')}-{file_slug(x.engine, 'engine')}"


def export_files(launches: list[Launch]) -> dict[str, str]:
    """File name -> text: a launch script per replica group, a router per disaggregated workload, a benchmark per
    workload, the expectations (text and JSON)."""
    files: dict[str, str] = {}
    notes: list[str] = list(DEFINITIONS)
    benches: list[str] = []
    instances = 0  # pool replicas launched so far (each its own NIXL side-channel port)
    gpus: dict[tuple[str, str], int] = {}  # per workload and GPU type (its own servers): pool GPUs numbered so far
    for n, x in enumerate(launches, start=1):
        stem = _stem(n, x)
        options = f"{stem}-llm-api-options.yaml"
        files[f"{stem}-launch.sh"] = _launch_script(x, options, gpus.get((x.workload, x.gpu), 0), instances)
        instances += 0 if x.role == "aggregated" else x.replicas
        gpus[x.workload, x.gpu] = _placed(x, gpus.get((x.workload, x.gpu), 0))[1]
        if x.engine == "tensorrt-llm":
            files[options] = json.dumps(trtllm_options(x), indent=2) + "\n"  # JSON is YAML
        notes += [*expectations(x), ""]
    seen: set[str] = set()
    for n, x in enumerate(launches, start=1):
        if x.workload in seen or x.role == "prefill":
            continue
        seen.add(x.workload)
        stem = _stem(n, x)
        mine = [y for y in launches if y.workload == x.workload]
        if x.role != "aggregated":
            config = f"{stem}-disagg-config.yaml"
            files[f"{stem}-router.sh"] = (
                "#!/bin/sh\n"
                + shell_comment(
                    f"{x.workload}: the router in front of the prefill and decode pools, on port {_endpoint(x)}"
                )
                + "\n"
                f"{_join(router_argv(mine, config))}\n"
            )
            if x.engine == "tensorrt-llm":
                files[config] = json.dumps(trtllm_disagg_config(mine), indent=2) + "\n"
        files[f"{stem}-bench.sh"] = f"#!/bin/sh\n{_join(bench_argv(x, result_file=f'{stem}-bench-result.json'))}\n"
        benches += [*bench_expectations(x, f"{stem}-bench.sh"), ""]
    files["expected.txt"] = "\n".join([*notes[: len(DEFINITIONS)], *benches, *notes[len(DEFINITIONS) :]])
    files["expected.json"] = expected_json(launches)
    return {name: visible_lines(text) for name, text in files.items()}


def expected_json(launches: list[Launch]) -> str:
    """The launches and each workload's benchmark expectations as JSON (seconds; null: not modelled)."""
    by_workload: dict[str, dict[str, object]] = {}
    for x in launches:
        entry = by_workload.setdefault(x.workload, {"bench": x.bench.model_dump(mode="json"), "groups": []})
        groups = entry["groups"]
        assert isinstance(groups, list)
        groups.append(x.model_dump(mode="json", exclude={"bench"}))
    return json.dumps({"workloads": by_workload}, indent=2) + "\n"
