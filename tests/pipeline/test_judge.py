"""One rule for passing and eligibility (engine.verdict.judge), asked the same question by every caller.

Before, `EvalReport.passed` (what `kbench eval` reports and records for export) and the workspace's
`CandidateStatus.eligible` (the session's best, the evolution's parents) were two rules that disagreed: the
report ignored a `suspicious` static scan, an LLM verifier's `fail`, a `suspicious` or failed timing and a
`suspicious` integrity check; the workspace counted a measurement as enough without any compile or
correctness verdict, and blocked on evaluate()'s overridden static `fail`. Each case below is one of those
disagreements (or a neighbour), put to every caller: they must now all give the same answer.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from engine.candidates import Candidate
from engine.eval_records import record
from engine.evolve.outcome import EvalOutcome, needs_profile
from engine.evolve.population import Population
from engine.evolve.resume import member_from_view
from engine.export.plan import passing_status
from engine.pipeline.eval_types import ConfigRow, EvalReport
from engine.verdict import (
    BLOCKING,
    REQUIRED,
    STAGES,
    Stage,
    StageOutcome,
    Status,
    Verdict,
    judge,
    judge_verdicts,
)
from engine.workspace import ConfigTiming, Measurement

P, F, S, K = Status.PASS, Status.FAIL, Status.SUSPICIOUS, Status.SKIPPED
SPEEDUP = 1.5


def v(stage: str, status: Status, reason: str = "", **data) -> Verdict:
    return Verdict(stage, status, reason or f"{stage} {status.value}", data)


GOOD = [v(Stage.STATIC, P), v(Stage.LLM_VERIFY, P), v(Stage.COMPILE, P), v(Stage.CORRECTNESS, P),
        v(Stage.TIMING, P), v(Stage.INTEGRITY, P)]


def good(**replace: Verdict) -> list[Verdict]:
    """GOOD with some stages' verdicts replaced (None: dropped)."""
    return [replace.get(x.stage, x) for x in GOOD if replace.get(x.stage, x) is not None]


# name -> (verdicts, passed): `passed` and `eligible` are the same here (every case is measured)
CASES = {
    "clean": (GOOD, True),
    # the report ignored these; the workspace blocked on them
    "static suspicious": (good(static=v(Stage.STATIC, S, "possible reward hack, a person must confirm")), False),
    "LLM verifier fail": (good(llm_verify=v(Stage.LLM_VERIFY, F, "memory: fail (0.90): out of bounds")), False),
    "LLM verifier suspicious": (good(llm_verify=v(Stage.LLM_VERIFY, S, "set by a person")), False),
    "timing suspicious (below the physical floor)": (good(timing=v(Stage.TIMING, S, "below the floor")), False),
    "timing fail": (good(timing=v(Stage.TIMING, F, "bench: timed out")), False),
    "integrity suspicious": (good(integrity=v(Stage.INTEGRITY, S)), False),
    "profile suspicious": (GOOD + [v(Stage.PROFILE, S)], False),
    "an unknown stage fails": (GOOD + [v("custom_check", F)], False),
    # the report blocked on these too (unchanged)
    "integrity fail": (good(integrity=v(Stage.INTEGRITY, F)), False),
    "static fail": (good(static=v(Stage.STATIC, F, "reward hack")), False),
    # the workspace blocked on evaluate()'s mark of a person's override; the report passed it
    "static fail overridden by a person (evaluate's mark)": (
        good(static=v(Stage.STATIC, F, "reward hack (overridden by a person: evaluation continues)",
                      overridden=True)), True),
    # the workspace took a measurement alone as eligible; the report required compile and correctness
    "no compile verdict": (good(compile=None), False),
    "no correctness verdict": (good(correctness=None), False),
    "correctness skipped": (good(correctness=v(Stage.CORRECTNESS, K, "no GPU")), False),
    # the last verdict of a stage is its effective one, everywhere: a low-confidence fail vote, then the pass
    # aggregate (engine.llm.verifiers writes the votes, then the aggregate)
    "a doubting LLM vote, then the passing aggregate": (
        good(llm_verify=None)[:1] + [v(Stage.LLM_VERIFY, F, "numerics: fail (0.30)", confidence=0.3),
                                     v(Stage.LLM_VERIFY, P, "3 verifier(s) answered; low-confidence doubts")]
        + good(static=None, llm_verify=None), True),
    "skipped and missing checks never block": (
        [v(Stage.STATIC, K), v(Stage.COMPILE, P), v(Stage.CORRECTNESS, P), v(Stage.TIMING, P)], True),
}


def _cand(tag: str) -> Candidate:
    return Candidate("native", {"kernel.cu": f"// {tag}\n__global__ void k() {{}}\n", "binding.cpp": "// glue\n"},
                     tag)


