"""The evolution loop end to end on CPU: a fake evaluator, the tuner / replay / a scripted proposer."""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import replace

import pytest

from engine.candidates import Candidate, load_candidate
from tests.doubles.evaluator import FakeEvaluator, fake_speedup
from engine.evolve.loop import Budgets, EvolutionSession
from engine.evolve.operators import OperatorPolicy, default_policy, parse_weights
from engine.evolve.population import DONE, Member, Population
from engine.proposers.base import Proposal, ProposalStatus, parent_id, with_provenance
from engine.proposers.replay import ReplayProposer
from engine.proposers.tuner import TunerProposer
from engine.tasks.loader import load_task
from engine.verdict import Status, Verdict
from tests.paths import FIXTURES


class ScriptedProposer:
    """Accepts every operator; derives a candidate from its parent (or the baseline) by appending a marker."""

    name = "scripted"
    operators = frozenset({"translate", "mutate", "crossover", "repair", "meta", "tune"})

    def __init__(self, base: Candidate, cost: float = 0.0, fail_every: int = 0, reject_every: int = 0):
        self.base, self.cost, self.n = base, cost, 0
        self.fail_every, self.reject_every = fail_every, reject_every
        self.requests = []

    def available(self):
        return True

    def unavailable_reason(self):
        return ""

    def propose(self, request):
        self.requests.append(request)
        self.n += 1
        if request.operator == "meta":
            return Proposal(ProposalStatus.OK, self.name, "meta", directives=f"directive {self.n}",
                            cost_usd=self.cost)
        src = request.parents[0] if request.parents else self.base
        text = src.files["kernel.cu"] + f"\n// {request.operator} {self.n}\n"
        if self.fail_every and self.n % self.fail_every == 0:
            text += "// FAIL_CORRECT\n"
        if self.reject_every and self.n % self.reject_every == 0:
            text += "// REJECT_ME\n"
        cand = Candidate("native", {**src.files, "kernel.cu": text}, f"v{self.n}")
        p = Proposal(ProposalStatus.OK, self.name, request.operator,
                     parents=tuple(parent_id(x) for x in request.parents), rationale=f"variant {self.n}",
                     prompt="p", cost_usd=self.cost)
        return replace(p, candidate=with_provenance(cand, p))


def reject_marker(task, direction, cand):
    if "REJECT_ME" in cand.files.get("kernel.cu", ""):
        return Verdict("static", Status.FAIL, "static check: marker found")
    return Verdict("static", Status.PASS, "clean")


def collect(session):
    out = []
    session.subscribe(out.append)
    return out


def kinds(events):
    return [e.kind for e in events]


def test_tuner_session_end_to_end(ws, task):
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "tune1", task, TunerProposer(), fake, budgets=Budgets(generations=2, population=4))
    events = collect(s)
    result = s.run()
    assert result.completed and result.evaluated == 9
    views = ws.candidates("tune1")
    assert len(views) == 9
    assert [v.generation for v in views].count(0) == 1 and views[0].record.operator == "baseline"
    assert all(any(e.event == "evaluated" for e in v.status.events) for v in views)
    assert all(v.status.measurement is not None for v in views)
    assert {v.record.operator for v in views[1:]} == {"tune"}
    assert len({v.record.source_hash for v in views}) == 9
    # the branch follows the best; never below the baseline
    best = ws.best("tune1")
    assert ws.session("tune1").best == best.id
    assert best.speedup >= views[0].speedup
    assert best.speedup == pytest.approx(max(fake_speedup(ws.files(v.id)) for v in views))
    # every parent is an earlier, eligible candidate
    for v in views[1:]:
        assert len(v.record.parents) == 1
        assert ws.view(v.record.parents[0]).generation < v.generation
    # events: started first, stopped last, each candidate committed before evaluated
    k = kinds(events)
    assert k[0] == "SessionStarted" and k[-1] == "Stopped"
    assert k.count("GenerationFinished") == 3 and k.count("CandidateEvaluated") == 9
    for v in views:
        i_commit = next(i for i, e in enumerate(events) if e.kind == "CandidateCommitted" and e.candidate == v.id)
        i_eval = next(i for i, e in enumerate(events) if e.kind == "CandidateEvaluated" and e.candidate == v.id)
        stages = [i for i, e in enumerate(events) if e.kind == "StageFinished" and e.candidate == v.id]
        assert i_commit < min(stages) and max(stages) < i_eval
    gens = [e.generation for e in events if e.kind == "GenerationFinished"]
    assert gens == [0, 1, 2]
    assert any(e.kind == "BestImproved" for e in events)
    assert all(isinstance(e.line(), str) and e.to_json()["kind"] == e.kind for e in events)
    fake.close()


