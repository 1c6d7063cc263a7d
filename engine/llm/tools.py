"""The tools answers must come through, and the checks that turn an answer into files or a clear failure.

Answers are checked here, before anything is committed or compiled: a missing tool call, prose instead
of code, truncated or elided files, torch headers in kernel.cu or fields under the wrong names each
become an AnswerError whose message is recorded as the failed proposal's reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from engine.candidates import defines_launcher
from engine.llm.client import LLMReply
from engine.llm.errors import AnswerError

SUBMIT_KERNEL: dict[str, Any] = {
    "name": "submit_kernel",
    "description": ("Submit one complete candidate in the native split format: kernel.cu (CUDA device code and "
                    "launchers, no torch headers) and binding.cpp (torch glue with PYBIND11_MODULE). Omit "
                    "binding_cpp when kernel_cu defines the launcher the task context declares (kb_forward / "
                    "kb_backward): kbench then generates binding.cpp from the task signature. "
                    "The files are compiled exactly as sent."),
    "input_schema": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "A short name: a few lowercase words joined by hyphens."},
            "rationale": {"type": "string",
                          "description": "What this candidate does differently and why it should be correct and fast."},
            "kernel_cu": {"type": "string",
                          "description": "The complete kernel.cu: device code and launchers; CUDA only."},
            "binding_cpp": {"type": "string",
                            "description": "The complete binding.cpp: argument checks, allocation, launcher calls "
                                           "on the current stream, PYBIND11_MODULE. Omit it to have kbench "
                                           "generate it, where the task context declares a launcher ABI."},
        },
        "required": ["name", "rationale", "kernel_cu"],
        "additionalProperties": False,
    },
}

SUBMIT_VERDICT: dict[str, Any] = {
    "name": "submit_verdict",
    "description": "Submit the review verdict for the candidate.",
    "input_schema": {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["pass", "fail"]},
            # no minimum/maximum: strict tool schemas do not take numerical constraints (clamped when read)
            "confidence": {"type": "number", "description": "How sure you are of the verdict, from 0 to 1."},
            "reasons": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["verdict", "confidence", "reasons"],
        "additionalProperties": False,
    },
}

SUBMIT_DIRECTIVES: dict[str, Any] = {
    "name": "submit_directives",
    "description": "Submit the new optimisation directives for later prompts.",
    "input_schema": {
        "type": "object",
        "properties": {
            "directives": {"type": "string", "description": "The full directives, as a Markdown list."},
            "rationale": {"type": "string", "description": "Why these directives, from the evidence."},
        },
        "required": ["directives", "rationale"],
        "additionalProperties": False,
    },
}

# A Triton answer ([llm] languages has "triton"): kernel_py instead of kernel_cu and binding_cpp.
KERNEL_PY_FIELD: dict[str, Any] = {
    "type": "string",
    "description": ("Instead of kernel_cu (and binding_cpp): a complete Triton kernel.py that defines the task's "
                    "launcher as the task context's Triton skeleton shows (same name and parameters), launching "
                    "@triton.jit kernels; kbench generates binding.py. Send either kernel_py or kernel_cu.")}


def submit_kernel_tool(languages: tuple[str, ...] | list[str] = ("cuda",)) -> dict[str, Any]:
    """submit_kernel for the languages an answer may use ([llm] languages): CUDA's fields, Triton's, or both."""
    if "triton" not in languages:
        return SUBMIT_KERNEL
    schema = SUBMIT_KERNEL["input_schema"]
    props = {k: v for k, v in schema["properties"].items() if "cuda" in languages or k in ("name", "rationale")}
    props["kernel_py"] = KERNEL_PY_FIELD
    description = ("Submit one complete candidate: a Triton kernel.py (kernel_py) defining the task's launcher"
                   if "cuda" not in languages else
                   SUBMIT_KERNEL["description"] + " Or, instead of kernel_cu, a Triton kernel.py (kernel_py) defining "
                   "the task's launcher: kbench then generates binding.py")
    required = ["name", "rationale"] + ([] if "cuda" in languages else ["kernel_py"])
    return {**SUBMIT_KERNEL, "description": description,
            "input_schema": {**schema, "properties": props, "required": required}}


# tool field -> candidate file
KERNEL_FIELDS = {"kernel_cu": "kernel.cu", "binding_cpp": "binding.cpp", "kernel_py": "kernel.py"}
# binding_cpp omitted: a kernel-only candidate (engine/tasks/glue/generated.py)
REQUIRED_KERNEL_FIELDS = ("kernel_cu",)

_TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](torch|ATen|c10)/', re.MULTILINE)
_PYBIND = re.compile(r"\bPYBIND11_MODULE\s*\(")
_GLOBAL = re.compile(r"\b__global__\b")
_ELIDED = re.compile(
    r"^\s*(//|/\*)?\s*(\.\.\.|…)\s*(\*/)?\s*$"  # a line that is only "..." (optionally commented)
    r"|(rest|remainder) of (the )?(code|file|kernel|implementation)[^\n]{0,40}(unchanged|as before|omitted|same)",
    re.MULTILINE | re.IGNORECASE)
_FENCED = re.compile(r"^\s*```[\w+-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class KernelAnswer:
    name: str
    rationale: str
    files: dict[str, str]


@dataclass(frozen=True)
class VerdictAnswer:
    verdict: str  # pass | fail
    confidence: float
    reasons: list[str]


@dataclass(frozen=True)
class DirectivesAnswer:
    directives: str
    rationale: str


def tool_input(reply: LLMReply, tool: dict[str, Any]) -> dict[str, Any]:
    """The input of the expected tool call, or an AnswerError that says what came instead."""
    name = tool["name"]
    if reply.tool_name is None:
        if reply.stop_reason == "max_tokens":
            raise AnswerError(f"the answer was cut off at max_tokens before calling {name} (raise [llm] max_tokens)")
        if reply.stop_reason == "refusal":
            raise AnswerError("the model refused to answer")
        text = reply.text.strip()
        if not text:
            raise AnswerError(f"the answer was empty: no text and no {name} tool call")
        kind = "code in prose" if ("```" in text or _GLOBAL.search(text)) else "prose"
        raise AnswerError(f"the model answered with {kind} instead of calling {name}: {_clip(text)}")
    if reply.tool_name != name:
        raise AnswerError(f"the model called an unknown tool {reply.tool_name!r} instead of {name}")
    if not isinstance(reply.tool_input, dict):
        raise AnswerError(f"the {name} call had no readable input")
    if reply.stop_reason == "max_tokens":
        raise AnswerError(f"the {name} call was truncated at max_tokens (raise [llm] max_tokens)")
    return reply.tool_input


def kernel_answer(reply: LLMReply, direction: str = "forward",
                  languages: tuple[str, ...] | list[str] = ("cuda",)) -> KernelAnswer:
    """Check a submit_kernel answer and return its files: kernel.cu and binding.cpp, or kernel.cu alone (a
    kernel-only candidate, whose binding the task's signature generates: it must define kb_<direction>), or,
    where `languages` has triton, a Triton kernel.py alone (triton_answer)."""
    tool = submit_kernel_tool(languages)
    data = tool_input(reply, tool)
    if "kernel_py" in data and "triton" in languages:
        return triton_answer(data, direction)
    if "cuda" not in languages:
        raise AnswerError("submit_kernel carried no kernel_py: this session takes Triton answers only "
                          "([llm] languages)")
    allowed = set(SUBMIT_KERNEL["input_schema"]["properties"])
    unexpected = sorted(set(data) - allowed)
    missing = [f for f in REQUIRED_KERNEL_FIELDS if f not in data]
    if unexpected or missing:
        parts = []
        if unexpected:
            parts.append(f"unexpected field(s) {', '.join(unexpected)}")
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        raise AnswerError(f"wrong files in submit_kernel: {'; '.join(parts)} "
                          "(expected kernel_cu, and binding_cpp unless kernel_cu defines the task's launcher)")
    files: dict[str, str] = {}
    fields = {f: rel for f, rel in KERNEL_FIELDS.items() if f in data}
    for field_name, rel in fields.items():
        value = data[field_name]
        if not isinstance(value, str):
            raise AnswerError(f"{field_name} is not text")
        text = _unfence(value)
        if not text.strip():
            raise AnswerError(f"{field_name} is empty")
        files[rel] = text if text.endswith("\n") else text + "\n"
    kernel, binding = files["kernel.cu"], files.get("binding.cpp")
    if not _GLOBAL.search(kernel):
        raise AnswerError(f"kernel_cu does not look like CUDA: no __global__ kernel in it ({_clip(kernel, 120)})")
    if _TORCH_INCLUDE.search(kernel):
        raise AnswerError("kernel_cu includes torch headers (torch/, ATen/ or c10/); they belong in binding_cpp")
    if binding is None:
        launcher = f"kb_{direction}"
        if _PYBIND.search(kernel):
            raise AnswerError("kernel_cu has a PYBIND11_MODULE but no binding_cpp came with it: the torch glue "
                              f"belongs in binding_cpp (or omit the glue and define {launcher})")
        if not re.search(rf"\b{launcher}\s*\(", kernel):
            raise AnswerError(f"binding_cpp was omitted, so kernel_cu must define the launcher {launcher} that the "
                              "task context declares (kbench generates the binding that calls it)")
    else:
        if not _PYBIND.search(binding):
            raise AnswerError("binding_cpp has no PYBIND11_MODULE")
        if f'"{direction}"' not in binding:
            raise AnswerError(f'binding_cpp does not export "{direction}" from its PYBIND11_MODULE')
    for field_name, rel in fields.items():
        if m := _ELIDED.search(files[rel]):
            raise AnswerError(f"{field_name} elides code ({m.group(0).strip()!r}); files must be complete")
        problem = unbalanced(files[rel])
        if problem:
            raise AnswerError(f"{field_name} looks truncated: {problem}")
    rationale = data.get("rationale")
    return KernelAnswer(name=slug(data.get("name")), rationale=rationale.strip() if isinstance(rationale, str) else "",
                        files=files)


_TRITON_JIT = re.compile(r"@\s*(?:triton|tl)\s*\.\s*jit\b|\bimport\s+triton\b")


def triton_answer(data: dict[str, Any], direction: str) -> KernelAnswer:
    """A Triton answer: kernel_py alone, valid Python, defining kb_<direction> and a @triton.jit kernel, complete."""
    extra = sorted(set(data) - {"name", "rationale", "kernel_py"})
    if extra:
        raise AnswerError(f"wrong files in submit_kernel: kernel_py comes alone, without {', '.join(extra)}")
    value = data["kernel_py"]
    if not isinstance(value, str) or not _unfence(value).strip():
        raise AnswerError("kernel_py is empty" if isinstance(value, str) else "kernel_py is not text")
    text = _unfence(value)
    text = text if text.endswith("\n") else text + "\n"
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise AnswerError(f"kernel_py is not valid Python (line {exc.lineno}: {exc.msg}); it may be truncated") from None
    if m := _ELIDED.search(text):
        raise AnswerError(f"kernel_py elides code ({m.group(0).strip()!r}); files must be complete")
    launcher = f"kb_{direction}"
    if not defines_launcher(text, launcher):
        raise AnswerError(f"kernel_py must define the launcher {launcher} that the task context's Triton skeleton "
                          "shows (kbench generates the binding that calls it)")
    if not _TRITON_JIT.search(text):
        raise AnswerError("kernel_py has no @triton.jit kernel: the work must be done by Triton kernels")
    rationale = data.get("rationale")
    return KernelAnswer(name=slug(data.get("name")), rationale=rationale.strip() if isinstance(rationale, str) else "",
                        files={"kernel.py": text})


def verdict_answer(reply: LLMReply) -> VerdictAnswer:
    data = tool_input(reply, SUBMIT_VERDICT)
    verdict = data.get("verdict")
    if verdict not in ("pass", "fail"):
        raise AnswerError(f"submit_verdict: verdict must be pass or fail, got {verdict!r}")
    try:
        confidence = min(1.0, max(0.0, float(data.get("confidence", 0.0))))
    except (TypeError, ValueError):
        raise AnswerError(f"submit_verdict: confidence is not a number ({data.get('confidence')!r})") from None
    reasons = data.get("reasons") or []
    if isinstance(reasons, str):
        reasons = [reasons]
    return VerdictAnswer(verdict, confidence, [str(r) for r in reasons])


def directives_answer(reply: LLMReply) -> DirectivesAnswer:
    data = tool_input(reply, SUBMIT_DIRECTIVES)
    directives = data.get("directives")
    if not isinstance(directives, str) or not directives.strip():
        raise AnswerError("submit_directives: directives are empty")
    rationale = data.get("rationale")
    return DirectivesAnswer(directives.strip(), rationale.strip() if isinstance(rationale, str) else "")


def unbalanced(source: str) -> str | None:
    """Why the braces, brackets and parentheses of C/C++/CUDA source do not balance, or None.

    Comments, string and character literals are skipped, so a '{' in a printf format does not count."""
    pairs = {"}": "{", ")": "(", "]": "["}
    stack: list[tuple[str, int]] = []
    i, n, line = 0, len(source), 1
    while i < n:
        c = source[i]
        if c == "\n":
            line += 1
        elif source.startswith("//", i):
            j = source.find("\n", i)
            i = n if j < 0 else j
            continue
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            if j < 0:
                return f"a /* comment opened on line {line} never closes"
            line += source.count("\n", i, j)
            i = j + 2
            continue
        elif c == 'R' and source.startswith('R"', i) and (i == 0 or not (source[i - 1].isalnum() or source[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', source[i:])
            if m:
                end = source.find(f"){m.group(1)}\"", i + m.end())
                if end < 0:
                    return f"a raw string opened on line {line} never closes"
                line += source.count("\n", i, end)
                i = end + len(m.group(1)) + 2
                continue
        elif c == "'" and _in_number(source, i):  # a C++14 digit separator (1'000), not a char literal
            pass
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                if source[j] == "\\":
                    j += 1
                elif source[j] == "\n":
                    break  # an unterminated literal ends at the line; the compiler will say more
                j += 1
            if j >= n:
                return f"a {'string' if c == chr(34) else 'character'} literal on line {line} never closes"
            i = j if source[j] == "\n" else j + 1
            continue
        elif c in "{([":
            stack.append((c, line))
        elif c in "})]":
            if not stack or stack[-1][0] != pairs[c]:
                return f"unmatched '{c}' on line {line}"
            stack.pop()
        i += 1
    if stack:
        opener, at = stack[-1]
        return f"{len(stack)} unclosed '{opener}' (the last opened on line {at}); the file ends at line {line}"
    return None


def _in_number(source: str, i: int) -> bool:
    j = i
    while j > 0 and (source[j - 1].isalnum() or source[j - 1] in "_'."):
        j -= 1
    return j < i and source[j].isdigit() and i + 1 < len(source) and source[i + 1].isalnum()


def slug(name: Any, default: str = "candidate") -> str:
    if not isinstance(name, str):
        return default
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:48].strip("-")
    return s or default


def _unfence(text: str) -> str:
    # Models sometimes wrap a file in a Markdown fence even inside a tool field; the fence is not code.
    m = _FENCED.match(text)
    return m.group(1) if m else text


def _clip(text: str, limit: int = 200) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"
