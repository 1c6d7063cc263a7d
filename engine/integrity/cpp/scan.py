"""Static rules for C++/CUDA candidate sources, read as a syntax tree (tree-sitter's CUDA grammar).

The tree tells a parameter from a variable, a declaration at namespace scope from one in a function, a call
from a comment or a string, and host code from device code, so each rule looks only where its construct can
mean what the rule says:

- library and ATen use: calls (never includes); tensor methods and operators only on expressions whose type
  is known to be a tensor (parameters, declarations, `auto` from a tensor-valued expression), in host code;
- persistent state: `static` locals, namespace-scope and static member variables; a tensor kept there fails
  only when it flows to a `return` (an output cache), else a person looks;
- streams and threads: a created or pooled stream fails only when work is launched on it without joining it
  back to the caller's stream; a host thread only when it is detached or never joined;
- precision: conversions, local variables, casts and PTX in the task-dtype's lower precisions; a half type in
  a parameter, a return type, a specialisation or an unused include is not a use;
- shape specialisation: size comparisons with a config size (a hint).

A construct inside a region the parser could not read (a syntax error, a macro it cannot expand) is never
`fail`: the rule says `suspicious` there instead. Macro bodies are parsed as statement fragments so calls
hidden in `#define`s are still seen.

The rules are split by job (this module runs them all):

- engine.integrity.cpp.vocab: the names the rules look for;
- engine.integrity.cpp.tree: tree-sitter parsing, the query and node helpers;
- engine.integrity.cpp.context: per-function facts, tensor typing and the scanner's base;
- engine.integrity.cpp.rules_library: torch/ATen compute and fallbacks, vendor libraries, try/catch;
- engine.integrity.cpp.rules_concurrency: host threads and side streams;
- engine.integrity.cpp.rules_state: persistent state (output caches, call counters);
- engine.integrity.cpp.rules_precision: lower precision and shape specialisation;
- engine.integrity.cpp.rules_files: files a source makes the compiler read (#include, #line, #embed, .incbin).
"""

from __future__ import annotations

import re
from typing import Collection, Iterable

from engine.integrity.cpp.context import CppFacts
from engine.integrity.cpp.rules_concurrency import _ConcurrencyRules
from engine.integrity.cpp.rules_files import _FileRules
from engine.integrity.cpp.rules_library import _LibraryRules
from engine.integrity.cpp.rules_precision import _PrecisionShapeRules
from engine.integrity.cpp.rules_state import _PersistentStateRules
from engine.integrity.cpp.tree import _snippet, _text
from engine.integrity.findings import SHAPE_SPECIALISATION, STATIC_CACHE, Finding

__all__ = ["CppFacts", "scan_cpp_source"]


class _Scan(_LibraryRules, _ConcurrencyRules, _PersistentStateRules, _PrecisionShapeRules, _FileRules):
    """One C++/CUDA source: pass 1 collects (`_ScanBase`), pass 2 runs every rule family."""

    def run(self) -> None:
        self.collect()
        self.rule_library_calls()
        self.rule_tensor_ops()
        self.rule_try_catch()
        self.rule_threads()
        self.rule_streams()
        if not self.fragment:
            self.rule_persistent_state()
        self.rule_precision()
        self.rule_shapes()
        self.rule_foreign_files()
        if not self.fragment:
            self.rule_macros()

    def rule_macros(self) -> None:
        """Parse each macro body as a statement fragment: calls hidden in #defines are still seen."""
        for node in self.caps.get("def", []) + self.caps.get("fdef", []):
            body = node.child_by_field_name("value")
            if body is None:
                continue
            text = _text(body).replace("\\\n", "\n")
            if not re.search(r"[A-Za-z_]\w*\s*(?:<[^;]*>)?\s*\(", text):
                continue
            sub = _Scan(self.name, "void __kbench_macro__() {\n" + text + "\n;}\n", self.dtype, set(), self.policy,
                        self.offset + node.start_point[0] - 1, fragment=True, known_functions=self.known_functions)
            sub.own_files = self.own_files
            sub.run()
            for fd in sub.found:
                if fd.hack in (STATIC_CACHE, SHAPE_SPECIALISATION):
                    continue
                self.found.append(Finding(fd.hack, fd.status, fd.file, fd.line, fd.reason + " (in a macro)",
                                          _snippet(self.lines, fd.line - self.offset), fd.confidence, fd.library))
            self.facts.has_kernel |= sub.facts.has_kernel


def scan_cpp_source(name: str, raw: str, *, task_dtype: str = "float32", shape_values: Iterable[int] = (),
                    policy: str = "pure", line_offset: int = 0,
                    own_files: Collection[str] = ()) -> tuple[list[Finding], CppFacts]:
    """Findings for one C++/CUDA source, and the facts the candidate-level rules need. `own_files`: the
    candidate's file names (what its #line, #embed and .incbin may name without a finding)."""
    shapes = {v for v in shape_values if isinstance(v, int) and v >= 8}
    scan = _Scan(name, raw, task_dtype, shapes, policy, line_offset)
    scan.own_files = tuple(own_files)
    scan.run()
    return scan.found, scan.facts
