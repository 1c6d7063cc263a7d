"""A stub Messages API on loopback that enforces today's request rules and replays recorded answers: for
tests and offline demos.

    with StubMessagesAPI() as api:
        api.queue(StubResponse.from_file("tests/fixtures/llm/ok_translate.json"))
        client = LLMClient(cfg, api_key="test", ...)   # cfg.base_url = api.url
        ...
        api.requests[0].json["tools"][0]["name"] == "submit_kernel"

It is a real HTTP server (threading http.server on 127.0.0.1, an ephemeral port), so the real SDK and its
transport are exercised end to end; nothing leaves the machine.

- `POST /v1/messages` is first checked against the rules the API documents for the requested model (the
  registry below, written from the model pages, independently of kbench's own table): an unknown top-level
  parameter, a thinking type the model refuses, a forced `tool_choice` while thinking is on, an effort level
  the model lacks, a budget at or above max_tokens, max_tokens above the model's limit, `strict` tools on a
  model without structured outputs, and (the SDK's rule, which kbench applies itself) a non-streamed request
  whose max_tokens could take longer than 10 minutes: each answers 400 invalid_request_error with the API's
  wording. A valid request takes the next queued response whose tool matches one the request offers (a
  recorded answer calling `submit_verdict` only goes to a verifier's request), or any untargeted one; with
  `"stream": true` it is sent as server-sent events. An empty queue answers 500, which a test will notice.
- `outage(status, count, retry_after)` answers the next `count` requests (None: until `end_outage()`) with
  429 rate_limit_error or 529 overloaded_error and a retry-after header, before any rule is checked.
- `GET /v1/models/{id}` answers the Models API's ModelInfo with its `capabilities` object.

A response file is JSON: {"status": 200, "headers": {...}, "body": {...} or "text", "delay_s": 0}.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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


@dataclass(frozen=True)
class StubResponse:
    status: int = 200
    body: Any = None  # dict/list -> JSON; str -> sent as is
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait before answering (request-timeout tests)
    tool: str | None = None  # only for a request offering this tool (default: the tool the body calls; "*": any)
    midstream_error: dict[str, Any] | None = None  # streamed: this error event after the first block

    @classmethod
    def from_file(cls, path: str | Path, **override: Any) -> "StubResponse":
        obj = json.loads(Path(path).read_text())
        fields = {"status": obj.get("status", 200), "body": obj.get("body"), "headers": dict(obj.get("headers") or {}),
                  "delay_s": float(obj.get("delay_s", 0.0))}
        fields.update(override)
        return cls(**fields)

    def target(self) -> str | None:
        if self.tool is not None:
            return None if self.tool == "*" else self.tool
        if isinstance(self.body, dict):
            for block in self.body.get("content") or ():
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    return block.get("name")
        return None


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class _Outage:
    status: int
    left: int | None
    retry_after: str | None


class StubServer:
    """What both loopback stubs (this one and engine/llm/stub_openai.py) share: the queue of recorded answers,
    simulated outages, the server's start and end. A subclass sets _queue, _outage, _lock, _server, _thread."""

    OUTAGE_STATUS = 529
    URL_PATH = ""
    _queue: list[StubResponse]
    _outage: _Outage | None
    _lock: threading.Lock

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]  # type: ignore[attr-defined]
        return f"http://{host}:{port}{self.URL_PATH}"

    def queue(self, *responses: StubResponse) -> None:
        with self._lock:
            self._queue.extend(responses)

    def outage(self, status: int | None = None, count: int | None = None, retry_after: str | None = "0") -> None:
        with self._lock:
            self._outage = _Outage(status or self.OUTAGE_STATUS, count, retry_after)

    def end_outage(self) -> None:
        with self._lock:
            self._outage = None

    def _take_outage(self) -> tuple[_Outage, dict[str, str]] | None:
        """The outage this request runs into (counting it down), with its retry-after header; else None.
        Call with the lock held."""
        o = self._outage
        if o is None:
            return None
        if o.left is not None:
            o.left -= 1
            if o.left <= 0:
                self._outage = None
        return o, ({"retry-after": o.retry_after} if o.retry_after is not None else {})

    def start(self) -> "StubServer":
        self._thread.start()  # type: ignore[attr-defined]
        return self

    def close(self) -> None:
        self._server.shutdown()  # type: ignore[attr-defined]
        self._server.server_close()  # type: ignore[attr-defined]

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StubMessagesAPI(StubServer):
    def __init__(self, host: str = "127.0.0.1", *, enforce: bool = True, models: dict[str, StubModel] | None = None):
        self._queue: list[StubResponse] = []
        self.requests: list[RecordedRequest] = []
        self.rejected: list[tuple[RecordedRequest, str]] = []   # requests the rules refused, with the message
        self.enforce = enforce
        self.models = dict(STUB_MODELS if models is None else models)
        self._outage: _Outage | None = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.active = 0                 # POSTs being answered now
        self.max_active = 0             # the most at once: proposals and reviews in flight together
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                rec = RecordedRequest("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, b"")
                with stub._lock:
                    stub.requests.append(rec)
                status, body = stub._models_answer(self.path.split("?")[0])
                self._send(StubResponse(status, body))

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                rec = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
                with stub._lock:
                    stub.requests.append(rec)
                    stub.active += 1
                    stub.max_active = max(stub.max_active, stub.active)
                try:
                    resp, stream = stub._answer(rec)
                    if resp.delay_s and stub._closing.wait(resp.delay_s):
                        return
                    if stream and resp.status == 200 and isinstance(resp.body, dict):
                        self._send_stream(resp)
                    else:
                        self._send(resp)
                finally:
                    with stub._lock:
                        stub.active -= 1

            def _send(self, resp: StubResponse) -> None:
                payload = resp.body if isinstance(resp.body, (str, bytes)) else json.dumps(resp.body)
                data = payload.encode() if isinstance(payload, str) else payload
                try:
                    self.send_response(resp.status)
                    headers = {"content-type": "application/json", "request-id": f"req_stub_{uuid.uuid4().hex[:12]}",
                               **resp.headers}
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test): nothing to answer

            def _send_stream(self, resp: StubResponse) -> None:
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("cache-control", "no-cache")
                    self.send_header("request-id", f"req_stub_{uuid.uuid4().hex[:12]}")
                    self.send_header("connection", "close")
                    self.end_headers()
                    for event, data in sse_events(resp.body, resp.midstream_error):
                        self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                        self.wfile.flush()
                    self.close_connection = True
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval keeps shutdown (once per test) from costing half a second.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="kbench-stub-api", daemon=True)

    # -- the rules ---------------------------------------------------------------------------------------
    def _answer(self, rec: RecordedRequest) -> tuple[StubResponse, bool]:
        try:
            body = rec.json
        except ValueError:
            return StubResponse(400, error_body("invalid_request_error", "the request body is not JSON")), False
        stream = bool(isinstance(body, dict) and body.get("stream"))
        with self._lock:
            if (hit := self._take_outage()) is not None:
                o, headers = hit
                kind = "rate_limit_error" if o.status == 429 else "overloaded_error"
                msg = "Number of requests has exceeded your rate limit" if o.status == 429 else "Overloaded"
                return StubResponse(o.status, error_body(kind, msg), headers), False
        if self.enforce and rec.path.rstrip("/").endswith("/v1/messages"):
            problem = self.check(body)
            if problem is not None:
                status, kind, message = problem
                with self._lock:
                    self.rejected.append((rec, message))
                return StubResponse(status, error_body(kind, message)), False
        tools = (body.get("tools") or []) if isinstance(body, dict) else []
        offered = {t.get("name") for t in tools if isinstance(t, dict)}
        with self._lock:
            for i, resp in enumerate(self._queue):
                target = resp.target()
                if target is None or not offered or target in offered:
                    return self._queue.pop(i), stream
        return StubResponse(500, error_body("api_error", "stub: no recorded response left for this request")), False

    def check(self, body: Any) -> tuple[int, str, str] | None:
        """(status, error type, message) for a request the API would refuse, else None."""
        bad = "invalid_request_error"
        if not isinstance(body, dict):
            return 400, bad, "the request body must be a JSON object"
        for key in body:
            if key not in KNOWN_PARAMS:
                return 400, bad, f"{key}: Extra inputs are not permitted"
        model_id = body.get("model")
        model = self.models.get(model_id)
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

    def _models_answer(self, path: str) -> tuple[int, Any]:
        prefix = "/v1/models/"
        if not path.startswith(prefix):
            return 404, error_body("not_found_error", f"stub: no route {path}")
        model_id = path[len(prefix):]
        model = self.models.get(model_id)
        if model is None:
            return 404, error_body("not_found_error", f"model: {model_id}")
        return 200, model_info(model_id, model)

    # -- controls (and StubServer's) -------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def messages(self) -> list[RecordedRequest]:
        """The POSTs to /v1/messages, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST"]

    def close(self) -> None:
        self._closing.set()
        super().close()


# -- realistic bodies ----------------------------------------------------------------------------------

def model_info(model_id: str, m: StubModel) -> dict[str, Any]:
    def sup(flag: bool) -> dict[str, bool]:
        return {"supported": bool(flag)}

    return {
        "type": "model", "id": model_id, "display_name": model_id, "created_at": "2026-09-22T00:00:00Z",
        "lifecycle": "active", "max_input_tokens": 1_000_000, "max_tokens": m.max_tokens,
        "capabilities": {
            "batch": sup(True), "citations": sup(True), "code_execution": sup(False),
            "context_management": {"supported": False, "clear_thinking_20251015": sup(False),
                                   "clear_tool_uses_20250919": sup(False), "compact_20260112": sup(False)},
            "effort": {"supported": bool(m.efforts), **{e: sup(e in m.efforts) for e in EFFORTS}},
            "image_input": sup(True), "pdf_input": sup(True),
            "server_tools": {"supported": False},
            "structured_outputs": sup(m.structured_outputs),
            "thinking": {"supported": m.adaptive or m.enabled,
                         "types": {"adaptive": sup(m.adaptive), "enabled": sup(m.enabled),
                                   "disabled": sup(m.disabled), "between_tools": sup(False)}},
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
