"""The session recorder: what a session tells its subscribers (typed events, engine.evolve.events) and what it
writes to the workspace: commits, verdict notes, measurements, `evaluated`, infrastructure and
`waiting_for_gpu` events, failed proposals' costs, directives and profiles.

Every write here runs on the loop's own thread; a write that only informs (a failed proposal's cost) never
ends the session, and a subscriber's exception never reaches the loop.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence

from engine.candidates import Candidate
from engine.evolve import events as ev
from engine.evolve.loop_state import LoopState
from engine.evolve.outcome import CanProfile, EvalOutcome, needs_profile
from engine.evolve.planner import BASELINE
from engine.evolve.population import DONE, Member
from engine.evolve.resume import DIRECTIVES, EVALUATED, PROPOSAL_FAILED, title_of
from engine.evolve.search_state import search_state
from engine.proposers.base import Proposal
from engine.tasks.glue.generated import load_for_task
from engine.verdict import Stage, Verdict, effective
from engine.workspace.note_entries import Event, Measurement, VerdictNote
from engine.workspace.records import CandidateRecord, now_iso


class SessionRecorder(LoopState):
    """EvolutionSession's events and workspace writes."""

    def subscribe(self, callback: Callable[[ev.EvolveEvent], None]) -> None:
        self._subs.append(callback)

    def event_queue(self) -> queue.Queue[ev.EvolveEvent]:
        q: queue.Queue[ev.EvolveEvent] = queue.Queue()
        self.subscribe(q.put)
        return q

    def _emit(self, event: ev.EvolveEvent) -> None:
        for cb in list(self._subs):
            try:
                cb(event)
            except Exception:  # noqa: BLE001 - the loop never dies for a subscriber
                pass

    # -- commits ------------------------------------------------------------------------------------

    def _commit_baseline(self) -> None:
        path = self.task.baseline_dir(self.direction)
        assert path is not None
        cand = load_for_task(path, self.task, self.direction, name=f"{self.task.name}-{self.direction}-baseline")
        if cand.source_hash in self.population.known_hashes:
            return
        rec = self.ws.commit_candidate(self.session, cand, parents=(), operator=BASELINE, proposer=BASELINE,
                                       generation=0, title="the task's baseline",
                                       rationale=f"The native baseline shipped with the task ({path}).",
                                       prompt="(the task's baseline: not proposed)\n",
                                       search_state=search_state(self, 0, ()))
        self._after_commit(rec, cand, (), 0)

    def _commit(self, proposal: Proposal, gen: int, parents: Sequence[Member]) -> None:
        cand = proposal.candidate
        assert cand is not None
        ids = [p.id for p in parents] or [p for p in proposal.parents if p in self.population.members]
        title = str(proposal.data.get("title") or cand.name)
        rec = self.ws.commit_candidate(self.session, cand, parents=ids, operator=proposal.operator,
                                       proposer=proposal.proposer, model=proposal.model, generation=gen,
                                       title=title, rationale=proposal.rationale, prompt=proposal.prompt_md(),
                                       search_state=search_state(self, gen, ids))
        self._after_commit(rec, cand, tuple(ids), gen, cost=proposal.cost_usd)

    def _after_commit(self, rec: CandidateRecord, cand: Candidate, parents: tuple[str, ...], gen: int,
                      cost: float = 0.0) -> None:
        """The committed candidate joins the population and goes through the gate (engine.evolve.gate)."""
        m = self.population.add(Member(id=rec.id, generation=gen, operator=rec.operator,
                                       source_hash=cand.source_hash, parents=parents, title=title_of(rec.subject),
                                       rationale=rec.rationale, cost_usd=cost))
        self._files[rec.id] = self.ws.files(rec.id)
        self._emit(ev.CandidateCommitted(self.session, candidate=rec.id, generation=gen, operator=rec.operator,
                                         parents=parents, title=m.title))
        if self._flags.stop.is_set():
            return    # arrived while stopping: committed; a resume checks and evaluates it
        if self._pre_gpu(m) is None:
            self._submit(m)

    # -- outcomes -----------------------------------------------------------------------------------

    def _record_outcome(self, m: Member, out: EvalOutcome) -> None:
        if out.no_gpu:
            self._record_waiting(m, out)
            return
        if out.infra_error:
            self._record_infra_failure(m, out)
            return
        self._infra_streak = 0
        before = self.population.best()
        entries = self._unrecorded_verdicts(m, out)
        meas = out.measurement()
        if meas is not None:
            entries.append(meas)
        entries.append(Event(EVALUATED, {"speedup": out.speedup_eager, "failed_stage": out.failed_stage,
                                         "seconds": round(out.seconds, 3), "build_s": out.build_s,
                                         "gpu_s": out.gpu_s, "gpu": out.gpu}, now_iso()))
        status = self.ws.record(m.id, entries)
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
        self._evaluated += 1
        self._emit(ev.CandidateEvaluated(self.session, candidate=m.id, generation=m.generation, speedup=m.speedup,
                                         eligible=m.eligible, failed_stage=m.failed_stage, reason=m.reason))
        after = self.population.best()
        new_best = after is not None and after.id == m.id and (before is None or before.id != m.id)
        if after is not None and (before is None or after.id != before.id):
            self._emit(ev.BestImproved(self.session, candidate=after.id, speedup=after.speedup or 0.0,
                                       previous=before.id if before else None,
                                       previous_speedup=before.speedup if before else None))
        self._profile_if_due(m, out, new_best)

    def _profile_if_due(self, m: Member, out: EvalOutcome, new_best: bool) -> None:
        """Ask the evaluator for the candidate's profile stage, where the mode calls for it and its evaluation
        did not run it: "best" for a new best, "all" for any that passed. The verdict comes back through the
        inbox (`_record_profile`)."""
        if self.profile == "off" or (self.profile == "best" and not new_best) or not needs_profile(out):
            return
        if (not isinstance(self.evaluator, CanProfile) or m.id in self._profiling
                or self._flags.abandon.is_set()):
            return
        try:
            fut = self.evaluator.profile(self._candidate(m.id), device=dict(out.device or {}))
        except Exception as exc:  # noqa: BLE001 - no profile is no feedback, never a failed session
            self._emit(ev.Log(self.session, level="warning", message=f"{m.id}: could not profile it: {exc}"))
            return
        self._profiling[m.id] = fut
        why = "new best" if new_best else "passed"
        self._emit(ev.Log(self.session, message=f"{m.id}: {why}, profiling it (ncu + torch profiler)"))
        fut.add_done_callback(lambda f, cid=m.id: (self._inbox.put(("profiled", cid, f)), self._flags.wake.set()))

    def _record_profile(self, cid: str, verdict: Verdict) -> None:
        """The profile verdict goes to the candidate's note like every verdict (`kbench report`, the app and the
        mutate prompt's feedback read it there)."""
        self.ws.record(cid, [VerdictNote(verdict, now_iso())])
        self._emit(ev.CandidateProfiled(self.session, candidate=cid, status=verdict.status.value,
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
        entries.append(out.infra_event(executor=type(self.evaluator).__name__))
        self.ws.record(m.id, entries)
        m.state, m.eligible, m.speedup, m.waiting = DONE, False, None, True
        m.failed_stage, m.reason = None, out.infra_error
        self._emit(ev.CandidateEvaluated(self.session, candidate=m.id, generation=m.generation, speedup=None,
                                         eligible=False, reason=out.infra_error, waiting_for_gpu=True))

    def _record_infra_failure(self, m: Member, out: EvalOutcome) -> None:
        """The executor lost the evaluation on every attempt (worker or node died): nothing is judged. The
        stages that did finish are kept, an `infrastructure_failure` event says what happened, and no
        `evaluated` event is written, so a resumed session evaluates the candidate again."""
        entries = self._unrecorded_verdicts(m, out)
        entries.append(out.infra_event(executor=type(self.evaluator).__name__))
        self.ws.record(m.id, entries)
        m.state, m.eligible, m.speedup, m.waiting = DONE, False, None, False
        m.failed_stage, m.reason = "infrastructure", out.infra_error
        self._evaluated += 1
        self._infra_streak += 1
        self._emit(ev.CandidateEvaluated(self.session, candidate=m.id, generation=m.generation, speedup=None,
                                         eligible=False, failed_stage="infrastructure", reason=out.infra_error,
                                         infrastructure=True))
        limit = self.budgets.infra_failures_in_a_row
        if limit and self._infra_streak >= limit and not self._flags.stop.is_set():
            self._stop_reason = (f"the executor lost {self._infra_streak} evaluations in a row (last: "
                                 f"{out.infra_error}); fix it and run the same command to resume")
            self._emit(ev.Log(self.session, message=self._stop_reason, level="error"))
            self._flags.stop.set()


    def _record_failed(self, proposal: Proposal, gen: int, reason: str | None = None) -> None:
        """A proposal that produced no candidate. Its tokens and dollars go to the session's note, so a resumed
        session counts what it cost; an answer the LLM gave is kept whole with its prompt and drafts
        (engine.workspace.failed), so a person can read and salvage it. A proposal that cost nothing and used
        no model leaves nothing behind."""
        why = reason or proposal.reason
        self._failed_in_generation.setdefault(gen, []).append(why)
        if not (proposal.cost_usd or proposal.usage.total_tokens or proposal.model):
            return
        data = {"proposal": proposal.id, "operator": proposal.operator, "proposer": proposal.proposer,
                "generation": gen, "parents": list(proposal.parents), "reason": why[:500],
                "error": proposal.data.get("error"), "model": proposal.model, "usage": proposal.usage.to_json(),
                "cost_usd": proposal.cost_usd}
        try:
            if proposal.answer:
                kept = self.ws.failed.record(
                    self.session, gen, operator=proposal.operator, proposer=proposal.proposer, reason=why,
                    prompt_md=proposal.prompt_md(), drafts=proposal.drafts,
                    parents=[p for p in proposal.parents if p in self.population.members], model=proposal.model,
                    error=proposal.data.get("error"), cost_usd=proposal.cost_usd, usage=proposal.usage.to_json())
                data["id"] = kept.id
                self._emit(ev.Log(self.session, level="warning", message=(
                    f"{kept.id}: no candidate ({why[:200]}); the answer is kept: kbench show-candidate {kept.id}")))
            self.ws.record_session_event(self.session, PROPOSAL_FAILED, data)
        except Exception as exc:  # noqa: BLE001 - a note that cannot be written must not end the session
            self._emit(ev.Log(self.session, level="warning", message=f"could not record a failed proposal: {exc}"))

    def _set_directives(self, proposal: Proposal) -> None:
        self.directives = proposal.directives or ""
        anchor = self.population.best()
        data = {"directives": self.directives, "cost_usd": proposal.cost_usd, "usage": proposal.usage.to_json(),
                "model": proposal.model, "rationale": proposal.rationale, "proposal": proposal.id}
        try:
            if anchor is not None:
                self.ws.record_event(anchor.id, DIRECTIVES, data)
            else:       # nothing measured yet: the session's own note keeps them and what they cost
                self.ws.record_session_event(self.session, DIRECTIVES, data)
        except Exception as exc:  # noqa: BLE001 - a note that cannot be written must not end the session
            self._emit(ev.Log(self.session, level="warning", message=f"could not record the directives: {exc}"))
        self._emit(ev.DirectivesUpdated(self.session, directives=self.directives, cost_usd=proposal.cost_usd))
