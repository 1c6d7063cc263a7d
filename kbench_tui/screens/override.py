"""Override a stage's verdict: the modal asks for the stage, the new status and (required) the reason."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from engine.verdict import Stage
from kbench_tui import keymap

STATUSES = ("pass", "fail", "suspicious", "skipped")


class OverrideScreen(ModalScreen[dict | None]):
    BINDINGS = keymap.bindings("modal")

    def __init__(self, candidate: str, stages: list[tuple[str, str]], default_stage: str | None = None):
        super().__init__()
        self.candidate = candidate
        self.stages = stages          # (stage, current status)
        self.default_stage = default_stage

    def compose(self) -> ComposeResult:
        opts = [(f"{s} (now {st})", s) for s, st in self.stages]
        first = self.default_stage if self.default_stage in {s for s, _ in self.stages} else (
            self.stages[0][0] if self.stages else Select.BLANK)
        now = dict(self.stages).get(first, "")
        to = "pass" if now != "pass" else "fail"
        with Vertical(classes="modal-box", id="override-box"):
            yield Static(f"[b]Override a verdict of {self.candidate}[/b]\nRecorded as a note with who, why, from "
                         "and to; the verdict it overrules stays in the history.")
            yield Label("stage")
            yield Select(opts, value=first, allow_blank=False, id="ov-stage")
            yield Label("new status")
            yield Select([(s, s) for s in STATUSES], value=to, allow_blank=False, id="ov-to")
            yield Label("reason (required)")
            yield Input(placeholder="why you overrule it", id="ov-reason")
            yield Static("", id="ov-error", classes="error")
            yield Static("", id="ov-note", classes="dim")
            with Horizontal(classes="buttons"):
                yield Button("Override", variant="warning", id="ov-ok")
                yield Button("Cancel", id="ov-cancel")

    def on_mount(self) -> None:
        self.query_one("#ov-reason", Input).focus()
        self._note()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "ov-reason" and event.value.strip():
            self.query_one("#ov-error", Static).update("")      # the warning is answered: a reason is there

    def on_select_changed(self, event: Select.Changed) -> None:
        self._note()

    def _note(self) -> None:
        """Overruling a check that never ran: it changes the verdict, it does not make a measurement."""
        stage = self.query_one("#ov-stage", Select).value
        now = dict(self.stages).get(stage, "")
        unmeasured = stage in (Stage.CORRECTNESS, Stage.TIMING) and now in ("none", "skipped")
        to_pass = self.query_one("#ov-to", Select).value == "pass"
        self.query_one("#ov-note", Static).update(
            f"{stage} never ran on a GPU ({now}): an override may change a verdict, never invent a measurement, "
            "so export still refuses this kernel without force" if unmeasured and to_pass else "")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ov-ok":
            self.action_confirm()
        else:
            self.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_confirm()

    def action_confirm(self) -> None:
        reason = self.query_one("#ov-reason", Input).value.strip()
        if not reason:
            self.query_one("#ov-error", Static).update("An override needs a reason.")
            return
        self.dismiss({"stage": self.query_one("#ov-stage", Select).value,
                      "to": self.query_one("#ov-to", Select).value, "reason": reason})

    def action_cancel(self) -> None:
        self.dismiss(None)
