"""The generated glue of kernel-only candidates: a task direction's signature as a launcher ABI and a binding.cpp.

A kernel-only candidate is a `kernel.cu` (plus any `.cuh`/`.h` it includes) with no `binding.cpp`: it defines one
launcher per direction, `kb_forward` / `kb_backward`, whose parameters the signature fixes (docs/formats.md,
"Kernel-only candidates"). For

    forward(x: f32[B,S,H], w: f32[H], eps: float) -> y: f32[B,S,H]

the launcher is

    void kb_forward(const float* x, const float* w, double eps, float* y, int64_t B, int64_t S, int64_t H,
                    cudaStream_t stream);

Convention: the inputs in signature order (a tensor as a const pointer to its contiguous data, nullptr for an
optional tensor passed as None; `float` as double, `int` as int64_t, `bool` as bool), then one pointer per output
(freshly allocated, contiguous, uninitialised), then every named dimension once (int64_t, in the order the required
input tensors first name them), then the stream. C++ linkage, not `extern "C"`: the parameter types are part of
the symbol, so a definition that differs from the declaration fails at the link, with the link check's message,
instead of running with misread arguments.

The binding (`binding_text`) checks every tensor (CUDA, one device, dtype, rank, every dimension against the value
the signature's names take), makes contiguous copies, allocates the outputs from the named dimensions, calls the
launcher on the current stream under a device guard, checks the launch (C10_CUDA_KERNEL_LAUNCH_CHECK) and exports
the direction's function with the signature's arguments. Its text depends on the signature alone (for a backward,
with the forward's annotations it refers to), never on the task's name or the candidate: every kernel-only candidate
of a task shares one binding.o in the object cache (engine/harness/object_cache.py), so after the first it costs an
nvcc run and a link.

`materialise` turns a kernel-only candidate into an ordinary native one with the generated binding.cpp, where task
and candidate meet (evaluate, `kbench eval`, the proposers): the workspace keeps both files, and a person may edit
the binding later like any other. A signature the ABI cannot express (a tensor without a shape, a tuple argument,
an output dimension no input names) raises GlueError naming the reason; the kernel-only form is then refused for
that direction.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from pathlib import Path

from engine.candidates import Candidate, load_candidate
from engine.errors import TaskError
from engine.tasks.model import Task
from engine.tasks.signature import (SignatureError, parse_signature, split_optional, split_returns,
                                    tensor_annotation)

GLUE_VERSION = 1   # in the binding's first line: a change to the generated text is a new binding.o anyway


class GlueError(TaskError):
    """A task direction whose signature the kernel-only form cannot express."""


# signature dtype -> (C type of the launcher's pointer, at::ScalarType, the element type data_ptr<> takes, header)
DTYPES: dict[str, tuple[str, str, str, str | None]] = {
    "f32": ("float", "at::kFloat", "float", None),
    "f64": ("double", "at::kDouble", "double", None),
    "f16": ("__half", "at::kHalf", "at::Half", "cuda_fp16.h"),
    "bf16": ("__nv_bfloat16", "at::kBFloat16", "at::BFloat16", "cuda_bf16.h"),
    "i64": ("int64_t", "at::kLong", "int64_t", None),
    "i32": ("int32_t", "at::kInt", "int32_t", None),
    "i16": ("int16_t", "at::kShort", "int16_t", None),
    "i8": ("int8_t", "at::kChar", "int8_t", None),
    "u8": ("uint8_t", "at::kByte", "uint8_t", None),
    "bool": ("bool", "at::kBool", "bool", None),
}
SCALARS = {"float": "double", "int": "int64_t", "bool": "bool"}
LAUNCHER_PREFIX = "kb_"

_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_CPP_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class compl
    concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype default
    delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline int long
    mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
    reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template this
    thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
    xor_eq
    at c10 torch std py pybind11 m int64_t int32_t int16_t int8_t uint8_t size_t cudaStream_t __half __nv_bfloat16
    stream forward backward
""".split())


