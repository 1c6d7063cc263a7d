"""Read a reference module's structure with `ast`, without executing it (task code is not trusted)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from engine import userfiles
from engine.errors import TaskError


@dataclass(frozen=True)
class Params:
    names: tuple[str, ...]  # parameter names, self excluded
    has_var_kwargs: bool


def parse_module(path: Path) -> ast.Module:
    text = userfiles.read_text(path, error=TaskError, follow_links=True)   # the user's own file: links followed
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise TaskError(f"{path}:{exc.lineno}: Python syntax error: {exc.msg}. "
                        "Fix the file; the task cannot be loaded until it parses.") from None


def _params(fn: ast.FunctionDef, skip_self: bool) -> Params:
    args = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    if skip_self and args:
        args = args[1:]
    return Params(tuple(args), fn.args.kwarg is not None)


def function_params(module: ast.Module, name: str, path: Path) -> Params:
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return _params(node, skip_self=False)
    raise TaskError(f"{path}: no top-level function `{name}` (a reference module needs one).")


def class_init_params(module: ast.Module, name: str, path: Path) -> Params:
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return _params(item, skip_self=True)
            return Params((), False)
    raise TaskError(f"{path}: no top-level class `{name}` (a reference module needs one).")


def has_top_level(module: ast.Module, name: str) -> bool:
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def literal_defaults(module: ast.Module, names: tuple[str, ...] = ("get_inputs",),
                     classes: tuple[str, ...] = ("Model",)) -> dict[str, int | float | bool]:
    """Number and bool defaults of the parameters of functions `names` and of `classes`' __init__ (a cost
    expression may use a size a config leaves at its default, e.g. robust-kbench's fixed 224 x 224 images)."""
    fns: list[ast.FunctionDef] = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            fns.append(node)
        if isinstance(node, ast.ClassDef) and node.name in classes:
            fns.extend(i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__")
    out: dict[str, int | float | bool] = {}
    for fn in fns:
        positional = fn.args.posonlyargs + fn.args.args
        pairs = list(zip(positional[len(positional) - len(fn.args.defaults):], fn.args.defaults))
        pairs += [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None]
        for arg, default in pairs:
            if isinstance(default, ast.Constant) and isinstance(default.value, (int, float, bool)):
                out.setdefault(arg.arg, default.value)
    return out
