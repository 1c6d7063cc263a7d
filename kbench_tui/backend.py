"""The app's one door into the engine (harlequin's adapter idea): screens call these methods, always from a
Textual worker thread when the call may take long, and never reach into engine modules themselves.

`Backend` wraps a `Workspace` and adds what the screens need around it: task and session summaries, the
evaluator factory (the configured executor, or one a caller hands in: the tests' fake evaluator), sessions started and resumed through engine.service (the same defaults and wiring
as `kbench evolve`: the LLM verifiers run, one budget covers proposals and reviews), re-evaluation through
the service's own (what `kbench reevaluate` runs), overrides, hand edits through the human proposer, and
export through engine.export.

The small dataclasses and formatting the screens display (TaskRow, SessionData, status_text, ...) are in
kbench_tui.view_models, and the queue of re-evaluations a person asks for in kbench_tui.reevaluations; this
module is the adapter that builds and owns them.
"""

from __future__ import annotations

import gc
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine.config.load import load_config

from engine.config.sections import Config

from engine.errors import ConfigError
from engine.errors import KbenchError
from engine.evolve.factory import make_evaluator
from engine.evolve.worker_fns import visible_gpus
from engine.export.names import default_name
from engine.gpu_wait import WAITING_FOR_GPU
from engine.export.plan import passing_status
from engine.service.person_actions import export_candidate, hand_edit
from engine.service.session_service import SessionService
from engine.service.spec import SessionSpec
from engine.task_catalog import catalog
from engine.tasks.loader import load_task
from engine.verdict import Verdict
from engine.workspace import UnknownSessionError, Workspace, default_export_dir, default_path
from engine.workspace.naming import parse_candidate_id
from kbench_tui.reevaluations import ReevaluationQueue
from kbench_tui.session_proposers import choices, offline_proposer
from kbench_tui.view_models import Reevaluation, SessionData, SessionRow, TaskRow, summarize, waiting_count

if TYPE_CHECKING:
    from engine.evolve.events import EvolveEvent
    from engine.evolve.loop import EvolutionSession
    from engine.evolve.outcome import Evaluator
    from engine.llm.target import TargetInfo
    from engine.proposers.base import Proposer
    from engine.tasks.model import Task
    from engine.workspace import CandidateRecord, CandidateView, Override, SessionInfo
    from engine.workspace.failed import FailedProposal

EvaluatorFactory = Callable[["Task", str], "Evaluator"]   # (task, direction) -> an evaluator


def default_evaluator_factory(task: Task, direction: str, config: Config | None = None) -> Evaluator:
    """The configured executor ([eval] and [executor] in the config files: local by default, or Ray)."""
    return make_evaluator(task, direction, config if config is not None else Config())


