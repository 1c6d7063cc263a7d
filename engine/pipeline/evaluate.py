"""Evaluate one candidate on one task direction: the static gate, the build, then the judge.

This is the parent side (the CLI, the app, an executor's worker). It never imports the candidate: the build
runs in jailed compiler processes, and everything that executes candidate code runs in the jailed runner
that the judge (engine/pipeline/judge.py, a trusted child process) starts and reads. Verdict policy lives in
engine/pipeline/verdicts.py; what the verdicts amount to (EvalReport.passed) is engine.verdict.judge's rule.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine.candidates import Candidate
from engine.harness.stats import geomean
from engine.pipeline.types import NO_GPU, CandidateSpec, JudgeRequest, TimerSpec, TimingParams  # noqa: F401 - NO_GPU re-exported
from engine.procs import run_child
from engine.pipeline.contention import contention_sensitive, shared_gpu_reason
from engine.tasks.model import Task, timing_selection
from engine.verdict import Judgement, Stage, Status, Verdict, effective, judge_verdicts
from engine.config import cache_root

if TYPE_CHECKING:
    from engine.harness.build_result import BuildResult
    from engine.harness.toolchain import Toolchain

# The parent's grace beyond the judge's own deadline: the judge stops a runner that hangs and still reports.
JUDGE_GRACE_S = 60.0
MEMORY_RETRY_S = 10.0   # the pause before judging again when the judge's GPU memory ran out


def default_cache_root() -> Path:
    return cache_root()


@dataclass
class EvalOptions:
    configs: list[str] | None = None       # None: every config
    # Time only these (correctness still covers `configs`); ["all"]: every config; None: the task's default,
    # `bench` and the configs tagged `timed` (engine.tasks.model.timing_selection)
    timing_configs: list[str] | None = None
    trials: int = 2
    timing: bool = True
    baselines: tuple[str, ...] = ("eager", "compile")
    timeout_s: float = 600.0
    build_timeout_s: float = 600.0
    gpu: int | None = None
    cache_root: Path = field(default_factory=default_cache_root)
    timing_options: dict[str, Any] = field(default_factory=dict)
    roofline: bool = True                   # place results on the measured roofline (measured once per GPU)
    integrity: bool = True                  # static reward-hack scan before compile, the judge's integrity verdict
    override_static: bool = False           # a person's override: go on to compile despite a static `fail`
    library_policy: str | None = None       # "pure" | "engineering"; None: the task's, else "pure" (engine.integrity.policy)
    # After timing, for candidates that pass: the `profile` stage (engine/profile), whose summary feeds the
    # mutate and repair prompts. `skipped` with the reason where ncu is missing or not permitted.
    profile: bool = True
    # Keep a spare judge (its runner jailed, CUDA up) for the next evaluation on this GPU: for long-lived
    # evaluating threads (an executor's GPU worker); engine/pipeline/warm.py.
    warm: bool = False
    # Reuse this session's eager / torch.compile / null-loop timings of a config (engine/pipeline/baselines.py)
    # after a quick re-timing agrees, instead of measuring them for every candidate.
    reuse_baselines: bool = False


@dataclass
class ConfigRow:
    name: str
    correct: bool | None = None
    reason: str = ""
    max_abs_err: float | None = None
    candidate_ms: float | None = None
    candidate_iqr_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    hidden_work: bool = False
    floor_ms: float | None = None          # physical floor from the cost model and measured peaks
    roofline_fraction: float | None = None
    baselines: str = ""                    # "measured" by this evaluation, or reused from the "session"
    timed: bool = True                     # chosen for timing (engine.tasks.model.timing_selection)


@dataclass
class EvalReport:
    task: str
    direction: str
    candidate: str           # source hash
    format: str
    verdicts: list[Verdict]
    rows: list[ConfigRow]
    device: dict[str, Any]
    build: dict[str, Any]
    seconds: float = 0.0
    # Set when this machine could not check or time at all (no GPU visible): the kernel was not judged, so
    # an evolution loop leaves the candidate pending for a machine that can (EvalOutcome.infra_error).
    unmeasured: str = ""
    jail: dict[str, Any] = field(default_factory=dict)   # the runner's jail (engine.jail.JailReport.to_json())
    traces: dict[str, str] = field(default_factory=dict)  # the judge's own failures (tracebacks), if any
    phases: dict[str, float] = field(default_factory=dict)  # seconds by phase: build, judge (start, reference, ...)
    # Set when the judge measured twice because the first measurement failed a contention-sensitive check
    # (contention_sensitive): what the first one saw, the host's load, what the second saw ("" if clean).
    remeasured: dict[str, str] = field(default_factory=dict)
    # How the timed configs (ConfigRow.timed) were chosen: "default" (the task's `bench` and `timed` configs),
    # "all", or "named" (--time-config / [eval] timing_configs); "" where nothing was to be timed.
    timed_by: str = ""

    @property
    def judgement(self) -> Judgement:
        """engine.verdict.judge over this report's verdicts and its geomean speedup (the same rule as a
        workspace candidate's CandidateStatus.judgement)."""
        return judge_verdicts(self.verdicts, self.geomean_speedup_eager)

    @property
    def passed(self) -> bool:
        return self.judgement.passed

    def verdict(self, stage: str) -> Verdict | None:
        """The stage's effective verdict: its last (the one `judgement` reads), or None."""
        return effective(self.verdicts, stage)

    @property
    def geomean_speedup_eager(self) -> float | None:
        return geomean(r.speedup_eager for r in self.rows)

    @property
    def geomean_speedup_compile(self) -> float | None:
        return geomean(r.speedup_compile for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task, "direction": self.direction, "candidate": self.candidate, "format": self.format,
            "passed": self.passed, "why_not_passed": self.judgement.why_not_passed, "verdicts": [v.to_json() for v in self.verdicts],
            "configs": [r.__dict__ for r in self.rows], "device": self.device, "build": self.build,
            "geomean_speedup_eager": self.geomean_speedup_eager,
            "geomean_speedup_compile": self.geomean_speedup_compile, "seconds": round(self.seconds, 2),
            "jail": self.jail, "phases": self.phases, **({"traces": self.traces} if self.traces else {}),
            **({"remeasured": self.remeasured} if self.remeasured else {}),
            **({"timed_by": self.timed_by} if self.timed_by else {}),
        }


