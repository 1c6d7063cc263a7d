"""C++/CUDA rules on work that escapes the caller's stream: host threads, host callbacks, OpenMP, and side
streams (created or pooled) that are never joined back."""

from __future__ import annotations

import re
from typing import Any

from engine.integrity.cpp.context import _ScanBase
from engine.integrity.cpp.tree import (
    _WS,
    _base_name,
    _callee,
    _declared_name,
    _idents,
    _mentions,
    _method,
    _name,
    _text,
    _walk,
)
from engine.integrity.cpp.vocab import (
    HOST_CALLBACKS,
    STREAM_CREATE,
    STREAM_NON_WORK,
    STREAM_SOURCES,
    THREAD_CALLS,
    THREAD_TYPES,
)
from engine.integrity.findings import FAIL, HOST_THREAD, SIDE_STREAM, SUSPICIOUS


def _last(uses: dict[str, Any], key: str, node: Any) -> None:
    """Keep the last use of each stream: a join must come after it."""
    if key not in uses or uses[key].end_byte < node.end_byte:
        uses[key] = node


class _ConcurrencyRules(_ScanBase):
    """Host threads and side streams."""

    def rule_threads(self) -> None:
        creators: list[tuple[Any, str]] = []
        for call in self.caps.get("call", []):
            callee = _name(_callee(call))
            if callee in THREAD_CALLS:
                creators.append((call, THREAD_CALLS[callee]))
            elif callee.split("::")[-1] in HOST_CALLBACKS:
                self.add(HOST_THREAD, SUSPICIOUS, call, f"{callee.split('::')[-1]}: a host callback on the stream; "
                         "its work is outside the candidate's kernels (a person checks what it does)", 0.6)
        for node in self.caps.get("decl", []):
            if THREAD_TYPES.match(_name(node.child_by_field_name("type"))):
                creators.append((node, _name(node.child_by_field_name("type"))))
        for node, what in creators:
            f = self.func_of(node)
            scope = f.node if f is not None else node
            calls = {m[1] for c in _walk(scope) if c.type == "call_expression" and (m := _method(c)) is not None}
            callees = {_name(_callee(c)) for c in _walk(scope) if c.type == "call_expression"}
            joined = bool({"join", "get", "wait"} & calls) or "pthread_join" in callees
            detached = "detach" in calls or "pthread_detach" in callees
            if detached or not joined:
                self.add(HOST_THREAD, FAIL, node, f"{what} {'detached' if detached else 'never joined'}: work on a "
                         "host thread outlives the call and escapes the timed stream", 0.95)
            else:
                self.add(HOST_THREAD, SUSPICIOUS, node, f"{what}, joined before the call returns: host work inside the "
                         "call (a person checks what the thread does)", 0.5)
        for node in self.caps.get("pcall", []):
            t = _WS.sub(" ", _text(node)).strip()
            if re.match(r"#\s*pragma omp\b", t):
                self.add(HOST_THREAD, SUSPICIOUS, node, "OpenMP in the candidate: host threads do work inside the "
                         "call (a person checks what they do)", 0.5)

    def rule_streams(self) -> None:
        side: dict[str, Any] = {}
        for call in self.caps.get("call", []):
            callee = _name(_callee(call)).split("::")[-1]
            if callee in STREAM_SOURCES:
                owner = self._assigned_to(call)
                if owner:
                    side[owner] = call
                else:
                    side[f"<{callee}@{call.start_byte}>"] = call
            elif STREAM_CREATE.match(callee):
                args = call.child_by_field_name("arguments")
                first = args.named_children[0] if args is not None and args.named_children else None
                ident = _base_name(first)
                if ident:
                    side[ident] = call
        per_thread = [i for i in self.caps.get("ident", []) if _text(i) == "cudaStreamPerThread"]
        names = {n for n in side if not n.startswith("<")}
        used: dict[str, Any] = {}
        for launch in self.caps.get("launch", []):
            args = [c for c in launch.named_children]
            if len(args) >= 4 and (hit := _mentions(args[3], names | {"cudaStreamPerThread"})):
                _last(used, hit, launch)
        for call in self.caps.get("call", []):
            callee = _name(_callee(call)).split("::")[-1]
            if STREAM_NON_WORK.match(callee) or callee in STREAM_SOURCES:
                continue
            args = call.child_by_field_name("arguments")
            m = _method(call)
            recv_hit = m is not None and m[0] is not None and m[0].type == "identifier" and _text(m[0]) in names \
                and m[1] not in ("stream", "id", "query", "synchronize", "device", "device_index", "priority")
            hit = _mentions(args, names | {"cudaStreamPerThread"}) if args is not None else None
            if hit or recv_hit:
                _last(used, hit or _text(m[0]), call)
        # inline uses of a pooled stream: launch(..., at::cuda::getStreamFromPool().stream())
        for key, call in side.items():
            if key.startswith("<") and call.parent is not None and call.parent.type != "init_declarator":
                _last(used, key, call)
        for ident in per_thread:
            _last(used, "cudaStreamPerThread", ident)
        for key, node in used.items():
            f = self.func_of(node)
            scope = f.node if f is not None else self.tree.root_node
            if not self._joined(scope, names, node.end_byte):
                self.add(SIDE_STREAM, FAIL, node, f"work launched on stream `{key.strip('<>').split('@')[0]}`, "
                         "not the caller's current stream, and never joined back: it escapes the timing events "
                         "(launch on at::cuda::getCurrentCUDAStream())", 0.95)
        for key, node in side.items():
            if key not in used and not key.startswith("<"):
                self.add(SIDE_STREAM, SUSPICIOUS, node, f"creates stream `{key}` that no launch the scanner can see "
                         "uses: a person checks where its work goes", 0.3)

    @staticmethod
    def _assigned_to(call: Any) -> str:
        p = call.parent
        while p is not None and p.type in ("call_expression", "field_expression", "argument_list",
                                          "parenthesized_expression"):
            if p.type == "argument_list":
                return ""
            p = p.parent
        if p is not None and p.type == "init_declarator":
            ident = _declared_name(p)
            return _text(ident) if ident is not None else ""
        if p is not None and p.type == "assignment_expression":
            left = p.child_by_field_name("left")
            ident = next(iter(_idents(left)), None) if left is not None else None
            return _text(ident) if ident is not None else ""
        return ""

    @staticmethod
    def _joined(scope: Any, side: set[str], after: int) -> bool:
        """Is work on the side streams joined back after byte `after`: an event the caller's stream waits
        for (cudaStreamWaitEvent / CUDAEvent::block on a stream that is not a side stream), or a synchronise
        of the side stream or the device?"""
        for n in _walk(scope):
            if n.type != "call_expression" or n.start_byte < after:
                continue
            callee = _name(_callee(n)).split("::")[-1]
            m = _method(n)
            args = n.child_by_field_name("arguments")
            first = args.named_children[0] if args is not None and args.named_children else None
            if callee == "cudaStreamWaitEvent" and first is not None and _mentions(first, side) is None:
                return True
            if callee == "cudaDeviceSynchronize" or (callee == "cudaStreamSynchronize" and first is not None
                                                     and _mentions(first, side)):
                return True
            if m is not None and m[1] == "block" and first is not None and _mentions(first, side) is None:
                return True
            if m is not None and m[1] == "synchronize" and m[0] is not None and _mentions(m[0], side):
                return True
        return False
