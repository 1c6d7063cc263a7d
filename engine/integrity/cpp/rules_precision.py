"""C++/CUDA rules that depend on the task's config: lower precision than the task's dtype (half/bfloat16/fp8
types, conversions, PTX, TF32 without a residual split, library math modes) and shape specialisation (sizes
compared with, or constants equal to, a config size)."""

from __future__ import annotations

import re
from typing import Any

from engine.integrity.cpp.context import _ScanBase
from engine.integrity.cpp.tree import (
    _callee,
    _declarators,
    _declared_name,
    _int_literal,
    _int_text,
    _method,
    _name,
    _storage,
    _text,
    _type_text,
    _value,
    _walk,
)
from engine.integrity.cpp.vocab import (
    FAST_MATH_ENUMS,
    HALF_CALLS,
    HALF_QUALIFIED,
    HALF_SCALARS,
    HALF_TYPES,
    INTEGRAL,
    LOW_DTYPE_CALLS,
    PTX_LOW,
    PTX_TF32,
    SHAPE_NAME,
    SIZE_METHODS,
    SIZE_NAMES,
    TF32_CALLS,
    TF32_SPLIT_CALLS,
)
from engine.integrity.findings import FAIL, LOWER_PRECISION, SHAPE_SPECIALISATION, SUSPICIOUS


