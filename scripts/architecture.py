"""Draw kbench's layers from its imports and write docs/architecture.md.

    python scripts/architecture.py            # rewrite docs/architecture.md
    python scripts/architecture.py --check    # exit 1 (with a diff) when the committed page is stale

Every import under engine/ and kbench_tui/ is read from the syntax tree: module-level, function-local (lazy)
and `if TYPE_CHECKING:` ones, each kept apart. Imports are folded to units: a subpackage (`engine/evolve/`) or
a top-level module (`engine/config/load.py`); cycles are looked for between units and between the modules inside
one. The layers come from the import-linter contracts in pyproject.toml, so the picture and the checked rules
cannot disagree; the stage table names each pipeline stage's module and entry point, and fails when an entry
point is no longer where the table says.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("engine", "kbench_tui")
KINDS = ("module", "function", "type")     # strongest first: an edge is drawn as its strongest import

# (stage, "module:symbol" entry points, what it does). Hand-written, checked against the code by `stages()`.
STAGES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("evaluate (one candidate)", ("engine.pipeline.evaluate:evaluate",),
     "static gate, build, then the judge; the report every caller reads"),
    ("static scan", ("engine.integrity.static:gate_static", "engine.integrity.cpp.scan:scan_cpp_source",
                     "engine.integrity.py_scan:scan_python_source"),
     "reward-hack rules on the sources before any GPU time"),
    ("build", ("engine.harness.build.stage:build_candidate",),
     "compile to a torch extension, cached by source + toolchain"),
    ("judge", ("engine.pipeline.judge.main:main", "engine.pipeline.judge.evaluation:Judge"),
     "trusted process: references, comparison, timing, every verdict"),
    ("jailed runner", ("engine.pipeline.runner.main:Runner", "engine.jail:apply"),
     "runs candidate code, one fresh jailed process per candidate"),
    ("correctness comparison", ("engine.harness.compare:compare_outputs",), "outputs against the reference"),
    ("timing", ("engine.pipeline.judge.timer:LocalTimer", "engine.harness.timing:summarise"),
     "event-timed calls, median and IQR"),
    ("verdicts", ("engine.pipeline.verdicts:fill_report", "engine.verdict:Verdict", "engine.verdict:judge"),
     "from the judge's result to the correctness, timing and integrity verdicts; `judge`: what they amount to"),
    ("profile", ("engine.pipeline.profiling:profile_stage", "engine.profile.runner:profile_verdict"),
     "ncu and the torch profiler on a candidate that passed"),
    ("workspace commit", ("engine.workspace.workspace:Workspace", "engine.workspace.commits:write_candidate_commit"),
     "every candidate a git commit, verdicts as notes"),
    ("evolve loop", ("engine.evolve.loop:EvolutionSession", "engine.evolve.proposing:Proposing",
                     "engine.evolve.gate:PreGpuGate", "engine.evolve.evaluations:Evaluations",
                     "engine.evolve.recorder:Recorder", "engine.evolve.controls:Controls"),
     "one resumable session: propose, evaluate, select; composed of parts that each own their state"),
    ("executors", ("engine.evolve.local_executor:LocalPipelineExecutor", "engine.evolve.ray.executor:RayExecutor"),
     "where evaluations run: local worker processes or a Ray cluster"),
    ("LLM proposers", ("engine.proposers.anthropic:LLMProposer", "engine.llm.factory:make_client"),
     "translate, mutate, crossover and repair through an LLM"),
    ("session service", ("engine.service.session_service:SessionService",), "what the CLI and the app start sessions through"),
)


@dataclass(frozen=True)
class Import:
    importer: str      # dotted module name
    imported: str
    kind: str          # module | function | type


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files(package: str) -> list[Path]:
    # engine/export/templates holds text rendered into generated packages, not kbench code
    return sorted(p for p in (ROOT / package).rglob("*.py") if "templates" not in p.parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: set[str]):
        self.module, self.known, self.found = module, known, []
        self.package = module if is_package else module.rpartition(".")[0]
        self.kind = "module"

    def _under(self, kind: str, nodes: list[ast.stmt] | list[ast.AST]) -> None:
        outer, self.kind = self.kind, (self.kind if self.kind == "type" else kind)
        for n in nodes:
            self.visit(n)
        self.kind = outer

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._under("function", node.body)     # decorators and defaults run in the enclosing scope

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._under("type", node.body)
            self._under(self.kind, node.orelse)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [Import(self.module, a.name, self.kind) for a in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")[: len(self.package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        for alias in node.names:   # `from engine import jail` imports the module engine.jail
            sub = f"{base}.{alias.name}"
            self.found.append(Import(self.module, sub if sub in self.known else base, self.kind))


def scan() -> list[Import]:
    files = {module_name(p): p for pkg in PACKAGES for p in source_files(pkg)}
    out: list[Import] = []
    for mod, path in files.items():
        c = _Collector(mod, path.name == "__init__.py", set(files))
        c.visit(ast.parse(path.read_text(), filename=str(path)))
        out += c.found
    return out


def unit(module: str) -> str | None:
    """engine.evolve.loop -> "engine.evolve"; engine.config -> "engine.config"; the root packages -> None
    (engine/__init__.py holds only the version; kbench_tui/__init__.py nothing)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in PACKAGES and len(parts) > 1 else None


