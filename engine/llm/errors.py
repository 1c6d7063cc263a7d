"""Why an LLM call produced nothing. Each error says whether the session should stop or just record a
failed proposal and carry on."""

from __future__ import annotations

from engine.errors import KbenchError


class LLMError(KbenchError):
    """`kind` is a short machine tag (auth, budget, invalid_request, too_long, spend_limit, rate_limit,
    overloaded, server, timeout, connection, unavailable, no_key, answer); `stop` is True when carrying on
    would only fail again or spend money the user did not allow; `unavailable` is True when the API could
    not be reached for the whole outage window: the session pauses, nothing is counted as tried."""

    kind: str = "llm"
    stop: bool = False
    unavailable: bool = False

    def __init__(self, message: str, *, kind: str | None = None, stop: bool | None = None,
                 status_code: int | None = None, attempts: int = 1):
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        if stop is not None:
            self.stop = stop
        self.status_code = status_code
        self.attempts = attempts


class BudgetExhausted(LLMError):
    kind = "budget"
    stop = True

    def __init__(self, spent_usd: float, budget_usd: float, next_call_usd: float | None = None):
        nxt = (f"; the next call could cost up to ${next_call_usd:.4f}, more than is left"
               if next_call_usd is not None else "")
        super().__init__(f"session budget reached: ${spent_usd:.4f} spent of ${budget_usd:.2f}{nxt}; "
                         "no further LLM calls in this session (raise --budget-usd or [budget] usd to continue).")
        self.spent_usd = spent_usd
        self.budget_usd = budget_usd
        self.next_call_usd = next_call_usd


class NoAPIKey(LLMError):
    kind = "no_key"
    stop = True


class AnswerError(LLMError):
    """The model answered, but not with something usable (no tool call, prose, truncated, wrong files)."""

    kind = "answer"
    stop = False


class InvalidRequest(LLMError):
    """The API refused the request itself (400 invalid_request_error): every later call would be refused the
    same way, so the session stops with the API's own message."""

    kind = "invalid_request"
    stop = True


class APIUnavailable(LLMError):
    """429 / 529 / 5xx / timeouts went on for longer than [llm] outage_minutes: the session pauses as
    "API unavailable"; it is resumable and the attempt does not count against the search."""

    kind = "unavailable"
    unavailable = True
