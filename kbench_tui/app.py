"""The kbench app: a thin App that owns the backend (engine adapter), the screens, the global bindings and
the keymap from the config file's [keys] section. Engine events reach screens as messages.

Lazy imports: the other screens, and the log widget, where they are first shown: the app opens on the home
screen, and importing the others (their textual widgets) would add about 70 ms to its start-up."""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from textual.app import App, SuspendNotSupported, SystemCommand
from textual.screen import Screen

from engine.errors import KbenchError
from kbench_tui import keymap
from kbench_tui.backend import Backend
from kbench_tui.screens.home import HomeScreen
from kbench_tui.workers import CandidateStage, EngineEvent, SessionEvent, StageProgress, ThreadedMixin

if TYPE_CHECKING:
    from engine.evolve.events import EvolveEvent
    from engine.evolve.loop import EvolutionSession


class KbenchApp(ThreadedMixin, App):
    TITLE = "kbench"
    CSS_PATH = "styles.tcss"
    BINDINGS = keymap.bindings("app")

    def __init__(self, backend: Backend | None = None, workspace: str | Path | None = None, **kw: Any):
        super().__init__(**kw)
        self.backend = backend or Backend(workspace)
        self.keymap_overrides, self.keymap_problems = keymap.keymap_from_config(self.backend.config.keys)
        self._logs: dict[str, list[tuple[float, str]]] = {}   # session -> (when, line) of its events
        self.prefetch_generations = True
        self._counts: dict[str, dict[str, int]] = {}
        self._waits: dict[str, dict[str, str]] = {}          # session -> candidate -> what its build waits on

    def on_mount(self) -> None:
        self.backend.editor_runner = self.run_editor
        if self.keymap_overrides:
            self.set_keymap(self.keymap_overrides)
        self.push_screen(HomeScreen())

    def on_unmount(self) -> None:
        self.backend.close()

    def run_editor(self, cmd: list[str], **kw: Any) -> Any:
        """Run $EDITOR from any thread (a human proposer runs on the loop's): on the UI thread, with the screen
        suspended so the editor has the terminal; headless (tests), plainly."""
        def run() -> Any:
            try:
                with self.suspend():
                    return subprocess.run(cmd, **kw)
            except SuspendNotSupported:
                return subprocess.run(cmd, **kw)
        if threading.get_ident() == self._thread_id:
            return run()
        return self.call_from_thread(run)

    def workspace_label(self) -> str:
        """The workspace as a path a person can type: `./workspace` under the current folder, `~/...` under the
        home folder, else absolute (the title once read "workspace workspace")."""
        p = self.backend.ws.path
        for base, shown in ((Path.cwd(), "."), (Path.home(), "~")):
            try:
                rel = p.relative_to(base)
            except ValueError:
                continue
            return shown if rel == Path(".") else f"{shown}/{rel}"
        return str(p)

    # ------------------------------------------------------------------------------ navigation

    def make_session_screen(self, session: str) -> Screen:
        from kbench_tui.screens.session import SessionScreen
        return SessionScreen(session)

    def open_session(self, session: str) -> None:
        self.push_screen(self.make_session_screen(session))

    def open_candidate(self, cid: str, tab: str = "code", against: str | None = None) -> None:
        from kbench_tui.screens.candidate import CandidateScreen
        self.push_screen(CandidateScreen(cid, tab=tab, against=against))

    def new_session(self, task: str | None = None) -> None:
        from kbench_tui.screens.new_session import NewSessionScreen
        self.push_screen(NewSessionScreen(task))

    def action_help(self) -> None:
        from kbench_tui.screens.help import HelpScreen
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(type(self.screen).__name__))

    # ------------------------------------------------------------------------------ evolution

    def _on_engine(self, e: EvolveEvent) -> None:
        """Called on the loop's thread: hand the event to the UI thread."""
        self.post_message(EngineEvent(e))

    def start_session(self, **kw: Any) -> EvolutionSession:
        """(worker thread) create and start a session; events come back as EngineEvent messages."""
        return self.backend.start_evolution(on_event=self._on_engine, **kw)

    def resume_session(self, session: str) -> EvolutionSession:
        """(worker thread) run the session again with its stored settings, through engine.service."""
        return self.backend.resume_evolution(session, on_event=self._on_engine)

    def counts(self, session: str) -> dict[str, int]:
        """Candidates committed and evaluated by this app's runs of `session` (from the events)."""
        return self._counts.setdefault(session, {"committed": 0, "evaluated": 0})

    def long_waits(self, session: str) -> dict[str, str]:
        """Candidates of `session` whose compile stage announced a long wait (LongWait) and has not ended."""
        return dict(self._waits.get(session, {}))

    def session_log(self, session: str) -> list[tuple[float, str]]:
        """(when it happened, line) of every event of `session` this app has seen."""
        return list(self._logs.get(session, []))

    def log_event_line(self, line: str) -> None:
        """A line from a user action (override, re-evaluation, export) into the open sessions' logs."""
        from kbench_tui.widgets.log_view import LogView
        for s in self.screen_stack:
            for log in s.query(LogView):
                log.add(line)

    def on_engine_event(self, message: EngineEvent) -> None:
        e = message.event
        session = e.session
        self._logs.setdefault(session, []).append((e.t, e.line()))
        counts = self.counts(session)
        if e.kind == "CandidateCommitted":
            counts["committed"] += 1
        elif e.kind == "CandidateEvaluated" and not getattr(e, "waiting_for_gpu", False):
            counts["evaluated"] += 1         # a candidate waiting for a GPU is compiled, not evaluated
        if e.kind == "LongWait":
            self._waits.setdefault(session, {})[e.candidate] = e.what
        elif e.kind in ("StageFinished", "CandidateEvaluated", "Stopped"):
            waits = self._waits.get(session, {})
            if e.kind == "Stopped":
                waits.clear()
            elif e.kind == "CandidateEvaluated" or e.stage == "compile":
                waits.pop(e.candidate, None)
        for s in list(self.screen_stack):      # each screen handles what concerns it (on_session_event)
            s.post_message(SessionEvent(e, len(self._logs[session]) - 1))

    def on_stage_progress(self, message: StageProgress) -> None:
        for s in list(self.screen_stack):
            s.post_message(CandidateStage(message.candidate, message.verdict))

    # ------------------------------------------------------------------------------ palette

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("New session", "Start an evolution session", self.new_session)
        yield SystemCommand("Keys", "Every binding and its id (remap in [keys])", self.action_help)
        for title, cb in getattr(screen, "palette_commands", lambda: [])():
            yield SystemCommand(title, "", cb)


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="kbench", add_help=False)
    p.add_argument("--workspace", default=None)
    p.add_argument("command", nargs="?")
    args, _ = p.parse_known_args(argv)
    try:
        backend = Backend(args.workspace)
    except KbenchError as exc:       # not a workspace, refused adoption, unreadable config: say it plainly
        print(f"kbench: {exc}", file=sys.stderr)
        return 2
    KbenchApp(backend=backend).run()
    return 0
