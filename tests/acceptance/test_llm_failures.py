"""What a user sees when the LLM's answers are not kernels: `kbench evolve` started as a user starts it (the
installed console script, the key in the environment, the rule-enforcing Messages API stand-in), its model
answering with prose, a refusal, a malformed or truncated tool call, or the API refusing the request as too
large or too long. Each session ends non-zero with one line naming the LLM, the tries and the reasons, and
every answer that was paid for is kept in the workspace, readable from `kbench log` and `show-candidate`.

`--no-baseline` makes generation 0 translations, so nothing compiles unless an answer is usable."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.standins.claude_rules import STUB_MODELS
from tests.standins.scripted import ScriptedModel

SESSION = "gelu_bias-fwd-anthropic"
EVOLVE = ("evolve", "gelu_bias", "--proposer", "anthropic", "--no-baseline", "--population", "2",
          "--generations", "1", "--no-verify")


def _failed(user) -> list[dict]:
    out = user.run("log", SESSION, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["failed_proposals"]


def _stopped_line(out) -> str:
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("kbench:")]
    assert lines, out.stdout + out.stderr
    return lines[-1]


@pytest.mark.parametrize("behaviour, words", [
    ("prose", "the model answered with prose instead of calling submit_kernel"),
    ("refusal", "the model refused to answer"),
    ("malformed", "wrong files in submit_kernel"),
    ("elided", "kernel_cu elides code"),
])
def test_answers_that_are_not_kernels_end_the_session_non_zero_and_are_kept(user, claude, behaviour, words):
    claude.respond(ScriptedModel(behaviour=behaviour))
    out = user.run(*EVOLVE, timeout=300)
    line = _stopped_line(out)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the LLM gave no usable answer in 6 tries" in line and words in line, line
    assert f"kbench log {SESSION}" in line
    failed = _failed(user)
    assert len(failed) == 6 and all(words in f["reason"] for f in failed), failed
    assert sum(f["cost_usd"] for f in failed) > 0
    shown = user.run("show-candidate", failed[0]["id"])
    assert shown.returncode == 0, shown.stderr
    assert "## Prompt" in shown.stdout and "## Answer" in shown.stdout and "# Task: gelu_bias" in shown.stdout
    if behaviour == "prose":
        assert "fuse the bias add into the GELU" in shown.stdout          # the whole answer, not a summary
        assert "### Thinking (summary)" in shown.stdout                    # display: summarized was asked for
    log = user.run("log", SESSION)
    assert "failed proposals: 6 answer(s) gave no candidate" in log.stdout, log.stdout


def test_an_answer_cut_twice_at_max_tokens_keeps_its_files_as_far_as_they_got(user, claude):
    user.config("[llm]\nmax_tokens = 1500\n")
    claude.respond(ScriptedModel(padding_tokens=20000))      # longer than 1500 and than 3000 tokens
    out = user.run(*EVOLVE, timeout=300)
    line = _stopped_line(out)
    assert out.returncode == 1 and "the LLM gave no usable answer in 6 tries" in line, out.stdout + out.stderr
    assert "at max_tokens" in line and "cut again when asked once more with twice the room" in line, line
    kernels = [r.json["max_tokens"] for r in claude.messages() if r.json["tools"][0]["name"] == "submit_kernel"]
    assert sorted(set(kernels)) == [1500, 3000] and len(kernels) == 12, kernels   # each proposal asked again once
    fid = _failed(user)[0]["id"]
    assert user.run("show-candidate", fid).stdout.count("stop_reason: max_tokens") == 2
    got = user.run("checkout", fid, "salvage")
    assert got.returncode == 0, got.stderr
    drafts = sorted(p.name for p in (user.cwd / "salvage").iterdir())
    assert drafts == ["binding.cpp", "kernel.cu"] or drafts == ["kernel.cu"], drafts


@pytest.mark.slow
def test_an_answer_cut_at_max_tokens_is_asked_again_with_more_room(user, claude):
    user.config("[llm]\nmax_tokens = 1500\n")
    claude.respond(ScriptedModel(padding_tokens=1000))        # over 1500 tokens, under 3000
    out = user.run(*EVOLVE, "--population", "1", "--generations", "0", timeout=900)
    assert claude.rejected == []
    kernels = [r.json["max_tokens"] for r in claude.messages() if r.json["tools"][0]["name"] == "submit_kernel"]
    assert kernels == [1500, 3000], (kernels, out.stdout, out.stderr)
    log = json.loads(user.run("log", SESSION, "--json").stdout)
    assert len(log["candidates"]) == 1 and log["failed_proposals"] == [], log
    prompt = user.run("show-candidate", log["candidates"][0]["id"], "--prompt").stdout
    assert "### Answer 1 of 2" in prompt and "### Answer 2 of 2" in prompt


def test_a_request_the_api_finds_too_large_ends_the_session_with_the_apis_reason(user, claude):
    claude.max_request_bytes = 8000                  # a proxy with a small body limit answers 413
    claude.respond(ScriptedModel())
    out = user.run(*EVOLVE, timeout=300)
    line = _stopped_line(out)
    assert out.returncode == 1 and "the request is too large (413" in line, out.stdout + out.stderr
    assert "the LLM gave no usable answer in" in line


def test_a_model_with_a_small_context_ends_the_session_with_the_apis_reason(user, claude):
    claude.models["claude-small-context"] = replace(STUB_MODELS["claude-opus-5-5"], context=1000)
    user.config('[llm]\nmodel = "claude-small-context"\n')
    claude.respond(ScriptedModel())
    out = user.run(*EVOLVE, timeout=300)
    line = _stopped_line(out)
    assert out.returncode == 1 and "prompt is too long" in line, out.stdout + out.stderr
    assert "the LLM gave no usable answer in" in line
