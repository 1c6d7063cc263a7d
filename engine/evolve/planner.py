"""The generation planner: what fills the next slot of a generation, decided without threads or a workspace.

Given the population, the operator policy, the budgets and the generation's counters, the planner answers
whether the loop may fill another slot now (`can_fill`) and with what (`next_slot`): the task's baseline,
a proposal (an operator, its parents drawn by tournament, the elite shown beside a mutate), or nothing (the
generation is closed, with the line the session logs). The loop turns a slot into a proposal request
(engine.evolve.proposing) and tells the planner how the answer went (`unavailable`, `empty`, `meta_done`).

The counters are the search's state that is not in the population: they are saved with every commit and
restored on resume (engine.evolve.search_state), with the random generator the planner draws from.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.evolve.operators import OperatorPolicy
from engine.evolve.population import Member, Population
from engine.verdict import Stage

BASELINE = "baseline"       # the operator (and proposer) of the task's shipped baseline in generation 0


@dataclass
class Budgets:
    generations: int = 3                 # generations after generation 0 (the seeds)
    population: int = 8                  # candidates per generation
    usd: float | None = None             # LLM dollars (proposals + verifiers); None: the ledger's own budget
    wall_s: float | None = None          # wall time of this run, seconds
    attempts_per_slot: int = 3           # failed/empty proposals allowed per slot before the generation closes
    infra_failures_in_a_row: int = 5     # the executor lost this many evaluations in a row: stop, it is broken
    proposals_in_flight: int = 1         # proposals (and LLM reviews) running at once; 1: on the loop's thread


@dataclass(frozen=True)
class Slot:
    """What fills the next slot: `kind` is "baseline", "propose" (with `operator`, `parents`, `elite`) or
    "none" (nothing this time; `note` is the line to log, at `level`, or "" for none)."""

    kind: str
    operator: str = ""
    parents: tuple[Member, ...] = ()
    elite: Member | None = None
    note: str = ""
    level: str = "info"


# in-flight proposals as the planner sees them: (generation, operator)
InFlight = Iterable[tuple[int, str]]


@dataclass
class GenerationPlanner:
    policy: OperatorPolicy
    rng: random.Random
    budgets: Budgets
    seeds_with_baseline: bool            # generation 0 is the task's baseline alone
    proposer_name: str = "?"
    supported: frozenset[str] | None = None   # the operators the proposer accepts; None: any
    attempts: dict[int, int] = field(default_factory=dict)             # proposals tried, per generation
    closed: set[int] = field(default_factory=set)                      # generations that take no more slots
    meta_done: dict[int, int] = field(default_factory=dict)            # meta proposals answered, per generation
    empty_parents: dict[int, set[str]] = field(default_factory=dict)   # parents whose proposal came back empty

    def target(self, gen: int) -> int:
        """How many candidates generation `gen` should hold."""
        if gen == 0 and self.seeds_with_baseline:
            return 1
        return self.budgets.population

    def can_fill(self, gen: int, population: Population, proposing: InFlight, in_flight: int,
                 capacity: int | None) -> bool:
        """Whether another slot of `gen` may start now: the generation is not full or spent, fewer proposals
        than allowed are running, and the evaluator (`in_flight` of its `capacity`) is not full."""
        if gen in self.closed:
            return False
        proposing = list(proposing)
        filled = len(population.in_generation(gen)) + sum(1 for g, _ in proposing if g == gen)
        if filled >= self.target(gen):
            return False
        if self.attempts.get(gen, 0) >= self.budgets.attempts_per_slot * self.target(gen):
            self.closed.add(gen)
            return False
        if len(proposing) >= max(1, self.budgets.proposals_in_flight):
            return False
        return not capacity or in_flight < capacity

    def next_slot(self, gen: int, population: Population, proposing: InFlight = ()) -> Slot:
        """What fills the next slot of `gen`. Draws from `rng` and marks the parents it picks (as the
        tournament does); a proposal slot counts as an attempt."""
        if gen == 0 and self.seeds_with_baseline and not population.in_generation(0):
            return Slot("baseline")
        el = population.eligible(before=gen)
        pool = None
        if not el and gen > 0:
            # nothing measured (no GPU here): propose from parents waiting for a GPU, one generation ahead
            pool = population.queueable(before=gen) or None
            el = pool or []
        metas_in_flight = sum(1 for g, o in proposing if g == gen and o == "meta")
        op = self.policy.choose(self.rng, eligible=len(el) if gen > 0 else 0,
                                failures=len(population.failures(before=gen)) if gen > 0 else 0,
                                meta_done=self.meta_done.get(gen, 0) + metas_in_flight, supported=self.supported)
        if op is None:
            self.closed.add(gen)
            if gen == 0:
                return Slot("none", note=f"the {self.proposer_name} proposer cannot start without a baseline "
                                         "(nothing to translate from)", level="error")
            if not el:
                return Slot("none", note=f"generation {gen}: no operator of the {self.proposer_name} proposer "
                                         "can run: no eligible candidate to start from", level="warning")
            return Slot("none")
        parents = self._parents(op, gen, population, pool)
        self.attempts[gen] = self.attempts.get(gen, 0) + 1
        if parents is None:
            if op in ("mutate", "tune"):
                self.closed.add(gen)   # every eligible parent is spent
            return Slot("none")
        return Slot("propose", op, tuple(parents), self._elite(op, gen, population, parents))

    def _parents(self, op: str, gen: int, population: Population, pool: list[Member] | None) -> list[Member] | None:
        """The parents `op` works from, or None where it has none to work from. `pool`: the parents to choose
        from where none is measured (members waiting for a GPU)."""
        skip = self.empty_parents.get(gen, set())
        parents: list[Member] = []
        if op in ("mutate", "tune"):
            parents = population.select(self.rng, 1, exclude=skip, before=gen, pool=pool)
        elif op == "crossover":
            parents = population.select(self.rng, 2, exclude=skip, before=gen, pool=pool)
            if len(parents) < 2:
                return None
        elif op == "repair":
            m = population.select_failure(self.rng, exclude=skip, before=gen)
            parents = [m] if m else []
        if op in ("mutate", "tune", "repair") and not parents:
            return None
        return parents

    @staticmethod
    def _elite(op: str, gen: int, population: Population, parents: list[Member]) -> Member | None:
        """EvoEngineer: beside a mutate's parent, the best other candidate's code."""
        if op != "mutate":
            return None
        exclude = {m.id for m in parents}
        return next((m for m in population.ranked() if m.id not in exclude and m.fitness is not None
                     and m.generation < gen), None)

    # -- how the proposal went ----------------------------------------------------------------------

    def unavailable(self, gen: int) -> None:
        """The API was unavailable: the attempt does not count against the search."""
        self.attempts[gen] = max(0, self.attempts.get(gen, 0) - 1)

    def empty(self, gen: int, parents: Iterable[Member]) -> None:
        """The proposer had nothing new from these parents: they are not drawn again this generation (without
        parents, nothing more can come: the generation closes)."""
        parents = list(parents)
        for m in parents:
            self.empty_parents.setdefault(gen, set()).add(m.id)
        if not parents:
            self.closed.add(gen)

    def meta_answered(self, gen: int) -> None:
        self.meta_done[gen] = self.meta_done.get(gen, 0) + 1


def lessons(population: Population, gen: int, exclude: set[str], limit: int = 6) -> tuple[str, ...]:
    """What failed in this session before `gen`, newest first: compile errors, wrong results, rejected hacks."""
    out = []
    for m in sorted(population.failures(before=gen), key=lambda m: (m.generation, m.id), reverse=True):
        if m.id in exclude:
            continue
        where = ("rejected before the GPU by the " + ("static checks" if m.failed_stage == Stage.STATIC
                                                       else "LLM reviewers")) if m.rejected else \
            f"failed at {m.failed_stage}"
        reason = " ".join((m.reason or "").split())[:300]
        out.append(f"{m.id} ({m.operator}: {(m.title or m.rationale)[:80]}): {where}: {reason}")
        if len(out) >= limit:
            break
    return tuple(out)
