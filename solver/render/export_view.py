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

PORT = 8000
_VLLM_QUANT = {"fp8": "fp8", "int8": "compressed-tensors", "int4": "awq"}  # bf16/fp16: none (the checkpoint's dtype)
_SGLANG_QUANT = {"fp8": "fp8", "int8": "w8a8_int8", "int4": "awq"}
_KV_DTYPE = {"fp8": "fp8", "int8": "int8"}  # bf16/fp16 KV: the engine's default ("auto")
_VLLM_SPEC = {"draft": "draft_model", "eagle": "eagle", "mtp": "deepseek_mtp"}
_SGLANG_SPEC = {"draft": "STANDALONE", "eagle": "EAGLE", "mtp": "NEXTN"}
_TRT_SPEC = {"draft": "Draft_Target", "eagle": "Eagle", "mtp": "MTP"}
# Disaggregated pools. vLLM: a NixlConnector on both pools, a proxy in front routing prefill then decode
# (docs.vllm.ai "Disaggregated Prefilling", examples/online_serving/disaggregated_serving); SGLang:
# --disaggregation-mode prefill|decode behind sglang_router --pd-disaggregation; TensorRT-LLM: a cache
# transceiver in each server's options, trtllm-serve disaggregated in front (docs/source/advanced/disaggregated-service.md).
_VLLM_KV_TRANSFER = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


