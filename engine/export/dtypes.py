"""The dtypes an exported kernel accepts, read off its binding's checks, so that the op's fake implementation
refuses what the kernel refuses (a float32-only kernel raises for float16, and so must its fake, or
torch.compile traces a call the kernel will fail).

Read: each `TORCH_CHECK(cond, msg...)` in the body of the binding's entry point. `cond` is split at its
top-level `&&`; a part that compares one parameter's dtype with dtypes (`x.scalar_type() == torch::kFloat32`,
`x.dtype() == at::kFloat`, a parenthesised `||` of such comparisons on the same parameter) is a check on that
parameter; the others are not dtype checks and are left alone. The message is the check's string literals
joined (a non-literal part stays as its source text); without one it is torch's default
`Expected <cond> to be true, but got false.`. Checks made elsewhere (a helper function, an
AT_DISPATCH macro) are not read: export.json then lists no check for that parameter, and the README says which
parameters are checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any

from engine.export.schema import CppEntry

# C++ scalar-type spellings -> torch dtype names (str(torch.float32) without "torch.")
DTYPES = {
    "Float": "float32", "kFloat": "float32", "kFloat32": "float32",
    "Double": "float64", "kDouble": "float64", "kFloat64": "float64",
    "Half": "float16", "kHalf": "float16", "kFloat16": "float16",
    "BFloat16": "bfloat16", "kBFloat16": "bfloat16",
    "Int": "int32", "kInt": "int32", "kInt32": "int32",
    "Long": "int64", "kLong": "int64", "kInt64": "int64",
    "Short": "int16", "kShort": "int16", "kInt16": "int16",
    "Char": "int8", "kChar": "int8", "kInt8": "int8",
    "Byte": "uint8", "kByte": "uint8", "kUInt8": "uint8",
    "Bool": "bool", "kBool": "bool",
}
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_SIDE = r"(?P<{p}>[A-Za-z_]\w*)\s*\.\s*(?:scalar_type|dtype)\s*\(\s*\)"
_TYPE = r"(?:(?:torch|at|c10)\s*::\s*)?(?:ScalarType\s*::\s*)?(?P<{p}>k?\w+)"
_COMPARE = [re.compile(rf"^{_SIDE.format(p='var')}\s*==\s*{_TYPE.format(p='type')}$"),
            re.compile(rf"^{_TYPE.format(p='type')}\s*==\s*{_SIDE.format(p='var')}$")]
_STRING = re.compile(r'^"(?:[^"\\]|\\.)*"$')


@dataclass(frozen=True)
class DtypeCheck:
    position: int                 # the op argument (the entry point's parameter) checked
    param: str                    # its name in the binding
    dtypes: tuple[str, ...]       # torch dtype names it may have
    message: str                  # what the kernel's TORCH_CHECK raises

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "param": self.param, "dtypes": list(self.dtypes), "message": self.message}


def dtype_checks(source: str, entry: CppEntry) -> list[DtypeCheck]:
    """The dtype checks of `entry`'s body in `source` (its binding), in source order; [] where none are read."""
    if not entry.params:
        return []
    positions = {name: i for i, (_, name) in enumerate(entry.params) if name}
    body = _body(_COMMENTS.sub(" ", source), entry.function.split("::")[-1])
    if body is None:
        return []
    found: list[DtypeCheck] = []
    for args in _calls(body, "TORCH_CHECK"):
        if not args:
            continue
        cond = args[0]
        message = _message(args[1:], cond)
        for part in _conjuncts(cond):
            got = _compare(part)
            if got is not None and got[0] in positions:
                found.append(DtypeCheck(positions[got[0]], got[0], got[1], message))
    return found


def _conjuncts(cond: str) -> list[str]:
    """`a && (b && c)` -> [a, b, c]: the parts every one of which must hold."""
    parts = _split(_unparen(cond), "&&")
    if len(parts) == 1:
        return parts
    return [c for p in parts for c in _conjuncts(p)]


def _compare(part: str) -> tuple[str, tuple[str, ...]] | None:
    """(parameter, dtypes) when `part` compares one parameter's dtype with dtypes, else None."""
    part = _unparen(part)
    var, dtypes = None, []
    for alt in _split(part, "||"):
        alt = _unparen(alt)
        m = next((m for rx in _COMPARE if (m := rx.match(alt))), None)
        if m is None or m.group("type") not in DTYPES or (var is not None and m.group("var") != var):
            return None
        var = m.group("var")
        dtypes.append(DTYPES[m.group("type")])
    return (var, tuple(dict.fromkeys(dtypes))) if var is not None else None


def _message(parts: list[str], cond: str) -> str:
    if not parts:
        return f"Expected {' '.join(cond.split())} to be true, but got false."
    out = []
    for p in parts:
        p = p.strip()
        out.append(_unescape(p[1:-1]) if _STRING.match(p) else p)
    return "".join(out)


def _unescape(text: str) -> str:
    return re.sub(r'\\(["\\n t])', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


def _body(code: str, function: str) -> str | None:
    """The text between the braces of the last definition of `function` in `code`."""
    defs = list(re.finditer(r"\b" + re.escape(function) + r"\s*\([^()]*\)\s*\{", code))
    if not defs:
        return None
    start = defs[-1].end()
    end = _close(code, start - 1, "{", "}")
    return code[start:end] if end is not None else None


def _calls(code: str, name: str) -> list[list[str]]:
    """The argument texts of each call of `name` in `code`."""
    calls = []
    for m in re.finditer(r"\b" + re.escape(name) + r"\s*\(", code):
        end = _close(code, m.end() - 1, "(", ")")
        if end is not None:
            calls.append(_split(code[m.end():end], ","))
    return calls


def _outside_literals(text: str, start: int = 0) -> Iterator[int]:
    """The indices of `text`'s characters from `start` on that lie outside string and character literals."""
    i, quote = start, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        else:
            yield i
        i += 1


def _close(code: str, open_at: int, opening: str, closing: str) -> int | None:
    """The index of the bracket that closes the one at `open_at` (string and char literals skipped)."""
    depth = 0
    for i in _outside_literals(code, open_at):
        if code[i] == opening:
            depth += 1
        elif code[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    return None


def _split(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside brackets and string literals; parts stripped, empty ones dropped."""
    parts, depth, start = [], 0, 0
    for i in _outside_literals(text):
        c = text[i]
        if i < start:
            continue   # inside the separator just taken
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _unparen(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and _close(text, 0, "(", ")") == len(text) - 1:
        text = text[1:-1].strip()
    return text
