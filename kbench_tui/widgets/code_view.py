"""Candidate source with syntax highlighting (pygments through rich's Syntax)."""

from __future__ import annotations

from rich.console import Group
from rich.rule import Rule
from rich.syntax import Syntax
from textual.containers import VerticalScroll
from textual.widgets import Static

LEXERS = {".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".h": "cpp", ".hpp": "cpp", ".py": "python",
          ".md": "markdown", ".diff": "diff"}


def lexer_for(name: str) -> str:
    for ext, lex in LEXERS.items():
        if name.endswith(ext):
            return lex
    return "text"


def render_files(files: dict[str, str], theme: str = "monokai") -> Group:
    parts = []
    # the kernel first (kernel.cu, or a Triton candidate's kernel.py), then its glue and headers
    for name in sorted(files, key=lambda n: (n not in ("kernel.cu", "kernel.py") and not n.endswith(".cu"), n)):
        parts.append(Rule(name, align="left"))
        parts.append(Syntax(files[name], lexer_for(name), theme=theme, line_numbers=True, word_wrap=False))
    return Group(*parts)


class CodeView(VerticalScroll):
    DEFAULT_CSS = "CodeView { height: 1fr; } CodeView > Static { width: auto; }"

    def compose(self):
        yield Static("loading…", id="code-body")

    def show(self, files: dict[str, str]) -> None:
        self.query_one("#code-body", Static).update(render_files(files) if files else "(no files)")

    def show_text(self, text: str, lexer: str = "text") -> None:
        body = Syntax(text, lexer, theme="monokai", word_wrap=True) if text else "(empty)"
        self.query_one("#code-body", Static).update(body)
