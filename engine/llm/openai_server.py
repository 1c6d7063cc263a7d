"""What kbench learns about one OpenAI-compatible server in a process: its context length and the tool_choice
it takes, and how the servers say so.

Context length. vLLM and SGLang list it on `GET /v1/models` as `max_model_len`; llama.cpp's `llama-server`
as `meta.n_ctx` (the context of one slot); Ollama and OpenAI do not list it (`[llm] context_tokens` then
says it). A server refuses a request that does not fit with a 400 whose wording differs by server and
version (vLLM, SGLang, llama.cpp, Ollama, LiteLLM, OpenAI: docs/formats.md "OpenAI-compatible servers");
`overflow` reads the context and the prompt's token count from any of them, so the request can be sent
once more with what fits.

tool_choice. A server without a tool-call parser refuses a named tool_choice (vLLM: `tool_choice=function
"NAME" requires --tool-call-parser to be set`) and "auto" (`"auto" tool choice requires
--enable-auto-tool-choice and --tool-call-parser to be set`); an old llama.cpp without `--jinja` refuses
tools altogether, and Ollama refuses them for a model without the tools capability. `ServerFacts.step_down`
moves from a named tool to "auto" to no tools at all (the answer then comes as text, engine.llm.fenced),
once for the process.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from engine.llm.errors import InvalidRequest, LLMError

TOOL_MODES = ("named", "auto", "text")   # tool_choice naming the tool, tool_choice "auto", no tools (text)

# The chat template wraps every message and the tool definitions in tokens of its own.
_PER_MESSAGE = 16
_TEMPLATE = 64
_FLOOR = 256                # the least max_tokens asked for where a context is known


@dataclass
class ServerFacts:
    """What one server (base_url, model) told kbench in this process."""

    context: int | None = None      # tokens; None: not known
    looked: bool = False            # GET /v1/models was asked (once)
    tool_mode: str = "named"
    # held while /v1/models is asked, so that calls starting together wait for the answer instead of guessing
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def step_down(self, to: str) -> bool:
        """Send tools as `to` from now on, if that is a step down from the present mode."""
        if TOOL_MODES.index(to) <= TOOL_MODES.index(self.tool_mode):
            return False
        self.tool_mode = to
        return True


_facts: dict[tuple[str, str], ServerFacts] = {}
_facts_lock = threading.Lock()


def facts_for(base_url: str, model: str, *, force_tool: bool = True) -> ServerFacts:
    with _facts_lock:
        key = (base_url.rstrip("/"), model)
        if key not in _facts:
            _facts[key] = ServerFacts(tool_mode="named" if force_tool else "auto")
        return _facts[key]


def context_from_models(entries: list[dict[str, Any]], model: str) -> int | None:
    """The context length a `/v1/models` listing gives for `model`: the entry with its id, else the only
    entry (llama.cpp serves one model under its file name, whatever a request calls it)."""
    mine = [e for e in entries if isinstance(e, dict) and e.get("id") == model]
    if not mine and len(entries) == 1 and isinstance(entries[0], dict):
        mine = entries
    for entry in mine:
        meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
        for value in (entry.get("max_model_len"), meta.get("n_ctx"), entry.get("context_length")):
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def estimate_prompt_tokens(params: dict[str, Any]) -> int:
    """An upper estimate of the prompt's tokens as the server counts them (its tokenizer is unknown): one
    token per 3 bytes of UTF-8, which code and prose tokenize above, plus the chat template's wrapping."""
    size = sum(len(str(m.get("content") or "").encode()) for m in params.get("messages") or ())
    if params.get("tools"):
        size += len(json.dumps(params["tools"]).encode())
    return size // 3 + _PER_MESSAGE * len(params.get("messages") or ()) + _TEMPLATE


def fit_max_tokens(wanted: int, context: int | None, prompt: int) -> int:
    """At most `wanted`, and what the context leaves after the prompt (never the whole context: vLLM refuses
    max_tokens above it). Where the estimate leaves less than a little, the little is still asked for: a
    server that counts a shorter prompt then answers, and one that refuses says its own count, which the
    one retry uses."""
    if context is None:
        return wanted
    room = max(context - prompt, _FLOOR)
    return max(1, min(wanted, room, context - 1))


# -- a request that does not fit ---------------------------------------------------------------------

