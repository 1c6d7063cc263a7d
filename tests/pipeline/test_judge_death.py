"""A judge that dies without writing why leaves the candidate unmeasured, never failed.

Seen on an H200 with four KernelBench evaluations sharing a host: elementwise problems over 6 GiB tensors, their
own Model as the candidate, were "failed" because "the evaluator process exited with code 1 during correctness of
config seed0": the trusted judge died with its host short of memory, and nothing was measured. A candidate's code
runs in the runner, whose deaths the judge itself reports; the judge's own death is no verdict on the kernel."""

from __future__ import annotations

import subprocess
import sys

from engine.pipeline.eval_types import EvalOptions, EvalReport
from engine.pipeline.protocol.result import JudgeOutcome
from engine.pipeline.verdicts import fill_report
from engine.procs import ChildOutcome
from engine.verdict import Stage, Status

AT = {"progress": {"stage": "correctness", "config": "odd-small"}}


def _report(task, child: ChildOutcome) -> EvalReport:
    report = EvalReport(task.name, "forward", "c0ffee", "native", [], [], {}, {})
    fill_report(report, task, EvalOptions(), JudgeOutcome.of(child))
    return report


def _killed_child() -> int:
    """The return code of a real process killed as the out-of-memory killer kills."""
    proc = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    return proc.returncode


def test_a_judge_that_died_unannounced_leaves_the_candidate_unmeasured(layernorm):
    for rc in (1, _killed_child()):
        report = _report(layernorm, ChildOutcome(dict(AT), rc, False, 80.0, ""))
        assert report.unmeasured.startswith("the judge "), report.unmeasured
        assert "before its verdict" in report.unmeasured and "not a verdict on the kernel" in report.unmeasured
        assert ("SIGKILL" if rc < 0 else "exited with code 1") in report.unmeasured
        assert "during correctness of config odd-small" in report.unmeasured
        assert [v.status for v in report.verdicts] == [Status.SKIPPED, Status.SKIPPED]
        assert all(r.correct is None for r in report.rows)


def test_what_the_judge_found_before_it_died_stands(layernorm):
    wrong = {**AT, "correctness": {"odd-small": {"ok": False, "reason": "trial 0: 12 elements outside atol"}}}
    report = _report(layernorm, ChildOutcome(wrong, 1, False, 80.0, ""))
    assert not report.unmeasured
    corr = next(v for v in report.verdicts if v.stage == Stage.CORRECTNESS)
    assert corr.status == Status.FAIL and "outside atol" in corr.reason


def test_a_judge_past_its_deadline_or_one_that_said_why_is_not_excused(layernorm):
    timed_out = _report(layernorm, ChildOutcome(dict(AT), -9, True, 660.0, ""))
    said = _report(layernorm, ChildOutcome({**AT, "error": "the runner died: killed by SIGSEGV"}, 0, False, 5.0, ""))
    for report, why in ((timed_out, "timed out"), (said, "SIGSEGV")):
        assert not report.unmeasured
        corr = next(v for v in report.verdicts if v.stage == Stage.CORRECTNESS)
        assert corr.status == Status.FAIL and why in corr.reason, corr.reason