def _answers(ws, task, tmp_path, name: str, verdicts: list[Verdict], expected_same: bool) -> dict[str, bool | None]:
    """The same verdicts and speedup, put to every caller that decides passing or eligibility."""
    cand = _cand(name)
    report = EvalReport(task.name, "forward", cand.source_hash, "native", list(verdicts),
                        [ConfigRow("bench", correct=True, speedup_eager=SPEEDUP)], {"gpu": "NVIDIA H100"}, {})
    cid = ws.commit_candidate("ln", cand).id
    ws.record_verdicts(cid, verdicts)
    ws.record_measurement(cid, Measurement(SPEEDUP, 1.1, (ConfigTiming("bench", 0.1, 0.001, 0.15, 0.11),),
                                           gpu="NVIDIA H100"))
    status = ws.status(cid)
    member, finished = member_from_view(ws.view(cid))
    pop = Population()
    pop.add(member)
    outcome = EvalOutcome(list(verdicts), [ConfigTiming("bench", 0.1, 0.001, 0.15, 0.11)], speedup_eager=SPEEDUP)
    kept = record(report, task, "forward", cand, tmp_path / "cache", subset=False)
    return {
        "EvalReport.passed": report.passed,
        "EvalReport.judgement.eligible": report.judgement.eligible,
        "CandidateStatus.passed": status.passed,
        "CandidateStatus.eligible": status.eligible,
        "export passing_status": passing_status(status)[0],
        "kbench eval's record for export": kept.passing if kept is not None else None,
        "population member eligible": finished and member.eligible,
        "population.eligible()": [m.id for m in pop.eligible()] == [cid],
        "fitness": member.fitness == SPEEDUP,
        "session best": ws.session("ln").best == cid,
        "EvalOutcome.judgement.eligible": outcome.judgement.eligible,
        # the stage each one blames is the same too
        "the same failed stage": (outcome.failed_stage == (status.judgement.blocked_by or (None,))[0]
                                  == (report.judgement.blocked_by or (None,))[0]
                                  and member.failed_stage == status.judgement.failed_stage) == expected_same,
    }


@pytest.mark.parametrize("name", list(CASES))
def test_every_caller_agrees(ln_ws, layernorm_task, tmp_path, name):
    verdicts, expected = CASES[name]
    answers = _answers(ln_ws, layernorm_task, tmp_path, name, verdicts, expected)
    if answers["kbench eval's record for export"] is None:      # correctness never checked: nothing recorded
        del answers["kbench eval's record for export"]
    assert answers == {k: expected for k in answers}, name


def test_an_llm_verifier_that_fails_or_doubts_blocks_the_report_and_the_workspace(ln_ws, layernorm_task, tmp_path):
    """The case that lost the LLM verifiers: the report never looked at them."""
    for status in (F, S):
        verdicts = good(llm_verify=v(Stage.LLM_VERIFY, status, "compile: fail (0.95): reads past the end"))
        answers = _answers(ln_ws, layernorm_task, tmp_path, f"llm-{status.value}", verdicts, False)
        assert not any(answers.values()), answers
        assert judge_verdicts(verdicts, SPEEDUP).blocked_by == (Stage.LLM_VERIFY,)
        assert judge_verdicts(verdicts, SPEEDUP).failed_stage == Stage.LLM_VERIFY


def test_an_overridden_static_fail_passes_in_the_report_and_the_workspace_alike(ln_ws, layernorm_task, tmp_path):
    """A person's override of a static `fail`: `kbench eval --override-static` marks the verdict; a workspace
    records an `override` note. Both count as the override to `pass` they are; without one, both block."""
    rest = good(static=None)
    marked = [v(Stage.STATIC, F, "reward hack (overridden by a person: evaluation continues)", overridden=True)] + rest
    assert all(_answers(ln_ws, layernorm_task, tmp_path, "marked", marked, True).values())

    plain = [v(Stage.STATIC, F, "reward hack")] + rest
    assert not any(_answers(ln_ws, layernorm_task, tmp_path, "plain", plain, False).values())
    cid = ln_ws.candidates("ln")[-1].id
    ln_ws.override(cid, Stage.STATIC, "pass", "the cache is keyed by shape, not a hack", by="reviewer")
    st = ln_ws.status(cid)
    assert st.passed and st.eligible and st.status_of(Stage.STATIC) is P and st.stages[Stage.STATIC].overridden
    assert ln_ws.session("ln").best in (cid, ln_ws.candidates("ln")[-2].id)  # eligible now, ranked by speedup
    assert passing_status(st) == (True, "")
    member, _ = member_from_view(ln_ws.view(cid))
    assert member.eligible and member.failed_stage is None

    # an override to fail blocks a clean candidate as surely
    ln_ws.override(cid, Stage.STATIC, "fail", "on second thought", by="reviewer")
    assert not ln_ws.status(cid).eligible and ln_ws.status(cid).judgement.blocked_by == (Stage.STATIC,)


