"""The app's re-evaluation queue: a person's requests to evaluate a candidate again run one at a time, each
session's evaluator kept for the next request, and what was found is appended as `kbench reevaluate`
appends it (verdicts, measurement, a `reevaluated` event; the profile on demand).

Owned by kbench_tui.backend.Backend, which hands it the workspace, the config and the ways to make an
evaluator, find a session's task and reach a session's running loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from engine.verdict import Verdict
from kbench_tui.view_models import Reevaluation, _reevaluation_summary


class ReevaluationQueue:
    def __init__(self, ws: Any, config: Any, *, make_evaluator: Callable[[Any, str], Any],
                 task_of: Callable[[str], Any], live_runner: Callable[[str], Any]):
        self.ws = ws
        self.config = config
        self._make_evaluator = make_evaluator
        self._task_of = task_of
        self._live_runner = live_runner
        self.evaluators: dict[str, Any] = {}        # session -> its evaluator, kept for the next request
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

    def reevaluate(self, cid: str, on_stage: Callable[[Verdict], None] | None = None) -> Any:
        """Evaluate the candidate again (queued behind any other re-evaluation) and append its verdicts, the
        measurement and a `reevaluated` event, as `kbench reevaluate` does. Returns the new status and a line
        saying what this evaluation found (not what the latest measurement says: without a GPU there is none)."""
        with self._queue_guard:
            self._queued += 1
        try:
            with self._eval_lock:
                view = self.ws.view(cid)
                session = view.record.session
                task = self._task_of(session)
                direction = self.ws.session(session).direction
                key = f"{session}"
                ev = self.evaluators.get(key)
                if ev is None:
                    ev = self.evaluators[key] = self._make_evaluator(task, direction)
                cand = self.ws.files(cid)
                out = ev.submit(cand, on_stage).result()
                notes = out.reevaluation_notes(by="tui")
                status = self.ws.record(cid, notes) if notes else self.ws.status(cid)
                if getattr(self.config.eval, "profile", "best") == "best":
                    # on demand: the one candidate a person re-evaluates is profiled too (its evaluation
                    # leaves the profile stage out with [eval] profile = "best")
                    from engine.evolve.outcome import profile_now
                    prof = profile_now(ev, cand, out)
                    if prof is not None:
                        if on_stage is not None:
                            on_stage(prof)
                        status = self.ws.record_verdict(cid, prof, by="tui")
                if out.not_judged:
                    return Reevaluation(status, out.not_judged)
                meas = out.measurement()
                runner = self._live_runner(cid)
                if runner is not None:
                    runner.notice(cid)      # the running loop takes the new fitness
                return Reevaluation(status, _reevaluation_summary(out, meas))
        finally:
            with self._queue_guard:
                self._queued -= 1
