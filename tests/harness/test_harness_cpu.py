"""Harness logic that needs no GPU: child processes, comparison, verdicts from a judge's result, reports.
(The judge's reading of a candidate's calls is in test_judge_cpu.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from engine.harness.compare import compare_outputs
from engine.pipeline.eval_types import EvalOptions, EvalReport
from engine.pipeline.protocol.result import JudgeOutcome
from engine.pipeline.verdicts import Roofline, fill_report
from engine.procs import ChildOutcome, run_child, scrubbed_env
from engine.harness.timing import hidden_work_suspected, summarise
from engine.verdict import Status, Verdict
from tests.paths import REPO

CHILD = "tests.fixtures.sandbox.child_behaviours"


def _run(mode: str, timeout: float = 30, **extra):
    env = {"PYTHONPATH": str(REPO)}
    return run_child(CHILD, {"mode": mode, **extra}, timeout_s=timeout, extra_env=env)


# -- sandbox ---------------------------------------------------------------------------------------

def test_scrubbed_env_drops_secrets_and_pins_gpu(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("MY_RANDOM_VAR", "y")
    env = scrubbed_env(gpu=3)
    assert "ANTHROPIC_API_KEY" not in env and "GITHUB_TOKEN" not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env and "MY_RANDOM_VAR" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert "PATH" in env


def test_child_that_finishes_returns_its_result_without_secrets(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    out = _run("ok")
    assert not out.crashed and out.returncode == 0
    assert out.result["finished"] is True
    assert "ANTHROPIC_API_KEY" not in out.result["env"]


def test_hanging_child_and_its_grandchild_are_killed(tmp_path):
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    out = _run("hang", timeout=3, pidfile=str(pidfile))
    assert out.timed_out and out.crashed
    assert time.monotonic() - t0 < 20
    assert "timed out after 3 s during correctness of config c1" in out.describe_crash()
    grandchild = int(pidfile.read_text())
    time.sleep(0.2)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    """Running, not merely a zombie waiting for a reaper (containers often lack one)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def test_segfaulting_child_is_reported_with_signal_and_config():
    out = _run("segfault")
    assert out.crashed and out.returncode == -11
    msg = out.describe_crash()
    assert "SIGSEGV" in msg and "config c1" in msg and "about to fault" in msg


def test_failing_child_reports_exit_code_and_output():
    out = _run("exit3")
    assert "exited with code 3" in out.describe_crash()
    assert "something went wrong" in out.describe_crash()


# -- comparison ------------------------------------------------------------------------------------

def test_compare_accepts_within_tolerance_and_names_the_first_mismatch():
    ref = torch.linspace(-1, 1, 100).reshape(10, 10)
    assert compare_outputs((ref + 1e-7,), (ref,), 1e-5, 1e-5).ok
    bad = ref.clone()
    bad[3, 4] += 0.5
    c = compare_outputs((bad,), (ref,), 1e-5, 1e-5)
    assert not c.ok and "1 of 100 elements" in c.reason and "[3, 4]" in c.reason


@pytest.mark.parametrize("got, why", [
    (torch.zeros(10, 10, dtype=torch.float16), "dtype"),
    (torch.zeros(10, 11), "shape"),
    (torch.zeros(10, 10).t(), "strides"),
])
def test_compare_rejects_structural_differences(got, why):
    ref = torch.zeros(10, 10)
    c = compare_outputs((got,), (ref,), 1e-5, 1e-5)
    assert not c.ok and why in c.reason


def test_compare_rejects_nan_where_reference_is_finite():
    ref = torch.ones(8)
    got = ref.clone()
    got[5] = float("nan")
    c = compare_outputs((got,), (ref,), 1e-2, 1e-2)
    assert not c.ok and "NaN" in c.reason


def test_compare_ignores_strides_of_size_one_dims():
    ref = torch.zeros(2, 1, 3, 4)
    got = torch.zeros(2, 3, 1, 4).transpose(1, 2)  # same layout, a different stride on the size-1 dim
    assert got.stride() != ref.stride() and compare_outputs((got,), (ref,), 0, 0).ok


def test_compare_names_an_all_zero_output():
    c = compare_outputs((torch.zeros(4, 4),), (torch.randn(4, 4),), 1e-5, 1e-5)
    assert not c.ok and "unwritten or uninitialised output memory" in c.reason


def test_compare_counts_outputs():
    assert "returned 1 output(s)" in compare_outputs((torch.ones(1),), (torch.ones(1), torch.ones(1)), 0, 0).reason


# -- timing statistics and verdicts ---------------------------------------------------------------------

def test_timing_summary_and_hidden_work_flag():
    s = summarise([1.0, 1.1, 0.9, 1.0, 1.05], [1.02] * 5, null_ms=0.01)
    assert s.median_ms == 1.0 and s.n == 5 and not hidden_work_suspected(s)
    s = summarise([0.01] * 5, [2.0] * 5, null_ms=0.01)
    assert hidden_work_suspected(s)


def _fill_from_outcome(report, task, opts, child: ChildOutcome, roof: Roofline | None = None) -> None:
    """The verdicts from what a judge process left, read back as evaluate() reads it."""
    fill_report(report, task, opts, JudgeOutcome.of(child), roof)


def _stats(ms: float) -> dict:
    return {"median_ms": ms, "iqr_ms": ms / 50, "mean_ms": ms, "min_ms": ms, "n": 100, "all_streams_ms": ms}


def _report(task):
    return EvalReport(task.name, "forward", "abc", "native", [Verdict("compile", Status.PASS, "compiled")], [], {}, {})


