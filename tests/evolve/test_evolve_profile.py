"""Profile what matters: `[eval] profile = "best" | "all" | "off"`. On CPU with the engine's fakes: which
candidates a session profiles (by id), where the verdict lands, and how the setting is read."""

from __future__ import annotations

import argparse
import threading
from dataclasses import replace

import pytest

from engine.candidates import Candidate, load_candidate
from engine.config.load import load_config
from engine.config.sections import profile_mode
from engine.errors import ConfigError
from tests.doubles.evaluator import FakeEvaluator, fake_build, fake_gpu
from engine.evolve.local_executor import LocalPipelineExecutor
from engine.evolve.outcome import EvalOutcome, needs_profile
from engine.pipeline.eval_types import options_from_config as eval_options
from engine.evolve.loop import Budgets, EvolutionSession
from engine.evolve.operators import OperatorPolicy
from engine.pipeline.eval_types import EvalOptions
from engine.proposers.base import Proposal, ProposalStatus, parent_id, with_provenance
from engine.service.session_service import SessionService
from engine.service.spec import SessionSpec
from tests.doubles.evaluator import fake_evaluator_factory
from engine.verdict import Status, Verdict
from tests.doubles.faults import fake_profile_stage

# one candidate per generation (no baseline): its fake speedup, or FAIL (wrong results: never timed)
SPEEDS = ["1.0", "0.8", "1.5", "FAIL", "1.2", "2.0"]
NEW_BESTS = [0, 2, 5]                     # indices into SPEEDS: 1.0, then 1.5, then 2.0
PASSING = [0, 1, 2, 4, 5]


class Speeds:
    """Proposes the baseline's code with a fixed fake speedup per call, in order (always from the baseline's
    text, so the marker is the only one)."""

    name = "scripted"
    operators = frozenset({"translate", "mutate"})

    def __init__(self, base: Candidate, speeds: list[str]):
        self.base, self.speeds, self.n = base, list(speeds), 0
        self.requests = []

    def available(self):
        return True

    def unavailable_reason(self):
        return ""

    def propose(self, request):
        self.requests.append(request)
        s = self.speeds[self.n]
        self.n += 1
        marker = "// FAIL_CORRECT" if s == "FAIL" else f"// FAKE_SPEEDUP={s}"
        cand = Candidate("native", {**self.base.files, "kernel.cu": self.base.files["kernel.cu"] +
                                    f"\n{marker}\n// v{self.n}\n"}, f"v{self.n}")
        p = Proposal(ProposalStatus.OK, self.name, request.operator,
                     parents=tuple(parent_id(x) for x in request.parents), rationale=f"variant {self.n}", prompt="p")
        return replace(p, candidate=with_provenance(cand, p))


def run_session(ws, task, name, evaluator, **kw):
    prop = Speeds(load_candidate(task.baseline_dir("forward")), SPEEDS)
    s = EvolutionSession(ws, name, task, prop, evaluator, use_baseline=False, policy=OperatorPolicy({"mutate": 1.0}),
                         budgets=Budgets(generations=len(SPEEDS) - 1, population=1), **kw)
    events = []
    s.subscribe(events.append)
    result = s.run()
    evaluator.close()
    assert result.completed, result.reason
    ids = [v.id for v in ws.candidates(name)]          # in commit order: one per generation
    assert len(ids) == len(SPEEDS)
    return ids, events, prop


def profiled_ids(ws, name, fake):
    by_hash = {v.record.source_hash: v.id for v in ws.candidates(name)}
    return [by_hash[h] for h in fake.profiled]


def with_profile_note(ws, name):
    return [v.id for v in ws.candidates(name) if "profile" in v.status.stages]


# ------------------------------------------------------------------------------------------------ the loop


def test_best_profiles_only_the_candidates_that_became_a_new_best(ws, task):
    fake = FakeEvaluator(task)
    ids, events, prop = run_session(ws, task, "best", fake)        # profile="best" is the default
    expected = [ids[i] for i in NEW_BESTS]
    assert profiled_ids(ws, "best", fake) == expected
    assert [e.candidate for e in events if e.kind == "BestImproved"] == expected
    assert [e.candidate for e in events if e.kind == "CandidateProfiled"] == expected
    # the verdict is in the candidate's note, as every verdict: `kbench report` and the app read it there
    assert with_profile_note(ws, "best") == expected
    st = ws.status(ids[5])
    assert st.stages["profile"].status == Status.PASS and st.stages["profile"].reason == "memory-bound"
    assert ws.status(ids[1]).stages.get("profile") is None
    # a generation waits for its new best's profile: a mutation of a profiled parent gets it as feedback
    mutations = [r for r in prop.requests if r.operator == "mutate"]
    assert mutations
    for r in mutations:
        parent = parent_id(r.parents[0])
        assert bool(r.feedback) == (parent in expected), (parent, r.feedback)
        if parent in expected:
            assert r.feedback.startswith("fake profile of")
    # the best's note reads as before otherwise: eligible, measured, evaluated
    assert ws.best("best").id == ids[5] and ws.status(ids[5]).eligible


