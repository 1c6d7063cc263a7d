"""What the Messages API stand-in (tests.standins.messages_api) accepts: each model's request rules as the
documentation states them (read 2026-11-29), and the check that answers a request the API would refuse with
the API's status, error type and wording.

The registry is written from the documentation, independently of kbench's own table (engine.llm.models), so
kbench's requests are checked against rules it did not write. Sources:

- models, context windows, output limits: https://platform.claude.com/docs/en/models/overview
- thinking types per model, defaults, the 400s: https://platform.claude.com/docs/en/build-with-claude/thinking
  and .../build-with-claude/thinking-troubleshooting; Opus 5: .../about-claude/models/whats-new-opus-5 (disabled
  only at effort high or below); Opus 5.5: .../models/opus-5-5/whats-new-opus-5-5 (disabled refused at every
  effort, forced tool_choice refused); Sonnet 5.5: .../models/sonnet-5-5/migration-guide (`between_tools`
  instead of `disabled`, only at effort <= high, no other field; forced tool_choice refused); Haiku 5.5:
  .../models/haiku-5-5/migration-guide (sampling "default" spelled out: temperature 1, top_p 0.99, no top_k,
  never both)
- `display` (summarized / omitted), its per-model default and that it is invalid with `disabled`:
  .../build-with-claude/thinking#controlling-thinking-display
- extended thinking: budget_tokens >= 1024 and < max_tokens; forced tool_choice refused with it:
  .../build-with-claude/extended-thinking
- effort levels per model: .../build-with-claude/effort
- sampling parameters: non-default values refused on the 5.x models and Opus 4.7 and later; under
  `anthropic-version: 2026-10-21` (what the SDK's 2.x releases send) the parameters are removed for every
  model: .../api/versioning and .../api/migration-2026-10-21
- prompt caching (order tools -> system -> messages, at most 4 breakpoints, per-model minimum, an entry usable
  once the first response has begun): .../build-with-claude/prompt-caching
- errors and their bodies (400, 401, 404, 413 at 32 MB, 429, 529): .../api/errors
- the Models API's ModelInfo and `capabilities`: .../api/models/retrieve (and the SDK's types/model_info.py)
- the SDK's rule that a non-streamed request whose max_tokens could take over 10 minutes is refused
  (3600 * max_tokens / 128000 > 600): anthropic-sdk-python's _base_client._calculate_nonstreaming_timeout;
  kbench applies it itself since it sets its own timeout, so the stand-in holds it to it.

Where the documentation gives no wording (an unsupported effort level), the stand-in's own wording is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EFFORTS = ("low", "medium", "high", "xhigh", "max")
NEW_API_VERSION = "2026-10-21"      # sampling parameters removed for every model
SAMPLING = ("temperature", "top_p", "top_k")

# Request parameters of POST /v1/messages (`stream` included).
KNOWN_PARAMS = frozenset({
    "model", "messages", "max_tokens", "system", "tools", "tool_choice", "thinking", "output_config", "stream",
    "metadata", "stop_sequences", "temperature", "top_k", "top_p", "service_tier", "container",
    "context_management", "mcp_servers", "inference_geo", "speed", "cache_control"})

DISABLED_HINT = 'Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior.'
SONNET_55_DISABLED = ('To turn thinking off on this model, send "thinking": {"type": "between_tools"} instead of '
                      '{"type": "disabled"}. The model does not think before responding. The short updates it '
                      'writes between tool calls come back as thinking blocks.')


@dataclass(frozen=True)
class StubModel:
    """What one model accepts, as its documentation states it."""

    types: frozenset[str]              # accepted thinking.type values
    default_on: bool                   # thinking is on when the request leaves `thinking` out
    efforts: tuple[str, ...]
    max_tokens: int
    context: int = 1_000_000
    forced_tool: bool = True           # tool_choice any/tool accepted at all (with adaptive thinking too)
    strict_sampling: bool = True       # non-default sampling values refused on every request
    display_default: str = "omitted"
    cache_min: int = 512               # the shortest cacheable prefix, tokens
    structured_outputs: bool = True
    disabled_max_effort: str | None = None   # `disabled` accepted only at this effort or below
    disabled_message: str = ""         # the model's own wording for a refused `disabled`

    @property
    def adaptive(self) -> bool:
        return "adaptive" in self.types

    @property
    def enabled(self) -> bool:
        return "enabled" in self.types

    @property
    def disabled(self) -> bool:
        return "disabled" in self.types


_ALL = EFFORTS
_NO_XHIGH = ("low", "medium", "high", "max")
_ADAPTIVE = frozenset({"adaptive"})
_FABLE_51 = StubModel(_ADAPTIVE, True, _ALL, 128000, forced_tool=False)
_FABLE_5 = StubModel(_ADAPTIVE, True, _ALL, 128000)
_OPUS_55 = StubModel(_ADAPTIVE, True, _ALL, 128000, forced_tool=False)
_OPUS_5 = StubModel(frozenset({"adaptive", "disabled"}), True, _ALL, 128000, disabled_max_effort="high")
_SONNET_55 = StubModel(frozenset({"adaptive", "between_tools"}), True, _ALL, 128000, forced_tool=False,
                       disabled_message=SONNET_55_DISABLED)
_SONNET_5 = StubModel(frozenset({"adaptive", "disabled"}), True, _ALL, 128000, cache_min=1024)
_HAIKU_55 = StubModel(frozenset({"adaptive", "disabled"}), True, _ALL, 128000, disabled_max_effort="high")
_OPUS_48 = StubModel(frozenset({"adaptive", "disabled"}), False, _ALL, 128000, cache_min=1024)
_OPUS_47 = StubModel(frozenset({"adaptive", "disabled"}), False, _ALL, 128000, cache_min=2048)
_OPUS_46 = StubModel(frozenset({"adaptive", "enabled", "disabled"}), False, _NO_XHIGH, 128000,
                     strict_sampling=False, display_default="summarized", cache_min=4096)
_SONNET_46 = StubModel(frozenset({"adaptive", "enabled", "disabled"}), False, _NO_XHIGH, 128000,
                       strict_sampling=False, display_default="summarized", cache_min=1024)
_OPUS_45 = StubModel(frozenset({"enabled", "disabled"}), False, ("low", "medium", "high"), 64000, context=200_000,
                     strict_sampling=False, display_default="summarized", cache_min=4096)
_HAIKU_45 = StubModel(frozenset({"enabled", "disabled"}), False, (), 64000, context=200_000, strict_sampling=False,
                      display_default="summarized", cache_min=4096)

STUB_MODELS: dict[str, StubModel] = {
    "claude-fable-5-2": _FABLE_51, "claude-fable-5-1": _FABLE_51, "claude-mythos-5-1": _FABLE_51,
    "claude-fable-5": _FABLE_5, "claude-mythos-5": _FABLE_5,
    "claude-opus-5-5": _OPUS_55, "claude-opus-5": _OPUS_5,
    "claude-sonnet-5-5": _SONNET_55, "claude-sonnet-5": _SONNET_5, "claude-haiku-5-5": _HAIKU_55,
    "claude-opus-4-8": _OPUS_48, "claude-opus-4-7": _OPUS_47,
    "claude-opus-4-6": _OPUS_46, "claude-sonnet-4-6": _SONNET_46,
    "claude-opus-4-5": _OPUS_45, "claude-opus-4-5-20251101": _OPUS_45,
    "claude-haiku-4-5": _HAIKU_45, "claude-haiku-4-5-20251001": _HAIKU_45,
}

BAD = "invalid_request_error"


def check_request(models: Mapping[str, StubModel], body: Any,
                  headers: Mapping[str, str] | None = None) -> tuple[int, str, str] | None:
    """(status, error type, message) for a request the API would refuse, given what each model accepts
    (`models`: STUB_MODELS or a test's own table) and the request's headers (lower-case names), else None."""
    if not isinstance(body, dict):
        return 400, BAD, "the request body must be a JSON object"
    version = (headers or {}).get("anthropic-version", "2023-06-01")
    for key in body:
        if key not in KNOWN_PARAMS or (key in SAMPLING and version >= NEW_API_VERSION):
            return 400, BAD, f"{key}: Extra inputs are not permitted"
    model_id = body.get("model")
    model = models.get(model_id)
    if model is None:
        return 404, "not_found_error", f"model: {model_id}"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return 400, BAD, "max_tokens: Field required (a positive integer)"
    if max_tokens > model.max_tokens:
        return 400, BAD, (f"max_tokens: {max_tokens} > {model.max_tokens}, which is the maximum allowed number "
                          f"of output tokens for {model_id}")
    effort = (body.get("output_config") or {}).get("effort")
    if effort is not None and effort not in model.efforts:
        return 400, BAD, f"output_config.effort: {effort!r} is not supported for {model_id}"
    thinking = body.get("thinking")
    if thinking is not None and not isinstance(thinking, dict):
        return 400, BAD, "thinking: Input should be an object"
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    problem = _thinking(model, thinking or {}, kind, effort, max_tokens)
    if problem:
        return 400, BAD, problem
    thinking_on = kind in ("enabled", "adaptive") or (kind is None and model.default_on)
    problem = _tool_choice(model, body.get("tool_choice"), kind)
    if problem:
        return 400, BAD, problem
    problem = _sampling(model, body, thinking_on)
    if problem:
        return 400, BAD, problem
    problem = _tools(model, model_id, body.get("tools") or ())
    if problem:
        return 400, BAD, problem
    if _breakpoints(body) > 4:
        return 400, BAD, f"A maximum of 4 blocks with cache_control may be provided. Found {_breakpoints(body)}."
    if not body.get("stream") and 3600 * max_tokens / 128_000 > 600:
        return 400, BAD, ("stand-in: a request that may take longer than 10 minutes must be streamed "
                          "(the anthropic SDK's rule, which kbench applies itself)")
    return None


def _thinking(model: StubModel, thinking: dict[str, Any], kind: str | None, effort: str | None,
              max_tokens: int) -> str | None:
    display = thinking.get("display")
    if kind is None:
        return None
    if kind not in ("adaptive", "enabled", "disabled", "between_tools"):
        return f"thinking.type: unknown type {kind!r}"
    if kind not in model.types:
        if kind == "disabled" and model.disabled_message:
            return model.disabled_message
        if kind == "adaptive":
            return "adaptive thinking is not supported on this model"
        return f'"thinking.type.{kind}" is not supported for this model. {DISABLED_HINT}'
    if kind == "disabled":
        if display is not None:
            return "thinking.display: display is invalid with thinking.type disabled"
        if (model.disabled_max_effort is not None and effort is not None
                and EFFORTS.index(effort) > EFFORTS.index(model.disabled_max_effort)):
            return f'"thinking.type.disabled" is not supported for this model at effort {effort!r}. {DISABLED_HINT}'
    if kind == "between_tools":
        if set(thinking) - {"type"}:
            return f"thinking.between_tools: {sorted(set(thinking) - {'type'})[0]}: Extra inputs are not permitted"
        if effort in ("xhigh", "max"):
            return f'"thinking.type.between_tools" is not supported at effort {effort!r}'
    if display is not None and display not in ("summarized", "omitted"):
        return f"thinking.display: Input should be 'summarized' or 'omitted'"
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if budget >= max_tokens:
            return "`max_tokens` must be greater than `thinking.budget_tokens`"
    return None


def _tool_choice(model: StubModel, choice: Any, kind: str | None) -> str | None:
    if not isinstance(choice, dict) or choice.get("type") not in ("any", "tool"):
        return None
    if not model.forced_tool:
        return 'tool_choice: type "tool" and "any" are not supported for this model.'
    if kind == "enabled":
        return "Thinking may not be enabled when tool_choice forces tool use."
    return None


def _sampling(model: StubModel, body: dict[str, Any], thinking_on: bool) -> str | None:
    given = [k for k in SAMPLING if k in body]
    if not given:
        return None
    if model.strict_sampling:
        if "top_k" in body or ("temperature" in body and "top_p" in body):
            return f"`{given[-1]}` is deprecated for this model."
        if body.get("temperature", 1) != 1 or body.get("top_p", 0.99) != 0.99:
            return f"`{given[0]}` is deprecated for this model."
        return None
    if thinking_on and ("temperature" in body and body["temperature"] != 1 or "top_k" in body):
        return "`temperature` may only be set to 1 when thinking is enabled."
    if thinking_on and "top_p" in body and not 0.95 <= body["top_p"] <= 1:
        return "`top_p` must be between 0.95 and 1 when thinking is enabled."
    return None


def _tools(model: StubModel, model_id: str, tools: Any) -> str | None:
    for tool in tools:
        if isinstance(tool, dict) and tool.get("strict"):
            if not model.structured_outputs:
                return f"tools: strict tool use is not supported for {model_id}"
            schema = tool.get("input_schema") or {}
            if schema.get("additionalProperties") is not False:
                return "tools: a strict tool's input_schema must set additionalProperties to false"
            unsupported = _unsupported_keywords(schema)
            if unsupported:
                return f"tools.{tool.get('name')}: strict schemas do not support {', '.join(sorted(unsupported))}"
    return None


def _breakpoints(body: dict[str, Any]) -> int:
    n = sum(1 for t in body.get("tools") or () if isinstance(t, dict) and "cache_control" in t)
    system = body.get("system")
    if isinstance(system, list):
        n += sum(1 for b in system if isinstance(b, dict) and "cache_control" in b)
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            n += sum(1 for b in content if isinstance(b, dict) and "cache_control" in b)
    return n


_UNSUPPORTED_IN_STRICT = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
                          "maxLength", "pattern"}


def _unsupported_keywords(schema: Any) -> set[str]:
    """JSON Schema keywords strict tool use does not take (the structured-outputs schema limitations)."""
    found: set[str] = set()
    if isinstance(schema, dict):
        found |= _UNSUPPORTED_IN_STRICT & set(schema)
        for value in schema.values():
            found |= _unsupported_keywords(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= _unsupported_keywords(value)
    return found
