"""The OpenAI-compatible provider through the real `openai` SDK against a loopback chat-completions stub:
tool calls become the same answers the Claude path reads, usage and prices, failures and outages."""

from __future__ import annotations

import random
import sys

import pytest

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import base_config, body, layernorm, parent_candidate, recorded  # noqa: E402,F401

from engine.llm.client import LLMRequest  # noqa: E402
from engine.llm.errors import APIUnavailable, InvalidRequest, LLMError  # noqa: E402
from engine.llm.factory import make_client  # noqa: E402
from engine.llm.openai_client import OpenAICompatClient  # noqa: E402
from tests.standins.server import StubResponse  # noqa: E402
from tests.standins.openai_api import (StubOpenAIAPI, completion_from_message, oai_error, text_completion,  # noqa: E402
                                    tool_call_completion)
from engine.llm.tools import SUBMIT_KERNEL, SUBMIT_VERDICT, kernel_answer  # noqa: E402
from engine.proposers import ProposalRequest, ProposalStatus, make_proposer  # noqa: E402

MODEL = "qwen3-coder-30b"
REQ = LLMRequest("You write CUDA.", "# Task: layernorm", "Translate it.", SUBMIT_KERNEL, key="p1", purpose="translate")


@pytest.fixture
def oai():
    with StubOpenAIAPI(model=MODEL) as stub:
        yield stub


class Clock:
    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


def client(oai, tmp_path, clock=None, **llm):
    cfg = base_config(tmp_path, provider="openai-compatible", base_url=oai.url, model=MODEL, api_key_env="", **llm)
    clock = clock or Clock()
    return make_client(cfg.llm, env={}, sleep=clock.sleep, clock=lambda: clock.now, rng=random.Random(0))


def test_a_tool_call_is_the_answer(oai, tmp_path):
    oai.queue(completion_from_message(body("ok_translate"), model=MODEL))
    c = client(oai, tmp_path)
    assert isinstance(c, OpenAICompatClient) and c.available
    reply = c.call(REQ)
    assert reply.tool_name == "submit_kernel" and kernel_answer(reply).name == "two-pass-layernorm"
    assert reply.thinking.startswith("Row-wise") and reply.text == "Here is a first correct kernel."
    assert reply.stop_reason == "tool_use" and reply.cost_usd == 0.0     # a local model is free by default
    sent = oai.completions()[0].json
    assert sent["model"] == MODEL and sent["max_tokens"] == 32000
    assert sent["messages"][0] == {"role": "system", "content": "You write CUDA."}
    user = sent["messages"][1]["content"]
    assert user.startswith("# Task: layernorm") and "Translate it." in user
    assert sent["tools"][0]["function"]["parameters"] == SUBMIT_KERNEL["input_schema"]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "submit_kernel"}}
    assert oai.completions()[0].headers["authorization"] == "Bearer not-needed"


def test_usage_cached_tokens_and_configured_prices(oai, tmp_path):
    from engine.config.prices import Price
    oai.queue(tool_call_completion("submit_verdict", {"verdict": "pass", "confidence": 0.9, "reasons": []},
                                   model=MODEL, prompt_tokens=3000, completion_tokens=500, cached_tokens=1000))
    cfg = base_config(tmp_path, provider="openai-compatible", base_url=oai.url, model=MODEL, api_key_env="")
    cfg = cfg.llm.__class__(**{**cfg.llm.__dict__, "prices": {MODEL: Price(1.0, 2.0, 0.0, 0.1)}})
    reply = make_client(cfg, env={}).call(LLMRequest("s", "c", "p", SUBMIT_VERDICT))
    u = reply.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens) == (2000, 500, 1000)
    assert reply.cost_usd == pytest.approx((2000 * 1.0 + 500 * 2.0 + 1000 * 0.1) / 1e6)


def test_a_priced_endpoint_holds_each_calls_worst_case_against_the_budget(oai, tmp_path):
    from dataclasses import replace

    from engine.config.prices import Price
    from engine.llm.accounting import CostLedger
    from engine.llm.errors import BudgetExhausted
    for _ in range(2):
        oai.queue(tool_call_completion("submit_verdict", {"verdict": "pass", "confidence": 0.9, "reasons": []},
                                       model=MODEL, prompt_tokens=3000, completion_tokens=500))
    cfg = base_config(tmp_path, provider="openai-compatible", base_url=oai.url, model=MODEL, api_key_env="",
                      max_retries=0)
    llm = replace(cfg.llm, prices={MODEL: Price(1.0, 2.0, 1.0, 0.1)})
    # a call's worst case: 32000 output tokens at $2/M ($0.064) and its input (about $0.0015); billed $0.004
    c = make_client(llm, CostLedger(0.068), env={})
    vote = LLMRequest("You review CUDA.", "# Task: layernorm", "Review it.", SUBMIT_VERDICT)
    c.call(vote)
    assert c.ledger.spent_usd == pytest.approx(0.004) and c.ledger.held_usd == 0
    with pytest.raises(BudgetExhausted, match="could cost up to"):
        c.call(vote)                 # $0.064 left is less than the worst case: not sent
    posts = lambda: [r for r in oai.requests if r.method == "POST"]      # GET /v1/models: the context, once
    assert len(posts()) == 1
    c.call(replace(vote, min_output_tokens=8000))      # alone, with fewer output tokens that still suffice
    assert 8000 <= posts()[1].json["max_tokens"] < 32000