Graph = dict[tuple[str, str], set[str]]       # (importer unit, imported unit) -> kinds of import


def unit_graph(imports: list[Import], outside: dict[str, str] | None = None) -> Graph:
    """Edges between units; `outside` folds whole packages into one node (the app's view of the engine)."""
    g: Graph = defaultdict(set)
    for imp in imports:
        src = unit(imp.importer)
        dst = (outside or {}).get(imp.imported.split(".")[0]) or unit(imp.imported)
        if src and dst and src != dst:
            g[src, dst].add(imp.kind)
    return dict(g)


def module_graph(imports: list[Import]) -> Graph:
    """Edges between the modules inside one unit (engine.pipeline.evaluate -> engine.pipeline.verdicts): the
    imports unit_graph folds away, so that a cycle inside a package shows too."""
    known = {module_name(p) for pkg in PACKAGES for p in source_files(pkg)}
    g: Graph = defaultdict(set)
    for imp in imports:
        inside = unit(imp.importer)
        if imp.imported in known and imp.importer != imp.imported and inside and unit(imp.imported) == inside:
            g[imp.importer, imp.imported].add(imp.kind)
    return dict(g)


def strongest(kinds: set[str]) -> str:
    return next(k for k in KINDS if k in kinds)


def cycles(g: Graph) -> list[list[str]]:
    """Every elementary cycle over run-time edges (module-level or function-local), each starting at its
    smallest unit, sorted. TYPE_CHECKING-only edges cannot close a cycle: nothing is imported at run time."""
    succ: dict[str, list[str]] = defaultdict(list)
    for (a, b), kinds in sorted(g.items()):
        if kinds - {"type"}:
            succ[a].append(b)
    found: list[list[str]] = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in succ[node]:
            if nxt == start:
                found.append(list(path))
            elif nxt > start and nxt not in path:   # each cycle once, from its smallest unit
                walk(start, nxt, [*path, nxt])

    for start in sorted(succ):
        walk(start, start, [start])
    return sorted(found)


def _layers_contract() -> dict:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in conf["contracts"] if c["id"] == "engine-layers")


def layers() -> list[list[str]]:
    """The engine-layers contract's rows, top first, as unit names."""
    return [[f"engine.{name.strip()}" for name in row.replace(":", "|").split("|")]
            for row in _layers_contract()["layers"]]


def ignored_imports() -> list[tuple[str, str]]:
    """The contract's ignore_imports, as (importer, imported) modules: the imports it tolerates as debt."""
    pairs = (entry.split("->") for entry in _layers_contract().get("ignore_imports", []))
    return [(a.strip(), b.strip()) for a, b in pairs]


def _top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return names


def stages() -> list[tuple[str, list[tuple[str, str]], str]]:
    """STAGES with each entry point resolved to its file; raises when one has moved or gone."""
    out = []
    for stage, entries, what in STAGES:
        resolved = []
        for entry in entries:
            mod, _, symbol = entry.partition(":")
            rel = Path(*mod.split("."))
            path = next((p for p in (ROOT / rel.with_suffix(".py"), ROOT / rel / "__init__.py") if p.is_file()), None)
            if path is None or symbol not in _top_level_names(path):
                raise LookupError(f"scripts/architecture.py STAGES: {stage!r} names {entry}, which is not defined "
                                  "there any more; point the table at where it went.")
            resolved.append((str(path.relative_to(ROOT)), symbol))
        out.append((stage, resolved, what))
    return out


def _node(u: str) -> str:
    short = u.split(".", 1)[1] if "." in u else u
    is_pkg = (ROOT / Path(*u.split("."))).is_dir()
    return f'{short.replace(".", "_")}["{short}/"]' if is_pkg else f'{short.replace(".", "_")}(["{short}.py"])'


