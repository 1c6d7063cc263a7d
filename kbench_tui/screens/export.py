"""Export a candidate as a torch extension package (engine.export writes it)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

from kbench_tui import keymap
from kbench_tui.widgets.toggle import Toggle


class ExportScreen(ModalScreen[dict | None]):
    BINDINGS = keymap.bindings("modal")

    def __init__(self, candidate: str, default_out: str, passing: bool, why: str = ""):
        super().__init__()
        self.candidate, self.default_out, self.passing, self.why = candidate, default_out, passing, why

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-box", id="export-box"):
            yield Static(f"[b]Export {self.candidate}[/b] as a torch extension package "
                         "(pyproject, CUDAExtension, TORCH_LIBRARY op, register_fake/autograd, test)")
            if not self.passing:
                yield Static(f"[yellow]Not passing: {self.why}. Tick 'force' to export anyway (the README says so)."
                             "[/yellow]")
            yield Label("output folder (must be empty; default: the workspace's exports/)")
            yield Input(self.default_out, id="ex-out")
            yield Label("package name (blank: kbench_<task>)")
            yield Input("", id="ex-name")
            yield Toggle("force (export a kernel that is not passing)", value=False, id="ex-force")
            yield Toggle("overwrite a previous export in that folder", value=False, id="ex-overwrite")
            with Horizontal(classes="buttons"):
                yield Button("Export", variant="primary", id="ex-ok")
                yield Button("Cancel", id="ex-cancel")

    def on_mount(self) -> None:
        self.query_one("#ex-out", Input).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_confirm() if event.button.id == "ex-ok" else self.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_confirm()

    def action_confirm(self) -> None:
        self.dismiss({"out": self.query_one("#ex-out", Input).value.strip(),
                      "name": self.query_one("#ex-name", Input).value.strip() or None,
                      "force": self.query_one("#ex-force", Checkbox).value,
                      "overwrite": self.query_one("#ex-overwrite", Checkbox).value})

    def action_cancel(self) -> None:
        self.dismiss(None)
