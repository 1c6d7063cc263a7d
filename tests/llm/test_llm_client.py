"""engine.llm.client against a stub Messages API on loopback: the real SDK, real HTTP, recorded answers."""

from __future__ import annotations

import re
from dataclasses import replace

import logging
import socket
import sys
import time
from dataclasses import replace
from email.utils import formatdate
from pathlib import Path

import anthropic
import pytest

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import API_KEY, api, harness, recorded  # noqa: E402,F401

from engine.llm import availability  # noqa: E402
from engine.llm.client import LLMClient, LLMRequest, _retry_after, needs_streaming  # noqa: E402
from engine.llm.errors import APIUnavailable, BudgetExhausted, InvalidRequest, LLMError, NoAPIKey  # noqa: E402
from tests.standins.claude_bodies import error_body  # noqa: E402
from tests.standins.server import StubResponse  # noqa: E402
from engine.llm.tools import SUBMIT_KERNEL, SUBMIT_VERDICT  # noqa: E402

# a task context of about 2,000 tokens: above Opus 5.5's caching minimum (512), below Opus 4.6's (4,096)
REQ = LLMRequest(system="You write CUDA.", context="# Task: layernorm\n" + "(stable context)\n" * 400,
                 prompt="Translate it.", tool=SUBMIT_KERNEL, key="p1", purpose="translate")


def test_request_shape_and_accounting(harness):
    api = harness.api
    api.queue(recorded("ok_translate"))
    client = harness.client()
    reply = client.call(REQ)

    models, sent = api.requests              # the Models API first (capabilities), then the message
    assert models.method == "GET" and models.path == "/v1/models/claude-opus-5-5"
    assert sent.path == "/v1/messages"
    assert API_KEY in (sent.headers.get("x-api-key", "") + sent.headers.get("authorization", ""))
    assert sent.headers.get("anthropic-version")
    assert sent.headers["x-stainless-retry-count"] == "0"
    body = sent.json
    # the default model takes adaptive thinking and effort; a forced tool is refused with thinking on
    assert body["model"] == "claude-opus-5-5" and body["max_tokens"] == 32000 and body["stream"] is True
    assert body["thinking"] == {"type": "adaptive", "display": "summarized"} and body["output_config"] == {"effort": "high"}
    assert body["tools"] == [{**SUBMIT_KERNEL, "strict": True}]
    assert body["tool_choice"] == {"type": "auto"}
    assert "temperature" not in body
    assert body["system"] == [{"type": "text", "text": "You write CUDA."}]
    context, prompt = body["messages"][0]["content"]
    assert context["cache_control"] == {"type": "ephemeral"} and context["text"].startswith("# Task: layernorm")
    assert "cache_control" not in prompt and prompt["text"] == "Translate it."
    assert api.rejected == []

    assert reply.tool_name == "submit_kernel" and "__global__" in reply.tool_input["kernel_cu"]
    assert reply.thinking.startswith("Row-wise") and reply.text == "Here is a first correct kernel."
    assert reply.stop_reason == "tool_use" and reply.attempts == 1
    assert reply.model == "claude-opus-4-5-20251101"
    u = reply.usage
    assert (u.input_tokens, u.output_tokens, u.cache_write_tokens, u.cache_read_tokens) == (2150, 3400, 1830, 0)
    # billed as the model that answered (opus-4-5: $5 in, $25 out, $6.25 cache write per MTok)
    assert reply.cost_usd == pytest.approx((2150 * 5 + 3400 * 25 + 1830 * 6.25) / 1e6)
    ledger = client.ledger
    assert ledger.spent_usd == pytest.approx(reply.cost_usd)
    assert ledger.for_key("p1").calls == 1 and ledger.calls[0].purpose == "translate"
    assert harness.sleeps == []
    # the API caches nothing below a model's minimum: no breakpoint is sent for a prefix that short
    api.queue(recorded("ok_translate"), recorded("ok_translate"))
    harness.client(model="claude-opus-4-6").call(REQ)
    client.call(replace(REQ, context="# Task: tiny"))
    short = [r.json["messages"][0]["content"][0] for r in api.messages()[1:]]
    assert ["cache_control" in b for b in short] == [False, False]


