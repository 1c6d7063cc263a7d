"""Op schemas for an exported kernel, derived from the task's signature (the C++ binding fills the gaps).

A task signature reads `forward(x: f32[B,N], weight: f32[N], eps: float) -> y: f32[B,N]` (native tasks) or
`forward(x: torch.Tensor, eps: float) -> torch.Tensor` (robust-kbench, from `forward_fn`'s annotations). Each
parameter becomes a schema argument: a tensor annotation -> `Tensor`, `... | None` / `Optional[...]` -> `Tensor?`,
`float` / `int` / `bool` -> the scalar of that name, a tuple or list (`tuple`, `list[int]`, `tuple[float, ...]`)
-> `int[]` or `float[]` (a bare `tuple` / `list` takes its element type from the binding, else int: kernel sizes,
shapes and strides). Where the signature leaves a parameter unannotated, the C++ type of the binding's entry point
decides (`torch::Tensor`, `c10::optional<torch::Tensor>`, `double`, `int64_t`, `bool`, `std::vector<int64_t>` /
`IntArrayRef`, `std::vector<double>`). Anything else (strings, lists of tensors) has no schema type the exported op
could take: ExportError.

The forward returns `Tensor` (one output) or `Tensor[]`; the backward op is
`backward(Tensor grad, <the forward's arguments>) -> Tensor[]`, one gradient per floating-point tensor argument
except the task's `no_grad` ones (docs/formats.md, "Backward").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.export.errors import ExportError
from engine.tasks import signature as _signature
from engine.tasks.signature import SignatureError, classify_annotation, returns_list_of, split_top

KINDS = ("Tensor", "float", "int", "bool", "int[]", "float[]")
CPP_TYPES = {"Tensor": "at::Tensor", "float": "double", "int": "int64_t", "bool": "bool",
             "int[]": "at::IntArrayRef", "float[]": "at::ArrayRef<double>"}
LISTS = ("int[]", "float[]")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
# Words the schema parser would misread as a type or keyword where an argument name belongs.
_SCHEMA_WORDS = {"Tensor", "float", "int", "bool", "str", "None", "Scalar", "SymInt", "Device", "Layout",
                 "ScalarType", "MemoryFormat", "Generator", "Storage", "Stream", "True", "False"}


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str                  # Tensor | float | int | bool
    optional: bool = False

    @property
    def schema_type(self) -> str:
        return self.kind + ("?" if self.optional else "")

    @property
    def cpp_type(self) -> str:
        base = CPP_TYPES[self.kind]
        if self.optional:
            return f"const std::optional<{base}>&"
        return f"const {base}&" if self.kind == "Tensor" else base

    @property
    def is_list(self) -> bool:
        return self.kind in LISTS

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "optional": self.optional}


@dataclass(frozen=True)
class OpSchema:
    op: str                    # op name inside the namespace: "forward" / "backward"
    args: tuple[Arg, ...]
    returns_list: bool         # Tensor[] rather than Tensor
    grad_positions: tuple[int, ...] = ()   # backward only: forward args that get a gradient (static kinds)
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def returns(self) -> str:
        return "Tensor[]" if self.returns_list else "Tensor"

    @property
    def text(self) -> str:
        return f"{self.op}({', '.join(f'{a.schema_type} {a.name}' for a in self.args)}) -> {self.returns}"

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "schema": self.text, "args": [a.to_json() for a in self.args],
                "returns_list": self.returns_list, "grad_positions": list(self.grad_positions)}


# ------------------------------------------------------------------------------------------- parsing
# The signature reader lives with the task model (engine/tasks/signature.py): the generated glue of kernel-only
# candidates reads the same text. Here a signature that cannot be read is an export failure.


def parse_signature(signature: str) -> tuple[str, list[tuple[str, str]], str]:
    """`name(a: T, b) -> R` -> (name, [(a, "T"), (b, "")], "R")."""
    try:
        return _signature.parse_signature(signature)
    except SignatureError as exc:
        raise ExportError(str(exc)) from None


# ------------------------------------------------------------------------------------- C++ bindings

_PYDEF = re.compile(r"""\.\s*def\s*\(\s*"(?P<export>\w+)"\s*,\s*(?P<target>[^,)]+)""")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


@dataclass(frozen=True)
class CppEntry:
    function: str                      # the C++ function the pybind module exports
    params: tuple[tuple[str, str], ...] | None   # (type, name) where the definition was found
    returns: str | None


def find_entry(source: str, export: str) -> CppEntry:
    """The C++ function that `PYBIND11_MODULE` exports as `export`, and its parameter types if defined here."""
    code = _COMMENTS.sub(" ", source)
    target = None
    for m in _PYDEF.finditer(code):
        if m.group("export") == export:
            target = m.group("target").strip().lstrip("&").strip()
            break
    if target is None:
        raise ExportError(f"the binding exports no `{export}` (expected m.def(\"{export}\", &function, ...) in its "
                          "PYBIND11_MODULE).")
    if not re.match(r"^[A-Za-z_][\w:]*$", target):
        raise ExportError(f"the binding exports `{export}` as `{target}`, not a named function; the exported op "
                          f"calls it from C++, so bind a named function: m.def(\"{export}\", &{export}).")
    short = target.split("::")[-1]
    defs = list(re.finditer(r"(?P<ret>[\w:<>,\s]*?)\b" + re.escape(short) + r"\s*\((?P<params>[^()]*)\)\s*\{", code))
    if not defs:
        return CppEntry(target, None, None)
    d = defs[-1]
    params = []
    for p in split_top(d.group("params")):
        p = p.split("=")[0].strip()
        m = re.match(r"^(?P<type>.*?)(?P<name>[A-Za-z_]\w*)\s*$", p)
        if not m or not m.group("type").strip():
            params.append((p, ""))
        else:
            params.append((m.group("type").strip(), m.group("name")))
    ret = " ".join(d.group("ret").split()[-3:]) if d.group("ret").strip() else None
    return CppEntry(target, tuple(params), ret)


def classify_cpp(cpp_type: str) -> tuple[str | None, bool]:
    t = cpp_type.replace("const", "").replace("&", "").strip()
    optional = "optional" in t
    if re.search(r"IntArrayRef|vector\s*<\s*(?:int64_t|int|long|int32_t|size_t)\s*>|ArrayRef\s*<\s*int64_t\s*>", t):
        return "int[]", optional
    if re.search(r"vector\s*<\s*(?:double|float)\s*>|ArrayRef\s*<\s*double\s*>", t):
        return "float[]", optional
    if re.search(r"vector|ArrayRef|TensorList|tuple|py::", t):
        return None, optional                 # lists of tensors, Python objects: no schema type
    if "Tensor" in t:
        return "Tensor", optional
    if re.search(r"\bbool\b", t):
        return "bool", optional
    if re.search(r"\b(double|float)\b", t):
        return "float", optional
    if re.search(r"\b(int|int64_t|int32_t|long|size_t|unsigned|short)\b", t):
        return "int", optional
    return None, optional


# ----------------------------------------------------------------------------------------- derivation


def forward_schema(signature: str, entry: CppEntry | None = None) -> OpSchema:
    _, params, ret = parse_signature(signature)
    cpp = entry.params if entry else None
    if cpp is not None and len(cpp) != len(params):
        raise ExportError(f"the task's forward takes {len(params)} argument(s) ({', '.join(n for n, _ in params)}) but "
                          f"the binding's {entry.function} takes {len(cpp)}; the op would call it wrongly.")
    args = []
    seen = set()
    for i, (name, annot) in enumerate(params):
        if not _IDENT.match(name):
            raise ExportError(f"task signature {signature!r}: {name!r} is not an argument name.")
        got = classify_annotation(annot)
        if got is None:
            raise ExportError(f"argument `{name}: {annot}` of {signature!r} has no op schema type: an exported op takes "
                              "tensors, optional tensors, float/int/bool scalars and int/float lists only.")
        kind, optional = got
        if cpp is not None:
            ckind, coptional = classify_cpp(cpp[i][0])
            if kind is None:
                kind, optional = ckind, coptional
            elif kind == "Tensor" and ckind == "Tensor" and coptional:
                optional = True
            elif kind == "list" and ckind in LISTS:
                kind = ckind
        if kind == "list":
            kind = "int[]"   # a bare tuple / list: shapes, strides and kernel sizes are what kernels take
        if kind in LISTS and optional:
            raise ExportError(f"argument `{name}: {annot}` of {signature!r}: an optional list has no op schema type "
                              "kbench export supports; pass an empty list instead of None.")
        if kind is None:
            where = f" (the binding declares `{cpp[i][0]}`)" if cpp is not None else ""
            raise ExportError(f"cannot tell the type of argument `{name}` of {signature!r}{where}: annotate it in "
                              "the task signature (a tensor, `... | None`, float, int, bool, list[int] or "
                              "list[float]).")
        sname = name if name not in _SCHEMA_WORDS and name not in seen else f"{name}_{i}"
        seen.add(sname)
        args.append(Arg(sname, kind, optional))
    listed = returns_list_of(ret)
    if listed is None and entry is not None and entry.returns:
        listed = bool(re.search(r"vector|tuple|array", entry.returns))
    return OpSchema("forward", tuple(args), bool(listed))


def backward_schema(forward: OpSchema, signature: str, no_grad: tuple[int, ...] = (),
                    entry: CppEntry | None = None) -> OpSchema:
    """`backward(Tensor grad, <forward args>) -> Tensor[]`; checks the backward signature has that shape."""
    if forward.returns_list:
        raise ExportError("a backward kernel needs a forward that returns one tensor (the task's forward returns "
                          "several), so no autograd formula can be registered for it.")
    _, params, _ = parse_signature(signature)
    if len(params) != len(forward.args) + 1:
        raise ExportError(f"the backward signature {signature!r} takes {len(params)} argument(s); export wires "
                          f"autograd as backward(grad, <the {len(forward.args)} forward arguments>), so it needs "
                          f"{len(forward.args) + 1}.")
    if entry is not None and entry.params is not None and len(entry.params) != len(params):
        raise ExportError(f"the backward binding's {entry.function} takes {len(entry.params)} argument(s), the "
                          f"backward signature {len(params)}.")
    gname = params[0][0] if _IDENT.match(params[0][0]) else "grad"
    if gname in {a.name for a in forward.args} or gname in _SCHEMA_WORDS:
        gname = "grad_output_"
    grads = tuple(i for i, a in enumerate(forward.args) if a.kind == "Tensor" and i not in no_grad)
    return OpSchema("backward", (Arg(gname, "Tensor"), *forward.args), True, grad_positions=grads)
