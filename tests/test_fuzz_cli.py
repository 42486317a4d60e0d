"""The promises of docs/guarantees.md under a fuzzer, through the whole command.

Hypothesis mutates the shipped examples and a user catalog at the *text* level (so YAML tags, digit
strings past Python's conversion limit, impossible dates and control characters reach the reader
as a hostile file would), then runs ``clusterplan solve --json`` in-process through the CLI's own
``clusterplan.cli.run`` (what the console script calls, minus its exit). Every input must end in
exit 0, 1, 2 or 4 — never 3, "internal error" — and every plan must keep its promises: no negative
cost, designs cheapest first, the reported objective equal to design 1's, and a bounded run time.
Exports of fuzzed requirements must be scripts ``bash -n`` accepts, under safe file names.

Profiles: the default ("ci") is short; ``CLUSTERPLAN_FUZZ=long`` runs thousands of inputs locally.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterplan.cli import run
from conftest import DATA, EXAMPLES, cpu_s, value_paths

settings.register_profile(
    "ci", max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
settings.register_profile("long", max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get("CLUSTERPLAN_FUZZ", "ci")
EXPORT_EXAMPLES = 8 if PROFILE == "ci" else 500  # each plans once (about a second)

BASES = [yaml.safe_load(p.read_text()) for p in EXAMPLES]
USER_CATALOG = yaml.safe_load((DATA / "catalogs" / "negotiated.yaml").read_text())
# The whole command's bound at --time-limit 2, in CPU seconds (a loaded machine does not stretch them).
CPU_S_PER_INPUT = 30.0
HOLE = "__FUZZ_HOLE__"

# Raw YAML text put where a value stood: each one a class of input that once reached exit 3.
HOSTILE = [
    "1" + "0" * 310,  # beyond the float range
    "9" * 5000,  # beyond Python's 4,300-digit int conversion limit
    "-" + "9" * 400,
    "!!int abc",
    "!!float fast",
    "!!bool maybe",
    "!!timestamp tomorrow",
    "2024-02-30",
    "1.0e-308",
    "1e-320",
    ".nan",
    "-.inf",
    '"\\e[31mred\\e[0m"',  # an ESC byte in a name
    '"bell\\a and nul-free control \\x7f"',
    "1e200",
    "0",
    "-1",
    "[]",
    "{}",
    '"x"',
    "600000",
    "1ms",
    "5m",
    "$-3",
]


def _mutated_text(doc: Any, seed: int, hostile: str) -> str:
    """``doc`` with one or two values replaced: a junk value, a deletion, or ``hostile`` raw text."""
    rng = random.Random(seed)
    doc = copy.deepcopy(doc)
    raw = False
    for _ in range(rng.randint(1, 2)):
        paths = value_paths(doc)
        path = rng.choice(paths)
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        action = rng.choice(["hostile", "hostile", "delete", "scale"])
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "scale" and isinstance(parent[path[-1]], int | float) and not isinstance(parent[path[-1]], bool):
            parent[path[-1]] = parent[path[-1]] * rng.choice([0.001, 0.5, 3, 1000, 1e6])
        elif not raw:
            parent[path[-1]] = HOLE
            raw = True
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    return text.replace(f"'{HOLE}'", hostile).replace(HOLE, hostile)


def _check_plan(out: str) -> None:
    plan = json.loads(out)
    designs = plan["designs"]
    for d in designs:
        c = d["costs"]
        for key in ("capital_usd", "monthly_usd", "one_off_usd", "total_usd"):
            assert c[key] >= -0.005, f"design {d['rank']}: negative {key} {c[key]}"
        for line in d["hardware"]:
            assert line["capital_usd"] >= -0.005 and line["monthly_usd"] >= -0.005, line
    if plan["solver"]["objective"] == "min_cost" and designs:
        totals = [d["costs"]["total_usd"] for d in designs]
        # The planner ranks in whole cents: designs within a cent of each other are a tie.
        assert all(b >= a - 0.01 for a, b in itertools.pairwise(totals)), f"not cheapest first: {totals}"
        value = plan["solver"]["objective_value"]
        if value is not None:  # the objective is in cents
            assert abs(value / 100 - totals[0]) <= max(1.0, 1e-6 * totals[0]), (value, totals[0])


def invoke(*argv: str) -> tuple[int, str, str]:
    """``clusterplan ARGV`` in-process through :func:`clusterplan.cli.run`: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(argv))
    return code, out.getvalue(), err.getvalue()


def _run(tmp_path: Path, req_text: str, *extra: str) -> None:
    f = tmp_path / "fuzz.yaml"
    f.write_text(req_text, encoding="utf-8")
    start = cpu_s()
    code, stdout, stderr = invoke("solve", str(f), "--json", "--top", "2", "--time-limit", "2", *extra)
    cpu = cpu_s() - start
    assert code in (0, 1, 2, 4), f"exit {code}:\n{req_text}\n{stderr[-2000:]}"
    assert cpu < CPU_S_PER_INPUT, f"{cpu:.1f} s of CPU:\n{req_text}"
    assert "\x1b" not in stdout + stderr, "a control character reached the terminal"
    if code in (0, 1):
        _check_plan(stdout)


