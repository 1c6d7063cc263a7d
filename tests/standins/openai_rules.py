"""What OpenAI-compatible servers refuse, and how they say it: the flavours of tests.standins.openai_api.

Written from the servers' released sources (paths are repository paths; versions matter, the wordings changed):

- vLLM (`VLLM`; 0.20-0.31 semantics by default, `clamp=True` for 0.32+):
  - `GET /v1/models` cards carry `max_model_len` (vllm/entrypoints/openai/protocol.py `ModelCard`, filled from
    `model_config.max_model_len`; `owned_by` "vllm", `root` the model path).
  - Errors are nested since 0.10.1 (PR vllm-project/vllm#22099): `{"error": {"message", "type":
    "BadRequestError", "param", "code": 400}}`; validation messages end with ` (parameter=P, value=V)`
    (vllm/exceptions.py `VLLMValidationError`).
  - Context (vllm/renderers/params.py, 0.20-0.31): the prompt may use `max_model_len - max_tokens` tokens
    (max_tokens omitted counts 0): "This model's maximum context length is M tokens. However, you requested
    C output tokens and your prompt contains P input tokens, for a total of T tokens. Please reduce the
    length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=P)".
    0.32+ (`get_max_tokens` in vllm/entrypoints/serve/utils/api_utils.py, PR #57035) clamps max_tokens to
    what the prompt leaves and refuses only a prompt longer than the context ("... which exceeds this limit
    even without any output tokens ...") or exactly as long (vllm/v1/engine/input_processor.py "The decoder
    prompt (length N) plus ..."). Both refuse `max_tokens > max_model_len` ("max_tokens=N cannot be greater
    than max_model_len=M. Please request fewer output tokens.") and `max_tokens < 1`
    (vllm/sampling_params.py).
  - Tools (docs/features/tool_calling.md; chat_completion/protocol.py validators; renderers/online_renderer.py):
    tools given without tool_choice means "auto"; "auto" needs `--enable-auto-tool-choice` and a
    `--tool-call-parser` ('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to
    be set'); "required" and a named tool need a parser ('tool_choice=function "NAME" requires
    --tool-call-parser to be set', 0.31+); `tools: []`, tool_choice without tools, an unknown string and a
    named tool not among the tools are 400s. Without a parser the model's call stays in `content`
    (vllm/tool_parsers/hermes_tool_parser.py returns `tools_called=False, content=model_output` on a miss);
    here it is the model's `<tool_call>` text. A forced named tool reports finish_reason "stop"
    (vllm/entrypoints/serve/utils/tool_calls_utils.py `resolve_finish_reason`), a cut answer "length".
  - `stream_options` without `stream: true`: "Stream options can only be defined when `stream=True`.".
  - Reasoning comes as `message.reasoning` (PR #27752, "reasoning_content -> reasoning").
  - `--api-key`: a request without `Authorization: Bearer KEY` gets 401 `{"error": "Unauthorized"}`
    (the server's AuthenticationMiddleware).
- llama.cpp `llama-server` (`LlamaCpp`; tools/server at commit 0c1e570, as vendored in llama-cpp-python 0.3.36):
  - `GET /v1/models` lists its one model with `meta.n_ctx` (the slot's context) and `meta.n_ctx_train`
    (server-context.cpp `get_res_model_info`; owned_by "llamacpp"); a request's `model` names nothing.
  - A prompt of `n_ctx` tokens or more: 400 `{"error": {"code": 400, "message": "request (N tokens) exceeds
    the available context size (M tokens), try increasing it", "type": "exceed_context_size_error",
    "n_prompt_tokens": N, "n_ctx": M}}` (server-common.cpp `format_error_response`, server-task.cpp), as an
    HTTP error even when streaming. No prompt + max_tokens check: generation stops at the context with
    finish_reason "length". `max_tokens`, `max_completion_tokens` and `n_predict` are aliases
    (server-schema.cpp); -1 or none: no limit.
  - Tools: without `--jinja` "tools param requires --jinja flag" / "tool_choice param requires --jinja
    flag" (server-common.cpp `oaicompat_chat_params_parse`); a string other than auto/none/required
    "Invalid tool_choice: X"; a named tool_choice object is not read and counts as "auto"
    (server-common.h `json_value` falls back to the default).
  - Reasoning as `reasoning_content` (common/chat.cpp); `usage.prompt_tokens_details.cached_tokens` always.
  - `--api-key`: 401 `{"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}`.

Prompts are counted with the stand-ins' tokenizer (tests.standins.scripted.tokens_of: four characters a token,
independent of kbench's own estimate), the tool definitions included as chat templates render them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.standins.scripted import tokens_of

_PER_MESSAGE = 4


@dataclass(frozen=True)
class Refusal:
    status: int
    body: dict[str, Any]


def prompt_tokens(body: dict[str, Any]) -> int:
    """The request's prompt as a chat template renders it: every message, and the tools where sent."""
    n = sum(tokens_of(str(m.get("content") or "")) + _PER_MESSAGE for m in body.get("messages") or ()
            if isinstance(m, dict))
    if body.get("tools"):
        n += tokens_of(json.dumps(body["tools"]))
    return n