class _PrecisionShapeRules(_ScanBase):
    """Lower precision in a float32 task, and shape specialisation."""

    def rule_precision(self) -> None:
        if self.dtype != "float32":
            return
        # lower-precision uses: types in local declarations, casts and template arguments; conversions; PTX
        for node in self.caps.get("type", []):
            if _text(node) in HALF_TYPES:
                self._half_use(node, _text(node))
        for node in self.caps.get("qual", []):
            if node.parent is not None and node.parent.type == "qualified_identifier":
                continue
            name = _name(node)
            if HALF_QUALIFIED.match(name):
                self._half_use(node, name)
            elif HALF_SCALARS.match(name) or (name.endswith(("::kHalf", "::kBFloat16", "::kFloat16"))):
                self._half_dtype_arg(node, name)
        for node in self.caps.get("ident", []):
            t = _text(node)
            if t in ("kHalf", "kBFloat16", "kFloat16") and (node.parent is None or
                                                           node.parent.type != "qualified_identifier"):
                self._half_dtype_arg(node, t)
            elif FAST_MATH_ENUMS.match(t):
                self.add(LOWER_PRECISION, FAIL, node, f"{t}: a library math mode that rounds float32 to TF32/half "
                         "in a float32 task", 0.9)
        for call in self.caps.get("call", []):
            callee = _name(_callee(call)).split("::")[-1]
            if HALF_CALLS.match(callee):
                self._half_use(call, callee + "()")
        for node in self.caps.get("asm", []):
            ptx = self._asm_text(node)
            if m := PTX_LOW.search(ptx):
                self._half_use(node, f"PTX {m.group(0)}")
        # TF32 without the 3xTF32 residual split
        tf32: list[Any] = [c for c in self.caps.get("call", []) if _name(_callee(c)) in TF32_CALLS or
                           _name(_callee(c)).endswith("__float_to_tf32")]
        tf32 += [q for q in self.caps.get("qual", []) if _name(q).endswith("precision::tf32")]
        tf32 += [a for a in self.caps.get("asm", []) if PTX_TF32.search(self._asm_text(a))]
        if tf32 and not self._tf32_split():
            first = min(tf32, key=lambda n: n.start_byte)
            self.add(LOWER_PRECISION, FAIL, first, "TF32 rounding without a hi/lo residual split (3xTF32): products "
                     "keep 10 mantissa bits in a float32 task", 0.9)

    @staticmethod
    def _asm_text(node: Any) -> str:
        return " ".join(_text(s) for s in _walk(node) if s.type in ("string_content", "raw_string_content",
                                                                     "escape_sequence"))

    def _tf32_split(self) -> bool:
        for node in self.caps.get("bin", []):
            if _text(node.child_by_field_name("operator")) != "-":
                continue
            right = node.child_by_field_name("right")
            while right is not None and right.type == "parenthesized_expression" and right.named_children:
                right = right.named_children[0]
            if right is not None and right.type == "call_expression" and \
                    TF32_SPLIT_CALLS.search(_name(_callee(right)) or ""):
                return True
            if right is not None and right.type == "cast_expression" and "float" in _text(right.child_by_field_name("type")):
                return True
            # lo = v - hi, residual = ...: a named residual
            p = node.parent
            while p is not None and p.type == "parenthesized_expression":
                p = p.parent
            target = None
            if p is not None and p.type == "init_declarator":
                target = _declared_name(p)
            elif p is not None and p.type == "assignment_expression":
                target = p.child_by_field_name("left")
            if target is not None and re.search(r"lo|low|res|resid", _text(target)):
                return True
        return False

    def _half_use(self, node: Any, what: str) -> None:
        role = self._type_role(node)
        if role is None:
            return
        f = self.func_of(node)
        if f is not None and f.half_typed or self._in_constexpr_half_branch(node):
            # The half path of a generic kernel: a float32 task only reaches it through a conversion to half,
            # and that conversion is a use this rule reports where it happens.
            return
        self.add(LOWER_PRECISION, FAIL, node, f"{what} ({role}): half/bfloat16/fp8 arithmetic in a float32 task "
                 "(lower precision than the task's dtype)", 0.9)

    def _type_role(self, node: Any) -> str | None:
        """Where a half type or call sits; None where it is no use (parameters, return types, typedefs...)."""
        if node.type in ("call_expression", "gnu_asm_expression"):
            return "a conversion or half arithmetic" if node.type == "call_expression" else "inline PTX"
        n, child = node.parent, node
        while n is not None:
            t = n.type
            if t in ("parameter_declaration", "optional_parameter_declaration", "template_parameter_list",
                     "type_definition", "alias_declaration", "field_declaration", "preproc_arg"):
                return None
            if t == "template_argument_list":
                owner = n.parent
                if owner is not None and _name(owner).split("::")[-1].startswith(("is_same", "is_convertible",
                                                                                   "numeric_limits")):
                    return None
            if t == "cast_expression":
                return "a cast"
            if t == "sizeof_expression":
                return None
            if t == "declaration":
                if any(d.type == "function_declarator" for d in _declarators(n)):
                    return None
                return "a local variable" if self.func_of(n) is not None else None
            if t == "function_definition":
                # the type field is the return type: not a use
                return None if child.id == (n.child_by_field_name("type") or child).id or \
                    child.type == "function_declarator" else "in a function body"
            if t in ("call_expression",) and n.child_by_field_name("function") is not None and \
                    n.child_by_field_name("function").start_byte <= node.start_byte < \
                    n.child_by_field_name("function").end_byte:
                return "a template argument of a call"
            if t in ("compound_statement",):
                return "in a function body"
            if t == "translation_unit":
                return None
            n, child = n.parent, n
        return None

    def _in_constexpr_half_branch(self, node: Any) -> bool:
        n = node.parent
        while n is not None and n.type != "function_definition":
            if n.type == "if_statement" and "constexpr" in {c.type for c in n.children}:
                cond = n.child_by_field_name("condition")
                if cond is not None and self._is_half_type_text(_text(cond)):
                    return True
            n = n.parent
        return False

    def _half_dtype_arg(self, node: Any, name: str) -> None:
        """kHalf/ScalarType::Half: a use only as the dtype of a conversion or an allocation."""
        p = node.parent
        while p is not None and p.type not in ("argument_list", "condition_clause", "case_statement",
                                               "binary_expression", "compound_statement", "init_declarator"):
            p = p.parent
        if p is None or p.type != "argument_list":
            return
        call = p.parent
        callee = _name(call.child_by_field_name("function") if call is not None else None)
        m = _method(call) if call is not None and call.type == "call_expression" else None
        short = m[1] if m else callee.split("::")[-1]
        if short in LOW_DTYPE_CALLS:
            self.add(LOWER_PRECISION, FAIL, node, f"{name} as the dtype of {short}(): a tensor converted or "
                     "allocated in lower precision in a float32 task", 0.9)

    def rule_shapes(self) -> None:
        if not self.shapes:
            return
        for node in self.caps.get("bin", []):
            op = _text(node.child_by_field_name("operator"))
            if op not in ("==", "!="):
                continue
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            for a, b in ((left, right), (right, left)):
                lit = _int_literal(b)
                if lit is not None and lit in self.shapes and self._size_expr(a):
                    self.add(SHAPE_SPECIALISATION, SUSPICIOUS, node, f"compares a size with the literal {lit}, one "
                             "of the task's config sizes: code specialised to a benchmark shape", 0.6)
                    break
        for node in self.caps.get("def", []):
            name, value = _text(node.child_by_field_name("name")), _text(node.child_by_field_name("value"))
            lit = _int_text(value)
            if lit is not None and lit in self.shapes and SHAPE_NAME.match(name):
                self.add(SHAPE_SPECIALISATION, SUSPICIOUS, node, f"constant {name} = {lit} equals a config size: a "
                         "problem dimension hard-coded at compile time", 0.5)
        for node in self.caps.get("decl", []):
            storage = _storage(node)
            if not ({"const", "constexpr"} & storage or "constexpr" in _text(node).split()):
                continue
            if not INTEGRAL.search(_type_text(node)):
                continue
            for d in _declarators(node):
                ident, v = _declared_name(d), _value(d)
                lit = _int_literal(v) if v is not None else None
                if ident is not None and lit is not None and lit in self.shapes and SHAPE_NAME.match(_text(ident)):
                    self.add(SHAPE_SPECIALISATION, SUSPICIOUS, node, f"constant {_text(ident)} = {lit} equals a "
                             "config size: a problem dimension hard-coded at compile time", 0.5)

    @staticmethod
    def _size_expr(node: Any) -> bool:
        if node is None:
            return False
        if node.type == "identifier":
            return _text(node) in SIZE_NAMES
        if node.type == "call_expression":
            m = _method(node)
            return m is not None and m[1] in SIZE_METHODS
        if node.type == "subscript_expression":
            return _PrecisionShapeRules._size_expr(node.child_by_field_name("argument"))
        if node.type == "field_expression":
            return _text(node.child_by_field_name("field")) in SIZE_NAMES
        if node.type in ("parenthesized_expression", "cast_expression"):
            return any(_PrecisionShapeRules._size_expr(c) for c in node.named_children)
        return False