def test_auto_tool_choice_when_the_server_cannot_force_one(oai, tmp_path):
    oai.queue(text_completion("I would write a kernel like this: __global__ void k() {}"))
    reply = client(oai, tmp_path, force_tool=False).call(REQ)
    assert oai.completions()[0].json["tool_choice"] == "auto" and reply.tool_name is None
    assert "__global__" in reply.text


def test_bad_arguments_and_truncation_are_unusable_answers(oai, tmp_path):
    oai.queue(tool_call_completion("submit_kernel", '{"name": "x", "kernel_cu": "trunc', finish_reason="length"))
    reply = client(oai, tmp_path).call(REQ)
    assert reply.tool_input is None and reply.stop_reason == "max_tokens"
    with pytest.raises(LLMError, match="truncated|no readable input|cut off"):
        kernel_answer(reply)


def test_outage_then_recovery_and_sustained_outage(oai, tmp_path):
    oai.outage(429, count=2, retry_after="1")
    oai.queue(completion_from_message(body("ok_translate"), model=MODEL))
    clock = Clock()
    reply = client(oai, tmp_path, clock).call(REQ)
    assert reply.attempts == 3 and clock.sleeps == [1.0, 1.0]
    oai.outage(503, retry_after=None)
    with pytest.raises(APIUnavailable) as err:
        client(oai, tmp_path, outage_minutes=1).call(REQ)
    assert "API unavailable" in str(err.value) and "currently busy" in str(err.value)


def test_refusals_stop_and_too_long_fails(oai, tmp_path):
    oai.queue(StubResponse(400, oai_error("Unknown parameter: 'response_fromat'.", "invalid_request_error")))
    with pytest.raises(InvalidRequest, match="response_fromat"):
        client(oai, tmp_path).call(REQ)
    oai.queue(StubResponse(400, oai_error("This model's maximum context length is 65536 tokens.")))
    with pytest.raises(LLMError) as err:
        client(oai, tmp_path).call(REQ)
    assert err.value.kind == "too_long" and not err.value.stop
    oai.queue(StubResponse(401, oai_error("Incorrect API key provided", "invalid_request_error", "invalid_api_key")))
    keyed = base_config(tmp_path, provider="openai-compatible", base_url=oai.url, model=MODEL, api_key_env="MY_KEY")
    with pytest.raises(LLMError) as err:
        make_client(keyed.llm, env={"MY_KEY": "k"}).call(REQ)
    assert err.value.kind == "auth" and err.value.stop and "MY_KEY" in str(err.value)


def test_the_stub_checks_tool_calling_requests(oai, tmp_path):
    c = client(oai, tmp_path)
    c.build_params = lambda req: {**OpenAICompatClient.build_params(c, req),
                                  "tool_choice": {"type": "function", "function": {"name": "submit_other"}}}
    with pytest.raises(InvalidRequest, match="does not match any of the specified"):
        c.call(REQ)


def test_the_openai_proposer_translates(oai, tmp_path, layernorm):
    oai.queue(completion_from_message(body("ok_translate"), model=MODEL))
    cfg = base_config(tmp_path, provider="openai-compatible", base_url=oai.url, model=MODEL, api_key_env="")
    prop = make_proposer("openai", cfg, env={})
    assert prop.name == "openai" and prop.available()
    p = prop.propose(ProposalRequest(layernorm, "translate"))
    assert p.status == ProposalStatus.OK and p.candidate.meta["proposer"] == "openai" and p.model == MODEL
    with pytest.raises(Exception, match='needs \\[llm\\] provider = "anthropic"'):
        make_proposer("anthropic", cfg)


def test_no_key_for_a_remote_endpoint(tmp_path, oai):
    cfg = base_config(tmp_path, provider="openai-compatible", base_url=oai.url, model=MODEL)
    c = make_client(cfg.llm, env={})
    assert not c.available
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        c.call(REQ)
