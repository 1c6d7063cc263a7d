"""Re-evaluation through the session service: evaluate candidates again and append the verdicts, the
measurement and a `reevaluated` event (nothing is rewritten), as the session's one writer, with the profile
stage run on its own where `[eval] profile = "best"` asks for it.

The one implementation of what a re-evaluation records: `kbench reevaluate` and the app's re-evaluation
queue (kbench_tui.reevaluations) both run `SessionReevaluation.reevaluate`; they differ only in who asked
(`by`, in the `reevaluated` event's data), how the claim names them, and whether the evaluator is theirs.

SessionReevaluation is a base of engine.service.session_service.SessionService and uses its workspace,
config, task_of and make_evaluator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from engine.config.sections import Config
from engine.errors import KbenchError
from engine.verdict import Stage

if TYPE_CHECKING:
    from engine.candidates import Candidate
    from engine.evolve.outcome import EvalOutcome, Evaluator
    from engine.tasks.model import Task
    from engine.verdict import Verdict
    from engine.workspace import CandidateStatus, CandidateView, SessionInfo, Workspace

# The `by` of every verdict a re-evaluation notes, the profile's included (EvalOutcome.reevaluation_notes notes
# the others so); who asked for it is the `by` in its `reevaluated` event's data.
REEVALUATED_BY = "reevaluate"


@dataclass(frozen=True)
class Reevaluated:
    id: str
    before: float | None                  # the speedup before this evaluation
    status: CandidateStatus               # the candidate's status after its notes
    outcome: EvalOutcome
    profile: Verdict | None = None        # the `profile` Verdict of a profile run after it ([eval] profile = "best")


class SessionReevaluation:
    """Picks the candidates to evaluate again, evaluates them and records what was found."""

    # Set by SessionService.__init__; task_of and make_evaluator come from SessionService and SessionWiring.
    ws: Workspace
    config: Config
    task_of: Callable[[str], Task]
    make_evaluator: Callable[[Task, str], Evaluator]

    def reevaluation_targets(self, target: str, all_: bool = False) -> tuple[SessionInfo, list[CandidateView]]:
        """(session info, candidate views) for `kbench reevaluate TARGET`: a candidate, or a session's candidates
        that have a measurement or passed correctness (or, with all_, every one). "Passed correctness" is the
        judge's (engine.verdict.judge): a pass from a check that ran; a person's override to pass over a check
        that never ran is not one (an override may change a verdict, never invent a measurement)."""
        sessions = {s.name: s for s in self.ws.sessions()}
        if target in sessions:
            info = sessions[target]
            views = self.ws.candidates(info.name, strict=False)
            damaged = [v for v in views if v.problem]
            if damaged and not self.ws.accept_damage:  # named, never re-evaluated over in silence
                raise KbenchError(damaged[0].problem)
            if not all_:
                views = [v for v in views if v.status.measurement is not None or v.problem
                         or Stage.CORRECTNESS not in v.status.judgement.unmet]
            return info, views
        view = self.ws.view(target)
        return self.ws.session(view.record.session), [view]

    def reevaluate(self, target: str, *, all_: bool = False, by: str = "reevaluate",
                   evaluator: Evaluator | None = None, take_over: bool = False, command: str = "kbench reevaluate",
                   on_stage: Callable[[Verdict], None] | None = None) -> Iterator[Reevaluated]:
        """Evaluate again and append the verdicts, the measurement and a `reevaluated` event (nothing is
        rewritten), as the session's one writer. Yields one Reevaluated per candidate as it finishes.

        With `[eval] profile = "best"` the evaluations leave the profile stage out; it then runs on its own
        for a candidate asked for by id (on demand), and for one that becomes the session's new best when a
        whole session is re-evaluated ("all": inside every evaluation; "off": never).

        `by`: who asked (the `reevaluated` event's data; the verdicts are noted by REEVALUATED_BY). `command`:
        how the session's claim names this process to a writer it refuses. `evaluator`: the caller's, left
        open (else one is made and closed). `on_stage`: hears every verdict as its stage ends, the profile's
        too."""
        info, views = self.reevaluation_targets(target, all_)
        if not views:
            return
        task = self.task_of(info.name)
        claim = self.ws.claim(info.name, command, take_over=take_over)
        own = evaluator is None
        by_id = target != info.name
        try:
            if own:
                evaluator = self.make_evaluator(task, info.direction)
            best = self.ws.best(info.name)
            best_id = best.id if best is not None else None
            files = {v.id: self.ws.files(v.id) for v in views}
            futs = [(v, evaluator.submit(files[v.id], on_stage)) for v in views]
            for v, fut in futs:
                out = fut.result()
                r = self.record_reevaluation(v, out, by)
                if self.config.eval.profile == "best":
                    now = self.ws.best(info.name)
                    if by_id or (now is not None and now.id == v.id and now.id != best_id):
                        r = self.profile_reevaluated(r, evaluator, files[v.id], on_stage)
                    best_id = now.id if now is not None else None
                yield r
        finally:
            try:
                if own and evaluator is not None:
                    evaluator.close()
            finally:
                claim.release()

    def record_reevaluation(self, view: CandidateView, outcome: EvalOutcome, by: str) -> Reevaluated:
        notes = outcome.reevaluation_notes(by=by)
        status = self.ws.record(view.id, notes) if notes else self.ws.status(view.id)
        return Reevaluated(view.id, view.status.speedup, status, outcome)

    def profile_reevaluated(self, r: Reevaluated, evaluator: Evaluator, candidate: Candidate,
                            on_stage: Callable[[Verdict], None] | None = None) -> Reevaluated:
        """The profile stage on its own for a candidate just re-evaluated (where it passed and its evaluation
        did not profile it), its verdict appended to the note as the evaluation's others are."""
        from engine.evolve.outcome import profile_now   # lazy: the evolve package (~0.2 s), only for this stage
        verdict = profile_now(evaluator, candidate, r.outcome)
        if verdict is None:
            return r
        if on_stage is not None:
            on_stage(verdict)
        return replace(r, status=self.ws.record_verdict(r.id, verdict, by=REEVALUATED_BY), profile=verdict)
