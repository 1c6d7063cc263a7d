"""engine.llm.tools: answers become files, or a reason that names what was wrong."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import BINDING, KERNEL, REPO, reply_from  # noqa: E402

from engine.llm.errors import AnswerError  # noqa: E402
from engine.llm.tools import (SUBMIT_KERNEL, SUBMIT_VERDICT, directives_answer, kernel_answer, slug,  # noqa: E402
                              unbalanced, verdict_answer)


def test_good_answer():
    ans = kernel_answer(reply_from("ok_translate"))
    assert ans.files == {"kernel.cu": KERNEL, "binding.cpp": BINDING}
    assert ans.name == "two-pass-layernorm" and ans.rationale.startswith("One block per row")


def test_fenced_files_are_unwrapped_and_names_slugged():
    ans = kernel_answer(reply_from("ok_fenced"))
    assert ans.files["kernel.cu"] == KERNEL and ans.files["binding.cpp"] == BINDING
    assert kernel_answer(reply_from("ok_mutate_cached")).name == "wider-blocks"


@pytest.mark.parametrize("fixture, words", [
    ("no_tool_prose", ["prose instead of calling submit_kernel", "Welford"]),
    ("prose_code", ["code in prose instead of calling submit_kernel"]),
    ("truncated_max_tokens", ["truncated at max_tokens"]),
    ("truncated_braces", ["kernel_cu looks truncated", "unclosed '{'"]),
    ("not_cuda", ["does not look like CUDA", "no __global__"]),
    ("torch_in_kernel", ["torch headers"]),
    ("wrong_files", ["wrong files", "kernel.cu", "main.cpp", "missing kernel_cu", "binding_cpp unless"]),
    ("wrong_tool", ["unknown tool 'write_file'"]),
    ("elided", ["elides code", "rest of the kernel unchanged"]),
    ("empty_binding", ["binding_cpp is empty"]),
    ("no_export", ['does not export "forward"']),
])
def test_bad_answers_are_named(fixture, words):
    with pytest.raises(AnswerError) as err:
        kernel_answer(reply_from(fixture))
    assert not err.value.stop and err.value.kind == "answer"
    for w in words:
        assert w in str(err.value)


def test_cut_off_before_any_tool_call_and_refusal_and_empty():
    base = reply_from("no_tool_prose")
    with pytest.raises(AnswerError, match="cut off at max_tokens before calling submit_kernel"):
        kernel_answer(replace(base, stop_reason="max_tokens"))
    with pytest.raises(AnswerError, match="refused"):
        kernel_answer(replace(base, stop_reason="refusal"))
    with pytest.raises(AnswerError, match="empty"):
        kernel_answer(replace(base, text="  "))


def test_backward_export_is_required_for_backward():
    with pytest.raises(AnswerError, match='"backward"'):
        kernel_answer(reply_from("ok_translate"), direction="backward")


def test_pybind_is_required():
    r = reply_from("ok_translate")
    r = replace(r, tool_input={**r.tool_input, "binding_cpp": "int forward() { return 0; }  // \"forward\""})
    with pytest.raises(AnswerError, match="no PYBIND11_MODULE"):
        kernel_answer(r)


def test_verdict_and_directives_answers():
    v = verdict_answer(reply_from("verdict_fail"))
    assert v.verdict == "fail" and v.confidence == 0.92 and "bounds check" in v.reasons[0]
    r = reply_from("verdict_pass")
    with pytest.raises(AnswerError, match="pass or fail"):
        verdict_answer(replace(r, tool_input={"verdict": "maybe", "confidence": 1, "reasons": []}))
    clamped = verdict_answer(replace(r, tool_input={"verdict": "pass", "confidence": 7, "reasons": "one"}))
    assert clamped.confidence == 1.0 and clamped.reasons == ["one"]
    with pytest.raises(AnswerError, match="unknown tool"):
        verdict_answer(reply_from("ok_translate"))
    d = directives_answer(reply_from("directives"))
    assert d.directives.startswith("1. Keep the centred") and "offset-mean" in d.rationale


def test_schemas_are_closed():
    for tool in (SUBMIT_KERNEL, SUBMIT_VERDICT):
        schema = tool["input_schema"]
        assert schema["additionalProperties"] is False and set(schema["required"]) <= set(schema["properties"])
    assert set(SUBMIT_KERNEL["input_schema"]["properties"]) == {"name", "rationale", "kernel_cu", "binding_cpp"}


@pytest.mark.parametrize("src, problem", [
    ("int main() { return 0; }", None),
    ('const char* s = "}{"; char c = \'{\'; // {\n/* } */ int x[2] = {1, 2};', None),
    ("auto s = R\"raw( { )raw\"; int n = 1'000'000;", None),
    ("void f() {\n  if (x) {\n", "2 unclosed '{'"),
    ("void f() { g(1]; }", "unmatched ']'"),
    ("/* never closed", "never closes"),
    ('const char* s = "abc', "never closes"),
])
def test_unbalanced(src, problem):
    got = unbalanced(src)
    assert (got is None) if problem is None else (problem in got)


def test_slug():
    assert slug("Vectorised float4 Loads!") == "vectorised-float4-loads"
    assert slug(None) == "candidate" and slug("***") == "candidate" and len(slug("a" * 100)) == 48


def _baselines():
    return sorted(p for p in (REPO / "tasks").glob("*/baselines/*") if (p / "kernel.cu").is_file()
                  and (p / "binding.cpp").is_file())


@pytest.mark.parametrize("folder", _baselines(), ids=lambda p: f"{p.parts[-3]}-{p.name}")
def test_real_baselines_pass_the_answer_checks(folder):
    """No false alarms: every hand-written baseline of the suite would be accepted as an answer."""
    r = replace(reply_from("ok_translate"), tool_input={
        "name": "baseline", "rationale": "", "kernel_cu": (folder / "kernel.cu").read_text(),
        "binding_cpp": (folder / "binding.cpp").read_text()})
    kernel_answer(r, direction=folder.name)
