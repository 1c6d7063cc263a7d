"""A tool call written as text (engine.llm.fenced): read back into the tool's input, and then held to the same
checks as a tool call's."""

from __future__ import annotations

import json

import pytest

from engine.llm.accounting import Usage
from engine.llm.client import LLMReply
from engine.llm.errors import AnswerError
from engine.llm.fenced import input_from_text, text_answer_instruction
from engine.llm.tools import SUBMIT_KERNEL, SUBMIT_VERDICT, kernel_answer
from tests.paths import REPO

BASE = REPO / "tasks" / "gelu_bias" / "baselines" / "forward"
KERNEL = (BASE / "kernel.cu").read_text()
BINDING = (BASE / "binding.cpp").read_text()


def fence(lang: str, code: str) -> str:
    return f"```{lang}\n{code.rstrip()}\n```"


def checked(text: str):
    """The kernel answer a reply of this text gives, as the OpenAI-compatible client builds it."""
    found = input_from_text(text, SUBMIT_KERNEL)
    assert found is not None
    reply = LLMReply("m", "end_turn", "submit_kernel", found.input, text, "", Usage(), 0.0, 1, answer_form=found.form)
    return found, kernel_answer(reply)


def test_files_in_fenced_blocks_named_by_their_content():
    text = (f"Here is a fused kernel. It reads x once.\n\n{fence('cuda', KERNEL)}\n\nAnd the glue:\n\n"
            f"{fence('cpp', BINDING)}\n")
    found, ans = checked(text)
    assert found.form == "fenced"
    assert ans.files == {"kernel.cu": KERNEL.rstrip() + "\n", "binding.cpp": BINDING.rstrip() + "\n"}
    assert ans.rationale.startswith("Here is a fused kernel") and ans.name == "candidate"


def test_a_name_line_and_file_names_before_the_blocks_or_in_first_line_comments():
    text = (f"**Name:** `vectorised-gelu`\n\nRationale: float4 loads.\n\n### binding.cpp\n{fence('c++', BINDING)}\n\n"
            f"{fence('', '// kernel.cu' + chr(10) + KERNEL)}\n")
    found, ans = checked(text)
    assert ans.name == "vectorised-gelu" and ans.rationale == "float4 loads."
    assert ans.files["binding.cpp"] == BINDING.rstrip() + "\n" and ans.files["kernel.cu"].startswith("// kernel.cu")


def test_a_kernel_only_answer_and_two_versions_of_one_file():
    kernel_only = KERNEL.replace("gelu_bias_forward_launch", "kb_forward")
    assert input_from_text(fence("cuda", kernel_only), SUBMIT_KERNEL).input["kernel_cu"] == kernel_only.rstrip()
    twice = f"First try:\n{fence('cuda', KERNEL)}\nBetter:\n{fence('cuda', KERNEL + '// v2')}"
    assert input_from_text(twice, SUBMIT_KERNEL) is None       # which one is meant would be a guess
    assert input_from_text("Use float4 loads: `__global__ void k()`.", SUBMIT_KERNEL) is None
    assert input_from_text(fence("python", "import torch"), SUBMIT_KERNEL) is None


def test_the_checks_of_a_tool_call_still_apply():
    elided = KERNEL[:KERNEL.index("__global__") + 200] + "\n// ... rest of the kernel unchanged\n"
    with pytest.raises(AnswerError, match="elides code"):
        checked(f"kernel.cu:\n{fence('cuda', elided)}\n{fence('cpp', BINDING)}")
    unbalanced = KERNEL.rstrip().rstrip("}")
    with pytest.raises(AnswerError, match="looks truncated"):
        checked(f"{fence('cuda', unbalanced)}\n{fence('cpp', BINDING)}")
    one_file = KERNEL + "\n" + BINDING.replace("#include", "// #include")
    with pytest.raises(AnswerError, match="PYBIND11_MODULE but no binding_cpp"):
        checked(fence("cuda", one_file))      # a whole extension in one .cu: the torch glue is not split off


@pytest.mark.parametrize("wrap", [
    lambda o: fence("json", json.dumps(o)),
    lambda o: json.dumps(o),
    lambda o: "<tool_call>\n" + json.dumps({"name": "submit_verdict", "arguments": o}) + "\n</tool_call>",
    lambda o: "Verdict:\n" + fence("json", json.dumps({"name": "submit_verdict", "arguments": json.dumps(o)})),
])
def test_a_call_written_as_json(wrap):
    obj = {"verdict": "fail", "confidence": 0.8, "reasons": ["reads past the row"]}
    found = input_from_text(wrap(obj), SUBMIT_VERDICT)
    assert found is not None and found.form == "json" and found.input == obj


def test_json_that_is_not_the_tool_input_is_not_taken():
    assert input_from_text(fence("json", '{"shape": [1024, 4096]}'), SUBMIT_VERDICT) is None
    assert input_from_text(fence("json", '{"verdict": "pass",'), SUBMIT_VERDICT) is None


def test_the_instruction_names_the_tool_and_the_form_the_reader_takes():
    assert "```cuda" in text_answer_instruction(SUBMIT_KERNEL) and "name:" in text_answer_instruction(SUBMIT_KERNEL)
    verdict = text_answer_instruction(SUBMIT_VERDICT)
    assert "submit_verdict" in verdict and "```json" in verdict and '"confidence"' in verdict
