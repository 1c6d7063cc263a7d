"""Failed proposals of a session: the LLM answers that gave no candidate, each with why, its prompt and the
whole answer, so a person can read a nearly complete kernel and salvage it (`kbench checkout ID DIR` writes its
files). Read-only: the workspace keeps them (engine.workspace.failed)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from kbench_tui import keymap
from kbench_tui.widgets.code_view import CodeView
from kbench_tui.workers import Done, ThreadedMixin


class FailedListed(Done[list]):
    """The session's failed proposals (engine.workspace.failed.FailedProposal), oldest first."""


class AnswerRead(Done[str]):
    """One failed proposal's prompt.md: its prompt and whole answer."""


class FailedProposalsScreen(ThreadedMixin, Screen):
    BINDINGS = keymap.bindings("failed", "list")

    def __init__(self, session: str):
        super().__init__()
        self.session = session
        self.ids: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="failed-title")
        yield DataTable(id="failed-table", cursor_type="row")
        yield CodeView(id="failed-answer")
        yield Footer()

    def on_mount(self) -> None:
        self.app.sub_title = f"failed proposals of {self.session}"
        t = self.query_one(DataTable)
        t.add_columns("gen", "id", "operator", "why")
        t.focus()
        self.background(self.app.backend.failed_proposals, self.session, done=FailedListed,
                        what="failed proposals")

    def on_failed_listed(self, message: FailedListed) -> None:
        rows = message.value
        t = self.query_one(DataTable)
        self.ids = [f.id for f in rows]
        for f in rows:
            t.add_row(str(f.generation), f.id[len(self.session) + 1:], f.operator, " ".join(f.reason.split()),
                      key=f.id)
        self.query_one("#failed-title", Static).update(Text(
            f"{len(rows)} answer(s) gave no candidate; each is kept whole (kbench checkout ID DIR writes its files)"
            if rows else "no failed proposals in this session", style="bold"))
        if rows:
            self._show(rows[0].id)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value:
            self._show(event.row_key.value)

    def _show(self, fid: str) -> None:
        self.background(self.app.backend.failed_prompt, fid, done=AnswerRead, what="answer", exclusive=True)

    def on_answer_read(self, message: AnswerRead) -> None:
        self.query_one("#failed-answer", CodeView).show_text(answer_first(message.value), "markdown")

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_cursor_down(self) -> None:
        self.query_one(DataTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one(DataTable).action_cursor_up()

    def action_search(self) -> None:
        self.app.action_command_palette()


def answer_first(prompt_md: str) -> str:
    """prompt.md with its answer before its prompt: the answer is what a person came to read."""
    head, sep, rest = prompt_md.partition("\n## Prompt\n")
    prompt, sep2, answer = rest.partition("\n## Answer\n")
    if not (sep and sep2):
        return prompt_md
    return f"{head.rstrip()}\n\n## Answer\n{answer.rstrip()}\n\n## Prompt\n{prompt.rstrip()}\n"
