"""Evaluators: where committed candidates go to be compiled, checked and timed.

The loop needs only the narrow `Evaluator` protocol: `submit(candidate, on_stage) -> Future[EvalOutcome]`,
`cancel_pending()`, `close()`, `stats()`; and, where an evaluator can, `profile(candidate, device=) ->
Future[Verdict]`: the `profile` stage (ncu + torch profiler) alone for a candidate already evaluated, on the
evaluator's GPU, which a session asks for when a candidate becomes its new best (`[eval] profile = "best"`). Two implementations run real evaluations: `LocalPipelineExecutor`
(this machine's worker processes, the default) and `engine.evolve.ray_executor.RayExecutor` (a Ray
cluster); `engine.evolve.factory.make_evaluator` picks one from the config.

`LocalPipelineExecutor` overlaps the two halves of an evaluation:

    submit ─▶ CPU pool (processes): build_candidate ──▶ GPU queue ─▶ one worker per visible GPU:
                                     (compile verdict)                sandboxed check + time (evaluate(),
                                                                      which finds the build in the cache)

so nvcc runs on CPU cores while the GPUs measure candidates that are already built. A candidate that fails
to compile never reaches a GPU queue. With `pipelined=False` each candidate is built and then measured by
the same worker before the next one starts (the strictly sequential reference for benchmarks).

`FakeEvaluator` is for tests: deterministic results from the source text, no compiler, no GPU.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import queue
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from engine.candidates import Candidate
from engine.tasks.model import Task
from engine.verdict import Status, Verdict
from engine.workspace.records import ConfigTiming, Event, Measurement, VerdictNote, now_iso

StageCallback = Callable[[Verdict], None]
BLOCKING = (Status.FAIL, Status.SUSPICIOUS)


@dataclass
class EvalOutcome:
    """What an evaluator hands back: the verdicts of the stages it ran, and the timings."""

    verdicts: list[Verdict]
    configs: list[ConfigTiming] = field(default_factory=list)
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    device: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    build_s: float | None = None
    gpu_s: float | None = None
    gpu: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    # Set when the machinery failed, not the kernel (a Ray worker or node lost on every attempt, no GPU
    # visible to the evaluator): the candidate is not judged, and a resumed session evaluates it again.
    infra_error: str = ""
    attempts: int = 1

    @property
    def failed_stage(self) -> str | None:
        v = next((v for v in self.verdicts if v.status in BLOCKING), None)
        return v.stage if v else None

    @property
    def no_gpu(self) -> bool:
        """The evaluator's machine had no GPU: nothing about the kernel is known, and nothing to note."""
        from engine.pipeline.evaluate import NO_GPU
        return self.infra_error == NO_GPU

    @property
    def not_judged(self) -> str:
        """Why this evaluation says nothing about the kernel, in one line; "" when it judged it."""
        if self.no_gpu:
            from engine.gpu_wait import WAITING_FOR_GPU
            return f"not re-measured, still {WAITING_FOR_GPU}: {self.infra_error}"
        if self.infra_error:
            return f"not re-measured, infrastructure failure: {self.infra_error}"
        return ""

    @property
    def reason(self) -> str:
        v = next((v for v in self.verdicts if v.status in BLOCKING), None)
        return v.reason if v else ""

    @property
    def timed(self) -> bool:
        return self.speedup_eager is not None and bool(self.configs)

    def measurement(self) -> Measurement | None:
        """The workspace measurement note, when the candidate was timed."""
        if not self.timed:
            return None
        d = self.device or {}
        return Measurement(speedup_eager=self.speedup_eager, speedup_compile=self.speedup_compile,
                           configs=tuple(self.configs), gpu=str(d.get("gpu") or ""), driver=str(d.get("driver") or ""),
                           torch=str(d.get("torch") or ""), cuda=str(d.get("cuda") or ""),
                           data={"seconds": round(self.seconds, 3), "build_s": self.build_s, "gpu_s": self.gpu_s,
                                 "gpu_index": self.gpu, **self.data})

    def infra_event(self, **data: Any) -> Event:
        """The note that records an infrastructure failure, or a candidate waiting for a GPU (engine.gpu_wait),
        instead of any verdict."""
        from engine.evolve.resume import INFRA_FAILURE
        from engine.gpu_wait import WAITING_EVENT
        return Event(WAITING_EVENT if self.no_gpu else INFRA_FAILURE,
                     {"reason": self.infra_error, "attempts": self.attempts, **data}, now_iso())

    def reevaluation_notes(self, **event_data: Any) -> list[Any]:
        """What a re-evaluation appends (`kbench reevaluate` and the app alike): its verdicts (by
        `reevaluate`), the measurement if it was timed, and a `reevaluated` event with `event_data` added.
        Where it judged nothing: only the infrastructure event, or nothing at all on a machine without a GPU."""
        if self.no_gpu:
            return []
        if self.infra_error:
            return [self.infra_event(**event_data)]
        entries: list[Any] = [VerdictNote(v, now_iso(), "reevaluate") for v in self.verdicts]
        meas = self.measurement()
        if meas is not None:
            entries.append(meas)
        entries.append(Event("reevaluated", {"speedup": self.speedup_eager, "failed_stage": self.failed_stage,
                                             "gpu": (self.device or {}).get("gpu"), **event_data}, now_iso()))
        return entries

    def to_json(self) -> dict[str, Any]:
        """Plain JSON, for crossing a process or machine boundary (the Ray executor)."""
        return {"verdicts": [v.to_json() for v in self.verdicts], "configs": [c.to_obj() for c in self.configs],
                "speedup_eager": self.speedup_eager, "speedup_compile": self.speedup_compile,
                "device": self.device, "seconds": self.seconds, "build_s": self.build_s, "gpu_s": self.gpu_s,
                "gpu": self.gpu, "data": self.data, "infra_error": self.infra_error, "attempts": self.attempts}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> EvalOutcome:
        return cls(verdicts=[Verdict.from_json(v) for v in obj.get("verdicts") or ()],
                   configs=[ConfigTiming.from_obj(c) for c in obj.get("configs") or ()],
                   speedup_eager=obj.get("speedup_eager"), speedup_compile=obj.get("speedup_compile"),
                   device=dict(obj.get("device") or {}), seconds=float(obj.get("seconds") or 0.0),
                   build_s=obj.get("build_s"), gpu_s=obj.get("gpu_s"), gpu=obj.get("gpu"),
                   data=dict(obj.get("data") or {}), infra_error=str(obj.get("infra_error") or ""),
                   attempts=int(obj.get("attempts") or 1))

    @classmethod
    def from_report(cls, report: Any) -> EvalOutcome:
        """From engine.pipeline.evaluate.EvalReport."""
        if report.unmeasured:   # the machine could not measure: the skipped stages judge nothing, say why
            return cls(verdicts=[v for v in report.verdicts if v.stage not in ("correctness", "timing")],
                       device=dict(report.device or {}), seconds=report.seconds, data={"build": report.build},
                       infra_error=report.unmeasured)
        configs = [ConfigTiming(r.name, r.candidate_ms, r.candidate_iqr_ms, r.eager_ms, r.compile_ms)
                   for r in report.rows if r.candidate_ms is not None]
        return cls(verdicts=list(report.verdicts), configs=configs, speedup_eager=report.geomean_speedup_eager,
                   speedup_compile=report.geomean_speedup_compile, device=dict(report.device or {}),
                   seconds=report.seconds, data={"build": report.build})