class Backend:
    def __init__(self, workspace: str | Path | None = None, *, evaluator_factory: EvaluatorFactory | None = None,
                 gpus: list[int] | None = None, env: dict[str, str] | None = None, config: Config | None = None,
                 editor_run: Callable[..., Any] | None = None,
                 target: TargetInfo | Callable[[], TargetInfo] | None = None,
                 llm_options: dict[str, Any] | None = None):
        self.ws = Workspace.create(Path(workspace) if workspace else default_path())
        self.env = env
        self._evaluator_factory = evaluator_factory or default_evaluator_factory
        self._gpus = gpus
        self._editor_run = editor_run
        self.editor_runner: Callable[..., Any] | None = None   # the app's: runs $EDITOR with the screen suspended
        self.config_error = ""
        if config is None:
            try:
                config = load_config(self.ws.path)
            except ConfigError as exc:
                config, self.config_error = Config(), str(exc)
        self.config = config
        self.service = SessionService(
            self.ws, config, env=env, target=target, llm_options=llm_options,
            evaluator_factory=lambda task, direction, _config: self._make_evaluator(task, direction))
        self.runners: dict[str, EvolutionSession] = {}   # session -> live EvolutionSession
        self.reevaluations = ReevaluationQueue(self.service, live_runner=self.live_runner)

    def _make_evaluator(self, task: Task, direction: str) -> Evaluator:
        if self._evaluator_factory is default_evaluator_factory:
            return default_evaluator_factory(task, direction, self.config)
        return self._evaluator_factory(task, direction)

    def close(self) -> None:
        for r in list(self.runners.values()):
            try:
                r.stop(wait_for_evaluations=False)
            except Exception:  # noqa: BLE001
                pass
        self.reevaluations.close()
        self.ws.close()

    # ------------------------------------------------------------------------------ environment

    def gpus(self) -> list[int]:
        if self._gpus is None:
            self._gpus = visible_gpus()
        return self._gpus

    def gpu_notice(self) -> str:
        if self.gpus():
            return ""
        return ("No GPU visible: you can browse, diff and compile, but correctness and timing measurements "
                "need a GPU.")

    def llm_available(self) -> bool:
        return self.service.llm_available()

    def llm_notice(self) -> str:
        return self.service.llm_notice()

    def proposer_choices(self) -> list[tuple[str, bool, str]]:
        """(name, available, a note: the reason when not available, what it needs when it is)."""
        return choices(self)

    # ------------------------------------------------------------------------------ listings

    def tasks(self) -> list[TaskRow]:
        """The built-in tasks, then the user's own from the folders in $KBENCH_TASKS (engine.task_catalog)."""
        rows = []
        for e in catalog():
            folder = "" if e.builtin else str(e.path)
            try:
                with warnings.catch_warnings():     # TaskWarnings are the CLI's to print; here, not on the screen
                    warnings.simplefilter("ignore")
                    t = load_task(e.path)
            except KbenchError as exc:
                rows.append(TaskRow(e.name, (), 0, "", str(exc), e.ref, folder))
                continue
            rows.append(TaskRow(e.name, tuple(t.directions), len(t.configs), ", ".join(t.tags), "", e.ref, folder))
        return rows

    def session_status(self, name: str, waiting: int = 0) -> str:
        """running / paused while this app runs it; else "waiting for a GPU (n)" where n of its candidates are
        compiled and queued for a GPU, else idle."""
        r = self.runners.get(name)
        # `result` is set as the loop emits Stopped, before its thread has ended: a screen refreshed by that event
        # shows the session as ended, not as running until its next tick
        if r is None or not r.running or r.result is not None:
            return f"{WAITING_FOR_GPU} ({waiting})" if waiting else "idle"
        return "paused" if r.paused else "running"

    def sessions(self, with_generations: bool = True) -> list[SessionRow]:
        rows = []
        for s in self.ws.sessions():
            best_speedup, gen = None, None
            if s.best:
                try:
                    best_speedup = self.ws.view(s.best).status.speedup
                except KbenchError:
                    pass
            waiting, damage = 0, s.problem
            if with_generations and s.candidates:
                try:
                    views = self.ws.candidates(s.name, strict=False)
                except KbenchError as exc:      # one damaged object: this row says so, the others are listed
                    views, damage = [], str(exc)
                gen = max(v.record.generation for v in views) if views else None
                waiting = waiting_count(views)
                damage = damage or next((v.problem for v in views if v.problem), None) or next(
                    (f"workspace damaged: {d.message}" for d in self.ws.damaged_refs(s.name, fresh=False)), None)
            if gen is None and s.best:
                parsed = parse_candidate_id(s.best)
                gen = parsed[1] if parsed else None
            status = "damaged (kbench fsck)" if damage else self.session_status(s.name, waiting)
            rows.append(SessionRow(s.name, s.task, s.direction, s.proposer, s.candidates, gen, s.best,
                                   best_speedup, status, damage or ""))
        return rows

    def session_data(self, name: str) -> SessionData:
        data = summarize(name, self.ws.candidates(name, strict=False))
        data.failed = len(self.ws.failed.list(name))
        # tens of thousands of long-lived, acyclic objects: keep the cyclic GC from walking them on every
        # full collection (a full pass over a 10,000-candidate listing stalls the UI for most of a second)
        gc.freeze()
        return data

    def session_info(self, name: str) -> SessionInfo:
        return self.ws.session(name)

    def view(self, cid: str) -> CandidateView:
        return self.ws.view(cid)

    def code(self, cid: str) -> dict[str, str]:
        return dict(self.ws.files(cid).files)

    def prompt(self, cid: str) -> str:
        return self.ws.prompt(cid)

    def diff(self, a: str, b: str) -> str:
        return self.ws.diff(a, b)

    def failed_proposals(self, session: str) -> list[FailedProposal]:
        return self.ws.failed.list(session)

    def failed_prompt(self, fid: str) -> str:
        return self.ws.failed.prompt(fid)

    def task_of(self, session: str) -> Task:
        return self.service.task_of(session)

    # ------------------------------------------------------------------------------ evolution

    def start_evolution(self, *, task: str, direction: str, proposer: str, generations: int | None = None,
                        population: int | None = None, usd: float | None = None, session: str | None = None,
                        on_event: Callable[[EvolveEvent], None] | None = None, paused: bool = False,
                        replay_from: str | None = None) -> EvolutionSession:
        """Create a session through engine.service (the CLI's defaults and wiring, LLM verifiers included) and
        start its loop on a background thread. Events go to `on_event` (called on the loop's thread). An API
        outage pauses the loop as "API unavailable" (space resumes it)."""
        if proposer not in ("anthropic", "openai", "tuner", "replay", "human"):
            raise KbenchError(f"the {proposer} proposer cannot drive a session from the app")
        if proposer in ("anthropic", "openai") and not self.llm_available():
            raise KbenchError(self.llm_notice())
        prebuilt = None
        if proposer in ("replay", "human"):   # built here: the editor runs through the app (it steps aside)
            prebuilt = offline_proposer(proposer, self, replay_from)
        if session is None:
            t = load_task(task)
            session = self.free_session_name(f"{t.name}-{'bwd' if direction == 'backward' else 'fwd'}-{proposer}")
        spec = SessionSpec(task=task, direction=direction, proposer=proposer, generations=generations,
                           population=population, usd=usd, name=session, replay_from=replay_from, started_from="tui")
        return self._run(spec, on_event, paused, prebuilt)

    def resume_evolution(self, session: str,
                         on_event: Callable[[EvolveEvent], None] | None = None) -> EvolutionSession:
        """Run a session of the workspace again with its stored settings (whoever started it)."""
        info = self.ws.session(session)
        cfg = info.config or {}
        proposer = cfg.get("proposer") or info.proposer
        if proposer not in ("anthropic", "openai", "tuner", "replay", "human") or (
                proposer == "replay" and not cfg.get("replay_from")):
            proposer = "tuner"          # a session whose proposer cannot go on here is carried on by the tuner
        prebuilt = None
        if proposer == "human":
            prebuilt = offline_proposer("human", self, None)
        return self._run(SessionSpec(name=session, proposer=proposer, started_from="tui"), on_event, False, prebuilt)

    def _run(self, spec: SessionSpec, on_event: Callable[[EvolveEvent], None] | None, paused: bool,
             proposer: Proposer | None = None) -> EvolutionSession:
        name = spec.name
        if name in self.runners and self.runners[name].running:
            raise KbenchError(f"session {name} is already running")
        run = self.service.start(spec, on_event=on_event, paused=paused, on_unavailable="pause", background=False,
                                 proposer=proposer)
        es = run.session

        def closer(e: EvolveEvent, run=run) -> None:
            if e.kind == "Stopped":
                threading.Thread(target=run.close, kwargs={"wait": True}, daemon=True).start()
        es.subscribe(closer)
        self.runners[name] = es
        es.start()
        return es

    def free_session_name(self, base: str) -> str:
        names = {s.name for s in self.ws.sessions()}
        if base not in names:
            return base
        i = 2
        while f"{base}-{i}" in names:
            i += 1
        return f"{base}-{i}"

    def runner(self, session: str) -> EvolutionSession | None:
        return self.runners.get(session)

    # ------------------------------------------------------------------------------ judgements

    def live_runner(self, cid: str) -> EvolutionSession | None:
        """The running loop of the candidate's session, if there is one (it must hear of changes)."""
        parsed = parse_candidate_id(cid)
        r = self.runners.get(parsed[0]) if parsed else None
        return r if r is not None and r.running else None

    def override(self, cid: str, stage: str, to: str, reason: str, by: str | None = None) -> tuple[Override, str]:
        """Record the override. Returns (entry, next step): "session" when the session's running loop took
        the candidate back (it re-reads the notes and evaluates it if it may now go on), "evaluate" when it is
        no longer blocked and has no measurement, so the app should evaluate it, else ""."""
        entry = self.ws.override(cid, stage, to, reason, by=by)
        st = self.ws.status(cid)
        runner = self.live_runner(cid)
        if runner is not None:
            runner.notice(cid)
            return entry, "session"
        return entry, ("evaluate" if not st.blocked and st.measurement is None else "")

    @property
    def queued(self) -> int:
        return self.reevaluations.queued

    def reevaluate(self, cid: str, on_stage: Callable[[Verdict], None] | None = None) -> Reevaluation:
        """Evaluate the candidate again, queued behind any other re-evaluation (kbench_tui.reevaluations)."""
        return self.reevaluations.reevaluate(cid, on_stage)

    # ------------------------------------------------------------------------------ hand edits, export

    def edit(self, cid: str) -> CandidateRecord:
        """Open the candidate in $VISUAL/$EDITOR (blocks: the app suspends around it) and commit the result as
        a `human` candidate, child of `cid`. Returns the new CandidateRecord, or raises KbenchError with the
        proposer's reason (unchanged files, editor failed). A running loop of the session adopts and evaluates
        it (see `live_runner`); otherwise the caller evaluates it."""
        new = hand_edit(self.ws, cid, self.task_of, env=self.env, run=self._editor_run)
        runner = self.live_runner(new.id)
        if runner is not None:
            runner.notice(new.id)
        return new

    def export(self, cid: str, out: str | Path, *, name: str | None = None, force: bool = False,
               overwrite: bool = False) -> tuple[Path, list[str]]:
        """Write the export package and note an `exported` event on the candidate, as `kbench export` does
        (engine.service.person_actions)."""
        done = export_candidate(self.ws, cid, Path(out) if str(out) else Path(self.default_export_dir(cid)),
                                by="tui", name=name, force=force, overwrite=overwrite)
        return done.out, [*done.warnings, *done.notes]

    @staticmethod
    def is_unknown_session(error: BaseException) -> bool:
        """Whether `error` says the session does not exist (yet: a loop's thread may be creating it)."""
        return isinstance(error, UnknownSessionError)

    def export_readiness(self, cid: str) -> tuple[bool, str]:
        """(whether the candidate may be exported without --force, why not): what the export modal says."""
        return passing_status(self.ws.status(cid))

    def default_export_dir(self, cid: str) -> str:
        """<workspace>/exports/<package name> (engine.workspace.default_export_dir), as `kbench export`."""
        try:
            name = default_name(self.task_of(self.ws.resolve(cid).session).name)
        except Exception:  # noqa: BLE001
            name = "kbench_export"
        return str(default_export_dir(self.ws.path, name))