def test_small_calls_are_not_streamed(harness):
    harness.api.queue(recorded("verdict_pass"))
    req = LLMRequest("sys", "ctx", "p", SUBMIT_VERDICT, max_tokens=8000, effort="low")
    reply = harness.client().call(req)
    body = harness.api.messages()[0].json
    assert "stream" not in body and body["max_tokens"] == 8000 and reply.tool_name == "submit_verdict"
    assert needs_streaming("claude-opus-5-5", 21333) is False and needs_streaming("claude-opus-5-5", 21334)


# thinking on: a summary is asked for (newer models omit the thinking text unless asked; prompt.md keeps it)
ADAPTIVE = {"type": "adaptive", "display": "summarized"}
BUDGET = {"type": "enabled", "budget_tokens": 16000, "display": "summarized"}


@pytest.mark.parametrize("model, thinking, effort, expect_thinking, expect_choice, expect_effort", [
    # adaptive-only, thinking always on: "disabled" and "enabled" become adaptive; never a forced tool
    ("claude-opus-5-5", "disabled", "low", ADAPTIVE, {"type": "auto"}, "low"),
    ("claude-opus-5-5", "enabled", "high", ADAPTIVE, {"type": "auto"}, "high"),
    # Opus 5 may switch thinking off, but only at effort high or below
    ("claude-opus-5", "disabled", "high", {"type": "disabled"}, {"type": "tool", "name": "submit_kernel"}, "high"),
    ("claude-opus-5", "disabled", "max", ADAPTIVE, {"type": "auto"}, "max"),
    # Sonnet 5.5 turns thinking off with between_tools (effort high or below), and takes no forced tool
    ("claude-sonnet-5-5", "disabled", "low", {"type": "between_tools"}, {"type": "auto"}, "low"),
    ("claude-sonnet-5-5", "disabled", "max", ADAPTIVE, {"type": "auto"}, "max"),
    # Opus 4.7: adaptive only, but thinking may be off
    ("claude-opus-4-7", "disabled", "low", {"type": "disabled"}, {"type": "tool", "name": "submit_kernel"}, "low"),
    # a 4.6 model still takes a manual budget (deprecated) and lacks xhigh: lowered to high
    ("claude-sonnet-4-6", "enabled", "xhigh", BUDGET, {"type": "auto"}, "high"),
    ("claude-sonnet-4-6", "auto", "max", ADAPTIVE, {"type": "auto"}, "max"),
    # an older model has no adaptive thinking: a manual budget; no effort above high
    ("claude-opus-4-5", "auto", "max", BUDGET, {"type": "auto"}, "high"),
    ("claude-opus-4-5", "adaptive", None, BUDGET, {"type": "auto"}, None),
    # Haiku 4.5 has no effort parameter at all; thinking off forces the tool
    ("claude-haiku-4-5", "disabled", "high", {"type": "disabled"}, {"type": "tool", "name": "submit_kernel"}, None),
])
def test_thinking_and_tool_choice_follow_the_model(harness, model, thinking, effort, expect_thinking, expect_choice,
                                                  expect_effort):
    harness.api.queue(recorded("ok_translate"))
    harness.client(model=model, thinking=thinking, effort=effort).call(REQ)
    body = harness.api.messages()[0].json
    assert body["thinking"] == expect_thinking and body["tool_choice"] == expect_choice
    assert body.get("output_config", {}).get("effort") == expect_effort
    assert harness.api.rejected == []          # the stub's rules for that model accepted it


def test_max_tokens_is_sized_from_the_answer_and_capped_by_the_model(harness):
    harness.api.queue(recorded("ok_translate"), recorded("ok_translate"))
    client = harness.client(model="claude-sonnet-4-6")
    client.call(LLMRequest("s", "c", "p", SUBMIT_KERNEL, min_output_tokens=50000))
    client.call(LLMRequest("s", "c", "p", SUBMIT_KERNEL, min_output_tokens=500000))
    first, second = (r.json["max_tokens"] for r in harness.api.messages())
    assert first == 50000 and second == 128000          # Sonnet 4.6 answers at most 128k (the Models API says)


