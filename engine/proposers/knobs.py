"""Tunable knobs: parse `// kbench:knob values=... [requires=EXPR]` annotations and rewrite values.

A Triton kernel.py writes the annotation as a Python comment on an assignment, `BLOCK = 1024  # kbench:knob
values=256,512,1024`, and has its BLOCK_* sizes, num_warps and num_stages as knobs without one
(engine/proposers/knobs_triton.py).

    #define BLOCK_SIZE 256  // kbench:knob values=128,256,512,1024
    #define VEC 4           // kbench:knob values=1,2,4 requires=BLOCK_SIZE*VEC<=4096

`requires=` runs to the end of the line and is a C-like expression over knob names: integers,
identifiers, + - * / % << >> & | ^ ~, comparisons, && || !, parentheses. `/` and `%` are C's integer
division and remainder. An identifier that is not a knob stands for itself, so `MODE==fast` works.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from typing import Any, Mapping

from engine.candidates import Candidate
from engine.errors import KbenchError
from engine.proposers import knobs_triton

_KNOB_LINE = re.compile(
    r"^(?P<pre>\s*#\s*define\s+(?P<name>[A-Za-z_]\w*)\s+)(?P<value>[^\s/]+)(?P<post>[^\n]*?)"
    r"//\s*kbench:knob\b(?P<args>[^\n]*)$", re.MULTILINE)
# the same annotation on a Python assignment (a Triton kernel.py): `BLOCK_SIZE = 1024  # kbench:knob values=...`
_PY_KNOB_LINE = re.compile(
    r"^(?P<pre>[ \t]*(?P<name>[A-Za-z_]\w*)[ \t]*=[ \t]*)(?P<value>[^\s#]+)(?P<post>[^\n]*?)"
    r"#\s*kbench:knob\b(?P<args>[^\n]*)$", re.MULTILINE)
_ARG = re.compile(r"(?:^|\s)([A-Za-z_]\w*)=")
_SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".h", ".hpp", ".py")


def _knob_lines(rel: str) -> re.Pattern[str]:
    return _PY_KNOB_LINE if rel.endswith(".py") else _KNOB_LINE


class KnobError(KbenchError):
    """A knob annotation is malformed, or a value or constraint is illegal."""


@dataclass(frozen=True)
class Knob:
    name: str
    file: str
    value: str  # the current value, as written
    values: tuple[str, ...]
    requires: str | None = None

    @property
    def index(self) -> int:
        return self.values.index(self.value)


def parse_knobs(candidate: Candidate) -> list[Knob]:
    """All annotated knobs of a candidate, in file and line order; raises KnobError with file and line."""
    knobs: list[Knob] = []
    seen: dict[str, str] = {}
    for rel in sorted(candidate.files):
        if not rel.endswith(_SOURCE_SUFFIXES):
            continue
        text = candidate.files[rel]
        for m in _knob_lines(rel).finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            where = f"{rel}:{line}"
            name = m.group("name")
            if name in seen:
                raise KnobError(f"{where}: knob {name} is also defined at {seen[name]}; knob names must be unique.")
            seen[name] = where
            args = _parse_args(m.group("args"), where)
            if "values" not in args:
                raise KnobError(f"{where}: knob {name} has no values= list.")
            values = tuple(v.strip() for v in args["values"].split(",") if v.strip())
            if not values:
                raise KnobError(f"{where}: knob {name} has an empty values= list.")
            if len(set(values)) != len(values):
                raise KnobError(f"{where}: knob {name} lists a value twice ({args['values']}).")
            bad = [v for v in values if not re.fullmatch(r"[-+]?\w+(\.\w+)?", v)]
            if bad:
                raise KnobError(f"{where}: knob {name} has values that are not numbers or identifiers: {bad}.")
            current = m.group("value")
            if current not in values:
                raise KnobError(f"{where}: knob {name} is {current}, which is not one of its values "
                                f"({', '.join(values)}).")
            knobs.append(Knob(name, rel, current, values, args.get("requires") or None))
    knobs += _implicit(candidate, set(seen))
    names = {k.name for k in knobs}
    current = {k.name: k.value for k in knobs}
    for k in knobs:
        if k.requires:
            check_expression(k.requires, names, f"{k.file}: knob {k.name} requires=")
            try:
                evaluate(k.requires, current)  # a misspelt knob name shows up here, once, with its file
            except KnobError as exc:
                raise KnobError(f"{k.file}: knob {k.name}: {exc}.") from None
    return knobs


def _parse_args(text: str, where: str) -> dict[str, str]:
    matches = list(_ARG.finditer(text))
    if text.strip() and (not matches or text[:matches[0].start()].strip()):
        raise KnobError(f"{where}: cannot read the knob annotation {text.strip()!r}; "
                        "expected values=a,b,c [requires=EXPR].")
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        key = m.group(1)
        end = len(text) if key == "requires" or i + 1 == len(matches) else matches[i + 1].start()
        if key not in ("values", "requires"):
            raise KnobError(f"{where}: unknown knob setting {key}= (known: values=, requires=).")
        out[key] = text[m.end():end].strip()
        if key == "requires":
            break  # it runs to the end of the line
    return out


def apply_settings(candidate: Candidate, settings: Mapping[str, str]) -> Candidate:
    """A copy of `candidate` with the named knobs set; only the value after each name is rewritten."""
    files = dict(candidate.files)
    for rel, text in files.items():
        if not rel.endswith(_SOURCE_SUFFIXES):
            continue

        def sub(m: re.Match[str]) -> str:
            new = settings.get(m.group("name"))
            if new is None:
                return m.group(0)
            return m.group("pre") + new + m.group(0)[m.end("value") - m.start():]

        files[rel] = _knob_lines(rel).sub(sub, text)
        if candidate.format == "triton" and rel == "kernel.py":
            files[rel] = knobs_triton.rewrite(files[rel], dict(settings), _annotated(text))
    return Candidate(candidate.format, files, candidate.name, dict(candidate.meta))


def _annotated(text: str) -> set[str]:
    return {m.group("name") for m in _PY_KNOB_LINE.finditer(text)}


def _implicit(candidate: Candidate, named: set[str]) -> list[Knob]:
    """A Triton candidate's BLOCK_* sizes, num_warps and num_stages, where no annotation names them."""
    if candidate.format != "triton" or "kernel.py" not in candidate.files:
        return []
    text = candidate.files["kernel.py"]
    return [Knob(s.name, "kernel.py", s.value, s.values) for s in knobs_triton.sites(text, named | _annotated(text))]