def test_generation_barrier_parents_come_from_earlier_generations(ws, task):
    prop = ScriptedProposer(load_candidate(task.baseline_dir("forward")))
    fake = FakeEvaluator(task, workers=2)
    s = EvolutionSession(ws, "bar", task, prop, fake, budgets=Budgets(generations=3, population=3),
                         policy=OperatorPolicy({"mutate": 1.0}))
    assert s.run().completed
    for v in ws.candidates("bar")[1:]:
        for p in v.record.parents:
            assert ws.view(p).generation < v.generation
    fake.close()


def test_replay_session_without_baseline(ws, task, tmp_path):
    base = load_candidate(task.baseline_dir("forward"))
    d = tmp_path / "rec"
    for i in range(5):
        (d / f"c{i}").mkdir(parents=True)
        (d / f"c{i}" / "kernel.cu").write_text(base.files["kernel.cu"] + f"\n// FAKE_SPEEDUP={1 + i / 10}\n")
        (d / f"c{i}" / "binding.cpp").write_text(base.files["binding.cpp"])
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "rep", task, ReplayProposer.from_directory(d), fake, use_baseline=False,
                         budgets=Budgets(generations=3, population=2))
    events = collect(s)
    r = s.run()
    views = ws.candidates("rep")
    assert len(views) == 5 and r.evaluated == 5
    assert [v.generation for v in views] == [0, 0, 1, 1, 2]
    assert views[0].record.operator == "replay" and views[0].record.parents == ()
    assert ws.best("rep").speedup == pytest.approx(1.4)
    assert any(e.kind == "BudgetExhausted" for e in events)   # the recording ran out in generation 3
    fake.close()


def test_rejected_candidates_never_reach_the_evaluator(ws, task):
    prop = ScriptedProposer(load_candidate(task.baseline_dir("forward")), reject_every=2)
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "rej", task, prop, fake, budgets=Budgets(generations=2, population=3),
                         checks=[reject_marker], policy=OperatorPolicy({"mutate": 1.0}))
    events = collect(s)
    s.run()
    views = ws.candidates("rej")
    rejected = [v for v in views if "REJECT_ME" in ws.files(v.id).files["kernel.cu"]]
    assert rejected
    seen = set(fake.seen)
    for v in rejected:
        assert v.record.source_hash not in seen
        assert v.status.status_of("static") == Status.FAIL and "compile" not in v.status.stages
        assert any(e.event == "evaluated" and e.data.get("rejected") for e in v.status.events)
    assert sum(1 for e in events if e.kind == "CandidateEvaluated" and e.rejected) == len(rejected)
    others = [v for v in views if v not in rejected]
    assert {v.record.source_hash for v in others} == seen
    fake.close()


def test_llm_verifier_rejection_and_override_reaches_gpu_on_resume(ws, task):
    from engine.llm.verifiers import Verification

    def verifier(cand):
        bad = "REJECT_ME" in cand.files["kernel.cu"]
        v = Verdict("llm_verify", Status.FAIL if bad else Status.PASS, "memory: fail (0.9): oob" if bad else "ok",
                    {"votes": []})
        return Verification(v, ())

    prop = ScriptedProposer(load_candidate(task.baseline_dir("forward")), reject_every=1)
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "llmv", task, prop, fake, budgets=Budgets(generations=1, population=2),
                         verifier=verifier, policy=OperatorPolicy({"mutate": 1.0}))
    s.run()
    bad = [v for v in ws.candidates("llmv") if v.status.status_of("llm_verify") == Status.FAIL]
    assert len(bad) == 2 and all(v.record.source_hash not in fake.seen for v in bad)
    ws.override(bad[0].id, "llm_verify", "pass", "I read it: the bound check is there", by="tester")
    fake2 = FakeEvaluator(task)
    s2 = EvolutionSession(ws, "llmv", task, prop, fake2, budgets=Budgets(generations=1, population=2),
                          verifier=verifier, policy=OperatorPolicy({"mutate": 1.0}))
    r = s2.run()
    assert fake2.seen == [bad[0].record.source_hash]       # only the overridden one, and only once
    assert ws.status(bad[0].id).measurement is not None and r.completed
    fake.close(), fake2.close()


