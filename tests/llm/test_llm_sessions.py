"""Whole `kbench evolve` sessions against the loopback stubs (the real anthropic and openai SDKs, real HTTP),
with the fake evaluator (no compiler, no GPU). Each LLM failure class ends with its own status:

- a full session succeeds, its candidates reviewed by the LLM verifiers;
- the API refusing the request (400 invalid_request_error) stops it at once, with the API's message, exit 1;
- a sustained outage (429/529) pauses it as "API unavailable", exit 75, nothing counted against the search;
  the same command resumes it;
- the spend of failed proposals is on the session's note, survives kill -9 and counts against the budget.
"""

from __future__ import annotations

import json
from dataclasses import replace
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import LLM_FIXTURES, REPO

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import API_KEY, api, kernel_variant, recorded, write_llm_config  # noqa: E402,F401

from engine.cli import main  # noqa: E402
from engine.evolve.resume import load_state  # noqa: E402
from tests.standins.messages_api import StubMessagesAPI  # noqa: E402
from tests.standins.claude_rules import STUB_MODELS, StubModel  # noqa: E402
from tests.standins.openai_api import StubOpenAIAPI, completion_from_message  # noqa: E402
from engine.verdict import Status  # noqa: E402
from engine.workspace import Workspace  # noqa: E402
from tests.doubles.kbench import use_fake_evaluator  # noqa: E402

EVOLVE = ["evolve", "layernorm", "--generations", "1", "--population", "2", "--operators", "mutate=1"]
SESSION = "layernorm-fwd-anthropic"


@pytest.fixture(autouse=True)
def _fake_evaluator(monkeypatch):
    """Every session here evaluates on the fake evaluator: the LLM side is what is tested."""
    use_fake_evaluator(monkeypatch.setattr)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A key, and no user config or model cache from the machine running the tests."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    return tmp_path


def ws_path(tmp_path: Path) -> str:
    return str(tmp_path / "ws")


def evolve(tmp_path: Path, *extra: str) -> int:
    return main(["--workspace", ws_path(tmp_path), *EVOLVE, *extra])


def test_a_full_session_succeeds_and_its_candidates_are_reviewed(api, env, capsys):
    write_llm_config(env / "ws", api.url)
    api.queue(*[kernel_variant(i, delay_s=0.3) for i in range(2)], *[recorded("verdict_pass") for _ in range(6)])
    assert evolve(env) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "stopped: all 1 generation(s) done" in out
    with Workspace.open(ws_path(env)) as ws:
        views = ws.candidates(SESSION)
        assert [v.record.operator for v in views] == ["baseline", "mutate", "mutate"]
        for v in views[1:]:
            verdicts = [n.verdict for n in ws.notes(v.id) if getattr(n, "verdict", None) is not None]
            votes = [x for x in verdicts if x.stage == "llm_verify" and "verifier" in x.data]
            assert sorted(x.data["verifier"] for x in votes) == ["compile", "memory", "numerics"]
            assert v.status.status_of("llm_verify") == Status.PASS and v.status.measurement is not None
            assert v.record.proposer == "anthropic" and v.record.model
        info = ws.session(SESSION)
        assert info.config["verify"] is True and info.config["population"] == 2
    assert api.rejected == [] and api.pending == 0
    kernels = [r.json for r in api.messages() if r.json["tools"][0]["name"] == "submit_kernel"]
    assert all(b["stream"] and b["thinking"] == {"type": "adaptive", "display": "summarized"} and b["tool_choice"] == {"type": "auto"}
               for b in kernels)
    assert api.max_active >= 2            # the two proposals were in flight together


def test_a_model_newer_than_the_table_is_corrected_by_its_first_refusal(tmp_path, env, capsys):
    # A model newer than kbench's table and no Models API to ask: kbench sends the safe shape with effort; this
    # model takes no effort. The 400 names it, the table is corrected, the call is sent once more and the
    # session goes on.
    models = {**STUB_MODELS, "claude-opus-6": replace(STUB_MODELS["claude-opus-5-5"], efforts=())}
    with StubMessagesAPI(models=models) as stub:
        write_llm_config(env / "ws", stub.url, model="claude-opus-6", models_api=False)
        stub.queue(*[kernel_variant(i) for i in range(2)], *[recorded("verdict_pass") for _ in range(6)])
        code = evolve(env)
        captured = capsys.readouterr()
        assert code == 0, captured
        refused = [m for _, m in stub.rejected]
        assert refused and all("output_config.effort" in m for m in refused) and len(refused) <= 3
        refused_ids = {id(r) for r, _ in stub.rejected}
        accepted = [r.json for r in stub.messages() if id(r) not in refused_ids]
        assert accepted and all("output_config" not in b for b in accepted)
    with Workspace.open(ws_path(env)) as ws:
        assert [v.record.operator for v in ws.candidates(SESSION)] == ["baseline", "mutate", "mutate"]