def test_thinking_disabled_forces_the_tool_and_sends_no_sampling_parameter(harness):
    # the SDK speaks anthropic-version 2026-10-21, which removed temperature/top_p/top_k for every model
    harness.api.queue(recorded("ok_translate"))
    harness.client(model="claude-sonnet-4-6", thinking="disabled", temperature=0.2, max_tokens=9000).call(REQ)
    body = harness.api.messages()[0].json
    assert body["tool_choice"] == {"type": "tool", "name": "submit_kernel"}
    assert "temperature" not in body and body["thinking"] == {"type": "disabled"} and body["max_tokens"] == 9000
    assert harness.api.messages()[0].headers["anthropic-version"] == "2026-10-21"


def test_request_overrides_model_and_thinking(harness):
    harness.api.queue(recorded("verdict_pass"))
    req = LLMRequest("sys", "ctx", "p", SUBMIT_VERDICT, model="claude-haiku-4-5", thinking="disabled", max_tokens=4000)
    harness.client().call(req)
    body = harness.api.messages()[0].json
    assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] == 4000
    assert body["thinking"] == {"type": "disabled"}


def test_models_api_answer_is_used_and_cached(harness, tmp_path):
    from engine.llm.models import ModelCatalog, cache_file

    harness.api.queue(recorded("ok_translate"), recorded("ok_translate"))
    client = harness.client()
    path = cache_file({"KBENCH_CACHE": str(tmp_path / "cache")})
    client._catalog = ModelCatalog(lambda m: client._client().models.retrieve(m), endpoint=harness.api.url,
                                   path=path, clock=lambda: 5000.0)
    caps = client.caps("claude-opus-5")
    assert caps.source == "api" and caps.disabled and not caps.enabled and caps.max_output == 128000
    assert caps.disabled_max_effort == "high"           # a rule the Models API does not state: from the table
    assert path.is_file() and "claude-opus-5" in path.read_text()
    again = ModelCatalog(None, endpoint=harness.api.url, path=path, clock=lambda: 5000.0 + 3600)
    assert again.caps("claude-opus-5") == caps          # read back from disk, no request
    stale = ModelCatalog(None, endpoint=harness.api.url, path=path, clock=lambda: 5000.0 + 2 * 86400)
    assert stale.caps("claude-opus-5").source == "table"


def test_models_api_unknown_model_falls_back_to_the_table(harness):
    from engine.llm.models import ModelCatalog

    client = harness.client()
    cat = ModelCatalog(lambda m: client._client().models.retrieve(m))
    caps = cat.caps("claude-sonnet-4-5")                # the stand-in's registry does not list it: 404
    assert caps.source == "table" and not caps.adaptive and caps.enabled and caps.disabled
    assert cat.caps("claude-opus-9").source == "unknown"     # newer than the table: the safe shape
    assert cat.caps("some-local-model").source == "unknown"


def test_429_honours_retry_after(harness):
    harness.api.queue(recorded("err_429"), recorded("ok_translate"))
    client = harness.client()
    reply = client.call(REQ)
    assert harness.sleeps == [7.0]
    assert reply.attempts == 2 and len(harness.api.messages()) == 2
    assert harness.api.messages()[1].headers["x-stainless-retry-count"] == "0"  # the SDK's own retries are off
    assert len(client.ledger.calls) == 1 and client.ledger.calls[0].attempts == 2


def test_overload_and_server_errors_back_off_exponentially(harness):
    harness.api.queue(recorded("err_529"), recorded("err_500"), recorded("ok_translate"))
    reply = harness.client(backoff_base_s=2.0, backoff_max_s=60.0).call(REQ)
    assert reply.attempts == 3
    first, second = harness.sleeps
    assert 1.5 <= first <= 2.0 and 3.0 <= second <= 4.0  # base * 2**attempt, jitter in [0.75, 1]


def test_backoff_is_capped(harness):
    harness.api.queue(*[recorded("err_529") for _ in range(4)], recorded("ok_translate"))
    harness.client(backoff_base_s=10.0, backoff_max_s=15.0).call(REQ)
    assert max(harness.sleeps) <= 15.0 and len(harness.sleeps) == 4


