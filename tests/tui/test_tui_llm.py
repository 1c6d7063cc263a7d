"""A session started from the app's new-session form goes through engine.service like `kbench evolve`: the
LLM verifiers review its candidates (against the loopback Messages API stub) and their votes are recorded;
an API outage pauses it as "API unavailable" and space resumes it. Fake evaluator, no GPU, no network."""

from __future__ import annotations

import sys

import pytest

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import API_KEY, kernel_variant, recorded, write_llm_config  # noqa: E402

from tests.standins.messages_api import StubMessagesAPI  # noqa: E402
from engine.llm.target import TargetInfo  # noqa: E402
from engine.verdict import Status  # noqa: E402
from tests.doubles.tui import fake_backend, run_app, screen_text, wait_until  # noqa: E402

SESSION = "layernorm-fwd-anthropic"


@pytest.fixture
def no_user_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def backend_for(tmp_path, stub):
    write_llm_config(tmp_path / "ws", stub.url)
    env = {"ANTHROPIC_API_KEY": API_KEY, "KBENCH_CACHE": str(tmp_path / "cache")}
    return fake_backend(tmp_path / "ws", env=env, target=TargetInfo(gpu="FakeGPU", capability="9.0", sms=132,
                                                                   archs=("9.0a",)))


async def start_from_form(app, pilot, population: str = "2"):
    await pilot.press("n")
    await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
    form = app.screen
    assert form.query_one("#ns-proposer").value == "anthropic"       # the LLM proposer, with a key
    assert form.query_one("#ns-population").value == "4"              # the service's default, as the CLI's
    form.query_one("#ns-task").value = "layernorm"
    form.query_one("#ns-generations").value = "1"
    form.query_one("#ns-population").value = population
    await pilot.press("ctrl+s")
    await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")


def test_a_session_started_from_the_form_runs_the_llm_verifiers(tmp_path, no_user_config):
    with StubMessagesAPI() as stub:
        stub.queue(*[kernel_variant(i, delay_s=0.2) for i in range(2)], recorded("verdict_pass"),
                   recorded("verdict_pass"), recorded("verdict_fail"), *[recorded("verdict_pass") for _ in range(3)])
        backend = backend_for(tmp_path, stub)

        async def scenario(app, pilot):
            await start_from_form(app, pilot)
            await wait_until(pilot, lambda: backend.runners.get(SESSION) is not None
                             and backend.runners[SESSION].result is not None, timeout=60)
            await pilot.pause(0.2)
            return backend.runners[SESSION].result, screen_text(app)

        result, text = run_app(backend, scenario)
        assert result.completed, result.reason
        assert stub.rejected == [] and stub.pending == 0
        reviews = [r.json for r in stub.messages() if r.json["tools"][0]["name"] == "submit_verdict"]
        assert len(reviews) == 6
        proposals = [r.json for r in stub.messages() if r.json["tools"][0]["name"] == "submit_kernel"]
        context = proposals[0]["messages"][0]["content"][0]["text"]
        assert "FakeGPU" in context and "132 SMs" in context and "sm_90a is targeted" in context
    ws = backend.ws
    info = ws.session(SESSION)
    assert info.config["started_from"] == "tui" and info.config["verify"] is True
    mutates = [v for v in ws.candidates(SESSION) if v.record.operator == "mutate"]
    assert len(mutates) == 2
    for v in mutates:
        votes = [n.verdict for n in ws.notes(v.id)
                 if getattr(n, "verdict", None) is not None and n.verdict.stage == "llm_verify"]
        assert sorted(x.data["verifier"] for x in votes if "verifier" in x.data) == ["compile", "memory", "numerics"]
        assert all(x.data.get("cost_usd", 0) > 0 for x in votes if "verifier" in x.data)
    # the one confident "fail" vote kept its candidate off the (fake) GPU
    statuses = sorted(v.status.status_of("llm_verify").value for v in mutates)
    assert statuses == [Status.FAIL.value, Status.PASS.value]
    rejected = next(v for v in mutates if v.status.status_of("llm_verify") == Status.FAIL)
    assert rejected.status.measurement is None and rejected.record.source_hash not in backend.fake_evaluators[0].seen
    backend.close()


def test_an_outage_pauses_the_apps_session_and_space_resumes_it(tmp_path, no_user_config):
    with StubMessagesAPI() as stub:
        backend = backend_for(tmp_path, stub)
        stub.outage(529, retry_after="0")

        async def scenario(app, pilot):
            await start_from_form(app, pilot, population="1")
            es = None
            await wait_until(pilot, lambda: backend.runners.get(SESSION) is not None, timeout=30)
            es = backend.runners[SESSION]
            await wait_until(pilot, lambda: es.paused and "API unavailable" in es.pause_reason, timeout=60)
            await wait_until(pilot, lambda: "API unavailable" in screen_text(app), timeout=10)
            paused_text = screen_text(app)
            assert es.running and es.result is None            # paused, not stopped
            stub.end_outage()
            stub.queue(kernel_variant(0), *[recorded("verdict_pass") for _ in range(3)])
            await pilot.press("space")                          # resume
            await wait_until(pilot, lambda: es.result is not None, timeout=60)
            return es.result, paused_text

        result, paused_text = run_app(backend, scenario)
        assert result.completed and not result.paused, result.reason
        assert "paused" in paused_text
    ws = backend.ws
    assert [v.record.operator for v in ws.candidates(SESSION)] == ["baseline", "mutate"]
    assert [e.event for e in ws.session_events(SESSION)] == ["api_unavailable"]
    backend.close()
