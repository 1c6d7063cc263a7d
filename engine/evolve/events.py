"""Typed events the evolution loop emits. Subscribers (CLI, TUI, tests) get them in emission order.

Every event is a frozen dataclass with `session`, `t` (time.time() when emitted), a `kind` (the class name)
and `to_json()`; `line()` is the one-line text the headless CLI prints.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class EvolveEvent:
    session: str
    t: float = field(default_factory=time.time, kw_only=True)

    @property
    def kind(self) -> str:
        return type(self).__name__

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}

    def line(self) -> str:
        return f"[{self.session}] {self.kind}"


@dataclass(frozen=True)
class SessionStarted(EvolveEvent):
    task: str
    direction: str
    proposer: str
    resumed: bool = False
    finished: int = 0        # candidates already evaluated (resume)
    requeued: int = 0        # committed but unevaluated candidates sent back to the evaluator (resume)
    generation: int = 0

    def line(self) -> str:
        how = (f"resumed at gen {self.generation}: {self.finished} evaluated, {self.requeued} re-queued"
               if self.resumed else "started")
        return f"[{self.session}] session {how} · {self.task} {self.direction} · {self.proposer}"


@dataclass(frozen=True)
class CandidateProposed(EvolveEvent):
    operator: str
    status: str              # ok / failed / empty / stop
    parents: tuple[str, ...] = ()
    reason: str = ""
    cost_usd: float = 0.0

    def line(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        par = f" from {', '.join(self.parents)}" if self.parents else ""
        return f"[{self.session}] propose {self.operator}{par} -> {self.status}{why}"


@dataclass(frozen=True)
class CandidateCommitted(EvolveEvent):
    candidate: str
    generation: int
    operator: str
    parents: tuple[str, ...] = ()
    title: str = ""

    def line(self) -> str:
        return f"[{self.session}] commit {self.candidate} · {self.operator} · {self.title}"


@dataclass(frozen=True)
class StageFinished(EvolveEvent):
    candidate: str
    stage: str
    status: str
    reason: str = ""

    def line(self) -> str:
        return f"[{self.session}] {self.candidate} {self.stage}: {self.status} {self.reason}".rstrip()


@dataclass(frozen=True)
class LongWait(EvolveEvent):
    """A stage of a candidate is about to take long, and why (e.g. torch's precompiled header is built first)."""
    candidate: str
    stage: str
    what: str

    def line(self) -> str:
        return f"[{self.session}] {self.candidate} {self.stage}: {self.what}"


@dataclass(frozen=True)
class CandidateEvaluated(EvolveEvent):
    candidate: str
    generation: int
    speedup: float | None = None     # geomean over configs vs eager; None when it failed or was rejected
    eligible: bool = False
    failed_stage: str | None = None
    reason: str = ""
    rejected: bool = False           # stopped before the GPU by a static or LLM check
    infrastructure: bool = False     # the executor lost it (worker / node died): not judged, re-run on resume
    waiting_for_gpu: bool = False    # compiled where no GPU is visible: queued for one (engine.gpu_wait)

    def line(self) -> str:
        if self.speedup is not None and self.eligible:
            what = f"{self.speedup:.3f}x"
        elif self.waiting_for_gpu:
            what = "compiled, waiting for a GPU (measured by the same command on a GPU machine)"
        elif self.infrastructure:
            what = f"not judged, infrastructure failure: {self.reason} (evaluated again on resume)"
        else:
            what = f"{'rejected' if self.rejected else 'failed'} at {self.failed_stage or '?'}: {self.reason}"
        return f"[{self.session}] evaluated {self.candidate}: {what}"


@dataclass(frozen=True)
class CandidateProfiled(EvolveEvent):
    """The profile stage of an evaluated candidate (a new best, with `[eval] profile = "best"`) was recorded."""

    candidate: str
    status: str              # pass / skipped (ncu missing or not permitted: the reason says)
    reason: str = ""

    def line(self) -> str:
        return f"[{self.session}] profiled {self.candidate}: {self.status} {self.reason}".rstrip()


@dataclass(frozen=True)
class GenerationFinished(EvolveEvent):
    generation: int
    candidates: int
    best: str | None = None
    best_speedup: float | None = None
    waiting_for_gpu: int = 0         # of them, compiled and waiting for a GPU

    def line(self) -> str:
        b = f"best {self.best} {self.best_speedup:.3f}x" if self.best and self.best_speedup else "no eligible candidate"
        w = f" ({self.waiting_for_gpu} waiting for a GPU)" if self.waiting_for_gpu else ""
        return f"[{self.session}] generation {self.generation} done: {self.candidates} candidate(s){w}, {b}"


@dataclass(frozen=True)
class BestImproved(EvolveEvent):
    candidate: str
    speedup: float
    previous: str | None = None
    previous_speedup: float | None = None

    def line(self) -> str:
        was = f" (was {self.previous} {self.previous_speedup:.3f}x)" if self.previous and self.previous_speedup else ""
        return f"[{self.session}] new best {self.candidate} {self.speedup:.3f}x{was}"


@dataclass(frozen=True)
class DirectivesUpdated(EvolveEvent):
    directives: str
    cost_usd: float = 0.0

    def line(self) -> str:
        first = (self.directives.strip().splitlines() or [""])[0]
        return f"[{self.session}] meta: new directives: {first[:100]}"


@dataclass(frozen=True)
class BudgetExhausted(EvolveEvent):
    budget: str              # generations / usd / wall_time / search_space / proposals
    detail: str = ""

    def line(self) -> str:
        return f"[{self.session}] budget reached: {self.budget} {self.detail}".rstrip()


@dataclass(frozen=True)
class Paused(EvolveEvent):
    in_flight: int = 0
    reason: str = ""         # why, when the loop paused itself (API unavailable); "" for a person's pause

    def line(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"[{self.session}] paused{why} ({self.in_flight} evaluation(s) still running)"


@dataclass(frozen=True)
class Resumed(EvolveEvent):
    def line(self) -> str:
        return f"[{self.session}] resumed"


@dataclass(frozen=True)
class Stopped(EvolveEvent):
    reason: str = ""
    completed: bool = False          # True: the budgets ran out normally
    evaluated: int = 0
    best: str | None = None
    best_speedup: float | None = None
    paused: bool = False             # ended as a pause (API unavailable): resumable, nothing counted as tried
    waiting_for_gpu: int = 0         # candidates of the session compiled and waiting for a GPU

    def line(self) -> str:
        b = f"; best {self.best} {self.best_speedup:.3f}x" if self.best and self.best_speedup else ""
        w = f", {self.waiting_for_gpu} waiting for a GPU" if self.waiting_for_gpu else ""
        what = "paused" if self.paused else "stopped"
        return f"[{self.session}] {what}: {self.reason} ({self.evaluated} evaluated{w}{b})"


@dataclass(frozen=True)
class Log(EvolveEvent):
    message: str
    level: str = "info"

    def line(self) -> str:
        return f"[{self.session}] {self.level}: {self.message}"


EVENT_TYPES = (SessionStarted, CandidateProposed, CandidateCommitted, LongWait, StageFinished, CandidateEvaluated,
               CandidateProfiled, GenerationFinished, BestImproved, DirectivesUpdated, BudgetExhausted, Paused, Resumed, Stopped, Log)
