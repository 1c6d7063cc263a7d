"""Every function-local import under engine/ and kbench_tui/ says why it is local (issue #22, "types at the doors").

A reason is either a comment containing "lazy" (any case) on the import's line or directly above it (a comment
block directly above a group of consecutive imports covers the group), or, once per module, a paragraph of the
module docstring that starts with `Lazy imports:`. A reason that says the import breaks a cycle is refused:
scripts/architecture.py --check and lint-imports prove there are none, function-local edges included. An import
under `if TYPE_CHECKING:` is not a run-time import and needs no reason. An import without a reason belongs at
the top of its module.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from pathlib import Path

from tests.paths import REPO

ROOTS = ("engine", "kbench_tui")
CYCLE = re.compile(r"cycl|circular", re.IGNORECASE)   # "cycle", "cyclic", "circular import"


def _docstring_reason(tree: ast.Module) -> str | None:
    doc = ast.get_docstring(tree) or ""
    for paragraph in re.split(r"\n\s*\n", doc):
        if paragraph.strip().startswith("Lazy imports:"):
            return paragraph.strip()
    return None


def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line (tokenize, so a '#' inside a string is not one)."""
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _local_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports inside a function body (nested ones included), not under `if TYPE_CHECKING:`."""
    found: dict[int, ast.Import | ast.ImportFrom] = {}

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                for sub in child.orelse:
                    visit_one(sub, in_function)
                continue
            visit_one(child, in_function)

    def visit_one(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if in_function:
                found.setdefault(id(node), node)
            return
        visit(node, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return sorted(found.values(), key=lambda n: (n.lineno, n.col_offset))


def _comment_reason(node: ast.Import | ast.ImportFrom, comments: dict[int, str], lines: list[str],
                    import_lines: set[int]) -> str | None:
    """The comment that gives `node` its reason: on one of its own lines, else the comment block directly above
    it or above the run of consecutive import lines it ends."""
    own = " ".join(comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1) if n in comments)
    if "lazy" in own.lower():
        return own
    line = node.lineno - 1
    while line in import_lines:          # a group of imports shares the comment above its first
        line -= 1
    if line in comments and not lines[line - 1].strip().startswith("#"):   # `try:  # lazy: ...`
        return comments[line] if "lazy" in comments[line].lower() else None
    block: list[str] = []
    while line >= 1 and lines[line - 1].strip().startswith("#"):
        block.insert(0, lines[line - 1].strip())
        line -= 1
    above = " ".join(block)
    return above if "lazy" in above.lower() else None


def check_file(path: Path, root: Path | None = None) -> list[str]:
    """Problems in one module: `path:line: import ...` for a function-local import without a reason, and for
    one whose reason is a cycle."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    lines = source.splitlines()
    comments = _comments(source)
    module_reason = _docstring_reason(tree)
    imports = _local_imports(tree)
    import_lines = {n for node in imports for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    shown = path.relative_to(root).as_posix() if root else str(path)
    problems = []
    for node in imports:
        text = " ".join(l.strip() for l in lines[node.lineno - 1:(node.end_lineno or node.lineno)])
        text = text.split("#", 1)[0].strip()
        reason = _comment_reason(node, comments, lines, import_lines) or module_reason
        if reason is None:
            problems.append(f"{shown}:{node.lineno}: {text}  (no reason: move it to the top, or say why it is lazy)")
        elif CYCLE.search(reason):
            problems.append(f"{shown}:{node.lineno}: {text}  (a cycle is not a reason: there are none)")
    return problems


def check_tree(root: Path = REPO) -> list[str]:
    problems = []
    for package in ROOTS:
        for path in sorted((root / package).rglob("*.py")):
            problems += check_file(path, root)
    return problems


def test_every_function_local_import_says_why():
    problems = check_tree()
    assert not problems, (f"{len(problems)} function-local import(s) without an acceptable reason "
                          "(a `# lazy: why` comment, or a `Lazy imports:` docstring paragraph):\n"
                          + "\n".join(problems))


def _module(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "mod.py"
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def test_the_checker_flags_an_import_without_a_reason(tmp_path):
    path = _module(tmp_path, '''
        """A module."""
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from json import JSONDecoder

        import os


        def f():
            import re
            s = "# lazy: in a string, not a comment"
            return re, s


        def g():
            def inner():
                from json import dumps  # here: no reason given
                return dumps
            return inner
        ''')
    problems = check_file(path, tmp_path)
    assert problems == ["mod.py:11: import re  (no reason: move it to the top, or say why it is lazy)",
                        "mod.py:18: from json import dumps  (no reason: move it to the top, or say why it is lazy)"]


def test_the_checker_takes_comments_and_the_docstring_paragraph(tmp_path):
    path = _module(tmp_path, '''
        def f():
            import torch  # lazy: heavy, and only this path needs it
            return torch


        def g():
            # Lazy: the optional "plot" extra;
            # matplotlib is slow to import
            from matplotlib.figure import Figure
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            return Figure, FigureCanvasAgg
        ''')
    assert check_file(path, tmp_path) == []
    path = _module(tmp_path, '''
        """A runtime.

        Lazy imports: torch, which must wait for the jail.
        """


        def f():
            import torch
            return torch
        ''')
    assert check_file(path, tmp_path) == []
    path = _module(tmp_path, '''
        """A runtime.

        torch is imported lazily below, but this paragraph does not start the way the rule says.
        """


        def f():
            import torch
            return torch
        ''')
    assert check_file(path, tmp_path) == ["mod.py:8: import torch  (no reason: move it to the top, or say why "
                                          "it is lazy)"]


def test_the_checker_refuses_a_cycle_as_the_reason(tmp_path):
    path = _module(tmp_path, '''
        def f():
            from engine import config  # lazy: avoids a circular import
            return config


        def g():
            # lazy: import cycle with engine.workspace
            from engine import workspace
            return workspace
        ''')
    assert check_file(path, tmp_path) == [
        "mod.py:2: from engine import config  (a cycle is not a reason: there are none)",
        "mod.py:8: from engine import workspace  (a cycle is not a reason: there are none)"]
    path = _module(tmp_path, '''
        """Lazy imports: they break the cycle with engine.cli."""


        def f():
            import engine.cli
            return engine.cli
        ''')
    assert check_file(path, tmp_path) == ["mod.py:5: import engine.cli  (a cycle is not a reason: there are none)"]