class Evaluator(Protocol):
    def submit(self, candidate: Candidate, on_stage: StageCallback | None = None) -> Future[EvalOutcome]:
        """Start evaluating; `on_stage(verdict)` may be called (from any thread) as stages finish. The future's
        result carries every verdict, including those already passed to on_stage."""

    def cancel_pending(self) -> int:
        """Cancel every submission not yet started; returns how many (their futures end cancelled)."""

    def close(self, wait: bool = True) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    # Optional (the loop checks with getattr):
    # def profile(self, candidate: Candidate, *, device: dict | None = None) -> Future[Verdict]:
    #     """The profile stage of an evaluated candidate, on a GPU; `device`: its outcome's device (the GPU model
    #     names the cached roofline peaks). The verdict is `skipped` with the reason where it cannot run."""


# ------------------------------------------------------------------------------------------- helpers


PROFILE_STAGE = "profile"


def needs_profile(out: EvalOutcome) -> bool:
    """The candidate was judged, passed and timed, and its evaluation did not profile it (the profile stage runs
    only for such candidates, as evaluate() runs it with `EvalOptions.profile`)."""
    return (not out.infra_error and out.failed_stage is None and out.timed
            and any(v.stage == "timing" and v.status == Status.PASS for v in out.verdicts)
            and not any(v.stage == PROFILE_STAGE for v in out.verdicts))


