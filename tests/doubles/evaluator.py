"""The fake evaluator: deterministic results from the source text, no compiler, no GPU.

A test double of the evaluation seam (engine.service.wiring.EvaluatorFactory and engine.evolve.outcome's
Evaluator protocol). In-process tests hand `FakeEvaluator` (or `fake_evaluator_factory`) to a session service
or the app's Backend; tests that run kbench in a child process run `python -m tests.doubles.kbench`, which
puts it at that seam (KBENCH_FAKE_EVAL_DELAY, KBENCH_FAKE_BUILD_S, KBENCH_FAKE_GPU_S, KBENCH_FAKE_NO_GPU and
KBENCH_FAKE_EVAL_HOLD_AFTER steer it there); the executors' tests pass `fake_build` / `fake_gpu` as their
build and GPU functions (Ray's workers get this module by value: ray.cloudpickle.register_pickle_by_value),
and `scripts/bench_evolve.py --fake` runs the executors on them for a CPU dry run.

Markers in a candidate's source steer it: `FAIL_COMPILE`, `FAIL_CORRECT`, `FAKE_SPEEDUP=x` (the fault tests'
`FAKE_PIDFILE=` / `FAKE_GPU_SLEEP=` markers are read by tests/doubles/faults.py's fault_gpu, not here).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from engine.candidates import Candidate
from engine.config.env import env_flag, env_float, env_int
from engine.evolve.outcome import (
    PROFILE_STAGE,
    EvalOutcome,
    StageCallback,
    needs_profile,
)
from engine.harness.build.result import BuildSummary
from engine.gpu_wait import NO_GPU
from engine.tasks.model import Task, timing_selection
from engine.verdict import Stage, Status, Verdict
from engine.workspace.note_entries import ConfigTiming

if TYPE_CHECKING:
    from engine.config.sections import Config
    from engine.pipeline.eval_types import EvalOptions
    from engine.service.wiring import EvaluatorFactory


def fake_speedup(candidate: Candidate) -> float:
    """Deterministic pseudo speedup in [0.5, 2.5) from the source text (or `FAKE_SPEEDUP=x` in it)."""
    text = "".join(candidate.files[k] for k in sorted(candidate.files))
    m = re.search(r"FAKE_SPEEDUP=([0-9.]+)", text)
    if m:
        return float(m.group(1))
    h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return 0.5 + 2.0 * (h / 0xFFFFFFFF)


def fake_build(candidate_json: dict[str, Any], cache_root: str, timeout_s: float = 0.0,
               sleep_s: float = 0.0) -> dict[str, Any]:
    """A compile stand-in: sleeps, fails on `FAIL_COMPILE` in the source. Picklable (module level)."""
    t0 = time.monotonic()
    cand = Candidate.from_json(candidate_json)
    delay = env_float("KBENCH_FAKE_BUILD_S", default=sleep_s)
    if delay:
        time.sleep(delay)
    text = "".join(cand.files.values())
    if "FAIL_COMPILE" in text:
        return BuildSummary(ok=False, error="kernel.cu:1: error: FAIL_COMPILE marker", log="fake log",
                            seconds=time.monotonic() - t0).to_json()
    return BuildSummary(ok=True, seconds=time.monotonic() - t0).to_json()


def fake_result(task: Task | None, candidate: Candidate, timing_configs: list[str] | None = None) -> EvalOutcome:
    """Correctness fails on `FAIL_CORRECT` in the source; otherwise timed with fake_speedup on the configs the
    real evaluation times (engine.tasks.model.timing_selection: by default `bench` and those tagged `timed`)."""
    text = "".join(candidate.files.values())
    if "FAIL_CORRECT" in text:
        return EvalOutcome([Verdict(Stage.COMPILE, Status.PASS, "compiled"),
                            Verdict(Stage.CORRECTNESS, Status.FAIL, "1 of 3 configs fail; fake mismatch"),
                            Verdict(Stage.TIMING, Status.SKIPPED, "correctness failed")])
    s = fake_speedup(candidate)
    names = ((timing_selection(task, timing_configs) or [c.name for c in task.configs]) if task is not None
             else ["a", "b", "c"])
    configs = [ConfigTiming(n, 1.0 / s, 0.001, 1.0, 1.2) for n in names]
    return EvalOutcome([Verdict(Stage.COMPILE, Status.PASS, "compiled"),
                        Verdict(Stage.CORRECTNESS, Status.PASS, "fake: all configs within tolerance"),
                        Verdict(Stage.TIMING, Status.PASS, f"geomean speedup vs eager {s:.2f}x")],
                       configs=configs, speedup_eager=s, speedup_compile=1.2 * s,
                       device={"gpu": "FakeGPU", "driver": "0", "torch": "fake", "cuda": "fake"})


def fake_gpu(task: Task, candidate: Candidate, direction: str, options: EvalOptions,
             sleep_s: float = 0.0) -> EvalOutcome:
    """The GPU half stand-in: sleeps (`sleep_s`, or $KBENCH_FAKE_GPU_S), then fake_result. Picklable (module
    level). The fault tests' worker-killing hooks wrap it in tests/doubles/faults.py (fault_gpu)."""
    delay = env_float("KBENCH_FAKE_GPU_S", default=sleep_s)
    if delay:
        time.sleep(delay)
    return fake_result(task, candidate, getattr(options, "timing_configs", None))