@dataclass(frozen=True)
class GlueParam:
    """One argument or output of the launcher."""
    name: str                     # as the signature names it (and Python passes it by)
    cname: str                    # its C++ identifier in the launcher and the binding
    kind: str                     # "tensor", "float", "int", "bool"
    annotation: str               # the (resolved) annotation, e.g. "f32[B,S,H]"
    dtype: str | None = None      # tensors: "f32", ...
    dims: tuple[str, ...] = ()    # tensors: as written
    optional: bool = False        # tensors only: may be None

    @property
    def c_type(self) -> str:
        return DTYPES[self.dtype][0] if self.kind == "tensor" else SCALARS[self.kind]


@dataclass(frozen=True)
class LauncherAbi:
    """A task direction's launcher: what kernel.cu defines and what the generated binding calls."""
    direction: str
    signature: str                           # the direction's signature, as task.toml writes it
    launcher: str                            # "kb_forward"
    inputs: tuple[GlueParam, ...]
    outputs: tuple[GlueParam, ...]
    dims: tuple[tuple[str, str], ...]        # (name in the signature, C++ identifier), in launcher order
    returns_list: bool                       # a std::vector of tensors (a backward, or several outputs)
    # dimension name -> (input position, axis) it is read from
    dim_source: tuple[tuple[str, int, int], ...] = ()
    resolved: tuple[tuple[str, str], ...] = ()   # backward: unannotated argument -> the forward's annotation

    @property
    def headers(self) -> tuple[str, ...]:
        found = {DTYPES[p.dtype][3] for p in (*self.inputs, *self.outputs) if p.kind == "tensor"}
        return tuple(sorted(h for h in found if h))

    def declaration(self) -> str:
        params = [f"const {p.c_type}* {p.cname}" if p.kind == "tensor" else f"{p.c_type} {p.cname}" for p in self.inputs]
        params += [f"{p.c_type}* {p.cname}" for p in self.outputs]
        params += [f"int64_t {c}" for _, c in self.dims]
        params.append("cudaStream_t stream")
        return _wrap(f"void {self.launcher}(", params, ");")

    def header(self, task_name: str = "") -> str:
        return header_text(self, task_name)

    def binding(self) -> str:
        return binding_text(self)


# ------------------------------------------------------------------------------------------------ the ABI
def launcher_abi(task: Task, direction: str) -> LauncherAbi:
    """The launcher ABI of `task`'s `direction`; GlueError when its signature cannot be expressed."""
    spec = task.spec(direction)
    forward = task.directions.get("forward")
    return abi_from_signature(spec.signature, direction,
                              forward.signature if forward is not None and direction != "forward" else None)