def test_all_profiles_every_passing_candidate(ws, task):
    fake = FakeEvaluator(task)                     # evaluations without the stage: the loop asks for each
    ids, _, _ = run_session(ws, task, "all", fake, profile="all")
    expected = [ids[i] for i in PASSING]
    assert profiled_ids(ws, "all", fake) == expected
    assert with_profile_note(ws, "all") == expected
    assert ids[3] not in profiled_ids(ws, "all", fake)          # failed correctness: never profiled


def test_all_with_evaluations_that_profile_asks_for_nothing_more(ws, task):
    fake = FakeEvaluator(task, profile=True)       # as eval_options() builds them for "all": inside each evaluation
    ids, events, _ = run_session(ws, task, "inline", fake, profile="all")
    expected = [ids[i] for i in PASSING]
    assert profiled_ids(ws, "inline", fake) == expected          # once each
    assert with_profile_note(ws, "inline") == expected
    assert not [e for e in events if e.kind == "CandidateProfiled"]


def test_off_profiles_nothing(ws, task):
    fake = FakeEvaluator(task)
    _, events, prop = run_session(ws, task, "off", fake, profile="off")
    assert fake.profiled == [] and with_profile_note(ws, "off") == []
    assert not [e for e in events if e.kind == "CandidateProfiled"]
    assert all(not r.feedback for r in prop.requests if r.operator == "mutate")


def test_legacy_booleans_and_bad_values_for_the_session(ws, task):
    prop = Speeds(load_candidate(task.baseline_dir("forward")), [])
    assert EvolutionSession(ws, "x", task, prop, FakeEvaluator(task), profile=True).profile == "all"
    assert EvolutionSession(ws, "x", task, prop, FakeEvaluator(task), profile=False).profile == "off"
    with pytest.raises(ConfigError, match="best"):
        EvolutionSession(ws, "x", task, prop, FakeEvaluator(task), profile="sometimes")


class NoProfile:
    """An evaluator without `profile` (the method is optional): nothing is asked of it."""

    def __init__(self, inner):
        self.inner = inner
        self.capacity = inner.capacity

    def submit(self, candidate, on_stage=None):
        return self.inner.submit(candidate, on_stage)

    def cancel_pending(self):
        return self.inner.cancel_pending()

    def close(self, wait=True):
        self.inner.close(wait)

    def stats(self):
        return self.inner.stats()


def test_an_evaluator_that_cannot_profile_is_not_asked(ws, task):
    fake = FakeEvaluator(task)
    run_session(ws, task, "noprof", NoProfile(fake))
    assert fake.profiled == [] and with_profile_note(ws, "noprof") == []


def test_needs_profile_only_for_judged_passing_timed_unprofiled_outcomes():
    ok = EvalOutcome([Verdict("compile", Status.PASS, ""), Verdict("correctness", Status.PASS, ""),
                      Verdict("timing", Status.PASS, "")], configs=[object()], speedup_eager=1.0)
    assert needs_profile(ok)
    assert not needs_profile(replace(ok, verdicts=ok.verdicts + [Verdict("profile", Status.SKIPPED, "no ncu")]))
    assert not needs_profile(replace(ok, verdicts=ok.verdicts[:1] + [Verdict("correctness", Status.FAIL, "x")]))
    assert not needs_profile(replace(ok, speedup_eager=None))
    assert not needs_profile(replace(ok, infra_error="worker lost"))


# ------------------------------------------------------------------------------------------ the executor


def test_local_executor_profiles_on_a_gpu_worker(task):
    seen = []

    def profile_fn(t, cand, direction, opts, device):
        seen.append((threading.current_thread().name, opts.gpu, device, cand.name))
        if "BOOM" in cand.files["kernel.cu"]:
            raise RuntimeError("ncu exploded")
        return fake_profile_stage(t, cand, direction, opts, device)

    base = load_candidate(task.baseline_dir("forward"))
    ex = LocalPipelineExecutor(task, "forward", EvalOptions(profile=False), gpus=[3], build_fn=fake_build,
                               gpu_fn=fake_gpu, processes=False, profile_fn=profile_fn)
    try:
        out = ex.submit(base).result(30)
        assert not any(v.stage == "profile" for v in out.verdicts) and needs_profile(out)
        v = ex.profile(base, device=out.device).result(30)
        assert v.stage == "profile" and v.status == Status.PASS and v.data["gpu_index"] == 3
        assert seen == [("kbench-gpu-3", 3, out.device, base.name)]
        boom = Candidate(base.format, {**base.files, "kernel.cu": base.files["kernel.cu"] + "// BOOM\n"}, "boom")
        v = ex.profile(boom).result(30)
        assert v.status == Status.SKIPPED and "ncu exploded" in v.reason
        stats = ex.stats()
        assert stats["profiled"] == 2 and stats["completed"] == 1
    finally:
        ex.close()


