"""The C++/CUDA rule for files a candidate makes the compiler read: `foreign-file`.

A compiler reads more than the candidate's sources when a source tells it to, and what it reads can come back in
its messages (which reach the verdict, the workspace note and the repair prompt) or in the object itself:
`#include "/etc/shadow"` and `#line 5 "/etc/shadow"` followed by an error quote the file's lines; `#embed` and an
assembler `.incbin` put its bytes into the library; `__has_include` of a path probes for it. The compilers' jail
is what keeps such files out of reach (engine/jail: no /etc beyond what compilers need, no home folders); this
rule says so before anything is compiled, and names the attempt.

`fail` where the path is absolute or leaves the candidate's folder (`..`): no honest candidate needs that. A
relative path is the candidate's own file or one the compiler finds on its search path (the toolkit, torch): fine
for #include; `suspicious` for `#line`, `#embed`, `.incbin` and `.include` naming a file the candidate does not
have; a computed `#include MACRO` is `suspicious` (the scanner cannot tell where it points).

Directives are read as the preprocessor reads them, by lines (comments removed, continuation lines joined): a
C++ syntax tree has no node for most of them (tree-sitter's grammar reads `__has_include(...)` as an error).
Assembler directives are read from `asm` statements of the syntax tree.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection
from typing import Any

from engine.integrity.cpp.context import _ScanBase
from engine.integrity.cpp.tree import _text
from engine.integrity.findings import FAIL, FOREIGN_FILE, SUSPICIOUS, Finding

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_DIRECTIVE = re.compile(r"^\s*#\s*(include_next|include|import|embed|line|if|elif|pragma)\b(.*)$")
_QUOTED = re.compile(r'"([^"\n]*)"|<([^<>\n]*)>')
_PROBE = re.compile(r"__has_(?:include(?:_next)?|embed)\s*\(\s*(?:\"([^\"\n]*)\"|<([^<>\n]*)>)")
_ASM_FILE = re.compile(r"\.(incbin|include)\s+\"?([^\"\s,;]+)")


def outside(path: str) -> bool:
    """An absolute path, or one that climbs out of the folder it is named from."""
    norm = posixpath.normpath(path.replace("\\", "/"))
    return path.startswith(("/", "\\", "~")) or norm == ".." or norm.startswith("../")


def directive_lines(raw: str) -> list[tuple[int, str]]:
    """(line number, text) of each logical line, continuation lines joined, comments removed (a comment keeps its
    newlines so the numbers stay right)."""
    text = _COMMENTS.sub(lambda m: "\n" * m.group(0).count("\n"), raw)
    out: list[tuple[int, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        start, cur = i + 1, lines[i]
        while cur.endswith("\\") and i + 1 < len(lines):
            i += 1
            cur = cur[:-1] + lines[i]
        out.append((start, cur))
        i += 1
    return out


def foreign_file_findings(name: str, raw: str, own_files: Collection[str], line_offset: int = 0) -> list[Finding]:
    """The directives of one source that make the compiler read a file other than the candidate's."""
    own = {posixpath.normpath(f) for f in own_files}
    found: list[Finding] = []

    def add(line: int, status: str, what: str, path: str, snippet: str) -> None:
        where = "an absolute path or one outside the candidate's folder" if status == FAIL else \
            "a file that is not one of the candidate's"
        found.append(Finding(FOREIGN_FILE, status, name, line + line_offset,
                             f"{what} reads {path!r}, {where}: a compiler's message or the library it builds "
                             "could carry that file's content out", snippet.strip()[:160], 1.0 if status == FAIL
                             else 0.6))

    for line, text in directive_lines(raw):
        m = _DIRECTIVE.match(text)
        if not m:
            continue
        kind, rest = m.group(1), m.group(2)
        if kind in ("if", "elif"):
            for probe in _PROBE.finditer(rest):
                path = probe.group(1) or probe.group(2) or ""
                if outside(path):
                    add(line, FAIL, "__has_include", path, text)
            continue
        if kind == "pragma":
            dep = re.match(r"\s*GCC\s+dependency\s+(?:\"([^\"]*)\"|<([^<>]*)>)", rest)
            if dep and outside(dep.group(1) or dep.group(2) or ""):
                add(line, FAIL, "#pragma GCC dependency", dep.group(1) or dep.group(2), text)
            continue
        q = _QUOTED.search(rest)
        path = (q.group(1) if q.group(1) is not None else q.group(2)) if q else None
        if path is None:
            if kind != "line" and rest.strip():
                found.append(Finding(FOREIGN_FILE, SUSPICIOUS, name, line + line_offset,
                                     f"#{kind} of a computed name ({rest.strip()[:60]}): where it points cannot be "
                                     "told before compiling", text.strip()[:160], 0.5))
            continue
        if outside(path):
            add(line, FAIL, f"#{kind}", path, text)
        elif kind in ("line", "embed") and posixpath.normpath(path) not in own:
            add(line, SUSPICIOUS, f"#{kind}", path, text)
    return found


class _FileRules(_ScanBase):
    """The `foreign-file` rule on a parsed source: directives by lines, assembler directives from `asm`."""

    own_files: Collection[str] = ()

    def rule_foreign_files(self) -> None:
        if not self.fragment:
            self.found += foreign_file_findings(self.name, self.raw, self.own_files, self.offset)
        for node in self.caps.get("asm", []):
            for m in _ASM_FILE.finditer(_asm_strings(node)):
                path = m.group(2)
                if outside(path):
                    self.add(FOREIGN_FILE, FAIL, node, f"assembler .{m.group(1)} reads {path!r}, an absolute path "
                             "or one outside the candidate's folder: its bytes go into the object")
                elif posixpath.normpath(path) not in {posixpath.normpath(f) for f in self.own_files}:
                    self.add(FOREIGN_FILE, SUSPICIOUS, node, f"assembler .{m.group(1)} reads {path!r}, a file that "
                             "is not one of the candidate's", 0.6)


def _asm_strings(node: Any) -> str:
    """The text of an `asm` statement's string literals in source order (adjacent literals joined, as the compiler
    joins them), escaped quotes and backslashes undone."""
    parts: list[str] = []

    def visit(n: Any) -> None:
        if n.type in ("string_content", "raw_string_content", "escape_sequence"):
            parts.append(_text(n))
        for c in n.children:
            visit(c)

    visit(node)
    return "".join(parts).replace('\\"', '"').replace("\\\\", "\\")