def test_failures_are_recorded_and_repair_gets_feedback(ws, task):
    prop = ScriptedProposer(load_candidate(task.baseline_dir("forward")), fail_every=2)
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "fail", task, prop, fake, budgets=Budgets(generations=3, population=3),
                         policy=OperatorPolicy({"mutate": 1.0, "repair": 1.0}), seed=3)
    s.run()
    failed = [v for v in ws.candidates("fail") if v.status.status_of("correctness") == Status.FAIL]
    assert failed and all(not v.status.eligible for v in failed)
    repairs = [r for r in prop.requests if r.operator == "repair"]
    assert repairs and all("correctness failed" in r.feedback for r in repairs)
    assert all(parent_id(r.parents[0]) in {v.id for v in failed} for r in repairs)
    fake.close()


def test_crossover_is_a_merge_commit_and_meta_sets_directives(ws, task):
    prop = ScriptedProposer(load_candidate(task.baseline_dir("forward")))
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "mix", task, prop, fake, budgets=Budgets(generations=3, population=4),
                         policy=OperatorPolicy({"mutate": 1.0, "crossover": 2.0, "meta": 5.0}), seed=1)
    events = collect(s)
    s.run()
    xs = [v for v in ws.candidates("mix") if v.record.operator == "crossover"]
    assert xs and all(len(v.record.parents) == 2 and len(v.record.parent_commits) == 2 for v in xs)
    metas = [e for e in events if e.kind == "DirectivesUpdated"]
    assert 1 <= len(metas) <= 3    # at most once per generation
    later = [r for r in prop.requests if r.operator in ("mutate", "crossover") and r.directives]
    assert later and later[-1].directives.startswith("directive")
    muts = [r for r in prop.requests if r.operator == "mutate" and r.generation >= 2]
    assert any(r.insights for r in muts)
    fake.close()


def test_anthropic_defaults_translate_first_then_mix():
    pol = default_policy("anthropic")
    rng = random.Random(0)
    assert pol.choose(rng, eligible=0, failures=0) == "translate"
    ops = [pol.choose(rng, eligible=3, failures=1) for _ in range(2000)]
    assert set(ops) == {"mutate", "crossover", "repair", "meta"}
    assert ops.count("mutate") > ops.count("crossover") > ops.count("meta")
    assert pol.choose(rng, eligible=1, failures=0, meta_done=1) == "mutate"
    assert default_policy("tuner").choose(rng, eligible=0, failures=0) is None
    assert default_policy("tuner").choose(rng, eligible=1, failures=3) == "tune"
    assert parse_weights("mutate=3, crossover") == {"mutate": 3.0, "crossover": 1.0}
    custom = OperatorPolicy(parse_weights("mutate=1,crossover=1"))
    ops = [custom.choose(rng, eligible=2, failures=0) for _ in range(1000)]
    assert 400 < ops.count("crossover") < 600


def test_selection_prefers_fitness_and_spreads_parents():
    pop = Population()
    for i, (s, h) in enumerate([(2.0, "a"), (1.5, "b"), (1.0, "c"), (0.8, "d"), (2.0, "a"), (None, "e")]):
        pop.add(Member(f"s-g1-{i + 1}", 1, "mutate", h, state=DONE, speedup=s, eligible=s is not None))
    assert [m.id for m in pop.diverse_pool(pop.eligible())] == ["s-g1-1", "s-g1-2", "s-g1-3", "s-g1-4"]
    rng = random.Random(0)
    picks = [pop.select(rng, 1)[0].id for _ in range(60)]
    assert "s-g1-5" not in picks and "s-g1-6" not in picks        # duplicate hash, failure
    assert len(set(picks)) >= 3                                   # the reuse penalty spreads the picks
    fresh = Population()
    for m in pop.members.values():
        fresh.add(replace(m, times_parent=0))
    first = [fresh.select(random.Random(i), 1)[0].id for i in range(50)]
    assert max(set(first), key=first.count) == "s-g1-1"
    two = fresh.select(rng, 2)
    assert len({m.id for m in two}) == 2
    assert pop.best().id == "s-g1-1"


class FakeLedger:
    def __init__(self):
        self.spent_usd = 0.0
        self.budget_usd = None


