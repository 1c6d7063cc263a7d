"""The real work an executor's workers do: compile a candidate into the build cache (a CPU worker process),
check and time a built one, or profile it (a GPU worker), and the compile verdict of a build.

Both executors run these (engine.evolve.local_executor on this machine, engine.evolve.ray.tasks on a
cluster). The harness and the pipeline are imported at the top: a few milliseconds, and the app, which imports
this package at start-up, imports them anyway. evaluate() and build_candidate are looked up on their modules
when called, so that tests which replace them there (tests/pipeline/timing_fakes.py) reach these paths too.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, replace
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

from engine import procs
from engine.candidates import Candidate
from engine.evolve.outcome import EvalOutcome
from engine.harness import nvml
from engine.harness.build import stage as harness_build
from engine.harness.build.result import BuildSummary
from engine.harness.roofline import load_peaks
from engine.harness.toolchain import Toolchain, ToolchainError, detect
from engine.pipeline import evaluate as pipeline_evaluate
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.profiling import profile_stage
from engine.tasks.model import Task
from engine.verdict import Stage, Status, Verdict


def cached_peaks(cache_root: str | Path, device: dict[str, Any] | None) -> dict[str, Any] | None:
    """The roofline peaks of the evaluation's GPU model, as the judge's result carries them (measured and cached
    by that evaluation), or None."""
    name = (device or {}).get("gpu")
    if not name:
        return None
    peaks = load_peaks(Path(cache_root), str(name))
    return asdict(peaks) if peaks is not None else None


def default_profile(task: Task, candidate: Candidate, direction: str, options: EvalOptions,
                    device: dict[str, Any] | None = None) -> Verdict:
    """The profile stage alone (engine.pipeline.profiling.profile_stage) for a candidate evaluated before: its
    build is a cache hit, the peaks those its evaluation cached. Never raises."""
    try:
        peaks = cached_peaks(options.cache_root, device)
    except Exception:  # noqa: BLE001 - no peaks: the summary goes without fractions of peak
        peaks = None
    return profile_stage(task, candidate, direction, options, peaks)


def visible_gpus() -> list[int]:
    """GPU indices to pin workers to: CUDA_VISIBLE_DEVICES when set (numeric ids), else every GPU NVML counts
    (none where NVML is unavailable)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [x.strip() for x in env.split(",") if x.strip()]
        if all(re.fullmatch(r"\d+", x) for x in ids):
            return [int(x) for x in ids]
        return list(range(len(ids)))
    return list(range(nvml.gpu_count()))


_TOOLCHAIN: Toolchain | None = None    # detected once per worker process


def default_build(candidate_json: dict[str, Any], cache_root: str, timeout_s: float = 600.0) -> dict[str, Any]:
    """Compile one candidate into the cache (runs in a CPU worker process). Returns a BuildSummary's JSON."""
    global _TOOLCHAIN
    cand = Candidate.from_json(candidate_json)
    t0 = time.monotonic()
    try:
        if _TOOLCHAIN is None:
            _TOOLCHAIN = detect()
    except ToolchainError as exc:
        return BuildSummary(ok=False, error=str(exc), seconds=time.monotonic() - t0).to_json()
    built = harness_build.build_candidate(cand, Path(cache_root), _TOOLCHAIN, timeout_s=timeout_s)
    return BuildSummary.of(built).to_json()


def default_gpu(task: Task, candidate: Candidate, direction: str, options: EvalOptions, *,
                warm: bool = True) -> EvalOutcome:
    """The sandboxed check + time of an already-built candidate (evaluate() finds the build in the cache).

    The static integrity stage belongs to the loop (engine.evolve.checks), which runs it once, before a candidate
    is submitted, and honours a person's override there: evaluate() leaves it out (`static_gate`), so it neither
    scans again nor writes a second `static` verdict that could overrule that override in the notes. `warm=False`
    is the behaviour before warm judges (a cold judge measuring every baseline), for benchmarks."""
    if hasattr(options, "static_gate"):
        # a spare judge waits for the worker's next candidate (engine/pipeline/warm.py), and the session's
        # baselines of each config are reused (re-checked, re-measured on drift: engine/pipeline/baselines.py)
        options = replace(options, static_gate=False, warm=warm, reuse_baselines=warm)
    return EvalOutcome.from_report(pipeline_evaluate.evaluate(task, candidate, direction, options))


def compile_verdict(build: BuildSummary) -> Verdict:
    """The `compile` verdict of a build (default_build's, or a stand-in's)."""
    if build.ok:
        return Verdict(Stage.COMPILE, Status.PASS, "cache hit" if build.cache_hit else "compiled",
                       {"seconds": round(float(build.seconds or 0.0), 2), "cache_hit": build.cache_hit,
                        "steps": build.steps})
    return Verdict(Stage.COMPILE, Status.FAIL, build.error or "compilation failed", {"log": build.log[-8000:]})


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker against the real stderr. The tracker hands sys.stderr's fd to
    its helper process; inside a Textual app sys.stderr is a capture object whose fileno() is -1, and the
    spawn then fails ("bad value(s) in fds_to_keep"), so a process pool could not be made from the app."""
    try:
        usable = sys.stderr is not None and sys.stderr.fileno() >= 0
    except (AttributeError, OSError, ValueError):
        usable = True          # no fileno at all: the tracker skips it by itself
    if usable or sys.__stderr__ is None:
        return
    saved = sys.stderr
    sys.stderr = sys.__stderr__
    try:
        resource_tracker.ensure_running()
    finally:
        sys.stderr = saved


def ignore_sigint() -> None:
    """A build worker's start: it leaves Ctrl-C to the parent (which stops the loop; compilers run in their own
    sessions), and it dies with the parent: multiprocessing's workers wait on a queue whose other end they hold
    themselves, so a killed kbench would leave them waiting for ever (half a GB each). A watchdog thread ends the
    worker once its parent is gone; the compilers it started end with it (their supervisors' parent-death
    signal kills each step's tree)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    procs.exit_with_parent()


def call_build(build_fn: Callable[..., dict[str, Any]], cand: Candidate, options: EvalOptions) -> BuildSummary:
    """`build_fn` in this thread (the sequential mode); its exception is a failed build."""
    try:
        return BuildSummary.from_json(
            build_fn(cand.to_json(), str(options.cache_root), float(getattr(options, "build_timeout_s", 600.0))))
    except Exception as exc:  # noqa: BLE001
        return BuildSummary(ok=False, error=f"build failed: {exc!r}", log=traceback.format_exc())

