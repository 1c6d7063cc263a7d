"""Export a candidate as a torch extension package (engine.export writes it). The modal runs the export itself and
stays open when it is refused (a folder that is not empty, a kernel that is not passing without force), with the
reason in the app's words, so the user changes a field and tries again; it closes on success only."""

from __future__ import annotations

from typing import Any, Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

from kbench_tui import keymap
from kbench_tui.widgets.toggle import Toggle
from kbench_tui.wording import for_the_app
from kbench_tui.workers import Done, Failed, ThreadedMixin

# answer -> (the folder written, notes); raises KbenchError when the export is refused. Runs in a worker.
ExportCall = Callable[[dict[str, Any]], Any]


class Written(Done[Any]):
    """The export call's answer: (the folder written, notes)."""


class Refused(Failed):
    """The export was refused: said in the modal, which stays open."""


class ExportScreen(ThreadedMixin, ModalScreen[Any]):
    BINDINGS = keymap.bindings("modal")

    def __init__(self, candidate: str, default_out: str, passing: bool, why: str = "",
                 export: ExportCall | None = None):
        super().__init__()
        self.candidate, self.default_out, self.passing, self.why = candidate, default_out, passing, why
        self.export = export

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-box", id="export-box"):
            yield Static(f"[b]Export {self.candidate}[/b] as a torch extension package "
                         "(pyproject, CUDAExtension, TORCH_LIBRARY op, register_fake/autograd, test)")
            if not self.passing:
                yield Static(Text(f"Not passing: {for_the_app(self.why)}. Tick 'force' to export it anyway (its "
                                  "README then says so).", style="yellow"))
            yield Label("output folder (must be empty; default: the workspace's exports/)")
            yield Input(self.default_out, id="ex-out")
            yield Label("package name (blank: kbench_<task>)")
            yield Input("", id="ex-name")
            yield Toggle("force (export a kernel that is not passing)", value=False, id="ex-force")
            yield Toggle("overwrite a previous export in that folder", value=False, id="ex-overwrite")
            yield Static("", id="ex-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Export", variant="primary", id="ex-ok")
                yield Button("Cancel", id="ex-cancel")

    def on_mount(self) -> None:
        self.query_one("#ex-out", Input).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_confirm() if event.button.id == "ex-ok" else self.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_confirm()

    def answer(self) -> dict[str, Any]:
        return {"out": self.query_one("#ex-out", Input).value.strip(),
                "name": self.query_one("#ex-name", Input).value.strip() or None,
                "force": self.query_one("#ex-force", Checkbox).value,
                "overwrite": self.query_one("#ex-overwrite", Checkbox).value}

    def action_confirm(self) -> None:
        if self.export is None:            # nothing to run here: the caller exports with the answer
            self.dismiss(self.answer())
            return
        self.query_one("#ex-error", Static).update("exporting…")
        self.query_one("#ex-ok", Button).disabled = True
        self.background(self.export, self.answer(), done=Written, failed=Refused, what="export")

    def on_written(self, message: Written) -> None:
        self.dismiss(message.value)

    def on_refused(self, message: Refused) -> None:
        self.query_one("#ex-ok", Button).disabled = False
        self.query_one("#ex-error", Static).update(Text(f"Export refused: {for_the_app(str(message.error))}"))

    def action_cancel(self) -> None:
        self.dismiss(None)