def fake_profile(candidate: Candidate) -> Verdict:
    """A `profile` verdict stand-in: what profile_feedback() reads back into a mutate prompt."""
    return Verdict(PROFILE_STAGE, Status.PASS, "memory-bound",
                   {"text": f"fake profile of {candidate.name}: memory-bound", "seconds": 0.0})


class FakeEvaluator:
    """Synchronous-enough fake: evaluates in a small thread pool, records every candidate it saw.

    `no_gpu` (default: $KBENCH_FAKE_NO_GPU): compile, then report that no GPU is visible, as the real
    evaluator does on a machine without one. `hold_after` (default: $KBENCH_FAKE_EVAL_HOLD_AFTER): evaluations
    after the first `hold_after` wait until the evaluator is closed, so a test can interrupt a run that is
    certainly still going, however loaded the machine is. `profile`: every passing candidate's evaluation
    carries a fake `profile` verdict (as `[eval] profile = "all"` does); `profile()` profiles one on its own
    (a new best). `profiled`: the source hashes of the candidates profiled, either way, in order."""

    def __init__(self, task: Task | None = None, *, delay_s: float = 0.0, workers: int = 1,
                 no_gpu: bool | None = None, hold_after: int | None = None, profile: bool = False):
        self.task = task
        self.delay_s = delay_s
        self.profile_inline = profile
        self.profiled: list[str] = []        # source hashes, in the order they were profiled
        self.no_gpu = env_flag("KBENCH_FAKE_NO_GPU") if no_gpu is None else no_gpu
        self.hold_after = env_int("KBENCH_FAKE_EVAL_HOLD_AFTER") if hold_after is None else hold_after
        self.seen: list[str] = []            # source hashes, in submission order
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="kbench-fake")
        self._lock = threading.Lock()
        self._futures: list[Future] = []
        self._closing = threading.Event()

    @property
    def capacity(self) -> int:
        return 4

    def submit(self, candidate: Candidate, on_stage: StageCallback | None = None) -> Future[EvalOutcome]:
        with self._lock:
            self.seen.append(candidate.source_hash)
            index = len(self.seen)

        def run() -> EvalOutcome:
            if self.hold_after and index > self.hold_after:
                self._closing.wait()
            if self.delay_s:
                time.sleep(self.delay_s)
            text = "".join(candidate.files.values())
            if "FAIL_COMPILE" in text:
                out = EvalOutcome([Verdict(Stage.COMPILE, Status.FAIL, "fake compile error")])
            elif self.no_gpu:
                out = EvalOutcome([Verdict(Stage.COMPILE, Status.PASS, "compiled")], infra_error=NO_GPU)
            else:
                out = fake_result(self.task, candidate)
                if self.profile_inline and needs_profile(out):
                    out.verdicts.append(self._profiled(candidate))
            for v in out.verdicts:
                if on_stage:
                    on_stage(v)
            return out

        f = self._pool.submit(run)
        with self._lock:
            self._futures.append(f)
        return f

    def profile(self, candidate: Candidate, *, device: dict[str, Any] | None = None) -> Future[Verdict]:
        def run() -> Verdict:
            if self.delay_s:
                time.sleep(self.delay_s)
            return self._profiled(candidate)

        f = self._pool.submit(run)
        with self._lock:
            self._futures.append(f)
        return f

    def _profiled(self, candidate: Candidate) -> Verdict:
        with self._lock:
            self.profiled.append(candidate.source_hash)
        return fake_profile(candidate)

    def cancel_pending(self) -> int:
        with self._lock:
            return sum(1 for f in self._futures if f.cancel())

    def close(self, wait: bool = True) -> None:
        self._closing.set()
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def stats(self) -> dict[str, Any]:
        return {"completed": len(self.seen), "unmeasured": len(self.seen) if self.no_gpu else 0,
                "profiled": len(self.profiled)}


def fake_evaluator_factory(delay_s: float = 0.0) -> EvaluatorFactory:
    """A SessionService's evaluator seam (task, direction, config) answered by a FakeEvaluator; `[eval] profile =
    "all"` in the config makes it profile every passing candidate, as the real evaluator would."""
    def factory(task: Task, direction: str, config: Config) -> FakeEvaluator:
        return FakeEvaluator(task, delay_s=delay_s, profile=config.eval.profile == "all")
    return factory