def test_sustained_outage_ends_as_api_unavailable_after_the_window(harness):
    harness.api.outage(529, retry_after=None)           # overloaded, no retry-after: exponential backoff
    with pytest.raises(APIUnavailable) as err:
        harness.client(outage_minutes=2, backoff_base_s=2.0, backoff_max_s=30.0).call(REQ)
    e = err.value
    assert e.unavailable and e.kind == "unavailable" and not e.stop and e.status_code == 529
    assert "API unavailable" in str(e) and "Overloaded" in str(e) and "outage_minutes = 2" in str(e)
    assert 90 <= sum(harness.sleeps) <= 120             # waited through the two-minute window, not past it
    assert len(harness.api.messages()) == e.attempts == len(harness.sleeps) + 1


def test_max_retries_caps_attempts_and_is_unavailable(harness):
    harness.api.queue(*[recorded("err_529") for _ in range(3)])
    with pytest.raises(APIUnavailable) as err:
        harness.client(max_retries=2).call(REQ)
    e = err.value
    assert e.attempts == 3 and "gave up after 3 attempt(s)" in str(e) and "Overloaded" in str(e)
    assert len(harness.api.messages()) == 3 and len(harness.sleeps) == 2


def test_retry_after_longer_than_the_window_is_unavailable_at_once(harness):
    harness.api.queue(recorded("err_429_long"))
    with pytest.raises(APIUnavailable) as err:
        harness.client(outage_minutes=10).call(REQ)
    assert "3600" in str(err.value) and harness.sleeps == []


def test_spend_limit_is_a_stop_not_an_outage(harness):
    body = error_body("rate_limit_error", "You have reached your usage tier's monthly spend limit.")
    body["error"]["details"] = {"error_code": "enforced_spend_limit_reached"}
    harness.api.queue(StubResponse(429, body))
    with pytest.raises(LLMError) as err:
        harness.client().call(REQ)
    assert err.value.stop and err.value.kind == "spend_limit" and harness.sleeps == []


def test_midstream_overload_is_retried(harness):
    over = {"type": "overloaded_error", "message": "Overloaded"}
    harness.api.queue(recorded("ok_translate", midstream_error=over), recorded("ok_translate"))
    reply = harness.client().call(REQ)
    assert reply.attempts == 2 and reply.tool_name == "submit_kernel" and len(harness.sleeps) == 1


@pytest.mark.parametrize("fixture, kind, stop", [
    ("err_401", "auth", True), ("err_403", "auth", True), ("err_404_model", "not_found", True),
    ("err_400", "too_long", False), ("err_503_noretry", "server", False),
])
def test_non_retryable_errors(harness, fixture, kind, stop):
    harness.api.queue(recorded(fixture), recorded("ok_translate"))
    with pytest.raises(LLMError) as err:
        harness.client().call(REQ)
    assert err.value.kind == kind and err.value.stop is stop
    assert len(harness.api.messages()) == 1 and harness.sleeps == []
    assert "[request-id req_" in str(err.value)  # the request id is kept for support


@pytest.mark.parametrize("mutate, words, sent", [
    (lambda p: {**p, "thinking": {"type": "enabled", "budget_tokens": 8000}},
     '"thinking.type.enabled" is not supported', 2),
    (lambda p: {**p, "tool_choice": {"type": "tool", "name": "submit_kernel"}},
     'tool_choice: type "tool" and "any" are not supported', 1),     # the table already knew: not resent
    (lambda p: {**p, "thinking": {"type": "disabled"}}, '"thinking.type.disabled" is not supported', 2),
    (lambda p: {**p, "extra_body": {"top_q": 0.5}}, "top_q: Extra inputs are not permitted", 1),
])
def test_a_refused_request_stops_with_the_apis_message(harness, mutate, words, sent):
    """What a year-old client sent: the stand-in refuses it as the API does, and the call stops. A refusal that
    names a capability (a thinking type, a forced tool) first corrects kbench's table and is sent once more;
    here the same broken hand rebuilds it, so that one is refused too. Anything else is sent once."""
    client = harness.client()
    client.build_params = lambda req: mutate(LLMClient.build_params(client, req))
    with pytest.raises(InvalidRequest) as err:
        client.call(REQ)
    e = err.value
    assert e.stop and e.kind == "invalid_request" and e.status_code == 400 and words in str(e)
    assert "invalid_request_error" in str(e) and harness.sleeps == [] and len(harness.api.messages()) == sent


