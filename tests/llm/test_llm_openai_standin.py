"""The OpenAI-compatible stand-in refuses what the servers refuse, in their words and body shapes, as the openai SDK
sees them (tests.standins.openai_rules lists the rules and their sources): a stand-in that only returned what
kbench expects would test nothing."""

from __future__ import annotations

import json

import openai
import pytest

from tests.standins.openai_api import StubOpenAIAPI
from tests.standins.openai_rules import VLLM, LlamaCpp, prompt_tokens
from tests.standins.scripted import ScriptedModel

MODEL = "qwen3-coder-30b"
TOOL = {"type": "function", "function": {"name": "submit_verdict", "parameters": {"type": "object"}}}
NAMED = {"type": "function", "function": {"name": "submit_verdict"}}
MESSAGES = [{"role": "user", "content": "Review it. Answer through submit_verdict."}]


def sdk(api, key="none"):
    return openai.OpenAI(base_url=api.url, api_key=key, max_retries=0)


class Refused:
    """A refusal as the SDK raised it; `message` is the server's own, without the SDK's "Error code" prefix."""

    def __init__(self, err: openai.APIStatusError):
        self.status_code, self.type, self.param, self.body = err.status_code, err.type, err.param, err.body
        self.message = err.body.get("message") if isinstance(err.body, dict) else str(err.body)


def refused(api, **params) -> Refused:
    with pytest.raises(openai.APIStatusError) as err:
        sdk(api, api.key or "none").chat.completions.create(**{"model": MODEL, "messages": MESSAGES, **params})
    return Refused(err.value)


def test_vllm_without_a_tool_parser_refuses_named_required_and_auto_but_answers_without_tools():
    with StubOpenAIAPI(model=MODEL, flavour=VLLM(tool_parser=None, auto_tool_choice=False)) as api:
        api.respond(ScriptedModel())
        e = refused(api, tools=[TOOL], tool_choice=NAMED, max_tokens=100)
        assert e.status_code == 400 and e.message == 'tool_choice=function "submit_verdict" requires --tool-call-parser ' \
                                                     "to be set" and e.type == "BadRequestError"
        assert "--enable-auto-tool-choice" in refused(api, tools=[TOOL], max_tokens=100).message   # implicit auto
        assert "requires --tool-call-parser" in refused(api, tools=[TOOL], tool_choice="required").message
        answer = sdk(api).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2000)
        content = answer.choices[0].message.content
        assert not answer.choices[0].message.tool_calls and "```json" in content and '"verdict"' in content
        with_none = sdk(api).chat.completions.create(model=MODEL, messages=MESSAGES, tools=[TOOL],
                                                     tool_choice="none", max_tokens=2000)
        assert "<tool_call>" in with_none.choices[0].message.content      # the model's call, left as text


def test_vllm_request_validation():
    with StubOpenAIAPI(model=MODEL, key="sk-x") as api:
        assert refused(api, tools=[], max_tokens=10).message.startswith("`tools` must not be an empty array")
        assert refused(api, tool_choice="auto").message == "When using `tool_choice`, `tools` must be set."
        assert "does not match any" in refused(api, tools=[TOOL], tool_choice={
            "type": "function", "function": {"name": "other"}}).message
        assert refused(api, stream_options={"include_usage": True}).message.startswith("Stream options can only")
        assert refused(api, max_tokens=0).message == "max_tokens must be at least 1, got 0."
        assert refused(api, max_tokens=70000).param == "max_tokens"
        unknown = refused(api, model="gpt-4o")
        assert unknown.status_code == 404 and "`gpt-4o` does not exist" in unknown.message
        with pytest.raises(openai.AuthenticationError) as err:
            sdk(api, "wrong").models.list()
        assert err.value.body == "Unauthorized"


