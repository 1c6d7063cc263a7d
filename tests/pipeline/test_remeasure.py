"""A clock check that fails once is measured again: a busy host or a GPU shared with another process can make an
honest kernel's timing look tampered with (seen on the H100 while other evaluations ran beside it), a forger
fails it every time. The judge is replaced by recorded results here; tests/integrity/test_gpu_exploits.py runs the real
one against forgers on a GPU."""

from __future__ import annotations

import contextlib
import os
import signal
from types import SimpleNamespace

import pytest

from engine.candidates import load_candidate
from engine.pipeline import evaluate as ev
from engine.pipeline.judge.analysis import CLOCK, SIDE_WORK
from engine.pipeline.protocol.result import JudgeOutcome, JudgeResult, Progress
from engine.pipeline.protocol.types import CorrectnessResult, IntegrityResult
from engine.procs import ChildOutcome
from engine.tasks.loader import load_task
from engine.verdict import Status


# what the runner reports when the candidate's call ran out of GPU memory
RUNNER_OOM = "raised in the call: OutOfMemoryError: CUDA out of memory. Tried to allocate 4096.00 GiB"


def _result(task, clock_ok=True, hidden=False, other_hack=None):
    names = [c.name for c in task.configs]
    stats = {"median_ms": 0.098, "iqr_ms": 0.001, "mean_ms": 0.098, "min_ms": 0.097, "n": 200,
             "all_streams_ms": 0.1}
    integrity = {n: {"ok": True, "hack": None, "reason": "", "checks": []} for n in names}
    integrity["bench@timing"] = ({"ok": True, "hack": None, "reason": "", "checks": ["clock"]} if clock_ok else
                                 {"ok": False, "hack": CLOCK, "reason": f"{CLOCK}: events say 0.098 ms, clock 0.62 ms",
                                  "checks": ["clock"]})
    if other_hack:
        integrity[names[0]] = {"ok": False, "hack": other_hack, "reason": f"{other_hack}: x", "checks": []}
    return {"finished": True, "device": {"gpu": "test GPU"},
            "correctness": {n: {"ok": True, "reason": "", "max_abs_err": 0.0} for n in names},
            "timing": {"bench": {"candidate": stats, "hidden_work": hidden, "eager": {**stats, "median_ms": 0.2},
                                 "speedup_eager": 0.2 / 0.098, "baselines": {"source": "measured"}}},
            "integrity": integrity}


@pytest.fixture
def judged(monkeypatch, tmp_path):
    """evaluate() on gelu_bias's baseline with the build and the judge replaced: returns (run, calls)."""
    task = load_task("gelu_bias")
    build = SimpleNamespace(ok=True, seconds=0.0, cache_hit=True, module_name="kb_x", so_path=tmp_path / "x.so",
                            error="", log="")
    monkeypatch.setattr("engine.harness.build.stage.build_candidate", lambda *a, **k: build)
    monkeypatch.setattr("engine.pipeline.timer.build_timer",
                        lambda *a, **k: SimpleNamespace(so_path=tmp_path / "t.so", module_name="t"))
    monkeypatch.setattr(ev, "no_gpu_visible", lambda gpu=None: None)     # the stand-in judge is the GPU
    calls: list[dict] = []

    def run(*results):
        queue = list(results)

        def fake_judge(request, opts):
            calls.append(request.to_json())
            return JudgeOutcome.of(ChildOutcome(queue.pop(0), 0, False, 1.0, ""))
        monkeypatch.setattr(ev, "_run_judge", fake_judge)
        opts = ev.EvalOptions(timing_configs=["bench"], baselines=("eager",), profile=False, roofline=False,
                              cache_root=tmp_path)
        return ev.evaluate(task, load_candidate(task.baseline_dir("forward")), "forward", opts)
    return task, run, calls


def test_a_clock_failure_seen_once_is_measured_again_and_the_second_measurement_counts(judged):
    task, run, calls = judged
    report = run(_result(task, clock_ok=False), _result(task))
    assert len(calls) == 2 and calls[0] == calls[1]          # the same request, judged again
    assert report.passed and report.verdict("integrity").status == Status.PASS
    assert report.remeasured["first"] == "the clock check failed on bench@timing"
    assert report.remeasured["again"] == ""
    assert report.verdict("timing").data["remeasured"]["first"].startswith("the clock check")
    assert "judge.remeasure" in report.phases and report.to_json()["remeasured"] == report.remeasured


