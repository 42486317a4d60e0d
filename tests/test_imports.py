"""Heavy imports stay off the commands that do not need them (issue 17: a faster single solve).

Importing OR-Tools' CP-SAT module (which imports pandas) and matplotlib costs about a second on a
2-core machine: ``validate``, ``schema``, ``catalog`` and ``--help`` never import them, and ``solve``
imports matplotlib only when it plots (it never does), nor does a ``sweep`` without ``--plot``. Nothing
imports pandas: ``clusterplan.planner.cpsat`` imports CP-SAT without it. Each command runs in a fresh interpreter
(an in-process run would see whatever earlier tests imported), then prints the modules it loaded.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT, example

SOLVER = ("ortools", "pandas")
PLOTTING = ("matplotlib",)

# The command's arguments; the top-level packages it must not import.
CASES: list[tuple[list[str], tuple[str, ...]]] = [
    (["--help"], SOLVER + PLOTTING),
    (["validate", str(example("70b-serving"))], SOLVER + PLOTTING),
    (["schema"], SOLVER + PLOTTING),
    (["catalog", "gpus"], SOLVER + PLOTTING),
    (["catalog", "sources"], SOLVER + PLOTTING),
    (["estimate", "--help"], SOLVER + PLOTTING),
    (["solve", str(example("7b-chat-serving"))], ("pandas", *PLOTTING)),
    # No --plot: the plot module is imported to check a file name, matplotlib only to draw.
    (["sweep", str(example("7b-chat-serving")), "--vary", "budget=1M", "--jobs", "1"], ("pandas", *PLOTTING)),
]

_PROBE = """
import json, sys
sys.argv = ["clusterplan", *json.loads(sys.argv[1])]
from clusterplan.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
sys.stdout.flush()
print("\\nMODULES " + json.dumps({"code": code, "top": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def loaded_modules(args: list[str]) -> tuple[int, set[str]]:
    """Run ``clusterplan ARGS`` in a fresh interpreter; its exit code and the top-level packages it imported."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES ")), None)
    assert line is not None, proc.stderr[-2000:]
    found = json.loads(line.removeprefix("MODULES "))
    return int(found["code"] or 0), set(found["top"])


@pytest.mark.slow
@pytest.mark.parametrize(("args", "banned"), CASES, ids=[" ".join(a[:2]).replace(str(ROOT), "") for a, _ in CASES])
def test_command_keeps_heavy_imports_off(args: list[str], banned: tuple[str, ...]) -> None:
    code, modules = loaded_modules(args)
    assert code == 0
    assert not modules & set(banned), f"clusterplan {args[0]} imported {sorted(modules & set(banned))}"


_SOLVE_ONLY = """
import contextlib, io, json, sys
from clusterplan.cli import run
with contextlib.redirect_stdout(io.StringIO()):
    code = run(json.loads(sys.argv[1]))
print("MODULES " + json.dumps({"code": code, "all": sorted(sys.modules)}))
"""


def modules_of_run(args: list[str]) -> set[str]:
    """Every module ``clusterplan ARGS`` (run in-process in a fresh interpreter, output discarded) had imported at
    its end; the command must succeed."""
    proc = subprocess.run(
        [sys.executable, "-c", _SOLVE_ONLY, json.dumps(args)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES ")), None)
    assert line is not None, proc.stderr[-2000:]
    found = json.loads(line.removeprefix("MODULES "))
    assert found["code"] == 0
    return set(found["all"])


@pytest.mark.slow
def test_solve_imports_only_its_own_command_and_writer() -> None:
    """``solve --json`` imports its own command module and the JSON writer: not the other commands' modules (issue
    33: ~15 ms of every start), not the terminal table nor rich's tables."""
    modules = modules_of_run(["solve", str(example("7b-chat-serving")), "--json"])
    commands = {m for m in modules if m.startswith("clusterplan.commands.")}
    assert commands == {"clusterplan.commands.solve", "clusterplan.commands.options"}
    assert "clusterplan.render.jsonout" in modules
    assert not modules & {"clusterplan.render.table", "clusterplan.render.plan_markdown", "rich.table"}


# What only a training or fine-tuning workload, a request trace or a Hugging Face config needs.
TRAINING_AND_FILE_READERS = (
    "clusterplan.candidates.training",
    "clusterplan.physics.training",
    "clusterplan.physics.training_comm",
    "clusterplan.physics.training_job",
    "clusterplan.physics.kernels",
    "clusterplan.inputs.trace",
    "clusterplan.requirement.hf_config",
)


@pytest.mark.slow
def test_serving_solve_leaves_the_training_physics_unloaded() -> None:
    """A serving-only ``solve`` of a catalog model (the 70B example, as a user runs it: the terminal table) imports
    neither the training layout search and its physics nor the trace and Hugging Face config readers: ~10 ms of
    every serving solve's start (issue 33)."""
    for name in TRAINING_AND_FILE_READERS:  # each still exists: a renamed module would make this test vacuous
        assert importlib.util.find_spec(name) is not None, name
    modules = modules_of_run(["solve", str(example("70b-serving"))])
    assert "clusterplan.candidates.serving" in modules and "clusterplan.render.table" in modules
    assert not modules & set(TRAINING_AND_FILE_READERS), sorted(modules & set(TRAINING_AND_FILE_READERS))


@pytest.mark.slow
def test_validate_checks_pinned_layouts_without_evaluating_a_design() -> None:
    """``validate`` reads the requirement and checks its pinned layouts (evaluation/pinned.py) without importing a
    design's evaluation and the serving physics it runs (~30 ms of its start)."""
    modules = modules_of_run(["validate", str(example("70b-serving"))])
    assert "clusterplan.evaluation.pinned" in modules
    heavy = {"clusterplan.evaluation.evaluate", "clusterplan.physics.serving", "clusterplan.physics.queueing"}
    assert not modules & heavy, sorted(modules & heavy)


_FROZEN_PROBE = """
import gc, sys
sys.argv = ["clusterplan", *sys.argv[1:]]
import clusterplan.render.jsonout as jsonout
render = jsonout.render
def probe(plan):  # the command ends with os._exit: say it here
    tracked = id(vars(sys.modules["clusterplan.pipeline"])) in {id(o) for o in gc.get_objects()}
    sys.stderr.write(f"TRACKED {tracked}\\n")
    sys.stderr.flush()
    return render(plan)
jsonout.render = probe
from clusterplan.cli import entry
entry()
"""


@pytest.mark.slow
def test_clusterplan_command_freezes_what_its_command_imported() -> None:
    """In the ``clusterplan`` process itself the cyclic collector leaves alone what the command imported before its
    body ran (``console.guarded``): a solve imports the pipeline after the CLI's own freeze, and walking those objects
    again cost one 30-70 ms collection of the 70B plan. Seen from the JSON writer, the pipeline module is frozen."""
    proc = subprocess.run(
        [sys.executable, "-c", _FROZEN_PROBE, "solve", str(example("7b-chat-serving")), "--json", "--no-explain"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TRACKED False" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_probe_sees_the_solver_import() -> None:
    """The probe itself works: a solve does import CP-SAT (else every case above would pass vacuously)."""
    code, modules = loaded_modules(["solve", str(example("7b-chat-serving"))])
    assert code == 0
    assert "ortools" in modules and "pydantic" in modules


def test_commands_are_built_when_used_and_all_listed() -> None:
    """The root group builds a command's click form only when it is looked up (a solve does not pay for the
    other ten), and still lists every module's command, groups last, with its help in ``--help``."""
    import importlib
    import pkgutil

    import typer
    import typer.main
    from typer.testing import CliRunner

    import clusterplan.commands as commands
    from clusterplan.cli import app

    holder = typer.Typer()
    for info in pkgutil.iter_modules(commands.__path__):
        register = getattr(importlib.import_module(f"clusterplan.commands.{info.name}"), "register", None)
        if register is not None:
            register(holder)
    expected = {typer.main.get_command_name(c.callback.__name__) for c in holder.registered_commands if c.callback}
    expected |= {g.name for g in holder.registered_groups if g.name}

    # The CLI's table of which module registers each command is what the modules register.
    from clusterplan.cli import COMMAND_MODULES, registered

    for info in pkgutil.iter_modules(commands.__path__):
        for name in (
            registered(info.name)
            if hasattr(importlib.import_module(f"clusterplan.commands.{info.name}"), "register")
            else ()
        ):
            assert COMMAND_MODULES.get(name) == info.name, name

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    assert set(group.list_commands(ctx)) == expected  # type: ignore[attr-defined]
    assert group.list_commands(ctx)[-1] == "catalog"  # type: ignore[attr-defined]  # a group, listed after commands
    assert not group.commands  # type: ignore[attr-defined]  # nothing built yet
    assert group.get_command(ctx, "solve") is not None  # type: ignore[attr-defined]
    assert set(group.commands) == {"solve"}  # type: ignore[attr-defined]

    out = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    for name in expected:
        assert name in out
    assert "Plan: the cheapest feasible GPU cluster designs" in out  # a command's help line


def test_cp_model_is_taken_from_one_place() -> None:
    """Every module takes CP-SAT from ``clusterplan.planner.cpsat``: one direct import elsewhere, run
    first, would import pandas again and undo the saving for every command."""
    direct = re.compile(r"from ortools\.sat\.python import cp_model\b|import ortools\.sat\.python\.cp_model")
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "solver").rglob("*.py"))
        if path.name != "cpsat.py" and direct.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


_SERIES = """
import sys
from clusterplan.planner.cpsat import cp_model
assert "pandas" not in sys.modules, "cp_model imported pandas"
import pandas as pd
model = cp_model.CpModel()
xs = model.new_int_var_series("x", pd.Index([1, 2, 3]), 0, 5)
model.add(xs.sum() == 7)
solver = cp_model.CpSolver()
assert solver.solve(model) == cp_model.OPTIMAL
print(int(solver.values(xs).sum()))
"""


def test_cp_model_without_pandas_still_serves_pandas_callers() -> None:
    """The pandas stand-in lasts only for the import: CP-SAT's pandas helpers still work once a caller
    imports pandas itself (a notebook building its own model beside clusterplan's)."""
    proc = subprocess.run(
        [sys.executable, "-c", _SERIES], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "7"
