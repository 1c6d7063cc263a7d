"""The bodies an OpenAI-compatible stand-in sends: a chat completion, the same answer as server-sent chunks, and
a scripted model's answer (tests.standins.scripted) as a server of a flavour would render it.

Streaming follows what vLLM, llama.cpp, SGLang and Ollama send (their serving code: vLLM serving_chat.py,
llama.cpp `format_oai_sse`, Ollama middleware/openai.go) and what the openai SDK accumulates
(openai/lib/streaming/_deltas.py `accumulate_delta`: list entries merged by `index`, strings concatenated):
`data: {chunk}` frames ending with `data: [DONE]`; the first chunk carries `delta.role`; a tool call's first
delta carries its `index`, `id`, `type` and `function.name`, later ones only `index` and pieces of
`function.arguments`; `finish_reason` comes on a last chunk with an empty delta; with
`stream_options.include_usage` a final chunk with `choices: []` carries the usage
(openai/types/chat/chat_completion_stream_options_param.py).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.standins.scripted import Answer, tokens_of

PIECE = 96          # characters of text or arguments per streamed delta


def completion(message: dict[str, Any], finish_reason: str, *, model: str, prompt_tokens: int,
               completion_tokens: int, details: dict[str, Any] | None = None) -> dict[str, Any]:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens, **(details or {})}
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": 1790000000,
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage}


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "function": {"name": name, "arguments": arguments}}


def scripted(answer: Answer, body: dict[str, Any], flavour: Any, *, model: str, prompt_tokens: int,
             room: int) -> dict[str, Any]:
    """The completion a flavour's server sends for a scripted model's answer: reasoning, text and the tool call's
    arguments in the order the model writes them, cut where `room` (tokens) runs out (finish_reason
    "length"); a call the server cannot extract stays in the text as the model wrote it (`<tool_call>` tags)."""
    reasoning = "\n".join(b.get("thinking", "") for b in answer.content if b["type"] == "thinking")
    text = "\n".join(b.get("text", "") for b in answer.content if b["type"] == "text")
    call = next((b for b in answer.content if b["type"] == "tool_use"), None)
    if answer.stop_reason == "refusal" and not text:
        text = "I can't help with that."
    if call is not None and not flavour.extracts_calls(body):
        written = json.dumps({"name": call["name"], "arguments": call["input"]})
        text = f"{text}\n<tool_call>\n{written}\n</tool_call>".lstrip()
        call = None
    arguments = json.dumps(call["input"]) if call is not None else ""
    left, cut, kept = room, False, []
    for piece in (reasoning, text, arguments):
        need = tokens_of(piece) if piece else 0
        if need > left:
            piece, cut = piece[: max(0, left) * 4], True
            need = left
        kept.append(piece)
        left -= need
    reasoning, text, arguments = kept
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if reasoning:
        message[flavour.reasoning_key] = reasoning
    if call is not None and (arguments or not cut):
        message["tool_calls"] = [tool_call(call["name"], arguments)]
    used = room - left if cut else sum(tokens_of(p) for p in kept if p)
    finish = flavour.finish(body, called="tool_calls" in message, cut=cut)
    return completion(message, finish, model=model, prompt_tokens=prompt_tokens, completion_tokens=used,
                      details=flavour.usage_details(prompt_tokens))


def chunks(body: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """A chat completion as the chunks a server streams it in."""
    head = {"id": body.get("id"), "object": "chat.completion.chunk", "created": body.get("created"),
            "model": body.get("model")}
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}

    def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}

    out = [delta({"role": "assistant", "content": ""})]
    for key in ("reasoning", "reasoning_content", "content"):
        text = message.get(key) or ""
        out += [delta({key: text[i:i + PIECE]}) for i in range(0, len(text), PIECE)]
    for index, call in enumerate(message.get("tool_calls") or ()):
        fn = call.get("function") or {}
        out.append(delta({"tool_calls": [{"index": index, "id": call.get("id"), "type": "function",
                                          "function": {"name": fn.get("name"), "arguments": ""}}]}))
        args = fn.get("arguments") or ""
        out += [delta({"tool_calls": [{"index": index, "function": {"arguments": args[i:i + PIECE]}}]})
                for i in range(0, len(args), PIECE)]
    out.append(delta({}, choice.get("finish_reason") or "stop"))
    if include_usage and body.get("usage"):
        out.append({**head, "choices": [], "usage": body["usage"]})
    return out


def chunk_tokens(chunk: dict[str, Any]) -> int:
    """The tokens a chunk carries (for a stand-in that generates at a given rate)."""
    total = 0
    for choice in chunk.get("choices") or ():
        d = choice.get("delta") or {}
        for key in ("reasoning", "reasoning_content", "content"):
            total += tokens_of(d[key]) if d.get(key) else 0
        for call in d.get("tool_calls") or ():
            args = (call.get("function") or {}).get("arguments")
            total += tokens_of(args) if args else 0
    return total
