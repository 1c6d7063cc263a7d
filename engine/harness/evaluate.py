"""Evaluate one candidate on one task direction: compile, then a sandboxed check-and-time run.

This is the parent side. It never imports the candidate: the build happens in compiler subprocesses
and everything that executes candidate code happens in `engine.harness.child`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.candidates import Candidate
from engine.harness.child import NO_GPU  # noqa: F401 - EvalReport.unmeasured when the sandbox found no GPU
from engine.harness.sandbox import ChildOutcome, run_child
from engine.harness.stats import geomean
from engine.tasks.model import Task
from engine.verdict import Status, Verdict


def default_cache_root() -> Path:
    base = os.environ.get("KBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kbench")
    return Path(base)


@dataclass
class EvalOptions:
    configs: list[str] | None = None       # None: every config
    timing_configs: list[str] | None = None  # time only these (correctness still covers `configs`)
    trials: int = 2
    timing: bool = True
    baselines: tuple[str, ...] = ("eager", "compile")
    timeout_s: float = 600.0
    build_timeout_s: float = 600.0
    gpu: int | None = None
    cache_root: Path = field(default_factory=default_cache_root)
    timing_options: dict[str, Any] = field(default_factory=dict)
    roofline: bool = True                   # place results on the measured roofline (measured once per GPU)
    integrity: bool = True                  # static reward-hack scan before compile, dynamic checks in the child
    override_static: bool = False           # a person's override: go on to compile despite a static `fail`
    # After timing, for candidates that pass: the `profile` stage (engine/profile), whose summary feeds the
    # mutate and repair prompts. `skipped` with the reason where ncu is missing or not permitted.
    profile: bool = True


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

    @property
    def passed(self) -> bool:
        by_stage = {v.stage: v for v in self.verdicts}
        return all(by_stage.get(s) is not None and by_stage[s].status == Status.PASS
                   for s in ("compile", "correctness")) and not any(
            v.stage == "integrity" and v.status == Status.FAIL for v in self.verdicts) and not any(
            v.stage == "static" and v.status == Status.FAIL and not v.data.get("overridden") for v in self.verdicts)

    def verdict(self, stage: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.stage == stage), None)

    @property
    def geomean_speedup_eager(self) -> float | None:
        return geomean(r.speedup_eager for r in self.rows)

    @property
    def geomean_speedup_compile(self) -> float | None:
        return geomean(r.speedup_compile for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task, "direction": self.direction, "candidate": self.candidate, "format": self.format,
            "passed": self.passed, "verdicts": [v.to_json() for v in self.verdicts],
            "configs": [r.__dict__ for r in self.rows], "device": self.device, "build": self.build,
            "geomean_speedup_eager": self.geomean_speedup_eager,
            "geomean_speedup_compile": self.geomean_speedup_compile, "seconds": round(self.seconds, 2),
        }


Progress = Callable[[str], None]



def evaluate(task: Task, candidate: Candidate, direction: str, options: EvalOptions | None = None,
             progress: Progress | None = None) -> EvalReport:
    from engine.harness.build import build_candidate, kernelbench_extensions_dir
    from engine.harness.toolchain import detect as detect_toolchain

    opts = options or EvalOptions()
    say = progress or (lambda msg: None)
    t0 = time.monotonic()
    task.spec(direction)  # raises a clear KeyError for a missing direction
    if candidate.format == "kernelbench" and direction != "forward":
        raise ValueError("KernelBench ModelNew candidates have a forward direction only")
    report = EvalReport(task.name, direction, candidate.source_hash, candidate.format, [], [], {}, {})

    if opts.integrity:  # engine.integrity.static: reward-hack scan of the sources, before any build or GPU time
        from engine.integrity.static import gate_static
        if not gate_static(report, candidate, task, opts.override_static, say):
            report.seconds = time.monotonic() - t0
            return report
    say(f"compiling {candidate.format} candidate {candidate.source_hash}")
    toolchain = detect_toolchain()
    build = build_candidate(candidate, opts.cache_root, toolchain, timeout_s=opts.build_timeout_s)
    report.build = {"seconds": round(build.seconds, 2), "cache_hit": build.cache_hit}
    if not build.ok:
        report.verdicts.append(Verdict("compile", Status.FAIL, build.error or "compilation failed",
                                       {"log": build.log[-8000:]}))
        report.seconds = time.monotonic() - t0
        return report
    report.verdicts.append(Verdict("compile", Status.PASS, "cache hit" if build.cache_hit else "compiled",
                                   dict(report.build)))

    spec: dict[str, Any] = {"format": candidate.format, "module_name": build.module_name,
                            "so_path": str(build.so_path) if build.so_path else None}
    extra_env: dict[str, str] = {}
    if candidate.format == "kernelbench":
        src_dir = candidate.write_to(opts.cache_root / "candidates" / candidate.source_hash)
        spec["py_path"] = str(src_dir / candidate.main_file)
        spec["module_name"] = f"kb_modelnew_{candidate.source_hash}"
        extra_env["TORCH_EXTENSIONS_DIR"] = str(kernelbench_extensions_dir(opts.cache_root, candidate))
        extra_env["TORCH_CUDA_ARCH_LIST"] = ";".join(toolchain.archs)  # as its compile stage built it

    request = {"task": task.to_json(), "direction": direction, "candidate": spec, "configs": opts.configs,
               "trials": opts.trials, "timing": opts.timing, "timing_configs": opts.timing_configs, "baselines": list(opts.baselines),
               "timing_options": opts.timing_options, "integrity": opts.integrity}
    say("checking correctness" + (" and timing" if opts.timing else "") + " in the sandbox")
    outcome = run_child("engine.harness.child", request, timeout_s=opts.timeout_s, gpu=opts.gpu,
                        extra_env=extra_env)
    if opts.roofline and report_needs_roofline(outcome.result):
        say("placing results on the roofline")
        _apply_roofline(outcome.result, task, direction, opts)
    _fill_from_outcome(report, task, opts, outcome)
    from engine.integrity.dynamic import integrity_verdict
    if (iv := integrity_verdict(outcome.result)) is not None:
        report.verdicts.append(iv)
    if opts.profile and opts.timing and report.passed and (tv := report.verdict("timing")) is not None \
            and tv.status == Status.PASS:
        say("profiling (ncu + torch profiler)")
        from engine.profile.runner import profile_stage
        report.verdicts.append(profile_stage(task, candidate, direction, opts, outcome.result.get("peaks")))
    report.seconds = time.monotonic() - t0
    return report


def report_needs_roofline(result: dict[str, Any]) -> bool:
    return bool(result.get("timing")) and bool((result.get("device") or {}).get("gpu"))


def _apply_roofline(result: dict[str, Any], task: Task, direction: str, opts: EvalOptions) -> None:
    """Add floor_ms and roofline_fraction to each timed config (in the child's result dict)."""
    from engine.harness.roofline import get_peaks

    try:
        peaks = get_peaks(opts.cache_root, result["device"]["gpu"], device=opts.gpu)
    except RuntimeError as exc:
        result["roofline_error"] = str(exc)
        return
    result["peaks"] = {"gpu": peaks.gpu, "copy_gbps": peaks.copy_gbps, "fp32_tflops": peaks.fp32_tflops,
                       "tf32_tflops": peaks.tf32_tflops}
    costs = {c.name: c.cost.get(direction) for c in task.configs}
    for name, row in result["timing"].items():
        cost = costs.get(name)
        if cost is not None:
            row["floor_ms"] = peaks.floor_ms(cost)
            row["roofline_fraction"] = peaks.fraction(cost, row["candidate"]["median_ms"])
            row["bound"] = peaks.bound(cost)


def _fill_from_outcome(report: EvalReport, task: Task, opts: EvalOptions, outcome: ChildOutcome) -> None:
    res = outcome.result
    report.device = res.get("device") or {}
    correctness: dict[str, Any] = res.get("correctness") or {}
    timing: dict[str, Any] = res.get("timing") or {}
    names = [c.name for c in task.configs if not opts.configs or c.name in opts.configs]
    for name in names:
        row = ConfigRow(name)
        if name in correctness:
            c = correctness[name]
            row.correct, row.reason, row.max_abs_err = bool(c["ok"]), c.get("reason", ""), c.get("max_abs_err")
        if name in timing:
            t = timing[name]
            row.candidate_ms = t["candidate"]["median_ms"]
            row.candidate_iqr_ms = t["candidate"]["iqr_ms"]
            row.eager_ms = (t.get("eager") or {}).get("median_ms")
            row.compile_ms = (t.get("compile") or {}).get("median_ms")
            row.speedup_eager, row.speedup_compile = t.get("speedup_eager"), t.get("speedup_compile")
            row.hidden_work = bool(t.get("hidden_work"))
            row.floor_ms, row.roofline_fraction = t.get("floor_ms"), t.get("roofline_fraction")
        report.rows.append(row)

    error = res.get("error")
    if error and "no CUDA GPU" in error:
        reason = "no CUDA GPU is visible: correctness and timing need a GPU (compiled fine)"
        report.unmeasured = NO_GPU
        report.verdicts.append(Verdict("correctness", Status.SKIPPED, reason))
        report.verdicts.append(Verdict("timing", Status.SKIPPED, reason))
        return
    failed = [r for r in report.rows if r.correct is False]
    if outcome.crashed or error:
        cause = error or outcome.describe_crash()
        if outcome.crashed and error:
            cause = f"{error} ({outcome.describe_crash()})"
        stage = (res.get("progress") or {}).get("stage")
        if stage == "timing" and report.rows and all(r.correct for r in report.rows):
            report.verdicts.append(Verdict("correctness", Status.PASS, "all configs within tolerance",
                                           {"configs": _correctness_data(report)}))
            report.verdicts.append(Verdict("timing", Status.FAIL, cause))
            return
        running = (res.get("progress") or {}).get("config")
        for r in report.rows:
            if r.name == running and r.correct is None:
                r.correct, r.reason = False, cause
        report.verdicts.append(Verdict("correctness", Status.FAIL, cause, {"configs": _correctness_data(report)}))
        report.verdicts.append(Verdict("timing", Status.SKIPPED, "correctness failed"))
        return
    if failed:
        first = failed[0]
        report.verdicts.append(Verdict(
            "correctness", Status.FAIL,
            f"{len(failed)} of {len(report.rows)} configs fail; {first.name}: {first.reason}",
            {"configs": _correctness_data(report)}))
        report.verdicts.append(Verdict("timing", Status.SKIPPED, "correctness failed"))
        return
    report.verdicts.append(Verdict("correctness", Status.PASS,
                                   f"{len(report.rows)} configs x {opts.trials} trials within tolerance",
                                   {"configs": _correctness_data(report)}))
    if not opts.timing:
        report.verdicts.append(Verdict("timing", Status.SKIPPED, "timing not requested"))
        return
    data = {"configs": {r.name: {"candidate_ms": r.candidate_ms, "iqr_ms": r.candidate_iqr_ms,
                                 "eager_ms": r.eager_ms, "compile_ms": r.compile_ms,
                                 "speedup_eager": r.speedup_eager, "speedup_compile": r.speedup_compile,
                                 "floor_ms": r.floor_ms, "roofline_fraction": r.roofline_fraction}
                        for r in report.rows},
            "peaks": res.get("peaks"),
            "geomean_speedup_eager": report.geomean_speedup_eager,
            "geomean_speedup_compile": report.geomean_speedup_compile, "device": report.device}
    hidden = [r.name for r in report.rows if r.hidden_work]
    if hidden:
        report.verdicts.append(Verdict(
            "timing", Status.SUSPICIOUS,
            f"work continues after the stream's end event on {', '.join(hidden)} (another stream or thread?)",
            data))
        return
    from engine.harness.roofline import FLOOR_MARGIN
    below = [r for r in report.rows if r.floor_ms and r.candidate_ms is not None
             and r.candidate_ms < FLOOR_MARGIN * r.floor_ms]
    if below:
        r = below[0]
        report.verdicts.append(Verdict(
            "timing", Status.SUSPICIOUS,
            f"{r.name}: {r.candidate_ms:.4f} ms is below the physical floor {r.floor_ms:.4f} ms "
            "(cost model / measured peaks): work was skipped or the timer was fooled; a person must confirm",
            data))
        return
    g = report.geomean_speedup_eager
    report.verdicts.append(Verdict("timing", Status.PASS,
                                   f"geomean speedup vs eager {g:.2f}x" if g else "timed", data))


def _correctness_data(report: EvalReport) -> dict[str, Any]:
    return {r.name: {"ok": r.correct, "reason": r.reason, "max_abs_err": r.max_abs_err} for r in report.rows}
