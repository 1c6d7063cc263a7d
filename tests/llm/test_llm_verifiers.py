"""engine.llm.verifiers: three pre-GPU reviews through the stub API, and the aggregation rule."""

from __future__ import annotations

import sys
from dataclasses import replace

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import api, harness, layernorm, parent_candidate, recorded  # noqa: E402,F401

from engine.llm.verifiers import STAGE, aggregate, verify  # noqa: E402
from engine.verdict import Status, Verdict  # noqa: E402


def vote(status, conf=0.9, name="compile"):
    return Verdict(STAGE, status, f"{name}: {status.value}", {"verifier": name, "confidence": conf})


def test_aggregation_rule():
    P, F, S = Status.PASS, Status.FAIL, Status.SKIPPED
    assert aggregate([vote(P), vote(P), vote(P)], 0.7).status == P
    assert aggregate([vote(P), vote(F, 0.9, "memory"), vote(P)], 0.7).status == F
    assert aggregate([vote(F, 0.7)], 0.7).status == F  # at the threshold counts as confident
    low = aggregate([vote(P), vote(F, 0.4, "numerics"), vote(S)], 0.7)
    assert low.status == P and low.data["doubts"] == ["numerics: fail"] and "doubts" in low.reason
    assert aggregate([vote(S), vote(S)], 0.7).status == S
    assert aggregate([], 0.7).status == S
    assert all(v.stage == STAGE for v in (low,))
    assert len(low.data["votes"]) == 3 and low.data["min_confidence"] == 0.7


def test_three_verifiers_through_the_api(harness, layernorm):
    api = harness.api
    api.queue(recorded("verdict_pass"), recorded("verdict_fail"), recorded("verdict_fail_low"))
    cfg = harness.config()
    cfg = replace(cfg, verify=replace(cfg.verify, model="claude-haiku-4-5"))
    client = harness.client(cfg)
    cand = parent_candidate()
    result = verify(client, cfg, layernorm, "forward", cand, parallel=False)

    assert [v.data["verifier"] for v in result.votes] == ["compile", "memory", "numerics"]
    assert [v.status for v in result.votes] == [Status.PASS, Status.FAIL, Status.FAIL]
    assert result.verdict.status == Status.FAIL and result.verdict.reason.startswith("memory: fail (0.92)")
    assert result.votes[2].data["confidence"] == 0.35 and result.stop is None

    for sent, topic in zip(api.messages(), ("Review: compile", "Review: memory safety", "Review: numerics")):
        body = sent.json
        assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] == 8000
        # a model that lets thinking be switched off: off, and the verdict tool forced; Haiku 4.5 has no effort
        assert body["tool_choice"] == {"type": "tool", "name": "submit_verdict"}
        assert body["thinking"] == {"type": "disabled"} and "output_config" not in body
        context, prompt = body["messages"][0]["content"]
        # the task and the candidate are the prefix the three reviews share; about 2,300 tokens here, below
        # Haiku 4.5's caching minimum (4,096), so no breakpoint is sent for it
        assert "def forward_fn" in context["text"] and "__global__ void __launch_bounds__" in context["text"]
        assert "cache_control" not in context and topic in prompt["text"]
    assert "atol=1e-05" in api.messages()[2].json["messages"][0]["content"][1]["text"]
    # the same reviews on Opus 5.5 (minimum 512): the shared prefix is marked for caching
    api.queue(*[recorded("verdict_pass") for _ in range(3)])
    verify(client, replace(cfg, verify=replace(cfg.verify, model=None)), layernorm, "forward", cand, parallel=False)
    assert all(r.json["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
               for r in api.messages()[3:])
    assert api.rejected == []
    # verifier spending is booked on the candidate
    assert client.ledger.for_key(cand.source_hash).calls == 6


def test_on_an_always_thinking_model_the_tool_is_offered_not_forced(harness, layernorm):
    harness.api.queue(*[recorded("verdict_pass") for _ in range(3)])
    cfg = harness.config()                        # the default model, claude-opus-5-5: thinking is always on
    result = verify(harness.client(cfg), cfg, layernorm, "forward", parent_candidate(), parallel=False)
    assert result.verdict.status == Status.PASS and harness.api.rejected == []
    for sent in harness.api.messages():
        body = sent.json
        assert body["thinking"] == {"type": "adaptive", "display": "summarized"} and body["tool_choice"] == {"type": "auto"}
        assert body["output_config"] == {"effort": "low"} and body["tools"][0]["strict"] is True


def test_an_outage_decides_nothing(harness, layernorm):
    harness.api.outage(529)
    cfg = harness.config(outage_minutes=1)
    result = verify(harness.client(cfg), cfg, layernorm, "forward", parent_candidate(), parallel=False)
    assert result.unavailable and "API unavailable" in result.unavailable and result.votes == ()
    assert result.verdict.status == Status.SKIPPED and result.stop is None


def test_parallel_verifiers(harness, layernorm):
    harness.api.queue(*[recorded("verdict_pass") for _ in range(3)])
    cfg = harness.config()
    result = verify(harness.client(cfg), cfg, layernorm, "forward", parent_candidate())
    assert result.verdict.status == Status.PASS and len(harness.api.messages()) == 3


def test_api_trouble_skips_and_asks_to_stop(harness, layernorm):
    harness.api.queue(recorded("err_401"), recorded("no_tool_prose"), recorded("verdict_pass"))
    cfg = harness.config()
    result = verify(harness.client(cfg), cfg, layernorm, "forward", parent_candidate(), parallel=False)
    compile_, memory, numerics = result.votes
    assert compile_.status == Status.SKIPPED and "401" in compile_.reason and compile_.data["error"] == "auth"
    assert memory.status == Status.SKIPPED and "no usable verdict" in memory.reason
    assert numerics.status == Status.PASS
    assert result.verdict.status == Status.PASS
    assert result.stop and "401" in result.stop


def test_nobody_answers_is_skipped_not_failed(harness, layernorm):
    cfg = harness.config()
    result = verify(harness.client(cfg, api_key=None), cfg, layernorm, "forward", parent_candidate())
    assert result.verdict.status == Status.SKIPPED and result.verdict.ok
    assert "ANTHROPIC_API_KEY" in result.stop and harness.api.messages() == []


def test_disabled(harness, layernorm):
    cfg = harness.config()
    cfg = replace(cfg, verify=replace(cfg.verify, enabled=False))
    result = verify(harness.client(cfg), cfg, layernorm, "forward", parent_candidate())
    assert result.verdict.status == Status.SKIPPED and result.votes == () and harness.api.messages() == []


def test_broken_template_skips_and_stops(harness, layernorm, tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "verify_memory.md").write_text("{{no_such_value}}")
    cfg = harness.config(prompts_dir=str(tmp_path / "p"))
    result = verify(harness.client(cfg), cfg, layernorm, "forward", parent_candidate())
    assert result.verdict.status == Status.SKIPPED and "no_such_value" in result.stop
    assert harness.api.messages() == []
