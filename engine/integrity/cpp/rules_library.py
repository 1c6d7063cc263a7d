"""C++/CUDA rules on library use: torch/ATen compute (calls, tensor methods and operators) and fallbacks to it,
vendor libraries (cuBLAS, cuDNN, CUTLASS, CUB, Thrust...), TF32 switches, and catch clauses that hide a
failing kernel."""

from __future__ import annotations

from typing import Any

from engine.integrity.cpp.context import _ScanBase
from engine.integrity.cpp.tree import _callee, _contains_call, _method, _name, _text, _walk
from engine.integrity.cpp.vocab import (
    ALLOWED_TORCH_FUNCS,
    COMPUTE_METHODS,
    COMPUTE_NAMESPACES,
    CUTLASS_LIBRARY,
    RETHROW_CALLS,
    TF32_SWITCHES,
    THRUST_UTILITIES,
    TORCH_COMPUTE_FUNCS,
    VENDOR_HANDLES,
    VENDOR_PREFIX,
)
from engine.integrity.findings import (
    ATEN_FALLBACK,
    FAIL,
    INFO,
    LOWER_PRECISION,
    SUSPICIOUS,
    TORCH_COMPUTE,
    TRY_CATCH,
    VENDOR_LIBRARY,
    fallback_status,
    library_use_status,
)


def fn_unqualified_compute(name: str) -> bool:
    return name in TORCH_COMPUTE_FUNCS and name not in ("max", "min", "abs", "exp", "log", "sqrt", "pow", "sort")


