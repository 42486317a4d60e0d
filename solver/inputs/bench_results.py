"""Benchmark result files and training step-time logs, read into one record per run (``clusterplan calibrate``).

Formats, as each tool writes them (field names read from the tools' own code; no measurement is taken from them):

* ``vllm bench serve --save-result`` JSON (vllm-project/vllm ``vllm/benchmarks/serve.py``: ``result_json``):
  ``date``, ``backend``, ``model_id``, ``num_prompts``, ``request_rate`` (a number or ``"inf"``),
  ``max_concurrency``, ``duration``, ``completed``, ``total_input_tokens``, ``total_output_tokens``,
  ``request_throughput``, ``output_throughput``, ``mean_ttft_ms``, ``p99_ttft_ms``, ``mean_tpot_ms``,
  ``p99_tpot_ms``, ``mean_itl_ms``; ``--metadata KEY=VALUE`` pairs land at the top level (``gpu=h100-sxm``,
  ``tensor_parallel_size=4``, ``engine_version=...``: vLLM records no GPU or version of its own).
* SGLang ``python -m sglang.bench_serving --output-file`` JSONL (sgl-project/sglang ``python/sglang/bench_serving.py``):
  one object per line with ``backend``, ``request_rate``, ``max_concurrency``, ``server_info`` (the server's
  ``/get_server_info``: ``model_path``, ``tp_size``, ``version``), ``duration``, ``completed``,
  ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``, ``output_throughput``, ``mean_ttft_ms``,
  ``p99_ttft_ms``, ``mean_tpot_ms``, ``p99_tpot_ms``, ``mean_itl_ms``, ``concurrency``.
* ``trtllm-bench ... --report_json`` (NVIDIA/TensorRT-LLM ``tensorrt_llm/bench/dataclasses/reporting.py``
  ``get_statistics_dict``): ``engine`` (``model``, ``version``, ``backend``), ``machine`` (``name``),
  ``world_info`` (``tp_size``, ``pp_size``, ``ep_size``), ``request_info`` (``num_requests``,
  ``avg_num_concurrent_requests``, ``avg_input_length``, ``avg_output_length``), ``performance``
  (``request_throughput_req_s``, ``system_output_throughput_tok_s``), ``streaming_metrics`` (``avg_ttft_ms``,
  ``avg_tpot_ms``, ``ttft_percentiles``/``tpot_percentiles`` with ``p99``).
* genai-perf / AIPerf ``profile_export_*.json`` (docs.nvidia.com/aiperf reference/json-export-schema): one stats
  block per metric (``time_to_first_token``, ``inter_token_latency``, ``request_throughput``,
  ``output_token_throughput``, ``input_sequence_length``, ``output_sequence_length``: ``unit``, ``avg``, ``p99``)
  and ``input_config``; and the CSV export (``Metric,avg,...,p99`` rows, then ``Metric,Value`` rows).
* Training: Megatron-LM's iteration lines (``iteration 10/ 100 | ... | elapsed time per iteration (ms): 1234.5 |
  ... | global batch size: 512 |``, megatron/training/training.py ``training_log``) and torchtitan's metric lines
  (``step: 10  loss: ...  tps: 6,123  tflops: ...  mfu: 35.40%``, torchtitan/components/metrics.py).

Each reader raises :class:`InputError` located in the file (line, and the field) for a file it cannot read.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clusterplan.errors import FieldProblem, InputError, Location

MS = 1e-3  # milliseconds per second's unit: the tools write latencies in ms


@dataclass(frozen=True)
class ServingRun:
    """One serving benchmark run as its result file records it; figures in seconds and per second."""

    file: str
    tool: str
    tool_version: str | None
    date: str | None
    model: str | None
    gpu: str | None
    engine: str | None
    tp: int | None
    input_tokens: float  # mean prompt tokens per request
    output_tokens: float  # mean generated tokens per request
    max_concurrency: float | None  # closed-loop clients (None: open loop at request_rate_per_s)
    request_rate_per_s: float | None  # configured arrival rate (None: unbounded)
    mean_ttft_s: float | None
    mean_tpot_s: float | None
    output_tokens_per_s: float | None
    requests_per_s: float | None
    line: int | None = None  # the file's line (JSONL) the run is on


@dataclass(frozen=True)
class TrainingRun:
    """A training run's step time as its log records it (the median of the logged iterations)."""

    file: str
    tool: str
    step_time_s: float | None  # Megatron-LM: elapsed time per iteration
    tokens_per_s_per_gpu: float | None  # torchtitan: tps
    global_batch_sequences: int | None
    iterations: int  # log lines read


