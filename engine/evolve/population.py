"""The population of a session: members, fitness, and parent selection with diversity.

Fitness is the geometric-mean speedup over eager PyTorch across the task's configs (what the workspace
ranks by); a candidate that failed or was rejected at any stage has none and is never a parent (except for
`repair`, which picks failures on purpose). Selection is a tournament on log-fitness with two diversity
penalties: a member that was already picked as a parent often loses ground (`reuse_penalty` per use), and
members that share a source hash with an earlier member count once (near-duplicates cannot crowd the pool).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.gpu_wait import WAITING_FOR_GPU
from engine.verdict import Stage

PENDING, DONE = "pending", "done"
# The failed stages `repair` works on: the kernel itself was wrong (not a suspicious timing, not the machinery).
REPAIRABLE = (Stage.COMPILE, Stage.CORRECTNESS, Stage.STATIC, Stage.LLM_VERIFY)


@dataclass
class Member:
    id: str
    generation: int
    operator: str
    source_hash: str
    parents: tuple[str, ...] = ()
    state: str = PENDING                 # pending (committed, not yet evaluated) | done
    speedup: float | None = None         # geomean vs eager, when measured
    eligible: bool = False               # measured and no stage failed or is suspicious
    failed_stage: str | None = None
    reason: str = ""
    rejected: bool = False               # stopped before the GPU by a static / LLM check
    waiting: bool = False                # compiled where no GPU was visible: waiting for a GPU (engine.gpu_wait)
    title: str = ""
    rationale: str = ""
    cost_usd: float = 0.0
    times_parent: int = 0

    @property
    def fitness(self) -> float | None:
        return fitness(self)


def fitness(m: Member) -> float | None:
    """Geomean speedup over eager for an eligible member; None for anything that failed or is unmeasured."""
    if m.state != DONE or not m.eligible or not m.speedup or m.speedup <= 0:
        return None
    return m.speedup


@dataclass
class Population:
    members: dict[str, Member] = field(default_factory=dict)
    tournament: int = 3
    reuse_penalty: float = 0.15          # subtracted from log-fitness per earlier use as a parent

    def add(self, m: Member) -> Member:
        self.members[m.id] = m
        return m

    def get(self, cid: str) -> Member | None:
        return self.members.get(cid)

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self):
        return iter(sorted(self.members.values(), key=_order))

    @property
    def known_hashes(self) -> frozenset[str]:
        return frozenset(m.source_hash for m in self.members.values() if m.source_hash)

    def in_generation(self, gen: int) -> list[Member]:
        return [m for m in self if m.generation == gen]

    def pending(self) -> list[Member]:
        return [m for m in self if m.state == PENDING]

    def done(self) -> list[Member]:
        return [m for m in self if m.state == DONE]

    def eligible(self, before: int | None = None) -> list[Member]:
        return [m for m in self if fitness(m) is not None and (before is None or m.generation < before)]

    def waiting(self) -> list[Member]:
        return [m for m in self if m.waiting]

    def queueable(self, before: int) -> list[Member]:
        """Parents for a generation proposed while nothing is measured (no GPU here): members of earlier
        generations waiting for a GPU whose own parents are measured (a seed has none), so variants are never
        proposed from variants that nobody has checked. Empty once such a generation exists below `before`: kbench
        queues one generation ahead of its measurements, not a chain of guesses."""
        waiting = {m.id for m in self.members.values() if m.waiting}
        if any(p in waiting for m in self.members.values() if m.generation < before for p in m.parents):
            return []
        return self.diverse_pool([m for m in self if m.waiting and m.generation < before])

    def failures(self, before: int | None = None) -> list[Member]:
        """Evaluated members that failed compile or correctness (what `repair` works on); rejected ones too."""
        return [m for m in self if m.state == DONE and m.failed_stage in REPAIRABLE
                and (before is None or m.generation < before)]

    def best(self) -> Member | None:
        el = self.eligible()
        return min(el, key=lambda m: (-(m.speedup or 0.0), m.generation, _n(m.id), m.id)) if el else None

    def ranked(self) -> list[Member]:
        """Eligible members best first, then the rest."""
        el = sorted(self.eligible(), key=lambda m: (-(m.speedup or 0.0), m.generation, _n(m.id)))
        rest = [m for m in self if m not in el]
        return el + rest

    def diverse_pool(self, members: Iterable[Member]) -> list[Member]:
        """One member per source hash (the earliest), so duplicates do not weigh twice."""
        seen: set[str] = set()
        out = []
        for m in sorted(members, key=_order):
            if m.source_hash in seen:
                continue
            seen.add(m.source_hash)
            out.append(m)
        return out

    def score(self, m: Member) -> float:
        f = fitness(m)
        base = math.log(f) if f is not None else -math.inf
        return base - self.reuse_penalty * m.times_parent

    def select(self, rng: random.Random, k: int = 1, exclude: Iterable[str] = (),
               pool: list[Member] | None = None, before: int | None = None) -> list[Member]:
        """k distinct parents by tournament over the eligible, de-duplicated pool (only generations below
        `before` when given). Fewer when the pool is small. Marks each pick (times_parent += 1) so later picks
        spread out."""
        skip = set(exclude)
        cands = [m for m in (pool if pool is not None else self.diverse_pool(self.eligible())) if m.id not in skip
                 and (before is None or m.generation < before)]
        picks: list[Member] = []
        while cands and len(picks) < k:
            entrants = rng.sample(cands, min(self.tournament, len(cands)))
            win = max(entrants, key=lambda m: (self.score(m), -m.generation, -_n(m.id)))
            picks.append(win)
            cands.remove(win)
        for p in picks:
            p.times_parent += 1
        return picks

    def select_failure(self, rng: random.Random, exclude: Iterable[str] = (), before: int | None = None) -> Member | None:
        """A recent failure worth repairing: the newest generation's failures first, not repaired before."""
        skip = set(exclude)
        repaired = {p for m in self.members.values() if m.operator == "repair" for p in m.parents}
        fails = [m for m in self.failures() if m.id not in skip and m.id not in repaired and not m.rejected
                 and (before is None or m.generation < before)]
        if not fails:
            return None
        newest = max(m.generation for m in fails)
        pick = rng.choice([m for m in fails if m.generation == newest])
        pick.times_parent += 1
        return pick

    def summary(self, limit: int = 12) -> str:
        """A few lines, best first: what meta and mutate prompts see of the population."""
        lines = []
        for m in self.ranked()[:limit]:
            if fitness(m) is not None:
                what = f"{m.speedup:.3f}x"
            elif m.waiting:
                what = f"compiled, {WAITING_FOR_GPU} (not measured yet)"
            elif m.state == PENDING:
                what = "pending"
            else:
                what = f"failed at {m.failed_stage}: {m.reason[:120]}"
            lines.append(f"- {m.id} (gen {m.generation}, {m.operator}): {what}. {m.title}")
        return "\n".join(lines)


def _n(cid: str) -> int:
    try:
        return int(cid.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


def _order(m: Member) -> tuple[int, int, str]:
    return (m.generation, _n(m.id), m.id)