def test_an_override_never_invents_a_measurement(ln_ws):
    """An override to `pass` over a correctness check that never ran does not make it passed, anywhere, and a
    measurement recorded beside it does not make it eligible."""
    cid = ln_ws.commit_candidate("ln", _cand("never-ran")).id
    ln_ws.record_verdicts(cid, [v(Stage.COMPILE, P), v(Stage.CORRECTNESS, K, "no GPU"), v(Stage.TIMING, K, "no GPU")])
    ln_ws.override(cid, Stage.CORRECTNESS, "pass", "I trust it", by="newcomer")
    ln_ws.record_measurement(cid, Measurement(SPEEDUP, None, (ConfigTiming("bench", 0.1),), gpu="NVIDIA H100"))
    st = ln_ws.status(cid)
    assert st.status_of(Stage.CORRECTNESS) is P and not st.blocked
    assert not st.passed and not st.eligible and st.judgement.unran == (Stage.CORRECTNESS,)
    assert "never invent a measurement" in st.judgement.why_not_passed
    ok, why = passing_status(st)
    assert not ok and "never measured on a GPU" in why
    assert ln_ws.session("ln").best is None
    member, _ = member_from_view(ln_ws.view(cid))
    assert not member.eligible and member.failed_stage == Stage.CORRECTNESS

    # an override of a check that ran and failed may change the verdict: it invents nothing
    other = ln_ws.commit_candidate("ln", _cand("ran")).id
    ln_ws.record_verdicts(other, [v(Stage.COMPILE, P), v(Stage.CORRECTNESS, F, "odd shape off by 1e-3")])
    ln_ws.override(other, Stage.CORRECTNESS, "pass", "tolerance too tight for fp16", by="reviewer")
    assert ln_ws.status(other).passed and not ln_ws.status(other).eligible  # passed, never timed
    assert ln_ws.status(other).judgement.failed_stage == Stage.TIMING


def test_judge_the_rule_itself():
    assert judge({Stage.COMPILE: P, Stage.CORRECTNESS: P}, SPEEDUP).eligible
    assert judge({Stage.COMPILE: P, Stage.CORRECTNESS: P}).passed
    assert not judge({Stage.COMPILE: P, Stage.CORRECTNESS: P}).eligible        # passed, never measured
    assert not judge({Stage.COMPILE: P, Stage.CORRECTNESS: P}, 0.0).eligible   # no positive speedup
    j = judge({Stage.TIMING: S, Stage.STATIC: F, Stage.COMPILE: P, Stage.CORRECTNESS: P}, SPEEDUP)
    assert j.blocked_by == (Stage.STATIC, Stage.TIMING) and j.failed_stage == Stage.STATIC
    assert j.why_not_passed == "its verdicts include static fail, timing suspicious"
    assert judge({}).why_not_passed == "it has no correctness verdict"
    over = judge({Stage.COMPILE: P, Stage.CORRECTNESS: StageOutcome(P, ran=False, overridden=True)}, SPEEDUP)
    assert not over.passed and over.unran == (Stage.CORRECTNESS,)
    j = judge({Stage.COMPILE: P, Stage.CORRECTNESS: K})
    assert j.not_checked and not j.passed
    assert not judge({Stage.COMPILE: F, Stage.CORRECTNESS: K}).not_checked
    assert BLOCKING == (F, S) and REQUIRED == (Stage.COMPILE, Stage.CORRECTNESS)


def test_needs_profile_asks_the_judgement():
    timed = [ConfigTiming("bench", 0.1)]
    assert needs_profile(EvalOutcome(good(static=None, llm_verify=None), timed, speedup_eager=SPEEDUP))
    assert not needs_profile(EvalOutcome(good(static=None, llm_verify=None, timing=v(Stage.TIMING, S)), timed,
                                         speedup_eager=SPEEDUP))
    assert not needs_profile(EvalOutcome(good(compile=None), timed, speedup_eager=SPEEDUP))


def test_stage_names_are_todays_strings_in_pipeline_order(ln_ws):
    assert [s.value for s in STAGES] == ["static", "llm_verify", "compile", "correctness", "timing", "integrity",
                                         "profile"]
    assert Stage.CORRECTNESS == "correctness" and {"timing": 1}[Stage.TIMING] == 1 and f"{Stage.STATIC}" == "static"
    assert json.dumps(Verdict(Stage.CORRECTNESS, P).to_json()) == \
        '{"stage": "correctness", "status": "pass", "reason": "", "data": {}}'
    cid = ln_ws.commit_candidate("ln", _cand("notes")).id
    ln_ws.record_verdicts(cid, [Verdict(Stage.COMPILE, P), Verdict("correctness", P)])  # a member, or a plain str
    text = subprocess.run(["git", "notes", "--ref", "kbench", "show", ln_ws.resolve(cid).commit], cwd=ln_ws.path,
                          capture_output=True, text=True, check=True).stdout
    assert '"stage":"compile"' in text and '"stage":"correctness"' in text and "Stage." not in text, text
    st = ln_ws.status(cid)
    assert list(st.stages) == [Stage.COMPILE, Stage.CORRECTNESS] and st.passed
