"""C++/CUDA rules on state kept between calls: static locals, namespace-scope and static member variables that
reach the output (an output cache), skip the kernel for an input seen before, or count calls."""

from __future__ import annotations

import re
from typing import Any

from engine.integrity.cpp.context import _Func, _ScanBase
from engine.integrity.cpp.tree import (
    _base_name,
    _callee,
    _declarators,
    _declared_name,
    _flows,
    _has_data_ptr,
    _mentions,
    _method,
    _name,
    _receiver_of_data_ptr,
    _text,
    _value,
    _walk,
)
from engine.integrity.cpp.vocab import CALL_COUNTER, INTEGRAL, KEY_METHODS
from engine.integrity.findings import FAIL, STATIC_CACHE, SUSPICIOUS


class _PersistentStateRules(_ScanBase):
    """Persistent state: output caches, input-address caches, call counters."""

    def rule_persistent_state(self) -> None:
        """State kept between calls fails where it reaches the output: returned (directly, through a local
        alias, a map lookup or a copy) or used to skip the kernel for an input address seen before. A scratch
        buffer, a descriptor cache keyed by address or a logging counter is honest and not reported."""
        for f in self.funcs.values():
            if f.device:
                continue
            persistent = {**self.persistent, **f.statics}
            if not persistent:
                continue
            keyed = {k for n in _walk(f.node) if (k := self._pointer_keyed(n, set(persistent)))}
            holders = {n for n, t in persistent.items() if "Tensor" in t} | keyed
            tainted = set(holders)
            for n in _walk(f.node):   # source order: a flow's source is seen before its uses
                if n.type == "init_declarator":
                    v = _value(n)
                    ident = _declared_name(n)
                    if v is not None and ident is not None and _flows(v, tainted):
                        tainted.add(_text(ident))
                elif n.type == "assignment_expression":
                    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
                    if left is not None and left.type == "identifier" and right is not None and \
                            _flows(right, tainted) and _text(left) not in persistent:
                        tainted.add(_text(left))
                elif n.type == "call_expression":
                    m = _method(n)
                    args = n.child_by_field_name("arguments")
                    if m is not None and m[1] in ("copy_", "set_") and args is not None and _flows(args, tainted):
                        if (dst := _base_name(m[0])) and dst not in persistent:
                            tainted.add(dst)
                    elif re.match(r"^(?:cudaMemcpy\w*|memcpy|std::memcpy)$", _name(_callee(n))) and args is not None \
                            and len(args.named_children) >= 2 and _mentions(args.named_children[1], tainted):
                        if (dst := _base_name(_receiver_of_data_ptr(args.named_children[0]))) and dst not in persistent:
                            tainted.add(dst)
            for n in _walk(f.node):
                if n.type == "return_statement" and (hit := _flows(n, tainted)):
                    source = hit if hit in holders else sorted(holders)[0]
                    self.add(STATIC_CACHE, FAIL, n, f"returns `{hit}`, which carries what persistent `{source}` "
                             f"({persistent.get(source, 'static')}) kept from an earlier call: an output cache", 0.95)
            for n in _walk(f.node):
                key = self._pointer_keyed(n, set(persistent))
                if key is not None and self._early_exit_on(n, f):
                    self.add(STATIC_CACHE, FAIL, n, f"persistent `{key}` compares the input's data_ptr and the call "
                             "returns early on a match: work skipped for an input seen before", 0.9)
            for name, t in f.statics.items():
                if INTEGRAL.search(t) and "*" not in t and CALL_COUNTER.search(name) and \
                        self._incremented(name, f) and self._guards_return(name, f):
                    self.add(STATIC_CACHE, SUSPICIOUS, self._decl_node(name, f) or f.node,
                             f"static counter `{name}` decides an early return: behaviour that depends on how "
                             "often the candidate was called (call-count cache)", 0.6)

    @staticmethod
    def _guards_return(name: str, f: _Func) -> bool:
        for n in _walk(f.node):
            if n.type == "if_statement":
                cond, cons = n.child_by_field_name("condition"), n.child_by_field_name("consequence")
                if cond is not None and _mentions(cond, {name}) and cons is not None and \
                        any(x.type == "return_statement" for x in _walk(cons)):
                    return True
        return False

    def _decl_node(self, name: str, f: _Func) -> Any:
        for n in self.caps.get("decl", []):
            if f.node.start_byte <= n.start_byte < f.node.end_byte and \
                    any(_text(_declared_name(d) or d) == name for d in _declarators(n)):
                return n
        return None

    @staticmethod
    def _incremented(name: str, f: _Func) -> bool:
        for n in _walk(f.node):
            if n.type == "update_expression" and _mentions(n, {name}):
                return True
            if n.type == "assignment_expression" and _text(n.child_by_field_name("operator")) in ("+=", "-=") and \
                    _text(n.child_by_field_name("left")) == name:
                return True
        return False

    def _pointer_keyed(self, n: Any, persistent: set[str]) -> str | None:
        if n.type == "assignment_expression":
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if (hit := _mentions(left, persistent)) and right is not None and _has_data_ptr(right):
                return hit
        elif n.type == "subscript_expression":
            base = n.child_by_field_name("argument")
            if base is not None and _text(base) in persistent and _has_data_ptr(n):
                return _text(base)
        elif n.type == "call_expression":
            m = _method(n)
            if m is not None and m[1] in KEY_METHODS and m[0] is not None and _text(m[0]) in persistent and \
                    _has_data_ptr(n.child_by_field_name("arguments")):
                return _text(m[0])
        elif n.type == "binary_expression" and _text(n.child_by_field_name("operator")) in ("==", "!="):
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            for a, b in ((left, right), (right, left)):
                if a is not None and b is not None and (hit := _mentions(a, persistent)) and _has_data_ptr(b):
                    return hit
        return None

    @staticmethod
    def _early_exit_on(n: Any, f: _Func) -> bool:
        p = n.parent
        while p is not None and p.id != f.node.id:
            if p.type == "condition_clause" and p.parent is not None and p.parent.type == "if_statement":
                cons = p.parent.child_by_field_name("consequence")
                return f.launches and cons is not None and any(x.type == "return_statement" for x in _walk(cons))
            p = p.parent
        return False
