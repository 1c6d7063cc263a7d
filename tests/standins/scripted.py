"""A scripted model behind the stand-ins: it answers each request from what the request asks for (the tool
it offers), as a model would, rather than from a queue a test fills in advance. Its answers have lengths,
and the stand-in cuts an answer longer than the request's `max_tokens` the way the API does (stop_reason
`max_tokens`, the tool input ending mid-string), so a client that asks for too little room meets a real
truncation.

    model = ScriptedModel(kernels=baseline_variants("gelu_bias"))     # every submit_kernel: a new variant
    model = ScriptedModel(behaviour="prose")                          # answers without calling the tool

Behaviours for submit_kernel requests: "kernel" (a complete candidate), "prose" (text, no tool call),
"refusal" (stop_reason refusal), "malformed" (a tool call whose input has the wrong fields),
"elided" (a file with "... rest unchanged"), "fenced" (the candidate's files in fenced code blocks of the
text, no tool call, as models that ignore the tools write). Verifier (submit_verdict) and directive
(submit_directives) requests always get a well-formed answer.

A request that offers no tool (an OpenAI-compatible server that refuses them) is answered in text, for the
tool the request's last message names: a kernel as fenced files after a `name:` line, anything else as a
```json block, as the request asks (engine.llm.fenced.text_answer_instruction).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.paths import REPO

KERNEL_BEHAVIOURS = ("kernel", "prose", "refusal", "malformed", "elided", "fenced")
_TOOL_NAMED = re.compile(r"\bsubmit_(?:kernel|verdict|directives)\b")


def tokens_of(text: str) -> int:
    """The stand-ins' token count: about four characters a token (independent of kbench's own estimate)."""
    return max(1, (len(text) + 3) // 4)


def baseline_variants(task: str, direction: str = "forward") -> Iterator[dict[str, str]]:
    """submit_kernel inputs: the task's shipped baseline, each with a comment that makes its source new."""
    folder = REPO / "tasks" / task / "baselines" / direction
    kernel = (folder / "kernel.cu").read_text()
    binding = (folder / "binding.cpp").read_text()
    for i in itertools.count(1):
        yield {"name": f"variant-{i}", "rationale": f"Variant {i}: the same grid, a different unroll comment.",
               "kernel_cu": f"{kernel.rstrip()}\n// variant {i}: unroll hint\n", "binding_cpp": binding}


@dataclass
class Answer:
    """What the model says: content blocks, before the stand-in cuts it to max_tokens."""

    content: list[dict[str, Any]]
    stop_reason: str = "tool_use"