def _join(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _dtype(quant: str) -> str:
    return "float16" if quant == "fp16" else "bfloat16"


def vllm_launch(x: Launch) -> list[str]:
    """``vllm serve`` for one replica."""
    argv = ["vllm", "serve", x.model, "--tensor-parallel-size", str(x.tp), "--pipeline-parallel-size", str(x.pp)]
    if x.quant in _VLLM_QUANT:
        argv += ["--quantization", _VLLM_QUANT[x.quant]]
    else:
        argv += ["--dtype", _dtype(x.quant)]
    if x.kv_cache in _KV_DTYPE:
        argv += ["--kv-cache-dtype", _KV_DTYPE[x.kv_cache]]
    argv += [
        "--gpu-memory-utilization", f"{x.memory_fraction:g}", "--max-num-seqs", str(x.max_batch),
        "--max-num-batched-tokens", str(x.prefill_chunk_tokens), "--enable-chunked-prefill",
        "--max-model-len", str(x.max_model_len), "--port", str(PORT),
    ]  # fmt: skip
    argv += ["--enable-prefix-caching"] if x.prefix_cache_hit_rate > 0 else ["--no-enable-prefix-caching"]
    if x.role != "aggregated":
        argv += ["--kv-transfer-config", json.dumps(_VLLM_KV_TRANSFER, separators=(",", ":"))]
    if x.speculative is not None:
        cfg: dict[str, object] = {
            "method": _VLLM_SPEC[x.speculative.method],
            "num_speculative_tokens": x.speculative.draft_tokens,
        }
        if x.speculative.draft_model:
            cfg["model"] = x.speculative.draft_model
        argv += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    return argv


def sglang_launch(x: Launch) -> list[str]:
    """``python -m sglang.launch_server`` for one replica."""
    argv = ["python", "-m", "sglang.launch_server", "--model-path", x.model, "--tp-size", str(x.tp)]
    argv += ["--pp-size", str(x.pp)]
    if x.quant in _SGLANG_QUANT:
        argv += ["--quantization", _SGLANG_QUANT[x.quant]]
    else:
        argv += ["--dtype", _dtype(x.quant)]
    if x.kv_cache == "fp8":
        argv += ["--kv-cache-dtype", "fp8_e4m3"]
    argv += [
        "--mem-fraction-static", f"{x.memory_fraction:g}", "--max-running-requests", str(x.max_batch),
        "--chunked-prefill-size", str(x.prefill_chunk_tokens), "--context-length", str(x.max_model_len),
        "--port", str(PORT),
    ]  # fmt: skip
    if x.prefix_cache_hit_rate == 0:
        argv += ["--disable-radix-cache"]
    if x.role != "aggregated":
        argv += ["--disaggregation-mode", x.role]
    if x.speculative is not None:
        argv += [
            "--speculative-algorithm", _SGLANG_SPEC[x.speculative.method],
            "--speculative-num-steps", str(x.speculative.draft_tokens),
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(x.speculative.draft_tokens + 1),
        ]  # fmt: skip
        if x.speculative.draft_model:
            argv += ["--speculative-draft-model-path", x.speculative.draft_model]
    return argv


def trtllm_options(x: Launch) -> dict[str, object]:
    """``--extra_llm_api_options`` YAML for trtllm-serve (KV cache, chunked prefill, speculative decoding)."""
    options: dict[str, object] = {
        "kv_cache_config": {
            "free_gpu_memory_fraction": x.memory_fraction,
            "enable_block_reuse": x.prefix_cache_hit_rate > 0,
            **({"dtype": "fp8"} if x.kv_cache == "fp8" else {}),
        },
        "enable_chunked_prefill": True,
    }
    if x.role != "aggregated":
        options["cache_transceiver_config"] = {"backend": "DEFAULT"}
    if x.speculative is not None:
        spec: dict[str, object] = {
            "decoding_type": _TRT_SPEC[x.speculative.method],
            "max_draft_len": x.speculative.draft_tokens,
        }
        if x.speculative.method == "mtp":
            spec = {"decoding_type": "MTP", "num_nextn_predict_layers": x.speculative.draft_tokens}
        if x.speculative.draft_model:
            spec["speculative_model_dir"] = x.speculative.draft_model
        options["speculative_config"] = spec
    return options


def trtllm_launch(x: Launch, options_file: str) -> list[str]:
    """``trtllm-serve`` for one replica (quantization: serve the pre-quantized checkpoint, e.g. an FP8 one)."""
    return [
        "trtllm-serve", x.model, "--backend", "pytorch", "--tp_size", str(x.tp), "--pp_size", str(x.pp),
        "--max_batch_size", str(x.max_batch), "--max_num_tokens", str(x.prefill_chunk_tokens),
        "--max_seq_len", str(x.max_model_len), "--kv_cache_free_gpu_memory_fraction", f"{x.memory_fraction:g}",
        "--port", str(PORT), "--extra_llm_api_options", options_file,
    ]  # fmt: skip


def launch_argv(x: Launch, options_file: str = "extra-llm-api-options.yaml") -> list[str]:
    """The launch command of one replica in its engine's own CLI."""
    if x.engine == "sglang":
        return sglang_launch(x)
    if x.engine == "tensorrt-llm":
        return trtllm_launch(x, options_file)
    return vllm_launch(x)


def bench_argv(x: Launch, host: str = "localhost") -> list[str]:
    """The engine's own benchmark client, replaying the requirement's lengths at its average request rate."""
    rate = f"{x.average_rate_rps:.4g}"
    lengths = ["--random-input-len", str(x.input_tokens), "--random-output-len", str(x.output_tokens)]
    if x.engine == "sglang":
        return [
            "python", "-m", "sglang.bench_serving", "--backend", "sglang", "--host", host, "--port", str(PORT),
            "--dataset-name", "random", *lengths, "--random-range-ratio", "1", "--request-rate", rate,
            "--num-prompts", str(x.num_prompts),
        ]  # fmt: skip
    if x.engine == "tensorrt-llm":
        return [
            "python", "-m", "tensorrt_llm.serve.scripts.benchmark_serving", "--model", x.model, "--backend",
            "openai", "--host", host, "--port", str(PORT), "--dataset-name", "random", *lengths,
            "--random-range-ratio", "1", "--request-rate", rate, "--num-prompts", str(x.num_prompts),
            "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "95",
        ]  # fmt: skip
    return [
        "vllm", "bench", "serve", "--model", x.model, "--host", host, "--port", str(PORT), "--dataset-name",
        "random", *lengths, "--random-range-ratio", "0", "--request-rate", rate, "--num-prompts",
        str(x.num_prompts), "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,95",
    ]  # fmt: skip


def expectations(x: Launch) -> list[str]:
    """What the benchmark should report if the plan is right, and the targets to check."""
    e = x.expected
    pool = "" if x.role == "aggregated" else f" {x.role} pool:"
    lines = [
        f"{x.workload}:{pool} {x.replicas} x {x.engine} on {x.tp * x.pp} x {x.gpu_name} (TP {x.tp}, PP {x.pp}, "
        f"{x.quant} weights, {x.kv_cache} KV), batch cap {x.max_batch}",
        f"  the benchmark sends {x.average_rate_rps:,.2f} req/s (the requirement's average; peak "
        f"{x.peak_rate_rps:,.2f}) of {x.input_tokens:,} in / {x.output_tokens:,} out to the {x.replicas} "
        f"replica(s) behind one endpoint: each gets {e.request_rate_rps:,.2f} req/s",
        f"  expected per replica: {e.output_tokens_per_s:,.0f} output tok/s; TTFT mean {seconds(e.mean_ttft_s)}, "
        f"p95 {seconds(e.p95_ttft_s)}; TPOT mean {seconds(e.mean_tpot_s)}, p95 {seconds(e.p95_tpot_s)}; "
        f"end-to-end mean {seconds(e.mean_e2e_s)}, p95 {seconds(e.p95_e2e_s)}",
        f"  saturated (every slot busy): {e.saturated_output_tokens_per_s:,.0f} output tok/s per replica",
    ]
    if x.role == "prefill":  # prompts only: no output tokens, no saturated decode
        lines[1:4] = [
            f"  every request's prompt reaches this pool through the router in front of both pools: each replica "
            f"gets {e.request_rate_rps:,.2f} prompts/s",
            f"  expected per replica: p95 TTFT {seconds(e.p95_ttft_s)} (queueing, prefill and the KV transfer to the "
            "decode pool)",
        ]
    elif x.role == "decode":
        lines[1] = (
            f"  the benchmark sends {x.average_rate_rps:,.2f} req/s to the router in front of both pools; "
            f"each decode replica gets {e.request_rate_rps:,.2f} req/s (TTFT here: from the KV's arrival)"
        )
    if x.targets:
        lines.append(
            "  p95 targets to check: " + ", ".join(f"{k} <= {seconds(v)}" for k, v in sorted(x.targets.items()))
        )
    return lines


def export_files(launches: list[Launch]) -> dict[str, str]:
    """File name -> text: a launch script per replica group, a benchmark script per group, the expectations."""
    files: dict[str, str] = {}
    notes: list[str] = []
    for n, x in enumerate(launches, start=1):
        stem = f"{n}-{file_slug(x.workload, 'workload')}-{file_slug(x.engine, 'engine')}"
        options = f"{stem}-llm-api-options.yaml"
        launch = _join(launch_argv(x, options))
        comment = shell_comment(f"{x.workload}: start {x.replicas} replica(s) like this, each on {x.tp * x.pp} GPU(s)")
        files[f"{stem}-launch.sh"] = f"#!/bin/sh\n{comment}\n{launch}\n"
        if x.engine == "tensorrt-llm":
            files[options] = json.dumps(trtllm_options(x), indent=2) + "\n"  # JSON is YAML
        if x.role != "prefill":  # a disaggregated design is benchmarked once, through its router
            where = "" if x.role == "aggregated" else "# through the router in front of the prefill and decode pools\n"
            files[f"{stem}-bench.sh"] = f"#!/bin/sh\n{where}{_join(bench_argv(x))}\n"
        notes += [*expectations(x), ""]
    files["expected.txt"] = "\n".join(notes)
    return {name: visible_lines(text) for name, text in files.items()}
