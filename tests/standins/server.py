"""What both loopback API stubs share (tests.standins.messages_api for the Messages API, tests.standins.openai_api for
OpenAI-compatible servers): a recorded answer (StubResponse, JSON on disk), a request as it arrived
(RecordedRequest), simulated outages, and StubServer, the base that holds the queue of answers and the
outage and starts and stops the HTTP server.

A response file is JSON: {"status": 200, "headers": {...}, "body": {...} or "text", "delay_s": 0}.
"""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
class Outage:
    """A simulated outage: answer `left` more requests (None: until end_outage()) with `status`."""

    status: int
    left: int | None
    retry_after: str | None


def read_body(handler: Any) -> bytes | None:
    """The request body a BaseHTTPRequestHandler announced with content-length, or None when the client hung up
    before sending all of it (kbench killed mid-request: a test closing the app while a review is in flight).
    No server answers a request it never fully received, so a stand-in drops it rather than judging an empty body."""
    length = int(handler.headers.get("content-length") or 0)
    raw = handler.rfile.read(length) if length else b""
    if len(raw) < length:
        handler.close_connection = True
        return None
    return raw


class StubServer:
    """What both loopback stubs (engine/llm/stub.py and engine/llm/stub_openai.py) share: the queue of recorded
    answers, simulated outages, the server's start and end. A subclass sets _queue, _outage, _lock, _server,
    _thread."""

    OUTAGE_STATUS = 529
    URL_PATH = ""
    _queue: list[StubResponse]
    _outage: Outage | None
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
            self._outage = Outage(status or self.OUTAGE_STATUS, count, retry_after)

    def end_outage(self) -> None:
        with self._lock:
            self._outage = None

    def _take_outage(self) -> tuple[Outage, dict[str, str]] | None:
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

    def _listen(self, host: str, handler: type, name: str) -> None:
        """The HTTP server on an ephemeral loopback port, served from a daemon thread once started."""
        self._server = ThreadingHTTPServer((host, 0), handler)
        self._server.daemon_threads = True
        # A short poll interval keeps shutdown (once per test) from costing half a second.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=name, daemon=True)

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
