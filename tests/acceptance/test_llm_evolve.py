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
