"""A tool call written as text, read back into the tool's input.

OpenAI-compatible servers hand a model's tool call back as plain text when they cannot extract it: vLLM and
SGLang without a tool-call parser for the model, a parser that misses the model's format (vLLM's parsers
return the whole output as `content` on a miss), Ollama and llama.cpp with some chat templates, and every
server when kbench sent no tools because the server refused them. The call then sits in `content`: a JSON
object (in a ```json block, inside `<tool_call>` tags, or bare), or, for submit_kernel, the files in fenced
code blocks. `input_from_text` reads either back into the input the tool call would have carried; the caller
marks where it came from, and engine.llm.tools checks it exactly as a tool call's (complete files, no
elisions, balanced braces). `text_answer_instruction` is what a request without tools asks for instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"^[ \t]*(?P<bar>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)\n[ \t]*(?P=bar)[ \t]*$",
                    re.MULTILINE | re.DOTALL)
_TOOL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_CODE_LANGS = {"", "cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp", "python", "py"}
_FILE_NAME = re.compile(r"\b(kernel\.cu|binding\.cpp|kernel\.py)\b")
_TRITON = re.compile(r"@\s*triton\s*\.\s*jit\b")
_PYBIND = re.compile(r"\bPYBIND11_MODULE\s*\(")
_GLOBAL = re.compile(r"\b__global__\b")
_NAME_LINE = re.compile(r"^[\s>*_#-]*name[\s*_`]*[:=][\s*_`]*(?P<name>[^\n`*]+?)[\s*_`]*$", re.IGNORECASE | re.MULTILINE)
_FILE_LINE = re.compile(r"^[\s>*_#`-]*(?:kernel\.cu|binding\.cpp|kernel\.py)[\s*_`:]*$", re.IGNORECASE | re.MULTILINE)
_RATIONALE_LABEL = re.compile(r"^[\s>*_#-]*rationale[\s*_`]*[:=][\s*_`]*", re.IGNORECASE | re.MULTILINE)
_FIELD_FOR_FILE = {"kernel.cu": "kernel_cu", "binding.cpp": "binding_cpp", "kernel.py": "kernel_py"}


@dataclass(frozen=True)
class TextInput:
    """A tool's input found in an answer's text; `form` says how it was written: "json" or "fenced"."""

    input: dict[str, Any]
    form: str


def input_from_text(text: str, tool: dict[str, Any]) -> TextInput | None:
    """The input of a `tool` call written in `text`, or None when the text holds none (prose, a snippet, two
    versions of one file)."""
    if not text or not text.strip():
        return None
    found = _json_input(text, tool)
    if found is not None:
        return TextInput(found, "json")
    if tool["name"] == "submit_kernel":
        files = _kernel_from_fences(text)
        if files is not None:
            return TextInput(files, "fenced")
    return None


def text_answer_instruction(tool: dict[str, Any]) -> str:
    """What a request sent without tools asks for, so that input_from_text can read the answer."""
    name = tool["name"]
    head = f"This server takes no tool definitions, so do not call `{name}`: write its input as text."
    if name == "submit_kernel":
        return (f"{head} First a line `name: <a few lowercase words joined by hyphens>`, then the rationale, then "
                "each file complete in its own fenced block preceded by a line with its file name: kernel.cu in a "
                "```cuda block and binding.cpp in a ```cpp block (leave binding.cpp out where kernel.cu defines "
                "the launcher the task context declares; a Triton answer, where the task context offers one, is "
                "kernel.py alone in a ```python block).")
    schema = json.dumps(tool.get("input_schema") or {}, separators=(",", ":"))
    return f"{head} One ```json block holding the object `{name}` takes, with this JSON schema: {schema}"


# -- JSON ------------------------------------------------------------------------------------------------

def _json_input(text: str, tool: dict[str, Any]) -> dict[str, Any] | None:
    fields = set((tool.get("input_schema") or {}).get("properties") or ())
    pieces = [m.group(1) for m in _TOOL_TAG.finditer(text)]
    pieces += [m.group("body") for m in _FENCE.finditer(text)
               if _lang(m.group("info")) in ("json", "") and m.group("body").lstrip().startswith("{")]
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        pieces.append(stripped)
    for piece in pieces:
        try:
            obj = json.loads(piece)
        except ValueError:
            continue
        found = _unwrap(obj, tool["name"])
        if found is not None and fields & set(found):
            return found
    return None


def _unwrap(obj: Any, name: str) -> dict[str, Any] | None:
    """The tool's input from `obj`: the input itself, or a call around it ({"name", "arguments"}, as models
    trained on function calling write it, or {"function": {...}})."""
    if not isinstance(obj, dict):
        return None
    call = obj.get("function") if isinstance(obj.get("function"), dict) else obj
    if call.get("name") == name:
        args = call.get("arguments", call.get("parameters", call.get("input")))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None
        if isinstance(args, dict):
            return args
    return obj


# -- fenced files ----------------------------------------------------------------------------------------

def _kernel_from_fences(text: str) -> dict[str, Any] | None:
    files: dict[str, str] = {}
    prose: list[str] = []
    end = 0
    for m in _FENCE.finditer(text):
        before = text[end:m.start()]
        prose.append(before)
        end = m.end()
        if _lang(m.group("info")) not in _CODE_LANGS:
            continue
        body = m.group("body")
        rel = _file_of(m.group("info"), body, before)
        if rel is None:
            continue                     # a snippet that is neither file
        if rel in files:
            return None                  # two versions of one file: which one is meant is a guess
        files[rel] = body
    prose.append(text[end:])
    if "kernel.cu" not in files and "kernel.py" not in files:
        return None
    words = "\n".join(prose)
    name = _NAME_LINE.search(words)
    rationale = _FILE_LINE.sub("", _RATIONALE_LABEL.sub("", _NAME_LINE.sub("", words)))
    out: dict[str, Any] = {"name": name.group("name").strip() if name else "",
                           "rationale": " ".join(rationale.split())[:2000]}
    out.update({_FIELD_FOR_FILE[rel]: body for rel, body in files.items()})
    return out


def _file_of(info: str, body: str, before: str) -> str | None:
    """Which file a fenced block is: a name on its fence line, in a comment on its first line, or on the
    line before it; else what its code is (the torch glue, or device code)."""
    first = body.lstrip().split("\n", 1)[0]
    lines = [ln for ln in before.strip().split("\n") if ln.strip()]
    for where in (info, first if first.lstrip().startswith(("//", "/*")) else "", lines[-1] if lines else ""):
        names = set(_FILE_NAME.findall(where))
        if len(names) == 1:
            return names.pop()
    if _PYBIND.search(body) and not _GLOBAL.search(body):
        return "binding.cpp"
    if _GLOBAL.search(body):
        return "kernel.cu"
    if _TRITON.search(body):
        return "kernel.py"
    return None


def _lang(info: str) -> str:
    words = info.strip().split()
    return words[0].lower().lstrip("{.").rstrip("}") if words else ""
