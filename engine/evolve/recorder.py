"""The session recorder: what a session tells its subscribers (typed events, engine.evolve.events) and what it
writes to the workspace about its candidates: verdict notes, measurements, `evaluated`, infrastructure and
`waiting_for_gpu` events, failed proposals' costs, directives and profiles; and how many candidates it finished.

Every write here runs on the loop's own thread; a write that only informs (a failed proposal's cost) never
ends the session, and a subscriber's exception never reaches the loop.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.candidates import Candidate
from engine.evolve import events as ev
from engine.evolve.controls import Controls
from engine.evolve.outcome import EvalOutcome
from engine.evolve.population import DONE, Member, Population
from engine.evolve.resume import DIRECTIVES, EVALUATED, PROPOSAL_FAILED, title_of
from engine.proposers.base import Proposal
from engine.verdict import Stage, Verdict, effective
from engine.workspace.note_entries import Event, Measurement, VerdictNote
from engine.workspace.records import CandidateRecord, now_iso

if TYPE_CHECKING:
    from engine.workspace import Workspace


class Recorder:
    """A session's events and its writes about candidates."""

    def __init__(self, ws: Workspace, session: str, population: Population, controls: Controls,
                 executor: str, infra_failures_in_a_row: int | None):
        self._ws, self._session, self._controls = ws, session, controls
        self.population = population          # the session's (replaced on resume: see `use`)
        self._executor = executor             # the evaluator's class name, for infrastructure events
        self._infra_limit = infra_failures_in_a_row
        self._subs: list[Callable[[ev.EvolveEvent], None]] = []
        self._recorded: dict[str, set[str]] = {}        # stages already noted while the evaluation runs
        self.evaluated = 0                              # candidates finished by this run
        self._infra_streak = 0                          # evaluations lost by the executor in a row
        self.failed_in_generation: dict[int, list[str]] = {}   # why each failed proposal gave no candidate

    def subscribe(self, callback: Callable[[ev.EvolveEvent], None]) -> None:
        self._subs.append(callback)

    def event_queue(self) -> queue.Queue[ev.EvolveEvent]:
        q: queue.Queue[ev.EvolveEvent] = queue.Queue()
        self.subscribe(q.put)
        return q

    def emit(self, event: ev.EvolveEvent) -> None:
        for cb in list(self._subs):
            try:
                cb(event)
            except Exception:  # noqa: BLE001 - the loop never dies for a subscriber
                pass

    # -- commits ------------------------------------------------------------------------------------

    def committed(self, rec: CandidateRecord, cand: Candidate, parents: tuple[str, ...], gen: int,
                  cost: float = 0.0) -> Member:
        """The committed candidate joins the population."""
        m = self.population.add(Member(id=rec.id, generation=gen, operator=rec.operator,
                                       source_hash=cand.source_hash, parents=parents, title=title_of(rec.subject),
                                       rationale=rec.rationale, cost_usd=cost))
        self.emit(ev.CandidateCommitted(self._session, candidate=rec.id, generation=gen, operator=rec.operator,
                                        parents=parents, title=m.title))
        return m

    def stage(self, cid: str, v: Verdict) -> None:
        """A stage finished while its evaluation runs: said now; a compile verdict is noted now too (it comes
        long before the GPU stages), and not again with the outcome."""
        self.emit(ev.StageFinished(self._session, candidate=cid, stage=v.stage, status=v.status.value,
                                   reason=v.reason))
        if v.stage == Stage.COMPILE:
            self._ws.record(cid, [VerdictNote(v, now_iso())])
            self._recorded.setdefault(cid, set()).add(v.stage)

    def pre_gpu(self, m: Member, verdicts: list[Verdict], blocking: Verdict | None) -> None:
        """The gate's verdicts in one note write; a blocking one finishes `m`, rejected, never compiled."""
        entries: list[VerdictNote | Event] = [VerdictNote(v, now_iso()) for v in verdicts]
        if blocking is not None:
            entries.append(Event(EVALUATED, {"rejected": True, "stage": blocking.stage, "reason": blocking.reason},
                                 now_iso()))
        if entries:
            self._ws.record(m.id, entries)
        for v in verdicts:
            if v is effective(verdicts, v.stage):
                self.emit(ev.StageFinished(self._session, candidate=m.id, stage=v.stage, status=v.status.value,
                                           reason=v.reason))
        if blocking is not None:
            m.state, m.rejected, m.failed_stage, m.reason = DONE, True, blocking.stage, blocking.reason
            self.evaluated += 1
            self.emit(ev.CandidateEvaluated(self._session, candidate=m.id, generation=m.generation, speedup=None,
                                            eligible=False, failed_stage=blocking.stage, reason=blocking.reason,
                                            rejected=True))

    def blocked_before(self, m: Member, stage: str, reason: str) -> None:
        """A re-read candidate a pre-GPU verdict already blocks (noted before a kill): finished, rejected."""
        self._ws.record(m.id, [Event(EVALUATED, {"rejected": True, "stage": stage, "reason": reason}, now_iso())])
        m.state, m.rejected, m.failed_stage, m.reason = DONE, True, stage, reason

    def reopened(self, m: Member) -> None:
        """A finished candidate goes back to the evaluator (a person's override): not finished any more."""
        self.evaluated -= 1

    # -- outcomes -----------------------------------------------------------------------------------

    def outcome(self, m: Member, out: EvalOutcome) -> bool:
        """Record an evaluation's outcome and finish `m`. Returns whether `m` became the session's best."""
        if out.no_gpu:
            self._record_waiting(m, out)
            return False
        if out.infra_error:
            self._record_infra_failure(m, out)
            return False
        self._infra_streak = 0
        before = self.population.best()
        entries = self._unrecorded_verdicts(m, out)
        meas = out.measurement()
        if meas is not None:
            entries.append(meas)
        entries.append(Event(EVALUATED, {"speedup": out.speedup_eager, "failed_stage": out.failed_stage,
                                         "seconds": round(out.seconds, 3), "build_s": out.build_s,
                                         "gpu_s": out.gpu_s, "gpu": out.gpu}, now_iso()))
        status = self._ws.record(m.id, entries)
        j = status.judgement
        m.state, m.waiting = DONE, False
        m.speedup = status.speedup
        m.eligible = j.eligible
        m.failed_stage = j.failed_stage
        if j.blocked_by:
            m.reason = status.stages[j.blocked_by[0]].reason
        elif j.eligible:
            m.reason = ""
        elif not j.passed:
            m.reason = j.why_not_passed
        else:
            timing = effective(out.verdicts, Stage.TIMING)
            m.reason = timing.reason if timing is not None else "not timed"
        self.evaluated += 1
        self.emit(ev.CandidateEvaluated(self._session, candidate=m.id, generation=m.generation, speedup=m.speedup,
                                        eligible=m.eligible, failed_stage=m.failed_stage, reason=m.reason))
        after = self.population.best()
        if after is not None and (before is None or after.id != before.id):
            self.emit(ev.BestImproved(self._session, candidate=after.id, speedup=after.speedup or 0.0,
                                      previous=before.id if before else None,
                                      previous_speedup=before.speedup if before else None))
        return after is not None and after.id == m.id and (before is None or before.id != m.id)

    def profile(self, cid: str, verdict: Verdict) -> None:
        """The profile verdict goes to the candidate's note like every verdict (`kbench report`, the app and the
        mutate prompt's feedback read it there)."""
        self._ws.record(cid, [VerdictNote(verdict, now_iso())])
        self.emit(ev.CandidateProfiled(self._session, candidate=cid, status=verdict.status.value,
                                        reason=verdict.reason))

    def _unrecorded_verdicts(self, m: Member, out: EvalOutcome) -> list[VerdictNote | Measurement | Event]:
        """Notes for the outcome's verdicts that were not already written as their stages finished."""
        done = self._recorded.pop(m.id, set())
        return [VerdictNote(v, now_iso()) for v in out.verdicts if v.stage not in done]

    def _record_waiting(self, m: Member, out: EvalOutcome) -> None:
        """Compiled where no GPU is visible: the stages that ran are kept, a `waiting_for_gpu` event says why the
        rest did not, and no `evaluated` event is written, so the same command on a GPU machine measures it.
        Not a failure and not the executor breaking: it does not count toward `infra_failures_in_a_row`."""
        entries = self._unrecorded_verdicts(m, out)
        entries.append(out.infra_event(executor=self._executor))
        self._ws.record(m.id, entries)
        m.state, m.eligible, m.speedup, m.waiting = DONE, False, None, True
        m.failed_stage, m.reason = None, out.infra_error
        self.emit(ev.CandidateEvaluated(self._session, candidate=m.id, generation=m.generation, speedup=None,
                                         eligible=False, reason=out.infra_error, waiting_for_gpu=True))

    def _record_infra_failure(self, m: Member, out: EvalOutcome) -> None:
        """The executor lost the evaluation on every attempt (worker or node died): nothing is judged. The
        stages that did finish are kept, an `infrastructure_failure` event says what happened, and no
        `evaluated` event is written, so a resumed session evaluates the candidate again."""
        entries = self._unrecorded_verdicts(m, out)
        entries.append(out.infra_event(executor=self._executor))
        self._ws.record(m.id, entries)
        m.state, m.eligible, m.speedup, m.waiting = DONE, False, None, False
        m.failed_stage, m.reason = "infrastructure", out.infra_error
        self.evaluated += 1
        self._infra_streak += 1
        self.emit(ev.CandidateEvaluated(self._session, candidate=m.id, generation=m.generation, speedup=None,
                                         eligible=False, failed_stage="infrastructure", reason=out.infra_error,
                                         infrastructure=True))
        limit = self._infra_limit
        if limit and self._infra_streak >= limit and not self._controls.stopping:
            why = (f"the executor lost {self._infra_streak} evaluations in a row (last: {out.infra_error}); fix it "
                   "and run the same command to resume")
            self.emit(ev.Log(self._session, message=why, level="error"))
            self._controls.end(why)

    def failed(self, proposal: Proposal, gen: int, reason: str | None = None) -> None:
        """A proposal that produced no candidate. Its tokens and dollars go to the session's note, so a resumed
        session counts what it cost; an answer the LLM gave is kept whole with its prompt and drafts
        (engine.workspace.failed), so a person can read and salvage it. A proposal that cost nothing and used
        no model leaves nothing behind."""
        why = reason or proposal.reason
        self.failed_in_generation.setdefault(gen, []).append(why)
        if not (proposal.cost_usd or proposal.usage.total_tokens or proposal.model):
            return
        data = {"proposal": proposal.id, "operator": proposal.operator, "proposer": proposal.proposer,
                "generation": gen, "parents": list(proposal.parents), "reason": why[:500],
                "error": proposal.data.get("error"), "model": proposal.model, "usage": proposal.usage.to_json(),
                "cost_usd": proposal.cost_usd}
        try:
            if proposal.answer:
                kept = self._ws.failed.record(
                    self._session, gen, operator=proposal.operator, proposer=proposal.proposer, reason=why,
                    prompt_md=proposal.prompt_md(), drafts=proposal.drafts,
                    parents=[p for p in proposal.parents if p in self.population.members], model=proposal.model,
                    error=proposal.data.get("error"), cost_usd=proposal.cost_usd, usage=proposal.usage.to_json())
                data["id"] = kept.id
                self.emit(ev.Log(self._session, level="warning", message=(
                    f"{kept.id}: no candidate ({why[:200]}); the answer is kept: kbench show-candidate {kept.id}")))
            self._ws.record_session_event(self._session, PROPOSAL_FAILED, data)
        except Exception as exc:  # noqa: BLE001 - a note that cannot be written must not end the session
            self.emit(ev.Log(self._session, level="warning", message=f"could not record a failed proposal: {exc}"))

    def directives(self, proposal: Proposal) -> str:
        """A meta proposal's directives, noted on the session's best (or the session, before any) with what
        they cost. Returns them."""
        directives = proposal.directives or ""
        anchor = self.population.best()
        data = {"directives": directives, "cost_usd": proposal.cost_usd, "usage": proposal.usage.to_json(),
                "model": proposal.model, "rationale": proposal.rationale, "proposal": proposal.id}
        try:
            if anchor is not None:
                self._ws.record_event(anchor.id, DIRECTIVES, data)
            else:       # nothing measured yet: the session's own note keeps them and what they cost
                self._ws.record_session_event(self._session, DIRECTIVES, data)
        except Exception as exc:  # noqa: BLE001 - a note that cannot be written must not end the session
            self.emit(ev.Log(self._session, level="warning", message=f"could not record the directives: {exc}"))
        self.emit(ev.DirectivesUpdated(self._session, directives=directives, cost_usd=proposal.cost_usd))
        return directives
