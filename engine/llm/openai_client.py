"""The OpenAI-compatible provider: vLLM, SGLang, Ollama, LiteLLM or any `/v1/chat/completions` endpoint,
through the official `openai` SDK pointed at `[llm] base_url`.

The same LLMRequest becomes one chat completion: a system message (the role text), one user message (task
context, then the operator's prompt), the operator's tool as a `function` tool, and `tool_choice` naming it
(`[llm] force_tool = false` sends "auto" for servers that cannot constrain a named call). The function call's
`arguments` (a JSON string) become the LLMReply's tool input, so proposers and verifiers read answers exactly
as they do from Claude. Prices: `[llm.prices."<model>"]`, else 0 (a local model costs nothing).
Retries, outages and the budget guard are engine.llm.retry's, as for Claude.

Lazy imports: openai (about 0.6 s to import), only where this provider is used: engine.llm.factory imports this
module for every session, and most talk to Claude.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from typing import Any, Callable, Mapping

from engine.config import LLMConfig
from engine.llm.accounting import CallRecord, CostLedger, Hold, Usage
from engine.llm.availability import api_key_from_env, no_key_message
from engine.llm.client import LLMReply, LLMRequest
from engine.llm.errors import LLMError, NoAPIKey
from engine.llm.retry import Failure, Retrier, answer_may_be_lost, status_failure

_STOP = {"tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens", "stop": "end_turn",
         "content_filter": "refusal"}


class OpenAICompatClient:
    provider = "openai-compatible"

    def __init__(self, config: LLMConfig, ledger: CostLedger | None = None, *, api_key: str | None = None,
                 env: Mapping[str, str] | None = None, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None, http_client: Any = None,   # the SDK's httpx or httpx2 Client
                 clock: Callable[[], float] = time.monotonic, **_: Any):
        self.config = config
        self.ledger = ledger if ledger is not None else CostLedger(None)
        self._env = os.environ if env is None else env
        # No env given: the key comes from where engine.secrets.protect() moved it at start, not os.environ
        self._api_key = api_key or api_key_from_env(env, config)
        self._http_client = http_client
        self._sdk: Any = None
        self._lock = threading.Lock()
        self.retrier = Retrier(config, self.ledger, sleep=sleep, clock=clock, rng=rng)

    @property
    def available(self) -> bool:
        return self._api_key is not None

    @property
    def base_url(self) -> str:
        return self.config.base_url or ""

    def _client(self) -> Any:
        if self._api_key is None:
            raise NoAPIKey(no_key_message(self.config))
        import openai

        with self._lock:
            if self._sdk is None:
                self._sdk = openai.OpenAI(api_key=self._api_key, base_url=self.base_url, max_retries=0,
                                          timeout=openai.Timeout(self.config.timeout_s,
                                                                 connect=min(10.0, self.config.timeout_s)),
                                          http_client=self._http_client)
            return self._sdk

    def build_params(self, req: LLMRequest) -> dict[str, Any]:
        cfg = self.config
        tool = req.tool
        user = f"{req.context.strip()}\n\n{req.prompt.strip()}" if req.context else req.prompt
        params: dict[str, Any] = {
            "model": req.model or cfg.model,
            "max_tokens": req.max_tokens or max(cfg.max_tokens, req.min_output_tokens),
            "messages": [{"role": "system", "content": req.system}, {"role": "user", "content": user}],
            "tools": [{"type": "function", "function": {"name": tool["name"],
                                                        "description": tool.get("description", ""),
                                                        "parameters": tool["input_schema"]}}],
            "tool_choice": ({"type": "function", "function": {"name": tool["name"]}} if cfg.force_tool else "auto"),
        }
        if cfg.temperature is not None:
            params["temperature"] = cfg.temperature
        return params

    def call(self, req: LLMRequest) -> LLMReply:
        sdk = self._client()
        params = self.build_params(req)

        def attempt(n: int) -> LLMReply:
            with self.retrier.hold(params, min_tokens=req.min_output_tokens or None, key=req.key,
                                   purpose=req.purpose) as hold:     # the budget's worst case, before sending
                try:
                    completion = sdk.chat.completions.create(**{**params, "max_tokens": hold.max_tokens})
                except Exception as exc:
                    if answer_may_be_lost(exc):
                        hold.keep()
                    raise
                if not getattr(completion, "choices", None):
                    raise LLMError(f"the endpoint answered without choices: {str(completion)[:200]!r}",
                                   kind="bad_response")
                return self._reply(completion, req, params["model"], n + 1, hold)

        return self.retrier.run(attempt, self._classify)

    def _classify(self, exc: BaseException) -> Failure:
        import openai

        if isinstance(exc, openai.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            detail = str(body.get("message") or exc.message)
            code = str(body.get("code") or "")
            headers = exc.response.headers if exc.response is not None else None
            rid = f" [request-id {exc.request_id}]" if getattr(exc, "request_id", None) else ""
            return status_failure(exc.status_code, str(body.get("type") or ""), detail, rid, headers,
                                  key_env=self.config.key_env() or "the endpoint's key",
                                  error_code="enforced_spend_limit_reached" if code == "insufficient_quota" else code,
                                  should_retry=headers.get("x-should-retry") if headers is not None else None)
        if isinstance(exc, openai.APITimeoutError):
            return Failure(LLMError(f"no answer within {self.config.timeout_s:g} s (request timeout)",
                                    kind="timeout"), True)
        if isinstance(exc, openai.APIConnectionError) or type(exc).__module__.split(".")[0] in ("httpx", "httpx2"):
            return Failure(LLMError(f"cannot reach the endpoint at {self.base_url} ({exc.__cause__ or exc})",
                                    kind="connection"), True)
        if isinstance(exc, openai.OpenAIError):
            return Failure(LLMError(f"the openai SDK failed: {exc}", kind="client"), False)
        if isinstance(exc, (TypeError, ValueError)):
            return Failure(LLMError(f"the openai SDK refused the request: {exc}", kind="client", stop=True), False)
        raise exc

    def _reply(self, completion: Any, req: LLMRequest, model: str, attempts: int, hold: Hold) -> LLMReply:
        u = getattr(completion, "usage", None)
        cached = int(getattr(getattr(u, "prompt_tokens_details", None), "cached_tokens", 0) or 0) if u else 0
        usage = Usage(input_tokens=max(0, int(getattr(u, "prompt_tokens", 0) or 0) - cached),
                      output_tokens=int(getattr(u, "completion_tokens", 0) or 0), cache_read_tokens=cached)
        billed_model = getattr(completion, "model", None) or model
        cost = usage.cost(self.config.price_for(billed_model, usage.prompt_tokens))
        hold.settle(CallRecord(billed_model, usage, cost, req.key, req.purpose, attempts))
        choice = completion.choices[0]
        msg = choice.message
        tool_name, tool_input = None, None
        for call in getattr(msg, "tool_calls", None) or []:
            fn = getattr(call, "function", None)
            if fn is None:
                continue
            tool_name = fn.name
            try:
                parsed = json.loads(fn.arguments or "{}")
                tool_input = parsed if isinstance(parsed, dict) else None
            except ValueError:
                tool_input = None            # tools.tool_input() reports it as "no readable input"
            break
        extra = getattr(msg, "model_extra", None) or {}
        thinking = extra.get("reasoning_content") or extra.get("reasoning") or ""
        return LLMReply(model=billed_model, stop_reason=_STOP.get(choice.finish_reason or "", choice.finish_reason),
                        tool_name=tool_name, tool_input=tool_input, text=msg.content or "",
                        thinking=thinking if isinstance(thinking, str) else "", usage=usage, cost_usd=cost,
                        attempts=attempts, request_id=getattr(completion, "id", None),
                        content=[msg.model_dump(mode="json")] if hasattr(msg, "model_dump") else [])
