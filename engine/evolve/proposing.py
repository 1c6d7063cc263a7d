"""From a planned slot to a proposal and back: the planner's slot (engine.evolve.planner) becomes a
ProposalRequest (the parents' code, summaries and feedback read from the workspace), the proposer answers
(on the loop's thread, or on the pool when proposals run in parallel), and the answer leads to a commit (which
the gate then takes), directives, a recorded failure, a stop or a pause.

LLM failures end honestly: a proposer's `stop` (the API refused the request, the key) stops the run with its
reason; a call the dollar budget cannot cover ends the session as its `usd` budget reached; an API outage that
outlasts `[llm] outage_minutes` (`unavailable`) pauses it as "API unavailable" (the run ends, resumable, with
`on_unavailable="stop"`; it waits for `resume()` with "pause"), and the attempt does not count against the
search.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from engine.evolve import events as ev
from engine.evolve.controls import Controls, Pool
from engine.evolve.evaluations import Evaluations
from engine.evolve.gate import PreGpuGate
from engine.evolve.operators import insights, parent_summary
from engine.evolve.planner import BASELINE, GenerationPlanner, Slot, lessons
from engine.evolve.population import Member, Population
from engine.evolve.recorder import Recorder
from engine.llm.render import render_timings
from engine.profile.runner import profile_feedback
from engine.proposers.base import Proposal, ProposalRequest, ProposalStatus, Proposer, guarded
from engine.tasks.glue.generated import load_for_task
from engine.tasks.model import Task
from engine.verdict import Stage

if TYPE_CHECKING:
    from engine.candidates import Candidate
    from engine.workspace import Workspace
    from engine.workspace.records import CandidateRecord

SearchState = Callable[[int, Sequence[str]], dict[str, Any]]   # the state a commit in (gen, parents) saves


class Proposing:
    """A session's proposals: fill a slot, build its request, handle the answer, commit what it brought; the
    proposals in flight on the pool and the directives a meta proposal set."""

    def __init__(self, ws: Workspace, session: str, task: Task, direction: str, proposer: Proposer, hints: str,
                 model: str | None, planner: GenerationPlanner, population: Population, evaluations: Evaluations,
                 gate: PreGpuGate, recorder: Recorder, controls: Controls, pool: Pool, search_state: SearchState,
                 outage: Callable[[str], None]):
        self._ws, self._session, self._task, self._direction = ws, session, task, direction
        self.proposer, self._hints, self._model = proposer, hints, model
        self._planner, self._population = planner, population
        self._evaluations, self._gate, self._recorder = evaluations, gate, recorder
        self._controls, self._pool, self._search_state, self._outage = controls, pool, search_state, outage
        self.directives = ""
        self._in_flight: dict[int, tuple[int, str, Sequence[Member]]] = {}   # token -> (generation, operator, parents)
        self._tokens = itertools.count(1)

    def busy(self) -> bool:
        return bool(self._in_flight)

    def slots_in_flight(self) -> list[tuple[int, str]]:
        """(generation, operator) of each proposal on the pool: the planner counts them as filled."""
        return [(g, o) for g, o, _ in self._in_flight.values()]

    def fill_one(self, gen: int) -> None:
        """Fill one slot of generation `gen`: the baseline, or one proposal."""
        slot = self._planner.next_slot(gen, self._population, self.slots_in_flight())
        if slot.kind == "baseline":
            self.commit_baseline()
            return
        if slot.kind != "propose":
            if slot.note:
                self._recorder.emit(ev.Log(self._session, message=slot.note, level=slot.level))
            return
        op, parents = slot.operator, list(slot.parents)
        request = self._request(slot, gen)
        if self._pool.pool is None:
            self.answered(gen, op, parents, guarded(self.proposer, request))
            return
        token = next(self._tokens)
        self._in_flight[token] = (gen, op, parents)
        fut = self._pool.pool.submit(guarded, self.proposer, request)
        fut.add_done_callback(self._controls.when_done("proposal", str(token)))

    def returned(self, token: str, fut: Future) -> None:
        """A proposal that ran on the pool came back (through the inbox)."""
        gen, op, parents = self._in_flight.pop(int(token))
        if fut.cancelled() or self._controls.abandoned:
            return
        self.answered(gen, op, parents, fut.result())   # guarded(): never raises

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
            task=self._task, operator=op, direction=self._direction,
            parents=tuple(self._evaluations.candidate(m.id) for m in parents),
            parent_summaries=tuple(self._summary(m) for m in parents), feedback=feedback,
            insights=insights(self._population, exclude, before=gen) if op in ("mutate", "crossover") else (),
            elite=self._evaluations.candidate(elite.id) if elite is not None else None,
            elite_summary=self._summary(elite) if elite is not None else "",
            lessons=lessons(self._population, gen, exclude) if op != "tune" else (),
            directives=self.directives, population=self._population.summary() if op == "meta" else "",
            hints=self._hints, known_hashes=self._population.known_hashes, generation=gen)

    def answered(self, gen: int, op: str, parents: Sequence[Member], proposal: Proposal) -> None:
        """What a proposal leads to: a commit, directives, a recorded failure, a stop or a pause."""
        self._recorder.emit(ev.CandidateProposed(self._session, operator=op, status=proposal.status.value,
                                                 parents=tuple(m.id for m in parents), reason=proposal.reason,
                                                 cost_usd=proposal.cost_usd))
        if proposal.status == ProposalStatus.UNAVAILABLE:
            self._planner.unavailable(gen)   # not an attempt at the search
            self._outage(proposal.reason)
            return
        if proposal.data.get("error") == "budget":
            self._controls.usd_out = proposal.reason   # refused before it was sent: the dollar budget ends the session
            return
        if proposal.status == ProposalStatus.STOP:
            self._recorder.failed(proposal, gen)
            self._controls.end(f"the proposer stopped: {proposal.reason}")
            return
        if proposal.status == ProposalStatus.EMPTY:
            self._planner.empty(gen, parents)
            return
        if proposal.status != ProposalStatus.OK:
            self._recorder.failed(proposal, gen)
            return
        if op == "meta" or (proposal.candidate is None and proposal.directives):
            self._planner.meta_answered(gen)
            self.directives = self._recorder.directives(proposal)
            return
        if proposal.candidate is None:
            return
        if self._gate.repeats_known(proposal):
            self._recorder.failed(proposal, gen, reason="the answer repeats a candidate this session already has")
            return
        self.commit(proposal, gen, parents)

    # -- commits ------------------------------------------------------------------------------------

    def commit_baseline(self) -> None:
        path = self._task.baseline_dir(self._direction)
        assert path is not None
        cand = load_for_task(path, self._task, self._direction,
                             name=f"{self._task.name}-{self._direction}-baseline")
        if cand.source_hash in self._population.known_hashes:
            return
        rec = self._ws.commit_candidate(self._session, cand, parents=(), operator=BASELINE, proposer=BASELINE,
                                        generation=0, title="the task's baseline",
                                        rationale=f"The native baseline shipped with the task ({path}).",
                                        prompt="(the task's baseline: not proposed)\n",
                                        search_state=self._search_state(0, ()))
        self._committed(rec, cand, (), 0)

    def commit(self, proposal: Proposal, gen: int, parents: Sequence[Member]) -> None:
        cand = proposal.candidate
        assert cand is not None
        ids = [p.id for p in parents] or [p for p in proposal.parents if p in self._population.members]
        title = str(proposal.data.get("title") or cand.name)
        rec = self._ws.commit_candidate(self._session, cand, parents=ids, operator=proposal.operator,
                                        proposer=proposal.proposer, model=proposal.model, generation=gen,
                                        title=title, rationale=proposal.rationale, prompt=proposal.prompt_md(),
                                        search_state=self._search_state(gen, ids))
        self._committed(rec, cand, tuple(ids), gen, cost=proposal.cost_usd)

    def _committed(self, rec: CandidateRecord, cand: Candidate, parents: tuple[str, ...], gen: int,
                   cost: float = 0.0) -> None:
        """The committed candidate joins the population and goes through the gate (engine.evolve.gate)."""
        m = self._recorder.committed(rec, cand, parents, gen, cost)
        self._evaluations.candidate(rec.id)      # its files as committed
        if self._controls.stopping:
            return    # arrived while stopping: committed; a resume checks and evaluates it
        self._gate.admit(m)

    def _summary(self, m: Member) -> str:
        """A parent's verdict, speedup and rationale, and its per-config times against eager, torch.compile and
        the physical floor (the judge's placement, from its timing verdict)."""
        text = parent_summary(m)
        try:
            status = self._ws.status(m.id)
            timing = status.stages.get(Stage.TIMING)
            judged = timing.verdict.verdict.data if timing is not None and timing.verdict is not None else None
            timings = render_timings(status.measurement, self._task, self._direction, judged)
        except Exception:  # noqa: BLE001 - a note that cannot be read leaves the summary short, nothing more
            timings = ""
        return f"{text}\n\n{timings}" if timings else text

    def _profile_feedback(self, m: Member) -> str:
        """The parent's `profile` verdict summary (engine/profile), for the mutate prompt's feedback."""
        try:
            return profile_feedback(self._ws.status(m.id).stages)
        except Exception:  # noqa: BLE001 - no profile is no feedback, never a failed proposal
            return ""

    def _feedback(self, m: Member) -> str:
        try:
            st = self._ws.status(m.id)
        except Exception:  # noqa: BLE001
            return m.reason
        stage = st.stages.get(m.failed_stage or "")
        if stage is None or stage.verdict is None:
            return m.reason
        v = stage.verdict.verdict
        log = str(v.data.get("log") or "")
        return f"{v.stage} failed: {v.reason}" + (f"\n\n{log[-4000:]}" if log else "")
