"""`kbench evolve TASK --proposer anthropic` as a user with a key starts it: the installed console script, the
key in the environment, the Messages API behind a rule-enforcing stand-in, the real evaluator (on a machine
without a GPU the candidates compile and wait for one, exit 3)."""

from __future__ import annotations

import json

import pytest

from tests.acceptance.conftest import ANTHROPIC_KEY
from tests.standins.scripted import ScriptedModel


def _log(user, session: str) -> list[dict]:
    out = user.run("log", session, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["candidates"]


@pytest.mark.slow
def test_an_llm_session_started_with_a_key_reaches_the_llm_the_verifiers_and_the_compiler(user, claude):
    claude.respond(ScriptedModel())
    out = user.run("evolve", "gelu_bias", "--proposer", "anthropic", "--generations", "1", "--population", "2",
                   timeout=900)
    text = out.stdout + out.stderr
    assert claude.rejected == [], claude.rejected
    posts = claude.messages()
    assert posts, f"kbench sent no request to the API:\n{text}"
    assert all(ANTHROPIC_KEY in (r.headers.get("authorization", "") + r.headers.get("x-api-key", "")) for r in posts)
    tools = sorted({r.json["tools"][0]["name"] for r in posts})
    assert tools == ["submit_kernel", "submit_verdict"], tools
    # no GPU here: every candidate compiled and waits for one (exit 3), as the README says
    assert out.returncode == 3, text
    cands = _log(user, "gelu_bias-fwd-anthropic")
    proposed = [c for c in cands if c["operator"] != "baseline"]
    assert len(proposed) == 2, cands
    for c in proposed:
        assert c["proposer"] == "anthropic" and c["model"], c
        assert c["verdicts"]["llm_verify"] == "pass" and c["verdicts"]["compile"] == "pass", c
        assert c["measurements"] == 0 and "correctness" not in c["verdicts"], c
    # prompt caching as the API counts it: each candidate's first review writes the task + candidate prefix,
    # the other two read it; proposals after the first read the task context
    reviews = [u for u in claude.usage if u["tool"] == "submit_verdict"]
    assert len(reviews) == 6 and sum(1 for u in reviews if u["cache_write"]) == 2, reviews
    assert sum(1 for u in reviews if u["cache_read"]) == 4, reviews
    proposals = [u for u in claude.usage if u["tool"] == "submit_kernel"]
    assert proposals[0]["cache_write"] > 0 and all(u["cache_read"] > 0 for u in proposals[1:]), proposals
    # the user's next steps: the report of the session, and one candidate evaluated by hand
    report = user.run("report", "gelu_bias-fwd-anthropic")
    assert report.returncode == 0 and "LLM" in report.stdout, report.stdout + report.stderr
    best_try = proposed[0]["id"]
    assert user.run("checkout", best_try, "mine").returncode == 0
    ev = user.run("eval", "gelu_bias", "mine", timeout=600)
    assert ev.returncode == 3 and "compile" in ev.stdout and "PASS" in ev.stdout, ev.stdout + ev.stderr


@pytest.mark.gpu
def test_on_a_gpu_an_llm_session_started_with_a_key_reaches_gpu_verdicts(user, claude):
    claude.respond(ScriptedModel())
    out = user.run("evolve", "gelu_bias", "--proposer", "anthropic", "--generations", "1", "--population", "2",
                   "--no-compile-baseline", timeout=1200)
    print(out.stdout[-6000:], out.stderr[-3000:])
    assert out.returncode == 0 and claude.rejected == [], out.stdout + out.stderr
    cands = [c for c in _log(user, "gelu_bias-fwd-anthropic") if c["operator"] != "baseline"]
    assert len(cands) == 2
    for c in cands:
        v = c["verdicts"]
        assert v["llm_verify"] == v["compile"] == v["correctness"] == v["integrity"] == "pass", c
        assert v["timing"] in ("pass", "fail") and c["measurements"] == 1 and c["speedup_eager"], c