@dataclass
class ScriptedModel:
    kernels: Iterator[dict[str, str]] | None = None
    behaviour: str = "kernel"
    thinking: str = "Looked at the memory traffic: one read of x and bias, one write of y."
    padding_tokens: int = 0          # extra length of each kernel.cu (to outgrow a small max_tokens)
    verdict: str = "pass"
    seconds_per_answer: float = 0.0  # a real model takes seconds to write: calls in flight then overlap for sure
    calls: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.behaviour not in KERNEL_BEHAVIOURS:
            raise ValueError(f"unknown behaviour {self.behaviour!r}")

    def answer(self, body: dict[str, Any]) -> Answer:
        tool = _offered(body)
        if tool is None:
            answer = self._answer(body, _named_in_text(body))
            return _as_text(answer)
        answer = self._answer(body, tool)
        return _as_text(answer) if self.behaviour == "fenced" and tool == "submit_kernel" else answer

    def _answer(self, body: dict[str, Any], tool: str | None) -> Answer:
        with self._lock:
            self.calls[tool or "-"] = self.calls.get(tool or "-", 0) + 1
        thinking = [{"type": "thinking", "thinking": self.thinking, "signature": "sig-stand-in"}]
        if tool == "submit_verdict":
            return Answer([{"type": "tool_use", "name": tool, "input": {
                "verdict": self.verdict, "confidence": 0.9, "reasons": ["indices stay inside the row"]}}])
        if tool == "submit_directives":
            return Answer(thinking + [{"type": "tool_use", "name": tool, "input": {
                "directives": "- keep one read of x per element\n- vectorise the bias load",
                "rationale": "the best candidates are memory-bound"}}])
        if self.behaviour == "prose":
            return Answer(thinking + [{"type": "text", "text": (
                "I would fuse the bias add into the GELU and use float4 loads where the row allows it. "
                "That should bring the kernel close to the copy bandwidth.")}], "end_turn")
        if self.behaviour == "refusal":
            return Answer([], "refusal")
        kernel = self._next_kernel()
        if self.behaviour == "malformed":
            kernel = {"name": kernel["name"], "rationale": kernel["rationale"], "cuda_source": kernel["kernel_cu"]}
        elif self.behaviour == "elided":
            cu = kernel["kernel_cu"]
            head = cu[: cu.index("\n", cu.index("__global__")) + 1]        # the kernel's signature, then "..."
            kernel = {**kernel, "kernel_cu": head + "    // ... rest of the kernel unchanged\n}\n"}
        if self.padding_tokens:      # a longer kernel: a table of constants after the code (4 chars a token)
            table = "".join(f"// lut {i:06d}\n" for i in range(self.padding_tokens // 4 + 1))
            kernel = {**kernel, "kernel_cu": kernel["kernel_cu"] + table}
        return Answer(thinking + [{"type": "tool_use", "name": tool or "submit_kernel", "input": kernel}])

    def _next_kernel(self) -> dict[str, str]:
        with self._lock:
            if self.kernels is None:
                self.kernels = baseline_variants("gelu_bias")
            return dict(next(self.kernels))


def _offered(body: dict[str, Any]) -> str | None:
    """The first tool a request offers (a Messages API tool, or an OpenAI `function` tool)."""
    for t in body.get("tools") or ():
        if isinstance(t, dict):
            return t.get("name") or (t.get("function") or {}).get("name")
    return None


def _named_in_text(body: dict[str, Any]) -> str | None:
    """The tool a request without tools asks to be answered for: the last one its last message names."""
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    names = _TOOL_NAMED.findall(text or "")
    return names[-1] if names else None


def _as_text(answer: Answer) -> Answer:
    """The answer with its tool call written as text instead: a kernel's files in fenced blocks, anything
    else as a ```json block."""
    call = next((b for b in answer.content if b["type"] == "tool_use"), None)
    if call is None:
        return answer
    data = call["input"]
    if call["name"] == "submit_kernel" and isinstance(data.get("kernel_cu"), str):
        text = f"name: {data.get('name', '')}\n\n{data.get('rationale', '')}\n\n```cuda\n{data['kernel_cu'].rstrip()}\n```\n"
        if isinstance(data.get("binding_cpp"), str):
            text += f"\n```cpp\n{data['binding_cpp'].rstrip()}\n```\n"
    else:
        text = f"```json\n{json.dumps(data, indent=1)}\n```\n"
    blocks = [b for b in answer.content if b["type"] != "tool_use"] + [{"type": "text", "text": text}]
    return Answer(blocks, "end_turn")


def cut_to(content: list[dict[str, Any]], max_tokens: int) -> tuple[list[dict[str, Any]], bool]:
    """The content as the API returns it when output stops at `max_tokens`: blocks up to the limit, the block
    that crosses it cut short (a tool input as far as its JSON got, parsed leniently as the SDK does)."""
    left = max_tokens
    out: list[dict[str, Any]] = []
    for block in content:
        text = _block_text(block)
        need = tokens_of(text)
        if need <= left:
            out.append(block)
            left -= need
            continue
        keep = text[: max(0, left * 4)]
        if block["type"] == "text":
            out.append({**block, "text": keep})
        elif block["type"] == "thinking":
            out.append({**block, "thinking": keep})
        elif block["type"] == "tool_use":
            out.append({**block, "input": partial_json(keep)})
        return out, True
    return out, False


def output_tokens(content: list[dict[str, Any]]) -> int:
    return sum(tokens_of(_block_text(b)) for b in content)


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return block.get("text", "")
    if kind == "thinking":
        return block.get("thinking", "")
    if kind == "tool_use":
        return json.dumps(block.get("input") or {})
    return json.dumps(block)


def partial_json(prefix: str) -> dict[str, Any]:
    """The fields of a JSON object whose text stops at `prefix`: complete fields kept, an open string field
    kept as far as it got (the SDK's partial parsing of a streamed tool input)."""
    decoder = json.JSONDecoder()
    out: dict[str, Any] = {}
    i = prefix.find("{") + 1
    while i and i < len(prefix):
        while i < len(prefix) and prefix[i] in " ,\n":
            i += 1
        try:
            key, i = decoder.raw_decode(prefix, i)
        except ValueError:
            break
        while i < len(prefix) and prefix[i] in " :":
            i += 1
        try:
            value, i = decoder.raw_decode(prefix, i)
        except ValueError:
            rest = prefix[i:]
            if rest.startswith('"'):
                try:
                    value = json.loads(_close_string(rest))
                except ValueError:
                    value = None
                if isinstance(value, str):
                    out[key] = value
            break
        out[key] = value
    return out


def _close_string(rest: str) -> str:
    if rest.endswith("\\") and not rest.endswith("\\\\"):
        rest = rest[:-1]
    return rest + '"'


Responder = Callable[[dict[str, Any]], Answer]
