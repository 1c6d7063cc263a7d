"""The pre-GPU gate: what a committed candidate passes before it may reach the evaluator.

    a proposal's answer ─▶ dedup (a source this session already has is not committed again)
    committed ─▶ static checks (engine.evolve.checks) ─▶ LLM review (engine.llm.verifiers; not the baseline)
              ─▶ the evaluator (compile on CPU, then check + time on a GPU)

A blocking verdict (fail, suspicious) finishes the candidate here, rejected, never compiled; a person's
override sends it on (the session's `notice`). The review runs on the session's pool when proposals run in
parallel, and its answer comes back through the inbox ("verified"). An API outage holds the candidate, reviews
nothing and writes nothing, so it is reviewed after the pause.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from engine.candidates import Candidate
from engine.evolve import events as ev
from engine.evolve.controls import Controls, Pool
from engine.evolve.evaluations import Evaluations
from engine.evolve.planner import BASELINE
from engine.evolve.population import DONE, PENDING, Member, Population
from engine.evolve.recorder import Recorder
from engine.proposers.base import Proposal
from engine.tasks.model import Task
from engine.verdict import (
    BLOCKING,
    PRE_GPU,
    Stage,
    Status,
    Verdict,
    effective,
    judge_verdicts,
)

if TYPE_CHECKING:
    from engine.llm.verifiers import Verification
    from engine.workspace import Workspace

Check = Callable[[Task, str, Candidate], Verdict]        # a pre-GPU check (engine.evolve.checks)
Verifier = Callable[[Candidate], "Verification"]         # the LLM review of a candidate (engine.llm.verifiers)

REVIEWING = Verdict(Stage.LLM_VERIFY, Status.SKIPPED, "the LLM review is under way")   # a marker, never recorded


class PreGpuGate:
    """The gate between a proposal and the evaluator: its checks, its verifier, and the candidates whose LLM
    review is under way or waits for the API."""

    def __init__(self, ws: Workspace, session: str, task: Task, direction: str, checks: Sequence[Check],
                 verifier: Verifier | None, population: Population, evaluations: Evaluations, recorder: Recorder,
                 controls: Controls, pool: Pool, outage: Callable[[str], None]):
        self._ws, self._session, self._task, self._direction = ws, session, task, direction
        self.checks, self.verifier = list(checks), verifier
        self._population, self._evaluations, self._recorder = population, evaluations, recorder
        self._controls, self._pool, self._outage = controls, pool, outage
        self._verifying: set[str] = set()       # committed, their LLM review running
        self._held: set[str] = set()            # committed, review not possible (API unavailable): after the pause

    def busy(self) -> bool:
        return bool(self._verifying)

    def waiting(self, cid: str) -> bool:
        """`cid`'s review is running or waits for the API: the review, not the loop, sends it on."""
        return cid in self._verifying or cid in self._held

    def repeats_known(self, proposal: Proposal) -> bool:
        """The answer's source is one this session already has: logged, not committed."""
        cand = proposal.candidate
        if cand is None or cand.source_hash not in self._population.known_hashes:
            return False
        self._recorder.emit(ev.Log(self._session, message=f"proposal {proposal.id} repeats a known candidate; skipped"))
        return True

    def admit(self, m: Member) -> None:
        """A candidate just committed: to the evaluator, unless a check blocks it or its review sends it on."""
        if self.pre_gpu(m) is None:
            self._evaluations.submit(m)

    def checked_before_gpu(self, m: Member) -> bool:
        """A re-queued candidate may have been committed just before a kill, before its static / LLM checks
        ran: run the missing ones now, and send it to the evaluator when it may go (True: sent, or its review
        is under way and will send it)."""
        st = self._ws.status(m.id)
        bad = next((st.stages[s] for s in st.judgement.blocked_by if s in PRE_GPU), None)
        if bad is not None:
            self._recorder.blocked_before(m, bad.stage, bad.reason)
            return False
        missing = (self.checks and Stage.STATIC not in st.stages) or (
            self.verifier is not None and m.operator != BASELINE and Stage.LLM_VERIFY not in st.stages)
        if missing and Stage.COMPILE not in st.stages:
            res = self.pre_gpu(m)
            if res is None:
                self._evaluations.submit(m)
            return res is None or res is REVIEWING
        self._evaluations.submit(m)
        return True

    def release_held(self) -> None:
        """After a pause for an outage: review (and evaluate) the candidates that were waiting for the API."""
        held, self._held = list(self._held), set()
        for cid in held:
            m = self._population.get(cid)
            if m is not None and m.state == PENDING:
                self.checked_before_gpu(m)

    def pre_gpu(self, m: Member) -> Verdict | None:
        """Static checks and LLM verifiers; a blocking verdict finishes the candidate here (no GPU). Returns
        that verdict, None when the candidate may go on, or REVIEWING when its LLM review runs on the pool
        (the review's answer sends it on) or waits for the API."""
        llm = self.verifier is not None and m.operator != BASELINE   # the shipped baseline is not LLM-reviewed
        if not self.checks and not llm:
            return None
        cand = self._evaluations.candidate(m.id)
        verdicts: list[Verdict] = []
        for check in self.checks:
            try:
                verdicts.append(check(self._task, self._direction, cand))
            except Exception as exc:  # noqa: BLE001 - a broken check is reported, not fatal
                verdicts.append(Verdict(Stage.STATIC, Status.SKIPPED, f"check failed to run: {exc!r}"))
        if llm and self.verifier is not None and not any(v.status in BLOCKING for v in verdicts):
            if self._pool.pool is not None:
                self._verifying.add(m.id)
                fut = self._pool.pool.submit(self.verifier, cand)
                fut.add_done_callback(lambda f, cid=m.id: self._controls.put("verified", cid, (verdicts, f)))
                return REVIEWING
            return self.reviewed(m, verdicts, self.verifier(cand))
        return self.reviewed(m, verdicts, None)

    def verified(self, cid: str, static: list[Verdict], fut: Future) -> None:
        """A review that ran on the pool came back: record it, and send the candidate on where it may go."""
        self._verifying.discard(cid)
        m = self._population.get(cid)
        if m is None or m.state == DONE or fut.cancelled() or self._controls.abandoned:
            return
        try:
            ver = fut.result()
        except Exception as exc:  # noqa: BLE001 - a verifier bug: the candidate goes on unreviewed
            from engine.llm.verifiers import STAGE, Verification  # lazy: it loads the LLM SDK (~1 s)
            ver = Verification(Verdict(STAGE, Status.SKIPPED, f"the LLM review failed: {exc!r}"), ())
        if self.reviewed(m, static, ver) is None and not self._controls.stopping:
            self._evaluations.submit(m)

    def reviewed(self, m: Member, verdicts: list[Verdict], ver: Verification | None) -> Verdict | None:
        """Record the static verdicts and the LLM review's votes; finish the candidate if one blocks it."""
        if ver is not None and ver.unavailable:
            self._held.add(m.id)          # nothing decided, nothing written: reviewed again after the pause
            self._outage(ver.unavailable)
            return REVIEWING
        stop_reason = None
        if ver is not None:
            verdicts = verdicts + list(ver.votes) + [ver.verdict]
            stop_reason = ver.stop
            if any(v.data.get("error") == "budget" for v in ver.votes):
                self._controls.usd_out, stop_reason = stop_reason or "", None    # the dollar budget ends the session
        blocked_by = judge_verdicts(verdicts).blocked_by
        blocking = effective(verdicts, blocked_by[0]) if blocked_by else None
        self._recorder.pre_gpu(m, verdicts, blocking)
        if stop_reason:
            self._recorder.emit(ev.Log(self._session, message=f"verifiers asked to stop: {stop_reason}", level="error"))
            self._controls.end(f"the verifiers cannot go on: {stop_reason}")
        return blocking
