"""pyproject.toml declares what the code imports: every third-party import under engine/ and kbench_tui/ is a
dependency (or an extra, imported under a guard that says how to install it), every one under tests/ and
scripts/ is a dependency or in the `test` extra, and requires-python is no lower than the standard library
modules the code imports need."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib

from tests.paths import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
OWN = {"engine", "kbench_tui", "tests", "scripts"}
# tests/fixtures/kernelbench/needs_package.py imports it to check that a missing package is reported.
DELIBERATELY_MISSING = {"kbench_fixture_not_installed_pkg"}
# Standard library modules newer than the oldest Python kbench could otherwise run on.
NEW_STDLIB = {"tomllib": (3, 11)}


def _dist(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared(*extras: str) -> set[str]:
    reqs = list(PROJECT["dependencies"])
    for extra in extras:
        reqs += PROJECT["optional-dependencies"][extra]
    return {_dist(r) for r in reqs}


def _guarded(tree: ast.AST) -> set[int]:
    """Line numbers of imports inside `try: ... except ImportError` (or ModuleNotFoundError)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            lines |= {n.lineno for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def _third_party(folders: tuple[str, ...]) -> list[tuple[str, str, bool]]:
    """(top-level name, file:line, guarded) for each import of something neither stdlib nor kbench's own."""
    files = [p for folder in folders for p in sorted((REPO / folder).rglob("*.py")) if "templates" not in p.parts]
    local = {p.stem for p in files}            # conftest, helper modules, scripts run from their folder
    skip = set(sys.stdlib_module_names) | OWN | local | DELIBERATELY_MISSING | {"__future__"}
    found = []
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        guarded = _guarded(tree)
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top not in skip:
                    found.append((top, f"{path.relative_to(REPO)}:{node.lineno}", node.lineno in guarded))
    return found


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()   # reads every installed RECORD: once per run


def _distribution(top: str) -> str | None:
    dists = _distributions().get(top)
    return dists[0].lower().replace("_", "-") if dists else None


def test_every_package_the_app_imports_is_declared():
    required = _declared()
    optional = {e: _declared(e) - required for e in PROJECT["optional-dependencies"] if e != "test"}
    problems = []
    for top, where, guarded in _third_party(("engine", "kbench_tui")):
        dist = _distribution(top)
        if dist is None:
            problems.append(f"{where}: {top} is not installed, so no distribution can be named for it")
        elif dist in required:
            continue
        elif any(dist in deps for deps in optional.values()):
            if not guarded:
                problems.append(f"{where}: {top} is optional ({dist}) but imported without an ImportError guard")
        else:
            problems.append(f"{where}: {top} ({dist}) is not declared in pyproject.toml")
    assert not problems, "\n".join(problems)


def test_every_package_the_tests_and_scripts_import_is_a_dependency_or_in_the_test_extra():
    declared = _declared("test")
    problems = [f"{where}: {top} ({_distribution(top)}) is neither a dependency nor in the test extra"
                for top, where, _ in _third_party(("tests", "scripts")) if _distribution(top) not in declared]
    assert not problems, "\n".join(problems)


def test_requires_python_covers_the_standard_library_the_code_imports():
    floor = tuple(int(x) for x in re.fullmatch(r">=\s*(\d+)\.(\d+)", PROJECT["requires-python"]).groups())
    imported = {name.split(".")[0] for folder in ("engine", "kbench_tui", "scripts", "tests")
                for p in (REPO / folder).rglob("*.py") for node in ast.walk(ast.parse(p.read_text()))
                for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                             [node.module or ""] if isinstance(node, ast.ImportFrom) else [])}
    needed = [f"{mod} needs Python {v[0]}.{v[1]}" for mod, v in NEW_STDLIB.items() if mod in imported and v > floor]
    assert not needed, f"requires-python is {PROJECT['requires-python']}: " + "; ".join(needed)