def test_dollar_budget(ws, task):
    ledger = FakeLedger()
    prop = ScriptedProposer(load_candidate(task.baseline_dir("forward")))
    orig = prop.propose

    def paid(req):
        ledger.spent_usd += 0.4
        return orig(req)

    prop.propose = paid
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "usd", task, prop, fake, budgets=Budgets(generations=5, population=3, usd=1.0),
                         ledger=ledger, policy=OperatorPolicy({"mutate": 1.0}))
    events = collect(s)
    r = s.run()
    assert r.completed and "usd" in r.reason
    assert len(prop.requests) == 3 and len(ws.candidates("usd")) == 4   # baseline + 3 proposals ($1.20)
    assert [e.budget for e in events if e.kind == "BudgetExhausted"] == ["usd"]
    fake.close()


def test_wall_time_budget_with_injected_clock(ws, task):
    now = [0.0]
    prop = ScriptedProposer(load_candidate(task.baseline_dir("forward")))
    orig = prop.propose

    def slow(req):
        now[0] += 10.0
        return orig(req)

    prop.propose = slow
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "wall", task, prop, fake, budgets=Budgets(generations=9, population=4, wall_s=25),
                         policy=OperatorPolicy({"mutate": 1.0}), clock=lambda: now[0])
    events = collect(s)
    r = s.run()
    assert r.completed and "wall_time" in r.reason and len(prop.requests) == 3
    assert any(e.kind == "BudgetExhausted" and e.budget == "wall_time" for e in events)
    assert all(v.status.measurement for v in ws.candidates("wall"))   # in-flight ones finished first
    fake.close()


def wait_for(events, pred, timeout=10.0):
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if any(pred(e) for e in list(events)):
            return True
        time.sleep(0.01)
    raise AssertionError("event did not come: " + ", ".join(kinds(events)[-8:]))


def start_paused(session):
    """Start `session` in a background thread, paused before its first candidate; its event list."""
    events = collect(session)
    session.pause()
    session.start()
    wait_for(events, lambda e: e.kind == "Paused")
    return events


class StoppingTuner(TunerProposer):
    """A tuner whose `at`-th proposal asks its session to stop while it is being made."""

    def __init__(self, at: int):
        super().__init__()
        self.at, self.calls, self.session = at, 0, None

    def propose(self, request):
        self.calls += 1
        if self.calls == self.at:
            self.session.stop()
        return super().propose(request)


def test_a_proposal_landing_while_stopping_is_committed_and_evaluated_on_resume(ws, task):
    tuner = StoppingTuner(at=2)
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "late", task, tuner, fake, budgets=Budgets(generations=2, population=2))
    tuner.session = s
    r = s.run()
    assert not r.completed and r.reason == "stopped by request"
    views = {v.record.source_hash: v for v in ws.candidates("late")}
    late = [h for h, v in views.items() if not v.status.measurement]
    assert len(views) == 3 and len(late) == 1 and late[0] not in fake.seen    # committed, never sent to a GPU
    assert views[late[0]].record.generation == 1
    fake2 = FakeEvaluator(task)
    s2 = EvolutionSession(ws, "late", task, TunerProposer(), fake2, budgets=Budgets(generations=2, population=2))
    ev2 = collect(s2)
    assert s2.run().completed
    assert (ev2[0].finished, ev2[0].requeued) == (2, 1) and fake2.seen[0] == late[0]
    assert all(v.status.measurement for v in ws.candidates("late"))


