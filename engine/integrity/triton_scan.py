"""Static rules for Triton candidates (kernel.py, engine/tasks/glue/triton.py), read with Python's `ast`.

The candidate's work is its @triton.jit kernels; the launcher around them (kb_forward / kb_backward and the helpers
it calls) only sizes grids and launches. So:
- torch-compute: a torch op that computes (torch.*, torch.nn.functional.*, a tensor method such as .sum(), the @
  operator) anywhere outside a @triton.jit function is the reference's work done by ATen, rated by the library
  policy (`fail` under pure); on a branch beside a kernel launch it is an aten-fallback;
- lower-precision: inside a kernel, a cast (`.to(tl.float16)`, `tl.cast(x, tl.bfloat16)`, fp8) below the task's
  dtype is `fail`; `tl.dot` on a float32 task with `input_precision="tf32"`/`"tf32x3"` or `allow_tf32=True` is
  `fail`, and without `input_precision` (Triton then uses TF32 for float32 inputs) `suspicious`;
- static-cache: results kept across calls: a module-level container written from a function with a key or value
  that names a tensor argument, `id()` or `.data_ptr()`, a `global` rebound to one, or functools' lru_cache /
  cache on a function that takes tensors, is `fail` (the judge gives every call fresh inputs, and a replayed result
  fails a checked iteration anyway; this says why before GPU time is spent);
- no-own-kernel: a kernel.py without any @triton.jit function is `suspicious`;
- and the Python rules every candidate file gets (engine/integrity/py_scan.py): reference imports, host threads,
  monkey-patching, side streams, TF32 switches, torch low-precision dtypes, and try/except fallbacks (here in the
  launcher).
"""

from __future__ import annotations

import ast
from typing import Iterable

from engine.integrity.cpp.vocab import COMPUTE_METHODS, NON_TENSOR_METHODS, TORCH_COMPUTE_FUNCS
from engine.integrity.findings import (ATEN_FALLBACK, FAIL, LOWER_PRECISION, NO_OWN_KERNEL, STATIC_CACHE, SUSPICIOUS,
                                       TORCH_COMPUTE, Finding, fallback_status, library_use_status)
from engine.integrity.py_scan import _dotted, _parents, _try_rule, expand, import_aliases, scan_python_source

_JIT = ("triton.jit", "triton.autotune", "triton.heuristics", "triton.language.jit")
# dtype rank: a cast to a lower rank than the task's dtype loses precision
_RANK = {"float64": 4, "float32": 3, "float16": 2, "bfloat16": 2, "float8e4nv": 1, "float8e5": 1, "float8e4b15": 1,
         "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8e4nv": 1, "fp8e5": 1}
_TASK_RANK = {"float64": 4, "float32": 3, "float16": 2, "bfloat16": 2}
_TF32 = ("tf32", "tf32x3")
_CACHE_DECORATORS = ("functools.lru_cache", "functools.cache", "lru_cache", "cache")
_MUTATORS = ("setdefault", "update", "append", "extend", "add", "insert", "__setitem__")


def _resolver(tree: ast.Module):
    aliases = import_aliases(tree)

    def resolve(node: ast.AST) -> str:
        dotted = _dotted(node.func if isinstance(node, ast.Call) else node)
        return expand(aliases, dotted) if dotted else ""
    return resolve


