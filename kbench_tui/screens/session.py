"""Session: candidates grouped by generation with their parents, status and speedup; the fitness plot;
live progress and the log while the loop runs; pause / resume / step / stop; the candidate actions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static

from kbench_tui import keymap
from kbench_tui.view_models import SessionData, waiting_count
from kbench_tui.screens.actions import CandidateActions
from kbench_tui.screens.failed import FailedProposalsScreen
from kbench_tui.widgets.fitness_plot import FitnessPlot
from kbench_tui.widgets.line import Line
from kbench_tui.widgets.lineage_table import LineageTable, short
from kbench_tui.widgets.log_view import LogView
from kbench_tui.wording import for_the_app, session_line, status_phrase
from kbench_tui.workers import CandidateChanged, CandidateStage, Done, Failed, SessionEvent, ThreadedMixin

if TYPE_CHECKING:
    from engine.evolve.loop import EvolutionSession

RELOAD_ON = {"SessionStarted", "CandidateCommitted", "CandidateEvaluated", "GenerationFinished", "Stopped", "BestImproved",
             "CandidateProfiled"}


class SessionLoaded(Done[SessionData]):
    """The session's candidates, lineage and statistics (kbench_tui.view_models.SessionData)."""


class LoadFailed(Failed):
    """The session could not be listed (or does not exist yet: its loop's thread is creating it)."""


class Resumed(Done["EvolutionSession"]):
    """The session's evolution, running again from the workspace."""