def _edge(a: str, b: str, kinds: set[str]) -> str:
    ida, idb = (x.split(".", 1)[1].replace(".", "_") if "." in x else x for x in (a, b))
    return {"module": f"{ida} --> {idb}", "function": f"{ida} -.-> {idb}",
            "type": f"{ida} -. types .-> {idb}"}[strongest(kinds)]


def _mermaid(g: Graph, rows: list[list[str]], loops: list[list[str]]) -> list[str]:
    lines = ["```mermaid", "flowchart TB"]
    placed = {u for row in rows for u in row}
    units = sorted({u for e in g for u in e})
    rows = [*rows, [u for u in units if u not in placed]] if set(units) - placed else rows
    for i, row in enumerate(rows):
        lines += [f'  subgraph L{i}[" "]', "    direction LR", *(f"    {_node(u)}" for u in row), "  end"]
    on_cycle = {(c[i], c[(i + 1) % len(c)]) for c in loops for i in range(len(c))}
    edges = sorted(g.items())
    lines += [f"  {_edge(a, b, k)}" for (a, b), k in edges]
    red = [str(i) for i, (e, _) in enumerate(edges) if e in on_cycle]
    if red:
        lines.append(f"  linkStyle {','.join(red)} stroke:#d33,stroke-width:2px")
    return [*lines, "```"]


def _tui_mermaid(g: Graph) -> list[str]:
    lines = ["```mermaid", "flowchart TB"]
    lines += [f'  {u.replace(".", "_")}["{u.split(".", 1)[-1]}"]' for u in sorted({u for e in g for u in e})]
    for (a, b), kinds in sorted(g.items()):
        arrow = {"module": "-->", "function": "-.->", "type": "-. types .->"}[strongest(kinds)]
        lines.append(f'  {a.replace(".", "_")} {arrow} {b.replace(".", "_")}')
    return [*lines, "```"]


def _cycle_line(c: list[str], ignored: list[tuple[str, str]]) -> str:
    hops = list(zip(c, [*c[1:], c[0]]))
    closers = [f"`{a} -> {b}`" for a, b in ignored if (unit(a), unit(b)) in hops]
    path = " → ".join(u.split(".", 1)[1] for u in [*c, c[0]])
    return f"- {path}: " + (f"closed by {', '.join(closers)}" if closers else "**not in ignore_imports**")


# engine/pipeline's folders, each the code of one process (engine/pipeline/__init__.py); "" is its top level
ROOMS: tuple[tuple[str, str], ...] = (
    ("", "kbench's own process (the CLI, the app, an executor's worker): the static gate, the build, a judge started "
         "and read, the verdicts and the report"),
    ("judge", "the judge process: trusted, never runs candidate code; references, comparison, timing"),
    ("runner", "the processes that run candidate code, jailed before it loads: the runner, the profile child"),
    ("keeper", "the keeper of a kept judge: a detached kbench process holding one standby judge between `kbench "
               "eval` commands, stopping it when the command that claimed it goes"),
    ("protocol", "what crosses between them: the request and result files, control messages, wire, arena"),
    ("timer", "kbench's compiled timing helper, loaded by the judge and the runner"),
)