def scan_triton_source(name: str, raw: str, *, task_dtype: str = "float32", shape_values: Iterable[int] = (),
                       reference_modules: Iterable[str] = (), policy: str = "pure",
                       tensor_args: Iterable[str] = ()) -> tuple[list[Finding], bool]:
    """Findings for a Triton kernel.py, and whether it has a @triton.jit kernel of its own. `tensor_args`: the
    launcher's tensor parameters (inputs and outputs), from the task's signature."""
    found, _ = scan_python_source(name, raw, task_dtype=task_dtype, shape_values=shape_values,
                                  reference_modules=reference_modules, policy=policy)
    try:
        tree = ast.parse(raw)
    except SyntaxError:
        return found, False
    lines = raw.splitlines()
    parent = _parents(tree)
    resolve = _resolver(tree)

    def add(hack: str, status: str, node: ast.AST, reason: str, confidence: float = 1.0, library: str = "") -> None:
        line = getattr(node, "lineno", 0)
        snippet = lines[line - 1].strip()[:160] if 0 < line <= len(lines) else ""
        found.append(Finding(hack, status, name, line, reason, snippet, confidence, library))

    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    jit = [f for f in functions if any(resolve(d).startswith(_JIT) for d in f.decorator_list)]
    jit_names = {f.name for f in jit}
    host = [f for f in functions if f not in jit and not _inside(f, jit, parent)]
    jit_ids = {id(n) for f in jit for n in ast.walk(f)}

    # -- torch compute outside the kernels -------------------------------------------------------------------
    def launches(fn: ast.AST) -> bool:
        return any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in jit_names
                   for n in ast.walk(fn))

    def on_branch(node: ast.AST, stop: ast.AST) -> bool:
        n, child = parent.get(id(node)), node
        while n is not None and n is not stop:
            if isinstance(n, (ast.If, ast.IfExp)) and child is not n.test or isinstance(n, ast.ExceptHandler):
                return True
            n, child = parent.get(id(n)), n
        return False

    tensors = set(tensor_args)          # what the cache rule counts as the inputs and outputs
    receivers = set(tensors)            # whose methods compute: any argument of a host function
    for fn in host:
        receivers.update(a.arg for a in fn.args.args)
    if not tensors:                     # no task to say which arguments are tensors: those used as tensors are
        tensors = _used_as_tensors(host, receivers, resolve)

    def compute(node: ast.AST, what: str) -> None:
        fn = _enclosing(node, host, parent)
        where = f"{fn.name}" if fn is not None else "module level"
        if fn is not None and launches(fn) and on_branch(node, fn):
            add(ATEN_FALLBACK, fallback_status(policy), node, f"{what} in {where} on a branch beside a Triton launch: "
                "a fallback to ATen for inputs the kernel does not handle", 0.9, "ATen")
            return
        status = library_use_status(policy)
        add(TORCH_COMPUTE, status, node, f"{what} in {where}, outside the @triton.jit kernels: the reference's work "
            "done by ATen" + ("" if status == FAIL else " (allowed by the engineering policy)"), 0.95, "ATen")

    for node in ast.walk(tree):
        if id(node) in jit_ids:
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            compute(node, "the @ operator")
        if not isinstance(node, ast.Call):
            continue
        callee = resolve(node)
        last = callee.split(".")[-1] if callee else (node.func.attr if isinstance(node.func, ast.Attribute) else "")
        if callee.startswith("torch.") and (last in TORCH_COMPUTE_FUNCS or callee.startswith("torch.nn.functional.")
                                             or callee.startswith("torch.linalg.")):
            compute(node, f"calls {callee}")
        elif isinstance(node.func, ast.Attribute) and last in COMPUTE_METHODS and _is_tensor(node.func.value, receivers):
            compute(node, f"tensor method .{last}()")
        if isinstance(node.func, ast.Attribute) and last in ("half", "bfloat16") and task_dtype == "float32" and \
                _is_tensor(node.func.value, receivers):
            add(LOWER_PRECISION, FAIL, node, f".{last}() in a float32 task")
    for fn in host:
        for node in ast.walk(fn):
            if isinstance(node, ast.Try):
                _try_rule(node, fn, add, policy)

    # -- precision inside the kernels ------------------------------------------------------------------------
    task_rank = _TASK_RANK.get(task_dtype, 3)
    for fn in jit:
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            callee = resolve(node)
            last = callee.split(".")[-1] if callee else (node.func.attr if isinstance(node.func, ast.Attribute) else "")
            targets: list[ast.AST] = [k.value for k in node.keywords if k.arg in ("dtype", "out_dtype")]
            if callee.endswith("language.cast"):
                targets += node.args[1:2]
            elif last == "to" and isinstance(node.func, ast.Attribute):
                targets += node.args[:1]
            for t in targets:
                dt = _tl_dtype(resolve(t))
                if dt and _RANK.get(dt, 9) < task_rank:
                    add(LOWER_PRECISION, FAIL, node, f"casts to {dt} in kernel {fn.name}, below the task's "
                        f"{task_dtype}: the result is computed at lower precision")
            if last == "dot" and task_dtype == "float32":
                kw = {k.arg: k.value for k in node.keywords}
                prec = kw.get("input_precision")
                tf32 = kw.get("allow_tf32")
                if isinstance(prec, ast.Constant) and prec.value in _TF32 or \
                        isinstance(tf32, ast.Constant) and tf32.value is True:
                    add(LOWER_PRECISION, FAIL, node, f"tl.dot in kernel {fn.name} asks for TF32 in a float32 task")
                elif prec is None and tf32 is None:
                    add(LOWER_PRECISION, SUSPICIOUS, node, f"tl.dot in kernel {fn.name} without input_precision: "
                        "Triton multiplies float32 inputs in TF32 by default (input_precision=\"ieee\" keeps float32)",
                        0.7)

    # -- results cached across calls ----------------------------------------------------------------------
    _cache_rules(tree, host, tensors, resolve, add)
    if not jit:
        add(NO_OWN_KERNEL, SUSPICIOUS, tree.body[0] if tree.body else tree, "no @triton.jit function: the candidate "
            "has no Triton kernel of its own", 0.8)
    return found, bool(jit)


