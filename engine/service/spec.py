"""What a front end hands the session service and what it gets back: the spec a person asked for, the plan
the service resolved it to, the running session, and the defaults both front ends share.

Plain values with no workspace of their own; engine.service.session_service builds the plan and the
running session from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.evolve.loop import EvolutionSession
    from engine.evolve.outcome import Evaluator
    from engine.llm.accounting import CostLedger
    from engine.tasks.model import Task
    from engine.workspace.writers import Claim


@dataclass(frozen=True)
class SessionDefaults:
    generations: int = 3          # generations after generation 0
    population: int = 4           # candidates per generation


DEFAULTS = SessionDefaults()
SESSION_PROPOSERS = ("anthropic", "openai", "tuner", "replay", "human")


@dataclass(frozen=True)
class SessionSpec:
    """What a front end asks for. None: the session's stored value on a resume, else the default."""

    task: str | None = None               # built-in name, task folder or KernelBench .py (None: resume by name)
    direction: str | None = None
    proposer: str | None = None           # None: the LLM proposer of [llm] provider
    generations: int | None = None
    population: int | None = None
    usd: float | None = None              # LLM dollars (None: [budget] usd for LLM proposers)
    wall_s: float | None = None
    name: str | None = None               # session name (None: <task>-<fwd|bwd>-<proposer>)
    operators: str | None = None          # "mutate=4,crossover=1,repair=1,meta=0.5"
    seed: int | None = None
    use_baseline: bool | None = None
    hints: str | None = None
    verify: bool | None = None            # None: [verify] enabled (LLM proposers only)
    replay_from: str | None = None
    started_from: str = "cli"
    take_over: bool = False               # the session's writer is gone: take its claim (engine.workspace.writers)


@dataclass(frozen=True)
class SessionPlan:
    name: str
    task: Task
    direction: str
    proposer: str
    provider: str | None                  # the LLM provider, for LLM proposers
    model: str | None
    generations: int
    population: int
    usd: float | None
    wall_s: float | None
    operators: dict[str, float]
    seed: int
    use_baseline: bool
    hints: str
    verify: bool
    proposals_in_flight: int
    resumed: bool
    session_config: dict[str, Any]

    def summary(self) -> str:
        verify = "LLM verifiers on" if self.verify else "no LLM verifiers"
        usd = f"${self.usd:g}" if self.usd is not None else "no dollar limit"
        who = f"{self.proposer} ({self.model})" if self.model else self.proposer
        return (f"{'resume' if self.resumed else 'new'} session {self.name}: {self.task.name} {self.direction}, {who}, "
                f"{self.generations} generation(s) of {self.population}, {usd}, {verify}")


@dataclass
class RunningSession:
    """A started session, the evaluator it owns and the plan it runs."""

    session: EvolutionSession
    evaluator: Evaluator
    plan: SessionPlan
    ledger: CostLedger | None = None
    claim: Claim | None = None            # this process's claim on the session (released on close)
    _closed: bool = field(default=False, repr=False)

    def close(self, wait: bool = True) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.evaluator.close(wait=wait)
            finally:
                if self.claim is not None:
                    self.claim.release()

    def stats(self) -> dict[str, Any]:
        return self.evaluator.stats()
