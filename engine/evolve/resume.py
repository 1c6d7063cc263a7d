"""Rebuild a session's population and progress from the workspace alone.

A candidate is *finished* when its note has the `evaluated` event (written in the same notes commit as its
last verdicts and its measurement), or a measurement. Everything else that is committed is *pending*
(an `infrastructure_failure` event, a lost worker or node, leaves it pending on purpose): the
loop sends it back to the evaluator, never proposes it again (its source hash is known) and never commits
it twice. A candidate that a static or LLM check rejected is finished too, unless a person has since
overridden the blocking verdict and it never compiled: then it is pending again and goes to the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.evolve.population import DONE, PENDING, Member, Population
from engine.gpu_wait import waiting_for_gpu
from engine.verdict import Stage
from engine.workspace.errors import CorruptNoteError, WorkspaceDamagedError

if TYPE_CHECKING:
    from engine.workspace import CandidateView, Workspace

EVALUATED = "evaluated"        # the note event that marks a finished evaluation
DIRECTIVES = "directives"      # the note event that keeps the meta operator's directives
INFRA_FAILURE = "infrastructure_failure"   # the executor lost the evaluation; not a judgement (re-run on resume)
PROPOSAL_FAILED = "proposal_failed"        # session note: a proposal produced no candidate; its tokens and dollars
API_UNAVAILABLE = "api_unavailable"        # session note: the LLM API was down for the outage window; paused


@dataclass
class SessionState:
    population: Population
    requeue: list[str] = field(default_factory=list)       # pending ids, oldest first
    generation: int = 0                                      # the newest generation holding a candidate
    directives: str = ""
    spent_usd: float = 0.0
    finished: int = 0
    failed_proposals: int = 0                                # proposal_failed events on the session's note


def title_of(subject: str) -> str:
    parts = subject.split(" · ", 2)
    return parts[2] if len(parts) == 3 and parts[0].startswith("gen ") else subject


def member_from_view(view: CandidateView) -> tuple[Member, bool]:
    """(member, finished) for one CandidateView."""
    rec, st = view.record, view.status
    m = Member(id=rec.id, generation=rec.generation, operator=rec.operator, source_hash=rec.source_hash,
               parents=tuple(rec.parents), title=title_of(rec.subject), rationale=rec.rationale)
    evaluated = [e for e in st.events if e.event == EVALUATED]
    finished = bool(evaluated) or st.measurement is not None
    rejected = bool(evaluated and evaluated[-1].data.get("rejected"))
    if rejected and not st.blocked and Stage.COMPILE not in st.stages:
        finished = False  # a person overrode the pre-GPU rejection: evaluate it now
        rejected = False
    if finished:
        j = st.judgement
        m.state = DONE
        m.speedup = st.speedup
        m.eligible = j.eligible
        m.failed_stage = j.failed_stage
        m.reason = st.stages[j.blocked_by[0]].reason if j.blocked_by else j.why_not_passed
        m.rejected = rejected
    else:
        m.state = PENDING
        # compiled where no GPU was, and re-queued for a GPU now: still a parent the next generation may be
        # queued from (Population.queueable), as it was before the kill, or a resume could not complete the
        # generation the kill interrupted before this re-evaluation ends
        m.waiting = waiting_for_gpu(st)
    return m, finished


def load_state(workspace: Workspace, session: str) -> SessionState:
    views = workspace.candidates(session, strict=False)
    damaged = [v for v in views if v.problem]
    lost = [d for d in getattr(workspace, "damaged_refs", lambda _s: [])(session) if not d.found]
    if lost and not getattr(workspace, "accept_damage", False):   # a candidate the listing cannot show at all:
        raise WorkspaceDamagedError(lost[0].message, obj=lost[0].ref, candidate=lost[0].candidate)  # never re-propose
    if damaged and not getattr(workspace, "accept_damage", False):
        # Its history cannot be read: evaluating it again would be a guess at what was already done.
        more = f" ({len(damaged) - 1} more candidate(s) of session {session} likewise)" if len(damaged) > 1 else ""
        raise CorruptNoteError(damaged[0].problem + more)
    pop = Population()
    state = SessionState(pop)
    latest_directives: tuple[str, str] | None = None
    for view in views:
        m, finished = member_from_view(view)
        pop.add(m)
        state.generation = max(state.generation, m.generation)
        if finished:
            state.finished += 1
        else:
            state.requeue.append(m.id)
        for e in view.status.events:
            if e.event == DIRECTIVES and e.data.get("directives"):
                if latest_directives is None or e.at >= latest_directives[0]:
                    latest_directives = (e.at, str(e.data["directives"]))
                state.spent_usd += float(e.data.get("cost_usd") or 0.0)
        llm = view.status.stages.get(Stage.LLM_VERIFY)
        if llm is not None and llm.verdict is not None:
            for vote in llm.verdict.verdict.data.get("votes") or ():
                state.spent_usd += float((vote.get("data") or {}).get("cost_usd") or 0.0)
    session_events = getattr(workspace, "session_events", None)
    for e in session_events(session) if session_events is not None else ():
        if e.event == PROPOSAL_FAILED:
            state.failed_proposals += 1
            state.spent_usd += float(e.data.get("cost_usd") or 0.0)
        elif e.event == DIRECTIVES and e.data.get("directives"):    # written before any candidate was measured
            if latest_directives is None or e.at >= latest_directives[0]:
                latest_directives = (e.at, str(e.data["directives"]))
            state.spent_usd += float(e.data.get("cost_usd") or 0.0)
    for m in pop.members.values():
        for p in m.parents:
            if p in pop.members:
                pop.members[p].times_parent += 1
    if latest_directives:
        state.directives = latest_directives[1]
    return state


def proposal_costs(workspace: Workspace, members: list[Member]) -> float:
    """What the proposals behind these members cost (from each commit's candidate.json meta)."""
    total = 0.0
    for m in members:
        try:
            cand = workspace.files(m.id)
        except WorkspaceDamagedError as exc:
            if getattr(workspace, "accept_damage", False):
                continue     # the user chose to go on: its cost is not counted
            raise WorkspaceDamagedError(f"{exc} Resuming reads every candidate's record: run the same command "
                                        "with --reevaluate-damaged to go on without this one's.", obj=exc.obj,
                                        candidate=exc.candidate) from None
        except Exception:  # noqa: BLE001 - a missing file must not block a resume
            continue
        c = float(cand.meta.get("cost_usd") or 0.0)
        m.cost_usd = c
        total += c
    return total
