"""The bodies the stub Messages API (tests.standins.messages_api) answers with, shaped as the real API's: a model's
ModelInfo with its capabilities, a message and its tool_use blocks, an error, and a message as the
server-sent events of a streamed answer. message_body and tool_use_block build an answer in code rather than
from a recorded file.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.standins.claude_rules import EFFORTS, StubModel


def model_info(model_id: str, m: StubModel) -> dict[str, Any]:
    """The Models API's ModelInfo for `GET /v1/models/{id}`, its `capabilities` drawn from the registry (the
    shape of https://platform.claude.com/docs/en/api/models/retrieve)."""
    def sup(flag: bool) -> dict[str, bool]:
        return {"supported": bool(flag)}

    return {
        "type": "model", "id": model_id, "display_name": model_id, "created_at": "2026-09-22T00:00:00Z",
        "lifecycle": "active", "max_input_tokens": m.context, "max_tokens": m.max_tokens,
        "capabilities": {
            "batch": sup(True), "citations": sup(True), "code_execution": sup(False),
            "context_management": {"supported": False, "clear_thinking_20251015": sup(False),
                                   "clear_tool_uses_20250919": sup(False), "compact_20260112": sup(False)},
            "effort": {"supported": bool(m.efforts), **{e: sup(e in m.efforts) for e in EFFORTS}},
            "image_input": sup(True), "pdf_input": sup(True),
            "server_tools": {"supported": False},
            "structured_outputs": sup(m.structured_outputs),
            "thinking": {"supported": bool(m.types - {"disabled"}),
                         "types": {t: sup(t in m.types) for t in ("adaptive", "enabled", "disabled",
                                                                   "between_tools")}},
        },
    }


def sse_events(body: dict[str, Any], midstream_error: dict[str, Any] | None = None) -> list[tuple[str, Any]]:
    """A message body as the Messages API streams it: message_start, per block start / deltas / stop,
    message_delta (stop reason, output tokens), message_stop; an error event after the first block when asked."""
    usage = dict(body.get("usage") or {})
    start = {k: v for k, v in body.items() if k not in ("content", "stop_reason", "stop_sequence")}
    start.update(content=[], stop_reason=None, stop_sequence=None, usage={**usage, "output_tokens": 1})
    events: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": start}),
                                     ("ping", {"type": "ping"})]
    for i, block in enumerate(body.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            for piece in _chunks(block.get("text", "")):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": piece}}))
        elif kind == "thinking":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "thinking", "thinking": "",
                                                                     "signature": ""}}))
            for piece in _chunks(block.get("thinking", "")):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "thinking_delta", "thinking": piece}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "signature_delta",
                                                             "signature": block.get("signature", "")}}))
        elif kind == "tool_use":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "tool_use", "id": block["id"],
                                                                     "name": block["name"], "input": {}}}))
            for piece in _chunks(json.dumps(block.get("input") or {})):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "input_json_delta", "partial_json": piece}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": block}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        if midstream_error is not None and i == 0:
            events.append(("error", {"type": "error", "error": midstream_error}))
            return events
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": body.get("stop_reason"), "stop_sequence": None},
                                     "usage": {"output_tokens": usage.get("output_tokens", 0)}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _chunks(text: str, size: int = 4096) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def message_body(content: list[dict[str, Any]], *, model: str = "claude-opus-5-5", stop_reason: str = "tool_use",
                 input_tokens: int = 1200, output_tokens: int = 900, cache_write: int = 0,
                 cache_read: int = 0) -> dict[str, Any]:
    return {"id": f"msg_stub_{uuid.uuid4().hex[:16]}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                      "cache_creation_input_tokens": cache_write, "cache_read_input_tokens": cache_read,
                      "service_tier": "standard"}}


def tool_use_block(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_stub_{uuid.uuid4().hex[:16]}", "name": name, "input": tool_input}


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message},
            "request_id": f"req_stub_{uuid.uuid4().hex[:12]}"}
