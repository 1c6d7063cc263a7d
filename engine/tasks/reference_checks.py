"""What a native task's reference.py and its signatures must agree on, read from the syntax tree (the task's code
is never run to load it). Each mismatch here used to load in silence and fail only on a GPU, where the harness
calls `model(*get_inputs(...), fn=candidate.forward)` and a candidate gets exactly the arguments `Model.forward`
passes to `fn` (docs/formats.md, "reference.py"):

- `Model.forward` takes `fn` and calls it: otherwise no candidate ever runs (it raised TypeError on the GPU, or
  the reference was timed against itself);
- the `[forward]` signature lists as many arguments as that call passes (the generated glue of a kernel-only
  candidate and the export's op schema are built from the signature), and `forward_fn` accepts them;
- `get_inputs` returns as many inputs as `Model.forward` takes before `fn` (where it returns a list literal);
- the `[backward]` signature is the gradient of the output followed by the forward arguments; or, where
  reference.py defines robust-kbench's `AutogradFunction` (the built-in robust-kbench tasks), the arguments its
  backward passes to `AutogradFunction.backward_fn`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from engine.errors import TaskError
from engine.tasks.robust_kbench import AUTOGRAD_CLASS, backward_fn_call
from engine.tasks.signature import SignatureError, parse_signature

DOC = "docs/formats.md, reference.py"


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _top(module: ast.Module, kind: type, name: str):
    return next((n for n in module.body if isinstance(n, kind) and n.name == name), None)


def _arity(fn: ast.FunctionDef, skip: int = 0, drop: tuple[str, ...] = ()) -> tuple[int, int, bool]:
    """(required, accepted, open-ended) positional-or-keyword parameters of `fn`, the first `skip` (self) and the
    names in `drop` left out."""
    a = fn.args
    positional = (a.posonlyargs + a.args)[skip:]
    n_defaults = len(a.defaults)
    required = [p for i, p in enumerate(positional) if i < len(positional) - n_defaults and p.arg not in drop]
    required += [p for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is None and p.arg not in drop]
    accepted = [p for p in positional + a.kwonlyargs if p.arg not in drop]
    return len(required), len(accepted), a.vararg is not None


def _plural(n: int, word: str = "argument") -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _call_text(call: ast.Call, source: str) -> str:
    return ast.get_source_segment(source, call) or "fn(...)"


def _params(signature: str | None) -> list[tuple[str, str]] | None:
    """The signature's arguments; None where there is none, or it cannot be read (the glue and the export say
    why in their own terms when they need it)."""
    if signature is None:
        return None
    try:
        return parse_signature(signature)[1]
    except SignatureError:
        return None


def defines_autograd_function(module: ast.Module) -> bool:
    """Whether reference.py defines robust-kbench's `class AutogradFunction`: its backward direction then takes
    upstream's convention (docs/formats.md, "reference.py")."""
    return _top(module, ast.ClassDef, AUTOGRAD_CLASS) is not None


