"""One retry policy for every provider: transient failures (429, 529, 5xx, timeouts, dropped connections) are
tried again, honouring `retry-after`, for up to `[llm] outage_minutes`; then the call ends as APIUnavailable,
which pauses the session instead of failing a proposal. Anything else ends the call at once.

The SDKs' own retries are off (max_retries=0) so that every attempt passes the budget guard and the waits
are ours: testable with an injected sleep and clock. Each attempt holds its worst case in the ledger while it
runs (`Retrier.hold`, engine.llm.accounting): an attempt the budget cannot cover is never sent.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from engine.config.sections import LLMConfig
from engine.llm.accounting import input_bound
from engine.llm.errors import APIUnavailable, InvalidRequest, LLMError

if TYPE_CHECKING:
    from engine.llm.accounting import CostLedger, Hold

log = logging.getLogger("kbench.llm")
T = TypeVar("T")


@dataclass
class Failure:
    """How one failed attempt is to be treated. `error` is what the caller sees if no attempt succeeds."""

    error: LLMError
    transient: bool
    retry_after: float | None = None


class Retrier:
    def __init__(self, config: LLMConfig, ledger: CostLedger, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None):
        self.config = config
        self.ledger = ledger
        self.sleep = sleep
        self.clock = clock
        self.rng = rng or random.Random()

    def run(self, attempt: Callable[[int], T], classify: Callable[[BaseException], Failure]) -> T:
        """attempt(n) until it returns. LLMError from `attempt` passes through; any other exception goes
        through `classify`."""
        window = self.config.outage_minutes * 60.0
        first_failure: float | None = None
        n = 0
        while True:
            self.ledger.check()            # every attempt: a resumed budget may be spent by now
            try:
                return attempt(n)
            except LLMError:
                raise
            except Exception as exc:  # noqa: BLE001 - classify() decides; unknown kinds re-raise there
                failure = classify(exc)
            n += 1
            failure.error.attempts = n
            if not failure.transient:
                raise failure.error
            now = self.clock()
            first_failure = now if first_failure is None else first_failure
            elapsed = now - first_failure
            capped = self.config.max_retries is not None and n > self.config.max_retries
            # retry-after is honoured; "0" (or none) gets our backoff, so a busy server is not hammered
            delay = failure.retry_after if failure.retry_after else self._backoff(n - 1)
            if capped or elapsed + delay > window:
                raise self._unavailable(failure.error, n, elapsed, delay, capped)
            log.info("LLM call failed (%s); attempt %d in %.1f s", failure.error, n + 1, delay)
            self.sleep(delay)

    def hold(self, params: dict[str, Any], *, min_tokens: int | None = None, key: str | None = None,
             purpose: str = "") -> Hold:
        """The ledger's hold for one attempt of `params` (a Messages API or chat-completions request): its input
        bound and `max_tokens` at the model's price. A context manager; `Hold.max_tokens` is what to send."""
        bound = input_bound(*(params.get(k) for k in ("system", "messages", "tools")))
        model = str(params["model"])
        return self.ledger.reserve(self.config.price_for(model, bound), input_tokens=bound,
                                   max_tokens=int(params["max_tokens"]), min_tokens=min_tokens, model=model,
                                   key=key, purpose=purpose)

    def _backoff(self, k: int) -> float:
        base = self.config.backoff_base_s * (2 ** min(k, 30))
        return min(self.config.backoff_max_s, base * (0.75 + 0.25 * self.rng.random()))

    def _unavailable(self, last: LLMError, n: int, elapsed: float, delay: float, capped: bool) -> APIUnavailable:
        if capped:
            why = f"gave up after {n} attempt(s) ([llm] max_retries = {self.config.max_retries})"
        elif elapsed == 0 and n == 1 and delay > 0:
            why = (f"the API asked to wait {delay:g} s, longer than the outage window "
                   f"([llm] outage_minutes = {self.config.outage_minutes:g})")
        else:
            why = (f"still failing after {elapsed:.0f} s and {n} attempt(s) "
                   f"([llm] outage_minutes = {self.config.outage_minutes:g})")
        return APIUnavailable(f"API unavailable: {last} — {why}", status_code=last.status_code, attempts=n)


