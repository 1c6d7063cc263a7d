"""`kbench evolve` with `[llm] provider = "openai-compatible"`, as people run their own servers: the installed console
script, the key in the environment (or none, for a local server), the config in ~/.config/kbench/config.toml,
and a stand-in of vLLM or llama.cpp that enforces what that server enforces (tests.standins.openai_rules).

Each run is one translate-only generation (`--no-baseline --generations 0`): the proposals are committed, then
compiled; without a GPU they wait for one (exit 3), on a GPU they are checked and timed (exit 0).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.acceptance.conftest import OPENAI_KEY
from tests.conftest import HAS_GPU
from tests.standins.openai_api import StubOpenAIAPI
from tests.standins.openai_rules import VLLM, LlamaCpp, prompt_tokens
from tests.standins.scripted import ScriptedModel

pytestmark = pytest.mark.slow
SESSION = "gelu_bias-fwd-openai"


def _configure(user, api: StubOpenAIAPI, extra: str = "") -> None:
    user.config(f'[llm]\nprovider = "openai-compatible"\nbase_url = "{api.url}"\nmodel = "{api.model}"\n{extra}')


def _evolve(user, *more: str):
    out = user.run("evolve", "gelu_bias", "--no-baseline", "--generations", "0", "--population", "1", *more,
                   timeout=900)
    return out, out.stdout + out.stderr


def _candidates(user) -> list[dict]:
    out = user.run("log", SESSION, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)["candidates"]


def _committed(user, out, text: str) -> dict:
    """The one proposed candidate: committed, compiled, and waiting for a GPU (exit 3), or on a GPU correct and
    timed (exit 0)."""
    assert out.returncode == (0 if HAS_GPU else 3), text
    cands = _candidates(user)
    assert len(cands) == 1, f"{cands}\n{text}"
    c = cands[0]
    assert c["proposer"] == "openai" and c["operator"] == "translate", c
    assert c["verdicts"].get("compile") == "pass", f"{c}\n{text}"
    if HAS_GPU:
        assert c["verdicts"].get("correctness") == "pass" and c["measurements"] >= 1, f"{c}\n{text}"
    return c


def _answer_form(user, candidate: dict) -> tuple[str, str]:
    """Where the candidate's files came from, as its commit's .kbench/candidate.json records it, and the line of
    its .kbench/prompt.md that shows the answer's tool call (what `kbench show-candidate --prompt` prints)."""
    out = user.run("show-candidate", candidate["id"], "--prompt")
    assert out.returncode == 0, out.stderr
    shown = next((ln for ln in out.stdout.splitlines() if ln.startswith("### Tool call")), "")
    meta = subprocess.run(["git", "show", f"{candidate['commit']}:.kbench/candidate.json"], cwd=user.workspace,
                          capture_output=True, text=True, env=user.env)
    assert meta.returncode == 0, meta.stderr
    return json.loads(meta.stdout)["meta"].get("answer_form", "tool_call"), shown


def test_a_key_in_the_environment_reaches_the_server_and_a_candidate_is_committed(user, vllm):
    vllm.respond(ScriptedModel())
    _configure(user, vllm)
    out, text = _evolve(user)
    assert vllm.rejected == [], vllm.rejected
    posts = vllm.completions()
    assert posts and all(r.headers.get("authorization") == f"Bearer {OPENAI_KEY}" for r in vllm.requests), text
    assert sorted({r.json["tools"][0]["function"]["name"] for r in posts}) == ["submit_kernel", "submit_verdict"]
    c = _committed(user, out, text)
    assert c["verdicts"]["llm_verify"] == "pass" and c["model"] == vllm.model, c


