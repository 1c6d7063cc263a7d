"""Evaluations on a Ray cluster, behind the same `Evaluator` protocol as the local pipeline.

    submit ─▶ Ray CPU task: compile into that node's cache ─▶ the build entry packed (engine.harness.build.archive)
           ─▶ Ray GPU task (one GPU): unpack the entry into the GPU node's cache, then the sandboxed check +
              time of engine.pipeline.evaluate, exactly as a local GPU worker runs it ─▶ EvalOutcome

Requests and replies cross as the typed envelopes of engine/evolve/ray/envelopes.py.

This module is the driver's side: the executor's queue, the thread that waits on Ray and moves each
evaluation from task to task, and its statistics. The tasks themselves are engine/evolve/ray/tasks.py,
connecting and probing the cluster ray_cluster.py, and one evaluation's attempts and the retry policy for
Ray failures (which are the machinery's, never a verdict on the kernel) ray_jobs.py.

Import this module only where Ray is installed (`pip install 'kbench[ray]'`); `make_evaluator` says so
plainly when it is not.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

from engine.candidates import Candidate
from engine.errors import KbenchError
from engine.evolve.outcome import EvalOutcome, StageCallback
from engine.evolve.ray.cluster import connect, gpus_and_cpus, probe_archs
from engine.evolve.ray.envelopes import BuildReply, BuildRequest, EvalRequest, GpuReply, ProfileReply, Ran
from engine.evolve.ray.jobs import RayJob
from engine.evolve.ray.tasks import BuildFn, GpuFn, ProfileFn, build_job, gpu_job, profile_job, ray
from engine.evolve.worker_fns import compile_verdict
from engine.pipeline.eval_types import EvalOptions
from engine.tasks.model import Task
from engine.tasks.portable import pack_task
from engine.verdict import Status, Verdict


class RayExecutor:
    """Evaluate candidates on a Ray cluster: compile tasks on CPUs, one GPU per check-and-time task."""

    def __init__(self, task: Task, direction: str, options: EvalOptions | None = None, *, address: str | None = None,
                 retries: int = 2, compile_on_cluster: bool = True, build_cpus: float = 1.0,
                 gpu_resources: dict[str, Any] | None = None, ship_code: bool | None = None,
                 build_fn: BuildFn | None = None, gpu_fn: GpuFn | None = None,
                 init_kwargs: dict[str, Any] | None = None, poll_s: float = 0.1,
                 profile_fn: ProfileFn | None = None):
        self.task, self.direction = task, direction
        self.options = options or EvalOptions()
        self.retries = max(0, int(retries))
        self.compile_on_cluster = compile_on_cluster
        self.build_fn, self.gpu_fn, self.profile_fn = build_fn, gpu_fn, profile_fn
        self.gpu_resources = dict(gpu_resources or {"num_gpus": 1})
        self.poll_s = poll_s
        self._owns_ray = connect(address, ship_code, init_kwargs)
        self._packed_task = pack_task(task)
        try:
            self.gpus, self.cpus = gpus_and_cpus(self.gpu_resources)
            # stand-ins for the compiler and the GPU stage (tests) need no architectures from a GPU node
            self.archs = probe_archs(self.gpu_resources) if self.build_fn is None and self.gpu_fn is None else ""
        except KbenchError:
            self.close()      # a Ray instance this executor started goes with it
            raise
        # Ray's own retries off: a lost task comes back here, to be told apart from a verdict (ray_jobs.py)
        self._remote_build = ray.remote(build_job).options(num_cpus=build_cpus, max_retries=0)
        self._remote_gpu = ray.remote(gpu_job).options(max_retries=0, **self.gpu_resources)
        self._remote_profile = ray.remote(profile_job).options(max_retries=0, **self.gpu_resources)
        self._lock = threading.Lock()
        self._jobs: dict[Any, RayJob] = {}          # ObjectRef -> job
        self._waiting: list[RayJob] = []            # submitted, not yet sent to Ray (capacity)
        self._busy: dict[str, list[tuple[float, float]]] = {}
        self._build_busy: list[tuple[float, float]] = []
        self._first: float | None = None
        self._last: float | None = None
        self._done = 0
        self._outstanding = 0                     # submitted and not finished (in Ray or between phases)
        self._infra = 0
        self._retried = 0
        self._profiled = 0
        self._closed = False
        self._abandon = False                     # close(wait=False): no more retries
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="kbench-ray", daemon=True)
        self._thread.start()

    @property
    def capacity(self) -> int:
        return 2 * self.gpus + max(1, self.cpus - self.gpus)

    # -- Evaluator --------------------------------------------------------------------------------------

    def submit(self, candidate: Candidate, on_stage: StageCallback | None = None) -> Future[EvalOutcome]:
        if self._closed:
            raise RuntimeError("executor is closed")
        job = RayJob(candidate, on_stage, Future(), time.time())
        with self._lock:
            self._outstanding += 1
            if self._first is None:
                self._first = job.submitted
        self._launch(job)
        return job.future

    def profile(self, candidate: Candidate, *, device: dict[str, Any] | None = None) -> Future[Verdict]:
        """The profile stage alone for a candidate evaluated before, as one GPU task; its future's result is the
        `profile` Verdict (`skipped` with the reason when the task was lost on every attempt)."""
        if self._closed:
            raise RuntimeError("executor is closed")
        job = RayJob(candidate, None, Future(), time.time(), phase="profile", device=dict(device or {}))
        with self._lock:
            self._outstanding += 1
        self._launch(job)
        return job.future

    def cancel_pending(self) -> int:
        """Cancel what has not reached a GPU yet (builds in flight are cancelled too); running GPU tasks
        finish. Their futures end cancelled."""
        with self._lock:
            jobs = [(ref, j) for ref, j in self._jobs.items() if j.phase == "build"]
            for ref, _ in jobs:
                del self._jobs[ref]
        return self._drop(jobs)

    def _drop(self, jobs: list[tuple[Any, RayJob]]) -> int:
        """Cancel these Ray tasks and end their futures cancelled (the loop re-queues them on resume)."""
        for ref, j in jobs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or gone: nothing to cancel
                pass
            j.cancelled = True
            self._settle(j)
            j.future.cancel()     # still pending (never set running): the loop sees a cancelled evaluation
        return len(jobs)

    def close(self, wait: bool = True) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        if hasattr(self, "_thread"):
            if wait:
                while True:
                    with self._lock:
                        if self._outstanding <= 0:
                            break
                    time.sleep(self.poll_s)
            else:
                self._abandon = True
                with self._lock:
                    running = list(self._jobs.items())
                    self._jobs.clear()
                self._drop(running)
            self._wake.set()
            self._thread.join(5)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            first, last = self._first, self._last
            busy = {k: sum(b - a for a, b in iv) for k, iv in self._busy.items()}
            intervals = {k: list(iv) for k, iv in self._busy.items()}
            build_busy = sum(b - a for a, b in self._build_busy)
            done, infra, retried, profiled = self._done, self._infra, self._retried, self._profiled
        wall = (last - first) if first is not None and last is not None else 0.0
        return {"completed": done, "wall_s": wall, "gpu_busy_s": busy, "build_s": build_busy, "gpus": self.gpus,
                "executor": "ray", "infrastructure_failures": infra, "retries": retried, "profiled": profiled,
                "gpu_busy_fraction": (sum(busy.values()) / (wall * self.gpus)) if wall > 0 and self.gpus else None,
                "candidates_per_hour": (done * 3600.0 / wall) if wall > 0 else None, "intervals": intervals}

    # -- internals -----------------------------------------------------------------------------------------

    def _eval_request(self, job: RayJob) -> dict[str, Any]:
        return EvalRequest(self._packed_task, job.candidate, self.direction, self.options, self.archs,
                           built=job.built, device=job.device).to_json()

    def _launch(self, job: RayJob) -> None:
        if job.phase == "profile":
            ref = self._remote_profile.remote(self._eval_request(job), self.profile_fn)
        elif job.phase == "build" and self.compile_on_cluster:
            req = BuildRequest(job.candidate, self.options.build_timeout_s, self.archs)
            ref = self._remote_build.remote(req.to_json(), self.build_fn)
        else:
            job.phase = "gpu"
            ref = self._remote_gpu.remote(self._eval_request(job), self.gpu_fn)
        job.ref = ref
        with self._lock:
            self._jobs[ref] = job
        self._wake.set()

    def _poll(self) -> None:
        while True:
            with self._lock:
                refs = list(self._jobs)
                idle = self._outstanding <= 0
            if not refs:
                if self._closed and idle:
                    return
                self._wake.wait(self.poll_s)
                self._wake.clear()
                continue
            try:
                ready, _ = ray.wait(refs, num_returns=1, timeout=self.poll_s)
            except BaseException as exc:  # noqa: BLE001 - Ray shut down or the cluster went away
                if not ray.is_initialized() or isinstance(exc, SystemExit):
                    self._abandon_all(f"the Ray connection ended: {type(exc).__name__}: {exc}")
                    return
                ready = refs          # each job fails over (or gives up) through ray.get below
            for ref in ready:
                with self._lock:
                    job = self._jobs.pop(ref, None)
                if job is None or job.cancelled:
                    continue
                try:
                    self._landed(job, ray.get(ref))
                except Exception as exc:  # noqa: BLE001 - a Ray error: the machinery failed, not the kernel
                    self._attempt_failed(job, exc)

    def _landed(self, job: RayJob, result: dict[str, Any]) -> None:
        """A task's reply (its envelope's JSON); a malformed one raises EnvelopeError: a failed attempt (_poll)."""
        if job.phase == "profile":
            profiled = ProfileReply.from_json(result)
            self._gpu_busy(profiled.ran)
            self._finish_profile(job, profiled.verdict)
            return
        if job.phase == "build":
            reply = BuildReply.from_json(result)
            with self._lock:
                self._build_busy.append(reply.ran.interval)
            job.build_s = reply.built.build.seconds
            v = compile_verdict(reply.built.build)
            job.notify(v)
            if v.status != Status.PASS:
                where = reply.ran.where.to_json()
                self._finish(job, EvalOutcome([v], build_s=job.build_s, data={"ray": {"build": where}}))
                return
            job.built = reply.built
            job.phase = "gpu"
            self._launch(job)
            return
        evaluated = GpuReply.from_json(result)
        self._gpu_busy(evaluated.ran)
        self._finish(job, job.gpu_outcome(evaluated))

    def _gpu_busy(self, ran: Ran) -> None:
        """Count a GPU task's time to the GPU it ran on (host and CUDA_VISIBLE_DEVICES name it)."""
        with self._lock:
            self._busy.setdefault(ran.where.gpu_id, []).append(ran.interval)

    def _attempt_failed(self, job: RayJob, exc: BaseException) -> None:
        reason = job.failed(exc)
        if not self._abandon and job.retry(reason, self.retries, self.compile_on_cluster):
            with self._lock:
                self._retried += 1
            self._launch(job)
            return
        if job.phase != "profile":
            with self._lock:
                self._infra += 1
        self._end(job, job.lost(reason))

    def _abandon_all(self, reason: str) -> None:
        """No Ray any more: every outstanding evaluation ends as an infrastructure failure (re-run on resume)."""
        with self._lock:
            jobs = list(self._jobs.values())
            self._jobs.clear()
            self._infra += sum(1 for j in jobs if j.phase != "profile")
        for job in jobs:
            self._end(job, job.abandoned(reason))

    def _end(self, job: RayJob, end: EvalOutcome | Verdict) -> None:
        if isinstance(end, Verdict):       # a profile job's result is its verdict
            self._finish_profile(job, end)
        else:
            self._finish(job, end)

    def _settle(self, job: RayJob) -> None:
        with self._lock:
            if not job.settled:
                job.settled = True
                self._outstanding -= 1

    def _finish_profile(self, job: RayJob, verdict: Verdict) -> None:
        with self._lock:
            self._profiled += 1
        self._settle(job)
        if not job.future.done():
            job.future.set_result(verdict)

    def _finish(self, job: RayJob, out: EvalOutcome) -> None:
        out.seconds = out.seconds or (time.time() - job.submitted)
        with self._lock:
            self._done += 1
            self._last = time.time()
        self._settle(job)
        if not job.future.done():
            job.future.set_result(out)

