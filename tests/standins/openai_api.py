"""A stand-in of an OpenAI-compatible server (vLLM, llama.cpp's llama-server) on loopback that enforces what
the real server enforces and says it in the server's words, for tests of the openai-compatible provider
through the real `openai` SDK.

    with StubOpenAIAPI(flavour=VLLM(max_model_len=32768), key="sk-...") as api:
        api.respond(ScriptedModel())            # answer each request from what it asks (tests.standins.scripted)
        api.queue(tool_call_completion(...))    # or: these answers first, in order
        ...
        api.completions()[0].json["max_tokens"]

- The rules and wordings of each flavour, with their sources, are in tests.standins.openai_rules: the
  context length on `GET /v1/models` (vLLM `max_model_len`, llama.cpp `meta.n_ctx`), the context-length 400
  in the flavour's body shape, which tool_choice a server without a tool parser refuses, `stream_options`,
  and the key (`--api-key`: 401 without `Authorization: Bearer KEY`).
- `POST /v1/chat/completions` that passes the rules takes the next queued answer whose tool the request
  offers (or any untargeted one); else the scripted model answers (`respond`) as the flavour's server
  renders it (tests.standins.openai_bodies.scripted): reasoning, text and tool call cut where the context or
  `max_tokens` runs out (finish_reason "length"), a call the server cannot extract left in the text.
  Neither: 500, which a test will notice.
- `"stream": true` answers with server-sent chunks (tests.standins.openai_bodies.chunks), usage last when
  `stream_options.include_usage` asks for it; a queued answer's `midstream_error` comes as an error event
  after the first chunk, as llama.cpp and vLLM send errors once a stream has begun. `tokens_per_s` makes the model generate at that rate: a
  streamed answer arrives chunk by chunk, a whole one only at the end (as a slow local model does).
- `outage(status, count, retry_after)` answers 429 / 503 before anything else (tests.standins.server).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.standins.openai_bodies import chunk_tokens, chunks, completion, scripted, tool_call
from tests.standins.openai_rules import VLLM, Flavour, prompt_tokens
from tests.standins.scripted import ScriptedModel, tokens_of
from tests.standins.server import Outage, RecordedRequest, StubResponse, StubServer, read_body


def oai_error(message: str, kind: str = "BadRequestError", code: int | str = 400) -> dict[str, Any]:
    """An error body in the flat shape (SGLang, vLLM before 0.10.1), for answers a test queues itself."""
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


class StubOpenAIAPI(StubServer):
    OUTAGE_STATUS = 503
    URL_PATH = "/v1"

    def __init__(self, host: str = "127.0.0.1", *, model: str = "qwen3-coder-30b", flavour: Flavour | None = None,
                 key: str | None = None, tokens_per_s: float | None = None, max_model_len: int | None = None):
        self.flavour = flavour if flavour is not None else VLLM(**({"max_model_len": max_model_len}
                                                                   if max_model_len else {}))
        self.model = model
        self.key = key
        self.tokens_per_s = tokens_per_s
        self.scripted_model: ScriptedModel | None = None
        self._queue: list[StubResponse] = []
        self.requests: list[RecordedRequest] = []      # every request, GETs included, in arrival order
        self.rejected: list[tuple[RecordedRequest, int, str]] = []   # refused by the rules: status, message
        self.abandoned = 0                             # requests whose client hung up before its body arrived
        self.answered: list[dict[str, Any]] = []       # every completion sent (streamed ones as accumulated)
        self._outage: Outage | None = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                rec = self._record("GET", b"")
                if (refusal := stub._auth(rec)) is not None:
                    self._send(refusal)
                elif self.path.split("?")[0].rstrip("/").endswith("/v1/models"):
                    self._send(StubResponse(200, stub.flavour.models(stub.model)))
                else:
                    self._send(StubResponse(404, stub.flavour.error(404, f"no route {self.path}").body))

            def do_POST(self) -> None:  # noqa: N802
                if (raw := read_body(self)) is None:
                    with stub._lock:
                        stub.abandoned += 1
                    return
                resp, stream = stub._answer(self._record("POST", raw))
                if resp.status == 200 and isinstance(resp.body, dict):
                    with stub._lock:
                        stub.answered.append(resp.body)
                if stream is not None and resp.status == 200 and isinstance(resp.body, dict):
                    self._send_stream(resp, stream)
                else:
                    if resp.status == 200 and stub.tokens_per_s and isinstance(resp.body, dict):
                        tokens = ((resp.body.get("usage") or {}).get("completion_tokens") or 0)
                        if stub._closing.wait(tokens / stub.tokens_per_s):
                            return
                    self._send(resp)

            def _record(self, method: str, raw: bytes) -> RecordedRequest:
                rec = RecordedRequest(method, self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
                with stub._lock:
                    stub.requests.append(rec)
                return rec

            def _send(self, resp: StubResponse) -> None:
                data = resp.body.encode() if isinstance(resp.body, str) else json.dumps(resp.body).encode()
                try:
                    self.send_response(resp.status)
                    for k, v in {"content-type": "application/json", **resp.headers}.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send_stream(self, resp: StubResponse, stream: dict[str, Any]) -> None:
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("cache-control", "no-cache")
                    self.send_header("connection", "close")
                    self.end_headers()
                    for i, chunk in enumerate(chunks(resp.body, include_usage=bool(stream.get("include_usage")))):
                        if stub.tokens_per_s and stub._closing.wait(chunk_tokens(chunk) / stub.tokens_per_s):
                            return
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        if i == 0 and resp.midstream_error is not None:
                            # a later error is an event of the stream (llama.cpp, vLLM): `data: {"error": ...}`
                            self.wfile.write(f"data: {json.dumps({'error': resp.midstream_error})}\n\n".encode())
                            self.close_connection = True
                            return
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._listen(host, Handler, "kbench-stub-openai")

    # -- the rules ---------------------------------------------------------------------------------------
    def _auth(self, rec: RecordedRequest) -> StubResponse | None:
        if self.key is None or rec.headers.get("authorization") == f"Bearer {self.key}":
            return None
        refusal = self.flavour.unauthorized()
        return StubResponse(refusal.status, refusal.body)

    def _answer(self, rec: RecordedRequest) -> tuple[StubResponse, dict[str, Any] | None]:
        """The response, and the stream options when it is to be streamed (None: one JSON body)."""
        if (refusal := self._auth(rec)) is not None:
            return refusal, None
        with self._lock:
            if (hit := self._take_outage()) is not None:
                o, headers = hit
                err = self.flavour.error(o.status, "The engine is currently busy and cannot accept new requests. "
                                                   "Please try again later or on a different instance.",
                                         kind="Service Unavailable")
                return StubResponse(o.status, err.body, headers), None
        if not rec.path.split("?")[0].rstrip("/").endswith("/v1/chat/completions"):
            return StubResponse(404, self.flavour.error(404, f"no route {rec.path}").body), None
        try:
            body = rec.json
        except ValueError:
            return StubResponse(400, self.flavour.error(400, "the request body is not JSON").body), None
        if not isinstance(body, dict):
            return StubResponse(400, self.flavour.error(400, "the request body is not an object").body), None
        refusal = self.flavour.check(body, self.model)
        if refusal is not None:
            with self._lock:
                self.rejected.append((rec, refusal.status, _message(refusal.body)))
            return StubResponse(refusal.status, refusal.body), None
        stream = (body.get("stream_options") or {}) if body.get("stream") else None
        offered = {(t.get("function") or {}).get("name") for t in body.get("tools") or () if isinstance(t, dict)}
        with self._lock:
            for i, resp in enumerate(self._queue):
                if resp.tool is None or resp.tool == "*" or resp.tool in offered:
                    return self._queue.pop(i), stream
        if self.scripted_model is not None:
            answer = self.scripted_model.answer(body)
            return StubResponse(200, scripted(answer, body, self.flavour, model=self.model,
                                              prompt_tokens=prompt_tokens(body),
                                              room=self.flavour.output_room(body))), stream
        return StubResponse(500, self.flavour.error(500, "stub: no answer left for this request",
                                                    kind="InternalServerError").body), None

    # -- controls (and StubServer's) -------------------------------------------------------------------------
    def respond(self, model: ScriptedModel | None) -> None:
        """Answer requests that no queued response matches with `model` (None: stop)."""
        self.scripted_model = model

    def completions(self) -> list[RecordedRequest]:
        """The POSTs to /v1/chat/completions, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST"]

    def close(self) -> None:
        self._closing.set()
        super().close()