def requested_output(body: dict[str, Any]) -> int | None:
    """max_completion_tokens, which wins where both are sent, else max_tokens."""
    value = body.get("max_completion_tokens")
    return value if value is not None else body.get("max_tokens")


def tool_names(body: dict[str, Any]) -> list[str]:
    return [(t.get("function") or {}).get("name") for t in body.get("tools") or () if isinstance(t, dict)]


@dataclass
class VLLM:
    max_model_len: int = 65536
    tool_parser: str | None = "hermes"     # --tool-call-parser
    auto_tool_choice: bool = True           # --enable-auto-tool-choice
    clamp: bool = False                     # 0.32+: max_tokens clamped to what the prompt leaves
    listed: bool = True                     # False: a proxy in front (LiteLLM) lists the model without max_model_len
    name: str = "vllm"
    reasoning_key: str = "reasoning"

    def models(self, model: str) -> dict[str, Any]:
        card = {"id": model, "object": "model", "created": 1790000000, "owned_by": "vllm",
                "root": f"/models/{model}", "parent": None, "max_model_len": self.max_model_len,
                "permission": [{"id": "modelperm-stand-in", "object": "model_permission", "allow_sampling": True}]}
        if not self.listed:
            card = {"id": model, "object": "model", "created": 1790000000, "owned_by": "openai"}
        return {"object": "list", "data": [card]}

    def error(self, status: int, message: str, *, kind: str = "BadRequestError", param: str | None = None) -> Refusal:
        return Refusal(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})

    def unauthorized(self) -> Refusal:
        return Refusal(401, {"error": "Unauthorized"})

    def unknown_model(self, model: Any) -> Refusal:
        return self.error(404, f"The model `{model}` does not exist.", kind="NotFoundError", param="model")

    def check(self, body: dict[str, Any], served: str) -> Refusal | None:
        if body.get("model") != served:
            return self.unknown_model(body.get("model"))
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return self.error(400, "1 validation error:\n  messages: Field required", kind="Bad Request",
                              param="messages")
        if body.get("stream_options") and not body.get("stream"):
            return self.error(400, "Stream options can only be defined when `stream=True`.")
        problem = self._tools(body)
        if problem is not None:
            return problem
        out = requested_output(body)
        param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        if out is not None and out < 1:
            return self.error(400, f"max_tokens must be at least 1, got {out}.", param=param)
        if out is not None and out > self.max_model_len:
            return self.error(400, f"max_tokens={out} cannot be greater than max_model_len={self.max_model_len}. "
                                   f"Please request fewer output tokens. (parameter={param}, value={out})", param=param)
        p, m = prompt_tokens(body), self.max_model_len
        if self.clamp:
            if p > m:
                return self.error(400, f"This model's maximum context length is {m} tokens. However, your prompt "
                                       f"contains {p} input tokens, which exceeds this limit even without any output "
                                       "tokens. Please reduce the length of the input prompt. "
                                       f"(parameter=input_tokens, value={p})", param="input_tokens")
            if p == m:
                return self.error(400, f"The decoder prompt (length {p}) plus the number of requested output tokens "
                                       f"(at least 1) is longer than the maximum model length of {m}. Make sure that "
                                       "`max_model_len` is no smaller than the number of text tokens (prompt + "
                                       "requested output tokens).")
        elif p > m - (out or 0):
            return self.error(400, f"This model's maximum context length is {m} tokens. However, you requested "
                                   f"{out or 0} output tokens and your prompt contains {p} input tokens, for a total "
                                   f"of {p + (out or 0)} tokens. Please reduce the length of the input prompt or the "
                                   f"number of requested output tokens. (parameter=input_tokens, value={p})",
                              param="input_tokens")
        return None

    def _tools(self, body: dict[str, Any]) -> Refusal | None:
        tools, choice = body.get("tools"), body.get("tool_choice")
        if tools is not None and not tools:
            return self.error(400, "`tools` must not be an empty array. Either provide at least one tool or omit the "
                                   "field entirely.")
        for t in tools or ():
            fn = t.get("function") if isinstance(t, dict) else None
            if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                    or not isinstance(fn.get("name"), str):
                return self.error(400, "1 validation error:\n  tools.0.function: Field required", kind="Bad Request")
        if choice is not None and not tools:
            return self.error(400, "When using `tool_choice`, `tools` must be set.")
        if tools and choice is None:
            choice = "auto"                  # check_tool_usage: tools without tool_choice
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            if name not in tool_names(body):
                return self.error(400, "The tool specified in `tool_choice` does not match any of the specified "
                                       "`tools`")
            if self.tool_parser is None:
                return self.error(400, f'tool_choice=function "{name}" requires --tool-call-parser to be set')
        elif choice not in (None, "none", "auto", "required"):
            return self.error(400, f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" or '
                                   '"required" are supported.')
        elif choice == "auto" and not (self.auto_tool_choice and self.tool_parser):
            return self.error(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                                   "to be set")
        elif choice == "required" and self.tool_parser is None:
            return self.error(400, 'tool_choice="required" requires --tool-call-parser to be set')
        return None

    def output_room(self, body: dict[str, Any]) -> int:
        """How many tokens the answer may have (finish_reason "length" beyond)."""
        out = requested_output(body)
        left = self.max_model_len - prompt_tokens(body)
        return left if out is None else min(out, left)

    def extracts_calls(self, body: dict[str, Any]) -> bool:
        """Whether a call the model writes becomes `tool_calls` (else it stays text in `content`)."""
        return bool(body.get("tools")) and body.get("tool_choice") != "none" and self.tool_parser is not None

    def finish(self, body: dict[str, Any], *, called: bool, cut: bool) -> str:
        if cut:
            return "length"
        if called and not isinstance(body.get("tool_choice"), dict):
            return "tool_calls"
        return "stop"

    def usage_details(self, prompt: int) -> dict[str, Any]:
        return {"prompt_tokens_details": None}


