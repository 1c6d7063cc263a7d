"""Candidate detail in tabs: code, diff (against its parent or a marked candidate), verdicts and every
measurement, profile summary, and the prompt and answer that produced it."""

from __future__ import annotations

import json

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane

from engine.verdict import Stage
from kbench_tui import keymap
from kbench_tui.screens.actions import CandidateActions
from kbench_tui.widgets.code_view import CodeView
from kbench_tui.widgets.diff_view import DiffView
from kbench_tui.widgets.verdict_table import VerdictTable, fmt_x
from kbench_tui.workers import CandidateChanged, CandidateStage, Done, ThreadedMixin

TABS = ("code", "diff", "verdicts", "profile", "prompt")


class DetailGathered(Done[dict]):
    """What the tabs show: the view, files, prompt, the candidate diffed against and the diff."""


def profile_text(view, gpu_notice: str) -> str:
    st = view.status
    lines = []
    prof = st.stages.get(Stage.PROFILE)
    if prof is not None and prof.verdict is not None:
        lines.append(f"profile: {prof.status.value} {prof.reason}")
        data = prof.verdict.verdict.data
        if data:
            lines.append(json.dumps(data, indent=2, default=str)[:6000])
    m = st.measurement
    if m is not None:
        lines.append(f"latest measurement on {m.gpu or '?'} (driver {m.driver or '?'}, torch {m.torch or '?'}, "
                     f"CUDA {m.cuda or '?'}) at {m.at}")
        lines.append("timed configs (the speedup is over these; by default a task's `bench` and `timed` configs, "
                     "correctness covers every config):")
        lines.append(f"{'config':24} {'ms':>10} {'iqr':>9} {'eager ms':>10} {'compile ms':>10} {'vs eager':>9}")
        for c in m.configs:
            lines.append(f"{c.config:24} {c.ms:10.4f} {(c.iqr_ms or 0):9.4f} {(c.eager_ms or 0):10.4f} "
                         f"{(c.compile_ms or 0):10.4f} {fmt_x(c.speedup_eager):>9}")
        roof = (m.data or {}).get("roofline")
        if roof:
            lines.append(f"roofline: {roof}")
    if not lines:
        lines.append("No profile or measurement recorded for this candidate. " + (gpu_notice or
                     "Re-evaluate it (e) to measure and profile it."))
    elif prof is None:
        lines.append("No profile recorded: a session profiles each new best ([eval] profile = \"best\"); "
                     "re-evaluate it (e) to profile it, or run `kbench profile TASK ID`.")
    return "\n".join(lines)


class CandidateScreen(CandidateActions, ThreadedMixin, Screen):
    BINDINGS = keymap.bindings("candidate")

    def __init__(self, cid: str, tab: str = "code", against: str | None = None):
        super().__init__()
        self.cid = cid
        self.tab = tab if tab in TABS else "code"
        self.against = against
        self.view = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="cand-title")
        with TabbedContent(initial=self.tab, id="tabs"):
            with TabPane("Code", id="code"):
                yield CodeView(id="code-view")
            with TabPane("Diff", id="diff"):
                yield DiffView(id="diff-view")
            with TabPane("Verdicts", id="verdicts"):
                yield VerdictTable(id="verdicts-view")
            with TabPane("Profile", id="profile"):
                yield CodeView(id="profile-view")
            with TabPane("Prompt", id="prompt"):
                yield CodeView(id="prompt-view")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.app.sub_title = self.cid
        self.load()

    def load(self) -> None:
        self.background(self._gather, self.cid, self.against, done=DetailGathered, what="detail")

    def _gather(self, cid: str, against: str | None):
        b = self.app.backend
        view = b.view(cid)
        other = against or (view.record.parents[0] if view.record.parents else None)
        return {"view": view, "files": b.code(cid), "prompt": b.prompt(cid), "against": other,
                "diff": b.diff(other, cid) if other else ""}

    def on_detail_gathered(self, message: DetailGathered) -> None:
        d = message.value
        v = self.view = d["view"]
        r = v.record
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append(r.id, style="bold")
        head.append(f"  gen {r.generation} · {r.operator} · {r.proposer}" + (f" ({r.model})" if r.model else ""))
        head.append(f"  parents: {', '.join(r.parents) or 'root'}  speedup {fmt_x(v.status.speedup)}  "
                    f"commit {r.commit[:12]}")
        title = Text(r.subject, style="italic")     # wraps (up to 3 lines): the knob change is at its end
        if r.rationale:
            title.append(f" — {r.rationale.splitlines()[0]}", style="dim")
        self.query_one("#cand-title", Static).update(Group(head, title))
        self.query_one("#code-view", CodeView).show(d["files"])
        self.query_one("#diff-view", DiffView).show(d["against"], r.id, d["diff"])
        self.query_one("#verdicts-view", VerdictTable).show(v, self.app.backend.gpu_notice())
        self.query_one("#profile-view", CodeView).show_text(profile_text(v, self.app.backend.gpu_notice()))
        self.query_one("#prompt-view", CodeView).show_text(d["prompt"], "markdown")
        self.loaded = True

    def current_candidate(self) -> str | None:
        return self.cid

    def after_change(self, cid: str) -> None:
        if cid == self.cid:
            self.load()
        for s in self.app.screen_stack:
            if s is not self:
                s.post_message(CandidateChanged(cid))

    def on_candidate_stage(self, message: CandidateStage) -> None:
        if message.candidate == self.cid:
            v = message.verdict
            self.app.notify(f"{message.candidate}: {v.stage} {v.status.value}", timeout=3)

    # -- tabs
    def action_tab(self, name: str) -> None:
        self.query_one(TabbedContent).active = name

    def _shift(self, d: int) -> None:
        tabs = self.query_one(TabbedContent)
        i = TABS.index(tabs.active) if tabs.active in TABS else 0
        tabs.active = TABS[(i + d) % len(TABS)]

    def action_next_tab(self) -> None:
        self._shift(1)

    def action_prev_tab(self) -> None:
        self._shift(-1)

    def _scroller(self):
        active = self.query_one(TabbedContent).active
        return self.query_one(f"#{active}-view")

    def action_scroll_down(self) -> None:
        self._scroller().scroll_relative(y=3, animate=False)

    def action_scroll_up(self) -> None:
        self._scroller().scroll_relative(y=-3, animate=False)

    def action_back(self) -> None:
        self.app.pop_screen()

    def palette_commands(self):
        return [(f"Show {t}", lambda t=t: self.action_tab(t)) for t in TABS] + [
            ("Override a verdict", self.action_override), ("Re-evaluate on the GPU", self.action_reevaluate),
            ("Edit in $EDITOR (new human candidate)", self.action_edit), ("Export", self.action_export)]