def test_pause_step_resume_stop(ws, task):
    fake = FakeEvaluator(task, delay_s=0.02)
    s = EvolutionSession(ws, "ctl", task, TunerProposer(), fake, budgets=Budgets(generations=3, population=3))
    events = start_paused(s)
    time.sleep(0.2)
    assert ws.candidates("ctl") == []                 # paused before anything was proposed
    s.step()
    wait_for(events, lambda e: e.kind == "CandidateEvaluated")
    wait_for(events, lambda e: e.kind == "Paused" and events.index(e) > kinds(events).index("CandidateEvaluated"))
    time.sleep(0.2)
    assert len(ws.candidates("ctl")) == 1             # exactly one step
    s.step(2)
    t = time.monotonic() + 5
    while sum(e.kind == "CandidateEvaluated" for e in events) < 3 and time.monotonic() < t:
        time.sleep(0.01)
    time.sleep(0.2)
    assert len(ws.candidates("ctl")) == 3
    s.resume()
    wait_for(events, lambda e: e.kind == "Resumed")
    wait_for(events, lambda e: e.kind == "CandidateEvaluated" and e.generation == 2)
    s.stop()
    r = s.join(10)
    assert r is not None and not r.completed and r.reason == "stopped by request"
    assert kinds(events)[-1] == "Stopped"
    views = ws.candidates("ctl")
    # A graceful stop finishes every evaluation it found running; a proposal that lands while it stops is
    # committed and left for a resume (recorder._after_commit: no LLM review or GPU time after a stop).
    measured = {v.record.source_hash for v in views if v.status.measurement}
    unmeasured = {v.record.source_hash for v in views} - measured
    assert measured == set(fake.seen)
    assert len(unmeasured) <= 1 and all(v.record.generation == 2 for v in views
                                        if v.record.source_hash in unmeasured)
    # resume from the workspace: evaluates what was left, finishes the budget, re-evaluates nothing measured
    fake2 = FakeEvaluator(task)
    s2 = EvolutionSession(ws, "ctl", task, TunerProposer(), fake2, budgets=Budgets(generations=3, population=3))
    ev2 = collect(s2)
    r2 = s2.run()
    assert r2.completed and ev2[0].resumed
    assert (ev2[0].finished, ev2[0].requeued) == (len(measured), len(unmeasured))
    assert unmeasured <= set(fake2.seen) and not set(fake2.seen) & measured
    assert len(ws.candidates("ctl")) == 10
    fake.close(), fake2.close()


def test_proposer_stop_ends_the_session(ws, task):
    class Stopper(ScriptedProposer):
        def propose(self, request):
            return Proposal(ProposalStatus.STOP, self.name, request.operator, reason="no API key")

    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "stp", task, Stopper(load_candidate(task.baseline_dir("forward"))), fake,
                         budgets=Budgets(generations=2, population=2), policy=OperatorPolicy({"mutate": 1.0}))
    r = s.run()
    assert not r.completed and "no API key" in r.reason and r.evaluated == 1
    fake.close()


def test_tuner_without_baseline_is_refused_before_anything_is_written(ws, task):
    from engine.errors import KbenchError

    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "nob", task, TunerProposer(), fake, use_baseline=False)
    events = collect(s)
    with pytest.raises(KbenchError, match="the tuner proposer cannot start this session: .* --no-baseline"):
        s.run()
    assert not s.result.completed and "baseline" in s.result.reason
    assert ws.sessions() == [] and fake.seen == []              # no empty session left behind
    assert events[-1].kind == "Stopped"
    fake.close()


def test_resume_refuses_another_task(ws, task):
    from engine.errors import KbenchError
    fake = FakeEvaluator(task)
    EvolutionSession(ws, "one", task, TunerProposer(), fake, budgets=Budgets(generations=0)).run()
    with pytest.raises(KbenchError):
        EvolutionSession(ws, "one", load_task("layernorm_lastdim"), TunerProposer(), fake).run()
    fake.close()


def test_failed_baseline_ends_the_tuner_session_with_a_reason(ws, task, tmp_path):
    class Failing(FakeEvaluator):
        def submit(self, cand, on_stage=None):
            cand = Candidate(cand.format, {**cand.files, "kernel.cu": cand.files["kernel.cu"] + "// FAIL_CORRECT"},
                             cand.name)
            return super().submit(cand, on_stage)

    fake = Failing(task)
    s = EvolutionSession(ws, "badbase", task, TunerProposer(), fake, budgets=Budgets(generations=2, population=2))
    r = s.run()
    assert not r.completed and "no eligible candidate" in r.reason and "correctness" in r.reason
    fake.close()


def test_tuner_stops_when_the_knob_space_is_spent(ws):
    task = load_task("layernorm_lastdim")     # forward: one knob, BLOCK_SIZE in 128,256,512,1024
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "spent", task, TunerProposer(), fake, budgets=Budgets(generations=5, population=5))
    events = collect(s)
    r = s.run()
    views = ws.candidates("spent")
    assert len(views) == 4 and len({v.record.source_hash for v in views}) == 4
    assert r.completed and "search space" in r.reason
    assert [e.budget for e in events if e.kind == "BudgetExhausted"] == ["search_space"]
    assert sum(e.kind == "CandidateProposed" and e.status == "empty" for e in events) >= 1
    fake.close()


