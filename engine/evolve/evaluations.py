"""The loop's side of the evaluator: the evaluations and profiles it has asked for and not yet heard back from,
and the candidates' files it reads them from the workspace for.

The evaluator works on its own threads; what it hands back comes through the controls' inbox (engine.evolve
.controls): a compile verdict as it finishes ("stage"), the outcome ("done"), a profile ("profiled"). The loop
takes them on its own thread (engine.evolve.loop) and this part forgets the ones that came back.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from engine.candidates import Candidate
from engine.evolve import events as ev
from engine.evolve.controls import Controls
from engine.evolve.outcome import CanProfile, EvalOutcome, Evaluator, HasCapacity, SaysWaits
from engine.evolve.population import Member
from engine.verdict import Stage, Verdict

if TYPE_CHECKING:
    from engine.workspace import Workspace


class Evaluations:
    """What the session has sent to its evaluator."""

    def __init__(self, evaluator: Evaluator, ws: Workspace, session: str, controls: Controls,
                 emit: Callable[[ev.EvolveEvent], None]):
        self.evaluator = evaluator
        self._ws, self._session, self._controls, self._emit = ws, session, controls, emit
        self.in_flight: dict[str, Future[EvalOutcome]] = {}
        self.profiling: dict[str, Future[Verdict]] = {}     # the profile stage of a passing candidate
        self._files: dict[str, Candidate] = {}               # candidate files read from the workspace (a cache)

    @property
    def capacity(self) -> int | None:
        return self.evaluator.capacity if isinstance(self.evaluator, HasCapacity) else None

    def busy(self) -> bool:
        return bool(self.in_flight or self.profiling)

    def candidate(self, cid: str) -> Candidate:
        if cid not in self._files:
            self._files[cid] = self._ws.files(cid)
        return self._files[cid]

    def submit(self, m: Member) -> None:
        """Send `m` to the evaluator; its compile verdict and its outcome come back through the inbox."""
        cand, cid = self.candidate(m.id), m.id
        fut = self.evaluator.submit(cand, lambda v: self._controls.put("stage", cid, v))
        self.in_flight[cid] = fut
        if isinstance(self.evaluator, SaysWaits) and (wait := self._expected_wait(cand)):
            self._emit(ev.LongWait(self._session, candidate=cid, stage=Stage.COMPILE, what=wait))
        fut.add_done_callback(self._controls.when_done("done", cid))

    def _expected_wait(self, cand: Any) -> str | None:
        try:
            return self.evaluator.expected_wait(cand)
        except Exception:  # noqa: BLE001 - a missing toolchain is the build's to report; this is only a word
            return None

    def returned(self, cid: str) -> None:
        self.in_flight.pop(cid, None)

    def profile(self, m: Member, device: dict[str, Any], why: str) -> None:
        """Ask for `m`'s profile stage (once); the verdict comes back through the inbox as "profiled"."""
        if not isinstance(self.evaluator, CanProfile) or m.id in self.profiling or self._controls.abandoned:
            return
        try:
            fut = self.evaluator.profile(self.candidate(m.id), device=device)
        except Exception as exc:  # noqa: BLE001 - no profile is no feedback, never a failed session
            self._emit(ev.Log(self._session, level="warning", message=f"{m.id}: could not profile it: {exc}"))
            return
        self.profiling[m.id] = fut
        self._emit(ev.Log(self._session, message=f"{m.id}: {why}, profiling it (ncu + torch profiler)"))
        fut.add_done_callback(self._controls.when_done("profiled", m.id))

    def profiled(self, cid: str) -> None:
        self.profiling.pop(cid, None)

    def cancel_pending(self) -> None:
        self.evaluator.cancel_pending()