def problem(file: str, line: int | None, path: str, message: str) -> InputError:
    """A located refusal of a result file."""
    return InputError(
        [FieldProblem(Location(file, line), path, message, "bench_result")],
        fix="give the file the tool wrote unchanged (see `clusterplan calibrate --help` for the formats)",
    )


MAX_RESULT_BYTES = 256 * 1024 * 1024  # a --save-detailed run of 100,000 requests is ~100 MB


def _read(path: Path, file: str, *, errors: str) -> str:
    """A regular file's text (a pipe, device or folder is refused before it is opened: it could block)."""
    try:
        if not path.is_file():
            raise problem(file, None, "", "not a regular file (a folder, pipe, device or missing path)")
        if path.stat().st_size > MAX_RESULT_BYTES:
            raise problem(file, None, "", f"larger than {MAX_RESULT_BYTES // 2**20} MiB: not a benchmark result")
        return path.read_text(encoding="utf-8", errors=errors)
    except (OSError, UnicodeDecodeError) as exc:
        raise problem(file, None, "", f"cannot read the file: {exc}") from None


def _line_of(text: str, key: str) -> int | None:
    """The first line mentioning ``"key"`` (1-based), for locating a field's problem."""
    at = text.find(f'"{key}"')
    return None if at < 0 else text.count("\n", 0, at) + 1


class _Fields:
    """A result object's fields, read with located errors."""

    def __init__(self, data: dict[str, Any], file: str, text: str, line: int | None = None) -> None:
        self.data, self.file, self.text, self.line = data, file, text, line

    def _where(self, key: str) -> int | None:
        return self.line if self.line is not None else _line_of(self.text, key.split(".")[-1])

    def get(self, key: str) -> Any:
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def number(self, key: str, *, required: bool = False, positive: bool = True) -> float | None:
        value = self.get(key)
        if value is None or value == "inf":
            if required:
                raise problem(self.file, self.line, key, f"'{key}' is missing: the file is not a complete result")
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise problem(self.file, self._where(key), key, f"'{key}' should be a number, got {value!r}")
        try:
            number = float(value)
        except ValueError:
            raise problem(self.file, self._where(key), key, f"'{key}' should be a number, got {value!r}") from None
        if math.isinf(number):
            return None
        if math.isnan(number) or (positive and number <= 0) or number < 0:
            raise problem(self.file, self._where(key), key, f"'{key}' is {value!r}: expected a positive number")
        return number

    def text_of(self, key: str) -> str | None:
        value = self.get(key)
        return None if value is None else str(value)


def read_serving_results(path: Path) -> list[ServingRun]:
    """Every run in one serving benchmark result file (a JSONL file may hold several)."""
    file = str(path)
    text = _read(path, file, errors="strict")
    if path.suffix.lower() == ".csv":
        return [_genai_perf_csv(file, text)]
    stripped = text.strip()
    if not stripped:
        raise problem(file, 1, "", "the file is empty")
    try:
        whole: Any = json.loads(stripped)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise problem(file, exc.lineno, "", f"not valid JSON: {exc.msg} (column {exc.colno})") from None
        return [_sglang(_Fields(obj, file, text, n)) for n, obj in _json_lines(file, text)]
    if not isinstance(whole, dict):
        raise problem(file, 1, "", f"expected one JSON object per run, got {type(whole).__name__}")
    return [_one(_Fields(whole, file, text))]