@dataclass
class LlamaCpp:
    n_ctx: int = 32768
    n_ctx_train: int = 131072
    jinja: bool = True                      # --jinja (the default in current builds)
    name: str = "llama.cpp"
    reasoning_key: str = "reasoning_content"

    def models(self, model: str) -> dict[str, Any]:
        card = {"id": "qwen3-coder-30b-a3b-instruct-q4_k_m.gguf", "aliases": [], "tags": [], "object": "model",
                "created": 1790000000, "owned_by": "llamacpp",
                "meta": {"vocab_type": 2, "n_vocab": 151936, "n_ctx": self.n_ctx, "n_ctx_train": self.n_ctx_train,
                         "n_embd": 2048, "n_params": 30532122624, "size": 18556686336, "ftype": 15}}
        return {"models": [{"name": card["id"], "model": card["id"]}], "object": "list", "data": [card]}

    def error(self, status: int, message: str, *, kind: str = "invalid_request_error", **extra: Any) -> Refusal:
        return Refusal(status, {"error": {"code": status, "message": message, "type": kind, **extra}})

    def unauthorized(self) -> Refusal:
        return self.error(401, "Invalid API Key", kind="authentication_error")

    def check(self, body: dict[str, Any], served: str) -> Refusal | None:
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return self.error(400, "'messages' is required")
        choice = body.get("tool_choice")
        if not self.jinja and body.get("tools"):
            return self.error(400, "tools param requires --jinja flag")
        if not self.jinja and isinstance(choice, str) and choice != "auto":
            return self.error(400, "tool_choice param requires --jinja flag")
        if isinstance(choice, str) and choice not in ("auto", "none", "required"):
            return self.error(400, f"Invalid tool_choice: {choice}")
        p = prompt_tokens(body)
        if p >= self.n_ctx:
            return self.error(400, f"request ({p} tokens) exceeds the available context size ({self.n_ctx} tokens), "
                                   "try increasing it", kind="exceed_context_size_error", n_prompt_tokens=p,
                              n_ctx=self.n_ctx)
        return None

    def output_room(self, body: dict[str, Any]) -> int:
        out = requested_output(body)
        if out is None:
            out = body.get("n_predict", -1)
        left = self.n_ctx - prompt_tokens(body) - 1
        return left if out is None or out < 0 else min(out, left)

    def extracts_calls(self, body: dict[str, Any]) -> bool:
        return bool(body.get("tools")) and body.get("tool_choice") != "none"

    def finish(self, body: dict[str, Any], *, called: bool, cut: bool) -> str:
        return "length" if cut else "tool_calls" if called else "stop"

    def usage_details(self, prompt: int) -> dict[str, Any]:
        return {"prompt_tokens_details": {"cached_tokens": 0}}


Flavour = VLLM | LlamaCpp
