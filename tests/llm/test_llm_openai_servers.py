"""OpenAI-compatible servers as people run them (engine.llm.openai_server, engine.llm.openai_client): the context
length from where each server says it, max_tokens fitted to it, the servers' context-length refusals read and
retried once, tool_choice stepped down on a refusal, and long calls streamed; against the rule-enforcing
stand-ins (tests.standins.openai_rules) through the real openai SDK."""

from __future__ import annotations

import json
import random
import sys

import pytest

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import base_config  # noqa: E402

from engine.llm.client import LLMRequest  # noqa: E402
from engine.llm.errors import LLMError  # noqa: E402
from engine.llm.factory import make_client  # noqa: E402
from engine.llm.openai_server import context_from_models, fit_max_tokens, overflow, tool_refusal  # noqa: E402
from engine.llm.tools import SUBMIT_KERNEL, SUBMIT_VERDICT, kernel_answer, verdict_answer  # noqa: E402
from tests.standins.openai_api import StubOpenAIAPI, oai_error, text_completion, tool_call_completion  # noqa: E402
from tests.standins.openai_rules import VLLM, LlamaCpp, prompt_tokens  # noqa: E402
from tests.standins.scripted import ScriptedModel  # noqa: E402
from tests.standins.server import StubResponse  # noqa: E402

MODEL = "qwen3-coder-30b"
LONG = "# Task: gelu_bias\n" + "The reference computes y = gelu(x + bias) row by row. " * 400   # ~5,500 tokens
KERNEL_REQ = LLMRequest("You write CUDA.", LONG, "Translate it.", SUBMIT_KERNEL, key="p1", purpose="translate")
VERDICT_REQ = LLMRequest("You review CUDA.", "the candidate", "Review it.", SUBMIT_VERDICT, max_tokens=8000)


def client(api, tmp_path, **llm):
    cfg = base_config(tmp_path, provider="openai-compatible", base_url=api.url, model=MODEL, api_key_env="", **llm)
    return make_client(cfg.llm, env={}, sleep=lambda s: None, rng=random.Random(0))


# -- what the servers say --------------------------------------------------------------------------------

@pytest.mark.parametrize("message, body, context, prompt, at_least", [
    # vLLM 0.8.5 (flat body), quoted from vllm-project/vllm#12886
    ("This model's maximum context length is 2048 tokens. However, you requested 2723 tokens (1699 in the messages, "
     "1024 in the completion). Please reduce the length of the messages or completion.", {}, 2048, 1699, False),
    # vLLM 0.10.2
    ("'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum context length is 32768 tokens "
     "and your request has 5000 input tokens (32000 > 32768 - 5000).", {}, 32768, 5000, False),
    # vLLM 0.20-0.31, as vllm-project/vllm#42474 quotes it
    ("This model's maximum context length is 128000 tokens. However, you requested 65535 output tokens and your "
     "prompt contains at least 62466 input tokens, for a total of at least 128001 tokens.", {}, 128000, 62466, True),
    # vLLM 0.32+: max_tokens above the context
    ("max_tokens=40000 cannot be greater than max_model_len=32768. Please request fewer output tokens. "
     "(parameter=max_tokens, value=40000)", {}, 32768, None, False),
    # SGLang 0.5
    ("Requested token count exceeds the model's maximum context length of 32768 tokens. You requested a total of "
     "37000 tokens: 5000 tokens from the input messages and 32000 tokens for the completion.", {}, 32768, 5000, False),
    ("The input (40000 tokens) is longer than the model's context length (32768 tokens).", {}, 32768, 40000, False),
    # llama.cpp: the numbers are in the body too
    ("request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it",
     {"n_prompt_tokens": 9000, "n_ctx": 8192, "type": "exceed_context_size_error"}, 8192, 9000, False),
    # OpenAI (langroid/langroid#820)
    ("This model's maximum context length is 8192 tokens. However, you requested 8334 tokens (338 in the messages, "
     "7996 in the completion). Please reduce the length of the messages or completion.", {}, 8192, 338, False),
    # Ollama, context shift off: nothing to read but that it did not fit
    ("the prompt is longer than the context length currently available to the model; shorten the prompt, adjust the "
     "context length in settings, or use a model with a longer context length", {}, None, None, False),
])
def test_each_servers_context_refusal_is_read(message, body, context, prompt, at_least):
    o = overflow(message, body)
    assert o is not None and o.kind == "too_long" and not o.stop
    assert (o.context, o.prompt_tokens, o.at_least) == (context, prompt, at_least)