def test_401_message_is_plain(harness):
    harness.api.queue(recorded("err_401"))
    with pytest.raises(LLMError, match=r"rejected the key \(401 invalid x-api-key\); check ANTHROPIC_API_KEY"):
        harness.client().call(REQ)


def test_timeout_is_retried_then_reported(harness):
    harness.api.queue(recorded("ok_translate", delay_s=3.0), recorded("ok_translate"))
    t0 = time.monotonic()
    reply = harness.client(timeout_s=0.3).call(REQ)
    assert reply.attempts == 2 and len(harness.sleeps) == 1 and time.monotonic() - t0 < 3.0

    harness.api.queue(recorded("ok_translate", delay_s=3.0))
    with pytest.raises(APIUnavailable) as err:
        harness.client(timeout_s=0.3, max_retries=0).call(REQ)
    assert err.value.unavailable and "0.3 s" in str(err.value)


def test_a_lost_answer_counts_its_worst_case_and_an_error_status_nothing(harness):
    # a timeout: the API may have answered (and billed) after we stopped waiting; its worst case stays spent
    harness.api.queue(recorded("ok_translate", delay_s=3.0), recorded("ok_translate"))
    client = harness.client(timeout_s=0.3)
    client.call(REQ)
    lost, answered = client.ledger.calls
    assert lost.worst_case and lost.cost_usd > 0.64 and lost.usage.total_tokens == 0 and lost.purpose == "translate"
    assert not answered.worst_case and answered.cost_usd < 0.2 and client.ledger.held_usd == 0
    # an error status bills nothing: the hold is released
    harness.api.queue(recorded("err_529"), recorded("ok_translate"))
    client = harness.client()
    client.call(REQ)
    assert [c.worst_case for c in client.ledger.calls] == [False] and client.ledger.held_usd == 0


def test_connection_refused(harness):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: nothing listens there
    client = harness.client(base_url=f"http://127.0.0.1:{port}", max_retries=1)
    with pytest.raises(APIUnavailable) as err:
        client.call(REQ)
    assert "cannot reach the API" in str(err.value) and err.value.attempts == 2 and len(harness.sleeps) == 1
    assert client.ledger.calls == [] and client.ledger.held_usd == 0      # never sent: nothing billed


def test_garbage_body_is_an_error_not_a_crash(harness):
    harness.api.queue(StubResponse(200, "<html>gateway</html>", {"content-type": "text/html"}))
    with pytest.raises(LLMError):
        harness.client(max_retries=0, models_api=False).call(REQ)


def test_budget_holds_each_calls_worst_case(harness):
    harness.api.queue(recorded("ok_translate"), recorded("ok_translate"))
    # a call's worst case: 32000 output tokens of claude-opus-5-5 at $20/M ($0.64) and its input; it is billed ~$0.11
    client = harness.client(budget=0.70)
    client.call(REQ)                    # its worst case fits: it runs and is billed
    spent = client.ledger.spent_usd
    assert 0.05 < spent < 0.2 and client.ledger.held_usd == 0
    with pytest.raises(BudgetExhausted) as err:
        client.call(REQ)                # what is left is less than the worst case: never sent
    assert err.value.stop and err.value.kind == "budget" and "$0.70" in str(err.value)
    # its input (at most the request's bytes plus 1024 tokens) at the dearest input rate, $6.25/M (cache write)
    (sent,) = harness.api.messages()
    worst = float(re.search(r"the next call could cost up to \$([0-9.]+)", str(err.value)).group(1))
    assert 0.64 < worst <= 0.64 + (len(sent.body) + 1024) * 6.25e-6
    assert len(harness.api.messages()) == 1 and client.ledger.spent_usd == spent