def abi_from_signature(signature: str, direction: str, forward_signature: str | None = None) -> LauncherAbi:
    """The ABI of one signature. A backward's unannotated arguments take the annotation of the forward argument of
    the same name (`forward_signature`)."""
    try:
        _, params, ret = parse_signature(signature)
    except SignatureError as exc:
        raise GlueError(str(exc)) from None
    if not _IDENT.match(direction):
        raise GlueError(f"direction {direction!r} is not a C++ identifier")
    fwd_annots: dict[str, str] = {}
    if forward_signature is not None:
        try:
            fwd_annots = {n: a for n, a in parse_signature(forward_signature)[1] if a}
        except SignatureError:
            fwd_annots = {}
    names = _Names()
    inputs: list[GlueParam] = []
    resolved: list[tuple[str, str]] = []
    for name, annot in params:
        if not _IDENT.match(name):
            raise GlueError(f"argument {name!r} of {signature!r} is not a plain name")
        if not annot:
            if name not in fwd_annots:
                where = "the forward signature has no argument of that name" if forward_signature else \
                    "an unannotated argument"
                raise GlueError(f"argument `{name}` of {signature!r} has no annotation ({where}): the glue needs "
                                "its type, e.g. `f32[B,N]`, `float`, `int` or `bool`")
            annot = fwd_annots[name]
            resolved.append((name, annot))
        inputs.append(_param(name, annot, signature, names))
    if not any(p.kind == "tensor" and not p.optional for p in inputs):
        raise GlueError(f"{signature!r} takes no required tensor: the glue needs one to say where the outputs live")
    if not ret:
        raise GlueError(f"{signature!r} declares no output (`-> y: f32[...]`): the glue allocates the outputs "
                        "from their annotated shapes")
    outputs: list[GlueParam] = []
    for i, (name, annot) in enumerate(split_returns(ret)):
        oname = name or (f"out{i}" if len(split_returns(ret)) > 1 else "out")
        if not annot:
            raise GlueError(f"output `{oname}` of {signature!r} has no annotation: the glue allocates each output "
                            "from a shaped annotation such as `f32[B,N]`")
        p = _param(oname, annot, signature, names, output=True)
        outputs.append(p)

    # dimensions: each name is read off the first required input tensor that names it as a whole dimension, unless
    # it is an int argument's name: then the argument gives its value and the tensors are checked against it
    int_scalars = {p.name for p in inputs if p.kind == "int"}
    dim_order: list[str] = []
    source: dict[str, tuple[int, int]] = {}
    for i, p in enumerate(inputs):
        if p.kind != "tensor" or p.optional:
            continue
        for axis, d in enumerate(p.dims):
            if _IDENT.match(d) and d not in source and d not in int_scalars:
                source[d] = (i, axis)
                dim_order.append(d)
    for p in (*inputs, *outputs):
        if p.kind != "tensor":
            continue
        for d in p.dims:
            for n in _dim_names(d, p, signature):
                if n in source:
                    continue
                if n in int_scalars:
                    continue      # an int argument's value: `f32[k]`, `(H+2*padding-K)//stride+1`
                where = "an output" if p in outputs else ("an optional input" if p.optional else "an input")
                named = ("it appears only inside expressions" if any(n in _dim_names(x, q, signature) for q in inputs
                                                                     if q.kind == "tensor" for x in q.dims)
                         else "no input tensor has it as a dimension")
                hint = (" (an output dimension must be a dimension of a required input tensor, an int argument, or "
                        "an integer expression over them such as `(H+2*padding-K)//stride+1`)") if p in outputs else ""
                raise GlueError(f"dimension `{n}` of {where} `{p.name}: {p.annotation}` cannot be read off the "
                                f"required input tensors ({named}), so the glue cannot "
                                f"{'allocate' if p in outputs else 'check'} it{hint}")
    dims = tuple((d, names.take(d)) for d in dim_order)
    returns_list = direction == "backward" or len(outputs) > 1
    return LauncherAbi(direction=direction, signature=signature, launcher=f"{LAUNCHER_PREFIX}{direction}",
                       inputs=tuple(inputs), outputs=tuple(outputs), dims=dims, returns_list=returns_list,
                       dim_source=tuple((d, *source[d]) for d in dim_order), resolved=tuple(resolved))


def _param(name: str, annot: str, signature: str, names: "_Names", output: bool = False) -> GlueParam:
    base, optional = split_optional(annot)
    what = "output" if output else "argument"
    if base in SCALARS:
        if output:
            raise GlueError(f"output `{name}: {annot}` of {signature!r} is a scalar: the glue returns tensors "
                            "(write it as a 0-dim tensor, `f32[]`)")
        if optional:
            raise GlueError(f"argument `{name}: {annot}` of {signature!r} is an optional scalar, which the launcher "
                            "ABI has no way to pass")
        return GlueParam(name, names.take(name), base, annot)
    t = tensor_annotation(base)
    if t is None:
        if base in ("Tensor", "torch.Tensor", "torch.nn.Parameter", "nn.Parameter"):
            why = "a tensor without dtype and shape: the glue needs them, e.g. `f32[B,N]`"
        elif re.match(r"^(?:typing\.)?(tuple|Tuple|list|List|Sequence)\b", base):
            why = "a tuple or list, which the launcher ABI has no way to pass"
        else:
            why = "a type the launcher ABI has no way to pass (tensors `f32[B,N]`, float, int and bool only)"
        raise GlueError(f"{what} `{name}: {annot}` of {signature!r} is {why}")
    if t.dtype not in DTYPES:
        raise GlueError(f"{what} `{name}: {annot}` of {signature!r} has dtype {t.dtype}; the glue knows "
                        f"{', '.join(DTYPES)}")
    if output and optional:
        raise GlueError(f"output `{name}: {annot}` of {signature!r} is optional; the glue allocates every output")
    for d in t.dims:
        if not d:
            raise GlueError(f"{what} `{name}: {annot}` of {signature!r} has an empty dimension")
    return GlueParam(name, names.take(name), "tensor", base, t.dtype, t.dims, optional)


