"""The loop with the real anthropic proposer and LLM verifiers against the stub Messages API (loopback):
mutations are committed with their prompt and cost, a confident verifier `fail` keeps a candidate off the
evaluator, and the dollars spent count towards the session budget (also after a resume)."""

from __future__ import annotations

import copy
import sys
from dataclasses import replace

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import api, harness, recorded  # noqa: E402,F401

from tests.doubles.evaluator import FakeEvaluator  # noqa: E402
from engine.evolve.loop import Budgets, EvolutionSession  # noqa: E402
from engine.evolve.operators import OperatorPolicy  # noqa: E402
from engine.llm.verifiers import verify  # noqa: E402
from engine.proposers.anthropic import AnthropicProposer  # noqa: E402
from engine.tasks.loader import load_task  # noqa: E402
from engine.verdict import Status  # noqa: E402
from engine.workspace import Workspace  # noqa: E402


def kernel_reply(i: int):
    r = recorded("ok_translate")
    body = copy.deepcopy(r.body)
    for c in body["content"]:
        if c["type"] == "tool_use":
            c["input"]["kernel_cu"] += f"\n// variant {i}\n"
            c["input"]["name"] = f"variant-{i}"
    return replace(r, body=body)


def test_anthropic_mutations_with_verifiers(harness, tmp_path):
    task = load_task("layernorm_lastdim")
    cfg = harness.config()
    cfg = replace(cfg, verify=replace(cfg.verify, enabled=True))
    client = harness.client(cfg)
    prop = AnthropicProposer(client, cfg)
    # per candidate: one kernel answer, then three verifier votes; the second candidate gets a confident fail
    for i in range(3):
        harness.api.queue(kernel_reply(i))
        for _ in range(3):
            harness.api.queue(recorded("verdict_fail" if i == 1 else "verdict_pass"))
    ws = Workspace.create(tmp_path / "ws")
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "llm", task, prop, fake, budgets=Budgets(generations=1, population=3),
                         policy=OperatorPolicy({"mutate": 1.0}), ledger=client.ledger,
                         verifier=lambda c: verify(client, cfg, task, "forward", c, parallel=False),
                         model=cfg.llm.model)
    evs = []
    s.subscribe(evs.append)
    r = s.run()
    assert r.completed, (r.reason, [e.line() for e in evs])
    views = ws.candidates("llm")
    assert [v.record.operator for v in views] == ["baseline", "mutate", "mutate", "mutate"], [e.line() for e in evs]
    assert all(v.record.proposer == "anthropic" and v.record.model for v in views[1:])
    rejected = [v for v in views if v.status.status_of("llm_verify") == Status.FAIL]
    assert len(rejected) == 1 and "variant 1" in ws.files(rejected[0].id).files["kernel.cu"]
    assert rejected[0].record.source_hash not in fake.seen and len(fake.seen) == 3
    assert "## Prompt" in ws.prompt(views[1].id)
    spent = client.ledger.spent_usd
    assert spent > 0 and s.spent_usd() == spent
    fake.close()
    # a resume counts what the first run spent (proposals from candidate.json, verifier votes from the notes)
    s2 = EvolutionSession(ws, "llm", task, prop, FakeEvaluator(task), budgets=Budgets(generations=1, population=3,
                          usd=spent * 0.99), policy=OperatorPolicy({"mutate": 1.0}))
    r2 = s2.run()
    assert abs(s2.spent_before - spent) < 1e-9
    assert r2.completed and "usd" in r2.reason
    ws.close()