def answer_may_be_lost(exc: BaseException) -> bool:
    """After a timeout or a dropped connection the API may have produced, and billed, an answer that never
    arrived; a connection never made or a request never fully written bills nothing, nor does an HTTP error."""
    wrapped = type(exc).__name__ in ("APITimeoutError", "APIConnectionError")
    if not wrapped and type(exc).__module__.split(".")[0] not in ("httpx", "httpx2"):
        return False
    transport = exc.__cause__ if wrapped else exc
    return not type(transport).__name__.startswith(("Connect", "Write", "Pool"))


def retry_after(headers: Any) -> float | None:
    """`retry-after-ms`, else `retry-after` as seconds or an HTTP date; None when absent or unreadable."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


_TOO_LONG = ("prompt is too long", "maximum context length", "context_length_exceeded", "too many tokens",
             "input is too long", "context window")


def status_failure(code: int, err_type: str, detail: str, rid: str, headers: Any, *, key_env: str,
                   error_code: str = "", should_retry: str | None = None) -> Failure:
    """The treatment of an HTTP error status (the same for the Messages API and OpenAI-style endpoints).
    `err_type` is the error body's type (an SSE error after a 200 has only that); `should_retry` the
    x-should-retry header when present."""
    after = retry_after(headers)
    low = detail.lower()
    if code == 401 or err_type == "authentication_error":
        return Failure(LLMError(f"the API rejected the key (401 {detail}); check {key_env}{rid}", kind="auth",
                                stop=True, status_code=code), False)
    if code == 403 or err_type == "permission_error":
        return Failure(LLMError(f"the key may not use this API or model (403 {detail}){rid}", kind="auth",
                                stop=True, status_code=code), False)
    if code == 402 or err_type == "billing_error":
        return Failure(LLMError(f"billing problem on the account (402 {detail}){rid}", kind="billing", stop=True,
                                status_code=code), False)
    if code == 404 or err_type == "not_found_error":
        return Failure(LLMError(f"not found (404 {detail}); check [llm] model and base_url{rid}", kind="not_found",
                                stop=True, status_code=code), False)
    if code == 413 or err_type == "request_too_large":
        return Failure(LLMError(f"the request is too large (413 {detail}){rid}", kind="too_long",
                                status_code=code), False)
    if error_code == "enforced_spend_limit_reached" or "spend limit" in low:
        return Failure(LLMError(f"the organisation's spend limit is reached ({code} {detail}); no retry helps "
                                f"until it is raised{rid}", kind="spend_limit", stop=True, status_code=code), False)
    transient_type = err_type in ("rate_limit_error", "overloaded_error", "api_error", "timeout_error")
    if should_retry == "false":      # the server says another attempt will not help: this call fails
        transient = False
        if code >= 500 or transient_type:
            return Failure(LLMError(f"server error {code} {err_type or 'error'}: {detail} (the API asked not to "
                                    f"retry){rid}", kind="server", status_code=code), False)
    else:
        transient = code in (408, 409, 429) or code >= 500 or transient_type or should_retry == "true"
    if transient:
        kind = {429: "rate_limit", 529: "overloaded", 408: "timeout", 504: "timeout"}.get(code) or {
            "rate_limit_error": "rate_limit", "overloaded_error": "overloaded", "timeout_error": "timeout"}.get(
            err_type, "server")
        return Failure(LLMError(f"{code} {err_type or 'error'}: {detail}{rid}", kind=kind, status_code=code),
                       True, after)
    if any(t in low for t in _TOO_LONG):
        # one over-long prompt (a huge parent) is this proposal's problem, not the session's
        return Failure(LLMError(f"the prompt is too long for the model ({code} {detail}){rid}", kind="too_long",
                                status_code=code), False)
    return Failure(InvalidRequest(f"the API refused the request ({code} {err_type or 'invalid_request_error'}): "
                                  f"{detail}{rid}", status_code=code), False)