def test_a_refused_request_stops_the_session_with_the_apis_message(tmp_path, env, capsys):
    # The API refuses something that is no capability kbench can correct (strict tools on a model without
    # structured outputs that kbench's table says has them): the session stops at once with the API's words.
    models = {**STUB_MODELS, "claude-opus-5-5": replace(STUB_MODELS["claude-opus-5-5"], structured_outputs=False)}
    with StubMessagesAPI(models=models) as stub:
        write_llm_config(env / "ws", stub.url, models_api=False)
        stub.queue(*[kernel_variant(i) for i in range(2)])
        code = evolve(env)
        captured = capsys.readouterr()
        assert code == 1, captured
        assert "strict tool use is not supported for claude-opus-5-5" in captured.err
        assert "the API refused the request (400 invalid_request_error)" in captured.err
        assert "stopped: the proposer stopped" in captured.out and "search space is spent" not in captured.out
        assert len(stub.rejected) == len(stub.messages()) <= 2     # no retries of a refused request
        assert stub.pending == 2
    with Workspace.open(ws_path(env)) as ws:
        assert [v.record.operator for v in ws.candidates(SESSION)] == ["baseline"]

def test_a_sustained_outage_pauses_the_session_and_the_same_command_resumes_it(api, env, capsys):
    write_llm_config(env / "ws", api.url)
    api.outage(529, retry_after="0")                     # overloaded until further notice
    t0 = time.monotonic()
    code = evolve(env)
    captured = capsys.readouterr()
    assert code == 75, captured
    assert time.monotonic() - t0 < 30
    assert "API unavailable" in captured.err and "Overloaded" in captured.err and "paused:" in captured.out
    assert "nothing was counted against the search" in captured.err
    assert "search space is spent" not in captured.out
    with Workspace.open(ws_path(env)) as ws:
        assert [v.record.operator for v in ws.candidates(SESSION)] == ["baseline"]
        events = [e.event for e in ws.session_events(SESSION)]
        assert "api_unavailable" in events and "proposal_failed" not in events
    # the API is back: the same command carries on and fills the whole generation
    api.end_outage()
    api.queue(*[kernel_variant(i) for i in range(2)], *[recorded("verdict_pass") for _ in range(6)])
    assert evolve(env) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "session resumed at gen 0" in out or "session resumed at gen 1" in out
    with Workspace.open(ws_path(env)) as ws:
        assert [v.record.operator for v in ws.candidates(SESSION)] == ["baseline", "mutate", "mutate"]


def test_a_rate_limit_that_clears_within_the_window_is_ridden_out(api, env, capsys):
    write_llm_config(env / "ws", api.url, outage_minutes=1.0, concurrency=1)
    api.outage(429, count=3, retry_after="0.05")
    api.queue(*[kernel_variant(i) for i in range(2)], *[recorded("verdict_pass") for _ in range(6)])
    assert evolve(env) == 0, capsys.readouterr()
    assert len(api.messages()) == 3 + 2 + 6


CHILD = """
import sys
from engine.cli import main
from tests.doubles.kbench import use_fake_evaluator
use_fake_evaluator()
sys.exit(main(sys.argv[1:]))
"""