def test_other_refusals_are_not_context_refusals_and_tool_choice_refusals_step_down():
    assert overflow('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set') is None
    assert tool_refusal('tool_choice=function "submit_kernel" requires --tool-call-parser to be set', "named") == "auto"
    assert tool_refusal('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                        "auto") == "text"
    assert tool_refusal("tools param requires --jinja flag", "named") == "text"
    assert tool_refusal("qwen2.5-coder:7b does not support tools", "named") == "text"
    assert tool_refusal("The tool specified in `tool_choice` does not match any of the specified `tools`",
                        "named") is None         # kbench named a tool it did not send: not the server's limit
    assert tool_refusal("Unknown parameter: 'response_fromat'.", "named") is None


def test_the_context_where_each_server_lists_it():
    assert context_from_models(VLLM(max_model_len=32768).models(MODEL)["data"], MODEL) == 32768
    assert context_from_models(VLLM(listed=False).models(MODEL)["data"], MODEL) is None
    # llama.cpp lists its one model under the file's name, whatever a request calls it
    assert context_from_models(LlamaCpp(n_ctx=8192).models(MODEL)["data"], MODEL) == 8192
    two = [{"id": "a", "max_model_len": 4096}, {"id": "b", "max_model_len": 8192}]
    assert context_from_models(two, "b") == 8192 and context_from_models(two, "c") is None
    assert fit_max_tokens(32000, None, 5000) == 32000
    assert fit_max_tokens(32000, 32768, 5000) == 27768 and fit_max_tokens(8000, 32768, 5000) == 8000
    assert fit_max_tokens(32000, 8192, 8100) == 256        # a little, and the server's own count decides


# -- against the stand-ins -------------------------------------------------------------------------------

def test_max_tokens_fits_a_32k_vllm_and_the_answer_comes_whole(tmp_path):
    with StubOpenAIAPI(model=MODEL, flavour=VLLM(max_model_len=32768)) as api:
        api.respond(ScriptedModel())
        reply = client(api, tmp_path).call(KERNEL_REQ)
        sent = api.completions()[0].json
        assert api.rejected == [] and sent["max_tokens"] + prompt_tokens(sent) <= 32768 < 32000 + prompt_tokens(sent)
        assert kernel_answer(reply).name == "variant-1"
        assert [r.path for r in api.requests].count("/v1/models") == 1


def test_a_refusal_is_retried_once_with_what_the_servers_numbers_leave(tmp_path):
    with StubOpenAIAPI(model=MODEL, flavour=VLLM(max_model_len=32768, listed=False)) as api:
        api.respond(ScriptedModel())
        c = client(api, tmp_path)
        reply = c.call(KERNEL_REQ)      # 32000 + the prompt refused; the refusal says 32768 and the prompt's count
        first, second = (r.json for r in api.completions())
        assert first["max_tokens"] == 32000 and second["max_tokens"] == 32768 - prompt_tokens(second)
        assert kernel_answer(reply) and len(api.rejected) == 1
        c.call(VERDICT_REQ)             # learnt for the process: fitted from the start
        assert len(api.rejected) == 1 and api.completions()[-1].json["max_tokens"] == 8000
    with StubOpenAIAPI(model=MODEL, flavour=VLLM(max_model_len=16384, listed=False)) as api:
        api.respond(ScriptedModel())
        kernel_answer(client(api, tmp_path).call(KERNEL_REQ))
        assert "cannot be greater than max_model_len=16384" in api.rejected[0][2]     # no prompt count in it
        second = api.completions()[1].json
        assert prompt_tokens(second) < 16384 - second["max_tokens"] < 1.5 * prompt_tokens(second)   # our estimate


def test_configured_context_tokens_win(tmp_path):
    with StubOpenAIAPI(model=MODEL, flavour=VLLM(max_model_len=65536)) as api:
        api.respond(ScriptedModel())
        client(api, tmp_path, context_tokens=12000).call(KERNEL_REQ)
        assert api.completions()[0].json["max_tokens"] < 12000 and not any(r.method == "GET" for r in api.requests)


def test_a_prompt_longer_than_the_context_fails_this_call_with_advice(tmp_path):
    with StubOpenAIAPI(model=MODEL, flavour=LlamaCpp(n_ctx=4096)) as api:
        api.respond(ScriptedModel())
        with pytest.raises(LLMError) as err:
            client(api, tmp_path).call(KERNEL_REQ)
        assert err.value.kind == "too_long" and not err.value.stop
        assert "4096" in str(err.value) and "llama.cpp -c" in str(err.value) and "context_tokens" in str(err.value)
        assert len(api.completions()) == 1      # the server's count leaves nothing: no retry


def test_a_gateway_that_refuses_a_named_tool_choice_gets_auto_from_then_on(tmp_path):
    with StubOpenAIAPI(model=MODEL) as api:
        api.queue(StubResponse(400, oai_error("tool_choice of type 'function' is not supported by this endpoint")),
                  tool_call_completion("submit_verdict", {"verdict": "pass", "confidence": 1, "reasons": []}),
                  tool_call_completion("submit_verdict", {"verdict": "fail", "confidence": 1, "reasons": ["x"]}))
        c = client(api, tmp_path)
        assert verdict_answer(c.call(VERDICT_REQ)).verdict == "pass"
        assert verdict_answer(c.call(VERDICT_REQ)).verdict == "fail"
        assert [r.json["tool_choice"] for r in api.completions()] == [
            {"type": "function", "function": {"name": "submit_verdict"}}, "auto", "auto"]


def test_llama_cpp_ignores_a_named_tool_choice_and_streams_reasoning_and_tool_deltas(tmp_path):
    with StubOpenAIAPI(model=MODEL, flavour=LlamaCpp(n_ctx=32768)) as api:
        api.respond(ScriptedModel())
        reply = client(api, tmp_path).call(KERNEL_REQ)
        sent = api.completions()[0].json
        assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
        answered = api.answered[0]["choices"][0]["message"]
        assert reply.tool_input == json.loads(answered["tool_calls"][0]["function"]["arguments"])
        assert reply.thinking == answered["reasoning_content"] and reply.stop_reason == "tool_use"
        assert reply.usage.output_tokens == api.answered[0]["usage"]["completion_tokens"] > 0
        assert kernel_answer(reply).name == "variant-1"


def test_a_streamed_answer_cut_at_max_tokens_is_a_truncated_call(tmp_path):
    with StubOpenAIAPI(model=MODEL) as api:
        api.respond(ScriptedModel())
        reply = client(api, tmp_path, stream=True).call(
            LLMRequest("s", "c", "p", SUBMIT_KERNEL, max_tokens=300))
        assert api.answered[0]["choices"][0]["finish_reason"] == "length" and reply.stop_reason == "max_tokens"
        with pytest.raises(LLMError, match="truncated|no readable input"):
            kernel_answer(reply)


def test_short_calls_are_sent_whole_unless_the_config_says_stream(tmp_path):
    with StubOpenAIAPI(model=MODEL) as api:
        api.respond(ScriptedModel())
        client(api, tmp_path).call(VERDICT_REQ)                 # 8000 tokens at 20/s: under timeout_s = 600
        client(api, tmp_path, stream=False).call(KERNEL_REQ)
        assert [r.json.get("stream", False) for r in api.completions()] == [False, False]


def test_an_error_event_in_the_middle_of_a_stream_is_retried(tmp_path):
    with StubOpenAIAPI(model=MODEL, flavour=LlamaCpp()) as api:
        api.respond(ScriptedModel())
        api.queue(StubResponse(200, text_completion("Let me think").body, tool="*",
                               midstream_error={"code": 500, "message": "slot unavailable", "type": "server_error"}))
        reply = client(api, tmp_path, stream=True).call(KERNEL_REQ)
        assert kernel_answer(reply) and len(api.completions()) == 2


def test_answers_written_as_text_are_read_back_and_marked(tmp_path):
    with StubOpenAIAPI(model=MODEL, flavour=VLLM(tool_parser=None, auto_tool_choice=False)) as api:
        api.respond(ScriptedModel())
        c = client(api, tmp_path)
        reply = c.call(KERNEL_REQ)           # named refused, auto refused, then no tools: the files come as text
        assert reply.answer_form == "fenced" and kernel_answer(reply).name == "variant-1"
        sent = api.completions()[-1].json
        assert "tools" not in sent and "do not call `submit_kernel`" in sent["messages"][-1]["content"]
        verdict = c.call(VERDICT_REQ)
        assert verdict.answer_form == "json" and verdict_answer(verdict).verdict == "pass"
        assert len(api.rejected) == 2
    with StubOpenAIAPI(model=MODEL) as api:
        api.respond(ScriptedModel(behaviour="fenced"))    # tools offered, the model writes code blocks anyway
        reply = client(api, tmp_path).call(KERNEL_REQ)
        assert reply.tool_name == "submit_kernel" and reply.answer_form == "fenced"
        assert set(kernel_answer(reply).files) == {"kernel.cu", "binding.cpp"}