def profile_now(evaluator: Any, candidate: Candidate, out: EvalOutcome, timeout_s: float | None = None) -> Verdict | None:
    """Profile an evaluated candidate on the evaluator's GPU and wait for the verdict (on demand: a person's
    re-evaluation). None where the evaluator cannot profile or the outcome does not call for it."""
    fn = getattr(evaluator, "profile", None)
    if fn is None or not needs_profile(out):
        return None
    try:
        return fn(candidate, device=out.device).result(timeout_s)
    except Exception as exc:  # noqa: BLE001 - profiling is feedback: its failure is a skipped verdict
        return Verdict(PROFILE_STAGE, Status.SKIPPED, f"profiling failed: {type(exc).__name__}: {str(exc)[:300]}")


def cached_peaks(cache_root: Any, device: dict[str, Any] | None) -> dict[str, Any] | None:
    """The roofline peaks of the evaluation's GPU model, as the judge's result carries them (measured and cached
    by that evaluation), or None."""
    name = (device or {}).get("gpu")
    if not name:
        return None
    import dataclasses

    from engine.harness.roofline import load_peaks
    peaks = load_peaks(Path(cache_root), str(name))
    return dataclasses.asdict(peaks) if peaks is not None else None


def default_profile(task: Task, candidate: Candidate, direction: str, options: Any,
                    device: dict[str, Any] | None = None) -> Verdict:
    """The profile stage alone (engine.pipeline.profiling.profile_stage) for a candidate evaluated before: its
    build is a cache hit, the peaks those its evaluation cached. Never raises."""
    from engine.pipeline.profiling import profile_stage

    try:
        peaks = cached_peaks(options.cache_root, device)
    except Exception:  # noqa: BLE001 - no peaks: the summary goes without fractions of peak
        peaks = None
    return profile_stage(task, candidate, direction, options, peaks)