def test_failed_proposal_spend_survives_a_kill_and_counts_against_the_budget(api, env, capsys):
    """Every answer is prose instead of a tool call: each proposal fails, yet each was paid for. The spend is
    on the session's note before the next proposal; kill -9 loses none of it; a resume counts it."""
    write_llm_config(env / "ws", api.url, concurrency=1)
    api.queue(*[recorded("no_tool_prose", delay_s=0.2) for _ in range(30)])
    cmd = [sys.executable, "-c", CHILD, "--workspace", ws_path(env), "evolve", "layernorm", "--generations", "3",
           "--population", "3", "--operators", "mutate=1", "--budget-usd", "100"]
    child_env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(cmd, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    ws = None
    try:
        while time.monotonic() < deadline:
            if child.poll() is not None:
                pytest.fail("the session ended before it could be killed: " + child.stdout.read().decode()[-2000:])
            if Path(ws_path(env)).exists():
                ws = ws or Workspace.open(ws_path(env))
                if SESSION in {s.name for s in ws.sessions()} and \
                        sum(e.event == "proposal_failed" for e in ws.session_events(SESSION)) >= 3:
                    break
            time.sleep(0.05)
        else:
            pytest.fail("no failed proposals were recorded in time")
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    failed = [e for e in ws.session_events(SESSION) if e.event == "proposal_failed"]
    assert len(failed) >= 3
    for e in failed:
        assert e.data["error"] == "answer" and "prose" in e.data["reason"]
        assert e.data["usage"]["output_tokens"] > 0 and e.data["cost_usd"] > 0 and e.data["operator"] == "mutate"
    spent = sum(e.data["cost_usd"] for e in failed)
    state = load_state(ws, SESSION)
    assert state.failed_proposals == len(failed) and state.spent_usd == pytest.approx(spent)
    ws.close()
    # a resume whose budget that spend already uses up proposes nothing more
    asked = len(api.messages())
    code = main(["--workspace", ws_path(env), "evolve", "layernorm", "--generations", "3", "--population", "3",
                 "--operators", "mutate=1", "--budget-usd", f"{spent * 0.999:.6f}"])
    out = capsys.readouterr().out
    assert code == 0 and "budget reached: usd" in out, out
    assert len(api.messages()) <= asked + 1      # at most the one the killed run had already sent


def test_an_openai_compatible_endpoint_runs_the_same_session(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with StubOpenAIAPI(model="qwen3-coder-30b") as stub:
        write_llm_config(tmp_path / "ws", stub.url, provider="openai-compatible", model="qwen3-coder-30b",
                         api_key_env="")
        for i in range(2):
            stub.queue(completion_from_message(kernel_variant(i).body, model="qwen3-coder-30b"))
        for _ in range(6):
            stub.queue(completion_from_message(recorded("verdict_pass").body, model="qwen3-coder-30b"))
        assert main(["--workspace", str(tmp_path / "ws"), *EVOLVE]) == 0, capsys.readouterr()
        bodies = [r.json for r in stub.completions()]
        assert stub.rejected == [] and len(bodies) == 8
        tools = sorted(b["tool_choice"]["function"]["name"] for b in bodies)
        assert tools == ["submit_kernel"] * 2 + ["submit_verdict"] * 6
        assert all(b["messages"][0]["role"] == "system" and b["tools"][0]["type"] == "function" for b in bodies)
        # an outage of the endpoint pauses this session too
        stub.outage(503)
        code = main(["--workspace", str(tmp_path / "ws"), *EVOLVE, "--session", "oai2"])
        assert code == 75 and "API unavailable" in capsys.readouterr().err
    with Workspace.open(tmp_path / "ws") as ws:
        views = ws.candidates("layernorm-fwd-openai")
        assert [v.record.proposer for v in views[1:]] == ["openai", "openai"]
        assert all(v.status.status_of("llm_verify") == Status.PASS for v in views[1:])
        assert all(ws.files(v.id).meta.get("cost_usd", 0) == 0 for v in views[1:])    # a local model is free
        assert json.loads(json.dumps(ws.session("layernorm-fwd-openai").config))["provider"] == "openai-compatible"


def test_ctrl_c_does_not_wait_for_an_llm_call_in_flight(api, env):
    write_llm_config(env / "ws", api.url)
    api.queue(*[kernel_variant(i, delay_s=30) for i in range(2)])
    cmd = [sys.executable, "-c", CHILD, "--workspace", ws_path(env), *EVOLVE]
    # SIGINT reaches the child at its default even in a background test run (tests/conftest.py)
    child = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(r.json["tools"][0]["name"] == "submit_kernel" for r in api.messages()):
        assert time.monotonic() < deadline and child.poll() is None, "no proposal was requested"
        time.sleep(0.05)
    t0 = time.monotonic()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=20)
    assert child.returncode == 130, err
    assert time.monotonic() - t0 < 10             # the 30-second answers were not waited for
    assert "stopped: stopped by request" in out
