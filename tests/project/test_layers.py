"""The layer rules hold (import-linter contracts in pyproject.toml), docs/architecture.md is what
scripts/architecture.py draws from the code now, and the only cycles between the engine's units are the known
ones. tests/project/test_architecture.py keeps the rules import-linter cannot say (what loads at run time)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys

from tests.paths import REPO


_spec = importlib.util.spec_from_file_location("architecture", REPO / "scripts" / "architecture.py")
architecture = importlib.util.module_from_spec(_spec)
sys.modules["architecture"] = architecture        # dataclasses look their module up while it executes
_spec.loader.exec_module(architecture)

# Known debt, drawn red in docs/architecture.md: none now. A new cycle fails this test; one that cannot be broken
# at once goes on this list, with its closing import in the contract's ignore_imports and a comment saying why.
KNOWN_CYCLES: list[list[str]] = []


def test_the_import_contracts_hold():
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    for contract in ("engine never imports the app or textual", "engine's layers go one way",
                     "app's layers go one way", "never import the tests or their doubles"):
        assert contract in out.stdout.replace("\n", " "), out.stdout


def test_the_architecture_page_is_generated_from_the_code_as_it_is():
    committed = (REPO / "docs" / "architecture.md").read_text()
    assert committed == architecture.render(), \
        "docs/architecture.md is stale: run `python scripts/architecture.py` and commit the result"


def test_the_only_cycles_between_engine_units_are_the_known_ones():
    graph = {e: k for e, k in architecture.unit_graph(architecture.scan()).items() if e[0].startswith("engine.")}
    assert architecture.cycles(graph) == sorted(KNOWN_CYCLES)


def test_no_cycles_between_the_modules_inside_an_engine_unit():
    graph = {e: k for e, k in architecture.module_graph(architecture.scan()).items() if e[0].startswith("engine.")}
    assert architecture.cycles(graph) == []


def test_every_layered_unit_exists_and_every_unit_is_layered():
    units = {architecture.unit(architecture.module_name(p)) for p in architecture.source_files("engine")} - {None}
    layered = {u for row in architecture.layers() for u in row}
    assert layered == units


def _imports_of(source: str, module: str = "engine.pkg.mod") -> set[tuple[str, str]]:
    c = architecture._Collector(module, False, {"engine.jail", "engine.pkg.sibling"})
    c.visit(ast.parse(source))
    return {(i.imported, i.kind) for i in c.found}


def test_the_scanner_tells_module_level_lazy_and_type_only_imports_apart():
    source = '''
from typing import TYPE_CHECKING
import engine.verdict
from engine import jail
from . import sibling
from .sibling import thing
if TYPE_CHECKING:
    from engine.tasks.model import Task
try:
    import engine.config
except ImportError:
    pass

def f():
    from engine.gpu_wait import NO_GPU
    if TYPE_CHECKING:
        import engine.llm

class C:
    import engine.errors
'''
    assert _imports_of(source) == {
        ("typing", "module"), ("engine.verdict", "module"), ("engine.jail", "module"),
        ("engine.pkg.sibling", "module"), ("engine.tasks.model", "type"), ("engine.config", "module"),
        ("engine.gpu_wait", "function"), ("engine.llm", "type"), ("engine.errors", "module")}


def test_cycles_ignore_type_only_edges_and_report_each_cycle_once():
    g = {("engine.a", "engine.b"): {"module"}, ("engine.b", "engine.c"): {"function"},
         ("engine.c", "engine.a"): {"module"}, ("engine.c", "engine.b"): {"type"}}
    assert architecture.cycles(g) == [["engine.a", "engine.b", "engine.c"]]
