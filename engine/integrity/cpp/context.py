"""What the C++/CUDA rules know before they judge: per-function facts (device or host, tensors, launches,
static locals), the file-level facts, and the scanner's base (reporting, the function around a node,
namespace aliases, tensor typing). The rule families in engine.integrity.cpp_rules_* build on `_ScanBase`."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any

from engine.integrity.cpp.tree import (_WS, _callee, _captures, _declarators, _declared_name, _in_error, _method, _name,
                                       _parse, _storage, _text, _type_text, _value)
from engine.integrity.cpp.vocab import (HALF_TEXT, LAUNCH_CALLS, NON_TENSOR_FUNCS, NON_TENSOR_METHODS, PERSISTENT_SKIP,
                                        TENSOR_CONTAINER, TENSOR_TYPE)
from engine.integrity.findings import FAIL, SUSPICIOUS, Finding

# -- per-function facts ----------------------------------------------------------------------------------------

@dataclass
class _Func:
    node: Any
    name: str
    device: bool                                  # __global__ / __device__ (no tensors, no host APIs there)
    half_typed: bool                              # a half-precision path of a generic kernel (params/return)
    tensors: set[str] = field(default_factory=set)
    tensor_lists: set[str] = field(default_factory=set)
    others: set[str] = field(default_factory=set)          # declared with a type that is not a tensor
    launches: bool = False
    statics: dict[str, str] = field(default_factory=dict)   # static locals: name -> type


# -- the scanner -----------------------------------------------------------------------------------------------

@dataclass
class CppFacts:
    """What scan_candidate needs across files: does the candidate launch a kernel of its own?"""

    has_kernel: bool = False


class _ScanBase:
    """The scanner's state and context: the parsed file, its captures, what pass 1 collected, and `add`."""

    def __init__(self, name: str, raw: str, task_dtype: str, shapes: set[int], policy: str,
                 line_offset: int = 0, fragment: bool = False, known_functions: set[str] | None = None):
        self.name, self.raw, self.dtype, self.shapes, self.policy = name, raw, task_dtype, shapes, policy
        self.offset, self.fragment = line_offset, fragment
        self.lines = raw.splitlines()
        self.src = raw.encode("utf-8", "replace")
        self.tree = _parse(self.src)
        self.caps = _captures(self.tree.root_node)
        for v in self.caps.values():
            v.sort(key=lambda n: n.start_byte)
        self.found: list[Finding] = []
        self.facts = CppFacts()
        self.funcs: dict[int, _Func] = {}
        self.known_functions = set(known_functions or ())
        self.return_tensor_funcs: set[str] = set()
        self.aliases: dict[str, str] = {}
        self.using_torch = False
        self.persistent: dict[str, str] = {}       # namespace-scope / static members: name -> type
        self._ranges: list[_Func] = []
        self._starts: list[int] = []

    # -- reporting
    def add(self, hack: str, status: str, node: Any, reason: str, confidence: float = 1.0,
            library: str = "") -> None:
        if status == FAIL and _in_error(node):
            status, confidence = SUSPICIOUS, min(confidence, 0.5)
            reason += " (in a region the parser could not read: a person confirms)"
        line = node.start_point[0] + 1
        snippet = self.lines[line - 1].strip()[:160] if 0 < line <= len(self.lines) else ""
        self.found.append(Finding(hack, status, self.name, line + self.offset, reason, snippet, confidence, library))

    # -- context
    def func_of(self, node: Any) -> _Func | None:
        """The innermost function definition around `node` (by byte range: a parent walk per node is slow)."""
        pos = node.start_byte
        i = bisect.bisect_right(self._starts, pos) - 1
        while i >= 0:
            f = self._ranges[i]
            if f.node.start_byte <= pos < f.node.end_byte and f.node.id != node.id:
                return f
            i -= 1
        return None

    def host(self, node: Any) -> bool:
        f = self.func_of(node)
        return f is None or not f.device

    def resolve(self, qualified: str) -> str:
        head, sep, rest = qualified.partition("::")
        if sep and head in self.aliases:
            return self.aliases[head] + "::" + rest
        return qualified

    # -- pass 1: functions, declarations, types
    def collect(self) -> None:
        self._collect_functions()
        self._ranges.sort(key=lambda f: f.node.start_byte)
        self._starts = [f.node.start_byte for f in self._ranges]
        self._collect_rest()

    def _collect_functions(self) -> None:
        for fn in self.caps.get("func", []):
            decl = fn.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            fname = _name(decl.child_by_field_name("declarator")) if decl is not None else ""
            quals = {c.type for c in fn.children}
            device = bool(quals & {"__global__", "__device__"})
            if "__global__" in quals:
                self.facts.has_kernel = True
            rtype = _text(fn.child_by_field_name("type"))
            params = decl.child_by_field_name("parameters") if decl is not None else None
            ptypes = [_type_text(p) + " " + _text(p.child_by_field_name("declarator"))
                      for p in (params.named_children if params is not None else [])]
            half_typed = any(self._is_half_type_text(t) for t in [rtype] + ptypes) or self._specialised_half(fn)
            f = _Func(fn, fname.split("::")[-1], device, half_typed)
            if params is not None:
                for p in params.named_children:
                    ident = _declared_name(p.child_by_field_name("declarator"))
                    if ident is None:
                        continue
                    t = _type_text(p)
                    if TENSOR_TYPE.match(t):
                        f.tensors.add(_text(ident))
                    elif TENSOR_CONTAINER.search(t):
                        f.tensor_lists.add(_text(ident))
                    elif "auto" not in t and "Tensor" not in t:
                        f.others.add(_text(ident))
            self.funcs[fn.id] = f
            self._ranges.append(f)
            self.known_functions.add(f.name)
            if TENSOR_TYPE.match(rtype):
                self.return_tensor_funcs.add(f.name)

    def _collect_rest(self) -> None:
        for node in self.caps.get("decl", []):
            for d in _declarators(node):
                if d.type == "function_declarator" or (d.child_by_field_name("declarator") is not None and
                                                       d.child_by_field_name("declarator").type == "function_declarator"):
                    inner = d if d.type == "function_declarator" else d.child_by_field_name("declarator")
                    fname = _name(inner.child_by_field_name("declarator")).split("::")[-1]
                    self.known_functions.add(fname)
                    if TENSOR_TYPE.match(_type_text(node)):
                        self.return_tensor_funcs.add(fname)
        for node in self.caps.get("alias", []):
            ids = [c for c in node.named_children]
            if len(ids) >= 2:
                self.aliases[_text(ids[0])] = _name(ids[-1])
        for node in self.caps.get("using", []):
            t = _WS.sub(" ", _text(node))
            if re.match(r"using namespace (torch|at)\b", t):
                self.using_torch = True
        for node in self.caps.get("launch", []):
            self.facts.has_kernel = True
            f = self.func_of(node)
            if f is not None:
                f.launches = True
        for node in self.caps.get("call", []):
            callee = _name(_callee(node))
            f = self.func_of(node)
            if f is None:
                continue
            short = callee.split("::")[-1]
            if LAUNCH_CALLS.match(short) or (short in self.known_functions and short != f.name
                                             and "::" not in callee):
                f.launches = True
        # Local declarations in source order: types and `auto` inferred from tensor-valued initialisers.
        for node in self.caps.get("decl", []):
            f = self.func_of(node)
            t = _type_text(node)
            storage = _storage(node)
            for d in _declarators(node):
                ident = _declared_name(d)
                if ident is None:
                    continue
                name = _text(ident)
                if f is None:
                    if self._namespace_scope(node) and not PERSISTENT_SKIP.search(" ".join(storage) + " " + t) \
                            and not (("const" in storage) and "*" not in _text(d)):
                        self.persistent[name] = t
                    continue
                if "static" in storage and not PERSISTENT_SKIP.search(t) and \
                        not ("const" in storage and "*" not in _text(d)):
                    f.statics[name] = t
                if TENSOR_TYPE.match(t):
                    f.tensors.add(name)
                elif TENSOR_CONTAINER.search(t):
                    f.tensor_lists.add(name)
                elif "auto" in t and (v := _value(d)) is not None and self.tensor_expr(v, f):
                    f.tensors.add(name)
                elif "auto" not in t and "Tensor" not in t:
                    f.others.add(name)
                elif "auto" in t and (v := _value(d)) is not None and not self._may_be_tensor(v, f):
                    f.others.add(name)
        for node in self.caps.get("field", []):
            if "static" in _storage(node):
                for d in _declarators(node):
                    ident = _declared_name(d)
                    if ident is not None:
                        self.persistent[_text(ident)] = _type_text(node)

    def _namespace_scope(self, node: Any) -> bool:
        n = node.parent
        while n is not None:
            if n.type in ("function_definition", "compound_statement", "lambda_expression",
                          "field_declaration_list", "parameter_list", "for_statement", "template_declaration"):
                return False
            if n.type == "translation_unit":
                return True
            n = n.parent
        return False

    @staticmethod
    def _is_half_type_text(t: str) -> bool:
        return bool(HALF_TEXT.search(t))

    def _specialised_half(self, fn: Any) -> bool:
        p = fn.parent
        if p is not None and p.type == "template_declaration":
            params = p.child_by_field_name("parameters")
            if params is not None and not params.named_children:
                # template<> ...<__half>: an explicit specialisation for a half type
                return self._is_half_type_text(_text(fn.child_by_field_name("declarator")))
        return False

    def _may_be_tensor(self, node: Any, f: _Func) -> bool:
        """False where an `auto` initialiser cannot be a tensor: literals, arithmetic on non-tensors, calls to
        functions outside torch/at that the file does not declare as returning one."""
        if node.type in ("number_literal", "string_literal", "true", "false", "char_literal", "sizeof_expression"):
            return False
        if node.type == "identifier":
            return _text(node) not in f.others
        if node.type == "call_expression":
            m = _method(node)
            if m is not None:
                return m[1] not in NON_TENSOR_METHODS and (m[0] is None or self._may_be_tensor(m[0], f))
            parts = self.resolve(_name(_callee(node))).split("::")
            return parts[0] in ("torch", "at") or parts[-1] in self.return_tensor_funcs
        if node.type in ("binary_expression", "parenthesized_expression", "unary_expression", "cast_expression"):
            return any(self._may_be_tensor(c, f) for c in node.named_children if c.type != "type_descriptor")
        return True

    # -- tensor typing
    def tensor_expr(self, node: Any, f: _Func | None) -> bool:
        if node is None or f is None or f.device:
            return False
        t = node.type
        if t == "identifier":
            return _text(node) in f.tensors
        if t in ("parenthesized_expression",):
            return any(self.tensor_expr(c, f) for c in node.named_children)
        if t == "subscript_expression":
            base = node.child_by_field_name("argument")
            return base is not None and base.type == "identifier" and _text(base) in f.tensor_lists
        if t == "pointer_expression" and _text(node).startswith("*"):
            return False
        if t == "binary_expression":
            op = _text(node.child_by_field_name("operator"))
            return op in "+-*/" and (self.tensor_expr(node.child_by_field_name("left"), f) or
                                     self.tensor_expr(node.child_by_field_name("right"), f))
        if t == "conditional_expression":
            return self.tensor_expr(node.child_by_field_name("consequence"), f) or \
                self.tensor_expr(node.child_by_field_name("alternative"), f)
        if t == "call_expression":
            m = _method(node)
            if m is not None:
                recv, meth = m
                if meth in ("value", "clone", "contiguous") and recv is not None and recv.type == "identifier" and \
                        _text(recv) in f.tensor_lists:
                    return True
                return meth not in NON_TENSOR_METHODS and self.tensor_expr(recv, f)
            callee = self.resolve(_name(_callee(node)))
            parts = callee.split("::")
            if parts[0] in ("torch", "at") and len(parts) >= 2:
                return parts[-1] not in NON_TENSOR_FUNCS and not parts[-1].startswith(("k", "is_", "get"))
            return parts[-1] in self.return_tensor_funcs
        return False