def legal(knobs: list[Knob], settings: Mapping[str, str]) -> bool:
    env = {k.name: settings.get(k.name, k.value) for k in knobs}
    return all(bool(evaluate(k.requires, env)) for k in knobs if k.requires)


# -- requires= expressions ---------------------------------------------------------------------------

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.LShift: operator.lshift,
        ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
        ast.BitXor: operator.xor}
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}


def _to_python(expr: str) -> str:
    if "?" in expr or "=" in expr.replace("==", "").replace("!=", "").replace("<=", "").replace(">=", ""):
        raise KnobError(f"unsupported syntax in {expr!r} (no assignments or ?: in requires=)")
    out = expr.replace("&&", " and ").replace("||", " or ")
    return re.sub(r"!(?!=)", " not ", out).strip()


def check_expression(expr: str, names: set[str], where: str) -> None:
    try:
        tree = ast.parse(_to_python(expr), mode="eval")
    except (SyntaxError, KnobError) as exc:
        raise KnobError(f"{where}{expr}: not a valid expression ({exc}).") from None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Name,
                                 ast.Constant, ast.Load, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd,
                                 ast.Invert, ast.Div, ast.Mod, *_BIN, *_CMP)):
            raise KnobError(f"{where}{expr}: {type(node).__name__} is not allowed in requires=.")


def evaluate(expr: str, env: Mapping[str, Any]) -> Any:
    try:
        return _eval(ast.parse(_to_python(expr), mode="eval").body, env)
    except (TypeError, SyntaxError) as exc:
        names = sorted({n.id for n in ast.walk(ast.parse(_to_python(expr), mode="eval"))
                        if isinstance(n, ast.Name)} - set(env) - {"true", "false"})
        hint = f"; {', '.join(names)} {'is' if len(names) == 1 else 'are'} not knobs" if names else ""
        raise KnobError(f"cannot evaluate requires={expr} ({exc}){hint}") from None


def _value(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return int(raw, 0)
        except ValueError:
            return raw
    return raw


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("true", "false"):
            return node.id == "true"
        return _value(env.get(node.id, node.id))
    if isinstance(node, ast.BoolOp):
        vals = (_eval(v, env) for v in node.values)
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        if isinstance(node.op, ast.Not):
            return not v
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[type(node.op)](v)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, (ast.Div, ast.Mod)):
            if b == 0:
                raise KnobError("division by zero in requires=")
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # C truncates toward zero
            return q if isinstance(node.op, ast.Div) else a - q * b
        return _BIN[type(node.op)](a, b)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, env)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    raise KnobError(f"{type(node).__name__} is not allowed in requires=")