Progress = Callable[[str], None]


def _load() -> str:
    """The host's load, when it is high enough to matter to the clock checks ("" otherwise)."""
    try:
        load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    except OSError:
        return ""
    return f"load {load:.1f} on {cpus} CPUs: other work shares this host" if load > cpus / 2 else ""


def _run_judge(request: JudgeRequest, opts: EvalOptions) -> Any:
    if opts.warm:
        from engine.pipeline.warm import POOL
        return POOL.run(request.to_json(), request.timer, opts.gpu, opts.timeout_s + JUDGE_GRACE_S)
    return run_child("engine.pipeline.judge", request.to_json(), timeout_s=opts.timeout_s + JUDGE_GRACE_S,
                     gpu=opts.gpu)


def candidate_spec(candidate: Candidate, build: BuildResult, cache_root: Path, toolchain: Toolchain) -> CandidateSpec:
    """What the runner loads: the built .so, or the KernelBench .py and its load_inline build folder."""
    from engine.harness.build import kernelbench_extensions_dir
    if candidate.format == "kernelbench":
        src_dir = candidate.write_to(cache_root / "candidates" / candidate.source_hash)
        return CandidateSpec(candidate.format, f"kb_modelnew_{candidate.source_hash}",
                             py_path=str(src_dir / candidate.main_file),
                             torch_extensions=str(kernelbench_extensions_dir(cache_root, candidate)))
    return CandidateSpec(candidate.format, build.module_name, so_path=str(build.so_path))


