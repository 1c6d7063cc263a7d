"""Reading a task direction's signature: `forward(x: f32[B,N], weight: f32[N], eps: float) -> y: f32[B,N]`.

Native tasks write it in task.toml; robust-kbench and KernelBench tasks get one from the reference's annotations
(`forward(x: torch.Tensor, eps: float) -> torch.Tensor`). Two readers use it: the export (engine/export/schema.py,
op schemas) and the generated glue of kernel-only candidates (engine/tasks/glue/generated.py). This module only splits
the text; what an annotation means to each reader is theirs to say.

A tensor annotation is `<dtype>[<dims>]`: dtype `f32`, `f16`, `bf16`, `f64`, `i64`, `i32`, `i16`, `i8`, `u8` or
`bool`; dims are names (`B`), integers (`3`) or integer expressions over names (`(H-K+1)//2`); `f32[]` is a 0-dim
tensor. `... | None` / `Optional[...]` marks an argument that may be None. An unannotated argument of a backward
signature is the forward argument of that name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.errors import TaskError

_SEQUENCE = re.compile(r"^(?:typing\.)?(tuple|Tuple|list|List|Sequence|collections\.abc\.Sequence)\b(?:\[(.*)\])?$")
_TENSOR_ANNOT = re.compile(r"^(?:(?:f|bf|i|u|c)\d+|bool)\s*\[.*\]$")   # f32[B,N], i64[B], bf16[N], f32[]
_TENSOR_PARTS = re.compile(r"^(?P<dtype>(?:f|bf|i|u|c)\d+|bool)\s*\[(?P<dims>.*)\]$", re.DOTALL)
_OPTIONAL = re.compile(r"^(?:typing\.)?Optional\[(.*)\]$")
_TYPE_WORDS = {"float", "int", "bool", "str", "None", "Tensor", "tuple", "list", "Tuple", "List"}


class SignatureError(TaskError):
    """A task signature that cannot be read."""


@dataclass(frozen=True)
class TensorAnnotation:
    dtype: str                 # "f32", "i64", "bool", ...
    dims: tuple[str, ...]      # as written: "B", "3", "(H-K+1)//2"; () for a 0-dim tensor


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside brackets, parentheses and angle brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_signature(signature: str) -> tuple[str, list[tuple[str, str]], str]:
    """`name(a: T, b) -> R` -> (name, [(a, "T"), (b, "")], "R")."""
    sig = signature.strip()
    m = re.match(r"^([A-Za-z_]\w*)\s*\(", sig)
    if not m:
        raise SignatureError(f"cannot read the task signature {signature!r}: expected `name(arg: type, ...) -> type`.")
    depth, end = 0, -1
    for i in range(m.end() - 1, len(sig)):
        if sig[i] in "([":
            depth += 1
        elif sig[i] in ")]":
            depth -= 1
            if depth == 0:
                end = i
                break
    if end < 0:
        raise SignatureError(f"cannot read the task signature {signature!r}: unbalanced parentheses.")
    params = []
    for part in split_top(sig[m.end():end]):
        if part.startswith("*"):
            raise SignatureError(f"task signature {signature!r} takes {part}: an op schema needs named arguments.")
        name, _, annot = part.partition(":")
        name = name.split("=")[0].strip()
        annot = annot.split("=")[0].strip() if "=" not in part.partition(":")[0] else ""
        params.append((name, annot))
    rest = sig[end + 1:].strip()
    ret = rest[2:].strip() if rest.startswith("->") else ""
    return m.group(1), params, ret


def split_optional(annot: str) -> tuple[str, bool]:
    """`T | None` / `Optional[T]` -> (T, True); anything else -> (annot, False)."""
    a = annot.strip()
    m = _OPTIONAL.match(a)
    if m:
        return m.group(1).strip(), True
    parts = [p.strip() for p in a.split("|")]
    if len(parts) == 2 and "None" in parts:
        return next(p for p in parts if p != "None"), True
    return a, False


def tensor_annotation(annot: str) -> TensorAnnotation | None:
    """`f32[B,N]` -> TensorAnnotation("f32", ("B", "N")); None when `annot` is not a shaped tensor annotation
    (strip `| None` first with split_optional)."""
    m = _TENSOR_PARTS.match(annot.strip())
    if not m:
        return None
    return TensorAnnotation(m.group("dtype"), tuple(split_top(m.group("dims"))))


def classify_annotation(annot: str) -> tuple[str | None, bool] | None:
    """(kind, optional) for a signature annotation; (None, False) when unannotated; None when unsupported.
    Kinds: Tensor, float, int, bool, int[], float[], and "list" for a bare tuple / list."""
    a = annot.strip()
    if not a:
        return None, False
    a, optional = split_optional(a)
    if _TENSOR_ANNOT.match(a) or a in ("Tensor", "torch.Tensor", "torch.nn.Parameter", "nn.Parameter"):
        return "Tensor", optional
    if a in ("float", "int", "bool"):
        return a, optional
    if m := _SEQUENCE.match(a):
        items = {p.strip() for p in split_top(m.group(2) or "") if p.strip() != "..."}
        if not items:
            return "list", optional          # element type from the binding, else int
        if items <= {"int"}:
            return "int[]", optional
        if items <= {"float", "int"}:
            return "float[]", optional
    return None


def returns_list_of(ret: str) -> bool | None:
    """True for a tuple/list of outputs, False for one tensor, None when the signature does not say."""
    r = ret.strip()
    if not r:
        return None
    if r.startswith("(") or re.match(r"^(?:typing\.)?(?:tuple|Tuple|list|List)\b", r):
        inner = r[1:-1] if r.startswith("(") and r.endswith(")") else r
        return len(split_top(inner)) > 1 or not r.startswith("(") or r.rstrip(")").rstrip().endswith(",")
    return False


def split_returns(ret: str) -> list[tuple[str, str]]:
    """The outputs of a return annotation as (name, annotation): `y: f32[B,N]` -> [("y", "f32[B,N]")];
    `(a: f32[N], b)` -> [("a", "f32[N]"), ("b", "")]; an unnamed `f32[N]` -> [("", "f32[N]")]."""
    r = ret.strip()
    if r.startswith("(") and r.endswith(")"):
        r = r[1:-1]
    out = []
    for part in split_top(r):
        name, sep, annot = part.partition(":")
        if sep and re.fullmatch(r"\s*[A-Za-z_]\w*\s*", name):
            out.append((name.strip(), annot.strip()))
        elif re.fullmatch(r"[A-Za-z_]\w*", part) and part not in _TYPE_WORDS:
            out.append((part, ""))             # a bare name: (grad_x, grad_w)
        else:
            out.append(("", part))
    return out
