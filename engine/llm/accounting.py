"""Token and dollar accounting: per call, per key (a proposal or candidate), per session; a budget guard.

The ledger is shared by every LLM call of a session (proposers and verifiers, possibly from several
threads), so it is the one place that can refuse to spend once the session budget is reached.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from engine import jsonable
from engine.config import Price
from engine.llm.errors import BudgetExhausted


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0  # cache_creation_input_tokens
    cache_read_tokens: int = 0  # cache_read_input_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cache_write_tokens + other.cache_write_tokens,
                     self.cache_read_tokens + other.cache_read_tokens)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_write_tokens + self.cache_read_tokens

    def cost(self, price: Price) -> float:
        return (self.input_tokens * price.input + self.output_tokens * price.output
                + self.cache_write_tokens * price.cache_write + self.cache_read_tokens * price.cache_read) / 1e6

    @classmethod
    def from_api(cls, usage: Any) -> "Usage":
        """From the SDK's `message.usage` (an object) or its JSON form (a dict); missing fields count 0."""
        get = usage.get if isinstance(usage, dict) else (lambda k, d=None: getattr(usage, k, d))
        return cls(int(get("input_tokens", 0) or 0), int(get("output_tokens", 0) or 0),
                   int(get("cache_creation_input_tokens", 0) or 0), int(get("cache_read_input_tokens", 0) or 0))

    def to_json(self) -> dict[str, int]:
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any], what: str = "") -> "Usage":
        return jsonable.load(cls, obj, what)


@dataclass(frozen=True)
class CallRecord:
    """One API call as billed (failed attempts without a response bill nothing and are not recorded)."""

    model: str
    usage: Usage
    cost_usd: float
    key: str | None = None  # what the call was for: a proposal id, later a candidate's source hash
    purpose: str = ""  # operator or verifier name
    attempts: int = 1
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)


@dataclass(frozen=True)
class Totals:
    usage: Usage
    cost_usd: float
    calls: int


class CostLedger:
    """Thread-safe record of calls with a session budget in US dollars (None: no limit).

    `spent_before` seeds the ledger with what a resumed session had already spent.
    """

    def __init__(self, budget_usd: float | None = None, spent_before: float = 0.0):
        # `usd = inf` in TOML means no limit; keep None so the ledger stays valid JSON.
        self.budget_usd = None if budget_usd is not None and math.isinf(budget_usd) else budget_usd
        self._spent_before = spent_before
        self._calls: list[CallRecord] = []
        self._lock = threading.Lock()

    # -- the guard -------------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise BudgetExhausted if the budget is reached; called before every attempt."""
        with self._lock:
            spent = self._spent_locked()
        if self.budget_usd is not None and spent >= self.budget_usd:
            raise BudgetExhausted(spent, self.budget_usd)

    @property
    def remaining_usd(self) -> float | None:
        if self.budget_usd is None:
            return None
        return max(0.0, self.budget_usd - self.spent_usd)

    # -- recording -------------------------------------------------------------------------------------
    def record(self, call: CallRecord) -> None:
        with self._lock:
            self._calls.append(call)

    def rekey(self, old: str, new: str) -> None:
        """Move a proposal's calls onto the candidate it produced, once its source hash is known."""
        with self._lock:
            self._calls = [CallRecord(c.model, c.usage, c.cost_usd, new, c.purpose, c.attempts, c.at)
                           if c.key == old else c for c in self._calls]

    # -- totals ----------------------------------------------------------------------------------------
    @property
    def calls(self) -> list[CallRecord]:
        with self._lock:
            return list(self._calls)

    @property
    def spent_usd(self) -> float:
        with self._lock:
            return self._spent_locked()

    def _spent_locked(self) -> float:
        return self._spent_before + sum(c.cost_usd for c in self._calls)

    def session(self) -> Totals:
        return self._totals(self.calls)

    def for_key(self, key: str) -> Totals:
        return self._totals([c for c in self.calls if c.key == key])

    def by_key(self) -> dict[str, Totals]:
        keys = dict.fromkeys(c.key for c in self.calls if c.key is not None)
        return {k: self.for_key(k) for k in keys}

    @staticmethod
    def _totals(calls: list[CallRecord]) -> Totals:
        usage = Usage()
        for c in calls:
            usage = usage + c.usage
        return Totals(usage, sum(c.cost_usd for c in calls), len(calls))

    def to_json(self) -> dict[str, Any]:
        return {"budget_usd": self.budget_usd, "spent_before": self._spent_before, "spent_usd": self.spent_usd,
                "calls": [c.to_json() for c in self.calls]}
