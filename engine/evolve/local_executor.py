"""The local executor: this machine's worker processes and GPUs.

`LocalPipelineExecutor` overlaps the two halves of an evaluation:

    submit ─▶ CPU pool (processes): build_candidate ──▶ GPU queue ─▶ one worker per visible GPU:
                                     (compile verdict)                sandboxed check + time (evaluate(),
                                                                      which finds the build in the cache)

so nvcc runs on CPU cores while the GPUs measure candidates that are already built. A candidate that fails
to compile never reaches a GPU queue. With `pipelined=False` each candidate is built and then measured by
the same worker before the next one starts (the strictly sequential reference for benchmarks).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engine.candidates import Candidate
from engine.evolve.outcome import PROFILE_STAGE, EvalOutcome, StageCallback, Submission
from engine.evolve.worker_fns import (call_build, compile_verdict, default_build, default_gpu, default_profile,
                                      ignore_sigint, start_resource_tracker, visible_gpus)
from engine.harness.build.result import BuildSummary
from engine.harness.build.wait import PCH_WAIT, expected_wait
from engine.harness.toolchain import Toolchain
from engine.harness.toolchain import detect as detect_toolchain
from engine.pipeline.eval_types import EvalOptions
from engine.tasks.model import Task
from engine.verdict import Stage, Status, Verdict

if TYPE_CHECKING:
    from engine.pipeline.eval_types import EvalReport

@dataclass
class _Job(Submission):
    """A submission as this executor tracks it: its build, and whether it is an evaluation or a profile."""

    build: BuildSummary | None = None
    build_future: Future | None = None
    kind: str = "evaluate"               # evaluate | profile (the profile stage alone, its future a Verdict)
    device: dict[str, Any] | None = None


class LocalPipelineExecutor:
    """Compile on a pool of CPU worker processes while one worker per GPU checks and times built candidates."""

    def __init__(self, task: Task, direction: str, options: EvalOptions | None = None, *,
                 gpus: list[int | None] | None = None, build_workers: int | None = None,
                 build_fn: Callable[..., dict[str, Any]] | None = None,   # returns a BuildSummary.to_json()
                 gpu_fn: Callable[..., EvalOutcome | EvalReport] | None = None, pipelined: bool = True,
                 processes: bool = True, clock: Callable[[], float] = time.monotonic,
                 profile_fn: Callable[..., Verdict] | None = None):
        self.task, self.direction = task, direction
        self.options = options or EvalOptions()
        found = visible_gpus() if gpus is None else list(gpus)
        self.gpus: list[int | None] = found or [None]   # None: one unpinned worker (reports "no GPU")
        self.pipelined = pipelined
        self.build_fn = build_fn or default_build
        self.gpu_fn = gpu_fn or default_gpu
        self.profile_fn = profile_fn or default_profile
        self.clock = clock
        n_build = build_workers or max(1, min(8, (os.cpu_count() or 2) - len(self.gpus)))
        self._pool: Executor | None = None
        if pipelined:
            if processes:
                start_resource_tracker()
                self._pool = ProcessPoolExecutor(n_build, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=ignore_sigint)
            else:
                self._pool = ThreadPoolExecutor(n_build, thread_name_prefix="kbench-build")
        self.build_workers = n_build if pipelined else 0
        self._q: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._jobs: list[_Job] = []
        self._busy: dict[int | None, list[tuple[float, float]]] = {g: [] for g in self.gpus}
        self._build_busy: list[tuple[float, float]] = []
        self._first: float | None = None
        self._last: float | None = None
        self._done = 0
        self._unmeasured = 0
        self._profiled = 0
        self._closed = False
        self._said: set[str] = set()
        # the toolchain for expected_wait, detected meanwhile (importing torch's cpp_extension takes seconds), so
        # the first build's wait is said as it starts
        self._toolchain: Future[Toolchain] = Future()
        threading.Thread(target=self._detect, daemon=True, name="kbench-toolchain").start()
        self._threads = [threading.Thread(target=self._gpu_worker, args=(g,), daemon=True,
                                          name=f"kbench-gpu-{g}") for g in self.gpus]
        for t in self._threads:
            t.start()

    def expected_wait(self, candidate: Candidate) -> str | None:
        """What the build of `candidate` will wait on (engine.harness.build.wait), each wait shared by every build
        (torch's precompiled header) said once. The toolchain is detected once, here, in the parent."""
        wait = expected_wait(candidate, self.options.cache_root, self._toolchain.result(timeout=60))
        if wait is not None and wait.startswith(PCH_WAIT):
            if PCH_WAIT in self._said:      # said already: what else this build waits on, if anything
                wait = wait[len(PCH_WAIT):].removeprefix(", then ") or None
            self._said.add(PCH_WAIT)
        return wait

    def _detect(self) -> None:
        try:
            self._toolchain.set_result(detect_toolchain())
        except BaseException as exc:  # noqa: BLE001 - no toolchain: each build reports it; expected_wait raises it
            self._toolchain.set_exception(exc)

    @property
    def capacity(self) -> int:
        return self.build_workers + 2 * len(self.gpus)

    # -- Evaluator ------------------------------------------------------------------------------------

    def submit(self, candidate: Candidate, on_stage: StageCallback | None = None) -> Future[EvalOutcome]:
        if self._closed:
            raise RuntimeError("executor is closed")
        job = _Job(candidate, on_stage, Future(), self.clock())
        with self._lock:
            self._jobs.append(job)
            if self._first is None:
                self._first = job.submitted
        if not self.pipelined:
            self._q.put(job)
            return job.future
        assert self._pool is not None
        bf = self._pool.submit(self.build_fn, candidate.to_json(), str(self.options.cache_root),
                               float(getattr(self.options, "build_timeout_s", 600.0)))
        job.build_future = bf
        bf.add_done_callback(lambda f, job=job: self._built(job, f))
        return job.future

    def profile(self, candidate: Candidate, *, device: dict[str, Any] | None = None) -> Future[Verdict]:
        """The profile stage alone for a candidate evaluated before, on the next free GPU worker (queued behind
        the evaluations already built). The future's result is the `profile` Verdict."""
        if self._closed:
            raise RuntimeError("executor is closed")
        job = _Job(candidate, None, Future(), self.clock(), kind="profile", device=dict(device or {}))
        with self._lock:
            self._jobs.append(job)
        self._q.put(job)
        return job.future

    def cancel_pending(self) -> int:
        n = 0
        with self._lock:
            jobs = list(self._jobs)
        for job in jobs:
            if job.build_future is not None:
                job.build_future.cancel()
            if job.future.cancel():     # only succeeds while no GPU worker has started it
                n += 1
        with self._lock:
            self._jobs = [j for j in self._jobs if not j.future.cancelled()]
        return n

    def close(self, wait: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        if not wait:
            self.cancel_pending()
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=not wait)
        for _ in self._threads:
            self._q.put(None)
        if wait:
            for t in self._threads:
                t.join()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            first, last = self._first, self._last
            busy = {str(g): sum(b - a for a, b in iv) for g, iv in self._busy.items()}
            build_busy = sum(b - a for a, b in self._build_busy)
            done, unmeasured, profiled = self._done, self._unmeasured, self._profiled
        wall = (last - first) if first is not None and last is not None else 0.0
        total_busy = sum(busy.values())
        return {"completed": done, "wall_s": wall, "gpu_busy_s": busy, "build_s": build_busy,
                "gpus": len(self.gpus), "build_workers": self.build_workers, "pipelined": self.pipelined,
                "unmeasured": unmeasured,   # evaluations whose sandbox found no GPU: their busy time is no GPU's
                "profiled": profiled,       # profile stages run alone (new bests): their GPU time is in gpu_busy_s
                "gpu_busy_fraction": (total_busy / (wall * len(self.gpus))) if wall > 0 else None,
                "candidates_per_hour": (done * 3600.0 / wall) if wall > 0 else None,
                "intervals": {str(g): list(iv) for g, iv in self._busy.items()}}

    # -- internals -----------------------------------------------------------------------------------

    def _built(self, job: _Job, bf: Future) -> None:
        if bf.cancelled():
            job.future.cancel()
            return
        try:
            build = BuildSummary.from_json(bf.result())
        except Exception as exc:  # noqa: BLE001 - a dead worker process is a compile failure, not a dead loop
            build = BuildSummary(ok=False, error=f"build worker failed: {exc!r}", log=traceback.format_exc())
        job.build = build
        self._after_build(job)

    def _after_build(self, job: _Job) -> None:
        build = job.build or BuildSummary(ok=False)
        v = compile_verdict(build)
        with self._lock:
            self._build_busy.append((self.clock() - float(build.seconds or 0.0), self.clock()))
        job.notify(v)
        if v.status != Status.PASS:
            self._finish(job, EvalOutcome([v], build_s=build.seconds))
            return
        if self.pipelined:
            self._q.put(job)

    def _gpu_worker(self, gpu: int | None) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            if job.future.done() or not job.future.set_running_or_notify_cancel():
                continue
            if job.kind == "profile":
                self._profile_on(job, gpu)
                continue
            try:
                if not self.pipelined:
                    job.build = call_build(self.build_fn, job.candidate, self.options)
                    v = compile_verdict(job.build)
                    job.notify(v)
                    if v.status != Status.PASS:
                        self._finish(job, EvalOutcome([v], build_s=job.build.seconds))
                        continue
                opts = replace(self.options, gpu=gpu) if hasattr(self.options, "__dataclass_fields__") else self.options
                t0 = self.clock()
                try:
                    out = self.gpu_fn(self.task, job.candidate, self.direction, opts)
                finally:
                    t1 = self.clock()
                    with self._lock:
                        self._busy[gpu].append((t0, t1))
                if not isinstance(out, EvalOutcome):
                    out = EvalOutcome.from_report(out)
                cv = compile_verdict(job.build or BuildSummary(ok=False))
                # keep the CPU stage's compile verdict (the GPU side only found the build in the cache)
                rest = [x for x in out.verdicts if not (x.stage == Stage.COMPILE and x.status == Status.PASS)]
                if any(x.stage == Stage.COMPILE for x in rest):
                    verdicts = rest
                else:
                    verdicts = [cv] + rest
                for x in verdicts:
                    if x.stage != Stage.COMPILE:
                        job.notify(x)
                out = replace(out, verdicts=verdicts, build_s=job.build.seconds if job.build else None, gpu_s=t1 - t0,
                              gpu=gpu)
                self._finish(job, out)
            except Exception as exc:  # noqa: BLE001 - the worker must survive anything the evaluation throws
                v = Verdict(Stage.CORRECTNESS, Status.FAIL, f"evaluation crashed in the parent: {exc!r}",
                            {"traceback": traceback.format_exc()[-4000:]})
                job.notify(v)
                self._finish(job, EvalOutcome([compile_verdict(job.build or BuildSummary(ok=True)), v]))

    def _profile_on(self, job: _Job, gpu: int | None) -> None:
        opts = replace(self.options, gpu=gpu) if hasattr(self.options, "__dataclass_fields__") else self.options
        t0 = self.clock()
        try:
            v = self.profile_fn(self.task, job.candidate, self.direction, opts, job.device)
        except Exception as exc:  # noqa: BLE001 - profiling is feedback: its failure is a skipped verdict
            v = Verdict(PROFILE_STAGE, Status.SKIPPED, f"profiling failed: {type(exc).__name__}: {str(exc)[:300]}")
        t1 = self.clock()
        with self._lock:
            self._busy[gpu].append((t0, t1))
            self._profiled += 1
            if job in self._jobs:
                self._jobs.remove(job)
        job.future.set_result(v)

    def _finish(self, job: _Job, out: EvalOutcome) -> None:
        out.seconds = out.seconds or (self.clock() - job.submitted)
        with self._lock:
            self._done += 1
            self._unmeasured += out.no_gpu
            self._last = self.clock()
            if job in self._jobs:
                self._jobs.remove(job)
        if not job.future.done():
            if job.future.running() or job.future.set_running_or_notify_cancel():
                job.future.set_result(out)

