"""Evaluate one candidate on one task direction: the static gate, the build, then the judge.

This is the parent side (the CLI, the app, an executor's worker). It never imports the candidate: the build
runs in jailed compiler processes, and everything that executes candidate code runs in the jailed runner
that the judge (engine/pipeline/judge/main.py, a trusted child process) starts and reads. Verdict policy lives in
engine/pipeline/verdicts.py; what the verdicts amount to (EvalReport.passed) is engine.verdict.judge's rule.
EvalOptions and EvalReport are defined in engine/pipeline/eval_types.py, which verdicts and profiling import too.

Baselines the judge measured before are handed back to it: the session's (engine/pipeline/baselines.py,
`reuse_baselines`) and those an earlier evaluation kept on disk (engine/pipeline/baseline_cache.py,
`baseline_cache`); the judge re-times eager before it reuses either. The profile stage runs last (`profile`), or
apart through `profile_after` once a caller has shown the verdict (`kbench eval --profile`).

Where no CUDA GPU can be visible (engine.harness.device_info.no_gpu_visible: CUDA_VISIBLE_DEVICES, /dev, NVML;
no CUDA in this process) no judge is started: the candidate is compiled, and correctness and timing are skipped
with the judge's own no-GPU reason, so a CPU machine gets its compile verdict without seconds of judge start-up.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Callable

from engine import jsonable
from engine.candidates import Candidate
from engine.gpu_wait import NO_GPU
from engine.harness.build import stage as builds  # a module, not its function: tests substitute build_candidate
from engine.harness.build.triton import TRITON_CHECKED
from engine.harness.build.wait import cached, expected_wait
from engine.harness.device_info import no_gpu_visible
from engine.harness.toolchain_cache import cached_toolchain
from engine.integrity.static import gate_static
from engine.pipeline import eval_mode, profiling, verdicts
from engine.pipeline import timer as timers  # a module: tests substitute build_timer
from engine.pipeline.baseline_cache import OFF, BaselineCache
from engine.pipeline.baselines import SESSION, key_for
from engine.pipeline.candidate_spec import candidate_spec
from engine.pipeline.early_judge import EarlyJudge
from engine.pipeline.eval_types import EvalOptions, EvalReport
from engine.pipeline.judge.contention import contention_sensitive, shared_gpu_reason
from engine.pipeline.protocol.result import JudgeOutcome
from engine.pipeline.protocol.types import JudgeRequest, TimerSpec
from engine.pipeline.warm import POOL
from engine.procs import run_child
from engine.tasks.glue.abi import GlueError
from engine.tasks.glue.generated import materialise
from engine.tasks.model import Task, timing_selection
from engine.verdict import Stage, Status, Verdict

# The parent's grace beyond the judge's own deadline: the judge stops a runner that hangs and still reports.
JUDGE_GRACE_S = 60.0
MEMORY_RETRY_S = 10.0   # the pause before judging again when the GPU's memory ran out under other users


Progress = Callable[[str], None]


def _load() -> str:
    """The host's load, when it is high enough to matter to the clock checks ("" otherwise)."""
    try:
        load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    except OSError:
        return ""
    return f"load {load:.1f} on {cpus} CPUs: other work shares this host" if load > cpus / 2 else ""


def _run_early(request: JudgeRequest, opts: EvalOptions, early: EarlyJudge | None) -> JudgeOutcome | None:
    """The request judged by the judge started as the command began; None where it cannot serve, or died before
    it judged any config (a judge started cold then decides, as with the warm pool's spares)."""
    spare = early.take(request.timer) if early is not None else None
    if spare is None:
        return None
    outcome = JudgeOutcome.of(spare.run(request.to_json(), opts.timeout_s + JUDGE_GRACE_S))
    return None if outcome.crashed and not outcome.result.correctness else outcome


def _run_judge(request: JudgeRequest, opts: EvalOptions) -> JudgeOutcome:
    if opts.warm:
        return POOL.run(request.to_json(), request.timer, opts.gpu, opts.timeout_s + JUDGE_GRACE_S)
    return JudgeOutcome.of(run_child("engine.pipeline.judge", request.to_json(),
                                     timeout_s=opts.timeout_s + JUDGE_GRACE_S, gpu=opts.gpu))


