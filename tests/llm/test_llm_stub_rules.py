"""The loopback Messages API stub enforces today's request rules, driven with the real anthropic SDK (not
kbench's client), so kbench's own requests are checked against rules written independently of them."""

from __future__ import annotations

import sys

import anthropic
import pytest

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import api, recorded  # noqa: E402,F401

from tests.standins.messages_api import StubMessagesAPI  # noqa: E402
from tests.standins.claude_rules import STUB_MODELS  # noqa: E402
from engine.llm.tools import SUBMIT_KERNEL  # noqa: E402

MSG = [{"role": "user", "content": "Translate it."}]


def sdk(api):
    return anthropic.Anthropic(api_key="sk-ant-test", base_url=api.url, max_retries=0)


def create(api, **kw):
    # an explicit timeout, as kbench's client sets one: the SDK then leaves the streaming rule to the server
    params = {"model": "claude-opus-5-5", "max_tokens": 4000, "messages": MSG, "timeout": 60, **kw}
    return sdk(api).messages.create(**params)


@pytest.mark.parametrize("kw, words", [
    ({"thinking": {"type": "enabled", "budget_tokens": 2000}}, '"thinking.type.enabled" is not supported'),
    ({"thinking": {"type": "disabled"}}, '"thinking.type.disabled" is not supported'),
    ({"tools": [SUBMIT_KERNEL], "tool_choice": {"type": "tool", "name": "submit_kernel"}},
     'tool_choice: type "tool" and "any" are not supported for this model'),    # Opus 5.5 takes no forced tool
    ({"tools": [SUBMIT_KERNEL], "tool_choice": {"type": "any"}, "thinking": {"type": "adaptive"}},
     'tool_choice: type "tool" and "any" are not supported'),
    ({"model": "claude-opus-4-6", "thinking": {"type": "enabled", "budget_tokens": 2000}, "tools": [SUBMIT_KERNEL],
      "tool_choice": {"type": "any"}}, "Thinking may not be enabled when tool_choice forces tool use"),
    ({"model": "claude-sonnet-5-5", "thinking": {"type": "disabled"}}, 'send "thinking": {"type": "between_tools"}'),
    ({"model": "claude-sonnet-5-5", "thinking": {"type": "between_tools", "display": "summarized"}},
     "Extra inputs are not permitted"),
    ({"model": "claude-sonnet-5-5", "thinking": {"type": "between_tools"}, "output_config": {"effort": "max"}},
     "between_tools"),
    ({"model": "claude-haiku-4-5", "thinking": {"type": "adaptive"}}, "adaptive thinking is not supported"),
    ({"model": "claude-opus-5", "thinking": {"type": "disabled", "display": "summarized"}},
     "display is invalid with thinking.type disabled"),
    ({"extra_body": {"temperature": 0.2}}, "temperature: Extra inputs are not permitted"),   # API 2026-10-21
    ({"extra_body": {"top_q": 0.9}}, "top_q: Extra inputs are not permitted"),
    ({"max_tokens": 200000}, "maximum allowed number of output tokens"),
    ({"max_tokens": 64000}, "must be streamed"),                               # the SDK's 10-minute rule
    ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
    ({"tools": [{**SUBMIT_KERNEL, "input_schema": {"type": "object", "properties": {}}, "strict": True}]},
     "additionalProperties"),
    ({"tools": [{"name": "t", "strict": True, "input_schema": {
        "type": "object", "additionalProperties": False,
        "properties": {"c": {"type": "number", "minimum": 0, "maximum": 1}}}}]}, "do not support maximum, minimum"),
])
def test_requests_the_api_refuses_are_400_invalid_request_error(api, kw, words):
    api.queue(recorded("ok_translate"))
    with pytest.raises(anthropic.BadRequestError) as err:
        create(api, **kw)
    body = err.value.body
    assert err.value.status_code == 400 and body["error"]["type"] == "invalid_request_error"
    assert words in body["error"]["message"]
    assert api.pending == 1 and len(api.rejected) == 1        # the recorded answer was not spent


