"""What the parts of an evolution session share: the attributes EvolutionSession sets in its constructor, named
and typed in one place for the parts that read them (engine.evolve.controls, proposing, gate, recorder).

All of it is touched on the loop's own thread only, except `_flags` and `_inbox` (thread-safe: a UI's thread
and the evaluator's and the pool's callbacks go through them).
"""

from __future__ import annotations

import itertools
import queue
import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from engine.candidates import Candidate
from engine.evolve import events as ev
from engine.evolve.outcome import EvalOutcome, Evaluator
from engine.evolve.planner import Budgets, GenerationPlanner
from engine.evolve.population import Member, Population
from engine.proposers.base import Proposal, Proposer
from engine.tasks.model import Task
from engine.verdict import Verdict

if TYPE_CHECKING:
    from engine.evolve.controls import DaemonPool, Flags
    from engine.llm.verifiers import Verification
    from engine.workspace import Workspace
    from engine.workspace.writers import Claim

Check = Callable[[Task, str, Candidate], Verdict]        # a pre-GPU check (engine.evolve.checks)
Verifier = Callable[[Candidate], "Verification"]         # the LLM review of a candidate (engine.llm.verifiers)
InboxItem = tuple[str, str, Any]                         # (kind, candidate id or proposal token, payload)


class Ledger(Protocol):
    """The LLM cost ledger the loop reads its dollar budget from (engine.llm.accounting.CostLedger)."""

    @property
    def spent_usd(self) -> float: ...

    @property
    def budget_usd(self) -> float | None: ...


class LoopState:
    # what the session works on (the constructor's arguments)
    ws: Workspace
    session: str
    task: Task
    direction: str
    proposer: Proposer
    evaluator: Evaluator
    budgets: Budgets
    ledger: Ledger | None
    checks: list[Check]
    verifier: Verifier | None
    hints: str
    rng: random.Random
    model: str | None
    clock: Callable[[], float]
    poll_s: float
    profile: str                               # best | all | off
    on_unavailable: str                        # "stop": end the run (resumable); "pause": wait for resume()

    # the search
    planner: GenerationPlanner
    population: Population
    directives: str
    generation: int
    spent_before: float                        # LLM dollars spent by earlier runs of the session
    _usd_out: str                              # why an LLM call was refused by the dollar budget ("" if none)
    _evaluated: int
    _infra_streak: int                         # evaluations lost by the executor in a row
    _failed_in_generation: dict[int, list[str]]  # why each failed proposal of a generation gave no candidate

    # threads and the inbox
    _flags: Flags
    _subs: list[Callable[[ev.EvolveEvent], None]]
    _inbox: queue.Queue[InboxItem]
    _pool: DaemonPool | None                   # proposals and LLM reviews, when more than one runs at once
    _tokens: itertools.count[int]              # proposal tokens (inbox keys of proposals in flight)
    _thread: threading.Thread | None
    _finished: threading.Event                 # set when the background run has ended (see join)
    _claim: Claim | None                       # this process's claim on the session (the one writer)
    _created: bool                             # this run created the session (a failed start removes it)
    _t0: float

    # work under way, by candidate id (or proposal token)
    _in_flight: dict[str, Future[EvalOutcome]]
    _profiling: dict[str, Future[Verdict]]     # the profile stage of a new best
    _proposing: dict[int, tuple[int, str, Sequence[Member]]]   # token -> (generation, operator, parents)
    _verifying: set[str]                       # committed, their LLM review running
    _held: set[str]                            # committed, review not possible (API unavailable): resume
    _recorded: dict[str, set[str]]             # stages already noted while the evaluation runs
    _files: dict[str, Candidate]               # candidate files read from the workspace (a cache)

    # how the run ends
    _stepping: bool
    _stop_reason: str
    _stop_paused: bool                         # the run ends as a pause (API unavailable), not a stop
    _pause_reason: str
    result: ev.Stopped | None
    error: Exception | None                    # a KbenchError that ended a background run (see start)

    if TYPE_CHECKING:   # implemented by the parts; declared for the type checker, so each part can call the others
        def run(self) -> ev.Stopped: ...
        def _drain(self, block: bool) -> None: ...
        def _emit(self, event: ev.EvolveEvent) -> None: ...
        def _submit(self, m: Member) -> None: ...
        def _candidate(self, cid: str) -> Candidate: ...
        def _pre_gpu(self, m: Member) -> Verdict | None: ...
        def _checked_before_gpu(self, m: Member) -> bool: ...
        def _outage(self, reason: str) -> None: ...
        def _busy(self) -> bool: ...
        def _after_proposal(self, gen: int, op: str, parents: Sequence[Member], proposal: Proposal) -> ev.Stopped | None: ...
        def _reviewed(self, m: Member, verdicts: list[Verdict], ver: Verification | None) -> Verdict | None: ...
        def _record_outcome(self, m: Member, out: EvalOutcome) -> None: ...
        def _record_profile(self, cid: str, verdict: Verdict) -> None: ...
        def _notice(self, cid: str) -> None: ...
        def _repeats_known(self, proposal: Proposal) -> bool: ...
        def _record_failed(self, proposal: Proposal, gen: int, reason: str | None = None) -> None: ...
        def _set_directives(self, proposal: Proposal) -> None: ...
        def _commit(self, proposal: Proposal, gen: int, parents: Sequence[Member]) -> None: ...
        def _commit_baseline(self) -> None: ...
        def _release_held(self) -> None: ...
        def pause(self, reason: str = "") -> None: ...