def test_a_32k_context_vllm_gets_max_tokens_that_fit(user, vllm):
    """vLLM before 0.32 refuses prompt + max_tokens above max_model_len; a 32k server refused every proposal
    sent with [llm] max_tokens = 32000."""
    vllm.flavour = VLLM(max_model_len=32768)
    vllm.respond(ScriptedModel())
    _configure(user, vllm)
    out, text = _evolve(user)
    assert vllm.rejected == [], [m for _, _, m in vllm.rejected]
    for r in vllm.completions():
        assert r.json["max_tokens"] + prompt_tokens(r.json) <= 32768, r.json["max_tokens"]
    _committed(user, out, text)


def test_a_context_the_server_does_not_list_is_learnt_from_its_refusal(user, vllm):
    """Behind a proxy that hides max_model_len, the first refusal says the context and the prompt's count:
    that proposal is sent once more with what fits, and every later request fits from the start."""
    vllm.flavour = VLLM(max_model_len=32768, listed=False)
    vllm.respond(ScriptedModel())
    _configure(user, vllm)
    out, text = _evolve(user)
    assert len(vllm.rejected) == 1 and "maximum context length is 32768" in vllm.rejected[0][2], vllm.rejected
    _committed(user, out, text)


def test_a_kernel_answered_in_fenced_code_blocks_is_used(user, vllm):
    vllm.respond(ScriptedModel(behaviour="fenced"))
    _configure(user, vllm)
    out, text = _evolve(user)
    c = _committed(user, out, text)
    form, shown = _answer_form(user, c)
    assert form == "fenced" and "read from fenced code blocks" in shown, (form, shown)


def test_a_vllm_without_a_tool_parser_gets_auto_then_no_tools_and_answers_in_text(user, vllm):
    """`vllm serve MODEL` without --enable-auto-tool-choice --tool-call-parser refuses a named tool_choice and
    "auto" (400); kbench steps down once for the process and reads the answers from the text."""
    vllm.flavour = VLLM(tool_parser=None, auto_tool_choice=False)
    vllm.respond(ScriptedModel())
    _configure(user, vllm)
    out, text = _evolve(user)
    choices = [r.json.get("tool_choice", "none sent") for r in vllm.completions()]
    assert choices[:3] == [{"type": "function", "function": {"name": "submit_kernel"}}, "auto", "none sent"], choices
    assert set(choices[3:]) == {"none sent"} and len(choices) > 3, choices       # remembered: verifiers too
    assert [s for _, s, _ in vllm.rejected] == [400, 400], vllm.rejected
    assert "refused a named tool_choice" in text and "--tool-call-parser" in text, text
    c = _committed(user, out, text)
    assert c["verdicts"]["llm_verify"] == "pass", c      # the verdicts came back as JSON in the text
    assert _answer_form(user, c)[0] == "fenced"


def test_a_local_llama_cpp_without_a_key_and_without_jinja(user):
    """llama-server without --jinja refuses tools; its context is meta.n_ctx on /v1/models. No key: api_key_env = ""."""
    with StubOpenAIAPI(flavour=LlamaCpp(n_ctx=16384, jinja=False)) as api:
        api.respond(ScriptedModel())
        _configure(user, api, 'api_key_env = ""\n')
        out, text = _evolve(user)
        posts = api.completions()
        assert all(r.headers.get("authorization") == "Bearer not-needed" for r in posts)
        assert "tools" not in posts[-1].json and posts[-1].json["max_tokens"] < 16384, posts[-1].json
        _committed(user, out, text)


def test_a_slow_local_model_is_streamed(user, vllm):
    """At 250 tokens/s the kernel takes longer than timeout_s = 2 to write: sent whole, every attempt times out
    (the session pauses as the API unavailable); streamed, the chunks keep coming and the tool call is
    accumulated from its deltas."""
    vllm.tokens_per_s = 250
    vllm.respond(ScriptedModel())
    _configure(user, vllm, "timeout_s = 2\noutage_minutes = 0.2\n")
    out, text = _evolve(user)
    assert all(r.json.get("stream") is True and r.json["stream_options"] == {"include_usage": True}
               for r in vllm.completions()), text
    c = _committed(user, out, text)
    assert c["verdicts"]["llm_verify"] == "pass", c
