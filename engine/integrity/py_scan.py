"""Static rules for KernelBench `ModelNew` files, read with Python's `ast`; the C++/CUDA sources in their
string literals (load_inline) go through the C++ rules (engine.integrity.cpp.scan)."""

from __future__ import annotations

import ast
import re
from typing import Any, Iterable

from engine.integrity.cpp.scan import scan_cpp_source
from engine.integrity.cpp.vocab import COMPUTE_METHODS
from engine.integrity.findings import (
    ATEN_FALLBACK,
    FAIL,
    HOST_THREAD,
    LOWER_PRECISION,
    MONKEY_PATCH,
    REFERENCE_IMPORT,
    SIDE_STREAM,
    SUSPICIOUS,
    SYNTAX,
    TORCH_COMPUTE,
    TRY_CATCH,
    Finding,
    fallback_status,
    library_use_status,
)

_PATCHABLE_ROOTS = ("torch", "time", "timeit", "triton", "numpy", "builtins", "gc", "engine", "kbench")
_PY_COMPUTE_ALLOWED = {"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
                       "tensor", "as_tensor", "arange", "empty_strided", "device", "dtype", "no_grad",
                       "manual_seed", "Size", "is_tensor", "Generator", "get_default_dtype", "is_grad_enabled",
                       "synchronize", "current_device", "is_available", "current_stream", "load_inline", "load",
                       "Parameter", "Module", "ModuleList", "ParameterList", "init", "register_buffer",
                       "contiguous", "view", "reshape", "size", "dim", "numel", "is_contiguous", "data_ptr",
                       "get_device", "set_grad_enabled", "inference_mode", "enable_grad"}
_PY_MODULE_LAYERS = {"Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "LayerNorm", "BatchNorm1d",
                     "BatchNorm2d", "GroupNorm", "RMSNorm", "Softmax", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh",
                     "MaxPool2d", "AvgPool2d", "MultiheadAttention", "Embedding", "LSTM", "GRU", "Dropout",
                     "CrossEntropyLoss", "Sequential", "Bilinear"}
_LOW_DTYPES = ("torch.float16", "torch.half", "torch.bfloat16", "torch.float8_e4m3fn", "torch.float8_e5m2")
_DTYPE_SINKS = {"to", "type", "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
                "full_like", "tensor", "as_tensor", "arange", "rand", "randn", "autocast"}
