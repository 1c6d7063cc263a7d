"""What the stub Messages API (tests.standins.messages_api) accepts: each model's request rules as its documentation
states them, and the check that answers a request the API would refuse with the API's status, error type
and wording.

The registry is written from the model pages, independently of kbench's own table (engine.llm.models), so
kbench's requests are checked against rules it did not write: an unknown top-level parameter, a thinking
type the model refuses, a forced `tool_choice` while thinking is on, an effort level the model lacks, a
budget at or above max_tokens, max_tokens above the model's limit, `strict` tools on a model without
structured outputs or with schema keywords strict mode refuses, and (the SDK's rule, which kbench applies
itself) a non-streamed request whose max_tokens could take longer than 10 minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EFFORTS = ("low", "medium", "high", "xhigh", "max")

# Request parameters of POST /v1/messages (the SDK's `messages.create` arguments; `stream` included).
KNOWN_PARAMS = frozenset({
    "model", "messages", "max_tokens", "system", "tools", "tool_choice", "thinking", "output_config", "stream",
    "metadata", "stop_sequences", "temperature", "top_k", "top_p", "service_tier", "container",
    "context_management", "mcp_servers", "inference_geo", "speed", "diagnostics", "user_profile_id",
    "workspace_id", "cache_control"})


@dataclass(frozen=True)
class StubModel:
    """What one model accepts, as its documentation states it."""

    adaptive: bool
    enabled: bool
    disabled: bool
    thinking_by_default: bool         # thinking is on when the request leaves `thinking` out
    efforts: tuple[str, ...]
    max_tokens: int
    structured_outputs: bool = True
    disabled_max_effort: str | None = None


_OPUS_55 = StubModel(adaptive=True, enabled=False, disabled=False, thinking_by_default=True, efforts=EFFORTS,
                     max_tokens=128000)
_OPUS_5 = StubModel(adaptive=True, enabled=False, disabled=True, thinking_by_default=True, efforts=EFFORTS,
                    max_tokens=128000, disabled_max_effort="high")
_SONNET_46 = StubModel(adaptive=True, enabled=True, disabled=True, thinking_by_default=False,
                       efforts=("low", "medium", "high", "max"), max_tokens=64000)
_OPUS_45 = StubModel(adaptive=False, enabled=True, disabled=True, thinking_by_default=False,
                     efforts=("low", "medium", "high"), max_tokens=64000)
_HAIKU_45 = StubModel(adaptive=False, enabled=True, disabled=True, thinking_by_default=False, efforts=(),
                      max_tokens=64000)

STUB_MODELS: dict[str, StubModel] = {
    "claude-opus-5-5": _OPUS_55, "claude-fable-5-1": _OPUS_55, "claude-opus-5": _OPUS_5,
    "claude-sonnet-5-5": StubModel(adaptive=True, enabled=False, disabled=True, thinking_by_default=False,
                                   efforts=EFFORTS, max_tokens=128000),
    "claude-sonnet-4-6": _SONNET_46, "claude-opus-4-5": _OPUS_45, "claude-opus-4-5-20251101": _OPUS_45,
    "claude-haiku-4-5": _HAIKU_45, "claude-haiku-4-5-20251001": _HAIKU_45,
}


def check_request(models: Mapping[str, StubModel], body: Any) -> tuple[int, str, str] | None:
    """(status, error type, message) for a request the API would refuse, given what each model accepts
    (`models`: STUB_MODELS or a test's own table), else None."""
    bad = "invalid_request_error"
    if not isinstance(body, dict):
        return 400, bad, "the request body must be a JSON object"
    for key in body:
        if key not in KNOWN_PARAMS:
            return 400, bad, f"{key}: Extra inputs are not permitted"
    model_id = body.get("model")
    model = models.get(model_id)
    if model is None:
        return 404, "not_found_error", f"model: {model_id}"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        return 400, bad, "max_tokens: Field required (a positive integer)"
    if max_tokens > model.max_tokens:
        return 400, bad, (f"max_tokens: {max_tokens} > {model.max_tokens}, which is the maximum allowed number "
                          f"of output tokens for {model_id}")
    effort = (body.get("output_config") or {}).get("effort")
    if effort is not None and effort not in model.efforts:
        return 400, bad, f"output_config.effort: {effort!r} is not supported for this model"
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    adaptive_hint = ('Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior.')
    if kind == "enabled":
        if not model.enabled:
            return 400, bad, f'"thinking.type.enabled" is not supported for this model. {adaptive_hint}'
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            return 400, bad, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if budget >= max_tokens:
            return 400, bad, "`max_tokens` must be greater than `thinking.budget_tokens`"
    elif kind == "adaptive":
        if not model.adaptive:
            return 400, bad, '"thinking.type.adaptive" is not supported for this model.'
    elif kind == "disabled":
        too_high = (model.disabled_max_effort is not None and effort is not None
                    and EFFORTS.index(effort) > EFFORTS.index(model.disabled_max_effort))
        if not model.disabled or too_high:
            return 400, bad, f'"thinking.type.disabled" is not supported for this model. {adaptive_hint}'
    elif kind is not None:
        return 400, bad, f"thinking.type: unknown type {kind!r}"
    thinking_on = kind in ("enabled", "adaptive") or (kind is None and model.thinking_by_default)
    choice = body.get("tool_choice") or {}
    if thinking_on and isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        return 400, bad, "Thinking may not be enabled when tool_choice forces tool use."
    if thinking_on and body.get("temperature") not in (None, 1, 1.0):
        return 400, bad, "`temperature` may only be set to 1 when thinking is enabled."
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and tool.get("strict"):
            if not model.structured_outputs:
                return 400, bad, f"tools: strict tool use is not supported for {model_id}"
            schema = tool.get("input_schema") or {}
            if schema.get("additionalProperties") is not False:
                return 400, bad, "tools: a strict tool's input_schema must set additionalProperties to false"
            unsupported = _unsupported_keywords(schema)
            if unsupported:
                return 400, bad, (f"tools.{tool.get('name')}: strict schemas do not support "
                                  f"{', '.join(sorted(unsupported))}")
    if not body.get("stream") and 3600 * max_tokens / 128_000 > 600:
        return 400, bad, ("stub: a request that may take longer than 10 minutes must be streamed "
                          "(the anthropic SDK's rule)")
    return None


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
