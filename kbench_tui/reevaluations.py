"""The app's re-evaluation queue: a person's requests to evaluate a candidate again run one at a time, each
session's evaluator kept for the next request.

What a re-evaluation records is the engine's alone: each request is the session service's `reevaluate` of
the candidate (engine.service.reevaluation), the one `kbench reevaluate ID` runs (its verdicts, the
measurement, a `reevaluated` event with data `by: tui`, the profile on demand; the session claimed while it
runs). This module adds only the queue, the kept evaluators, the running loop told of the new fitness and
the line the app shows.

Owned by kbench_tui.backend.Backend, which hands it the session service and the way to reach a session's
running loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.verdict import Verdict
from kbench_tui.view_models import Reevaluation, _reevaluation_summary

if TYPE_CHECKING:
    from engine.evolve.loop import EvolutionSession
    from engine.evolve.outcome import Evaluator
    from engine.service.session_service import SessionService

CLAIMED_AS = "kbench app"      # how the session's claim names the app while it re-evaluates


class ReevaluationQueue:
    def __init__(self, service: SessionService, *, live_runner: Callable[[str], EvolutionSession | None]):
        self.service = service
        self._live_runner = live_runner
        self.evaluators: dict[str, Evaluator] = {}        # session -> its evaluator, kept for the next request
        self._eval_lock = threading.Lock()          # re-evaluations run one at a time (a queue)
        self._queued = 0
        self._queue_guard = threading.Lock()

    @property
    def queued(self) -> int:
        """Requests waiting or running now."""
        return self._queued

    def close(self) -> None:
        for e in list(self.evaluators.values()):
            try:
                e.close(wait=False)
            except Exception:  # noqa: BLE001
                pass

    def reevaluate(self, cid: str, on_stage: Callable[[Verdict], None] | None = None) -> Reevaluation:
        """Evaluate the candidate again (queued behind any other re-evaluation) through the session service,
        which records it as `kbench reevaluate` does. Returns the new status and a line saying what this
        evaluation found (not what the latest measurement says: without a GPU there is none)."""
        with self._queue_guard:
            self._queued += 1
        try:
            with self._eval_lock:
                svc = self.service
                session = svc.ws.resolve(cid).session
                ev = self.evaluators.get(session)
                if ev is None:
                    ev = self.evaluators[session] = svc.make_evaluator(svc.task_of(session),
                                                                       svc.ws.session(session).direction)
                (r,) = list(svc.reevaluate(cid, by="tui", evaluator=ev, command=CLAIMED_AS, on_stage=on_stage))
                out = r.outcome
                if out.not_judged:
                    return Reevaluation(r.status, out.not_judged)
                runner = self._live_runner(cid)
                if runner is not None:
                    runner.notice(cid)      # the running loop takes the new fitness
                return Reevaluation(r.status, _reevaluation_summary(out, out.measurement()))
        finally:
            with self._queue_guard:
                self._queued -= 1