_EMBEDDED_CPP = re.compile(r"__global__|#\s*include|torch::|PYBIND11_MODULE|<<<")


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def import_aliases(tree: ast.AST) -> dict[str, str]:
    """Each name the file's imports bind, to the dotted name it stands for (`np` -> `numpy`, `F` ->
    `torch.nn.functional`, `import torch.cuda` -> `torch`)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def expand(aliases: dict[str, str], dotted: str) -> str:
    """`dotted` with its first name replaced by what the imports bound it to."""
    head, _, rest = dotted.partition(".")
    full = aliases.get(head, head)
    return full + ("." + rest if rest else "")


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    out: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def scan_python_source(name: str, raw: str, *, task_dtype: str = "float32", shape_values: Iterable[int] = (),
                       reference_modules: Iterable[str] = (), policy: str = "pure") -> tuple[list[Finding], bool]:
    """Findings for a ModelNew file, and whether it builds a kernel of its own (load_inline / a __global__)."""
    found: list[Finding] = []
    try:
        tree = ast.parse(raw)
    except SyntaxError as exc:
        return [Finding(SYNTAX, FAIL, name, exc.lineno or 0, f"not valid Python: {exc.msg}")], False
    lines = raw.splitlines()
    parent = _parents(tree)

    def add(hack: str, status: str, node: ast.AST, reason: str, confidence: float = 1.0, library: str = "") -> None:
        line = getattr(node, "lineno", 0)
        snippet = lines[line - 1].strip()[:160] if 0 < line <= len(lines) else ""
        found.append(Finding(hack, status, name, line, reason, snippet, confidence, library))

    aliases = import_aliases(tree)
    refs = set(reference_modules)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                root = a.name.split(".")[0]
                if root in refs or root in ("reference", "engine", "kbench"):
                    add(REFERENCE_IMPORT, FAIL, node, f"imports {a.name}: the reference (or the evaluator) "
                        "inside the candidate")
                if root in ("threading", "concurrent", "multiprocessing"):
                    add(HOST_THREAD, FAIL, node, f"imports {a.name}: work on a host thread escapes the timing")
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            if root in refs or root in ("reference", "engine", "kbench"):
                add(REFERENCE_IMPORT, FAIL, node, f"imports from {node.module}: the reference (or the "
                    "evaluator) inside the candidate")
            if root in ("threading", "concurrent", "multiprocessing"):
                add(HOST_THREAD, FAIL, node, f"imports from {node.module}: host threads")

    def resolve(dotted: str | None) -> str | None:
        return expand(aliases, dotted) if dotted else None

    def patch_target(node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute):
            full = resolve(_dotted(node))
            if full and full.split(".")[0] in _PATCHABLE_ROOTS:
                return full
        return None

    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                full = patch_target(sub) if isinstance(sub, ast.Attribute) else None
                if full and (sub is t or isinstance(t, ast.Tuple)):
                    add(MONKEY_PATCH, FAIL, node, f"assigns to {full}: monkey-patching torch, its timers/events "
                        "or the time module changes what the evaluator measures or compares")
                    break
        if isinstance(node, ast.Call):
            fn = resolve(_dotted(node.func))
            if fn in ("setattr", "builtins.setattr", "object.__setattr__", "delattr") and node.args:
                obj = resolve(_dotted(node.args[0])) if not isinstance(node.args[0], ast.Constant) else None
                if obj and obj.split(".")[0] in _PATCHABLE_ROOTS:
                    add(MONKEY_PATCH, FAIL, node, f"{fn}() on {obj}: monkey-patching a module the evaluator uses")
            if fn and fn.split(".")[0] == "unittest" and "mock" in fn:
                add(MONKEY_PATCH, FAIL, node, f"{fn}: mocking inside the candidate")
            if fn in ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream"):
                add(SIDE_STREAM, FAIL, node, f"{fn}: work on a side stream escapes the timing events")
            if fn and re.match(r"torch\.(backends\.\w+\.allow_tf32|set_float32_matmul_precision)", fn):
                add(LOWER_PRECISION, FAIL, node, f"{fn}: lowers matmul precision")

    # Names bound to compiled extensions (load_inline/load results, non-torch imports): their functions are
    # the candidate's own kernels, whatever they are called.
    ext_names = {a for a, full in aliases.items() if not full.startswith("torch")}
    own_kernel = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            callee = resolve(_dotted(node.value.func)) or ""
            if callee.split(".")[-1] in ("load_inline", "load"):
                own_kernel = True
                ext_names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in ext_names:
            ext_names.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))

    def is_ext(recv: ast.AST) -> bool:
        return (isinstance(recv, ast.Name) and recv.id in ext_names) or (
            isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name) and recv.value.id == "self"
            and recv.attr in ext_names)

    def calls_ext(fn: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and is_ext(n.func.value)
                   for n in ast.walk(fn))

    def on_branch(node: ast.AST, stop: ast.AST) -> bool:
        n, child = parent.get(id(node)), node
        while n is not None and n is not stop:
            if isinstance(n, (ast.If, ast.IfExp)) and child is not n.test:
                return True
            if isinstance(n, ast.ExceptHandler):
                return True
            n, child = parent.get(id(n)), n
        return False

    def compute(node: ast.AST, fn: ast.FunctionDef, what: str) -> None:
        if calls_ext(fn) and on_branch(node, fn):
            add(ATEN_FALLBACK, fallback_status(policy), node, f"{what} in ModelNew.{fn.name} on a branch beside the "
                "candidate's own kernel: a fallback to ATen for inputs the kernel does not handle", 0.9, "ATen")
            return
        status = library_use_status(policy)
        add(TORCH_COMPUTE, status, node, f"{what} in ModelNew.{fn.name}: a torch compute op" +
            ("" if status == FAIL else " (allowed by the engineering policy)"), 0.95, "ATen")

    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"):
        layers: set[str] = set()
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                callee = resolve(_dotted(node.value.func)) or ""
                if callee.split(".")[-1] in _PY_MODULE_LAYERS and callee.startswith("torch"):
                    for t in node.targets:
                        if isinstance(t, ast.Attribute):
                            layers.add(t.attr)
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name != "__init__"):
            for node in ast.walk(fn):
                if isinstance(node, ast.Try):
                    _try_rule(node, fn, add, policy)
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    compute(node, fn, "the @ operator")
                if not isinstance(node, ast.Call):
                    continue
                callee = resolve(_dotted(node.func)) or ""
                last = callee.split(".")[-1] if callee else (
                    node.func.attr if isinstance(node.func, ast.Attribute) else "")
                if callee.startswith("torch") and last not in _PY_COMPUTE_ALLOWED and last[:1].islower() and \
                        not callee.startswith(("torch.cuda.", "torch.utils.", "torch.backends.")):
                    compute(node, fn, f"calls {callee}")
                elif isinstance(node.func, ast.Attribute) and not callee.startswith("torch") and \
                        last in COMPUTE_METHODS and not is_ext(node.func.value):
                    compute(node, fn, f"tensor method .{last}()")
                elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and \
                        node.func.value.id == "self" and node.func.attr in layers:
                    compute(node, fn, f"the torch layer self.{node.func.attr}")
                if task_dtype == "float32" and last in ("half", "bfloat16") and isinstance(node.func, ast.Attribute):
                    add(LOWER_PRECISION, FAIL, node, f".{last}() in a float32 task")
    if task_dtype == "float32":
        for node in ast.walk(tree):
            full = resolve(_dotted(node)) if isinstance(node, ast.Attribute) else None
            if full in _LOW_DTYPES and _dtype_sink(node, parent, resolve):
                add(LOWER_PRECISION, FAIL, node, f"{full} as a dtype for a conversion or allocation in a float32 "
                    "task")
    # Embedded C++/CUDA sources (load_inline strings).
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _EMBEDDED_CPP.search(node.value):
            sub, facts = scan_cpp_source(f"{name} (string at line {node.lineno})", node.value,
                                         task_dtype=task_dtype, shape_values=shape_values, policy=policy)
            found += sub
            own_kernel |= facts.has_kernel
    return found, own_kernel


def _dtype_sink(node: ast.AST, parent: dict[int, ast.AST], resolve: Any) -> bool:
    """A low dtype is a use as an argument (positional or dtype=) of .to()/.type()/an allocation."""
    p = parent.get(id(node))
    if isinstance(p, ast.keyword):
        p = parent.get(id(p))
    if not isinstance(p, ast.Call):
        return False
    callee = resolve(_dotted(p.func)) or (p.func.attr if isinstance(p.func, ast.Attribute) else "")
    return callee.split(".")[-1] in _DTYPE_SINKS


def _try_rule(node: ast.Try, fn: ast.FunctionDef, add: Any, policy: str) -> None:
    for h in node.handlers:
        raises = any(isinstance(n, ast.Raise) for n in ast.walk(h))
        returns = any(isinstance(n, ast.Return) for n in ast.walk(h))
        if raises and not returns:
            continue
        if returns or any(isinstance(n, ast.Call) for n in ast.walk(h)):
            add(TRY_CATCH, fallback_status(policy), h, f"try/except in ModelNew.{fn.name} whose handler returns or "
                "computes a result: a fallback path can hide a failing kernel", 0.9)
        else:
            add(TRY_CATCH, SUSPICIOUS, h, f"try/except in ModelNew.{fn.name} swallows an error", 0.5)
