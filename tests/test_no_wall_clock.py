"""No test reads the wall clock: a bound on wall time fails on a loaded machine (``test_the_limit_bounds_the_whole_command``
did), so tests bound work in CPU time (``conftest.cpu_s``), count it, or compare runs in the same test.

What it sees: ``time.time / perf_counter / monotonic`` (and their ``_ns`` forms), called or imported, in any test
file. What it does not: ``datetime.now()``, hypothesis deadlines (every ``@settings`` here sets ``deadline=None``),
and ``timeout=`` on a subprocess (a guard against a hang, not a bound on speed).
"""

from __future__ import annotations

import ast
from pathlib import Path

WALL_CLOCKS = {"time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns"}
TESTS = Path(__file__).resolve().parent


def wall_clock_reads(source: str) -> list[int]:
    """The lines of ``source`` that read a wall clock from the ``time`` module."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in WALL_CLOCKS:
            if isinstance(node.value, ast.Name) and node.value.id == "time":
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            lines += [node.lineno for alias in node.names if alias.name in WALL_CLOCKS]
    return sorted(lines)


def test_no_test_reads_the_wall_clock() -> None:
    found = {p.name: wall_clock_reads(p.read_text(encoding="utf-8")) for p in sorted(TESTS.rglob("*.py"))}
    assert len(found) > 50  # the walk sees the suite
    assert not {name: lines for name, lines in found.items() if lines}


def test_the_check_sees_each_way_of_reading_it() -> None:
    source = "import time\nfrom time import monotonic\nt = time.perf_counter()\nc = time.process_time()\n"
    assert wall_clock_reads(source) == [2, 3]
