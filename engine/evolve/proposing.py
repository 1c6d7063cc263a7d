"""From a planned slot to a proposal and back: the planner's slot (engine.evolve.planner) becomes a
ProposalRequest (the parents' code, summaries and feedback read from the workspace), the proposer answers
(on the loop's thread, or on the pool when proposals run in parallel), and the answer leads to a commit,
directives, a recorded failure, a stop or a pause.

LLM failures end honestly: a proposer's `stop` (the API refused the request, the key) stops the run with its
reason; a call the dollar budget cannot cover ends the session as its `usd` budget reached; an API outage that
outlasts `[llm] outage_minutes` (`unavailable`) pauses it as "API unavailable" (the run ends, resumable, with
`on_unavailable="stop"`; it waits for `resume()` with "pause"), and the attempt does not count against the
search.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.candidates import Candidate
from engine.evolve import events as ev
from engine.evolve.loop_state import LoopState
from engine.evolve.operators import insights, parent_summary
from engine.evolve.planner import Slot, lessons
from engine.evolve.population import Member
from engine.evolve.resume import API_UNAVAILABLE
from engine.llm.render import render_timings
from engine.profile.runner import profile_feedback
from engine.proposers.base import Proposal, ProposalRequest, ProposalStatus, guarded
from engine.verdict import Stage


class ProposalFlow(LoopState):
    """EvolutionSession's proposals: fill a slot, build its request, handle the answer."""

    def _fill_one(self, gen: int) -> ev.Stopped | None:
        """Fill one slot of generation `gen`: the baseline, or one proposal. Returns Stopped to end the run."""
        slot = self.planner.next_slot(gen, self.population, [(g, o) for g, o, _ in self._proposing.values()])
        if slot.kind == "baseline":
            self._commit_baseline()
            return None
        if slot.kind != "propose":
            if slot.note:
                self._emit(ev.Log(self.session, message=slot.note, level=slot.level))
            return None
        op, parents = slot.operator, list(slot.parents)
        request = self._request(slot, gen)
        if self._pool is None:
            return self._after_proposal(gen, op, parents, guarded(self.proposer, request))
        token = next(self._tokens)
        self._proposing[token] = (gen, op, parents)
        fut = self._pool.submit(guarded, self.proposer, request)
        fut.add_done_callback(lambda f: (self._inbox.put(("proposal", str(token), f)), self._flags.wake.set()))
        return None

    def _request(self, slot: Slot, gen: int) -> ProposalRequest:
        """The request for a planned slot: the parents' and the elite's code and summaries, the feedback
        (a mutate's parent's profile, a repair's failure), insights and lessons from the population."""
        op, parents, elite = slot.operator, slot.parents, slot.elite
        feedback = ""
        if op == "mutate" and parents:
            feedback = self._profile_feedback(parents[0])
        elif op == "repair":
            feedback = self._feedback(parents[0])
        exclude = {m.id for m in parents}
        return ProposalRequest(
            task=self.task, operator=op, direction=self.direction,
            parents=tuple(self._candidate(m.id) for m in parents),
            parent_summaries=tuple(self._summary(m) for m in parents), feedback=feedback,
            insights=insights(self.population, exclude, before=gen) if op in ("mutate", "crossover") else (),
            elite=self._candidate(elite.id) if elite is not None else None,
            elite_summary=self._summary(elite) if elite is not None else "",
            lessons=lessons(self.population, gen, exclude) if op != "tune" else (),
            directives=self.directives, population=self.population.summary() if op == "meta" else "",
            hints=self.hints, known_hashes=self.population.known_hashes, generation=gen)

    def _after_proposal(self, gen: int, op: str, parents: Sequence[Member], proposal: Proposal) -> ev.Stopped | None:
        """What a proposal leads to: a commit, directives, a recorded failure, a stop or a pause."""
        self._emit(ev.CandidateProposed(self.session, operator=op, status=proposal.status.value,
                                        parents=tuple(m.id for m in parents), reason=proposal.reason,
                                        cost_usd=proposal.cost_usd))
        if proposal.status == ProposalStatus.UNAVAILABLE:
            self.planner.unavailable(gen)   # not an attempt at the search
            self._outage(proposal.reason)
            return None
        if proposal.data.get("error") == "budget":
            self._usd_out = proposal.reason     # refused before it was sent: the dollar budget ends the session
            return None
        if proposal.status == ProposalStatus.STOP:
            self._record_failed(proposal, gen)
            if not self._flags.stop.is_set():
                self._stop_reason = f"the proposer stopped: {proposal.reason}"
                self._flags.stop.set()
            return None
        if proposal.status == ProposalStatus.EMPTY:
            self.planner.empty(gen, parents)
            return None
        if proposal.status != ProposalStatus.OK:
            self._record_failed(proposal, gen)
            return None
        if op == "meta" or (proposal.candidate is None and proposal.directives):
            self.planner.meta_answered(gen)
            self._set_directives(proposal)
            return None
        if proposal.candidate is None:
            return None
        if self._repeats_known(proposal):     # the gate's dedup
            self._record_failed(proposal, gen, reason="the answer repeats a candidate this session already has")
            return None
        self._commit(proposal, gen, parents)
        return None

    def _outage(self, reason: str) -> None:
        """The LLM API stayed unavailable for the whole outage window: pause the session. Nothing was decided,
        nothing counts against the search; the same command (or resume in the app) carries on."""
        first = not (self._stop_paused or self._flags.paused)
        if first:
            try:
                self.ws.record_session_event(self.session, API_UNAVAILABLE, {"reason": reason[:500]})
            except Exception:  # noqa: BLE001
                pass
            self._emit(ev.Log(self.session, level="error", message=reason))
        if self.on_unavailable == "pause":
            if first:
                self.pause(reason)
            return
        if not self._flags.stop.is_set():
            self._stop_paused = True
            self._stop_reason = (f"{reason}; paused: nothing was counted against the search, run the same command "
                                 "to resume")
            self._flags.stop.set()

    def _summary(self, m: Member) -> str:
        """A parent's verdict, speedup and rationale, and its per-config times against eager, torch.compile and
        the physical floor (the judge's placement, from its timing verdict)."""
        text = parent_summary(m)
        try:
            status = self.ws.status(m.id)
            timing = status.stages.get(Stage.TIMING)
            judged = timing.verdict.verdict.data if timing is not None and timing.verdict is not None else None
            timings = render_timings(status.measurement, self.task, self.direction, judged)
        except Exception:  # noqa: BLE001 - a note that cannot be read leaves the summary short, nothing more
            timings = ""
        return f"{text}\n\n{timings}" if timings else text

    def _profile_feedback(self, m: Member) -> str:
        """The parent's `profile` verdict summary (engine/profile), for the mutate prompt's feedback."""
        try:
            return profile_feedback(self.ws.status(m.id).stages)
        except Exception:  # noqa: BLE001 - no profile is no feedback, never a failed proposal
            return ""

    def _feedback(self, m: Member) -> str:
        try:
            st = self.ws.status(m.id)
        except Exception:  # noqa: BLE001
            return m.reason
        stage = st.stages.get(m.failed_stage or "")
        if stage is None or stage.verdict is None:
            return m.reason
        v = stage.verdict.verdict
        log = str(v.data.get("log") or "")
        return f"{v.stage} failed: {v.reason}" + (f"\n\n{log[-4000:]}" if log else "")

    def _candidate(self, cid: str) -> Candidate:
        if cid not in self._files:
            self._files[cid] = self.ws.files(cid)
        return self._files[cid]