class _Names:
    """C++ identifiers, one per name, none a keyword or another's (a clash gets `_` appended)."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def take(self, name: str) -> str:
        c = name
        while c in _CPP_KEYWORDS or c in self.used or c.startswith(LAUNCHER_PREFIX) or c.startswith("__"):
            c = f"{c}_" if not c.startswith(("kb_", "__")) else f"a{c}"
        self.used.add(c)
        return c


# ------------------------------------------------------------------------------------- dimension expressions
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}


def _dim_names(dim: str, p: GlueParam, signature: str) -> list[str]:
    """The names a dimension uses (itself for a plain name; none for an integer)."""
    if _IDENT.match(dim):
        return [dim]
    tree = _parse_dim(dim, p, signature)
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})


def _parse_dim(dim: str, p: GlueParam, signature: str) -> ast.expr:
    try:
        tree = ast.parse(dim, mode="eval").body
    except SyntaxError:
        tree = None
    ok = tree is not None and all(
        isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod,
                       ast.USub, ast.UAdd))
        or (isinstance(n, ast.Constant) and type(n.value) is int)
        for n in ast.walk(tree))
    if not ok:
        raise GlueError(f"dimension `{dim}` of `{p.name}: {p.annotation}` in {signature!r} is not an integer "
                        "expression of names and numbers with + - * // % (and parentheses)")
    return tree


def cpp_dim(dim: str, values: dict[str, str], p: GlueParam | None = None, signature: str = "") -> str:
    """A dimension as C++: names become their C++ identifiers (`values`), // and % Python's floor semantics."""
    if re.fullmatch(r"\d+", dim):
        return dim
    if _IDENT.match(dim):
        return values[dim]
    tree = _parse_dim(dim, p or GlueParam("?", "?", "tensor", dim), signature)

    def emit(n: ast.expr, top: bool = False) -> str:
        if isinstance(n, ast.Constant):
            return str(n.value)
        if isinstance(n, ast.Name):
            return values[n.id]
        if isinstance(n, ast.UnaryOp):
            return f"{'-' if isinstance(n.op, ast.USub) else '+'}{emit(n.operand)}"
        assert isinstance(n, ast.BinOp)
        if isinstance(n.op, ast.FloorDiv):
            return f"kb_floordiv({emit(n.left, True)}, {emit(n.right, True)})"
        if isinstance(n.op, ast.Mod):
            return f"kb_mod({emit(n.left, True)}, {emit(n.right, True)})"
        text = f"{emit(n.left)} {_OPS[type(n.op)]} {emit(n.right)}"
        return text if top else f"({text})"

    return emit(tree, True)


# ------------------------------------------------------------------------------------------------ the texts
def header_text(abi: LauncherAbi, task_name: str = "") -> str:
    """The launcher declaration as a header, with what each parameter holds: what `kbench glue` prints and the
    LLM prompt shows. kernel.cu may paste the declaration (or this whole text) above its definition."""
    about = f"task {task_name}, {abi.direction}" if task_name else abi.direction
    lines = [f"// kbench launcher ABI ({about}): kernel.cu defines {abi.launcher}; kbench generates binding.cpp.",
             f"//   {abi.signature}"]
    for name, annot in abi.resolved:
        lines.append(f"//   ({name}: {annot}, from the forward signature)")
    lines += ["//", "// Parameters, in order:"]
    for p in abi.inputs:
        lines.append(f"//   {p.cname}: {_describe(p)}")
    for p in abi.outputs:
        lines.append(f"//   {p.cname}: output {p.annotation}, {_elements(p)} {p.c_type}, contiguous, uninitialised "
                     "(write every element)")
    if abi.dims:
        lines.append(f"//   {', '.join(c for _, c in abi.dims)}: the named dimensions (int64_t); any value may be 0")
    lines += ["//   stream: the current CUDA stream: launch every kernel on it",
              "// C++ linkage (no extern \"C\"): the types are part of the symbol, so a definition that differs",
              "// fails at the link. Report failure through CUDA's error state (cudaGetLastError is checked).",
              "#pragma once",
              "#include <cstdint>",
              "#include <cuda_runtime.h>"]
    lines += [f"#include <{h}>" for h in abi.headers]
    lines += ["", abi.declaration()]
    return "\n".join(lines) + "\n"


