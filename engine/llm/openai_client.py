"""The OpenAI-compatible provider: vLLM, SGLang, Ollama, llama.cpp, LiteLLM or any `/v1/chat/completions`
endpoint, through the official `openai` SDK pointed at `[llm] base_url`.

The same LLMRequest becomes one chat completion: a system message (the role text), one user message (task
context, then the operator's prompt), the operator's tool as a `function` tool, and `tool_choice` naming it.
The function call's `arguments` (a JSON string) become the LLMReply's tool input, so proposers and verifiers
read answers exactly as they do from Claude; an answer that writes the call as text instead (a server
without a tool parser, a model that answers in fenced code) is read back by engine.llm.fenced and marked so.

Servers as people run them (engine.llm.openai_server keeps what each one told kbench, for the process):
- max_tokens fits the server's context: its length comes from `[llm] context_tokens`, else the server's
  `/v1/models` (vLLM and SGLang `max_model_len`, llama.cpp `meta.n_ctx`), and the prompt is estimated from
  above. A refusal as too long for the context is sent once more with what the server's own numbers leave.
- A server that refuses a named tool_choice gets "auto", and one that refuses tools gets none (the answer
  is then asked for as text), each from the first refusal on (`[llm] force_tool = false` starts at "auto").
- A call that could outlast `timeout_s` at a slow local model's 20 tokens/s is streamed (`[llm] stream`
  decides instead where set), its tool-call deltas accumulated by the SDK's ChatCompletionStreamState, so
  `timeout_s` bounds the wait between chunks rather than the whole answer.
Prices: `[llm.prices."<model>"]`, else 0 (a local model costs nothing). Retries, outages and the budget
guard are engine.llm.retry's, as for Claude.

Lazy imports: openai (about 0.6 s to import), only where this provider is used: engine.llm.factory imports this
module for every session, and most talk to Claude.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from typing import Any, Callable, Mapping

from engine.config.sections import LLMConfig
from engine.llm.accounting import CallRecord, CostLedger, Hold, Usage
from engine.llm.availability import api_key_from_env, no_key_message
from engine.llm.client import LLMReply, LLMRequest
from engine.llm.errors import LLMError, NoAPIKey
from engine.llm.fenced import input_from_text, text_answer_instruction
from engine.llm.openai_server import (TOOL_MODES, ContextOverflow, ServerFacts, ToolsRefused, context_from_models,
                                      estimate_prompt_tokens, facts_for, fit_max_tokens, overflow, tool_refusal)
from engine.llm.retry import Failure, Retrier, answer_may_be_lost, status_failure

log = logging.getLogger("kbench.llm")

_STOP = {"tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens", "stop": "end_turn",
         "content_filter": "refusal"}
SLOW_TOKENS_PER_S = 20      # a local model on a small GPU: what decides whether a call may outlast timeout_s


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

    # -- what the server told us ------------------------------------------------------------------------
    def facts(self, model: str | None = None) -> ServerFacts:
        return facts_for(self.base_url, model or self.config.model, force_tool=self.config.force_tool)

    def context_tokens(self, model: str | None = None) -> int | None:
        """The model's context length: `[llm] context_tokens`, else what the server said (asked once)."""
        if self.config.context_tokens:
            return self.config.context_tokens
        facts = self.facts(model)
        with facts.lock:
            if not facts.looked:
                facts.context = facts.context or self._listed_context(model or self.config.model)
                facts.looked = True
        return facts.context

    def _listed_context(self, model: str) -> int | None:
        import openai

        try:
            page = self._client().models.list(timeout=openai.Timeout(15.0, connect=5.0))
            entries = [m.model_dump() if hasattr(m, "model_dump") else dict(m) for m in page.data]
        except Exception as exc:  # noqa: BLE001 - a server without /v1/models: refusals say the context instead
            log.info("GET %s/models gave no context length (%s)", self.base_url, exc)
            return None
        return context_from_models(entries, model)

    # -- the request -----------------------------------------------------------------------------------
    def build_params(self, req: LLMRequest) -> dict[str, Any]:
        cfg = self.config
        tool = req.tool
        model = req.model or cfg.model
        mode = self.facts(model).tool_mode
        user = f"{req.context.strip()}\n\n{req.prompt.strip()}" if req.context else req.prompt
        if mode == "text":
            user = f"{user.rstrip()}\n\n{text_answer_instruction(tool)}"
        params: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "system", "content": req.system}, {"role": "user", "content": user}],
        }
        if mode != "text":
            params["tools"] = [{"type": "function", "function": {"name": tool["name"],
                                                                 "description": tool.get("description", ""),
                                                                 "parameters": tool["input_schema"]}}]
            params["tool_choice"] = {"type": "function", "function": {"name": tool["name"]}} if mode == "named" \
                else "auto"
        wanted = req.max_tokens or max(cfg.max_tokens, req.min_output_tokens)
        params["max_tokens"] = fit_max_tokens(wanted, self.context_tokens(model), estimate_prompt_tokens(params))
        if cfg.temperature is not None:
            params["temperature"] = cfg.temperature
        return params

    def streams(self, params: dict[str, Any]) -> bool:
        if self.config.stream is not None:
            return self.config.stream
        return params["max_tokens"] / SLOW_TOKENS_PER_S > self.config.timeout_s

    def call(self, req: LLMRequest) -> LLMReply:
        """One logical call. A refusal of the tools steps down (named, auto, none) and sends again; a refusal as
        too long for the context is sent once more with what fits.

        Raises LLMError (InvalidRequest, APIUnavailable, BudgetExhausted, NoAPIKey, ...); never an SDK exception."""
        sdk = self._client()
        facts = self.facts(req.model)
        refit: int | None = None
        while True:
            params = self.build_params(req)
            if refit is not None:
                params["max_tokens"] = refit
            mode = facts.tool_mode
            try:
                return self._send(sdk, params, req, mode)
            except ToolsRefused as exc:
                if TOOL_MODES.index(facts.tool_mode) > TOOL_MODES.index(mode):
                    continue                 # a call beside this one stepped down already
                if not facts.step_down(exc.to):
                    raise
                log.warning(self._step_down_notice(exc, params["model"]))
            except ContextOverflow as exc:
                room = None if refit is not None else self._room(exc, params)
                if room is None:
                    raise self._too_long(exc, params) from None
                refit = room

    def _send(self, sdk: Any, params: dict[str, Any], req: LLMRequest, mode: str) -> LLMReply:
        stream = self.streams(params)

        def attempt(n: int) -> LLMReply:
            with self.retrier.hold(params, min_tokens=req.min_output_tokens or None, key=req.key,
                                   purpose=req.purpose) as hold:     # the budget's worst case, before sending
                sent = {**params, "max_tokens": hold.max_tokens}
                try:
                    completion = self._streamed(sdk, sent) if stream else sdk.chat.completions.create(**sent)
                except Exception as exc:
                    if answer_may_be_lost(exc):
                        hold.keep()
                    raise
                if not getattr(completion, "choices", None):
                    raise LLMError(f"the endpoint answered without choices: {str(completion)[:200]!r}",
                                   kind="bad_response")
                return self._reply(completion, req, params["model"], n + 1, hold)

        return self.retrier.run(attempt, lambda exc: self._classify(exc, mode))

    def _streamed(self, sdk: Any, params: dict[str, Any]) -> Any:
        """The completion, accumulated from a stream: the SDK merges tool-call deltas by index and
        concatenates their argument pieces; the last chunk carries the usage."""
        from openai.lib.streaming.chat import ChatCompletionStreamState

        state = ChatCompletionStreamState()
        chunks = 0
        with sdk.chat.completions.create(**params, stream=True, stream_options={"include_usage": True}) as events:
            for chunk in events:
                state.handle_chunk(chunk)
                chunks += 1
        if not chunks:
            raise LLMError(f"the stream from {self.base_url} held no chunk", kind="bad_response")
        return state.current_completion_snapshot

    # -- refusals --------------------------------------------------------------------------------------
    def _room(self, exc: ContextOverflow, params: dict[str, Any]) -> int | None:
        """max_tokens for the one retry: the context the server stated (remembered) less the prompt it counted
        (where it only says a lower bound or nothing, our estimate when larger); None when nothing fits."""
        facts = self.facts(params["model"])
        if exc.context and not self.config.context_tokens:
            facts.context = exc.context
        context = exc.context or self.context_tokens(params["model"])
        if context is None:
            return None
        prompt = exc.prompt_tokens
        if prompt is None or exc.at_least:
            prompt = max(prompt or 0, estimate_prompt_tokens(params))
        room = min(context - prompt, context - 1)
        return room if 0 < room < params["max_tokens"] else None

    def _too_long(self, exc: ContextOverflow, params: dict[str, Any]) -> ContextOverflow:
        context = exc.context or self.context_tokens(params["model"])
        counted = f"{exc.prompt_tokens} prompt tokens by the server's count" if exc.prompt_tokens else \
            f"about {estimate_prompt_tokens(params)} prompt tokens by kbench's estimate"
        where = f"{params['model']}'s context of {context} tokens" if context else f"{params['model']}'s context"
        return ContextOverflow(f"the prompt leaves no room for an answer in {where} at {self.base_url} ({counted}, "
                               f"max_tokens {params['max_tokens']}): {exc}; give the server a longer context "
                               "(vLLM --max-model-len, llama.cpp -c) or set [llm] context_tokens to it",
                               context=context, prompt_tokens=exc.prompt_tokens, status_code=exc.status_code)

    def _step_down_notice(self, exc: ToolsRefused, model: str) -> str:
        if exc.to == "auto":
            return (f"{self.base_url} refused a named tool_choice ({exc.detail}); kbench sends tool_choice \"auto\" "
                    "for the rest of this run. Set [llm] force_tool = false to start there.")
        return (f"{self.base_url} refused tool calling for {model} ({exc.detail}); kbench asks for each answer as "
                "text (JSON, or the files in fenced code blocks) for the rest of this run. Tool calls need the "
                "server's tool parser (vLLM: --enable-auto-tool-choice --tool-call-parser NAME).")

    def _classify(self, exc: BaseException, mode: str = "named") -> Failure:
        import openai

        if isinstance(exc, openai.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            detail = str(body.get("message") or exc.message)
            if exc.status_code == 400 and (too_long := overflow(detail, body)) is not None:
                return Failure(too_long, False)
            if exc.status_code == 400 and (to := tool_refusal(detail, mode)) is not None:
                return Failure(ToolsRefused(detail, to), False)
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
        if isinstance(exc, openai.APIError) and isinstance(exc.body, dict):
            # an error event in the middle of a stream (llama.cpp, vLLM): the status is in its body, if at all
            code = exc.body.get("code")
            status = int(code) if str(code).isdigit() else 500
            return status_failure(status, str(exc.body.get("type") or ""), str(exc.body.get("message") or exc),
                                  "", None, key_env=self.config.key_env() or "the endpoint's key")
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
        text = msg.content or ""
        form = "tool_call"
        if tool_name is None and (found := input_from_text(text, req.tool)) is not None:
            tool_name, tool_input, form = req.tool["name"], found.input, found.form
        extra = getattr(msg, "model_extra", None) or {}
        thinking = extra.get("reasoning_content") or extra.get("reasoning") or ""
        return LLMReply(model=billed_model, stop_reason=_STOP.get(choice.finish_reason or "", choice.finish_reason),
                        tool_name=tool_name, tool_input=tool_input, text=text,
                        thinking=thinking if isinstance(thinking, str) else "", usage=usage, cost_usd=cost,
                        attempts=attempts, request_id=getattr(completion, "id", None),
                        content=[msg.model_dump(mode="json")] if hasattr(msg, "model_dump") else [],
                        answer_form=form)