def _json_lines(file: str, text: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-empty line of a JSONL file."""
    out: list[tuple[int, dict[str, Any]]] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise problem(file, n, "", f"not valid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise problem(file, n, "", f"expected a JSON object per line, got {type(obj).__name__}")
        out.append((n, obj))
    return out


def _one(f: _Fields) -> ServingRun:
    """A single-object file: which tool wrote it, from the keys only that tool writes."""
    if isinstance(f.get("performance"), dict) and isinstance(f.get("engine"), dict):
        return _trtllm(f)
    if isinstance(f.get("time_to_first_token"), dict) or isinstance(f.get("output_token_throughput"), dict):
        return _genai_perf_json(f)
    if "server_info" in f.data or "random_input_len" in f.data:
        return _sglang(f)
    if "mean_ttft_ms" in f.data or "model_id" in f.data:
        return _vllm(f)
    raise problem(
        f.file, 1, "", "not a result file clusterplan reads: no vllm bench serve, SGLang bench_serving, "
        "trtllm-bench or genai-perf/AIPerf fields found",
    )  # fmt: skip


def _per_request(f: _Fields, total_key: str, count: float) -> float:
    total = f.number(total_key, required=True)
    assert total is not None
    return total / count


def _vllm(f: _Fields) -> ServingRun:
    completed = f.number("completed", required=True)
    assert completed is not None
    tp = f.number("tensor_parallel_size") or f.number("tp")
    return ServingRun(
        file=f.file, tool="vllm bench serve", tool_version=f.text_of("engine_version") or f.text_of("vllm_version"),
        date=f.text_of("date"), model=f.text_of("model_id"), gpu=f.text_of("gpu"), engine=f.text_of("engine") or "vllm",
        tp=None if tp is None else int(tp), input_tokens=_per_request(f, "total_input_tokens", completed),
        output_tokens=_per_request(f, "total_output_tokens", completed), max_concurrency=f.number("max_concurrency"),
        request_rate_per_s=f.number("request_rate"), mean_ttft_s=_ms(f, "mean_ttft_ms"),
        mean_tpot_s=_ms(f, "mean_tpot_ms"), output_tokens_per_s=f.number("output_throughput", required=True),
        requests_per_s=f.number("request_throughput", required=True),
    )  # fmt: skip


def _sglang(f: _Fields) -> ServingRun:
    completed = f.number("completed", required=True)
    assert completed is not None
    tp = f.number("server_info.tp_size") or f.number("tp_size")
    return ServingRun(
        file=f.file, tool="sglang bench_serving", tool_version=f.text_of("server_info.version"),
        date=f.text_of("date"), model=f.text_of("server_info.model_path") or f.text_of("model_id"),
        gpu=f.text_of("gpu"), engine="sglang", tp=None if tp is None else int(tp),
        input_tokens=_per_request(f, "total_input_tokens", completed),
        output_tokens=_per_request(f, "total_output_tokens", completed), max_concurrency=f.number("max_concurrency"),
        request_rate_per_s=f.number("request_rate"), mean_ttft_s=_ms(f, "mean_ttft_ms"),
        mean_tpot_s=_ms(f, "mean_tpot_ms"), output_tokens_per_s=f.number("output_throughput", required=True),
        requests_per_s=f.number("request_throughput", required=True), line=f.line,
    )  # fmt: skip


def _trtllm(f: _Fields) -> ServingRun:
    tp = f.number("world_info.tp_size")
    return ServingRun(
        file=f.file, tool="trtllm-bench", tool_version=f.text_of("engine.version"), date=f.text_of("date"),
        model=f.text_of("engine.model"), gpu=f.text_of("machine.name"), engine="tensorrt-llm",
        tp=None if tp is None else int(tp), input_tokens=_req(f, "request_info.avg_input_length"),
        output_tokens=_req(f, "request_info.avg_output_length"),
        max_concurrency=f.number("request_info.avg_num_concurrent_requests"), request_rate_per_s=None,
        mean_ttft_s=_ms(f, "streaming_metrics.avg_ttft_ms"), mean_tpot_s=_ms(f, "streaming_metrics.avg_tpot_ms"),
        output_tokens_per_s=f.number("performance.system_output_throughput_tok_s", required=True),
        requests_per_s=f.number("performance.request_throughput_req_s", required=True),
    )  # fmt: skip


def _genai_perf_json(f: _Fields) -> ServingRun:
    models = (
        f.get("input_config.endpoint.model_names") or f.get("input_config.model_names") or f.get("input_config.model")
    )  # AIPerf: endpoint.model_names; genai-perf: model (a list)
    model = models[0] if isinstance(models, list) and models else models
    tool = "aiperf" if "aiperf_version" in f.data or "aiperf" in f.file.lower() else "genai-perf"
    return ServingRun(
        file=f.file, tool=tool, tool_version=f.text_of("aiperf_version") or f.text_of("genai_perf_version"),
        date=f.text_of("start_time") or f.text_of("date"), model=None if model is None else str(model),
        gpu=f.text_of("gpu"), engine=f.text_of("engine"), tp=None,
        input_tokens=_req(f, "input_sequence_length.avg"), output_tokens=_req(f, "output_sequence_length.avg"),
        max_concurrency=f.number("input_config.loadgen.concurrency") or f.number("input_config.concurrency"),
        request_rate_per_s=f.number("input_config.loadgen.request_rate") or f.number("input_config.request_rate"),
        mean_ttft_s=_ms(f, "time_to_first_token.avg"), mean_tpot_s=_ms(f, "inter_token_latency.avg"),
        output_tokens_per_s=f.number("output_token_throughput.avg", required=True),
        requests_per_s=f.number("request_throughput.avg", required=True),
    )  # fmt: skip


_CSV_KEYS = {
    "time to first token (ms)": "time_to_first_token",
    "inter token latency (ms)": "inter_token_latency",
    "output sequence length (tokens)": "output_sequence_length",
    "input sequence length (tokens)": "input_sequence_length",
    "output token throughput (tokens/sec)": "output_token_throughput",
    "output token throughput (per sec)": "output_token_throughput",
    "request throughput (requests/sec)": "request_throughput",
    "request throughput (per sec)": "request_throughput",
}


def _genai_perf_csv(file: str, text: str) -> ServingRun:
    """The CSV export: statistic rows (``Metric,avg,min,max,p99,...``) and value rows (``Metric,Value``)."""
    data: dict[str, Any] = {}
    header: list[str] = []
    for n, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not row[0].strip():
            continue
        if row[0].strip().lower() == "metric":
            header = [c.strip().lower() for c in row]
            continue
        if not header:
            raise problem(file, n, "", "expected a 'Metric,...' header row first (a genai-perf/AIPerf CSV export)")
        key = _CSV_KEYS.get(row[0].strip().lower())
        if key is None:
            continue
        cells = dict(zip(header[1:], (c.strip().replace(",", "") for c in row[1:]), strict=False))
        value = cells.get("avg", cells.get("value"))
        try:
            data[key] = {"avg": float(value) if value is not None else None}
        except ValueError:
            raise problem(file, n, row[0], f"'{row[0]}' should be a number, got {value!r}") from None
    if not data:
        raise problem(file, 1, "", "no genai-perf/AIPerf metric rows found")
    return _genai_perf_json(_Fields(data, file, text))


def _ms(f: _Fields, key: str) -> float | None:
    value = f.number(key)
    return None if value is None else value * MS


def _req(f: _Fields, key: str) -> float:
    value = f.number(key, required=True)
    assert value is not None
    return value


def with_flags(run: ServingRun, **given: Any) -> ServingRun:
    """``run`` with the settings its file does not record taken from flags (``None``: not given)."""
    return replace(run, **{k: v for k, v in given.items() if v is not None and getattr(run, k) is None})


_MEGATRON = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|(?P<rest>.*)")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
_GLOBAL_BATCH = re.compile(r"global batch size:\s*(\d+)")
_TITAN = re.compile(r"step:\s*(\d+).*?\btps:\s*([0-9,]+)")


def read_training_log(path: Path, *, skip_iterations: int = 1) -> TrainingRun:
    """The step time of a Megatron-LM log or the tokens/s of a torchtitan log: the median over the logged
    iterations after the first ``skip_iterations`` lines (warm-up)."""
    file = str(path)
    text = _read(path, file, errors="replace")
    steps: list[float] = []
    tps: list[float] = []
    batch: int | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if m := _MEGATRON.search(line):
            elapsed = _ELAPSED.search(m.group("rest"))
            if elapsed is None:
                raise problem(file, n, "elapsed time per iteration (ms)", "an iteration line without its time")
            steps.append(float(elapsed.group(1)) * MS)
            if gb := _GLOBAL_BATCH.search(m.group("rest")):
                batch = int(gb.group(1))
        elif t := _TITAN.search(line):
            tps.append(float(t.group(2).replace(",", "")))
    if not steps and not tps:
        raise problem(
            file, None, "", "no Megatron-LM 'iteration N/ M | ... elapsed time per iteration (ms): ...' or "
            "torchtitan 'step: N ... tps: ...' lines found",
        )  # fmt: skip
    if steps and (tps or batch is None):
        raise problem(file, None, "global batch size", "Megatron-LM iteration lines without 'global batch size'")
    values = steps or tps
    kept = values[skip_iterations:] or values
    median = sorted(kept)[len(kept) // 2]
    return TrainingRun(
        file=file, tool="megatron-lm" if steps else "torchtitan", step_time_s=median if steps else None,
        tokens_per_s_per_gpu=None if steps else median, global_batch_sequences=batch, iterations=len(values),
    )  # fmt: skip