def _describe(p: GlueParam) -> str:
    if p.kind != "tensor":
        return f"{p.kind} argument, as {p.c_type}"
    text = f"{p.annotation}, {_elements(p)} const {p.c_type}, contiguous"
    return text + (" (nullptr when None)" if p.optional else "")


def _elements(p: GlueParam) -> str:
    if not p.dims:
        return "1 element of"
    return "*".join(d if _IDENT.match(d) or d.isdigit() else f"({d})" for d in p.dims) + " elements of"


def binding_text(abi: LauncherAbi) -> str:
    """binding.cpp for the ABI: deterministic, one text per signature (see the module's docstring)."""
    fn = abi.direction
    values = {p.name: p.cname for p in abi.inputs if p.kind == "int"}
    values.update({d: c for d, c in abi.dims})
    dim_values = {d for d, _ in abi.dims}
    exprs = [d for p in (*abi.inputs, *abi.outputs) if p.kind == "tensor" for d in p.dims
             if not _IDENT.match(d) and not d.isdigit()]
    sized = any(not d.isdigit() and d not in dim_values for p in abi.outputs for d in p.dims)
    trees = [ast.parse(d, mode="eval") for d in exprs]
    uses_floordiv = any(isinstance(n, ast.FloorDiv) for t in trees for n in ast.walk(t))
    uses_mod = any(isinstance(n, ast.Mod) for t in trees for n in ast.walk(t))
    first = next(p for p in abi.inputs if p.kind == "tensor" and not p.optional)
    names = _Names()
    for p in (*abi.inputs, *abi.outputs):
        names.used.add(p.cname)
    names.used.update(c for _, c in abi.dims)
    contig = {p.name: names.take(f"{p.cname.rstrip('_') or p.cname}_c") for p in abi.inputs if p.kind == "tensor"}

    out: list[str] = [
        f"// Generated by kbench (glue v{GLUE_VERSION}) from the task signature; `kbench glue TASK --binding` prints it.",
        f"//   {abi.signature}",
        *[f"//   ({name}: {annot}, from the forward signature)" for name, annot in abi.resolved],
        f"// Checks the arguments, allocates the outputs and calls {abi.launcher}, which kernel.cu defines. The same",
        "// signature always gives this same text, so its object is compiled once and reused (object cache).",
        "#include <torch/extension.h>",
        "#include <ATen/cuda/CUDAContext.h>",
        "#include <c10/cuda/CUDAGuard.h>",
        "#include <cstdint>",
        "#include <vector>",
        *[f"#include <{h}>" for h in abi.headers],
        "",
        abi.declaration(),
        "",
        "namespace {",
        "",
        f'constexpr const char* kb_fn = "{fn}";',
        "",
        "void kb_check_tensor(const at::Tensor& t, const char* name, const char* annotation, at::ScalarType dtype,",
        "                     int64_t rank, const at::Device& device) {",
        '    TORCH_CHECK(t.is_cuda(), kb_fn, ": ", name, " must be a CUDA tensor (", annotation, "), got one on ",',
        "                t.device());",
        '    TORCH_CHECK(t.device() == device, kb_fn, ": ", name, " is on ", t.device(), ", the other tensors on ", device);',
        '    TORCH_CHECK(t.scalar_type() == dtype, kb_fn, ": ", name, " must be ", dtype, " (", annotation, "), got ",',
        "                t.scalar_type());",
        '    TORCH_CHECK(t.dim() == rank, kb_fn, ": ", name, " must have ", rank, " dimension(s) (", annotation,',
        '                "), got sizes ", t.sizes());',
        "}",
        "",
        "void kb_check_size(const at::Tensor& t, const char* name, const char* annotation, int64_t axis, int64_t want,",
        "                   const char* what) {",
        '    TORCH_CHECK(t.size(axis) == want, kb_fn, ": ", name, ".size(", axis, ") is ", t.size(axis), " but ",',
        '                annotation, " needs ", what, " = ", want, " (sizes ", t.sizes(), ")");',
        "}",
    ]
    if sized:
        out += [
            "",
            "int64_t kb_size(int64_t v, const char* name, const char* annotation, const char* what) {",
            '    TORCH_CHECK(v >= 0, kb_fn, ": ", what, " of ", name, " (", annotation, ") would be ", v);',
            "    return v;",
            "}",
        ]
    if uses_floordiv or uses_mod:
        out += [
            "",
            "int64_t kb_floordiv(int64_t a, int64_t b) {   // Python's //",
            '    TORCH_CHECK(b != 0, kb_fn, ": a dimension expression divides by zero");',
            "    const int64_t q = a / b;",
            "    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;",
            "}",
        ]
    if uses_mod:
        out += [
            "",
            "int64_t kb_mod(int64_t a, int64_t b) {        // Python's %",
            "    return a - kb_floordiv(a, b) * b;",
            "}",
        ]
    out += ["", "}  // namespace", ""]

    ret_type = "std::vector<at::Tensor>" if abi.returns_list else "at::Tensor"
    params = []
    for p in abi.inputs:
        if p.kind == "tensor":
            params.append(f"const c10::optional<at::Tensor>& {p.cname}" if p.optional else f"const at::Tensor& {p.cname}")
        else:
            params.append(f"{p.c_type} {p.cname}")
    out.append(_wrap(f"{ret_type} {fn}(", params, ") {"))
    out.append(f"    const at::Device kb_device = {first.cname}.device();")

    def check(p: GlueParam, ref: str, indent: str) -> list[str]:
        dt = DTYPES[p.dtype][1]
        lines = [f'{indent}kb_check_tensor({ref}, "{p.name}", "{p.annotation}", {dt}, {len(p.dims)}, kb_device);']
        return lines

    def sizes(p: GlueParam, ref: str, indent: str, pos: int) -> list[str]:
        lines = []
        for axis, d in enumerate(p.dims):
            if (d, pos, axis) in src:
                continue
            if d.isdigit():
                want = d
            elif _IDENT.match(d):
                want = values[d]
            else:
                want = cpp_dim(d, values, p, abi.signature)
            lines.append(f'{indent}kb_check_size({ref}, "{p.name}", "{p.annotation}", {axis}, {want}, "{d}");')
        return lines

    src = set(abi.dim_source)
    for p in abi.inputs:
        if p.kind == "tensor" and not p.optional:
            out += check(p, p.cname, "    ")
    for d, pos, axis in abi.dim_source:
        out.append(f"    const int64_t {values[d]} = {abi.inputs[pos].cname}.size({axis});")
    for pos, p in enumerate(abi.inputs):
        if p.kind != "tensor":
            continue
        if p.optional:
            out.append(f"    if ({p.cname}.has_value()) {{")
            out += check(p, f"*{p.cname}", "        ")
            out += sizes(p, f"*{p.cname}", "        ", pos)
            out.append("    }")
        else:
            out += sizes(p, p.cname, "    ", pos)
    out.append("    const c10::cuda::CUDAGuard kb_guard(kb_device);")
    for p in abi.inputs:
        if p.kind != "tensor":
            continue
        if p.optional:
            out.append(f"    const at::Tensor {contig[p.name]} = {p.cname}.has_value() ? {p.cname}->contiguous() "
                       ": at::Tensor();")
        else:
            out.append(f"    const at::Tensor {contig[p.name]} = {p.cname}.contiguous();")
    for p in abi.outputs:
        shape = []
        for d in p.dims:
            if d.isdigit() or d in dim_values:
                shape.append(cpp_dim(d, values))
            else:                              # an expression or an int argument: checked for a negative size
                shape.append(f'kb_size({cpp_dim(d, values, p, abi.signature)}, "{p.name}", "{p.annotation}", "{d}")')
        size = "{" + ", ".join(shape) + "}" if shape else "at::IntArrayRef()"
        out.append(f"    at::Tensor {p.cname} = at::empty({size}, "
                   f"at::TensorOptions().dtype({DTYPES[p.dtype][1]}).device(kb_device));")
    args = []
    for p in abi.inputs:
        if p.kind != "tensor":
            args.append(p.cname)
            continue
        ptr = _data_ptr(contig[p.name], p, const=True)
        args.append(f"{contig[p.name]}.defined() ? {ptr} : nullptr" if p.optional else ptr)
    args += [_data_ptr(p.cname, p, const=False) for p in abi.outputs]
    args += [c for _, c in abi.dims]
    args.append("at::cuda::getCurrentCUDAStream()")
    out.append(_wrap(f"    {abi.launcher}(", args, ");", indent=len(abi.launcher) + 5))
    out.append("    C10_CUDA_KERNEL_LAUNCH_CHECK();")
    if abi.returns_list:
        out.append("    return {" + ", ".join(p.cname for p in abi.outputs) + "};")
    else:
        out.append(f"    return {abi.outputs[0].cname};")
    out += ["}", "", "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    pyargs = [f'"{fn}"', f"&{fn}", f'"{abi.signature.replace(chr(34), chr(39))} (kbench generated glue)"',
              *[f'py::arg("{p.name}")' for p in abi.inputs]]
    out.append(_wrap("    m.def(", pyargs, ");", indent=10))
    out.append("}")
    return "\n".join(out) + "\n"


