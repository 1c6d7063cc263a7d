"""Candidate actions shared by the session and candidate screens: override, re-evaluate, edit, export.
Each asks the user (a modal) on the UI thread, then runs the engine call in a worker."""

from __future__ import annotations

from textual.app import SuspendNotSupported

from engine.verdict import STAGES
from kbench_tui.screens.export import ExportScreen
from kbench_tui.screens.override import OverrideScreen
from kbench_tui.wording import for_the_app
from kbench_tui.workers import Done, Failed, StageProgress


class OverridePrepared(Done):
    """The candidate's view, to ask which verdict to override."""


class Overridden(Done[tuple]):
    """(candidate, the override entry recorded, what happens next: "session", "evaluate" or "")."""


class OverrideRefused(Failed):
    """The override was refused (a stage that cannot be overridden, a damaged note)."""


class Reevaluated(Done[tuple]):
    """(candidate, the re-evaluation's outcome)."""


class ReevaluationFailed(Failed):
    """The re-evaluation could not run."""


class ExportPrepared(Done[tuple]):
    """(candidate, passing, why not, the default folder): what the export modal opens with."""


class CandidateActions:
    """Mixed into a Screen that has `current_candidate() -> str | None` and `after_change(cid)`."""

    def current_candidate(self) -> str | None:  # pragma: no cover - overridden
        return None

    def after_change(self, cid: str) -> None:  # pragma: no cover - overridden
        pass

    @property
    def backend(self):
        return self.app.backend

    # -- override
    def action_override(self) -> None:
        cid = self.current_candidate()
        if cid:
            self.background(self.backend.view, cid, done=OverridePrepared, what="override")

    def on_override_prepared(self, message: OverridePrepared) -> None:
        view = message.value
        have = {s: st.status.value for s, st in view.status.stages.items()}
        stages = [(s, have[s]) for s in have] + [(s, "none") for s in STAGES if s not in have]
        blocked_by = view.status.judgement.blocked_by
        blocking = blocked_by[0] if blocked_by else None

        def done(answer) -> None:
            if answer:
                self.background(self._do_override, view.record.id, answer, done=Overridden, failed=OverrideRefused,
                                what="override")

        self.app.push_screen(OverrideScreen(view.record.id, stages, blocking), done)

    def _do_override(self, cid: str, answer: dict):
        entry, step = self.backend.override(cid, answer["stage"], answer["to"], answer["reason"])
        return cid, entry, step

    def on_overridden(self, message: Overridden) -> None:
        cid, entry, step = message.value
        was = entry.from_status or "none"
        self.app.notify(f"{cid}: {entry.stage} {was} → {entry.to_status.value} (recorded)")
        self.log_line(f"override {cid} {entry.stage}: {was} -> {entry.to_status.value}: {entry.reason}")
        self.after_change(cid)
        if step == "session":
            self.log_line(f"{cid}: the running session re-reads it (and evaluates it if it may now go on)")
        elif step == "evaluate":      # said, not done: an evaluation takes GPU time the user did not ask for
            self.log_line(f"{cid}: nothing blocks it now and it has no measurement: e evaluates it")

    # -- re-evaluate
    def action_reevaluate(self) -> None:
        cid = self.current_candidate()
        if cid:
            self.start_reevaluate(cid)

    def start_reevaluate(self, cid: str) -> None:
        notice = self.backend.gpu_notice()
        self.app.notify(f"{cid}: queued for re-evaluation" + (f" — {notice}" if notice else ""))
        self.log_line(f"re-evaluate {cid}: queued ({self.backend.queued} ahead)")
        post = self.app.post_message
        self.background(self._do_reevaluate, cid, lambda v: post(StageProgress(cid, v)), done=Reevaluated,
                        failed=ReevaluationFailed, what="re-evaluation", group=f"reeval:{cid}")

    def _do_reevaluate(self, cid, on_stage):
        return cid, self.backend.reevaluate(cid, on_stage)

    def on_reevaluated(self, message: Reevaluated) -> None:
        cid, done = message.value
        self.app.notify(f"{cid}: re-evaluated: {done.summary}")
        self.log_line(f"re-evaluated {cid}: {done.summary}")
        self.after_change(cid)

    def on_reevaluation_failed(self, message: ReevaluationFailed) -> None:
        error = message.error
        self.app.notify(f"re-evaluation failed: {for_the_app(str(error))}", severity="error", timeout=12, markup=False)
        self.log_line(f"re-evaluation failed: {for_the_app(str(error))}")

    # -- hand edit
    def action_edit(self) -> None:
        cid = self.current_candidate()
        if not cid:
            return
        outcome: list = []

        def edit() -> None:
            # nothing may escape the suspend block: Textual resumes the terminal only on a normal exit
            try:
                outcome.append(self.backend.edit(cid))
            except Exception as exc:  # noqa: BLE001 - KbenchError, editor trouble: said below, carry on
                outcome.append(exc)

        try:
            with self.app.suspend():
                edit()
        except SuspendNotSupported:        # headless (tests): the editor runs without a terminal
            edit()
        rec = outcome[0] if outcome else None
        if not hasattr(rec, "id"):
            self.app.notify(for_the_app(str(rec)), severity="warning", timeout=8, markup=False)
            return
        self.app.notify(f"committed {rec.id} (human) from {cid}")
        self.log_line(f"hand edit: committed {rec.id} from {cid}")
        self.after_change(rec.id)
        if self.backend.live_runner(rec.id) is not None:
            self.log_line(f"{rec.id}: joined the running session, which evaluates it")
        else:
            self.start_reevaluate(rec.id)

    # -- export
    def action_export(self) -> None:
        cid = self.current_candidate()
        if cid:
            self.background(self._export_prep, cid, done=ExportPrepared, what="export")

    def _export_prep(self, cid):
        ok, why = self.backend.export_readiness(cid)
        return cid, ok, why, self.backend.default_export_dir(cid)

    def on_export_prepared(self, message: ExportPrepared) -> None:
        cid, ok, why, out = message.value

        def export(answer):        # in the modal's worker: a refusal keeps the modal open and says why
            return self.backend.export(cid, answer["out"], name=answer["name"], force=answer["force"],
                                       overwrite=answer["overwrite"])

        def done(written) -> None:
            if written:
                self.exported(cid, *written)

        self.app.push_screen(ExportScreen(cid, out, ok, why, export=export), done)

    def exported(self, cid: str, out, notes) -> None:
        self.app.notify(f"exported {cid} to {out}" + ("".join(f"\n{n}" for n in notes)), timeout=10)
        self.log_line(f"exported {cid} -> {out}")
        self.after_change(cid)

    def on_override_refused(self, message: OverrideRefused) -> None:
        self.app.notify(f"override refused: {for_the_app(str(message.error))}", severity="error", timeout=10,
                        markup=False)

    def log_line(self, line: str) -> None:
        self.app.log_event_line(line)
