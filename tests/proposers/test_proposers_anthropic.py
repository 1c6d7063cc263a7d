"""The anthropic proposer end to end against the stub Messages API: every operator, every bad answer,
every API failure becomes a Proposal (ok / failed / stop) with its reason; nothing raises."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from tests.paths import LLM_FIXTURES
from tests.proposers.conftest import req

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import BINDING, KERNEL, api, harness, layernorm, parent_candidate, recorded  # noqa: E402,F401

from engine.candidates import Candidate  # noqa: E402
from engine.llm import availability  # noqa: E402
from engine.proposers import Proposal, ProposalStatus, guarded, make_proposer  # noqa: E402
from tests.standins.claude_bodies import error_body  # noqa: E402
from tests.standins.server import StubResponse  # noqa: E402
from engine.proposers.anthropic import AnthropicProposer  # noqa: E402

OK, FAILED, STOP = ProposalStatus.OK, ProposalStatus.FAILED, ProposalStatus.STOP
UNAVAILABLE = ProposalStatus.UNAVAILABLE


@pytest.fixture
def proposer(harness):
    cfg = harness.config()
    return AnthropicProposer(harness.client(cfg), cfg)


def test_translate(proposer, harness, layernorm):
    harness.api.queue(recorded("ok_translate"))
    p = proposer.propose(req(layernorm, "translate", directives="- keep two passes"))
    assert p.status == OK and p.reason == ""
    c = p.candidate
    assert c.format == "native" and c.files == {"kernel.cu": KERNEL, "binding.cpp": BINDING}
    assert c.name == "two-pass-layernorm"
    assert c.meta["proposer"] == "anthropic" and c.meta["operator"] == "translate" and c.meta["parents"] == []
    assert c.meta["model"] == "claude-opus-4-5-20251101" and c.meta["proposal_id"] == p.id
    assert c.meta["usage"]["cache_write_tokens"] == 1830 and c.meta["cost_usd"] == pytest.approx(p.cost_usd)
    assert p.rationale.startswith("One block per row")
    # the spending moved from the proposal onto the candidate
    ledger = proposer.client.ledger
    assert ledger.for_key(c.source_hash).calls == 1 and ledger.for_key(p.id).calls == 0

    body = harness.api.messages()[0].json
    assert body["tools"][0]["name"] == "submit_kernel"
    system = body["system"][0]["text"]
    context, prompt = body["messages"][0]["content"]
    assert "native split" in system and "kbench:knob" in system
    assert "# Task: layernorm_lastdim (forward)" in context["text"] and context["cache_control"] == {"type": "ephemeral"}
    assert "Operator: translate" in prompt["text"] and "- keep two passes" in prompt["text"]

    assert Proposal.from_json(json.loads(json.dumps(p.to_json()))) == p  # the record survives JSON

    md = p.prompt_md()
    for part in ("# Proposal", "· translate · anthropic", "## Prompt", "### Task context (cached)", "## Answer",
                 "#### kernel_cu", "```cuda", "Thinking (summary)", "tokens: 2150 in"):
        assert part in md


def test_mutate_sends_parent_feedback_and_insights(proposer, harness, layernorm):
    parent = Candidate("native", {"kernel.cu": KERNEL, "binding.cpp": BINDING}, "ln-parent",
                       {"id": "s1-g1-3"})
    harness.api.queue(recorded("ok_mutate_cached"))
    p = proposer.propose(req(layernorm, "mutate", parent, parent_summaries=("1.4x over eager; compile ok",),
                             feedback="ncu: dram throughput 41%", insights=("float4 loads helped s1-g1-2",)))
    assert p.status == OK and p.parents == ("s1-g1-3",) and p.candidate.meta["parents"] == ["s1-g1-3"]
    assert "#define BLOCK_SIZE 512" in p.candidate.files["kernel.cu"] and p.candidate.name == "wider-blocks"
    assert p.usage.cache_read_tokens == 1830
    text = harness.api.messages()[0].json["messages"][0]["content"][1]["text"]
    for part in ("Operator: mutate", "Parent: ln-parent", "1.4x over eager", "dram throughput 41%",
                 "- float4 loads helped s1-g1-2", "__global__"):
        assert part in text


def test_crossover_shows_both_parents(proposer, harness, layernorm):
    a = parent_candidate("alpha")
    b = Candidate("native", {"kernel.cu": KERNEL.replace("MIN_BLOCKS 2", "MIN_BLOCKS 1"), "binding.cpp": BINDING},
                  "beta")
    harness.api.queue(recorded("ok_mutate_cached"))
    p = proposer.propose(req(layernorm, "crossover", a, b))
    assert p.status == OK and p.parents == (a.source_hash, b.source_hash)
    text = harness.api.messages()[0].json["messages"][0]["content"][1]["text"]
    assert "Parent A: alpha" in text and "Parent B: beta" in text and "#define MIN_BLOCKS 1" in text


def test_repair_and_meta(proposer, harness, layernorm):
    parent = parent_candidate()
    p = proposer.propose(req(layernorm, "repair", parent))
    assert p.status == FAILED and "feedback" in p.reason and harness.api.messages() == []
    harness.api.queue(recorded("ok_mutate_cached"))
    p = proposer.propose(req(layernorm, "repair", parent, feedback="kernel.cu(31): error: identifier \"x4\" is undefined"))
    assert p.status == OK
    assert 'identifier "x4" is undefined' in harness.api.messages()[0].json["messages"][0]["content"][1]["text"]

    harness.api.queue(recorded("directives"))
    m = proposer.propose(req(layernorm, "meta", directives="- old advice", population="1. s1-g1-2: 1.8x"))
    assert m.status == OK and m.candidate is None and m.directives.startswith("1. Keep the centred")
    body = harness.api.messages()[1].json
    assert body["tools"][0]["name"] == "submit_directives" and "- old advice" in body["messages"][0]["content"][1]["text"]


@pytest.mark.parametrize("fixture, words", [
    ("no_tool_prose", "prose instead of calling submit_kernel"),
    ("prose_code", "code in prose"),
    ("truncated_max_tokens", "truncated at max_tokens"),
    ("truncated_braces", "looks truncated"),
    ("not_cuda", "does not look like CUDA"),
    ("torch_in_kernel", "torch headers"),
    ("wrong_files", "wrong files"),
    ("wrong_tool", "unknown tool"),
    ("elided", "elides code"),
])
def test_bad_answers_become_failed_proposals(proposer, harness, layernorm, fixture, words):
    harness.api.queue(recorded(fixture, tool="*"))   # served whatever tool the request offers
    p = proposer.propose(req(layernorm, "translate"))
    assert p.status == FAILED and words in p.reason and p.candidate is None
    assert p.data["error"] == "answer" and p.answer  # what the model said is kept for the record
    assert p.usage.total_tokens > 0 and proposer.client.ledger.spent_usd > 0  # and paid for
    assert words in p.prompt_md()


def test_resubmitting_the_parent_is_a_failed_proposal(proposer, harness, layernorm):
    harness.api.queue(recorded("ok_translate"))
    p = proposer.propose(req(layernorm, "mutate", parent_candidate()))
    assert p.status == FAILED and "repeats a candidate" in p.reason and p.data["error"] == "duplicate"


INVALID = StubResponse(400, error_body("invalid_request_error", "messages.0.content: unexpected block type"))


@pytest.mark.parametrize("queue, status, kind", [
    (["err_401"], STOP, "auth"),
    (["err_404_model"], STOP, "not_found"),
    ([INVALID], STOP, "invalid_request"),        # the API refused the request itself: every call would fail
    (["err_400"], FAILED, "too_long"),           # this prompt is too long: the next may not be
    (["err_529"] * 5 + ["err_500"] * 40, UNAVAILABLE, "unavailable"),   # the outage outlasts the window
])
def test_api_failures(proposer, harness, layernorm, queue, status, kind):
    harness.api.queue(*[recorded(f) if isinstance(f, str) else f for f in queue])
    p = proposer.propose(req(layernorm, "translate"))
    assert p.status == status and p.data["error"] == kind and p.reason
    assert p.prompt and "Operator: translate" in p.prompt  # the prompt is kept even when nothing came back


def test_rate_limit_then_success(proposer, harness, layernorm):
    harness.api.queue(recorded("err_429"), recorded("err_529"), recorded("ok_translate"))
    p = proposer.propose(req(layernorm, "translate"))
    assert p.status == OK and p.data["attempts"] == 3 and harness.sleeps[0] == 7.0


def test_timeout_becomes_unavailable(harness, layernorm):
    cfg = harness.config(timeout_s=0.3, max_retries=1)
    proposer = AnthropicProposer(harness.client(cfg), cfg)
    harness.api.queue(recorded("ok_translate", delay_s=3), recorded("ok_translate", delay_s=3))
    p = proposer.propose(req(layernorm, "translate"))
    assert p.status == UNAVAILABLE and "request timeout" in p.reason and "gave up after 2 attempt(s)" in p.reason


def test_budget_exhausted_mid_session(harness, layernorm):
    # a call's worst case is 32000 output tokens at $20/M and its input; an answer costs about $0.11
    cfg = harness.config(budget=0.70)
    proposer = AnthropicProposer(harness.client(cfg), cfg)
    harness.api.queue(recorded("ok_translate"), recorded("ok_mutate_cached"), recorded("ok_translate"))
    first = proposer.propose(req(layernorm, "translate"))
    second = proposer.propose(req(layernorm, "mutate", first.candidate))
    third = proposer.propose(req(layernorm, "translate"))
    assert first.status == OK and second.status == OK
    # the mutation is sent with the room what is left affords, still more than its answer needs
    need = proposer.build_request(req(layernorm, "mutate", first.candidate)).min_output_tokens
    assert need <= harness.api.messages()[1].json["max_tokens"] < 32000
    assert third.status == STOP and third.data["error"] == "budget" and "budget reached" in third.reason
    assert len(harness.api.messages()) == 2 and harness.api.pending == 1
    assert proposer.client.ledger.spent_usd <= 0.70


def test_no_key_is_a_plain_stop_said_once(harness, layernorm, caplog):
    availability._reset_notice_for_tests()
    cfg = harness.config()
    proposer = AnthropicProposer(harness.client(cfg, api_key=None), cfg)
    assert not proposer.available() and "ANTHROPIC_API_KEY" in proposer.unavailable_reason()
    with caplog.at_level(logging.WARNING, logger="kbench.llm"):
        ps = [proposer.propose(req(layernorm, "translate")) for _ in range(3)]
    assert all(p.status == STOP and p.reason == availability.NO_KEY_MESSAGE for p in ps)
    assert sum(r.getMessage() == availability.NO_KEY_MESSAGE for r in caplog.records) == 1
    assert harness.api.messages() == []


def test_wrong_parent_count_and_operator(proposer, harness, layernorm):
    assert proposer.propose(req(layernorm, "crossover", parent_candidate())).status == FAILED
    assert proposer.propose(req(layernorm, "mutate")).status == FAILED
    p = guarded(proposer, req(layernorm, "tune", parent_candidate()))
    assert p.status == FAILED and "does not do 'tune'" in p.reason
    assert harness.api.messages() == []


def test_broken_prompt_template_stops(harness, layernorm, tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "translate.md").write_text("{{#if x}}\nnever closed\n")
    cfg = harness.config(prompts_dir=str(tmp_path / "prompts"))
    p = AnthropicProposer(harness.client(cfg), cfg).propose(req(layernorm, "translate"))
    assert p.status == STOP and "never closed" in p.reason and harness.api.messages() == []


def test_guarded_survives_a_proposer_bug(layernorm):
    class Broken:
        name, operators = "broken", frozenset({"translate"})

        def available(self):
            return True

        def unavailable_reason(self):
            return ""

        def propose(self, request):
            raise ZeroDivisionError("oops")

    p = guarded(Broken(), req(layernorm, "translate"))
    assert p.status == FAILED and "ZeroDivisionError" in p.reason and "Traceback" in p.data["traceback"]


def test_make_proposer(tmp_path, harness):
    from engine.llm.accounting import CostLedger
    cfg = harness.config()
    ledger = CostLedger(1.0)
    p = make_proposer("anthropic", cfg, ledger=ledger, api_key="k", env={})
    assert p.name == "anthropic" and p.client.ledger is ledger and p.available()
    assert make_proposer("tuner", cfg).name == "tuner"
    assert make_proposer("replay", cfg, replay_from=tmp_path).name == "replay"
    assert make_proposer("human", cfg, editor="true").available()
    with pytest.raises(Exception, match="no proposer named"):
        make_proposer("oracle", cfg)
