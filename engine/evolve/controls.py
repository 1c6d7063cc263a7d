"""The session's controls and threads: pause, resume, step, stop and notice (thread-safe, for a UI on another
thread), the background run, the small daemon pool proposals and LLM reviews run on, and the inbox.

All workspace writes happen on the loop's own thread; the evaluator's threads and the pool only hand
results back through the inbox (`_submit` and the callbacks put, `_drain` takes and dispatches on the loop's
thread), and every put sets `wake` so a waiting loop looks at once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from engine.errors import KbenchError
from engine.evolve import events as ev
from engine.evolve.loop_state import InboxItem, LoopState
from engine.evolve.outcome import PROFILE_STAGE, EvalOutcome, SaysWaits
from engine.evolve.population import DONE, PENDING, Member
from engine.evolve.resume import member_from_view
from engine.verdict import Stage, Status, Verdict
from engine.workspace.note_entries import VerdictNote
from engine.workspace.records import now_iso


@dataclass
class Flags:
    """The loop's controls as thread-safe flags: what a UI's thread sets and the loop's thread reads."""

    stop: threading.Event = field(default_factory=threading.Event)
    abandon: threading.Event = field(default_factory=threading.Event)   # stop without waiting for evaluations
    paused: bool = False
    steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    wake: threading.Event = field(default_factory=threading.Event)


