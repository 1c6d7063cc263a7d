"""Token and dollar accounting: per call, per key (a proposal or candidate), per session; a budget guard.

The ledger is shared by every LLM call of a session (proposers and verifiers, possibly from several
threads), so it is the one place that can refuse to spend. The budget is a hard limit: before a call is sent
its worst case is held (`reserve`: every output token it may generate, `max_tokens`, at the output price, and
an upper bound of its input at the dearest input price, a cache write), and a call whose worst case does not
fit beside what is spent and held is not sent. The hold becomes the bill when the answer comes (`settle`),
is dropped when the call failed without an answer (nothing billed), and is kept whole when the answer may
have been produced and lost (a timeout, a dropped stream): its bill is unknown, so the worst case counts.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from engine import jsonable
from engine.config.prices import Price
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

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt, cached or not (what a long-prompt price tier is decided on)."""
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

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
    worst_case: bool = False  # the bill is unknown (the answer was lost): cost_usd is the call's worst case

    def to_json(self) -> dict[str, Any]:
        out = jsonable.dump(self)
        if not self.worst_case:
            del out["worst_case"]       # an ordinary bill reads as it always did
        return out


@dataclass(frozen=True)
class Totals:
    usage: Usage
    cost_usd: float
    calls: int


# What the API adds to a request's own bytes, in tokens: the tool-use system prompt (a few hundred tokens)
# and the messages' framing.
API_OVERHEAD_TOKENS = 1024


def input_bound(*parts: Any) -> int:
    """An upper bound on the input tokens of a request made of `parts` (system, messages, tools as sent): a
    byte-level tokenizer's every token covers at least one byte, so a prompt has at most as many tokens as its
    UTF-8 bytes (JSON escaping only adds bytes), plus what the API adds."""
    return sum(len(json.dumps(p, ensure_ascii=False).encode()) for p in parts) + API_OVERHEAD_TOKENS


def worst_case_usd(price: Price, input_tokens: int, max_tokens: int) -> float:
    """The most a call can be billed: all of its input at the dearest input rate, every output token."""
    return (input_tokens * max(price.input, price.cache_write, price.cache_read) + max_tokens * price.output) / 1e6


class CostLedger:
    """Thread-safe record of calls with a session budget in US dollars (None: no limit).

    `spent_before` seeds the ledger with what a resumed session had already spent.
    """

    def __init__(self, budget_usd: float | None = None, spent_before: float = 0.0):
        # `usd = inf` in TOML means no limit; keep None so the ledger stays valid JSON.
        self.budget_usd = None if budget_usd is not None and math.isinf(budget_usd) else budget_usd
        self._spent_before = spent_before
        self._earlier = 0.0                 # spent by earlier runs of the session: in the guard, not in spent_usd
        self._calls: list[CallRecord] = []
        self._held: dict[int, float] = {}   # open holds: id -> dollars
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)

    def limit(self, budget_usd: float | None, earlier_usd: float = 0.0) -> None:
        """The session's budget, of which earlier runs of the session spent `earlier_usd` (the evolution loop
        sets it when it opens the session; the ledger's own totals stay this run's)."""
        with self._lock:
            self.budget_usd = None if budget_usd is None or math.isinf(budget_usd) else budget_usd
            self._earlier = earlier_usd

    # -- the guard -------------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise BudgetExhausted if the budget is reached; called before every attempt."""
        with self._lock:
            spent = self._earlier + self._spent_locked()
        if self.budget_usd is not None and spent >= self.budget_usd:
            raise BudgetExhausted(spent, self.budget_usd)

    def reserve(self, price: Price, *, input_tokens: int, max_tokens: int, min_tokens: int | None = None,
                model: str = "", key: str | None = None, purpose: str = "") -> "Hold":
        """Hold a call's worst case against the budget before it is sent; use the Hold as a context manager.

        While other calls hold enough that this one does not fit, wait for them to settle. With none in flight,
        a call that does not fit is given fewer output tokens (`Hold.max_tokens`), never fewer than `min_tokens`
        (default: all of them): then BudgetExhausted, and nothing is sent."""
        floor = max_tokens if min_tokens is None else max(1, min(min_tokens, max_tokens))
        with self._settled:
            while True:
                n, usd = max_tokens, worst_case_usd(price, input_tokens, max_tokens)
                if self.budget_usd is None:
                    break
                spent = self._earlier + self._spent_locked()
                left = self.budget_usd - spent - sum(self._held.values())
                if usd <= left:
                    break
                if self._held:              # what others hold comes back once their bills are known
                    self._settled.wait(timeout=1.0)
                    continue
                affordable = (int((left - worst_case_usd(price, input_tokens, 0)) * 1e6 / price.output)
                              if price.output > 0 else 0)
                if affordable >= floor:
                    n, usd = affordable, worst_case_usd(price, input_tokens, affordable)
                    break
                raise BudgetExhausted(spent, self.budget_usd, worst_case_usd(price, input_tokens, floor))
            hold = Hold(self, next(self._ids), usd, n, model, key, purpose)
            self._held[hold.id] = usd
            return hold

    def _close(self, hold: "Hold", call: CallRecord | None) -> None:
        with self._settled:
            if self._held.pop(hold.id, None) is None:
                return          # settled already
            if call is not None:
                self._calls.append(call)
            self._settled.notify_all()

    @property
    def held_usd(self) -> float:
        """Dollars held by calls in flight."""
        with self._lock:
            return sum(self._held.values())

    @property
    def remaining_usd(self) -> float | None:
        if self.budget_usd is None:
            return None
        return max(0.0, self.budget_usd - self._earlier - self.spent_usd)

    # -- recording -------------------------------------------------------------------------------------
    def record(self, call: CallRecord) -> None:
        with self._lock:
            self._calls.append(call)

    def rekey(self, old: str, new: str) -> None:
        """Move a proposal's calls onto the candidate it produced, once its source hash is known."""
        with self._lock:
            self._calls = [replace(c, key=new) if c.key == old else c for c in self._calls]

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


@dataclass(eq=False)
class Hold:
    """A call's worst case, held in the ledger from before it is sent until its bill is known.

        with ledger.reserve(price, input_tokens=..., max_tokens=...) as hold:
            answer = send(max_tokens=hold.max_tokens)
            hold.settle(CallRecord(...))          # the bill; leaving the block without one: nothing billed
    """

    ledger: CostLedger
    id: int
    usd: float                 # the worst case held
    max_tokens: int            # what the call may ask for (fewer than asked where the budget is short)
    model: str = ""
    key: str | None = None
    purpose: str = ""

    def settle(self, call: CallRecord) -> None:
        """The answer's bill replaces the hold."""
        self.ledger._close(self, call)  # noqa: SLF001 - the hold is the ledger's own handle

    def keep(self) -> None:
        """The answer may have been produced and lost: its bill is unknown, so the worst case is spent."""
        self.ledger._close(self, CallRecord(self.model, Usage(), self.usd, self.key, self.purpose,  # noqa: SLF001
                                            worst_case=True))

    def release(self) -> None:
        """The call failed without an answer: nothing was billed."""
        self.ledger._close(self, None)  # noqa: SLF001

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()      # a no-op after settle() or keep()