def _used_as_tensors(host: list[ast.AST], names: set[str], resolve) -> set[str]:
    """Arguments a host function uses as tensors: an attribute read off them (x.shape, y.copy_) or passed to a
    torch function (torch.empty_like(x)); an int is used neither way."""
    out: set[str] = set()
    for fn in host:
        for n in ast.walk(fn):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in names:
                out.add(n.value.id)
            elif isinstance(n, ast.Call) and resolve(n).startswith("torch."):
                out.update(a.id for a in n.args if isinstance(a, ast.Name) and a.id in names)
    return out


def _inside(node: ast.AST, outers: list[ast.AST], parent: dict[int, ast.AST]) -> bool:
    ids = {id(o) for o in outers}
    n = parent.get(id(node))
    while n is not None:
        if id(n) in ids:
            return True
        n = parent.get(id(n))
    return False


def _enclosing(node: ast.AST, fns: list[ast.AST], parent: dict[int, ast.AST]) -> ast.FunctionDef | None:
    ids = {id(f): f for f in fns}
    n = parent.get(id(node))
    while n is not None:
        if id(n) in ids:
            return ids[id(n)]
        n = parent.get(id(n))
    return None


def _is_tensor(node: ast.AST, tensors: set[str]) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return isinstance(node, ast.Name) and node.id in tensors


def _tl_dtype(full: str) -> str:
    """`triton.language.float16` -> float16; `torch.bfloat16` too (a torch dtype passed to .to())."""
    if not full:
        return ""
    head, _, last = full.rpartition(".")
    if head in ("triton.language", "torch", "tl") and last in _RANK:
        return last
    return {"half": "float16"}.get(last, "") if head == "torch" else ""


_METADATA = NON_TENSOR_METHODS | {"shape", "ndim", "is_contiguous"}


def _bare_tensors(node: ast.AST, tensors: set[str]) -> set[str]:
    """The tensors an expression uses as such: `x`, not `x.shape[-1]` or `x.dtype` (a key on a tensor's shape,
    dtype or device is a cache of configurations, not of results)."""
    parent = _parents(node)
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in tensors:
            up = parent.get(id(n))
            if not (isinstance(up, ast.Attribute) and up.attr in _METADATA):
                out.add(n.id)
    return out


def _identity(node: ast.AST) -> bool:
    """The expression asks for an object's identity or address: id(x), x.data_ptr()."""
    return any(isinstance(n, ast.Call) and (isinstance(n.func, ast.Name) and n.func.id == "id" or
                                            isinstance(n.func, ast.Attribute) and n.func.attr == "data_ptr")
               for n in ast.walk(node))


def _cache_rules(tree: ast.Module, host: list[ast.AST], tensors: set[str], resolve, add) -> None:
    module_containers = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                         for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                         if isinstance(t, ast.Name) and isinstance(n.value, (ast.Dict, ast.List, ast.Set, ast.Call))}

    def keyed_on_inputs(*exprs: ast.AST) -> bool:
        return any(_identity(e) or _bare_tensors(e, tensors) for e in exprs if e is not None)

    for fn in host:
        if isinstance(fn, ast.FunctionDef):
            for d in fn.decorator_list:
                if resolve(d).endswith(_CACHE_DECORATORS) and {a.arg for a in fn.args.args} & tensors:
                    add(STATIC_CACHE, FAIL, fn, f"{resolve(d)} on {fn.name}, which takes tensors: results kept across "
                        "calls and replayed for inputs it has seen")
        declared_global = {n for g in ast.walk(fn) if isinstance(g, ast.Global) for n in g.names}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and \
                            t.value.id in module_containers and keyed_on_inputs(t.slice, node.value):
                        add(STATIC_CACHE, FAIL, node, f"stores into module-level {t.value.id} with a key or value "
                            "taken from the inputs: results kept across calls")
                    if isinstance(t, ast.Name) and t.id in declared_global and keyed_on_inputs(node.value):
                        add(STATIC_CACHE, FAIL, node, f"rebinds the global {t.id} to an input or output: a result kept "
                            "across calls")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name) and node.func.value.id in module_containers and \
                    node.func.attr in _MUTATORS and keyed_on_inputs(*node.args):
                add(STATIC_CACHE, FAIL, node, f"{node.func.value.id}.{node.func.attr}() with inputs or their "
                    "addresses: results kept across calls")