def test_a_judge_that_aborted_names_the_config_and_judges_nothing(layernorm):
    """The candidate runs in the runner, whose deaths the judge reports itself (tests/pipeline/test_judge_death.py):
    a judge that aborted without writing why measured nothing, so the candidate is unmeasured, not failed."""
    outcome = ChildOutcome({"finished": False, "progress": {"stage": "correctness", "config": "offset-mean"},
                            "correctness": {"odd-small": {"ok": True, "max_abs_err": 1e-7}}},
                           returncode=-6, timed_out=False, seconds=2.0, output_tail="CUDA error: an illegal memory access")
    rep = _report(layernorm)
    _fill_from_outcome(rep, layernorm, EvalOptions(), outcome)
    assert "SIGABRT" in rep.unmeasured and "offset-mean" in rep.unmeasured and "illegal memory" in rep.unmeasured
    assert rep.verdict("correctness").status == rep.verdict("timing").status == Status.SKIPPED
    assert [r.correct for r in rep.rows[:2]] == [True, None]


def test_verdicts_without_gpu_are_skipped_not_failed(layernorm):
    outcome = ChildOutcome({"finished": True, "error": "no CUDA GPU is visible to the evaluator"}, 0, False, 1.0, "")
    rep = _report(layernorm)
    _fill_from_outcome(rep, layernorm, EvalOptions(), outcome)
    assert rep.verdict("correctness").status == Status.SKIPPED and not rep.passed
    assert rep.unmeasured == "no CUDA GPU is visible to the evaluator"


def test_an_evaluation_without_gpu_is_no_judgement_for_the_loop(layernorm):
    """What the executors hand the evolution loop when the machine had no GPU: the stages that ran (compile)
    and an infrastructure error, not skipped correctness/timing verdicts that would finish the candidate."""
    from engine.evolve.outcome import EvalOutcome

    outcome = ChildOutcome({"finished": True, "error": "no CUDA GPU is visible to the evaluator"}, 0, False, 1.0, "")
    rep = _report(layernorm)
    _fill_from_outcome(rep, layernorm, EvalOptions(), outcome)
    out = EvalOutcome.from_report(rep)
    assert out.infra_error == "no CUDA GPU is visible to the evaluator"
    assert [v.stage for v in out.verdicts] == ["compile"] and out.measurement() is None


def test_verdicts_of_a_passing_timed_run(layernorm):
    names = [c.name for c in layernorm.configs]
    stats = _stats(0.5)
    outcome = ChildOutcome({"finished": True,
                            "correctness": {n: {"ok": True, "max_abs_err": 1e-6} for n in names},
                            "timing": {n: {"candidate": stats, "eager": _stats(1.0), "speedup_eager": 2.0,
                                           "hidden_work": False} for n in names}}, 0, False, 5.0, "")
    rep = _report(layernorm)
    _fill_from_outcome(rep, layernorm, EvalOptions(), outcome)
    assert rep.passed and rep.verdict("timing").status == Status.PASS
    assert rep.geomean_speedup_eager == pytest.approx(2.0)


def test_report_says_not_checked_without_gpu(layernorm):
    from engine.pipeline.report import render
    outcome = ChildOutcome({"finished": True, "error": "no CUDA GPU is visible to the evaluator"}, 0, False, 1.0, "")
    rep = _report(layernorm)
    _fill_from_outcome(rep, layernorm, EvalOptions(), outcome)
    assert "NOT CHECKED" in render(rep) and "=> FAIL" not in render(rep)


def test_roofline_floor_and_fraction():
    from engine.harness.roofline import Peaks
    from engine.tasks.model import Cost
    p = Peaks("gpu", copy_gbps=2000.0, fp32_tflops=50.0, tf32_tflops=400.0, measured_at=0.0)
    mem = Cost(flops=1e6, bytes=2e9)          # 1 ms of copying, 0.02 ms of math
    assert p.floor_ms(mem) == pytest.approx(1.0) and p.bound(mem) == "memory"
    assert p.fraction(mem, 2.0) == pytest.approx(0.5)
    comp = Cost(flops=1e11, bytes=1e6)        # 2 ms at the fp32 rate, but 3xTF32 does 133 TFLOP/s
    assert p.floor_ms(comp) == pytest.approx(1e11 / (400e12 / 3) * 1e3) and p.bound(comp) == "compute"
    slow_tc = Peaks("gpu", copy_gbps=2000.0, fp32_tflops=50.0, tf32_tflops=90.0, measured_at=0.0)
    assert slow_tc.floor_ms(comp) == pytest.approx(2.0)  # SIMT fp32 is the faster honest path there


def test_time_below_the_physical_floor_is_suspicious(layernorm):
    names = [c.name for c in layernorm.configs]
    outcome = ChildOutcome({"finished": True,
                            "correctness": {n: {"ok": True} for n in names},
                            "timing": {n: {"candidate": _stats(0.001), "speedup_eager": 50.0} for n in names}},
                           0, False, 5.0, "")
    rep = _report(layernorm)
    _fill_from_outcome(rep, layernorm, EvalOptions(), outcome, Roofline(floor_ms={n: 0.05 for n in names}))
    v = rep.verdict("timing")
    assert v.status == Status.SUSPICIOUS and "physical floor" in v.reason


def test_geomean_skips_missing_and_non_positive():
    from engine.harness.stats import geomean
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([2.0, None, 0.0, -1.0, 8.0]) == pytest.approx(4.0)
    assert geomean([None, 0.0]) is None
    assert geomean([]) is None
