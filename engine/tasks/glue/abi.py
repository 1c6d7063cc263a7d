"""The launcher ABI of kernel-only candidates: a task direction's signature as the launcher kernel.cu defines.

A kernel-only candidate is a `kernel.cu` (plus any `.cuh`/`.h` it includes) with no `binding.cpp`: it defines one
launcher per direction, `kb_forward` / `kb_backward`, whose parameters the signature fixes (docs/formats.md,
"Kernel-only candidates"). For

    forward(x: f32[B,S,H], w: f32[H], eps: float) -> y: f32[B,S,H]

the launcher is

    void kb_forward(const float* x, const float* w, double eps, float* y, int64_t B, int64_t S, int64_t H,
                    cudaStream_t stream);

Convention: the inputs in signature order (a tensor as a const pointer to its contiguous data, nullptr for an
optional tensor passed as None; `float` as double, `int` as int64_t, `bool` as bool; a tuple or list of ints,
`tuple[int, ...]` / `list[int]` such as robust-kbench's layernorm `normalized_shape`, as a host pointer to its
values and their count, `const int64_t* name, int64_t name_len`), then one pointer per output
(freshly allocated, contiguous, uninitialised), then every named dimension once (int64_t, in the order the required
input tensors first name them), then the stream. C++ linkage, not `extern "C"`: the parameter types are part of
the symbol, so a definition that differs from the declaration fails at the link, with the link check's message,
instead of running with misread arguments.

A signature the ABI cannot express (a tensor without a shape, a tuple of tensors or floats, an output dimension no
input names)
raises GlueError naming the reason; the kernel-only form is then refused for that direction. The texts generated
from an ABI (the header, binding.cpp) are in engine/tasks/glue/text.py; materialising a candidate in
engine/tasks/glue/generated.py.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from engine.errors import TaskError
from engine.tasks.model import Task
from engine.tasks.signature import SignatureError, parse_signature, split_optional, split_returns, tensor_annotation


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
# a tuple or list of ints (shapes, kernel sizes): the binding takes a std::vector<int64_t> (a Python tuple or list)
INT_LIST = re.compile(r"^(?:typing\.)?(?:tuple|Tuple|list|List|Sequence)\[\s*int\s*(?:,\s*\.\.\.\s*)?\]$")
LAUNCHER_PREFIX = "kb_"

IDENT = re.compile(r"^[A-Za-z_]\w*$")
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
    kind: str                     # "tensor", "float", "int", "bool", "ints" (a tuple or list of ints)
    annotation: str               # the (resolved) annotation, e.g. "f32[B,S,H]"
    dtype: str | None = None      # tensors: "f32", ...
    dims: tuple[str, ...] = ()    # tensors: as written
    optional: bool = False        # tensors only: may be None
    len_cname: str = ""           # "ints": the C++ identifier of the launcher's count parameter

    @property
    def c_type(self) -> str:
        if self.kind == "ints":
            return "int64_t"
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
        params = []
        for p in self.inputs:
            if p.kind == "ints":
                params += [f"const int64_t* {p.cname}", f"int64_t {p.len_cname}"]
            else:
                params.append(f"const {p.c_type}* {p.cname}" if p.kind == "tensor" else f"{p.c_type} {p.cname}")
        params += [f"{p.c_type}* {p.cname}" for p in self.outputs]
        params += [f"int64_t {c}" for _, c in self.dims]
        params.append("cudaStream_t stream")
        return wrap(f"void {self.launcher}(", params, ");")


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
    if not IDENT.match(direction):
        raise GlueError(f"direction {direction!r} is not a C++ identifier")
    fwd_annots: dict[str, str] = {}
    if forward_signature is not None:
        try:
            fwd_annots = {n: a for n, a in parse_signature(forward_signature)[1] if a}
        except SignatureError:
            fwd_annots = {}
    names = CppNames()
    inputs: list[GlueParam] = []
    resolved: list[tuple[str, str]] = []
    for name, annot in params:
        if not IDENT.match(name):
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
            if IDENT.match(d) and d not in source and d not in int_scalars:
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


def _param(name: str, annot: str, signature: str, names: "CppNames", output: bool = False) -> GlueParam:
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
    if INT_LIST.match(base) and not output:
        if optional:
            raise GlueError(f"argument `{name}: {annot}` of {signature!r} is an optional list, which the launcher "
                            "ABI has no way to pass")
        cname = names.take(name)
        return GlueParam(name, cname, "ints", base, len_cname=names.take(f"{cname}_len"))
    t = tensor_annotation(base)
    if t is None:
        if base in ("Tensor", "torch.Tensor", "torch.nn.Parameter", "nn.Parameter"):
            why = "a tensor without dtype and shape: the glue needs them, e.g. `f32[B,N]`"
        elif re.match(r"^(?:typing\.)?(tuple|Tuple|list|List|Sequence)\b", base):
            why = "a tuple or list other than of ints, which the launcher ABI has no way to pass"
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


class CppNames:
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
    if IDENT.match(dim):
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
    if IDENT.match(dim):
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


def wrap(head: str, items: list[str], tail: str, width: int = 112, indent: int | None = None) -> str:
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

