"""The loop's LLM-facing behaviour on CPU (fake evaluator): proposals in flight while the GPU measures, an API
outage holds a candidate's review and pauses the session, failed proposals leave their spend on the session
note, and mutate requests carry what the model needs (elite code, lessons from failures, per-config times)."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace

import pytest

from engine.candidates import Candidate, load_candidate
from tests.doubles.evaluator import FakeEvaluator
from engine.evolve.loop import Budgets, EvolutionSession
from engine.evolve.operators import OperatorPolicy
from engine.evolve.resume import load_state
from engine.llm.accounting import Usage
from engine.llm.verifiers import STAGE, Verification
from engine.proposers.base import Proposal, ProposalStatus, parent_id, with_provenance
from engine.verdict import Status, Verdict
from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import harness, api, layernorm, parent_candidate  # noqa: E402,F401


class Slow:
    """A proposer that takes `delay` per proposal and records when each ran; `plan` scripts statuses."""

    name = "scripted"
    operators = frozenset({"translate", "mutate", "crossover", "repair", "meta"})

    def __init__(self, base: Candidate, delay: float = 0.0, plan: list[str] | None = None, cost: float = 0.0):
        self.base, self.delay, self.plan, self.cost = base, delay, list(plan or []), cost
        self.n = 0
        self.intervals: list[tuple[float, float]] = []
        self.requests = []
        self.lock = threading.Lock()

    def available(self):
        return True

    def unavailable_reason(self):
        return ""

    def propose(self, request):
        t0 = time.monotonic()
        with self.lock:
            self.n += 1
            n = self.n
            self.requests.append(request)
            what = self.plan.pop(0) if self.plan else "ok"
        time.sleep(self.delay)
        self.intervals.append((t0, time.monotonic()))
        parents = tuple(parent_id(p) for p in request.parents)
        usage = Usage(1000, 2000)
        if what == "failed":
            return Proposal(ProposalStatus.FAILED, self.name, request.operator, reason="the answer was prose",
                            parents=parents, usage=usage, cost_usd=self.cost, model="claude-test",
                            data={"error": "answer"})
        if what == "unavailable":
            return Proposal(ProposalStatus.UNAVAILABLE, self.name, request.operator, parents=parents,
                            reason="API unavailable: 529 overloaded_error: Overloaded", data={"error": "unavailable"})
        src = request.parents[0] if request.parents else self.base
        marker = "" if what == "duplicate" else f"\n// {request.operator} {n}\n"
        if what == "fail_correct":
            marker += "// FAIL_CORRECT\n"
        cand = Candidate("native", {**src.files, "kernel.cu": src.files["kernel.cu"] + marker}, f"v{n}")
        p = Proposal(ProposalStatus.OK, self.name, request.operator, parents=parents, rationale=f"variant {n}",
                     prompt="p", usage=usage, cost_usd=self.cost, model="claude-test")
        return replace(p, candidate=with_provenance(cand, p))


class Timed(FakeEvaluator):
    def __init__(self, task, delay_s):
        super().__init__(task, delay_s=delay_s)
        self.intervals = []

    def submit(self, candidate, on_stage=None):
        fut = super().submit(candidate, on_stage)
        t0 = time.monotonic()
        fut.add_done_callback(lambda f: self.intervals.append((t0, time.monotonic())))
        return fut


def base_of(task):
    return load_candidate(task.baseline_dir("forward"))


def test_proposals_are_in_flight_while_the_gpu_measures(ws, task):
    prop = Slow(base_of(task), delay=0.25)
    fake = Timed(task, delay_s=0.3)
    s = EvolutionSession(ws, "overlap", task, prop, fake, policy=OperatorPolicy({"mutate": 1.0}),
                         budgets=Budgets(generations=1, population=4, proposals_in_flight=2))
    r = s.run()
    fake.close()
    assert r.completed, r.reason
    assert len(ws.candidates("overlap")) == 5
    starts = sorted(a for a, _ in prop.intervals)
    # two proposals ran at once, and proposals were being written while candidates were measured
    assert any(b < e for (a, e), (b, _) in zip(sorted(prop.intervals), sorted(prop.intervals)[1:]))
    gen1_evals = [iv for iv in fake.intervals if iv[0] > starts[0]]
    assert any(a < pe and ps < e for a, e in gen1_evals for ps, pe in prop.intervals)


def test_an_outage_during_review_holds_the_candidate_and_pauses(ws, task):
    calls = []

    def verifier(cand):
        calls.append(cand.source_hash)
        if len(calls) == 1:
            return Verification(Verdict(STAGE, Status.SKIPPED, "not reviewed"), (),
                                unavailable="API unavailable: 529 overloaded_error: Overloaded")
        vote = Verdict(STAGE, Status.PASS, "compile: pass (0.90): fine", {"verifier": "compile", "confidence": 0.9})
        return Verification(Verdict(STAGE, Status.PASS, "1 of 1 verifier(s) found no defect"), (vote,))

    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "held", task, Slow(base_of(task)), fake, policy=OperatorPolicy({"mutate": 1.0}),
                         budgets=Budgets(generations=1, population=1), verifier=verifier, on_unavailable="pause")
    events = []
    s.subscribe(events.append)
    s.start()
    deadline = time.monotonic() + 20
    while not (s.paused and s.pause_reason) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert s.paused and "API unavailable" in s.pause_reason and s.running
    (held,) = [v for v in ws.candidates("held") if v.record.operator == "mutate"]
    assert "llm_verify" not in held.status.stages and "static" not in held.status.stages   # nothing decided
    assert held.record.source_hash not in fake.seen
    assert any(e.kind == "Paused" and "API unavailable" in e.reason for e in events)
    s.resume()
    r = s.join(20)
    fake.close()
    assert r is not None and r.completed, r
    st = ws.status(held.id)
    assert st.status_of("llm_verify") == Status.PASS and st.measurement is not None
    assert calls == [held.record.source_hash] * 2
    assert [e.event for e in ws.session_events("held")] == ["api_unavailable"]


def test_an_outage_in_a_headless_run_ends_it_as_a_pause_and_a_resume_reviews_the_candidate(ws, task):
    answers = iter([Verification(Verdict(STAGE, Status.SKIPPED, "x"), (), unavailable="API unavailable: 529")])

    def verifier(cand):
        return next(answers, Verification(Verdict(STAGE, Status.PASS, "fine"), ()))

    budgets = Budgets(generations=1, population=1)
    r = EvolutionSession(ws, "hl", task, Slow(base_of(task)), FakeEvaluator(task), budgets=budgets,
                         policy=OperatorPolicy({"mutate": 1.0}), verifier=verifier).run()
    assert r.paused and not r.completed and "API unavailable" in r.reason and "resume" in r.reason
    fake = FakeEvaluator(task)
    r2 = EvolutionSession(ws, "hl", task, Slow(base_of(task)), fake, budgets=budgets,
                          policy=OperatorPolicy({"mutate": 1.0}), verifier=verifier).run()
    assert r2.completed and not r2.paused
    (m,) = [v for v in ws.candidates("hl") if v.record.operator == "mutate"]
    assert m.status.status_of("llm_verify") == Status.PASS and m.record.source_hash in fake.seen


def test_unavailable_proposals_pause_without_using_up_the_generation(ws, task):
    prop = Slow(base_of(task), plan=["unavailable"])
    r = EvolutionSession(ws, "un", task, prop, FakeEvaluator(task), budgets=Budgets(generations=1, population=2),
                         policy=OperatorPolicy({"mutate": 1.0})).run()
    assert r.paused and "API unavailable" in r.reason
    assert [v.record.operator for v in ws.candidates("un")] == ["baseline"]
    r2 = EvolutionSession(ws, "un", task, Slow(base_of(task)), FakeEvaluator(task),
                          budgets=Budgets(generations=1, population=2), policy=OperatorPolicy({"mutate": 1.0})).run()
    assert r2.completed and len(ws.candidates("un")) == 3


def test_failed_and_duplicate_proposals_leave_their_spend_on_the_session_note(ws, task):
    prop = Slow(base_of(task), plan=["failed", "duplicate", "ok", "failed", "ok"], cost=0.25)
    s = EvolutionSession(ws, "spend", task, prop, FakeEvaluator(task), budgets=Budgets(generations=1, population=2),
                         policy=OperatorPolicy({"mutate": 1.0}))
    r = s.run()
    assert r.completed
    failed = [e for e in ws.session_events("spend") if e.event == "proposal_failed"]
    assert len(failed) == 3                  # two failed answers and one duplicate, around the two commits
    assert {e.data["error"] for e in failed} == {"answer", None}
    assert any("repeats a candidate" in e.data["reason"] for e in failed)
    assert all(e.data["cost_usd"] == 0.25 and e.data["usage"]["output_tokens"] == 2000 for e in failed)
    state = load_state(ws, "spend")
    assert state.failed_proposals == 3
    from engine.profile.session_report import build_report
    report = build_report(ws, "spend")
    assert report.usd["failed_proposals"] == pytest.approx(0.75) and report.usd["total"] == pytest.approx(1.25)
    # a resume counts the failed proposals' dollars with the committed candidates'
    s2 = EvolutionSession(ws, "spend", task, Slow(base_of(task)), FakeEvaluator(task),
                          budgets=Budgets(generations=1, population=2, usd=1.0), policy=OperatorPolicy({"mutate": 1.0}))
    s2.run()
    assert s2.spent_before == pytest.approx(5 * 0.25)   # three failed proposals and two committed candidates


def test_directives_written_before_anything_is_measured_are_kept_with_their_cost(ws, task):
    class Meta(Slow):
        def propose(self, request):
            if request.operator == "meta":
                return Proposal(ProposalStatus.OK, self.name, "meta", directives="- vectorise the bias load",
                                usage=Usage(500, 100), cost_usd=0.05, model="claude-test")
            return super().propose(request)

    fake = FakeEvaluator(task, no_gpu=True)          # nothing is measured: no candidate to hang them on
    s = EvolutionSession(ws, "early", task, Meta(base_of(task)), fake, budgets=Budgets(generations=1, population=3),
                         policy=OperatorPolicy({"mutate": 1.0, "meta": 50.0}))
    s.run()
    fake.close()
    (kept,) = [e for e in ws.session_events("early") if e.event == "directives"]
    assert kept.data["usage"]["output_tokens"] == 100 and kept.data["cost_usd"] == 0.05
    state = load_state(ws, "early")                 # a resume goes on with them, and counts what they cost
    assert state.directives == "- vectorise the bias load" and state.spent_usd == pytest.approx(0.05)


def test_mutate_requests_carry_elite_lessons_and_per_config_times(ws, task):
    prop = Slow(base_of(task), plan=["ok", "fail_correct", "ok", "ok", "ok", "ok"])
    r = EvolutionSession(ws, "ctx", task, prop, FakeEvaluator(task), budgets=Budgets(generations=2, population=3),
                         policy=OperatorPolicy({"mutate": 1.0})).run()
    assert r.completed
    gen2 = [q for q in prop.requests if q.generation == 2]
    assert gen2
    for q in gen2:
        assert any("failed at correctness" in lesson for lesson in q.lessons)
        assert "| config | candidate ms | physical floor ms | of the roofline | eager ms |" in q.parent_summaries[0]
        if q.elite is not None:
            assert q.elite.source_hash != q.parents[0].source_hash and "geomean speedup" in q.elite_summary
    assert any(q.elite is not None for q in gen2)


def test_the_prompt_shows_target_inits_elite_and_lessons_and_sizes_max_tokens(harness, layernorm):
    from engine.llm.client import LLMClient
    from engine.proposers.anthropic import LLMProposer
    from engine.proposers.base import ProposalRequest

    cfg = harness.config()
    prop = LLMProposer(harness.client(cfg), cfg, target="- GPU: NVIDIA H100 (132 SMs)\n- sm_90a is targeted")
    parent = parent_candidate()
    big = Candidate("native", {**parent.files, "kernel.cu": parent.files["kernel.cu"] + "// pad\n" * 40000}, "big")
    elite = Candidate("native", {**parent.files, "kernel.cu": parent.files["kernel.cu"] + "// ELITE_MARK\n"}, "elite")
    req = ProposalRequest(layernorm, "mutate", parents=(big,), elite=elite, elite_summary="s1-g1-2: 2.1x",
                          lessons=("s1-g1-3 (mutate): failed at correctness: max abs err 3e-2",))
    llm_req = prop.build_request(req)
    assert "NVIDIA H100 (132 SMs)" in llm_req.context and "## Target" in llm_req.context
    for scheme in {c.init for c in layernorm.configs}:
        assert f"`{scheme}`:" in llm_req.context
    assert "The best other candidate so far: elite" in llm_req.prompt and "ELITE_MARK" in llm_req.prompt
    assert "s1-g1-2: 2.1x" in llm_req.prompt and "failed at correctness: max abs err" in llm_req.prompt
    # the answer resends the whole (long) parent: max_tokens grows with it, up to the model's limit
    assert llm_req.min_output_tokens > 100000
    params = LLMClient.build_params(prop.client, llm_req)
    assert params["max_tokens"] == 128000