class SessionScreen(CandidateActions, ThreadedMixin, Screen):
    BINDINGS = keymap.bindings("session", "list")

    def __init__(self, session: str):
        super().__init__()
        self.session = session
        self.data = None
        self.marked: str | None = None
        self._reload_pending = False
        self._loading = False
        self.last_event = ""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="notices", classes="notices")
        yield FitnessPlot(id="plot")
        yield LineageTable(id="lineage")
        yield Input(placeholder="search: candidate id, operator, status, title (enter: jump, esc: close)",
                    id="search")
        yield Line(id="selection")
        yield Line(id="progress")
        yield LogView(id="log")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.app.sub_title = f"session {self.session}"
        self.query_one("#search").display = False
        b = self.app.backend
        notices = [n for n in ("no GPU: measurements need one" if b.gpu_notice() else "",
                               "no API key: the anthropic proposer is off" if b.llm_notice() else "") if n]
        self.query_one("#notices", Static).update(Text(" · ".join(notices), style="yellow"))
        self.query_one("#notices").display = bool(notices)
        shown = self.app.session_log(self.session)
        for at, line in shown[-200:]:
            self.query_one(LogView).add(session_line(line, self.session), at)
        self._log_seen = len(shown)       # events already in the app's log are not written twice
        self.query_one(LineageTable).focus()
        self.reload()
        self.update_progress()
        self.set_interval(1.0, self._tick)

    # ------------------------------------------------------------------------------ data

    def on_screen_resume(self) -> None:
        self.app.sub_title = f"session {self.session}"
        self.update_progress()

    def reload(self) -> None:
        if self._loading:
            self._reload_pending = True
            return
        self._loading = True
        self.background(self.app.backend.session_data, self.session, done=SessionLoaded, failed=LoadFailed,
                        what="load")

    def on_session_loaded(self, message: SessionLoaded) -> None:
        data = message.value
        self._loading = False
        keep = self.current_candidate()
        self.data = data
        table = self.query_one(LineageTable)
        table.long_waits = self.app.long_waits(self.session)
        table.load(data, keep)
        self.query_one(FitnessPlot).set_stats(data.stats)
        self.update_selection()
        self.update_progress()
        self.loaded = True
        if self._reload_pending:
            self._reload_pending = False
            self.reload()

    def on_load_failed(self, message: LoadFailed) -> None:
        error = message.error
        self._loading = False
        if self.app.backend.is_unknown_session(error) and self.runner is not None:
            self.set_timer(0.3, self.reload)     # the loop's thread has not created the session yet
            return
        self.app.notify(f"cannot list {self.session}: {for_the_app(str(error))}", severity="error", timeout=12,
                        markup=False)

    def _tick(self) -> None:
        self.update_progress()

    def current_candidate(self) -> str | None:
        if not self.data or not self.data.views:
            return None
        row = self.query_one(LineageTable).cursor_row
        if 0 <= row < len(self.data.views):
            return self.data.views[row].record.id
        return None

    def after_change(self, cid: str) -> None:
        self.reload()

    # ------------------------------------------------------------------------------ display

    def lineage_text(self, cid: str) -> str:
        if not self.data:
            return ""
        chain, seen = [], set()
        cur = cid
        while cur and cur not in seen and len(chain) < 12:
            seen.add(cur)
            chain.append(short(cur, self.session))
            i = self.data.index.get(cur)
            parents = self.data.views[i].record.parents if i is not None else ()
            if len(parents) > 1:
                chain[-1] += f"(×{' '.join(short(p, self.session) for p in parents)})"
            cur = parents[0] if parents else None
        return " ← ".join(chain) + (" ← root" if cur is None else " ← …")

    def update_selection(self) -> None:
        cid = self.current_candidate()
        if cid is None:
            text = Text("no candidates yet" + (" — press R to run the evolution" if not self.runner else ""),
                        style="dim")
        else:
            v = self.data.views[self.data.index[cid]]
            text = Text()
            text.append(f"{cid}", style="bold")
            text.append(f"  {v.record.operator} by {v.record.proposer}  lineage: {self.lineage_text(cid)}")
            if self.marked:
                text.append(f"  marked: {self.marked}", style="magenta")
        self.query_one("#selection", Line).set(text)

    @property
    def counts(self) -> dict[str, int]:
        return self.app.counts(self.session)

    @property
    def runner(self):
        return self.app.backend.runner(self.session)

    def update_progress(self) -> None:
        r = self.runner
        n = len(self.data.views) if self.data else 0
        state = self.app.backend.session_status(self.session, waiting_count(self.data.views) if self.data else 0)
        t = Text()
        t.append(f"[{state}] ", style={"running": "bold green", "paused": "bold yellow"}.get(
            state, "cyan" if state.startswith("waiting") else "dim"))
        if r is not None:
            t.append(f"gen {min(r.generation, r.budgets.generations)}/{r.budgets.generations}  population {r.budgets.population}  "
                     f"committed {self.counts['committed']}  evaluated {self.counts['evaluated']}  ")
        t.append(f"{n} candidates")
        failed = self.data.failed if self.data else 0
        if failed:
            t.append(f"  {failed} failed proposal(s): F reads them", style="yellow")
        q = self.app.backend.queued
        if q:
            t.append(f"  re-evaluations queued/running: {q}", style="cyan")
        for cid, what in list(self.app.long_waits(self.session).items())[:1]:   # why a build takes long
            t.append(f"  · {short(cid, self.session)} {what}", style="cyan")
        if self.last_event:
            t.append(f"  · {self.last_event}", style="dim")
        self.query_one("#progress", Line).set(t)

    def on_lineage_table_highlighted(self, event: LineageTable.Highlighted) -> None:
        self.update_selection()

    def on_lineage_table_selected(self, event: LineageTable.Selected) -> None:
        event.stop()
        self.action_open()

    # ------------------------------------------------------------------------------ engine events

    def on_candidate_changed(self, message: CandidateChanged) -> None:
        self.reload()

    def on_session_event(self, message: SessionEvent) -> None:
        e = message.event
        if getattr(e, "session", None) != self.session:
            return
        if message.index >= getattr(self, "_log_seen", 0):
            self._log_seen = message.index + 1
            self.query_one(LogView).add(session_line(e.line(), self.session), e.t)
        self.last_event = status_phrase(e.line(), self.session)
        table = self.query_one(LineageTable)
        waited = e.kind == "StageFinished" and e.candidate in table.long_waits
        table.set_long_waits(self.app.long_waits(self.session))
        if e.kind in RELOAD_ON or waited:      # a long compile ended: its row shows the verdict, not "compiling"
            self.reload()
        self.update_progress()

    def on_candidate_stage(self, message: CandidateStage) -> None:
        cid, verdict = message.candidate, message.verdict
        if self.data and cid in self.data.index:
            self.query_one(LogView).add(f"re-evaluate {cid}: {verdict.stage} {verdict.status.value} {verdict.reason}")
            self.last_event = f"re-evaluating {short(cid, self.session)}: {verdict.stage} {verdict.status.value}"
            self.update_progress()

    # ------------------------------------------------------------------------------ actions

    def action_cursor_down(self) -> None:
        self.query_one(LineageTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one(LineageTable).action_cursor_up()

    def action_back(self) -> None:
        s = self.query_one("#search", Input)
        if s.display:
            s.display = False
            self.query_one(LineageTable).focus()
            return
        self.app.pop_screen()

    def action_open(self) -> None:
        cid = self.current_candidate()
        if cid:
            self.app.open_candidate(cid)

    def _jump_generation(self, delta: int) -> None:
        if not self.data or not self.data.stats:
            return
        cid = self.current_candidate()
        gens = [s.generation for s in self.data.stats]
        g = self.data.views[self.data.index[cid]].record.generation if cid else gens[0]
        i = gens.index(g) + delta
        if 0 <= i < len(gens):
            self.query_one(LineageTable).move_cursor(row=self.data.gen_first[gens[i]], animate=False)

    def action_prev_generation(self) -> None:
        self._jump_generation(-1)

    def action_next_generation(self) -> None:
        self._jump_generation(+1)

    def action_goto_parent(self) -> None:
        cid = self.current_candidate()
        if cid:
            parents = self.data.views[self.data.index[cid]].record.parents
            if parents and parents[0] in self.data.index:
                self.query_one(LineageTable).move_cursor(row=self.data.index[parents[0]], animate=False)

    def action_mark(self) -> None:
        cid = self.current_candidate()
        self.marked = None if self.marked == cid else cid
        self.app.notify(f"marked {cid}: d diffs against it" if self.marked else "mark cleared")
        self.update_selection()

    def action_diff(self) -> None:
        cid = self.current_candidate()
        if cid:
            self.app.open_candidate(cid, tab="diff", against=self.marked if self.marked != cid else None)

    def action_search(self) -> None:
        s = self.query_one("#search", Input)
        s.display = True
        s.value = ""
        s.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "search" or not self.data:
            return
        q = event.value.strip().lower()
        start = self.query_one(LineageTable).cursor_row + 1
        n = len(self.data.views)
        for k in range(n):
            i = (start + k) % n
            v = self.data.views[i]
            if q in v.record.id.lower() or q in v.record.operator or q in v.record.subject.lower():
                self.query_one(LineageTable).move_cursor(row=i, animate=False)
                break
        else:
            self.app.notify(f"no candidate matches {q!r}", severity="warning")
        event.input.display = False
        self.query_one(LineageTable).focus()

    def action_failed(self) -> None:
        self.app.push_screen(FailedProposalsScreen(self.session))

    def action_toggle_log(self) -> None:
        """normal -> large (the lineage shrinks to a few rows, the plot hides; the log takes the focus, so the
        arrows and page keys scroll it) -> hidden -> normal."""
        log = self.query_one(LogView)
        size = log.cycle_size()
        self.query_one(FitnessPlot).display = size != "large"
        self.query_one(LineageTable).set_class(size == "large", "-small")
        (log if size == "large" else self.query_one(LineageTable)).focus()

    # evolution controls
    def _need_runner(self):
        r = self.runner
        if r is None or not r.running:
            self.app.notify("the evolution is not running in this app (R runs or resumes it)", severity="warning")
            return None
        return r

    def action_toggle_pause(self) -> None:
        r = self._need_runner()
        if r is None:
            return
        if r.paused:
            r.resume()
            self.query_one(LogView).add("resume requested")
        else:
            r.pause()
            self.query_one(LogView).add("pause requested (running evaluations finish)")
        self.update_progress()

    def action_step(self) -> None:
        r = self._need_runner()
        if r is None:
            return
        r.step(1)
        self.query_one(LogView).add("step: one more proposal")
        self.update_progress()

    def action_stop(self) -> None:
        r = self._need_runner()
        if r is None:
            return
        r.stop(wait_for_evaluations=True)
        self.query_one(LogView).add("stop requested (running evaluations finish and are recorded)")

    def action_run(self) -> None:
        r = self.runner
        if r is not None and r.running:
            self.app.notify("already running")
            return
        self.background(self.app.resume_session, self.session, done=Resumed, what="resume")

    def on_resumed(self, message: Resumed) -> None:
        self.query_one(LogView).add(f"evolution of {self.session} started (resumed from the workspace)")
        self.update_progress()

    def palette_commands(self):
        return [("Pause / resume the evolution", self.action_toggle_pause), ("Step one proposal", self.action_step),
                ("Stop the evolution", self.action_stop), ("Run / resume the evolution", self.action_run),
                ("Override a verdict", self.action_override), ("Re-evaluate candidate", self.action_reevaluate),
                ("Edit candidate in $EDITOR", self.action_edit), ("Export candidate", self.action_export),
                ("Mark candidate for diff", self.action_mark), ("Search candidates", self.action_search)]