def test_a_forger_fails_the_clock_check_on_both_measurements(judged):
    task, run, calls = judged
    report = run(_result(task, clock_ok=False), _result(task, clock_ok=False))
    assert len(calls) == 2 and not report.passed
    iv = report.verdict("integrity")
    assert iv.status == Status.FAIL and CLOCK in iv.reason and "(seen on two measurements" in iv.reason


def test_work_after_the_end_event_is_measured_again(judged):
    task, run, calls = judged
    report = run(_result(task, hidden=True), _result(task, hidden=True))
    assert len(calls) == 2
    tv = report.verdict("timing")
    assert tv.status == Status.SUSPICIOUS and "(seen on two measurements" in tv.reason
    assert report.remeasured["again"].startswith("work continued after the stream's end event on bench")


def test_a_busy_host_is_named_beside_a_failure_seen_twice(judged, monkeypatch):
    task, run, _ = judged
    monkeypatch.setattr(ev.os, "getloadavg", lambda: (40.0, 30.0, 20.0))
    monkeypatch.setattr(ev.os, "cpu_count", lambda: 16)
    iv = run(_result(task, clock_ok=False), _result(task, clock_ok=False)).verdict("integrity")
    assert iv.reason.endswith("(seen on two measurements; load 40.0 on 16 CPUs: other work shares this host)")


def test_a_clean_result_or_another_hack_is_judged_once(judged):
    task, run, calls = judged
    assert run(_result(task)).passed and len(calls) == 1 and not run(_result(task)).remeasured
    calls.clear()
    # a clock failure beside a hack that contention cannot cause: no second measurement, the fail stands
    report = run(_result(task, clock_ok=False, other_hack=SIDE_WORK))
    assert len(calls) == 1 and not report.passed and not report.remeasured


OOM = ("the judge ran out of GPU memory during correctness of config bench (12 MiB free of 81559 MiB): the GPU "
       "is shared with other work or too small for this task's configs; not a verdict on the kernel")


def test_the_judges_own_memory_running_out_is_judged_again_then_left_unmeasured(judged, monkeypatch):
    monkeypatch.setattr(ev, "MEMORY_RETRY_S", 0.0)
    task, run, calls = judged
    report = run({"finished": True, "unmeasured": OOM}, _result(task))
    assert len(calls) == 2 and report.passed and not report.unmeasured   # the second judgement counts
    calls.clear()
    report = run({"finished": True, "unmeasured": OOM}, {"finished": True, "unmeasured": OOM})
    assert len(calls) == 2 and not report.passed and report.unmeasured == OOM
    assert {v.stage: v.status for v in report.verdicts if v.stage in ("correctness", "timing")} == \
        {"correctness": Status.SKIPPED, "timing": Status.SKIPPED}
    from engine.evolve.outcome import EvalOutcome
    assert EvalOutcome.from_report(report).infra_error == OOM             # the loop evaluates it again later


