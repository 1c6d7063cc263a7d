"""A stub Messages API on loopback that enforces today's request rules and replays recorded answers: for
tests and offline demos.

    with StubMessagesAPI() as api:
        api.queue(StubResponse.from_file("tests/fixtures/llm/ok_translate.json"))
        client = LLMClient(cfg, api_key="test", ...)   # cfg.base_url = api.url
        ...
        api.requests[0].json["tools"][0]["name"] == "submit_kernel"

It is a real HTTP server (threading http.server on 127.0.0.1, an ephemeral port), so the real SDK and its
transport are exercised end to end; nothing leaves the machine.

- `POST /v1/messages` is first checked against the rules the API documents for the requested model
  (tests.standins.claude_rules: the registry, STUB_MODELS, and the check): a request the API would refuse answers
  400 invalid_request_error (404 for an unknown model) with the API's wording. A valid request takes the
  next queued response whose tool matches one the request offers (a recorded answer calling
  `submit_verdict` only goes to a verifier's request), or any untargeted one; with `"stream": true` it is
  sent as server-sent events. An empty queue answers 500, which a test will notice.
- `outage(status, count, retry_after)` answers the next `count` requests (None: until `end_outage()`) with
  429 rate_limit_error or 529 overloaded_error and a retry-after header, before any rule is checked.
- `GET /v1/models/{id}` answers the Models API's ModelInfo with its `capabilities` object.

The queue, outages and the server's start and stop are tests.standins.server's StubServer, shared with
the OpenAI-compatible stub (tests.standins.openai_api); the bodies sent are built by tests.standins.claude_bodies.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.standins.claude_bodies import error_body, model_info, sse_events
from tests.standins.claude_rules import STUB_MODELS, StubModel, check_request
from tests.standins.server import Outage, RecordedRequest, StubResponse, StubServer


class StubMessagesAPI(StubServer):
    def __init__(self, host: str = "127.0.0.1", *, enforce: bool = True, models: dict[str, StubModel] | None = None):
        self._queue: list[StubResponse] = []
        self.requests: list[RecordedRequest] = []
        self.rejected: list[tuple[RecordedRequest, str]] = []   # requests the rules refused, with the message
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
        """(status, error type, message) for a request the API would refuse, else None (tests.standins.claude_rules)."""
        return check_request(self.models, body)

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
