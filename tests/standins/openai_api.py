"""A stub OpenAI-compatible chat completions endpoint on loopback (what vLLM, SGLang, Ollama and LiteLLM
serve), for tests of the openai-compatible provider through the real `openai` SDK.

- `POST /v1/chat/completions` checks the request as such servers do for tool calling (messages present,
  `tools` are `function` tools with a JSON-schema `parameters` object, a named `tool_choice` names one of
  them, max_tokens positive and at most `max_model_len`), then answers the next queued response; a queued
  answer that calls a function only goes to a request offering it.
- `outage(status, count, retry_after)` answers 429 / 503 before anything else, as the Anthropic stub does
  (the queue, outages and the server's start and stop are tests.standins.server's StubServer).
- `GET /v1/models` lists the served model (vLLM's answer), so a client can check the endpoint.

Build answers with `tool_call_completion(name, arguments)`, or `completion_from_message(body)` to turn a
recorded Messages API answer (tests/fixtures/llm/*.json) into the same answer in chat-completions form.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.standins.server import Outage, RecordedRequest, StubResponse, StubServer


def oai_error(message: str, kind: str = "BadRequestError", code: int | str = 400) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


class StubOpenAIAPI(StubServer):
    OUTAGE_STATUS = 503
    URL_PATH = "/v1"

    def __init__(self, host: str = "127.0.0.1", *, model: str = "qwen3-coder-30b", max_model_len: int = 65536):
        self.model = model
        self.max_model_len = max_model_len
        self._queue: list[StubResponse] = []
        self.requests: list[RecordedRequest] = []
        self.rejected: list[tuple[RecordedRequest, str]] = []
        self._outage: Outage | None = None
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/v1/models"):
                    model = {"id": stub.model, "object": "model", "owned_by": "stub",
                             "max_model_len": stub.max_model_len}
                    self._send(StubResponse(200, {"object": "list", "data": [model]}))
                else:
                    self._send(StubResponse(404, oai_error(f"no route {self.path}", "NotFoundError", 404)))

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                rec = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
                with stub._lock:
                    stub.requests.append(rec)
                self._send(stub._answer(rec))

            def _send(self, resp: StubResponse) -> None:
                data = json.dumps(resp.body).encode()
                try:
                    self.send_response(resp.status)
                    for k, v in {"content-type": "application/json", **resp.headers}.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="kbench-stub-openai", daemon=True)

    def _answer(self, rec: RecordedRequest) -> StubResponse:
        with self._lock:
            if (hit := self._take_outage()) is not None:
                o, headers = hit
                return StubResponse(o.status, oai_error("the server is overloaded, try again later",
                                                        "ServiceUnavailableError", o.status), headers)
        if not rec.path.rstrip("/").endswith("/v1/chat/completions"):
            return StubResponse(404, oai_error(f"no route {rec.path}", "NotFoundError", 404))
        try:
            body = rec.json
        except ValueError:
            return StubResponse(400, oai_error("the request body is not JSON"))
        problem = self.check(body)
        if problem is not None:
            with self._lock:
                self.rejected.append((rec, problem))
            return StubResponse(400, oai_error(problem))
        offered = {t["function"]["name"] for t in body.get("tools") or ()}
        with self._lock:
            for i, resp in enumerate(self._queue):
                if resp.tool is None or resp.tool in offered:
                    return self._queue.pop(i)
        return StubResponse(500, oai_error("stub: no recorded response left for this request", "InternalServerError",
                                           500))

    def check(self, body: Any) -> str | None:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            return "messages: field required"
        if body.get("model") != self.model:
            return f"The model `{body.get('model')}` does not exist."
        mt = body.get("max_tokens", body.get("max_completion_tokens"))
        if mt is not None and (not isinstance(mt, int) or mt < 1 or mt > self.max_model_len):
            return (f"max_tokens must be at least 1 and at most max_model_len={self.max_model_len}; got {mt}. "
                    "This model's maximum context length is exceeded.")
        names = []
        for t in body.get("tools") or ():
            fn = t.get("function") if isinstance(t, dict) else None
            if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                    or not isinstance(fn.get("name"), str) or not isinstance(fn.get("parameters"), dict):
                return "tools: each tool must be {type: function, function: {name, parameters}}"
            names.append(fn["name"])
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            if name not in names:
                return f"tool_choice names {name!r}, which is not among the tools"
        elif choice not in (None, "auto", "none", "required"):
            return f"tool_choice: unknown value {choice!r}"
        return None


def tool_call_completion(name: str, arguments: dict[str, Any] | str, *, model: str = "qwen3-coder-30b",
                         prompt_tokens: int = 2000, completion_tokens: int = 1500, cached_tokens: int = 0,
                         finish_reason: str = "tool_calls", content: str | None = None,
                         reasoning: str | None = None) -> StubResponse:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "function": {"name": name, "arguments": args}}]}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    body = {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": 1790000000,
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": cached_tokens}}}
    return StubResponse(200, body, tool=name)


def text_completion(text: str, *, model: str = "qwen3-coder-30b", finish_reason: str = "stop") -> StubResponse:
    body = {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": 1790000000,
            "model": model, "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                         "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}}
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