@pytest.mark.slow
@settings(settings.get_profile(PROFILE))
@given(base=st.integers(0, len(BASES) - 1), seed=st.integers(0, 2**32 - 1), hostile=st.sampled_from(HOSTILE))
def test_fuzzed_requirements_never_reach_an_internal_error(
    tmp_path_factory: pytest.TempPathFactory, base: int, seed: int, hostile: str
) -> None:
    _run(tmp_path_factory.mktemp("req"), _mutated_text(BASES[base], seed, hostile))


@settings(settings.get_profile(PROFILE))
@given(seed=st.integers(0, 2**32 - 1), hostile=st.sampled_from(HOSTILE))
def test_fuzzed_user_catalogs_never_reach_an_internal_error(
    tmp_path_factory: pytest.TempPathFactory, seed: int, hostile: str
) -> None:
    tmp = tmp_path_factory.mktemp("cat")
    cat = tmp / "catalog.yaml"
    cat.write_text(_mutated_text(USER_CATALOG, seed, hostile), encoding="utf-8")
    _run(tmp, (EXAMPLES[0].parent / "70b-serving.yaml").read_text(), "--catalog", str(cat))


SERVING_BASES = [b for b in BASES if all(w.get("kind") == "serving" for w in b["workloads"])]
SAFE_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


@pytest.mark.slow
@settings(settings.get_profile(PROFILE), max_examples=EXPORT_EXAMPLES)
@given(
    base=st.integers(0, len(SERVING_BASES) - 1),
    seed=st.integers(0, 2**32 - 1),
    hostile=st.sampled_from([*HOSTILE, '"x; touch owned #"', '"$(touch owned)"', "'`touch owned`'"]),
    engine=st.sampled_from(["vllm", "sglang", "trtllm"]),
)
def test_fuzzed_exports_write_safe_scripts_or_refuse(
    tmp_path_factory: pytest.TempPathFactory, base: int, seed: int, hostile: str, engine: str
) -> None:
    tmp = tmp_path_factory.mktemp("export")
    f = tmp / "fuzz.yaml"
    f.write_text(_mutated_text(SERVING_BASES[base], seed, hostile), encoding="utf-8")
    out = tmp / "out"
    code, _, stderr = invoke("export", str(f), "--engine", engine, "-o", str(out))
    assert code in (0, 1, 2, 4), f"exit {code}:\n{f.read_text()}\n{stderr[-2000:]}"
    bash = shutil.which("bash")
    if code != 0 or bash is None:
        return
    for path in out.iterdir():
        assert SAFE_FILE_NAME.match(path.name), path.name
        if path.suffix == ".sh":
            syntax = subprocess.run([bash, "-n", str(path)], capture_output=True, text=True, timeout=30)
            assert syntax.returncode == 0, (path.read_text(), syntax.stderr)


CACHE_EXAMPLES = 6 if PROFILE == "ci" else 300  # each parses the shipped YAML again (about half a second)


def _damaged(data: bytes, seed: int, how: str) -> bytes:
    """A cache file's bytes changed the way a disk, an editor or a hostile user might."""
    rng = random.Random(seed)
    header, _, body = data.partition(b"\n")
    if how == "flip":
        i = rng.randrange(len(data))
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    if how == "truncate":
        return data[: rng.randrange(len(data))]
    if how == "figure":  # a plausible edit: one number of one row scaled, the file's first line kept
        doc = json.loads(body)
        rows = doc[rng.choice(["gpus", "instances", "engines"])]
        row = rng.choice(rows)[1]
        numbers = [k for k, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool) and v]
        if numbers:
            key = rng.choice(numbers)
            row[key] = row[key] * rng.choice([0.2, 5])
        return header + b"\n" + json.dumps(doc, separators=(",", ":")).encode()
    return header.replace(b'"format":', b'"format":1') + b"\n" + body  # "header"


@pytest.mark.slow
@settings(settings.get_profile(PROFILE), max_examples=CACHE_EXAMPLES)
@given(seed=st.integers(0, 2**32 - 1), how=st.sampled_from(["flip", "truncate", "figure", "header"]))
def test_fuzzed_catalog_caches_are_never_trusted(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, seed: int, how: str
) -> None:
    """A damaged or edited cache file is ignored (and rewritten): ``validate`` still exits 0 and the catalog a
    command gets is the shipped one, byte for byte."""
    from clusterplan.catalog import cache, load

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    load._shipped_catalog.cache_clear()
    good = load.load_catalog()
    directory = cache.cache_dir()
    assert directory is not None
    path = directory / cache.cache_file(cache.shipped_key())
    path.write_bytes(_damaged(path.read_bytes(), seed, how))
    load._shipped_catalog.cache_clear()
    code, _, stderr = invoke("validate", str(EXAMPLES[0]))
    assert code == 0, stderr
    assert load.load_catalog() == good
    load._shipped_catalog.cache_clear()
