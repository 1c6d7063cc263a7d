"""The pre-GPU gate: what a committed candidate passes before it may reach the evaluator.

    a proposal's answer ─▶ dedup (a source this session already has is not committed again)
    committed ─▶ static checks (engine.evolve.checks) ─▶ LLM review (engine.llm.verifiers; not the baseline)
              ─▶ the evaluator (compile on CPU, then check + time on a GPU)

A blocking verdict (fail, suspicious) finishes the candidate here, rejected, never compiled; a person's
override sends it on (the session's `notice`). The review runs on the session's pool when proposals run in
parallel, and its answer comes back through the inbox. An API outage holds the candidate, reviews nothing
and writes nothing, so it is reviewed after the pause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.evolve import events as ev
from engine.evolve.loop_state import LoopState
from engine.evolve.planner import BASELINE
from engine.evolve.population import DONE, PENDING, Member
from engine.evolve.resume import EVALUATED
from engine.proposers.base import Proposal
from engine.verdict import (
    BLOCKING,
    PRE_GPU,
    Stage,
    Status,
    Verdict,
    effective,
    judge_verdicts,
)
from engine.workspace.note_entries import Event, VerdictNote
from engine.workspace.records import now_iso

if TYPE_CHECKING:
    from engine.llm.verifiers import Verification

REVIEWING = Verdict(Stage.LLM_VERIFY, Status.SKIPPED, "the LLM review is under way")   # a marker, never recorded


class PreGpuGate(LoopState):
    """EvolutionSession's gate between a proposal and the evaluator."""

    def _repeats_known(self, proposal: Proposal) -> bool:
        """The answer's source is one this session already has: logged, not committed."""
        cand = proposal.candidate
        if cand is None or cand.source_hash not in self.population.known_hashes:
            return False
        self._emit(ev.Log(self.session, message=f"proposal {proposal.id} repeats a known candidate; skipped"))
        return True

    def _checked_before_gpu(self, m: Member) -> bool:
        """A re-queued candidate may have been committed just before a kill, before its static / LLM checks
        ran: run the missing ones now, and send it to the evaluator when it may go (True: sent, or its review
        is under way and will send it)."""
        st = self.ws.status(m.id)
        bad = next((st.stages[s] for s in st.judgement.blocked_by if s in PRE_GPU), None)
        if bad is not None:
            self.ws.record(m.id, [Event(EVALUATED, {"rejected": True, "stage": bad.stage, "reason": bad.reason},
                                        now_iso())])
            m.state, m.rejected, m.failed_stage, m.reason = DONE, True, bad.stage, bad.reason
            return False
        missing = (self.checks and Stage.STATIC not in st.stages) or (
            self.verifier is not None and m.operator != BASELINE and Stage.LLM_VERIFY not in st.stages)
        if missing and Stage.COMPILE not in st.stages:
            self._files.setdefault(m.id, self.ws.files(m.id))
            res = self._pre_gpu(m)
            if res is None:
                self._submit(m)
            return res is None or res is REVIEWING
        self._submit(m)
        return True

    def _release_held(self) -> None:
        """After a pause for an outage: review (and evaluate) the candidates that were waiting for the API."""
        held, self._held = list(self._held), set()
        for cid in held:
            m = self.population.get(cid)
            if m is not None and m.state == PENDING:
                self._checked_before_gpu(m)

    def _pre_gpu(self, m: Member) -> Verdict | None:
        """Static checks and LLM verifiers; a blocking verdict finishes the candidate here (no GPU). Returns
        that verdict, None when the candidate may go on, or REVIEWING when its LLM review runs on the pool
        (the review's answer sends it on) or waits for the API."""
        llm = self.verifier is not None and m.operator != BASELINE   # the shipped baseline is not LLM-reviewed
        if not self.checks and not llm:
            return None
        cand = self._files[m.id]
        verdicts: list[Verdict] = []
        for check in self.checks:
            try:
                verdicts.append(check(self.task, self.direction, cand))
            except Exception as exc:  # noqa: BLE001 - a broken check is reported, not fatal
                verdicts.append(Verdict(Stage.STATIC, Status.SKIPPED, f"check failed to run: {exc!r}"))
        if llm and self.verifier is not None and not any(v.status in BLOCKING for v in verdicts):
            if self._pool is not None:
                cid, verifier = m.id, self.verifier
                self._verifying.add(cid)
                fut = self._pool.submit(verifier, cand)
                fut.add_done_callback(lambda f: (self._inbox.put(("verified", cid, (verdicts, f))),
                                                 self._flags.wake.set()))
                return REVIEWING
            return self._reviewed(m, verdicts, self.verifier(cand))
        return self._reviewed(m, verdicts, None)

    def _reviewed(self, m: Member, verdicts: list[Verdict], ver: Verification | None) -> Verdict | None:
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
                self._usd_out, stop_reason = stop_reason or "", None    # the dollar budget ends the session
        blocked_by = judge_verdicts(verdicts).blocked_by
        blocking = effective(verdicts, blocked_by[0]) if blocked_by else None
        entries: list[VerdictNote | Event] = [VerdictNote(v, now_iso()) for v in verdicts]
        if blocking is not None:
            entries.append(Event(EVALUATED, {"rejected": True, "stage": blocking.stage, "reason": blocking.reason},
                                 now_iso()))
        if entries:
            self.ws.record(m.id, entries)
        for v in verdicts:
            if v is effective(verdicts, v.stage):
                self._emit(ev.StageFinished(self.session, candidate=m.id, stage=v.stage, status=v.status.value,
                                            reason=v.reason))
        if stop_reason:
            self._stop_reason = f"the verifiers cannot go on: {stop_reason}"
            self._flags.stop.set()
            self._emit(ev.Log(self.session, message=f"verifiers asked to stop: {stop_reason}", level="error"))
        if blocking is not None:
            m.state, m.rejected, m.failed_stage, m.reason = DONE, True, blocking.stage, blocking.reason
            self._evaluated += 1
            self._emit(ev.CandidateEvaluated(self.session, candidate=m.id, generation=m.generation, speedup=None,
                                             eligible=False, failed_stage=blocking.stage, reason=blocking.reason,
                                             rejected=True))
        return blocking