def test_vllm_context_strict_before_032_and_clamped_after():
    long = [{"role": "user", "content": "x" * 4 * 30000}]
    with StubOpenAIAPI(model=MODEL, flavour=VLLM(max_model_len=32768)) as api:
        e = refused(api, messages=long, max_tokens=4000)
        p = prompt_tokens({"messages": long})
        assert e.param == "input_tokens" and e.message == (
            f"This model's maximum context length is 32768 tokens. However, you requested 4000 output tokens and your "
            f"prompt contains {p} input tokens, for a total of {p + 4000} tokens. Please reduce the length of the input "
            f"prompt or the number of requested output tokens. (parameter=input_tokens, value={p})")
    with StubOpenAIAPI(model=MODEL, flavour=VLLM(max_model_len=32768, clamp=True)) as api:
        api.respond(ScriptedModel())
        n = 32768 - 10 - prompt_tokens({"messages": MESSAGES}) - 4        # a prompt that leaves 10 tokens
        answer = sdk(api).chat.completions.create(model=MODEL, max_tokens=4000,
                                                  messages=[{"role": "user", "content": "x" * 4 * n}] + MESSAGES)
        assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 10   # clamped
        assert "even without any output tokens" in refused(api, messages=[{"role": "user", "content": "x" * 140000}]).message


def test_a_forced_named_tool_reports_stop_and_a_cut_answer_length():
    with StubOpenAIAPI(model=MODEL) as api:
        api.respond(ScriptedModel())
        forced = sdk(api).chat.completions.create(model=MODEL, messages=MESSAGES, tools=[TOOL], tool_choice=NAMED)
        assert forced.choices[0].finish_reason == "stop" and forced.choices[0].message.tool_calls
        auto = sdk(api).chat.completions.create(model=MODEL, messages=MESSAGES, tools=[TOOL], max_tokens=4000)
        assert auto.choices[0].finish_reason == "tool_calls"
        assert json.loads(auto.choices[0].message.tool_calls[0].function.arguments)["verdict"] == "pass"
        cut = sdk(api).chat.completions.create(model=MODEL, messages=MESSAGES, tools=[TOOL], max_tokens=20)
        assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 20


def test_llama_cpp_context_refusal_tools_without_jinja_and_a_named_choice_read_as_auto():
    with StubOpenAIAPI(model=MODEL, flavour=LlamaCpp(n_ctx=4096)) as api:
        api.respond(ScriptedModel())
        e = refused(api, messages=[{"role": "user", "content": "x" * 20000}], stream=True)
        assert e.status_code == 400 and e.type == "exceed_context_size_error"
        assert e.body["n_ctx"] == 4096 and e.message.endswith("exceeds the available context size (4096 tokens), "
                                                              "try increasing it")
        listed = sdk(api).models.list().data[0]
        assert listed.model_extra["meta"]["n_ctx"] == 4096 and listed.owned_by == "llamacpp"
        named = sdk(api).chat.completions.create(model="anything", messages=MESSAGES, tools=[TOOL], tool_choice=NAMED)
        assert named.choices[0].finish_reason == "tool_calls"          # not read as a named choice
        assert refused(api, tools=[TOOL], tool_choice="any").message == "Invalid tool_choice: any"
    with StubOpenAIAPI(model=MODEL, flavour=LlamaCpp(jinja=False)) as api:
        assert refused(api, tools=[TOOL]).message == "tools param requires --jinja flag"


def test_a_stream_is_what_the_sdk_accumulates():
    from openai.lib.streaming.chat import ChatCompletionStreamState

    kernel_tool = {"type": "function", "function": {"name": "submit_kernel", "parameters": {"type": "object"}}}
    with StubOpenAIAPI(model=MODEL) as api:
        api.respond(ScriptedModel())
        state = ChatCompletionStreamState()
        with sdk(api).chat.completions.create(model=MODEL, messages=MESSAGES, tools=[kernel_tool], stream=True,
                                              stream_options={"include_usage": True}) as events:
            chunks = list(events)
        for c in chunks:
            state.handle_chunk(c)
        done, whole = state.current_completion_snapshot, api.answered[0]
        sent = whole["choices"][0]["message"]
        assert len(chunks) > 20 and chunks[-1].choices == [] and done.usage.total_tokens == whole["usage"]["total_tokens"]
        call = done.choices[0].message.tool_calls[0]
        assert call.id == sent["tool_calls"][0]["id"] and call.function.name == "submit_kernel"   # sent once, not doubled
        assert call.function.arguments == sent["tool_calls"][0]["function"]["arguments"]
        assert json.loads(call.function.arguments)["kernel_cu"].count("__global__") >= 1
        assert done.choices[0].message.model_extra["reasoning"] == sent["reasoning"]
        assert done.choices[0].finish_reason == "tool_calls"
