"""A stand-in of the Claude Messages API on loopback that enforces the API's documented rules (see
tests.standins.claude_rules for the rules and their sources), for tests and offline demos.

    with StubMessagesAPI(key="sk-ant-test") as api:
        api.respond(ScriptedModel())            # answer each request from what it asks (tests.standins.scripted)
        api.queue(StubResponse.from_file(...))  # or: these recorded answers first, in order
        ...
        api.requests[0].json["tools"][0]["name"] == "submit_kernel"

It is a real HTTP server (threading http.server on 127.0.0.1, an ephemeral port), so the real SDK and its
transport are exercised end to end; nothing leaves the machine.

- A request without the key (`x-api-key`, or `Authorization: Bearer` as the SDK's 2.x releases send it)
  answers 401 authentication_error, when the stand-in was given a key.
- A body over `max_request_bytes` (the API's 32 MB) answers 413 request_too_large.
- `POST /v1/messages` is checked against the rules the documentation states for the requested model and the
  request's `anthropic-version` (claude_rules.check_request): a request the API would refuse answers 400
  invalid_request_error (404 for an unknown model) with the API's wording. A prompt longer than the model's
  context window answers 400 "prompt is too long: N tokens > M maximum".
- A valid request takes the next queued response whose tool matches one the request offers, or any
  untargeted one; else the scripted model answers (`respond`), cut at the request's max_tokens the way the
  API cuts (stop_reason max_tokens), with usage counted from the request: prompt caching as documented (the
  prefix up to a cache_control breakpoint, in the order tools, system, messages, is written once it reaches
  the model's minimum and read by later requests once the response that wrote it has begun). With
  `"stream": true` the answer is sent as server-sent events. With neither, 500, which a test will notice.
- `outage(status, count, retry_after)` answers the next `count` requests (None: until `end_outage()`) with
  429 rate_limit_error or 529 overloaded_error and a retry-after header, before any rule is checked.
- `GET /v1/models/{id}` answers the Models API's ModelInfo with its `capabilities` object.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any

import hashlib

from tests.standins.claude_bodies import error_body, message_body, model_info, sse_events
from tests.standins.claude_rules import STUB_MODELS, StubModel, check_request
from tests.standins.scripted import ScriptedModel, cut_to, output_tokens, tokens_of
from tests.standins.server import Outage, RecordedRequest, StubResponse, StubServer, read_body

MAX_REQUEST_BYTES = 32 * 1024 * 1024      # the Messages API's request size limit (413 above it)


class StubMessagesAPI(StubServer):
    def __init__(self, host: str = "127.0.0.1", *, enforce: bool = True, models: dict[str, StubModel] | None = None,
                 key: str | None = None, max_request_bytes: int = MAX_REQUEST_BYTES):
        self.key = key
        self.max_request_bytes = max_request_bytes
        self.model: ScriptedModel | None = None
        self.usage: list[dict[str, Any]] = []          # every scripted answer's usage (with its tool and model)
        self._cache: dict[str, bool] = {}               # prefix digest -> usable (its writer's response began)
        self._queue: list[StubResponse] = []
        self.requests: list[RecordedRequest] = []
        self.rejected: list[tuple[RecordedRequest, str]] = []   # requests the rules refused, with the message
        self.abandoned = 0              # requests whose client hung up before its body arrived (never answered)
        self.enforce = enforce
        self.models = dict(STUB_MODELS if models is None else models)
        self._outage: Outage | None = None
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
                if (raw := read_body(self)) is None:
                    with stub._lock:
                        stub.abandoned += 1
                    return
                rec = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
                with stub._lock:
                    stub.requests.append(rec)
                    stub.active += 1
                    stub.max_active = max(stub.max_active, stub.active)
                try:
                    resp, stream = stub._answer(rec)
                    if resp.delay_s and stub._closing.wait(resp.delay_s):
                        return
                    if resp.status == 200:
                        stub._began()
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

        self._listen(host, Handler, "kbench-stub-api")

    # -- the rules ---------------------------------------------------------------------------------------
    def _answer(self, rec: RecordedRequest) -> tuple[StubResponse, bool]:
        try:
            body = rec.json
        except ValueError:
            return StubResponse(400, error_body("invalid_request_error", "the request body is not JSON")), False
        stream = bool(isinstance(body, dict) and body.get("stream"))
        if len(rec.body) > self.max_request_bytes:
            return StubResponse(413, error_body("request_too_large", "Request exceeds the maximum allowed number "
                                                f"of bytes ({self.max_request_bytes}).")), False
        if self.key is not None and self.key not in (rec.headers.get("x-api-key"),
                                                     rec.headers.get("authorization", "").removeprefix("Bearer ")):
            return StubResponse(401, error_body("authentication_error", "invalid x-api-key")), False
        with self._lock:
            if (hit := self._take_outage()) is not None:
                o, headers = hit
                kind = "rate_limit_error" if o.status == 429 else "overloaded_error"
                msg = "Number of requests has exceeded your rate limit" if o.status == 429 else "Overloaded"
                return StubResponse(o.status, error_body(kind, msg), headers), False
        if self.enforce and rec.path.rstrip("/").endswith("/v1/messages"):
            problem = self.check(body, rec.headers)
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
        if self.model is not None and isinstance(body, dict):
            return self._scripted(body), stream
        return StubResponse(500, error_body("api_error", "stub: no recorded response left for this request")), False

    def check(self, body: Any, headers: dict[str, str] | None = None) -> tuple[int, str, str] | None:
        """(status, error type, message) for a request the API would refuse, else None (claude_rules), with the
        context window: a prompt longer than the model's answers "prompt is too long"."""
        problem = check_request(self.models, body, headers)
        if problem is None:
            model = self.models[body["model"]]
            prompt = sum(tokens_of(t) for _, t in _prompt_parts(body))
            if prompt > model.context:
                return 400, "invalid_request_error", f"prompt is too long: {prompt} tokens > {model.context} maximum"
        return problem

    # -- the scripted model ------------------------------------------------------------------------------
    def respond(self, model: ScriptedModel | None) -> None:
        """Answer requests that no queued response matches with `model` (None: stop)."""
        self.model = model

    def _scripted(self, body: dict[str, Any]) -> StubResponse:
        answer = self.model.answer(body)
        content = [dict(b, id=f"toolu_stub_{uuid.uuid4().hex[:16]}") if b["type"] == "tool_use" else b
                   for b in answer.content]
        model = self.models[body["model"]]
        thinking = body.get("thinking") or {}
        kind = thinking.get("type")
        if not (kind in ("adaptive", "enabled") or (kind is None and model.default_on)):
            content = [b for b in content if b["type"] != "thinking"]
        elif (thinking.get("display") or model.display_default) == "omitted":    # a signature, no text
            content = [dict(b, thinking="") if b["type"] == "thinking" else b for b in content]
        content, cut = cut_to(content, body["max_tokens"])
        written, read, fresh = self._cache_use(body)
        usage = {"input_tokens": fresh, "output_tokens": output_tokens(content), "cache_write": written,
                 "cache_read": read, "tool": (body.get("tools") or [{}])[0].get("name"), "model": body["model"]}
        with self._lock:
            self.usage.append(usage)
        return StubResponse(200, message_body(content, model=body["model"],
                                              stop_reason="max_tokens" if cut else answer.stop_reason,
                                              input_tokens=fresh, output_tokens=output_tokens(content),
                                              cache_write=written, cache_read=read),
                            delay_s=self.model.seconds_per_answer)

    def _cache_use(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(cache write, cache read, uncached input) tokens of a request, as prompt caching counts them."""
        parts = _prompt_parts(body)
        total = sum(tokens_of(t) for _, t in parts)
        marks = [i for i, (marked, _) in enumerate(parts) if marked]
        if not marks:
            return 0, 0, total
        end = marks[-1] + 1
        prefix = sum(tokens_of(t) for _, t in parts[:end])
        if prefix < self.models[body["model"]].cache_min:
            return 0, 0, total      # below the minimum: processed without caching, no error
        digest = hashlib.sha256(json.dumps([body["model"], [t for _, t in parts[:end]]]).encode()).hexdigest()
        with self._lock:
            hit = self._cache.get(digest, False)
            if not hit:
                self._cache[digest] = False          # being written: usable once this response begins
        if hit:
            return 0, prefix, total - prefix
        return prefix, 0, total - prefix

    def _began(self) -> None:
        """A response has begun: every prefix written so far may be read."""
        with self._lock:
            for digest in self._cache:
                self._cache[digest] = True

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


def _prompt_parts(body: dict[str, Any]) -> list[tuple[bool, str]]:
    """The prompt as prompt caching orders it (tools, system, messages), each part with whether it carries a
    cache_control breakpoint."""
    parts: list[tuple[bool, str]] = []
    for tool in body.get("tools") or ():
        parts.append(("cache_control" in tool, json.dumps({k: v for k, v in tool.items() if k != "cache_control"})))
    system = body.get("system")
    if isinstance(system, str):
        parts.append((False, system))
    for block in system if isinstance(system, list) else ():
        parts.append(("cache_control" in block, str(block.get("text", ""))))
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            parts.append((False, content))
            continue
        for block in content or ():
            parts.append(("cache_control" in block, str(block.get("text", "")) if block.get("type") == "text"
                          else json.dumps(block)))
    return parts