def test_live_override_requeues_a_rejected_candidate(ws, task):
    prop = ScriptedProposer(load_candidate(task.baseline_dir("forward")), reject_every=1)
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "live", task, prop, fake, budgets=Budgets(generations=1, population=1),
                         checks=[reject_marker], policy=OperatorPolicy({"mutate": 1.0}))
    events = start_paused(s)
    s.step(2)                                            # the baseline, then one rejected mutation
    wait_for(events, lambda e: e.kind == "CandidateEvaluated" and e.rejected)
    cid = next(e.candidate for e in events if e.kind == "CandidateEvaluated" and e.rejected)
    s.requeue(cid)                                       # still blocked: nothing happens
    wait_for(events, lambda e: e.kind == "Log" and "still blocked" in e.message)
    ws.override(cid, "static", "pass", "the marker is a comment", by="tester")
    s.requeue(cid)
    wait_for(events, lambda e: e.kind == "CandidateEvaluated" and e.candidate == cid and not e.rejected)
    s.resume()
    r = s.join(10)
    assert r.completed and ws.status(cid).measurement is not None
    assert ws.files(cid).source_hash in fake.seen
    fake.close()


def test_default_static_integrity_check_keeps_a_reward_hack_off_the_gpu(ws, tmp_path):
    task = load_task("layernorm_lastdim")
    hack = FIXTURES / "hacks" / "torch_compute"
    d = tmp_path / "rec"
    d.mkdir()
    shutil.copytree(hack, d / "hack")       # a copy: a replay follows no link among its entries
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "hack", task, ReplayProposer.from_directory(d), fake,
                         budgets=Budgets(generations=1, population=1), policy=OperatorPolicy({"mutate": 1.0}))
    events = collect(s)
    s.run()
    views = ws.candidates("hack")
    assert [v.status.status_of("static") for v in views] == [Status.PASS, Status.FAIL]   # baseline, hack
    assert fake.seen == [views[0].record.source_hash]
    assert any(e.kind == "CandidateEvaluated" and e.rejected and e.failed_stage == "static" for e in events)
    fake.close()


def test_notice_takes_overrides_measurements_and_hand_edits_into_a_running_loop(ws, task):
    """What a person does in the app while the loop runs reaches the loop: an override to `suspicious` takes
    a candidate out of the parent pool, a hand edit committed beside the loop joins the population and is
    evaluated by the loop's own evaluator."""
    base = load_candidate(task.baseline_dir("forward"))
    prop = ScriptedProposer(base)
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "live2", task, prop, fake, budgets=Budgets(generations=2, population=1),
                         checks=[reject_marker], policy=OperatorPolicy({"mutate": 1.0}))
    events = start_paused(s)
    s.step(1)                                                # the baseline, evaluated
    wait_for(events, lambda e: e.kind == "CandidateEvaluated")
    base_id = next(e.candidate for e in events if e.kind == "CandidateEvaluated")
    assert s.population.get(base_id).eligible
    ws.override(base_id, "timing", "suspicious", "too fast to be true", by="tester")
    s.notice(base_id)
    wait_for(events, lambda e: e.kind == "Log" and base_id in e.message and "not eligible" in e.message)
    assert not s.population.get(base_id).eligible and s.population.eligible() == []
    ws.override(base_id, "timing", "pass", "re-measured by hand, it is real", by="tester")
    s.notice(base_id)
    wait_for(events, lambda e: e.kind == "Log" and base_id in e.message and "now" in e.message
             and "x" in e.message.split("now", 1)[1])
    assert s.population.get(base_id).eligible
    # a hand edit, committed by someone else (the app) while the loop runs
    edited = Candidate("native", {**base.files, "kernel.cu": base.files["kernel.cu"] + "\n// FAKE_SPEEDUP=3.0 by hand\n"},
                       "hand")
    rec = ws.commit_candidate("live2", edited, parents=[base_id], operator="mutate", proposer="human",
                              generation=1, title="hand edit", rationale="by hand")
    s.notice(rec.id)
    wait_for(events, lambda e: e.kind == "CandidateEvaluated" and e.candidate == rec.id)
    assert edited.source_hash in fake.seen and s.population.get(rec.id).speedup == pytest.approx(3.0)
    s.resume()
    r = s.join(10)
    assert r.completed and ws.best("live2").id == rec.id
    assert r.best == rec.id                                  # the loop's own view agrees
    assert fake.seen.count(edited.source_hash) == 1          # evaluated once, by the loop
    fake.close()