def evaluate(task: Task, candidate: Candidate, direction: str, options: EvalOptions | None = None,
             progress: Progress | None = None) -> EvalReport:
    from engine.harness.build import build_candidate
    from engine.harness.toolchain import detect as detect_toolchain
    from engine.pipeline.timer import build_timer
    from engine.pipeline.verdicts import apply_roofline, fill_report, integrity_verdict

    opts = options or EvalOptions()
    say = progress or (lambda msg: None)
    t0 = time.monotonic()
    task.spec(direction)  # raises a clear KeyError for a missing direction
    if candidate.format == "kernelbench" and direction != "forward":
        raise ValueError("KernelBench ModelNew candidates have a forward direction only")
    if candidate.format == "kernel-only":   # kernel.cu alone: the binding the task's signature generates
        from engine.tasks.glue import materialise
        from engine.tasks.glue_abi import GlueError
        try:
            candidate = materialise(candidate, task, direction)
        except GlueError as exc:
            report = EvalReport(task.name, direction, candidate.source_hash, candidate.format, [], [], {}, {})
            report.verdicts.append(Verdict(Stage.COMPILE, Status.FAIL, str(exc)))
            report.seconds = time.monotonic() - t0
            return report
    report = EvalReport(task.name, direction, candidate.source_hash, candidate.format, [], [], {}, {})

    if opts.integrity:  # engine.integrity.static: reward-hack scan of the sources, before any build or GPU time
        from engine.integrity.static import gate_static
        if not gate_static(report, candidate, task, opts.override_static, say, policy=opts.library_policy):
            report.seconds = time.monotonic() - t0
            return report
    say(f"compiling {candidate.format} candidate {candidate.source_hash}")
    toolchain = detect_toolchain()
    build = build_candidate(candidate, opts.cache_root, toolchain, timeout_s=opts.build_timeout_s)
    report.build = {"seconds": round(build.seconds, 2), "cache_hit": build.cache_hit}
    report.phases["build"] = round(build.seconds, 3)
    if not build.ok:
        report.verdicts.append(Verdict(Stage.COMPILE, Status.FAIL, build.error or "compilation failed",
                                       {"log": build.log[-8000:]}))
        report.seconds = time.monotonic() - t0
        return report
    report.verdicts.append(Verdict(Stage.COMPILE, Status.PASS, "cache hit" if build.cache_hit else "compiled",
                                   dict(report.build)))
    timer = build_timer(opts.cache_root, toolchain)
    request = JudgeRequest(
        task=task.to_json(), direction=direction,
        candidate=candidate_spec(candidate, build, opts.cache_root, toolchain),
        timer=TimerSpec(str(timer.so_path), str(timer.module_name)), result_path="",
        configs=opts.configs, timing_configs=timing_selection(task, opts.timing_configs, opts.configs),
        trials=opts.trials, timing=opts.timing,
        baselines=tuple(opts.baselines), timing_params=TimingParams.from_options(opts.timing_options),
        integrity=opts.integrity, deadline_s=opts.timeout_s, gpu=opts.gpu)
    if opts.reuse_baselines and opts.timing:
        from engine.pipeline.baselines import SESSION, key_for
        bkey = key_for(request.task, direction, opts.gpu, request.baselines, request.to_json()["timing_params"])
        request = replace(request, session_baselines=SESSION.for_request(bkey))
    say("checking correctness" + (" and timing" if opts.timing else "") + " (judge + jailed runner)")
    outcome = _run_judge(request, opts)
    if outcome.result.get("unmeasured"):
        # the judge's own GPU memory ran out (another process holds the GPU's memory): once more after a pause,
        # then the candidate stays unmeasured rather than failed
        say(f"{outcome.result['unmeasured']}; judging once more in {MEMORY_RETRY_S:.0f} s")
        time.sleep(MEMORY_RETRY_S)
        outcome = _run_judge(request, opts)
    report.phases["judge"] = round(outcome.seconds, 3)
    first_shared = ""
    if (first := contention_sensitive(outcome.result)):
        # The clock checks compare the runner's events with what the judge's clock and the device saw; another
        # process loading this GPU or starving the host's CPUs can make an honest kernel look like one. A
        # forger fails them every time: measure once more, and keep what the second measurement says.
        say(f"re-measuring: {first}")
        first_shared = str(outcome.result.get("gpu_shared") or "")
        outcome = _run_judge(request, opts)
        report.phases["judge.remeasure"] = round(outcome.seconds, 3)
        report.remeasured = {"first": first, "load": _load(), "again": contention_sensitive(outcome.result)}
    if opts.reuse_baselines and opts.timing:
        SESSION.update(bkey, outcome.result)
    report.phases.update({f"judge.{k}": v for k, v in (outcome.result.get("seconds") or {}).items()})
    if outcome.result.get("warm"):
        report.phases["judge.warm"] = 1.0
    if opts.roofline:
        apply_roofline(outcome.result, task, direction, opts.cache_root, opts.gpu, say)
    fill_report(report, task, opts, outcome)
    if opts.integrity and (iv := integrity_verdict(outcome.result)) is not None:
        report.verdicts.append(iv)
    for i, v in enumerate(report.verdicts if report.remeasured else []):
        if v.stage in (Stage.TIMING, Stage.INTEGRITY):
            again = report.remeasured["again"] and v.status != Status.PASS
            note = f" (seen on two measurements{'; ' + report.remeasured['load'] if report.remeasured['load'] else ''})"
            report.verdicts[i] = replace(v, reason=v.reason + (note if again else ""),
                                         data={**v.data, "remeasured": report.remeasured})
    if report.remeasured.get("again") and first_shared and (shared := outcome.result.get("gpu_shared")):
        # failed twice, with other processes running work on this GPU both times: not a verdict on the kernel
        report.unmeasured = shared_gpu_reason(first_shared, str(shared))
        report.verdicts = [replace(v, status=Status.SKIPPED, reason=report.unmeasured)
                           if v.stage in (Stage.TIMING, Stage.INTEGRITY) else v for v in report.verdicts]
        for row in report.rows:   # times it cannot vouch for make no speedup (so no best, no parent)
            row.candidate_ms = row.candidate_iqr_ms = row.speedup_eager = row.speedup_compile = None
    if opts.profile and opts.timing and report.passed and (tv := report.verdict(Stage.TIMING)) is not None \
            and tv.status == Status.PASS:
        say("profiling (ncu + torch profiler)")
        from engine.pipeline.profiling import profile_stage
        t = time.monotonic()
        report.verdicts.append(profile_stage(task, candidate, direction, opts, outcome.result.get("peaks")))
        report.phases["profile"] = round(time.monotonic() - t, 3)
    report.seconds = time.monotonic() - t0
    return report