def test_budget_shrinks_max_tokens_to_what_is_left_but_not_below_what_the_answer_needs(harness):
    harness.api.queue(recorded("ok_translate"))
    client = harness.client(budget=0.30)
    client.call(replace(REQ, min_output_tokens=8000))       # $0.30 affords about 14,700 output tokens
    (sent,) = harness.api.messages()
    assert 8000 <= sent.json["max_tokens"] < 15000
    worst = sent.json["max_tokens"] * 20e-6 + len(sent.body) * 5e-6
    assert worst <= 0.30
    with pytest.raises(BudgetExhausted):
        client.call(replace(REQ, min_output_tokens=20000))   # shrunk below what the answer needs: not sent
    assert len(harness.api.messages()) == 1


def test_budget_checked_between_retries(harness):
    harness.api.queue(recorded("err_529"), recorded("ok_translate"))
    client = harness.client(budget=0.01)
    client.ledger._spent_before = 0.02  # as if a resumed session had spent it
    with pytest.raises(BudgetExhausted):
        client.call(REQ)
    assert harness.api.messages() == []


def test_base_url_from_environment(api):
    from llm_testkit import base_config
    api.queue(recorded("ok_translate"))
    cfg = base_config(Path("/nonexistent"))
    client = LLMClient(cfg.llm, api_key=API_KEY, env={"ANTHROPIC_BASE_URL": api.url}, sleep=lambda s: None)
    assert client.call(REQ).tool_name == "submit_kernel" and len(api.messages()) == 1


def test_custom_http_client(api):
    from llm_testkit import base_config
    api.queue(recorded("ok_translate"))
    cfg = base_config(Path("/nonexistent"), base_url=api.url)
    with anthropic.DefaultHttpxClient(trust_env=False) as http:
        client = LLMClient(cfg.llm, api_key=API_KEY, env={}, http_client=http)
        assert client.call(REQ).attempts == 1


def test_no_key(harness, caplog):
    client = harness.client(api_key=None)
    assert not client.available
    with pytest.raises(NoAPIKey) as err:
        client.call(REQ)
    assert err.value.stop and "ANTHROPIC_API_KEY" in str(err.value)
    assert harness.api.requests == []


def test_no_key_notice_once_per_process(caplog):
    availability._reset_notice_for_tests()
    with caplog.at_level(logging.WARNING, logger="kbench.llm"):
        assert availability.no_key_notice({}) == availability.NO_KEY_MESSAGE
        assert availability.no_key_notice({}) is None
        assert availability.no_key_notice({}) is None
    assert [r.getMessage() for r in caplog.records].count(availability.NO_KEY_MESSAGE) == 1
    assert availability.no_key_notice({"ANTHROPIC_API_KEY": "k"}) is None
    assert availability.llm_available({"ANTHROPIC_API_KEY": "k"}) and not availability.llm_available({})
    assert "tuner, replay and human proposers work" in availability.NO_KEY_MESSAGE


def test_retry_after_header_forms():
    assert _retry_after({"retry-after": "7"}) == 7.0
    assert _retry_after({"retry-after": "1.5"}) == 1.5
    assert _retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    later = _retry_after({"retry-after": formatdate(time.time() + 30, usegmt=True)})
    assert 25 <= later <= 31
    assert _retry_after({"retry-after": "soon"}) is None
    assert _retry_after({}) is None and _retry_after(None) is None


def test_stub_answers_500_when_its_queue_is_empty(harness):
    with pytest.raises(LLMError, match="no recorded response left"):
        harness.client(max_retries=0).call(REQ)
    # a verdict answer is kept for a request that offers submit_verdict
    harness.api.queue(recorded("verdict_pass"))
    with pytest.raises(LLMError, match="no recorded response left"):
        harness.client(max_retries=0).call(REQ)
    assert harness.api.pending == 1
    assert error_body("x", "y")["error"] == {"type": "x", "message": "y"}


def test_sdk_refusing_arguments_is_a_stop(harness):
    harness.api.queue(recorded("ok_translate"))
    client = harness.client()
    bad = LLMRequest("s", "c", "p", SUBMIT_KERNEL)
    client.build_params = lambda req: {**LLMClient.build_params(client, req), "no_such_argument": 1}
    with pytest.raises(LLMError) as err:
        client.call(bad)
    assert err.value.stop and err.value.kind == "client" and harness.api.messages() == []