def visible_gpus() -> list[int]:
    """GPU indices to pin workers to: CUDA_VISIBLE_DEVICES when set (numeric ids), else nvidia-smi -L."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [x.strip() for x in env.split(",") if x.strip()]
        if all(re.fullmatch(r"\d+", x) for x in ids):
            return [int(x) for x in ids]
        return list(range(len(ids)))
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    return list(range(sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))))


_TOOLCHAIN: Any = None


def default_build(candidate_json: dict[str, Any], cache_root: str, timeout_s: float = 600.0) -> dict[str, Any]:
    """Compile one candidate into the cache (runs in a CPU worker process). Returns a small JSON dict."""
    global _TOOLCHAIN
    from engine.harness.build import build_candidate
    from engine.harness.toolchain import ToolchainError, detect

    cand = Candidate.from_json(candidate_json)
    t0 = time.monotonic()
    try:
        if _TOOLCHAIN is None:
            _TOOLCHAIN = detect()
    except ToolchainError as exc:
        return {"ok": False, "error": str(exc), "log": "", "seconds": time.monotonic() - t0, "cache_hit": False}
    r = build_candidate(cand, Path(cache_root), _TOOLCHAIN, timeout_s=timeout_s)
    return {"ok": r.ok, "error": r.error, "log": (r.log or "")[-8000:], "seconds": r.seconds,
            "cache_hit": r.cache_hit, "steps": dict(r.steps or {})}


def default_gpu(task: Task, candidate: Candidate, direction: str, options: Any) -> EvalOutcome:
    """The sandboxed check + time of an already-built candidate (evaluate() finds the build in the cache).

    The static integrity stage belongs to the loop (engine.evolve.checks), which runs it before a candidate
    is submitted and honours a person's override; evaluate() is told not to gate on it again, and its
    repeat of the `static` verdict is dropped so it cannot overrule that override in the notes."""
    from engine.pipeline.evaluate import evaluate

    if hasattr(options, "override_static"):
        # a spare judge waits for the worker's next candidate (engine/pipeline/warm.py), and the session's
        # baselines of each config are reused (re-checked, re-measured on drift: engine/pipeline/baselines.py)
        options = replace(options, override_static=True, warm=True, reuse_baselines=True)
    out = EvalOutcome.from_report(evaluate(task, candidate, direction, options))
    out.verdicts = [v for v in out.verdicts if v.stage != "static"]
    return out


def compile_verdict(build: dict[str, Any]) -> Verdict:
    if build.get("ok"):
        return Verdict("compile", Status.PASS, "cache hit" if build.get("cache_hit") else "compiled",
                       {"seconds": round(float(build.get("seconds") or 0.0), 2), "cache_hit": bool(build.get("cache_hit")),
                        "steps": build.get("steps") or {}})
    return Verdict("compile", Status.FAIL, build.get("error") or "compilation failed",
                   {"log": str(build.get("log") or "")[-8000:]})


# ------------------------------------------------------------------------------------ the pipeline


@dataclass
class Submission:
    """One candidate handed to an executor: what it reports to, and since when."""

    candidate: Candidate
    on_stage: StageCallback | None
    future: Future
    submitted: float

    def notify(self, v: Verdict) -> None:
        if self.on_stage is not None:
            try:
                self.on_stage(v)
            except Exception:  # noqa: BLE001 - a subscriber's bug must not lose the result
                pass


@dataclass
class _Job(Submission):
    build: dict[str, Any] | None = None
    build_future: Future | None = None
    kind: str = "evaluate"               # evaluate | profile (the profile stage alone, its future a Verdict)
    device: dict[str, Any] | None = None


class LocalPipelineExecutor:
    """Compile on a pool of CPU worker processes while one worker per GPU checks and times built candidates."""

    def __init__(self, task: Task, direction: str, options: Any = None, *, gpus: list[int | None] | None = None,
                 build_workers: int | None = None, build_fn: Callable[..., dict[str, Any]] | None = None,
                 gpu_fn: Callable[..., Any] | None = None, pipelined: bool = True, processes: bool = True,
                 clock: Callable[[], float] = time.monotonic, profile_fn: Callable[..., Verdict] | None = None):
        from engine.pipeline.evaluate import EvalOptions

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
                                                 initializer=_ignore_sigint)
            else:
                self._pool = ThreadPoolExecutor(n_build, thread_name_prefix="kbench-build")
        self.build_workers = n_build if pipelined else 0
        self._q: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._jobs: list[_Job] = []
        self._busy: dict[Any, list[tuple[float, float]]] = {g: [] for g in self.gpus}
        self._build_busy: list[tuple[float, float]] = []
        self._first: float | None = None
        self._last: float | None = None
        self._done = 0
        self._unmeasured = 0
        self._profiled = 0
        self._closed = False
        self._threads = [threading.Thread(target=self._gpu_worker, args=(g,), daemon=True,
                                          name=f"kbench-gpu-{g}") for g in self.gpus]
        for t in self._threads:
            t.start()

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
            build = bf.result()
        except Exception as exc:  # noqa: BLE001 - a dead worker process is a compile failure, not a dead loop
            build = {"ok": False, "error": f"build worker failed: {exc!r}", "log": traceback.format_exc()}
        job.build = build
        self._after_build(job)

    def _after_build(self, job: _Job) -> None:
        build = job.build or {}
        v = compile_verdict(build)
        with self._lock:
            self._build_busy.append((self.clock() - float(build.get("seconds") or 0.0), self.clock()))
        job.notify(v)
        if v.status != Status.PASS:
            self._finish(job, EvalOutcome([v], build_s=build.get("seconds")))
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
                    job.build = _call_build(self.build_fn, job.candidate, self.options)
                    v = compile_verdict(job.build)
                    job.notify(v)
                    if v.status != Status.PASS:
                        self._finish(job, EvalOutcome([v], build_s=job.build.get("seconds")))
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
                cv = compile_verdict(job.build or {})
                # keep the CPU stage's compile verdict (the GPU side only found the build in the cache)
                rest = [x for x in out.verdicts if not (x.stage == "compile" and x.status == Status.PASS)]
                if any(x.stage == "compile" for x in rest):
                    verdicts = rest
                else:
                    verdicts = [cv] + rest
                for x in verdicts:
                    if x.stage != "compile":
                        job.notify(x)
                out = replace(out, verdicts=verdicts, build_s=(job.build or {}).get("seconds"), gpu_s=t1 - t0,
                              gpu=gpu)
                self._finish(job, out)
            except Exception as exc:  # noqa: BLE001 - the worker must survive anything the evaluation throws
                v = Verdict("correctness", Status.FAIL, f"evaluation crashed in the parent: {exc!r}",
                            {"traceback": traceback.format_exc()[-4000:]})
                job.notify(v)
                self._finish(job, EvalOutcome([compile_verdict(job.build or {"ok": True}), v]))

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


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker against the real stderr. The tracker hands sys.stderr's fd to
    its helper process; inside a Textual app sys.stderr is a capture object whose fileno() is -1, and the
    spawn then fails ("bad value(s) in fds_to_keep"), so a process pool could not be made from the app."""
    from multiprocessing import resource_tracker

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