class ContextOverflow(LLMError):
    """The server refused the request as longer than its context. `context` and `prompt_tokens` are what its
    message says (None where it does not); `at_least`: the prompt count is a lower bound (vLLM stops counting)."""

    kind = "too_long"
    stop = False

    def __init__(self, message: str, *, context: int | None, prompt_tokens: int | None, at_least: bool = False,
                 status_code: int | None = 400):
        super().__init__(message, status_code=status_code)
        self.context = context
        self.prompt_tokens = prompt_tokens
        self.at_least = at_least


_OVERFLOW = re.compile(r"context length|context size|context window|max_model_len|maximum model length|"
                       r"context_length_exceeded|contextwindowexceeded|prompt is too long|input is too long|"
                       r"too many tokens|requested token count exceeds", re.IGNORECASE)
_CONTEXT = [re.compile(p, re.IGNORECASE) for p in (
    r"maximum context length (?:is|of) (\d+)",               # vLLM, OpenAI, SGLang (prompt + completion)
    r"max_model_len=(?:max_total_tokens=)?(\d+)",             # vLLM: max_tokens above the context
    r"maximum model length of (\d+)",                         # vLLM: a prompt exactly the context
    r"available context size \((\d+) tokens\)",               # llama.cpp
    r"context length \((\d+) tokens\)",                       # SGLang: the prompt alone
    r"context window of (\d+)",                              # gateways in front of vLLM
)]
_PROMPT = [re.compile(p, re.IGNORECASE) for p in (
    r"prompt contains (at least )?(\d+) (?:input tokens|characters)",   # vLLM 0.20+
    r"()(\d+) in the messages",                               # vLLM 0.8, OpenAI
    r"request has ()(\d+) input tokens",                      # vLLM 0.10
    r"()(\d+) tokens from the input messages",                # SGLang
    r"messages resulted in ()(\d+) tokens",                   # OpenAI, prompt only
    r"request \(()(\d+) tokens\) exceeds",                    # llama.cpp
    r"the input \(()(\d+) tokens\)",                          # SGLang, prompt only
    r"decoder prompt \(length ()(\d+)\)",                     # vLLM, prompt exactly the context
)]


def overflow(detail: str, body: dict[str, Any] | None = None, status_code: int | None = 400) -> ContextOverflow | None:
    """The refusal as a ContextOverflow when `detail` (the error message) says the request is longer than the
    context; else None. llama.cpp's body also carries `n_ctx` and `n_prompt_tokens`."""
    if not _OVERFLOW.search(detail):
        return None
    body = body or {}
    context = body.get("n_ctx") if isinstance(body.get("n_ctx"), int) else None
    prompt = body.get("n_prompt_tokens") if isinstance(body.get("n_prompt_tokens"), int) else None
    at_least = False
    for p in _CONTEXT:
        if context is None and (m := p.search(detail)):
            context = int(m.group(1))
    for p in _PROMPT:
        if prompt is None and (m := p.search(detail)):
            if "characters" in m.group(0):
                break                    # vLLM counted characters, not tokens: no count to use
            at_least, prompt = bool(m.group(1)), int(m.group(2))
    return ContextOverflow(f"the request does not fit the model's context ({status_code} {detail})",
                           context=context, prompt_tokens=prompt, at_least=at_least, status_code=status_code)


# -- a server that refuses tools ---------------------------------------------------------------------

_NO_TOOLS = re.compile(r'"auto" tool choice requires|enable-auto-tool-choice|tools param requires|'
                       r"does not support tools|tools? (?:are|is) not supported", re.IGNORECASE)
# a tool_choice the server cannot honour (not one that names a tool kbench did not send: that is kbench's bug)
_TOOL_CHOICE = re.compile(r"(?:tool_choice|tool choice).*(?:requires|support|not allowed)|"
                          r"(?:support|allow)\w*.*(?:tool_choice|tool choice)", re.IGNORECASE | re.DOTALL)


class ToolsRefused(InvalidRequest):
    """A 400 that refuses the tools as sent; `to` is the mode to send instead."""

    def __init__(self, detail: str, to: str):
        super().__init__(f"the API refused the request (400): {detail}", status_code=400)
        self.detail = detail
        self.to = to


def tool_refusal(detail: str, mode: str) -> str | None:
    """The mode to step down to when a 400 with `detail` refuses what `mode` sent, else None."""
    if mode == "text":
        return None
    if _NO_TOOLS.search(detail):
        return "text"
    if _TOOL_CHOICE.search(detail):
        return "auto" if mode == "named" else "text"
    return None
