"""Which operator fills each slot of a generation, and the proposal request it becomes.

A policy is a weight per operator (configurable; `parse_weights("mutate=3,crossover=1")`). Each slot draws
an operator among those that are *feasible* now:

    translate   no parents; only while the population has no eligible member (or the proposer has no other)
    mutate      one eligible parent, with insights drawn from other good candidates (EvoEngineer-style)
    crossover   two eligible parents (a merge commit in the workspace)
    tune        one eligible parent whose annotated knobs are swept
    repair      one failed parent (compile / correctness), with its failure as feedback
    meta        no candidate: rewrites the optimisation directives later prompts use (at most once a generation)

Defaults per proposer: tuner -> tune only; anthropic -> translate when nothing is eligible, then mutate 4,
crossover 1, repair 1, meta 0.5; replay -> mutate (replay ignores the operator); human -> mutate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from engine.errors import KbenchError

DEFAULT_WEIGHTS: dict[str, dict[str, float]] = {
    "tuner": {"tune": 1.0},
    "anthropic": {"mutate": 4.0, "crossover": 1.0, "repair": 1.0, "meta": 0.5},
    "replay": {"mutate": 1.0},
    "human": {"mutate": 1.0},
}
KNOWN = ("translate", "mutate", "crossover", "repair", "meta", "tune")


@dataclass
class OperatorPolicy:
    weights: dict[str, float] = field(default_factory=lambda: {"mutate": 1.0})
    seed_operator: str = "translate"      # what fills slots while nothing is eligible
    meta_per_generation: int = 1

    def feasible(self, op: str, *, eligible: int, failures: int, meta_done: int) -> bool:
        if op == "translate":
            return True
        if op in ("mutate", "tune"):
            return eligible >= 1
        if op == "crossover":
            return eligible >= 2
        if op == "repair":
            return failures >= 1
        if op == "meta":
            return eligible >= 1 and meta_done < self.meta_per_generation
        return False

    def choose(self, rng: random.Random, *, eligible: int, failures: int, meta_done: int = 0,
               supported: frozenset[str] | None = None, exclude: frozenset[str] = frozenset()) -> str | None:
        """The operator for the next slot, or None when none is feasible."""
        def ok(op: str) -> bool:
            return (op not in exclude and (supported is None or op in supported)
                    and self.feasible(op, eligible=eligible, failures=failures, meta_done=meta_done))

        if eligible == 0:
            if self.seed_operator and ok(self.seed_operator):
                return self.seed_operator
        ops = [(op, w) for op, w in self.weights.items() if w > 0 and ok(op)]
        if not ops:
            return None
        total = sum(w for _, w in ops)
        x = rng.random() * total
        for op, w in ops:
            x -= w
            if x < 0:
                return op
        return ops[-1][0]


def default_policy(proposer: str, weights: dict[str, float] | None = None) -> OperatorPolicy:
    w = dict(weights) if weights else dict(DEFAULT_WEIGHTS.get(proposer, {"mutate": 1.0}))
    for op in w:
        if op not in KNOWN:
            raise KbenchError(f"unknown operator {op!r} in the operator weights (known: {', '.join(KNOWN)})")
    seed = "" if proposer == "tuner" else "translate"
    return OperatorPolicy(weights=w, seed_operator=seed)


def parse_weights(text: str) -> dict[str, float]:
    """`"mutate=3,crossover=1"` -> {"mutate": 3.0, "crossover": 1.0}."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, _, val = part.partition("=")
        name = name.strip()
        if name not in KNOWN:
            raise KbenchError(f"unknown operator {name!r} (known: {', '.join(KNOWN)})")
        try:
            out[name] = float(val) if val.strip() else 1.0
        except ValueError:
            raise KbenchError(f"operator weight {part!r} is not NAME=NUMBER") from None
    return out


def parent_summary(m) -> str:
    """A few lines about a parent for the prompt: verdict and speedup."""
    if m.speedup is not None and m.eligible:
        what = f"correct; geomean speedup vs eager {m.speedup:.3f}x"
    elif m.failed_stage:
        what = f"failed at {m.failed_stage}: {m.reason}"
    elif getattr(m, "waiting", False):
        what = "compiled; correctness and speed not measured yet (waiting for a GPU)"
    else:
        what = "not evaluated yet"
    return f"{m.id} (generation {m.generation}, {m.operator}): {what}\n{m.rationale[:400]}".strip()


def insights(population, exclude: set[str], limit: int = 3, before: int | None = None) -> tuple[str, ...]:
    """EvoEngineer-style insights: what the best other candidates did and how it paid off."""
    out = []
    for m in population.ranked():
        if m.id in exclude or m.fitness is None or (before is not None and m.generation >= before):
            continue
        out.append(f"{m.id} reached {m.speedup:.3f}x with: {(m.rationale or m.title).strip()[:300]}")
        if len(out) >= limit:
            break
    return tuple(out)