def _message(body: Any) -> str:
    err = body.get("error", body) if isinstance(body, dict) else body
    return str(err.get("message") if isinstance(err, dict) else err)


# -- answers a test queues ------------------------------------------------------------------------------------

def tool_call_completion(name: str, arguments: dict[str, Any] | str, *, model: str = "qwen3-coder-30b",
                         prompt_tokens: int = 2000, completion_tokens: int = 1500, cached_tokens: int = 0,
                         finish_reason: str = "tool_calls", content: str | None = None,
                         reasoning: str | None = None) -> StubResponse:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": [tool_call(name, args)]}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    body = completion(message, finish_reason, model=model, prompt_tokens=prompt_tokens,
                      completion_tokens=completion_tokens,
                      details={"prompt_tokens_details": {"cached_tokens": cached_tokens}})
    return StubResponse(200, body, tool=name)


def text_completion(text: str, *, model: str = "qwen3-coder-30b", finish_reason: str = "stop") -> StubResponse:
    body = completion({"role": "assistant", "content": text}, finish_reason, model=model, prompt_tokens=1000,
                      completion_tokens=tokens_of(text))
    return StubResponse(200, body)


def completion_from_message(body: dict[str, Any], *, model: str = "qwen3-coder-30b") -> StubResponse:
    """A recorded Messages API answer (its first tool call, text and thinking) as a chat completion."""
    tool = next((b for b in body.get("content") or () if b.get("type") == "tool_use"), None)
    text = "\n".join(b.get("text", "") for b in body.get("content") or () if b.get("type") == "text") or None
    thinking = "\n".join(b.get("thinking", "") for b in body.get("content") or () if b.get("type") == "thinking")
    usage = body.get("usage") or {}
    if tool is None:
        return text_completion(text or "", model=model)
    return tool_call_completion(tool["name"], tool["input"], model=model,
                                prompt_tokens=int(usage.get("input_tokens", 0)),
                                completion_tokens=int(usage.get("output_tokens", 0)), content=text,
                                reasoning=thinking or None,
                                finish_reason="length" if body.get("stop_reason") == "max_tokens" else "tool_calls")