def room(module: str) -> str | None:
    """engine.pipeline.judge.analysis -> "judge"; engine.pipeline.evaluate -> ""; outside the pipeline -> None."""
    parts = module.split(".")
    if parts[:2] != ["engine", "pipeline"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in {r for r, _ in ROOMS if r} else ""


def _rooms(imports: list[Import]) -> list[str]:
    # an entry point (__main__) or a package's __init__ with only its docstring is not a module of its own
    def counted(p: Path) -> bool:
        return p.stem != "__main__" and (p.stem != "__init__" or len(ast.parse(p.read_text()).body) > 1)
    files = [module_name(p) for p in source_files("engine") if counted(p)]
    out = ["| folder | who runs it | modules | imports from the other folders |", "| --- | --- | ---: | --- |"]
    for name, who in ROOMS:
        mods = [m for m in files if room(m) == name]
        used = sorted({room(i.imported) for i in imports if room(i.importer) == name}
                      - {None, name}, key=lambda r: [n for n, _ in ROOMS].index(r))   # type: ignore[arg-type]
        shown = ", ".join(f"`{r}/`" if r else "top level" for r in used) or "none"
        out.append(f"| `engine/pipeline/{name + '/' if name else ''}` | {who} | {len(mods)} | {shown} |")
    return out


def render() -> str:
    imports = scan()
    engine = {e: k for e, k in unit_graph(imports).items() if e[0].startswith("engine.")}
    tui = {e: k for e, k in unit_graph(imports, outside={"engine": "engine"}).items()
           if e[0].startswith("kbench_tui.")}
    loops = cycles(engine)
    inner = cycles({e: k for e, k in module_graph(imports).items() if e[0].startswith("engine.")})
    rows = layers()
    out = [
        "# Architecture",
        "",
        "Generated from the code by `scripts/architecture.py`; do not edit by hand. After changing imports or",
        "moving a stage, regenerate it with `python scripts/architecture.py` (tests/project/test_layers.py fails while",
        "this page is stale). The rules themselves are import-linter contracts in `pyproject.toml`",
        "(`[tool.importlinter]`), checked by tests/project/test_layers.py or `lint-imports`.",
        "",
        "## How the code is cut into modules",
        "",
        "A module holds one idea: one stage, one format, one store, one protocol and what speaks it. Split a module",
        "when it has come to hold two ideas, along the line between them, and name each part for its idea; do not",
        "split it because it is long. A long module with one idea (a parser, a rule table, a screen) reads best",
        "whole, and a cut made only to shorten it leaves two halves that each need the other to be understood.",
        "Signs of two ideas: a docstring that needs \"and\" to say what the module is for, a group of functions",
        "that only each other use, or callers that each import only their own half of it. When a module is split,",
        "its importers import the new homes: no module stays behind only to re-export names from another.",
        "",
        "Test doubles (the fake evaluator, the LLM APIs' stand-in servers and scripted models, the app's test",
        "helpers) live in `tests/doubles/` and `tests/standins/`, never in `engine/` or `kbench_tui/`: the",
        "`production-without-test-doubles` contract forbids both packages to import `tests`, so the wheel ships",
        "only what the product runs.",
        "",
        "## The engine's layers",
        "",
        "One row per layer of the `engine-layers` contract, top first: a unit may import units below it, never",
        "above. A box is a subpackage, a rounded box a top-level module. Solid arrow: a module-level import;",
        "dotted: only function-local (lazy) imports; `types`: only under `if TYPE_CHECKING:`. Red: on a cycle.",
        "",
        *_mermaid(engine, rows, loops),
        "",
        "## Cycles",
        "",
    ]
    if loops:
        out += ["Known debt (tests/project/test_layers.py lists it too). Each cycle is closed by an import the "
                "`engine-layers`",
                "contract tolerates in `ignore_imports`, with a comment there saying why it is wrong:", ""]
        out += [_cycle_line(c, ignored_imports()) for c in loops]
    else:
        out.append("None between the engine's units.")
    if inner:
        out += ["", "Between the modules inside a unit (not drawn above; tests/project/test_layers.py fails on them):",
                ""]
        out += [f"- {' → '.join([*c, c[0]])}" for c in inner]
    else:
        out += ["", "None between the modules inside a unit (function-local imports included)."]
    out += ["", "## Who runs what: engine/pipeline's folders", "",
            "An evaluation runs in three processes, and a module's folder says which one runs it. The",
            "`judge-and-runner-apart` contract keeps the judge's code and the runner's apart (they share only",
            "`protocol/`), and `processes-below-the-parent` keeps both from importing what kbench's own process runs.",
            "", *_rooms(imports)]
    out += ["", "## Who imports whom", "", "| unit | imports (`lazy`: only function-local; `types`: only TYPE_CHECKING) |",
            "| --- | --- |"]
    by_src: dict[str, list[str]] = defaultdict(list)
    for (a, b), kinds in sorted(engine.items()):
        tag = {"module": "", "function": " (lazy)", "type": " (types)"}[strongest(kinds)]
        by_src[a].append(f"{b.split('.', 1)[1]}{tag}")
    out += [f"| {a.split('.', 1)[1]} | {', '.join(bs)} |" for a, bs in sorted(by_src.items())]
    out += ["", "## The app", "",
            "`kbench_tui/` over the engine (all of it folded into one node); the `tui-layers` contract orders it.", "",
            *_tui_mermaid(tui), "",
            "## Where each stage lives", "", "| stage | entry points | what it does |", "| --- | --- | --- |"]
    for stage, entries, what in stages():
        where = "<br>".join(f"`{sym}` in `{path}`" for path, sym in entries)
        out.append(f"| {stage} | {where} | {what} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/architecture.md is stale")
    args = ap.parse_args(argv)
    text = render()
    if not args.check:
        DOC.write_text(text)
        return 0
    old = DOC.read_text() if DOC.exists() else ""
    if old == text:
        return 0
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                               "docs/architecture.md", "generated"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
