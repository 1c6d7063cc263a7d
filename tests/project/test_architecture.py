"""Import rules: engine/ never imports textual, statically or at run time; the CLI starts without it; the
evaluation's floors go one way (pipeline above harness, integrity, tasks and jail); the jail and the runner's
start import nothing a candidate could have touched."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_engine_module_imports_textual_or_the_tui():
    offenders = []
    for path in sorted((REPO / "engine").rglob("*.py")):
        if "templates" in path.parts:  # text templates rendered into generated packages, not engine code
            continue
        for mod in _imported_modules(path):
            if mod.split(".")[0] in ("textual", "kbench_tui"):
                offenders.append(f"{path.relative_to(REPO)} imports {mod}")
    assert not offenders, "\n".join(offenders)


def test_importing_every_engine_module_loads_no_textual():
    modules = sorted(".".join(p.relative_to(REPO).with_suffix("").parts)
                     for p in (REPO / "engine").rglob("*.py")
                     if p.name != "__main__.py" and "templates" not in p.parts)
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "print('textual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_cli_help_runs_without_importing_textual():
    code = "import sys; from kbench_tui.launcher import main; rc = main(['tasks', '--json']); print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def _engine_modules(package: str) -> list[Path]:
    return sorted((REPO / "engine" / package).rglob("*.py"))


def test_the_floors_below_the_pipeline_never_import_it():
    offenders = []
    for package in ("harness", "integrity", "tasks", "jail", "workspace", "profile"):
        for path in _engine_modules(package):
            for mod in _imported_modules(path):
                if mod.startswith("engine.pipeline"):
                    offenders.append(f"{path.relative_to(REPO)} imports {mod}")
    assert not offenders, "\n".join(offenders)


def _top_level_imports(path: Path) -> set[str]:
    """Modules imported when `path` is imported (module level, not inside functions)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_jail_and_the_runners_start_use_only_the_standard_library():
    """The runner jails itself before it imports torch or anything else; what it imports first must be
    standard library or kbench's own jail, wire, arena, message, timing-parameter and CUDA-toolkit code (itself held
    to the same rule)."""
    allowed_engine = {"engine", "engine.jail", "engine.pipeline.protocol.wire", "engine.pipeline.protocol.arena",
                      "engine.pipeline.protocol.messages", "engine.pipeline.runner.main", "engine.cuda_home",
                      "engine.timing_params"}
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    pipeline = REPO / "engine" / "pipeline"
    runner = (pipeline / "runner" / f for f in ("__init__.py", "__main__.py", "main.py"))
    for path in [*_engine_modules("jail"), *runner,
                 *(pipeline / "protocol" / f for f in ("__init__.py", "wire.py", "arena.py", "messages.py")),
                 REPO / "engine" / "cuda_home.py", REPO / "engine" / "timing_params.py", pipeline / "__init__.py"]:
        for mod in _top_level_imports(path):
            ok = mod.split(".")[0] in stdlib or mod in allowed_engine or mod.startswith("engine.jail")
            assert ok, f"{path.relative_to(REPO)} imports {mod} at module level"