class DaemonPool:
    """A few daemon worker threads for proposals and reviews: a process that quits (Ctrl-C twice) does not wait
    for an LLM call still in flight, as it would for concurrent.futures' workers, which are joined at exit."""

    def __init__(self, workers: int, name: str):
        self._jobs: queue.Queue[tuple[Future, Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        self._jobs.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, fn, args = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
                fut.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel what has not started; running jobs finish on their own (their threads are daemons)."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)


class SessionControls(LoopState):
    """EvolutionSession's controls, background thread and inbox."""

    def pause(self, reason: str = "") -> None:
        with self._flags.lock:
            self._flags.paused = True
            self._pause_reason = reason
        self._flags.wake.set()

    def resume(self) -> None:
        with self._flags.lock:
            self._flags.paused = False
            self._flags.steps = 0
            self._pause_reason = ""
        self._flags.wake.set()

    def step(self, n: int = 1) -> None:
        """While paused: let `n` more proposals through (each evaluated), then stay paused."""
        with self._flags.lock:
            self._flags.paused = True
            self._flags.steps += n
        self._flags.wake.set()

    def stop(self, wait_for_evaluations: bool = True) -> None:
        """Stop proposing. With `wait_for_evaluations` the running evaluations finish and are recorded;
        without, queued ones are cancelled and running ones abandoned (their candidates stay pending in the
        workspace and are re-queued on resume)."""
        if not wait_for_evaluations:
            self._flags.abandon.set()
        self._flags.stop.set()
        self._flags.wake.set()

    def notice(self, candidate_id: str) -> None:
        """Something changed a candidate of this session behind the loop's back (a person's override, a
        re-measurement, a hand edit committed by the app): re-read it from the workspace. Thread-safe.

        A member that is no longer blocked and has no measurement goes (back) to the evaluator; a finished
        one takes its new fitness (an override to `suspicious` takes it out of the parent pool); a new
        candidate of this session joins the population, and is evaluated here if it has not been yet."""
        self._inbox.put(("notice", candidate_id, None))
        self._flags.wake.set()

    requeue = notice   # the older name: after an override of a pre-GPU rejection

    @property
    def paused(self) -> bool:
        return self._flags.paused

    @property
    def pause_reason(self) -> str:
        return self._pause_reason

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._finished.is_set()

    def claim(self, take_over: bool = False, command: str = "kbench evolve") -> None:
        """Become the session's one writer (engine.workspace.writers) until the run ends. A front end calls
        this before `start` to hear a refusal at once (SessionBusyError names the holder); `run` claims the
        session itself otherwise."""
        if self._claim is None and hasattr(self.ws, "claim"):
            self._claim = self.ws.claim(self.session, command, take_over=take_over)

    def start(self) -> threading.Thread:
        """Run the loop on a background thread; returns it. Events tell what happens; a KbenchError that
        ends the run is kept in `error` (and in the Stopped event's reason), not printed as a traceback."""
        self._finished.clear()
        self._thread = threading.Thread(target=self._run_in_thread, name=f"kbench-evolve-{self.session}",
                                        daemon=True)
        self._thread.start()
        return self._thread

    def _run_in_thread(self) -> None:
        try:
            self.run()
        except KbenchError as exc:
            self.error = exc
        finally:
            self._finished.set()

    def join(self, timeout: float | None = None) -> ev.Stopped | None:
        """Wait for the background run to end (or `timeout`). An Event, not Thread.join: on Python 3.11 a
        Thread.join interrupted by Ctrl-C leaves the thread looking finished while it still runs, and the CLI
        then exited without waiting for the loop to stop and say so."""
        if self._thread is not None:
            self._finished.wait(timeout)
        return self.result

    def _wait(self) -> None:
        self._flags.wake.clear()
        self._drain(block=True)

    # -- the inbox: what the evaluator, the pool and notices send back --------------------------------

    def _submit(self, m: Member) -> None:
        cand = self._candidate(m.id)
        cid = m.id

        def on_stage(v: Verdict) -> None:
            self._inbox.put(("stage", cid, v))
            self._flags.wake.set()

        fut = self.evaluator.submit(cand, on_stage)
        self._in_flight[cid] = fut
        if isinstance(self.evaluator, SaysWaits) and (wait := self._expected_wait(cand)):
            self._emit(ev.LongWait(self.session, candidate=cid, stage=Stage.COMPILE, what=wait))
        fut.add_done_callback(lambda f: (self._inbox.put(("done", cid, f)), self._flags.wake.set()))

    def _expected_wait(self, cand: Any) -> str | None:
        try:
            return self.evaluator.expected_wait(cand)
        except Exception:  # noqa: BLE001 - a missing toolchain is the build's to report; this is only a word
            return None

    def _drain(self, block: bool) -> None:
        """Handle everything the evaluator sent back. With `block`, wait a little for something (or a control)."""
        if block:
            try:
                item = self._inbox.get(timeout=self.poll_s)
            except queue.Empty:
                return
            self._handle(item)
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            self._handle(item)

    def _handle(self, item: InboxItem) -> None:
        kind, cid, payload = item
        if kind == "proposal":
            gen, op, parents = self._proposing.pop(int(cid))
            if payload.cancelled() or self._flags.abandon.is_set():
                return
            self._after_proposal(gen, op, parents, payload.result())   # guarded(): never raises
            return
        if kind == "verified":
            self._verifying.discard(cid)
            static, fut = payload
            m = self.population.get(cid)
            if m is None or m.state == DONE or fut.cancelled() or self._flags.abandon.is_set():
                return
            try:
                ver = fut.result()
            except Exception as exc:  # noqa: BLE001 - a verifier bug: the candidate goes on unreviewed
                from engine.llm.verifiers import STAGE, Verification  # lazy: it loads the LLM SDK (~1 s)
                ver = Verification(Verdict(STAGE, Status.SKIPPED, f"the LLM review failed: {exc!r}"), ())
            if self._reviewed(m, static, ver) is None and not self._flags.stop.is_set():
                self._submit(m)
            return
        if kind == "profiled":
            self._profiling.pop(cid, None)
            if payload.cancelled() or self._flags.abandon.is_set():
                return
            try:
                verdict: Verdict = payload.result()
            except Exception as exc:  # noqa: BLE001 - an evaluator bug: profiling is feedback, never a failure
                verdict = Verdict(PROFILE_STAGE, Status.SKIPPED, f"profiling failed: {exc!r}")
            self._record_profile(cid, verdict)
            return
        m = self.population.get(cid)
        if kind == "notice":
            self._notice(cid)
            return
        if m is None or m.state == DONE:
            return
        if kind == "stage":
            v: Verdict = payload
            self._emit(ev.StageFinished(self.session, candidate=cid, stage=v.stage, status=v.status.value,
                                        reason=v.reason))
            if v.stage == Stage.COMPILE:
                # compile finishes long before the GPU stages: note it now
                self.ws.record(cid, [VerdictNote(v, now_iso())])
                self._recorded.setdefault(cid, set()).add(v.stage)
            return
        fut = payload
        self._in_flight.pop(cid, None)
        if fut.cancelled():
            return  # stays pending in the workspace; a resume re-queues it
        try:
            out: EvalOutcome = fut.result()
        except Exception as exc:  # noqa: BLE001 - an evaluator bug is this candidate's failure
            out = EvalOutcome([Verdict(Stage.CORRECTNESS, Status.FAIL, f"evaluator error: {exc!r}")])
        self._record_outcome(m, out)

    def _notice(self, cid: str) -> None:
        if cid in self._in_flight:
            return          # its evaluation is running here: the result will be re-read when recorded
        try:
            view = self.ws.view(cid)
        except KbenchError as exc:
            self._emit(ev.Log(self.session, message=f"{cid}: cannot re-read it: {exc}", level="warning"))
            return
        if view.record.session != self.session:
            return
        fresh, finished = member_from_view(view)
        m = self.population.get(fresh.id)
        if m is None:
            m = self.population.add(fresh)
            for p in m.parents:
                if p in self.population.members:
                    self.population.members[p].times_parent += 1
            self._emit(ev.CandidateCommitted(self.session, candidate=m.id, generation=m.generation,
                                             operator=m.operator, parents=m.parents, title=m.title))
            if finished:
                return
            self._emit(ev.Log(self.session, message=f"{m.id}: joined the session ({view.record.proposer}), "
                                                    "sent to the evaluator"))
            self._submit(m)
            return
        if finished:
            if fresh.rejected:
                self._emit(ev.Log(self.session, level="warning", message=(
                    f"{m.id} is still blocked at {fresh.failed_stage}: not re-queued")))
            changed = (m.eligible, m.speedup) != (fresh.eligible, fresh.speedup)
            m.state, m.speedup, m.eligible = DONE, fresh.speedup, fresh.eligible
            m.failed_stage, m.reason, m.rejected = fresh.failed_stage, fresh.reason, fresh.rejected
            if changed:
                what = f"{m.speedup:.3f}x" if m.eligible and m.speedup else f"not eligible ({m.failed_stage})"
                self._emit(ev.Log(self.session, message=f"{m.id}: re-read from the workspace: now {what}"))
            return
        if m.state == DONE:
            self._evaluated -= 1
            m.state, m.rejected, m.failed_stage, m.reason = PENDING, False, None, ""
            self._emit(ev.Log(self.session, message=f"{m.id}: override seen, sent to the evaluator"))
            self._submit(m)
        elif not m.rejected and m.state == PENDING:     # (one in flight returned above)
            self._submit(m)