def check_reference(module: ast.Module, source: str, ref_path: Path, toml_path: Path,
                    signatures: dict[str, str], autograd_backward: bool = False) -> None:
    """Raise TaskError, naming the file and line, where reference.py and the signatures (direction -> text)
    disagree in a way that only a GPU run would otherwise show."""
    model = _top(module, ast.ClassDef, "Model")
    fwd = _method(model, "forward") if model is not None else None
    if fwd is None:
        raise TaskError(f"{ref_path}: class Model has no forward method; it must be "
                        "`def forward(self, <inputs>, fn=forward_fn)` and return fn(...) (" + DOC + ").")
    where = f"{ref_path}:{fwd.lineno}"
    a = fwd.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    if "fn" not in names and a.kwarg is None:
        raise TaskError(f"{where}: Model.forward({', '.join(names)}) takes no `fn`: kbench runs "
                        "model(*inputs, fn=candidate.forward), so no candidate would ever run. Write "
                        f"`def forward(self, <inputs>, fn=forward_fn)` and compute the result with fn(...) ({DOC}).")
    calls = [n for n in ast.walk(fwd) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "fn"]
    if not calls:
        raise TaskError(f"{where}: Model.forward never calls fn: a candidate passed as fn= would never run (the "
                        f"reference would be compared with itself). Compute the result with fn(...) ({DOC}).")
    call = calls[0]
    open_call = any(isinstance(x, ast.Starred) for x in call.args) or any(k.arg is None for k in call.keywords)
    passed = len(call.args) + len(call.keywords)
    call_at = f"{ref_path}:{call.lineno} `{_call_text(call, source)}`"
    if not open_call:
        forward_fn = _top(module, ast.FunctionDef, "forward_fn")
        if forward_fn is not None:
            req, acc, var = _arity(forward_fn)
            if passed < req or (passed > acc and not var):
                raise TaskError(f"{call_at}: Model.forward passes {_plural(passed)} to fn, but forward_fn "
                                f"(line {forward_fn.lineno}) takes {req if req == acc else f'{req} to {acc}'}.")
        params = _params(signatures.get("forward"))
        if params is not None:
            if len(params) != passed:
                listed = ", ".join(p for p, _ in params) or "none"
                raise TaskError(
                    f"{toml_path}: [forward] signature has {_plural(len(params))} ({listed}), but {call_at} passes "
                    f"{passed}: a candidate receives exactly what fn receives, and its glue and op schema are built "
                    f"from the signature. List every argument of that call, in its order ({DOC}).")
        params = _params(signatures.get("backward"))
        if params is not None and autograd_backward:
            _check_autograd_backward(module, ref_path, toml_path, params)
        elif params is not None:
            if len(params) != passed + 1:
                listed = ", ".join(p for p, _ in params) or "none"
                raise TaskError(
                    f"{toml_path}: [backward] signature has {_plural(len(params))} ({listed}); it must be the "
                    f"gradient of the output followed by the {_plural(passed)} fn receives ({call_at}): "
                    f"{passed + 1} in all ({DOC}).")
    _check_inputs(module, fwd, ref_path)


def _check_autograd_backward(module: ast.Module, ref_path: Path, toml_path: Path,
                             params: list[tuple[str, str]]) -> None:
    """The [backward] signature against what AutogradFunction.backward passes to backward_fn (the kernel gets
    exactly those arguments)."""
    call, _ = backward_fn_call(module, ref_path)
    passed = [ast.unparse(a) for a in call.args] + [ast.unparse(k) for k in call.keywords]
    if len(params) != len(passed):
        listed = ", ".join(p for p, _ in params) or "none"
        raise TaskError(f"{toml_path}: [backward] signature has {_plural(len(params))} ({listed}), but "
                        f"{ref_path}:{call.lineno} passes {_plural(len(passed))} to {AUTOGRAD_CLASS}.backward_fn "
                        f"({', '.join(passed)}): a backward kernel receives exactly those ({DOC}).")


def _check_inputs(module: ast.Module, fwd: ast.FunctionDef, ref_path: Path) -> None:
    """get_inputs' list literals against Model.forward's inputs (its parameters before `fn`)."""
    get_inputs = _top(module, ast.FunctionDef, "get_inputs")
    if get_inputs is None:
        return
    req, acc, var = _arity(fwd, skip=1, drop=("fn",))
    if var:
        return
    for node in ast.walk(get_inputs):
        if not (isinstance(node, ast.Return) and isinstance(node.value, (ast.List, ast.Tuple))):
            continue
        if any(isinstance(e, ast.Starred) for e in node.value.elts):
            continue
        n = len(node.value.elts)
        if req <= n <= acc:
            continue
        takes = _plural(req, "input") if req == acc else f"{req} to {acc} inputs"
        raise TaskError(f"{ref_path}:{node.lineno}: get_inputs returns {_plural(n, 'input')}, but Model.forward "
                        f"(line {fwd.lineno}) takes {takes} before fn: kbench calls model(*get_inputs(...), fn=...). "
                        "Parameters (weights) belong to Model, inputs to get_inputs; the [forward] signature lists "
                        f"both, in the order Model.forward passes them to fn ({DOC}).")