def test_only_the_judges_own_allocation_failures_count_as_out_of_memory():
    from engine.pipeline.judge.memory import judge_out_of_memory, out_of_memory

    class OutOfMemoryError(RuntimeError):
        pass
    assert out_of_memory(OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB"))
    assert out_of_memory(RuntimeError("fingerprint: out of memory"))
    assert not out_of_memory(ValueError("out of memory"))               # not a CUDA allocation
    assert not out_of_memory(RuntimeError("an illegal memory access was encountered"))
    why = judge_out_of_memory(Progress("correctness", "rkb-multi-3"))
    assert "during correctness of config rkb-multi-3" in why and "not a verdict on the kernel" in why


def test_out_of_memory_is_excused_only_when_other_users_hold_the_gpu():
    from engine.pipeline.judge.memory import blame_from
    mib = 1 << 20
    judge, runner, fork, spare = 100, 200, 201, 150
    contended = blame_from({judge: 2000 * mib, runner: 1000 * mib, 300: 70000 * mib}, judge, {runner}, set())
    assert contended.contended and "other processes 70000 MiB" in contended.figures
    hoarded = blame_from({judge: 2000 * mib, runner: 75000 * mib, 300: 500 * mib}, judge, {runner}, set())
    assert not hoarded.contended and "candidate's processes held 75000 MiB" in hoarded.figures
    # memory held by a process the runner forked is the candidate's, not the GPU's other users'
    forked = blame_from({judge: 2000 * mib, runner: 10 * mib, fork: 70000 * mib}, judge, {runner, fork}, set())
    assert not forked.contended
    # kbench's own spare judge is neither: it cannot excuse a candidate that holds little
    spare_only = blame_from({judge: 2000 * mib, runner: 10 * mib, spare: 1000 * mib}, judge, {runner}, {spare})
    assert not spare_only.contended
    # NVML lists pids of another namespace (the judge's own is not among them), or no figures (MIG): no excuse
    assert blame_from({1: 2000 * mib, 2: 70000 * mib}, judge, {runner}, set()) is None
    assert blame_from({judge: 0, runner: 0, 300: 0}, judge, {runner}, set()) is None
    assert blame_from(None, judge, {runner}, set()) is None


def test_a_failure_on_record_is_never_turned_into_unmeasured():
    assert not JudgeResult(correctness={"a": CorrectnessResult(True)}).failed_already()
    assert JudgeResult(correctness={"a": CorrectnessResult(True), "b": CorrectnessResult(False, "x")}).failed_already()
    assert JudgeResult(integrity={"a@timing": IntegrityResult(False, "call-count-cache")}).failed_already()


SHARED = "pid 4242 at up to 97 % SM"


def test_a_clock_failure_seen_twice_beside_other_work_on_the_gpu_leaves_the_candidate_unmeasured(judged):
    """Seen on the H100: three evaluations timing at once on one GPU, an honest kernel's events said 0.0102 ms
    while the judge's clock saw 0.69 ms per iteration, on both measurements."""
    task, run, calls = judged
    report = run({**_result(task, clock_ok=False), "gpu_shared": SHARED},
                 {**_result(task, clock_ok=False), "gpu_shared": "pid 4242 at up to 88 % SM"})
    # correct, as checked; but with no speedup it cannot be a best or a parent, and the loop judges it again
    assert len(calls) == 2 and not report.judgement.eligible and report.geomean_speedup_eager is None
    assert report.unmeasured.startswith("the timing checks (the judge's clock, the stream's end event) failed on "
                                        "two measurements while other processes ran work on this GPU "
                                        f"({SHARED}; then pid 4242 at up to 88 % SM)")
    for stage in ("timing", "integrity"):   # the times cannot be trusted, nor the speedup taken from them
        assert report.verdict(stage).status == Status.SKIPPED and report.verdict(stage).reason == report.unmeasured
    assert report.verdict("correctness").status == Status.PASS       # what was checked still stands
    from engine.evolve.outcome import EvalOutcome
    assert EvalOutcome.from_report(report).infra_error == report.unmeasured


def test_other_work_seen_only_once_or_a_hack_beside_it_excuses_nothing(judged):
    task, run, _ = judged
    # the first measurement saw other work, the second did not: the forger's failure stands
    report = run({**_result(task, clock_ok=False), "gpu_shared": SHARED}, _result(task, clock_ok=False))
    assert not report.unmeasured and report.verdict("integrity").status == Status.FAIL
    report = run(_result(task, clock_ok=False), {**_result(task, clock_ok=False), "gpu_shared": SHARED})
    assert not report.unmeasured and report.verdict("integrity").status == Status.FAIL
    # a hack contention cannot cause is never measured again, whoever shares the GPU
    report = run({**_result(task, clock_ok=False, other_hack=SIDE_WORK), "gpu_shared": SHARED})
    assert not report.unmeasured and report.verdict("integrity").status == Status.FAIL


def test_only_other_processes_running_work_count_as_sharing_the_gpu():
    from engine.pipeline.judge.contention import busy_from
    judge, runner, fork, spare, other, idle = 100, 200, 201, 150, 300, 301
    use = {judge: 60, runner: 99, fork: 99, spare: 40, other: 97, idle: 0}
    now = {judge: 1, runner: 1, fork: 1, spare: 1, other: 1, idle: 1}
    assert busy_from(use, now, judge, {runner, fork}, {spare}) == "pid 300 at up to 97 % SM"
    # the candidate's own processes (forked or re-parented to the judge) and kbench's spares never count
    assert busy_from({judge: 60, runner: 99, fork: 99, spare: 40}, now, judge, {runner, fork}, {spare}) == ""
    assert busy_from({other: 2}, now, judge, {runner}, set()) == ""      # a context that ran nothing to speak of
    # the runner and its fork were stopped before the judge asked: NVML's samples still name them, and the
    # judge saw them on the candidate's side while it timed, so they are the candidate's, ended or not
    assert busy_from({judge: 60, runner: 99, fork: 99}, {judge: 1}, judge, {runner, fork}, set()) == ""
    # another user's job that ran while the candidate was timed and has ended since still shared the GPU
    assert busy_from({judge: 60, runner: 99, other: 80}, {judge: 1}, judge, {runner}, set()) == \
        "pid 300 at up to 80 % SM"
    # NVML lists another pid namespace's pids (the judge's own is not among them): no pid can be matched
    assert busy_from({1: 99, 2: 99}, {1: 1, 2: 1}, judge, set(), set()) == ""
    assert busy_from(None, now, judge, {runner}, set()) == "" and busy_from({}, now, judge, set(), set()) == ""
    assert busy_from(use, None, judge, {runner}, set()) == ""


def test_the_judge_keeps_every_process_of_the_candidates_side_it_saw_while_timing():
    """A child the runner forked is noted while it lives, and stays the candidate's after it ended: NVML's
    samples of it then never read as another user's work."""
    import subprocess
    import sys

    from engine.pipeline.judge.evaluation import Judge
    judge = SimpleNamespace(candidate_seen=set())
    runner = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                               "print(c.pid, flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        fork = int(runner.stdout.readline())
        Judge._note_candidate_side(judge)
    finally:
        runner.kill()
        runner.wait()
    Judge._note_candidate_side(judge)
    os.kill(fork, signal.SIGKILL)
    assert {runner.pid, fork} <= judge.candidate_seen


def test_the_judges_own_out_of_memory_while_comparing_is_never_a_correctness_verdict():
    """Seen on the H100 with five evaluations at once: the judge's comparison of an honest baseline's outputs
    could not allocate 26 MiB, and the config was failed as "the judge could not compare". The judge's own
    memory now goes to judge.py's blame (unmeasured when other processes hold the GPU); any other failure of
    the comparison is still kbench's own, named as such, with its trace kept."""
    import torch

    from engine.pipeline.judge.evaluation import compared

    def oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 26.00 MiB.")

    traces: dict[str, str] = {}
    with pytest.raises(torch.OutOfMemoryError):
        compared("rkb-single-1", oom, traces)
    assert traces == {}

    def broken():
        raise ValueError("shapes differ")

    corr, integ = compared("rkb-single-1", broken, traces)
    assert not corr.ok and integ.ok and "kbench failure, not a verdict on the kernel" in corr.reason
    assert "ValueError: shapes differ" in corr.reason and "shapes differ" in traces["rkb-single-1"]
    good = (CorrectnessResult(True), IntegrityResult(True))
    assert compared("bench", lambda: good, traces) == good


def test_the_runners_out_of_memory_opens_the_question_and_nvml_answers_it():
    """A config the runner could not take or run for want of GPU memory: the runner's words (which candidate
    code can forge) are only asked about when nothing failed before, and only the judge's own NVML reading
    excuses the failure."""
    from engine.pipeline.judge.memory import MemoryBlame, runner_memory_excuse
    asked = []

    def blame(contended: bool | None):
        def read():
            asked.append(contended)
            return None if contended is None else MemoryBlame(contended, " (figures)")
        return read
    assert runner_memory_excuse(RUNNER_OOM, False, blame(True)) == MemoryBlame(True, " (figures)")
    assert runner_memory_excuse("RuntimeError: CUDA error: out of memory", False, blame(True)) is not None
    assert runner_memory_excuse(RUNNER_OOM, False, blame(False)) is None        # the candidate's side holds the GPU
    assert runner_memory_excuse(RUNNER_OOM, False, blame(None)) is None         # NVML cannot say: nothing is excused
    assert asked == [True, True, False, None]
    assert runner_memory_excuse(RUNNER_OOM, True, blame(True)) is None          # a failure on record stands
    assert runner_memory_excuse("an illegal memory access was encountered", False, blame(True)) is None
    assert runner_memory_excuse("", False, blame(True)) is None
    assert asked == [True, True, False, None]                            # and NVML was not even asked


def test_only_a_raised_call_with_nothing_else_against_it_can_be_excused_for_memory():
    """A forged record stream, an integrity failure found on the same config, or an output the harness could
    not copy stands against the candidate whatever its error says; only the call's own raise may go on to the
    memory blame."""
    from engine.pipeline.judge.analysis import Job
    from engine.pipeline.judge.evaluation import excusable_call_error
    assert excusable_call_error(Job(error=RUNNER_OOM, error_where="call"), True) == RUNNER_OOM
    assert excusable_call_error(Job(error=RUNNER_OOM, error_where="call", forged="a record out of order"), True) == ""
    assert excusable_call_error(Job(error=RUNNER_OOM, error_where="call"), False) == ""      # e.g. persistent output
    assert excusable_call_error(Job(error=RUNNER_OOM, error_where="output"), True) == ""
    assert excusable_call_error(Job(error=RUNNER_OOM, error_where=""), True) == ""           # the helper's own copy
    assert excusable_call_error(Job(), True) == ""


def _judge_with(monkeypatch, tmp_path, req: SimpleNamespace, runner: SimpleNamespace, contended: bool):
    """A Judge (the real class) with `req`, a result file under tmp_path, the fake `runner`, and NVML's memory
    blame saying whether the GPU's other users hold more of it than the candidate's side."""
    from engine.pipeline.judge import evaluation as judge_eval
    from engine.pipeline.judge.main import ResultFile
    from engine.pipeline.judge.memory import MemoryBlame
    from engine.pipeline.protocol.types import TimerSpec
    monkeypatch.setattr(judge_eval, "memory_blame", lambda: MemoryBlame(contended, " (figures)"))
    judge = judge_eval.Judge(TimerSpec("t.so", "t"))
    judge.req, judge.out, judge.runner = req, ResultFile(tmp_path / "result.json"), runner
    judge.local = SimpleNamespace(hasher=lambda: None, rebuild=None)
    return judge


@pytest.fixture
def timing_phase(monkeypatch, tmp_path):
    """Judge._time with its runner and the baselines' timer replaced: returns run(job, contended) -> (result,
    what was timed, whether the runner was closed). The real wiring of the phase, on CPU; the GPU suite runs
    it with a real runner (tests/integrity/test_gpu_exploits.py)."""
    from engine.pipeline.judge import evaluation as judge_eval
    from engine.pipeline.judge import timing_phase as judge_timing_phase
    from engine.pipeline.protocol.result import TimingRow
    from engine.config.sections import TimingParams

    def run(job, contended):
        timed, closed = [], []

        class Timing:
            def __init__(self, req, local, data):
                pass

            def verdict(self, runtime, prep, tol, job, hasher=None, fresh=None, mutated=()):
                timed.append(job)
                return TimingRow(error=job.error or None)

        monkeypatch.setattr(judge_timing_phase, "TimingJudge", Timing)
        monkeypatch.setattr(judge_timing_phase, "reference_outputs", lambda prep: [])
        monkeypatch.setattr(judge_timing_phase, "prepare_baseline", lambda *a: None)
        judge = _judge_with(monkeypatch, tmp_path, SimpleNamespace(timing_configs=[], timing_params=TimingParams()),
                            SimpleNamespace(process=None, run_job=lambda spec, decode, *a: (job, None),
                                            close=lambda: closed.append(True)), contended)
        judge._digest_timed = judge._note_memory = lambda *a: None    # the job's outputs and figures: none here
        with contextlib.suppress(judge_eval.Stop):
            prep = SimpleNamespace(variants=[SimpleNamespace(plan=SimpleNamespace(call_seed=None))], fresh=None,
                                   mutated=())
            judge._time([SimpleNamespace(name="bench")], {"bench": prep}, None, None)
        return judge.out.data, timed, bool(closed)
    return run


def test_an_out_of_memory_while_timed_is_excused_only_for_a_clean_stream_on_a_gpu_others_hold(timing_phase):
    """The timing phase's wiring of the runner memory rule: a call that raised for want of memory while other
    processes held more of the GPU leaves the candidate unmeasured with no timing kept; the same raise beside a
    forged record stream, or on a GPU the candidate's side holds, is the candidate's failure."""
    from engine.pipeline.judge.analysis import Job
    data, timed, closed = timing_phase(Job(error=RUNNER_OOM, error_where="call"), contended=True)
    assert "while the candidate was timed on config bench" in data.unmeasured and "(figures)" in data.unmeasured
    assert timed == [] and data.timing == {} and not data.error and not closed   # judge.py closes the runner
    data, timed, closed = timing_phase(Job(error=RUNNER_OOM, error_where="call", forged="a record out of order"), True)
    assert data.unmeasured is None and "forged while timing bench" in data.error and closed
    data, timed, closed = timing_phase(Job(error=RUNNER_OOM, error_where="call"), contended=False)
    assert data.unmeasured is None and not data.error and data.timing["bench"].error == RUNNER_OOM and closed


def test_an_out_of_memory_while_checked_is_excused_only_when_the_configs_integrity_held(monkeypatch, tmp_path):
    """The checking phase's wiring of the same rule (Judge.run with the runner, the references and the
    comparison replaced): a config whose call raised for want of memory on a GPU others hold leaves the
    candidate unmeasured, with nothing recorded against it; the same raise from a candidate that also kept its
    own output buffer across calls (an integrity failure found on that config) fails it."""
    import torch

    from engine.pipeline.judge import analysis

    from engine.pipeline.judge import evaluation as judge_eval
    from engine.pipeline.protocol import messages as msg
    from engine.pipeline.judge.analysis import Job
    task = load_task("gelu_bias")
    monkeypatch.setattr(judge_eval, "prepare",
                        lambda *a, **kw: SimpleNamespace(variants=[SimpleNamespace(ref=0, seed=1)], flops=0.0, mutated=()))
    monkeypatch.setattr(judge_eval, "plan_message", lambda prep: ({}, []))
    monkeypatch.setattr(judge_eval, "composer", lambda runtime, prep: None)
    monkeypatch.setattr(judge_eval, "footprint", lambda prep: 0)
    monkeypatch.setattr(judge_eval, "reference_outputs", lambda prep: [])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 0)
    monkeypatch.setattr(judge_eval.Judge, "_gpu_bytes", lambda self: 80 << 30)

    def judged(integrity: IntegrityResult):
        monkeypatch.setattr(analysis, "judge_check", lambda *a: (CorrectnessResult(False, RUNNER_OOM), integrity))
        req = SimpleNamespace(direction="forward", candidate={}, configs=[task.configs[0].name], trials=1,
                              integrity=True, timing=False, timing_configs=[], numerics=None,
                              upstream_draws=False, gpu_keep=0.125, float64_opinion=True)
        runner = SimpleNamespace(
            jail_report=None, load=lambda *a: "", decoder=lambda local, hold=False: None, drop=lambda *a: None,
            configure=lambda header, tensors, deadline: msg.Configured(cid="c"),
            run_job=lambda spec, decode, *a: (Job(error=RUNNER_OOM, error_where="call"), None))
        judge = _judge_with(monkeypatch, tmp_path, req, runner, contended=True)
        judge.task, judge.has_gpu = task, True
        judge.run()
        return judge.out.data

    data = judged(IntegrityResult(True))
    assert "while the candidate ran config" in data.unmeasured and data.correctness == {} and not data.error
    data = judged(analysis.fail(analysis.PERSISTENT_OUTPUT, "the output shared storage with the last call's"))
    assert data.unmeasured is None and not data.correctness[task.configs[0].name].ok
    assert not data.integrity[task.configs[0].name].ok
