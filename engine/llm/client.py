"""The LLM clients: one request shape (LLMRequest), one answer shape (LLMReply), two providers.

`LLMClient` speaks the Anthropic Messages API through the `anthropic` SDK; `engine.llm.openai_client` speaks
any OpenAI-compatible endpoint through the `openai` SDK. `engine.llm.factory.make_client` picks one from
`[llm] provider`.

One Messages API call sends:

    tools    [the operator's tool, `strict` where the model has structured outputs]   (stable)
    system   the role text                                                            (stable)
    user     [task context  <- cache_control breakpoint]                              (stable per task: cached)
             [the operator's prompt]                                                  (varies)

Thinking and tool choice follow the model's capabilities (engine.llm.models): adaptive thinking with
`output_config.effort` where the model has it, a manual `budget_tokens` only for models without it,
`{"type": "disabled"}` only where the model accepts it, and the tool is forced only when thinking is off
(the API refuses a forced tool_choice with thinking on); otherwise `tool_choice: auto` and the answer is
checked (engine.llm.tools). A call whose max_tokens could run past the SDK's non-streaming limit is
streamed. Retries, outages and the budget guard: engine.llm.retry.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import anthropic

try:
    from anthropic._constants import MODEL_NONSTREAMING_TOKENS
except ImportError:  # pragma: no cover - a future SDK without the table
    MODEL_NONSTREAMING_TOKENS = {}

from engine.config.sections import LLMConfig
from engine.llm.accounting import CallRecord, CostLedger, Hold, Usage
from engine.llm.availability import NO_KEY_MESSAGE, api_key_from_env, llm_available, no_key_notice
from engine.llm.errors import InvalidRequest, LLMError, NoAPIKey
from engine.llm.models import ModelCaps, ModelCatalog, cache_file
from engine.llm.render import estimate_tokens
from engine.llm.retry import Failure, Retrier, answer_may_be_lost, retry_after, status_failure

log = logging.getLogger("kbench.llm")

__all__ = ["LLMClient", "LLMRequest", "LLMReply", "NO_KEY_MESSAGE", "api_key_from_env", "llm_available",
           "needs_streaming", "no_key_notice", "resolve_thinking"]

DEFAULT_ENDPOINT = "https://api.anthropic.com"


@dataclass(frozen=True)
class LLMRequest:
    system: str
    context: str  # the stable task context; marked for prompt caching
    prompt: str  # the operator-specific part
    tool: dict[str, Any]  # the one tool the answer must call
    key: str | None = None  # ledger key: a proposal id or a candidate's source hash
    purpose: str = ""  # operator or verifier name, for the ledger
    model: str | None = None  # overrides LLMConfig.model (verifiers may use a cheaper one)
    thinking: str | None = None  # overrides LLMConfig.thinking
    max_tokens: int | None = None  # a fixed max_tokens (verifiers); else sized from min_output_tokens
    effort: str | None = None  # overrides LLMConfig.effort
    min_output_tokens: int = 0  # what the answer needs at least (a mutation resends the whole parent)


@dataclass(frozen=True)
class LLMReply:
    model: str
    stop_reason: str | None
    tool_name: str | None  # the first tool_use block, if any
    tool_input: dict[str, Any] | None
    text: str  # all text blocks, joined
    thinking: str  # all (summarised) thinking blocks, joined
    usage: Usage
    cost_usd: float
    attempts: int
    request_id: str | None = None
    content: list[dict[str, Any]] = field(default_factory=list)  # the raw blocks, as JSON
    # where the tool input came from: "tool_call", or the text ("json", "fenced": engine.llm.fenced)
    answer_form: str = "tool_call"


def resolve_thinking(caps: ModelCaps, wanted: str, effort: str | None) -> str:
    """The thinking type to send: "adaptive", "enabled" (a manual budget), "disabled", or "between_tools" (the
    way to turn thinking off on models that refuse "disabled", at effort high or below)."""
    if wanted == "disabled":
        if caps.can_disable(effort):
            return "disabled"
        if caps.between_tools and effort not in ("xhigh", "max"):
            return "between_tools"
        wanted = "auto"
    if wanted == "enabled" and caps.enabled:
        return "enabled"
    if caps.adaptive:
        return "adaptive"
    if caps.enabled:
        return "enabled"
    return "disabled"


def with_max_tokens(params: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """`params` asking for `max_tokens` (fewer where the budget is short); a manual thinking budget stays below
    it, as the API requires."""
    if max_tokens == params["max_tokens"]:
        return params
    out = {**params, "max_tokens": max_tokens}
    thinking = params.get("thinking") or {}
    if thinking.get("type") == "enabled" and thinking.get("budget_tokens", 0) >= max_tokens:
        out["thinking"] = {**thinking, "budget_tokens": max(1024, max_tokens - 1024)}
    return out


def needs_streaming(model: str, max_tokens: int) -> bool:
    """The anthropic SDK's own rule for when a non-streamed call may take longer than 10 minutes (it refuses
    those when it sets the timeout itself; we set ours, so we apply its rule here): an hour per 128k output
    tokens, or a per-model limit from the SDK's table."""
    limit = MODEL_NONSTREAMING_TOKENS.get(model)
    return 3600 * max_tokens / 128_000 > 600 or bool(limit and max_tokens > limit)


