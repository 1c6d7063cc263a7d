"""What an LLM session costs, as a user with a key meets it: `--budget-usd` is a hard limit on what the API
bills (the stand-in's own usage, at the model's list price), and `kbench report` counts every call the API
answered.

The scripted model's verifiers fail every candidate, so no candidate is compiled and the sessions stay fast:
what is spent is proposals, verifier calls and directives only.
"""

from __future__ import annotations

import itertools
import json

import pytest

from tests.standins.scripted import ScriptedModel, baseline_variants

# Claude Haiku 5.5's list price, USD per million tokens, for prompts up to 100k tokens (input, output, 5-minute
# cache write, cache read): https://platform.claude.com/docs/en/models/haiku-5-5/overview
HAIKU_55 = {"input_tokens": 0.10, "output_tokens": 0.50, "cache_write": 0.125, "cache_read": 0.01}
CHEAP = '[llm]\nmodel = "claude-haiku-5-5"\n'


def _dollars(claude) -> float:
    """What the API billed for every answer the stand-in sent, at Haiku 5.5's price."""
    assert {r.json["model"] for r in claude.messages()} == {"claude-haiku-5-5"}
    return sum(u[k] * HAIKU_55[k] for u in claude.usage for k in HAIKU_55) / 1e6


def _budget_session(user, claude, budget: str, session: str):
    user.config(CHEAP)
    # long answers (about 10k output tokens each) so that a few proposals reach the budget
    claude.respond(ScriptedModel(verdict="fail", padding_tokens=4000, seconds_per_answer=0.3))
    return user.run("evolve", "gelu_bias", "--proposer", "anthropic", "--budget-usd", budget, "--generations", "1",
                    "--population", "20", "--session", session, timeout=900)


@pytest.mark.slow
def test_the_dollar_budget_is_never_crossed_while_proposals_and_reviews_run_at_once(user, claude):
    out = _budget_session(user, claude, "0.05", "money")
    text = out.stdout + out.stderr
    assert claude.rejected == [], claude.rejected
    spent = _dollars(claude)
    assert claude.max_active > 1, "the calls never overlapped: the test shows nothing about concurrency"
    assert spent <= 0.05, f"the API billed ${spent:.4f} of a $0.05 budget ({len(claude.usage)} answers)\n{text}"
    assert spent > 0.02, f"the budget stopped the session early: ${spent:.4f} of $0.05\n{text}"
    print(f"spent ${spent:.4f} in {len(claude.usage)} answers; at most {claude.max_active} at once")
    assert out.returncode == 0, text
    assert "usd budget reached" in text, text


@pytest.mark.slow
def test_the_report_counts_every_call_the_api_answered(user, claude):
    user.config(CHEAP)
    variants = baseline_variants("gelu_bias")
    two = [next(variants), next(variants)]          # from the third answer on, a kernel the session already has
    claude.respond(ScriptedModel(kernels=itertools.cycle(two), verdict="fail"))
    out = user.run("evolve", "gelu_bias", "--proposer", "anthropic", "--generations", "1", "--population", "6",
                   "--operators", "mutate=3,meta=1", "--session", "counted", timeout=900)
    assert claude.rejected == [], claude.rejected
    report = user.run("report", "counted", "--json")
    assert report.returncode == 0, report.stderr
    rep = json.loads(report.stdout)
    tools = [r.json["tools"][0]["name"] for r in claude.messages()]
    assert {"submit_kernel", "submit_verdict", "submit_directives"} <= set(tools), (tools, out.stdout)
    assert all(rep["calls"][k] > 0 for k in ("proposals", "verifiers", "directives", "failed_proposals")), rep["calls"]
    assert rep["calls"]["total"] == len(claude.usage) == len(tools), (rep["calls"], tools)
    billed = {k: sum(u[k] for u in claude.usage) for k in ("input_tokens", "output_tokens", "cache_write", "cache_read")}
    assert (rep["tokens"]["input_tokens"], rep["tokens"]["output_tokens"], rep["tokens"]["cache_write_tokens"],
            rep["tokens"]["cache_read_tokens"]) == tuple(billed.values()), (rep["tokens"], billed)
    text = user.run("report", "counted").stdout
    assert f"- calls: {len(tools)} (proposals " in text, text
