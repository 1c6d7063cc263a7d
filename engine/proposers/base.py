"""The one interface every proposer implements, and the Proposal it returns.

A proposer turns a ProposalRequest (task, operator, parents, feedback) into one Proposal: a candidate,
directives (meta), or a reason why there is none. Proposers never raise for expected trouble (API errors,
bad answers, an unchanged edit); `guarded()` turns anything unexpected into a failed proposal too, so the
evolution loop can record every attempt and carry on or stop with the reason.
"""

from __future__ import annotations

import traceback
import uuid
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from engine.candidates import Candidate
from engine.llm.accounting import Usage
from engine.tasks.glue.abi import GlueError
from engine.tasks.glue.generated import materialise
from engine.tasks.model import Task

OPERATORS = ("translate", "mutate", "crossover", "repair", "meta", "tune")


class ProposalStatus(str, Enum):
    OK = "ok"  # a candidate (or, for meta, directives)
    FAILED = "failed"  # this attempt produced nothing usable; record it and carry on
    EMPTY = "empty"  # nothing to propose: edit unchanged, knob space spent, replay at its end
    STOP = "stop"  # carrying on would fail the same way or overspend: no key, key rejected, budget reached
    # the API could not be reached for the whole outage window: pause the session; this attempt does not
    # count against the search (no slot used, nothing learnt about the kernel)
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class ProposalRequest:
    task: Task
    operator: str
    direction: str = "forward"
    parents: tuple[Candidate, ...] = ()
    parent_summaries: tuple[str, ...] = ()  # per parent: verdicts and speedups, a few lines each
    feedback: str = ""  # repair: compiler / correctness output; mutate: profile summary
    insights: tuple[str, ...] = ()  # drawn from other candidates of the population
    elite: Candidate | None = None  # mutate: the best other candidate's code, shown beside the parent
    elite_summary: str = ""
    lessons: tuple[str, ...] = ()  # what failed in this session: compile errors, wrong results, rejected hacks
    directives: str = ""  # the current optimisation directives (written by the meta operator)
    population: str = ""  # meta: a summary of the population, best first
    hints: str = ""  # free text from the user
    known_hashes: frozenset[str] = frozenset()  # source hashes already in the session: never re-proposed
    generation: int = 0


def new_proposal_id() -> str:
    return uuid.uuid4().hex[:12]


def parent_id(candidate: Candidate) -> str:
    """How a proposal names a parent: the workspace's candidate id when the candidate came from the workspace
    (Workspace.files puts it in meta["id"]), else the source hash."""
    return str(candidate.meta.get("id") or candidate.source_hash)


@dataclass(frozen=True)
class Proposal:
    status: ProposalStatus
    proposer: str
    operator: str
    candidate: Candidate | None = None
    directives: str | None = None  # meta only
    reason: str = ""  # why FAILED / EMPTY / STOP
    parents: tuple[str, ...] = ()  # parent ids (see parent_id)
    rationale: str = ""
    prompt: str = ""  # what the proposer was asked, as Markdown
    answer: str = ""  # what it answered, as Markdown (kept on failures too)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    model: str | None = None
    id: str = field(default_factory=new_proposal_id)
    data: dict[str, Any] = field(default_factory=dict)  # proposer-specific: error kind, knobs, replay source
    # a failed proposal: the files its answer carried, as far as they got (kept for a person to salvage)
    drafts: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == ProposalStatus.OK

    @property
    def stop(self) -> bool:
        return self.status == ProposalStatus.STOP

    @property
    def unavailable(self) -> bool:
        return self.status == ProposalStatus.UNAVAILABLE

    def prompt_md(self) -> str:
        """The text of `.kbench/prompt.md`: what the proposer was asked and what it answered."""
        head = [f"# Proposal {self.id} · {self.operator} · {self.proposer}", "",
                f"- status: {self.status.value}" + (f" ({self.reason})" if self.reason else "")]
        if self.parents:
            head.append(f"- parents: {', '.join(self.parents)}")
        if self.model:
            head.append(f"- model: {self.model}")
        if self.usage.total_tokens:
            u = self.usage
            head.append(f"- tokens: {u.input_tokens} in, {u.output_tokens} out, {u.cache_write_tokens} cache write, "
                        f"{u.cache_read_tokens} cache read; ${self.cost_usd:.4f}")
        if self.rationale:
            head += ["", "## Rationale", "", self.rationale]
        head += ["", "## Prompt", "", self.prompt or "(none)", "", "## Answer", "", self.answer or "(none)"]
        return "\n".join(head).rstrip() + "\n"

    # Explicit, not engine.jsonable: `id` leads the record and is made up for one that has none, and the
    # candidate is written and read by engine/candidates.py's own pair.
    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status.value, "proposer": self.proposer, "operator": self.operator,
                "candidate": self.candidate.to_json() if self.candidate else None, "directives": self.directives,
                "reason": self.reason, "parents": list(self.parents), "rationale": self.rationale,
                "prompt": self.prompt, "answer": self.answer, "usage": self.usage.to_json(),
                "cost_usd": self.cost_usd, "model": self.model, "data": self.data, "drafts": self.drafts}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Proposal":
        cand = obj.get("candidate")
        return cls(status=ProposalStatus(obj["status"]), proposer=obj["proposer"], operator=obj["operator"],
                   candidate=Candidate.from_json(cand) if cand else None, directives=obj.get("directives"),
                   reason=obj.get("reason", ""), parents=tuple(obj.get("parents") or ()),
                   rationale=obj.get("rationale", ""), prompt=obj.get("prompt", ""), answer=obj.get("answer", ""),
                   usage=Usage.from_json(obj.get("usage") or {}), cost_usd=float(obj.get("cost_usd", 0.0)),
                   model=obj.get("model"), id=obj.get("id") or new_proposal_id(), data=dict(obj.get("data") or {}),
                   drafts=dict(obj.get("drafts") or {}))


