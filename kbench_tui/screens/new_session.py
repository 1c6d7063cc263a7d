"""New session: task (built-in, or the user's own from $KBENCH_TASKS), direction, proposer (anthropic only with
a key, human only with $VISUAL/$EDITOR; otherwise the reason is shown; replay asks what to re-play), budget.
Start runs the evolution through engine.service (the CLI's defaults, LLM verifiers included) on the
loop's own thread; its events come back as messages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Checkbox, Footer, Header, Input, Label, Select, Static

from engine.service.spec import DEFAULTS
from kbench_tui import keymap
from kbench_tui.widgets.toggle import Toggle
from kbench_tui.wording import for_the_app
from kbench_tui.workers import Done, Failed, ThreadedMixin

if TYPE_CHECKING:
    from engine.evolve.loop import EvolutionSession


class SessionStarted(Done["EvolutionSession"]):
    """The evolution the form started, running on its loop's thread."""


class StartFailed(Failed):
    """The session could not start (a bad task, no key, a damaged workspace): said on the form."""


def task_labels(rows) -> list[tuple[str, str]]:
    """(label, key) per task: a built-in task by name; one of the user's marked as from $KBENCH_TASKS, with
    its folder where two tasks share a name."""
    names = [r.name for r in rows]
    out = []
    for r in rows:
        label = r.name
        if r.folder:
            label += f"  ({r.folder})" if names.count(r.name) > 1 else "  ($KBENCH_TASKS)"
        out.append((label, r.key))
    return out


class NewSessionScreen(ThreadedMixin, Screen):
    BINDINGS = keymap.bindings("new")

    def __init__(self, task: str | None = None):
        super().__init__()
        self.initial_task = task

    def compose(self) -> ComposeResult:
        b = self.app.backend
        rows = b.tasks()
        tasks = task_labels([r for r in rows if r.directions])
        self._dirs = {r.key: r.directions for r in rows}
        keys = [k for _, k in tasks]
        task = self.initial_task if self.initial_task in keys else (keys[0] if keys else Select.BLANK)
        choices = b.proposer_choices()
        props = [(n, n) for n, ok, _ in choices if ok]
        reasons = [why if why.startswith(f"{n}:") else f"{n}: {why}" for n, ok, why in choices if why]
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
            with Vertical(id="ns-replay-box"):
                yield Label("replay from (a folder of candidates, or a session of this workspace)")
                yield Input("", id="ns-replay")
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
            yield Toggle("start paused (then s steps one proposal at a time, space resumes)", value=False,
                         id="ns-paused")
            yield Static(self.app.backend.gpu_notice(), classes="notices")
            yield Static("", id="ns-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Start", variant="primary", id="ns-start")
                yield Button("Cancel", id="ns-cancel")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#ns-task", Select).focus()        # the form opens on its first field
        self._show_replay()

    def _show_replay(self) -> None:
        self.query_one("#ns-replay-box").display = self.query_one("#ns-proposer", Select).value == "replay"

    def _dir_options(self, task) -> list[tuple[str, str]]:
        return [(d, d) for d in self._dirs.get(task, ("forward",))]

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "ns-task":
            d = self.query_one("#ns-direction", Select)
            d.set_options(self._dir_options(event.value))
            d.value = "forward"
        elif event.select.id == "ns-proposer":
            self._show_replay()

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
            self._error("generations >= 0, population >= 1, budget a number")
            return
        args = dict(task=self.query_one("#ns-task", Select).value,
                    direction=self.query_one("#ns-direction", Select).value,
                    proposer=self.query_one("#ns-proposer", Select).value,
                    generations=gens, population=pop, usd=usd, session=v("#ns-name") or None,
                    paused=self.query_one("#ns-paused", Checkbox).value)
        if args["proposer"] == "replay":
            args["replay_from"] = v("#ns-replay")
        self.query_one("#ns-start", Button).disabled = True
        self.background(self.app.start_session, done=SessionStarted, failed=StartFailed, what="start", **args)

    def on_session_started(self, message: SessionStarted) -> None:
        self.app.switch_screen(self.app.make_session_screen(message.value.session))

    def on_start_failed(self, message: StartFailed) -> None:
        self.query_one("#ns-start", Button).disabled = False
        self._error(f"cannot start: {for_the_app(str(message.error))}")

    def _error(self, text: str) -> None:
        """The form is taller than a small terminal: bring the message into view, or nothing seems to happen."""
        err = self.query_one("#ns-error", Static)
        err.update(Text(text))        # engine text: "[forward]" is a section name, not markup
        self.call_after_refresh(err.scroll_visible, animate=False)
