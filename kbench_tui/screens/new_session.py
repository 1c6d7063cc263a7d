"""New session: task, direction, proposer (the LLM proposer only with a key; otherwise the reason is shown),
budget. Start runs the evolution through engine.service (the CLI's defaults, LLM verifiers included) on the
loop's own thread; its events come back as messages."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Checkbox, Footer, Header, Input, Label, Select, Static

from engine.service import DEFAULTS
from kbench_tui import keymap
from kbench_tui.workers import ThreadedMixin


class NewSessionScreen(ThreadedMixin, Screen):
    BINDINGS = keymap.bindings("new")

    def __init__(self, task: str | None = None):
        super().__init__()
        self.initial_task = task

    def compose(self) -> ComposeResult:
        b = self.app.backend
        tasks = [(r.name, r.name) for r in b.tasks() if r.directions]
        self._dirs = {r.name: r.directions for r in b.tasks()}
        task = self.initial_task if self.initial_task in dict(tasks) else (tasks[0][1] if tasks else Select.BLANK)
        props = [(n, n) for n, ok, _ in b.proposer_choices() if ok]
        reasons = [f"{n}: {why}" for n, ok, why in b.proposer_choices() if not ok]
        yield Header()
        with VerticalScroll(id="new-form"):
            yield Static("[b]New evolution session[/b]")
            yield Label("task")
            yield Select(tasks, value=task, allow_blank=False, id="ns-task")
            yield Label("direction")
            yield Select(self._dir_options(task), value="forward", allow_blank=False, id="ns-direction")
            yield Label("proposer")
            yield Select(props, value=props[0][1], allow_blank=False, id="ns-proposer")
            yield Static("\n".join(reasons), id="ns-unavailable", classes="dim")
            with Horizontal(classes="row"):
                with Vertical():
                    yield Label("generations")
                    yield Input(str(DEFAULTS.generations), id="ns-generations", type="integer")
                with Vertical():
                    yield Label("population")
                    yield Input(str(DEFAULTS.population), id="ns-population", type="integer")
                with Vertical():
                    yield Label("budget USD (LLM; blank: config)")
                    yield Input("", id="ns-usd", type="number")
            yield Label("session name (blank: task-direction-proposer)")
            yield Input("", id="ns-name")
            yield Checkbox("start paused (then s steps one proposal at a time, space resumes)", id="ns-paused")
            yield Static(self.app.backend.gpu_notice(), classes="notices")
            yield Static("", id="ns-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Start", variant="primary", id="ns-start")
                yield Button("Cancel", id="ns-cancel")
        yield Footer()

    def _dir_options(self, task) -> list[tuple[str, str]]:
        return [(d, d) for d in self._dirs.get(task, ("forward",))]

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "ns-task":
            d = self.query_one("#ns-direction", Select)
            d.set_options(self._dir_options(event.value))
            d.value = "forward"

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_start() if event.button.id == "ns-start" else self.action_cancel()

    def action_cancel(self) -> None:
        self.app.pop_screen()

    def action_start(self) -> None:
        v = lambda i: self.query_one(i, Input).value.strip()  # noqa: E731
        try:
            gens = int(v("#ns-generations") or DEFAULTS.generations)
            pop = int(v("#ns-population") or DEFAULTS.population)
            usd = float(v("#ns-usd")) if v("#ns-usd") else None
            if gens < 0 or pop < 1:
                raise ValueError
        except ValueError:
            self.query_one("#ns-error", Static).update("generations >= 0, population >= 1, budget a number")
            return
        args = dict(task=self.query_one("#ns-task", Select).value,
                    direction=self.query_one("#ns-direction", Select).value,
                    proposer=self.query_one("#ns-proposer", Select).value,
                    generations=gens, population=pop, usd=usd, session=v("#ns-name") or None,
                    paused=self.query_one("#ns-paused", Checkbox).value)
        self.query_one("#ns-start", Button).disabled = True
        self.background("start", self.app.start_session, **args)

    def done_start(self, session) -> None:
        self.app.switch_screen(self.app.make_session_screen(session.session))

    def failed_start(self, error) -> None:
        self.query_one("#ns-start", Button).disabled = False
        self.query_one("#ns-error", Static).update(f"cannot start: {error}")