@runtime_checkable
class Proposer(Protocol):
    name: str
    operators: frozenset[str]  # the request operators it accepts

    def available(self) -> bool:
        """Whether it can propose now (the anthropic proposer needs an API key, the human one an editor)."""

    def unavailable_reason(self) -> str:
        """One plain sentence for the UI when available() is False; "" otherwise."""

    def propose(self, request: ProposalRequest) -> Proposal:
        """One proposal for `request`. Expected trouble comes back as a FAILED / EMPTY / STOP proposal."""


def failed(proposer: str, request: ProposalRequest, reason: str, *,
           status: ProposalStatus = ProposalStatus.FAILED, **kw: Any) -> Proposal:
    return Proposal(status=status, proposer=proposer, operator=request.operator, reason=reason,
                    parents=tuple(parent_id(p) for p in request.parents), **kw)


def with_provenance(candidate: Candidate, proposal: Proposal, **extra: Any) -> Candidate:
    """The candidate with the provenance meta every proposer sets (see docs/formats.md, "LLM")."""
    meta = {**candidate.meta, "proposer": proposal.proposer, "operator": proposal.operator,
            "parents": list(proposal.parents), "rationale": proposal.rationale, "proposal_id": proposal.id}
    if proposal.model:
        meta["model"] = proposal.model
    if proposal.usage.total_tokens:
        meta["usage"] = proposal.usage.to_json()
        meta["cost_usd"] = proposal.cost_usd
    meta.update(extra)
    return replace(candidate, meta=meta)


def check_parents(request: ProposalRequest, want: int) -> str | None:
    have = len(request.parents)
    if have != want:
        return f"{request.operator} needs {want} parent(s), got {have}"
    return None


def guarded(proposer: Proposer, request: ProposalRequest) -> Proposal:
    """proposer.propose(request), with any unexpected exception turned into a failed proposal."""
    if request.operator not in proposer.operators:
        return failed(proposer.name, request, f"the {proposer.name} proposer does not do {request.operator!r} "
                      f"(it does: {', '.join(sorted(proposer.operators))})")
    try:
        proposal = proposer.propose(request)
    except Exception as exc:  # noqa: BLE001 - the loop must survive a proposer bug and show it
        return failed(proposer.name, request, f"internal error in the {proposer.name} proposer: {exc!r}",
                      data={"traceback": traceback.format_exc()})
    return with_glue(proposal, request)


def with_glue(proposal: Proposal, request: ProposalRequest) -> Proposal:
    """A proposal of a kernel-only candidate (kernel.cu without binding.cpp) as one of the native candidate with
    the binding the task's signature generates (engine/tasks/glue/generated.py), so that what is committed builds and
    diffs like any other; a failed proposal, naming the reason, where the signature has no generated glue."""
    cand = proposal.candidate
    if cand is None or not proposal.ok or not (cand.format == "kernel-only" or
                                               (cand.format == "triton" and "binding.py" not in cand.files)):
        return proposal
    try:
        native = materialise(cand, request.task, request.direction)
    except GlueError as exc:
        return replace(proposal, status=ProposalStatus.FAILED, candidate=None, reason=str(exc),
                       data={**proposal.data, "error": "glue"})
    if native.source_hash in request.known_hashes:
        return replace(proposal, status=ProposalStatus.FAILED, candidate=None,
                       reason="the answer repeats a candidate this session already has (same source)",
                       data={**proposal.data, "error": "duplicate", "source_hash": native.source_hash})
    return replace(proposal, candidate=native)