def _ignore_sigint() -> None:
    """Build workers leave Ctrl-C to the parent (which stops the loop); compilers run in their own sessions."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _call_build(build_fn: Callable[..., dict[str, Any]], cand: Candidate, options: Any) -> dict[str, Any]:
    try:
        return build_fn(cand.to_json(), str(options.cache_root), float(getattr(options, "build_timeout_s", 600.0)))
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "error": f"build failed: {exc!r}", "log": traceback.format_exc()}


# --------------------------------------------------------------------------------------------- fakes


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
    delay = float(os.environ.get("KBENCH_FAKE_BUILD_S", sleep_s) or 0.0)
    if delay:
        time.sleep(delay)
    text = "".join(cand.files.values())
    if "FAIL_COMPILE" in text:
        return {"ok": False, "error": "kernel.cu:1: error: FAIL_COMPILE marker", "log": "fake log",
                "seconds": time.monotonic() - t0}
    return {"ok": True, "seconds": time.monotonic() - t0, "cache_hit": False}


def fake_result(task: Task | None, candidate: Candidate) -> EvalOutcome:
    """Correctness fails on `FAIL_CORRECT` in the source; otherwise timed with fake_speedup over 3 configs."""
    text = "".join(candidate.files.values())
    if "FAIL_CORRECT" in text:
        return EvalOutcome([Verdict("compile", Status.PASS, "compiled"),
                            Verdict("correctness", Status.FAIL, "1 of 3 configs fail; fake mismatch"),
                            Verdict("timing", Status.SKIPPED, "correctness failed")])
    s = fake_speedup(candidate)
    names = [c.name for c in task.configs] if task is not None else ["a", "b", "c"]
    configs = [ConfigTiming(n, 1.0 / s, 0.001, 1.0, 1.2) for n in names]
    return EvalOutcome([Verdict("compile", Status.PASS, "compiled"),
                        Verdict("correctness", Status.PASS, "fake: all configs within tolerance"),
                        Verdict("timing", Status.PASS, f"geomean speedup vs eager {s:.2f}x")],
                       configs=configs, speedup_eager=s, speedup_compile=1.2 * s,
                       device={"gpu": "FakeGPU", "driver": "0", "torch": "fake", "cuda": "fake"})


def fake_gpu(task: Task, candidate: Candidate, direction: str, options: Any, sleep_s: float = 0.0) -> EvalOutcome:
    """The GPU half stand-in. For fault tests, markers in the source: `FAKE_PIDFILE=<path>` appends a line
    "<pid> <ray node id or ->" per attempt; `FAKE_GPU_SLEEP=<s>` then holds the first `FAKE_SLEEP_ATTEMPTS=<n>`
    attempts (default 1) there, so a test can kill the worker or its node mid-evaluation."""
    text = "".join(candidate.files.values())
    attempt = 1
    if m := re.search(r"FAKE_PIDFILE=(\S+)", text):
        node = "-"
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
        with open(m.group(1), "a+") as f:
            f.seek(0)
            attempt = len(f.read().splitlines()) + 1
            f.write(f"{os.getpid()} {node}\n")
    if m := re.search(r"FAKE_GPU_SLEEP=([0-9.]+)", text):
        n = re.search(r"FAKE_SLEEP_ATTEMPTS=(\d+)", text)
        if attempt <= (int(n.group(1)) if n else 1):
            time.sleep(float(m.group(1)))
    delay = float(os.environ.get("KBENCH_FAKE_GPU_S", sleep_s) or 0.0)
    if delay:
        time.sleep(delay)
    return fake_result(task, candidate)


def fake_profile(candidate: Candidate) -> Verdict:
    """A `profile` verdict stand-in: what profile_feedback() reads back into a mutate prompt."""
    return Verdict(PROFILE_STAGE, Status.PASS, "memory-bound",
                   {"text": f"fake profile of {candidate.name}: memory-bound", "seconds": 0.0})


def fake_profile_stage(task: Task, candidate: Candidate, direction: str, options: Any,
                       device: dict[str, Any] | None = None) -> Verdict:
    """The executors' `profile_fn` stand-in (module level: picklable for Ray); says which GPU it was given."""
    v = fake_profile(candidate)
    v.data.update(gpu_index=getattr(options, "gpu", None), device=dict(device or {}))
    return v


class FakeEvaluator:
    """Synchronous-enough fake for tests: evaluates in a small thread pool, records every candidate it saw.

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
        self.no_gpu = bool(os.environ.get("KBENCH_FAKE_NO_GPU")) if no_gpu is None else no_gpu
        self.hold_after = int(os.environ.get("KBENCH_FAKE_EVAL_HOLD_AFTER") or 0) if hold_after is None else hold_after
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
                out = EvalOutcome([Verdict("compile", Status.FAIL, "fake compile error")])
            elif self.no_gpu:
                from engine.pipeline.types import NO_GPU
                out = EvalOutcome([Verdict("compile", Status.PASS, "compiled")], infra_error=NO_GPU)
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