@pytest.mark.parametrize("model, kw", [
    ("claude-opus-4-5", {"thinking": {"type": "enabled", "budget_tokens": 2000},
                         "tools": [SUBMIT_KERNEL], "tool_choice": {"type": "auto"}}),
    ("claude-opus-4-5", {"thinking": {"type": "disabled"}, "tools": [SUBMIT_KERNEL],
                         "tool_choice": {"type": "tool", "name": "submit_kernel"}}),
    ("claude-opus-5", {"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}}),
    ("claude-opus-5-5", {"thinking": {"type": "adaptive"}, "output_config": {"effort": "xhigh"},
                         "tools": [{**SUBMIT_KERNEL, "strict": True}], "tool_choice": {"type": "auto"}}),
])
def test_requests_each_model_accepts(api, model, kw):
    api.queue(recorded("ok_translate"))
    msg = create(api, model=model, **kw)
    assert msg.content[-1].name == "submit_kernel" and api.rejected == []


def test_opus_5_refuses_disabled_thinking_above_high_effort(api):
    with pytest.raises(anthropic.BadRequestError, match="thinking.type.disabled"):
        create(api, model="claude-opus-5", thinking={"type": "disabled"}, output_config={"effort": "max"})


def test_unknown_model_is_404(api):
    with pytest.raises(anthropic.NotFoundError):
        create(api, model="claude-nonexistent-9")


def test_streaming_answers_server_sent_events(api):
    api.queue(recorded("ok_translate"))
    with sdk(api).messages.stream(model="claude-opus-5-5", max_tokens=64000, messages=MSG, tools=[SUBMIT_KERNEL],
                                  thinking={"type": "adaptive"}) as stream:
        kinds = [e.type for e in stream]
        message = stream.get_final_message()
    assert "message_start" in kinds and "content_block_delta" in kinds and kinds[-1] == "message_stop"
    thinking, text, tool = message.content
    assert thinking.type == "thinking" and thinking.thinking.startswith("Row-wise") and thinking.signature
    assert tool.name == "submit_kernel" and "__global__" in tool.input["kernel_cu"]
    assert message.usage.output_tokens == 3400 and message.stop_reason == "tool_use"
    assert api.messages()[0].json["stream"] is True


def test_outage_answers_429_or_529_with_retry_after_then_recovers(api):
    api.outage(529, count=2, retry_after="3")
    api.queue(recorded("ok_translate"))
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError) as err:
            create(api)
        assert err.value.status_code == 529 and err.value.body["error"]["type"] == "overloaded_error"
        assert err.value.response.headers["retry-after"] == "3"
    assert create(api).stop_reason == "tool_use"
    api.outage(429)                                   # until end_outage()
    with pytest.raises(anthropic.RateLimitError):
        create(api)
    api.end_outage()


def test_models_api_describes_capabilities(api):
    info = sdk(api).models.retrieve("claude-opus-5-5")
    cap = info.capabilities
    assert info.max_tokens == STUB_MODELS["claude-opus-5-5"].max_tokens
    assert cap.thinking.types.adaptive.supported and not cap.thinking.types.enabled.supported
    assert not cap.thinking.types.disabled.supported and cap.effort.xhigh.supported and cap.structured_outputs.supported
    old = sdk(api).models.retrieve("claude-haiku-4-5").capabilities
    assert old.thinking.types.enabled.supported and not old.effort.supported
    with pytest.raises(anthropic.NotFoundError):
        sdk(api).models.retrieve("claude-nonexistent-9")


def test_enforcement_can_be_turned_off_for_replaying_recordings():
    with StubMessagesAPI(enforce=False) as lax:
        lax.queue(recorded("ok_translate"))
        assert create(lax, thinking={"type": "enabled", "budget_tokens": 2000}).stop_reason == "tool_use"


@pytest.mark.parametrize("stub_class", ["messages", "openai"])
def test_a_client_that_hangs_up_mid_body_is_dropped_not_refused(stub_class):
    """kbench killed while a request is on the wire (a test closing the app during a review) sends headers and part
    of the body: no real server judges a body it never received, so neither stand-in counts it as a refusal."""
    import socket
    import time

    from tests.standins.openai_api import StubOpenAIAPI

    stub = StubMessagesAPI() if stub_class == "messages" else StubOpenAIAPI()
    with stub:
        host, port = stub._server.server_address[:2]
        path = "/v1/messages" if stub_class == "messages" else "/v1/chat/completions"
        with socket.create_connection((host, port)) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
                      f"content-length: 10190\r\n\r\n{{\"model\": ".encode())
        deadline = time.monotonic() + 10
        while stub.abandoned == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert stub.abandoned == 1 and stub.rejected == [] and \
            not [r for r in stub.requests if r.method == "POST"]