def evaluate(task: Task, candidate: Candidate, direction: str, options: EvalOptions | None = None,
             progress: Progress | None = None, early: EarlyJudge | None = None) -> EvalReport:
    """`early`: a judge `kbench eval` started as it began (engine/pipeline/early_judge.py), handed the request
    once it is ready; the caller closes it (it is let go here only where it cannot serve)."""
    opts = options or EvalOptions()
    say = progress or (lambda msg: None)
    t0 = time.monotonic()
    task.spec(direction)  # raises a clear KeyError for a missing direction
    if candidate.format == "kernelbench" and direction != "forward":
        raise ValueError("KernelBench ModelNew candidates have a forward direction only")
    if candidate.format in ("kernel-only", "triton"):   # the binding the task's signature generates
        try:
            candidate = materialise(candidate, task, direction)
        except GlueError as exc:
            report = EvalReport(task.name, direction, candidate.source_hash, candidate.format, [], [], {}, {})
            report.verdicts.append(Verdict(Stage.COMPILE, Status.FAIL, str(exc)))
            report.seconds = time.monotonic() - t0
            return report
    report = EvalReport(task.name, direction, candidate.source_hash, candidate.format, [], [], {}, {})
    # the mode decides the configs, trials, flags and precision (what the user named wins); the report says which
    mode = eval_mode.plan(task, direction, opts.mode, opts.configs, opts.timing_configs, opts.trials)
    opts = replace(opts, configs=mode.configs, timing_configs=mode.timing_configs, trials=mode.trials)
    report.mode = mode.to_json()
    report.timing_params = opts.timing_params if opts.timing else None   # said before the build, as the mode

    if opts.integrity and opts.static_gate:  # engine.integrity.static: the sources' reward-hack scan, before the build
        if not gate_static(report, candidate, task, opts.override_static, say, policy=opts.library_policy):
            report.seconds = time.monotonic() - t0
            return report
    say(f"compiling {candidate.format} candidate {candidate.source_hash}")
    base_toolchain = cached_toolchain(opts.cache_root)   # no torch import here: an earlier run's detection
    toolchain = mode.candidate_toolchain(base_toolchain)
    if (wait := expected_wait(candidate, opts.cache_root, toolchain)) is not None:
        say(wait)
    build = builds.build_candidate(candidate, opts.cache_root, toolchain, timeout_s=opts.build_timeout_s)
    report.build = {"seconds": round(build.seconds, 2), "cache_hit": build.cache_hit,
                    **({"steps": dict(build.steps)} if getattr(build, "steps", None) else {})}   # pch, nvcc, import...
    report.phases["build"] = round(build.seconds, 3)
    report.phases["build.cache_hit"] = 1.0 if build.cache_hit else 0.0
    if early is not None:
        report.phases.update(early.phases, **{"start.build_done": early.since_start(time.monotonic())})
    if not build.ok:
        report.verdicts.append(Verdict(Stage.COMPILE, Status.FAIL, build.error or "compilation failed",
                                       {"log": build.log[-8000:]}))
        report.seconds = time.monotonic() - t0
        return report
    said = "cache hit" if build.cache_hit else "compiled"
    if candidate.format == "triton":   # nothing is compiled before a GPU launches it: say what was checked
        said += f" ({TRITON_CHECKED})"
    report.verdicts.append(Verdict(Stage.COMPILE, Status.PASS, said, dict(report.build)))
    if (why := no_gpu_visible(opts.gpu)) is not None:
        # a judge would take seconds to start only to find no GPU: the compile verdict is what this machine gives
        say(f"no CUDA GPU is visible ({why}): compiled only, no judge started")
        report.unmeasured = NO_GPU
        for stage in (Stage.CORRECTNESS, Stage.TIMING):
            report.verdicts.append(Verdict(stage, Status.SKIPPED, verdicts.NO_GPU_REASON, {"no_gpu": why}))
        report.seconds = time.monotonic() - t0
        return report
    # the timing helper is kbench's own: built with kbench's flags whatever the mode
    if not cached(timer := timers.timer_candidate(), opts.cache_root, base_toolchain):
        wait = expected_wait(timer, opts.cache_root, base_toolchain)
        say("building kbench's timing helper once" + (f": {wait}" if wait else ", about 15 s"))
    helper = timers.build_timer(opts.cache_root, base_toolchain)
    request = JudgeRequest(
        task=task.to_json(), direction=direction,
        candidate=candidate_spec(candidate, build, opts.cache_root, toolchain),
        timer=TimerSpec(str(helper.so_path), str(helper.module_name)), result_path="",
        configs=opts.configs, timing_configs=timing_selection(task, opts.timing_configs, opts.configs),
        trials=opts.trials, timing=opts.timing,
        baselines=tuple(opts.baselines), timing_params=opts.timing_params,
        integrity=opts.integrity, deadline_s=opts.timeout_s, gpu=opts.gpu,
        numerics=mode.numerics.to_json() if mode.numerics else None, upstream_draws=mode.upstream_draws,
        float64_opinion=mode.float64_opinion, gpu_keep=opts.gpu_keep)
    if opts.reuse_baselines and opts.timing:
        bkey = key_for(request.task, direction, opts.gpu, request.baselines, jsonable.dump(request.timing_params))
        request = replace(request, session_baselines=SESSION.for_request(bkey))
    disk = None
    if opts.baseline_cache != OFF and opts.timing:
        t = time.monotonic()
        disk = BaselineCache.for_request(opts.cache_root, request, opts.baseline_cache)
        request = replace(request, cached_baselines=disk.read())
        report.phases["baselines.cache_read"] = round(time.monotonic() - t, 3)
    say("checking correctness" + (" and timing" if opts.timing else "") + " (judge + jailed runner)")
    outcome = _run_early(request, opts, early) or _run_judge(request, opts)
    if early is not None:
        early.judged(outcome.result.seconds)
        report.phases.update(early.phases)
        report.phases["judge.early"] = 1.0 if early.handed else 0.0
    if outcome.result.unmeasured:
        # the judge's or the runner's GPU memory ran out while other processes held more of it (judge_memory):
        # once more after a pause, then the candidate stays unmeasured rather than failed
        say(f"{outcome.result.unmeasured}; judging once more in {MEMORY_RETRY_S:.0f} s")
        time.sleep(MEMORY_RETRY_S)
        outcome = _run_judge(request, opts)
    report.phases["judge"] = round(outcome.seconds, 3)
    first_shared = ""
    if (first := contention_sensitive(outcome.result)):
        # The clock checks compare the runner's events with what the judge's clock and the device saw; another
        # process loading this GPU or starving the host's CPUs can make an honest kernel look like one. A
        # forger fails them every time: measure once more, and keep what the second measurement says.
        say(f"re-measuring: {first}")
        first_shared = outcome.result.gpu_shared or ""
        outcome = _run_judge(request, opts)
        report.phases["judge.remeasure"] = round(outcome.seconds, 3)
        report.remeasured = {"first": first, "load": _load(), "again": contention_sensitive(outcome.result)}
    if opts.reuse_baselines and opts.timing:
        SESSION.update(bkey, outcome.result)
    report.phases.update({f"judge.{k}": v for k, v in outcome.result.seconds.items()})
    if outcome.result.warm:
        report.phases["judge.warm"] = 1.0
    roof = verdicts.roofline(outcome.result, task, direction, opts.cache_root, opts.gpu, say) if opts.roofline \
        else None
    verdicts.fill_report(report, task, opts, outcome, roof)
    if opts.integrity and (iv := verdicts.integrity_verdict(outcome.result)) is not None:
        report.verdicts.append(iv)
    for i, v in enumerate(report.verdicts if report.remeasured else []):
        if v.stage in (Stage.TIMING, Stage.INTEGRITY):
            again = report.remeasured["again"] and v.status != Status.PASS
            note = f" (seen on two measurements{'; ' + report.remeasured['load'] if report.remeasured['load'] else ''})"
            report.verdicts[i] = replace(v, reason=v.reason + (note if again else ""),
                                         data={**v.data, "remeasured": report.remeasured})
    if report.remeasured.get("again") and first_shared and (shared := outcome.result.gpu_shared):
        # failed twice, with other processes running work on this GPU both times: not a verdict on the kernel
        report.unmeasured = shared_gpu_reason(first_shared, shared)
        report.verdicts = [replace(v, status=Status.SKIPPED, reason=report.unmeasured)
                           if v.stage in (Stage.TIMING, Stage.INTEGRITY) else v for v in report.verdicts]
        for row in report.rows:   # times it cannot vouch for make no speedup (so no best, no parent)
            row.candidate_ms = row.candidate_iqr_ms = row.speedup_eager = row.speedup_compile = None
    if disk is not None:
        t = time.monotonic()
        report.baselines = disk.keep(outcome.result, request.session_baselines, trusted=not report.unmeasured)
        report.phases["baselines.cache_write"] = round(time.monotonic() - t, 3)
        report.phases["baselines.cached"] = float(sum(1 for r in report.rows if r.baselines == "cache"))
    if opts.profile:
        profile_after(report, task, candidate, direction, opts, say)
    report.seconds = time.monotonic() - t0
    return report


def profile_after(report: EvalReport, task: Task, candidate: Candidate, direction: str, opts: EvalOptions,
                  progress: Progress | None = None) -> bool:
    """The profile stage (ncu + torch profiler, engine/pipeline/profiling.py) on a candidate that passed with its
    timing: its verdict appended to `report`, its seconds in the phases. Called last by evaluate() where
    `opts.profile`, or by a caller that has shown the verdict first (`kbench eval --profile`). False where the
    candidate is not one to profile (nothing was added)."""
    if not (opts.timing and report.passed and (tv := report.verdict(Stage.TIMING)) is not None
            and tv.status == Status.PASS):
        return False
    (progress or (lambda msg: None))("profiling (ncu + torch profiler)")
    t = time.monotonic()
    report.verdicts.append(profiling.profile_stage(task, candidate, direction, opts, tv.data.get("peaks")))
    report.phases["profile"] = round(time.monotonic() - t, 3)
    return True