def _data_ptr(var: str, p: GlueParam, const: bool) -> str:
    c_type, _, elem, _ = DTYPES[p.dtype]
    ptr = f"{var}.data_ptr<{elem}>()"
    if elem != c_type:
        ptr = f"reinterpret_cast<{'const ' if const else ''}{c_type}*>({ptr})"
    return ptr


def _wrap(head: str, items: list[str], tail: str, width: int = 112, indent: int | None = None) -> str:
    """`head` items joined by ", " then `tail`, wrapped at `width` with continuation lines aligned after head."""
    pad = " " * (len(head) if indent is None else indent)
    lines, cur = [], head
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else tail)
        if len(cur) + len(piece.rstrip()) > width and cur.strip() not in (head.strip(), ""):
            lines.append(cur.rstrip())
            cur = pad
        cur += piece
    if not items:
        cur += tail
    lines.append(cur.rstrip())
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ candidates
def glue_header(task: Task, direction: str) -> str:
    return launcher_abi(task, direction).header(task.name)


def glue_binding(task: Task, direction: str) -> str:
    return launcher_abi(task, direction).binding()


def refusal(task: Task, direction: str) -> str | None:
    """Why the kernel-only form is refused for this task direction; None when it is accepted."""
    try:
        launcher_abi(task, direction)
    except GlueError as exc:
        return str(exc)
    return None


def materialise(candidate: Candidate, task: Task, direction: str) -> Candidate:
    """A kernel-only candidate as a native one with the generated binding.cpp (other candidates unchanged).
    GlueError when the task direction's signature cannot be expressed."""
    if candidate.format != "kernel-only":
        return candidate
    try:
        binding = launcher_abi(task, direction).binding()
    except GlueError as exc:
        raise GlueError(f"a kernel-only candidate (kernel.cu without binding.cpp) cannot run on task {task.name} "
                        f"({direction}): {exc}. Write binding.cpp beside kernel.cu (a native candidate).") from None
    files = {"kernel.cu": candidate.files["kernel.cu"], "binding.cpp": binding,
             **{rel: text for rel, text in candidate.files.items() if rel != "kernel.cu"}}
    meta = {**candidate.meta, "binding": "generated"}
    return replace(candidate, format="native", files=files, meta=meta)


def load_for_task(path: str | Path, task: Task, direction: str, name: str | None = None) -> Candidate:
    """load_candidate, with a kernel-only candidate materialised for this task direction."""
    return materialise(load_candidate(path, name), task, direction)
