"""engine.service: one set of defaults and one wiring for the CLI and the app."""

from __future__ import annotations

import sys

import pytest

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import API_KEY, api, base_config, kernel_variant, recorded  # noqa: E402,F401

from engine.errors import KbenchError  # noqa: E402
from engine.llm.target import TargetInfo  # noqa: E402
from engine.service.session_service import SessionService  # noqa: E402
from engine.service.spec import DEFAULTS, SessionSpec  # noqa: E402
from tests.doubles.evaluator import fake_evaluator_factory  # noqa: E402


def service(ws, tmp_path, env=None, **llm):
    cfg = base_config(tmp_path, **llm)
    return SessionService(ws, cfg, env=env if env is not None else {"ANTHROPIC_API_KEY": API_KEY},
                          evaluator_factory=fake_evaluator_factory(), target=TargetInfo(note="test"))


def test_defaults_are_one_set(ws, tmp_path):
    plan = service(ws, tmp_path).describe(SessionSpec(task="layernorm"))
    assert (plan.generations, plan.population) == (DEFAULTS.generations, DEFAULTS.population)
    assert plan.proposer == "anthropic" and plan.verify and plan.model == "claude-opus-5-5"
    assert plan.usd == 10.0 and plan.proposals_in_flight == 2 and not plan.resumed
    assert plan.name == "layernorm-fwd-anthropic" and plan.operators == {"mutate": 4.0, "crossover": 1.0,
                                                                         "repair": 1.0, "meta": 0.5}
    tuner = service(ws, tmp_path).describe(SessionSpec(task="gelu_bias", proposer="tuner"))
    assert not tuner.verify and tuner.usd is None and tuner.proposals_in_flight == 1 and tuner.model is None


def test_a_resume_takes_the_stored_settings_unless_told_otherwise(ws, tmp_path):
    svc = service(ws, tmp_path)
    run = svc.start(SessionSpec(task="gelu_bias", proposer="tuner", generations=1, population=2, seed=7),
                    background=False)
    run.session.run()
    run.close()
    again = svc.describe(SessionSpec(task="gelu_bias", proposer="tuner"))
    assert again.resumed and (again.generations, again.population, again.seed) == (1, 2, 7)
    assert svc.describe(SessionSpec(name="gelu_bias-fwd-tuner", generations=2)).generations == 2
    with pytest.raises(KbenchError, match="evolves gelu_bias forward, not layernorm"):
        svc.describe(SessionSpec(task="layernorm", name="gelu_bias-fwd-tuner"))


@pytest.mark.parametrize("spec, words", [
    (SessionSpec(task="no_such_task"), "no_such_task"),
    (SessionSpec(task="gelu_bias", proposer="oracle"), "no session proposer named 'oracle'"),
    (SessionSpec(task="gelu_bias", population=0), "population >= 1"),
    (SessionSpec(task="gelu_bias", proposer="openai"), 'needs [llm] provider = "openai-compatible"'),
    (SessionSpec(name="missing"), "no session 'missing'"),
])
def test_bad_specs_are_plain_errors(ws, tmp_path, spec, words):
    with pytest.raises(KbenchError) as err:
        service(ws, tmp_path).describe(spec)
    assert words in str(err.value)


def test_an_llm_session_without_a_key_refuses_to_start(ws, tmp_path):
    with pytest.raises(KbenchError, match="ANTHROPIC_API_KEY"):
        service(ws, tmp_path, env={}).start(SessionSpec(task="layernorm"), background=False)
    assert ws.sessions() == []


def test_llm_sessions_get_the_verifiers_and_one_ledger(api, ws, tmp_path):
    svc = service(ws, tmp_path, base_url=api.url)
    api.queue(kernel_variant(0), *[recorded("verdict_pass") for _ in range(3)])
    run = svc.start(SessionSpec(task="layernorm", generations=1, population=1, operators="mutate=1"),
                    background=False)
    es = run.session
    assert es.verifier is not None and es.budgets.proposals_in_flight == 2
    assert es.proposer.client.ledger is run.ledger
    r = es.run()
    run.close()
    assert r.completed, r.reason
    purposes = sorted({c.purpose for c in run.ledger.calls})
    assert purposes == ["mutate", "verify:compile", "verify:memory", "verify:numerics"]
    assert ws.session("layernorm-fwd-anthropic").config["verify"] is True


def test_reevaluate_appends_through_the_evaluator_seam(ws, tmp_path):
    svc = service(ws, tmp_path)
    run = svc.start(SessionSpec(task="gelu_bias", proposer="tuner", generations=0), background=False)
    run.session.run()
    run.close()
    (r,) = list(svc.reevaluate("gelu_bias-fwd-tuner"))
    assert r.before == r.status.speedup and len(r.status.measurements) == 2
    assert any(e.event == "reevaluated" for e in r.status.events)