# ------------------------------------------------------------------------------------------- the setting


def write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, mode", [
    ("", "best"),
    ('[eval]\nprofile = "best"\n', "best"),
    ('[eval]\nprofile = "all"\n', "all"),
    ('[eval]\nprofile = "off"\n', "off"),
    ('[eval]\nprofile = "ALL"\n', "all"),
    ("[eval]\nprofile = true\n", "all"),     # the older boolean: profile everything, as it did
    ("[eval]\nprofile = false\n", "off"),
])
def test_config_profile_modes_and_legacy_booleans(tmp_path, text, mode):
    cfg = load_config(user_file=write(tmp_path / "c.toml", text), env={})
    assert cfg.eval.profile == mode
    assert eval_options(cfg).profile is (mode == "all")      # only "all" profiles inside each evaluation


@pytest.mark.parametrize("value", ['"sometimes"', "1", '["best"]'])
def test_config_profile_bad_values_name_the_file_and_the_choices(tmp_path, value):
    path = write(tmp_path / "c.toml", f"[eval]\nprofile = {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(user_file=path, env={})
    msg = str(err.value)
    assert str(path) in msg and "[eval] profile" in msg and '"best"' in msg and '"all"' in msg and '"off"' in msg


def test_flags_override_the_files(tmp_path):
    path = write(tmp_path / "c.toml", "[eval]\nprofile = true\n")
    assert load_config(user_file=path, env={}, flags={"eval.profile": "best"}).eval.profile == "best"
    assert load_config(user_file=path, env={}, flags={"eval.profile": False}).eval.profile == "off"
    assert profile_mode(" Off ") == "off"


def test_cli_flags(tmp_path):
    from engine.cli.cmd_evolve import _config_flags
    from engine.cli.cmd_evolve import register as reg_evolve

    parser = argparse.ArgumentParser()
    reg_evolve(parser.add_subparsers())
    assert _config_flags(parser.parse_args(["evolve", "t"]))["eval.profile"] is None       # the config decides
    assert _config_flags(parser.parse_args(["evolve", "t", "--profile", "all"]))["eval.profile"] == "all"
    assert _config_flags(parser.parse_args(["evolve", "t", "--no-profile"]))["eval.profile"] == "off"
    assert _config_flags(parser.parse_args(["reevaluate", "x", "--profile", "off"]))["eval.profile"] == "off"
    with pytest.raises(SystemExit):
        parser.parse_args(["evolve", "t", "--profile", "sometimes"])


# ------------------------------------------------------------------------------ the service and on demand


def service_for(ws, tmp_path, mode):
    cfg = load_config(user_file=write(tmp_path / f"{mode}.toml", f'[eval]\nprofile = "{mode}"\n'), env={})
    return SessionService(ws, cfg, env={}, evaluator_factory=fake_evaluator_factory())


@pytest.mark.parametrize("mode", ["best", "all", "off"])
def test_service_sessions_follow_the_config(ws, tmp_path, task, mode):
    svc = service_for(ws, tmp_path, mode)
    run = svc.start(SessionSpec(task="gelu_bias", proposer="tuner", generations=1, population=3), background=False)
    assert run.session.profile == mode
    assert run.evaluator.profile_inline is (mode == "all")
    events = []
    run.session.subscribe(events.append)
    run.session.run()
    run.close()
    views = ws.candidates("gelu_bias-fwd-tuner")
    noted = {v.id for v in views if "profile" in v.status.stages}
    passing = {v.id for v in views if v.status.measurement is not None}
    if mode == "off":
        assert noted == set()
    elif mode == "all":
        assert noted == passing and len(noted) == 4
    else:
        assert noted == {e.candidate for e in events if e.kind == "BestImproved"} and noted <= passing
        assert ws.best("gelu_bias-fwd-tuner").id in noted


def test_reevaluate_profiles_on_demand_with_best(ws, tmp_path, task):
    svc = service_for(ws, tmp_path, "off")
    run = svc.start(SessionSpec(task="gelu_bias", proposer="tuner", generations=1, population=2), background=False)
    run.session.run()
    run.close()
    views = ws.candidates("gelu_bias-fwd-tuner")
    assert not any("profile" in v.status.stages for v in views)
    # "off": re-evaluating profiles nothing
    (r,) = list(svc.reevaluate(views[1].id))
    assert r.profile is None and "profile" not in r.status.stages
    # "best": one candidate asked for by id is profiled on demand, its verdict in its note
    best_svc = service_for(ws, tmp_path, "best")
    (r,) = list(best_svc.reevaluate(views[1].id))
    assert r.profile is not None and r.profile.status == Status.PASS
    assert r.status.stages["profile"].status == Status.PASS
    # a whole session: only a candidate that becomes the new best is (none here: the speedups are the same)
    rs = list(best_svc.reevaluate("gelu_bias-fwd-tuner"))
    assert len(rs) == 3 and all(x.profile is None for x in rs)