class _LibraryRules(_ScanBase):
    """torch/ATen compute and fallbacks, vendor libraries, try/catch fallbacks."""

    def _compute_use(self, node: Any, what: str, confidence: float = 0.95, library: str = "ATen") -> None:
        """ATen compute at `node`: a fallback when on a branch (or in a catch) of a function that also launches
        the candidate's own kernel, else a plain library use."""
        f = self.func_of(node)
        if f is not None and f.launches and self._on_branch(node, f.node):
            self.add(ATEN_FALLBACK, fallback_status(self.policy), node,
                     f"{what} on a branch of a function that also launches the candidate's kernel: a fallback to "
                     "ATen for inputs the kernel does not handle", confidence, library)
            return
        status = library_use_status(self.policy)
        self.add(TORCH_COMPUTE, status, node,
                 f"{what}: ATen computes part of the result" + (
                     " instead of the candidate's kernel" if status == FAIL else " (allowed by the engineering policy)"),
                 confidence, library)

    @staticmethod
    def _on_branch(node: Any, stop: Any) -> bool:
        n, child = node.parent, node
        while n is not None and n.id != stop.id:
            if n.type == "if_statement" and child.id != (n.child_by_field_name("condition") or child).id:
                return True
            if n.type in ("catch_clause", "case_statement"):
                return True
            if n.type == "conditional_expression" and child.id != (n.child_by_field_name("condition") or child).id:
                return True
            n, child = n.parent, n
        return False

    def rule_library_calls(self) -> None:
        for call in self.caps.get("call", []):
            if not self.host(call):
                fnode = _callee(call)
                callee = _name(fnode)
                if callee.startswith(("cublas", "cudnn")):   # device-side library APIs (cuBLASDx...) stay tagged
                    self._vendor(call, callee, self._vendor_name(callee) or "cuBLAS")
                continue
            fnode = _callee(call)
            if fnode is None:
                continue
            callee = self.resolve(_name(fnode))
            short = callee.split("::")[-1]
            lib = self._vendor_name(callee)
            if lib:
                self._vendor(call, callee, lib)
                continue
            if short in TF32_SWITCHES and self.dtype == "float32":
                self.add(LOWER_PRECISION, FAIL, call, f"calls {short}: lets cuBLAS/cuDNN round float32 to "
                         "TF32 or reduce in lower precision in a float32 task")
                continue
            parts = callee.split("::")
            if parts[0] in ("torch", "at", "c10") and len(parts) >= 2 and fnode.type != "field_expression":
                ns, path, fn = parts[0], "::".join(parts[1:-1]) + ("::" if len(parts) > 2 else ""), parts[-1]
                if ns == "c10" and not path.startswith(("nn", "native")):
                    continue
                if any(path.startswith(p) for p in COMPUTE_NAMESPACES) or (
                        not path and fn in TORCH_COMPUTE_FUNCS and fn not in ALLOWED_TORCH_FUNCS):
                    self._compute_use(call, f"calls {callee}")
                elif not path and fn[:1].islower() and fn not in ALLOWED_TORCH_FUNCS and \
                        not fn.startswith(("is_", "k", "get", "set")):
                    status = SUSPICIOUS if self.policy == "pure" else INFO
                    self.add(TORCH_COMPUTE, status, call, f"calls {callee}, which is neither an allocation, view or "
                             "check function nor a known compute op: it may compute part of the result in ATen",
                             0.5, "ATen")
            elif self.using_torch and len(parts) == 1 and fn_unqualified_compute(short) and \
                    short not in self.known_functions:
                self.add(TORCH_COMPUTE, SUSPICIOUS if self.policy == "pure" else INFO, call,
                         f"calls {short} unqualified under `using namespace torch/at`: it may be an ATen compute op",
                         0.5, "ATen")
        # CUTLASS's library operators appear as types (using Gemm = cutlass::gemm::device::Gemm<...>): one finding a
        # line, a call on it (cutlass::device_kernel<K><<<...>>>) included.
        seen = {f.line - self.offset for f in self.found if f.library == "CUTLASS"}
        for q in self.caps.get("qual", []):
            if q.parent is not None and q.parent.type == "qualified_identifier":
                continue
            if CUTLASS_LIBRARY.match(_name(q)):
                line = q.start_point[0] + 1
                if line not in seen:
                    seen.add(line)
                    self._vendor(q, _name(q), "CUTLASS")

    @staticmethod
    def _vendor_name(callee: str) -> str:
        short = callee.split("::")[-1]
        for prefix, lib in VENDOR_PREFIX:
            if short.startswith(prefix):
                return lib
        if short in VENDOR_HANDLES:
            return VENDOR_HANDLES[short]
        parts = callee.split("::")
        if parts[0] == "cub" and len(parts) >= 2 and parts[1].startswith("Device"):
            return "CUB"
        if parts[0] == "thrust" and len(parts) >= 2 and parts[-1] not in THRUST_UTILITIES:
            return "Thrust"
        if CUTLASS_LIBRARY.match(callee):
            return "CUTLASS"
        return ""

    def _vendor(self, node: Any, callee: str, lib: str) -> None:
        status = library_use_status(self.policy)
        self.add(VENDOR_LIBRARY, status, node,
                 f"calls {callee}: {lib} " + ("computes what the candidate must compute itself (pure policy)"
                                             if status == FAIL else "use, allowed by the engineering policy"),
                 0.95, lib)

    def rule_tensor_ops(self) -> None:
        for call in self.caps.get("call", []):
            m = _method(call)
            if m is None or m[1] not in COMPUTE_METHODS:
                if m is not None and m[1] in ("half", "bfloat16") and self.dtype == "float32":
                    f = self.func_of(call)
                    if f is not None and not f.device and self.tensor_expr(m[0], f):
                        self.add(LOWER_PRECISION, FAIL, call, f"converts a tensor with .{m[1]}() in a float32 task")
                continue
            f = self.func_of(call)
            if f is None or f.device:
                continue
            recv, meth = m
            if self.tensor_expr(recv, f):
                self._compute_use(call, f"tensor method .{meth}()")
            elif recv is not None and recv.type == "identifier" and _text(recv) not in f.tensors and \
                    self._torch_file():
                # A receiver of unknown type: a person looks (a struct of the candidate's may have such a method).
                if _text(recv) not in f.others and _text(recv) not in self.known_functions:
                    self.add(TORCH_COMPUTE, SUSPICIOUS if self.policy == "pure" else INFO, call,
                             f"method .{meth}() on `{_text(recv)}`, whose type the scanner cannot tell: if it is a "
                             "tensor, ATen computes part of the result", 0.4, "ATen")
        for node in self.caps.get("bin", []):
            op = _text(node.child_by_field_name("operator"))
            if op not in ("+", "-", "*", "/", "%", "@"):
                continue
            f = self.func_of(node)
            if f is None or f.device:
                continue
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if self.tensor_expr(left, f) or self.tensor_expr(right, f):
                # report the outermost tensor expression once
                p = node.parent
                while p is not None and p.type == "parenthesized_expression":
                    p = p.parent
                if p is not None and p.type == "binary_expression" and self.tensor_expr(p, f):
                    continue
                self._compute_use(node, f"operator {op} on tensors")
        for node in self.caps.get("assign", []):
            op = _text(node.child_by_field_name("operator"))
            if op in ("+=", "-=", "*=", "/=") and self.tensor_expr(node.child_by_field_name("left"), self.func_of(node)):
                self._compute_use(node, f"operator {op} on a tensor")
        for node in self.caps.get("unary", []):
            if _text(node.child_by_field_name("operator")) == "-" and \
                    self.tensor_expr(node.child_by_field_name("argument"), self.func_of(node)):
                self._compute_use(node, "unary minus on a tensor")

    def _torch_file(self) -> bool:
        return "torch" in self.raw or "ATen" in self.raw or "at::" in self.raw

    def rule_try_catch(self) -> None:
        for node in self.caps.get("try", []):
            for clause in (c for c in node.children if c.type == "catch_clause"):
                body = clause.child_by_field_name("body")
                if body is None:
                    continue
                rethrows = "throw" in {n.type for n in _walk(body)} or _contains_call(
                    body, lambda c: RETHROW_CALLS.match(_name(_callee(c)) or "")) is not None
                returns = any(n.type == "return_statement" for n in _walk(body))
                computes = _contains_call(body, lambda c: self._computes(c)) is not None or \
                    any(n.type == "kernel_call_syntax" for n in _walk(body))
                if rethrows and not returns:
                    continue
                if returns or computes:
                    self.add(TRY_CATCH, fallback_status(self.policy), clause,
                             "a catch clause that returns or computes a result: a fallback path that hides the "
                             "candidate's kernel failing (it rethrows nothing)", 0.9)
                else:
                    self.add(TRY_CATCH, SUSPICIOUS, clause, "a catch clause swallows an error and goes on: a failing "
                             "kernel could go unnoticed", 0.5)

    def _computes(self, call: Any) -> bool:
        callee = self.resolve(_name(_callee(call)))
        parts = callee.split("::")
        if parts[0] in ("torch", "at") and parts[-1] not in ALLOWED_TORCH_FUNCS:
            return True
        m = _method(call)
        return (m is not None and m[1] in COMPUTE_METHODS) or bool(self._vendor_name(callee)) or \
            parts[-1] in self.known_functions