class LLMClient:
    provider = "anthropic"

    def __init__(self, config: LLMConfig, ledger: CostLedger | None = None, *, api_key: str | None = None,
                 env: Mapping[str, str] | None = None, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None, http_client: Any = None,
                 clock: Callable[[], float] = time.monotonic, catalog: ModelCatalog | None = None):
        self.config = config
        self.ledger = ledger if ledger is not None else CostLedger(None)
        self._env = os.environ if env is None else env
        # No env given: the key comes from where engine.secrets.protect() moved it at start, not os.environ
        self._api_key = api_key or api_key_from_env(env, config)
        self._http_client = http_client
        self._sdk: anthropic.Anthropic | None = None
        self._sdk_lock = threading.Lock()
        self.retrier = Retrier(config, self.ledger, sleep=sleep, clock=clock, rng=rng)
        self._catalog = catalog

    @property
    def available(self) -> bool:
        return self._api_key is not None

    @property
    def base_url(self) -> str:
        return self.config.base_url or self._env.get("ANTHROPIC_BASE_URL") or DEFAULT_ENDPOINT

    def _client(self) -> anthropic.Anthropic:
        if self._api_key is None:
            raise NoAPIKey(NO_KEY_MESSAGE)
        with self._sdk_lock:
            if self._sdk is None:
                # An explicit api_key keeps the SDK from looking for profiles or tokens on disk.
                self._sdk = anthropic.Anthropic(api_key=self._api_key, base_url=self.base_url, max_retries=0,
                                                timeout=self._timeout(), http_client=self._http_client)
            return self._sdk

    def _timeout(self) -> anthropic.Timeout:
        # anthropic.Timeout is the SDK's own transport Timeout (httpx or httpx2, whichever it ships with).
        t = self.config.timeout_s
        return anthropic.Timeout(t, connect=min(10.0, t))

    # -- capabilities ----------------------------------------------------------------------------------
    @property
    def catalog(self) -> ModelCatalog:
        if self._catalog is None:
            fetch = None
            if self.config.models_api and self._api_key is not None:
                def fetch(model: str) -> Any:
                    return self._client().models.retrieve(model, timeout=anthropic.Timeout(15.0, connect=5.0))
            self._catalog = ModelCatalog(fetch, endpoint=self.base_url, path=cache_file(self._env))
        return self._catalog

    def caps(self, model: str) -> ModelCaps:
        return self.catalog.caps(model)

    # -- request ---------------------------------------------------------------------------------------
    def build_params(self, req: LLMRequest) -> dict[str, Any]:
        """The keyword arguments for `messages.create` / `messages.stream` (also what .kbench/prompt.md shows)."""
        cfg = self.config
        model = req.model or cfg.model
        caps = self.caps(model)
        max_tokens = req.max_tokens or max(cfg.max_tokens, req.min_output_tokens)
        max_tokens = max(1, min(max_tokens, caps.max_output))
        effort = caps.effort_for(req.effort if req.effort is not None else cfg.effort)
        mode = resolve_thinking(caps, req.thinking or cfg.thinking, effort)
        if mode == "enabled" and max_tokens <= 2048:
            mode = "adaptive" if caps.adaptive else ("disabled" if caps.can_disable(effort) else mode)
        tool = dict(req.tool)
        if caps.strict_tools:
            tool["strict"] = True   # the tool's input is then held to its schema by the API
        content: list[dict[str, Any]] = []
        if req.context:
            block: dict[str, Any] = {"type": "text", "text": req.context}
            # The prefix (tools, system, task context) is cached where it reaches the model's minimum; below it
            # the API would not cache it anyway.
            if estimate_tokens(json.dumps(tool) + req.system + req.context) >= caps.cache_min:
                block["cache_control"] = {"type": "ephemeral"}
            content.append(block)
        content.append({"type": "text", "text": req.prompt})
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "system": [{"type": "text", "text": req.system}],
            "messages": [{"role": "user", "content": content}],
            "tools": [tool],
        }
        # The tool is forced only with thinking off, on a model that takes a forced tool_choice at all; else
        # the prompt asks for the call and engine.llm.tools checks the answer.
        forced = mode in ("disabled", "between_tools") and caps.forced_tool
        params["tool_choice"] = {"type": "tool", "name": req.tool["name"]} if forced else {"type": "auto"}
        if mode == "enabled":
            budget = max(1024, min(cfg.thinking_budget, max_tokens - 1024))
            # summarized: newer models omit the thinking text unless asked, and prompt.md keeps the reasoning
            params["thinking"] = {"type": "enabled", "budget_tokens": budget, "display": "summarized"}
        elif mode == "adaptive":
            params["thinking"] = {"type": "adaptive", "display": "summarized"}
        else:
            params["thinking"] = {"type": mode}     # disabled / between_tools take no other field
        if effort:
            params["output_config"] = {"effort": effort}
        return params

    # -- the call --------------------------------------------------------------------------------------
    def call(self, req: LLMRequest) -> LLMReply:
        """One logical call: attempts until an answer, a non-retryable error or the outage window. A refusal
        that names a capability kbench's table got wrong (a thinking type, a forced tool, an effort level)
        corrects the table and is sent once more in the corrected shape.

        Raises LLMError (InvalidRequest, APIUnavailable, BudgetExhausted, NoAPIKey, ...); never an SDK exception."""
        model = req.model or self.config.model
        used = self.caps(model)
        try:
            return self._call(req)
        except InvalidRequest as exc:
            # corrected now, or by a call refused alongside this one (proposals and reviews run in parallel)
            if self.catalog.refused(model, str(exc)) is None and self.caps(model) == used:
                raise
            return self._call(req)

    def _call(self, req: LLMRequest) -> LLMReply:
        sdk = self._client()
        params = self.build_params(req)
        stream = needs_streaming(params["model"], params["max_tokens"])

        def attempt(n: int) -> LLMReply:
            # the worst case is held before sending; a call that could cross the budget is not sent
            with self.retrier.hold(params, min_tokens=req.min_output_tokens or None, key=req.key,
                                   purpose=req.purpose) as hold:
                sent = with_max_tokens(params, hold.max_tokens)
                began = False
                try:
                    if stream:
                        with sdk.messages.stream(**sent, timeout=self._timeout()) as s:
                            began = True
                            try:
                                message = s.get_final_message()
                            except AssertionError:   # the SDK's accumulator saw no message_start: not SSE
                                raise LLMError("the API's stream held no message (not server-sent events from the "
                                               f"Messages API at {self.base_url}?)", kind="bad_response") from None
                    else:
                        message = sdk.messages.create(**sent, timeout=self._timeout())
                except LLMError:
                    raise
                except Exception as exc:
                    if began or answer_may_be_lost(exc):
                        hold.keep()          # an answer may have been generated: its bill is unknown
                    raise
                if not hasattr(message, "content") or not hasattr(message, "usage"):
                    raise LLMError(f"the API answered with something that is not a message: "
                                   f"{str(message)[:200]!r}", kind="bad_response")
                return self._reply(message, req, sent["model"], n + 1, hold)

        return self.retrier.run(attempt, self._classify)

    def _classify(self, exc: BaseException) -> Failure:
        if isinstance(exc, anthropic.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            error = body.get("error") if isinstance(body.get("error"), dict) else {}
            details = error.get("details") if isinstance(error.get("details"), dict) else {}
            detail = error.get("message") or getattr(exc, "message", "") or str(exc)
            request_id = getattr(exc, "request_id", None) or body.get("request_id")
            rid = f" [request-id {request_id}]" if request_id else ""
            headers = exc.response.headers if exc.response is not None else None
            return status_failure(exc.status_code, str(error.get("type") or ""), str(detail), rid, headers,
                                  key_env=self.config.key_env(), error_code=str(details.get("error_code") or ""),
                                  should_retry=headers.get("x-should-retry") if headers is not None else None)
        if isinstance(exc, anthropic.APITimeoutError):
            return Failure(LLMError(f"no answer within {self.config.timeout_s:g} s (request timeout)",
                                    kind="timeout"), True)
        if isinstance(exc, anthropic.APIConnectionError) or type(exc).__module__.split(".")[0] in ("httpx", "httpx2"):
            return Failure(LLMError(f"cannot reach the API at {self.base_url} ({exc.__cause__ or exc})",
                                    kind="connection"), True)
        if isinstance(exc, anthropic.AnthropicError):  # response validation, credentials, ...
            return Failure(LLMError(f"the anthropic SDK failed: {exc}", kind="client"), False)
        if isinstance(exc, (TypeError, ValueError)):
            # The SDK refusing our arguments (a config value it does not know): every call would repeat it.
            return Failure(LLMError(f"the anthropic SDK refused the request: {exc}", kind="client", stop=True),
                           False)
        raise exc

    # -- the answer ------------------------------------------------------------------------------------
    def _reply(self, message: Any, req: LLMRequest, model: str, attempts: int, hold: Hold) -> LLMReply:
        usage = Usage.from_api(message.usage)
        billed_model = getattr(message, "model", None) or model
        cost = usage.cost(self.config.price_for(billed_model, usage.prompt_tokens))
        hold.settle(CallRecord(billed_model, usage, cost, req.key, req.purpose, attempts))
        tool_name, tool_input, texts, thoughts, blocks = None, None, [], [], []
        for block in message.content:
            kind = getattr(block, "type", "")
            blocks.append(block.model_dump(mode="json") if hasattr(block, "model_dump") else dict(block))
            if kind == "text":
                texts.append(block.text)
            elif kind == "thinking":
                thoughts.append(getattr(block, "thinking", "") or "")
            elif kind == "tool_use" and tool_name is None:
                tool_name = block.name
                tool_input = block.input if isinstance(block.input, dict) else None
        return LLMReply(model=billed_model, stop_reason=getattr(message, "stop_reason", None), tool_name=tool_name,
                        tool_input=tool_input, text="\n".join(texts), thinking="\n".join(t for t in thoughts if t),
                        usage=usage, cost_usd=cost, attempts=attempts,
                        request_id=getattr(message, "_request_id", None), content=blocks)


# kept for callers of the older name
_retry_after = retry_after
