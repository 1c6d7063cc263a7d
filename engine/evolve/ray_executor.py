"""Evaluations on a Ray cluster, behind the same `Evaluator` protocol as the local pipeline.

    submit ─▶ Ray CPU task: compile into that node's cache ─▶ the build entry packed (engine.harness.build_archive)
           ─▶ Ray GPU task (one GPU): unpack the entry into the GPU node's cache, then the sandboxed check +
              time of engine.pipeline.evaluate, exactly as a local GPU worker runs it ─▶ EvalOutcome as JSON

The task travels as JSON plus its reference files (engine.tasks.portable) and the candidate as its files, so
a node needs kbench's Python dependencies and a CUDA toolkit, not the workspace or the task folder; with
`ship_code` the driver's `engine/` package goes along in the job's runtime_env. Builds target the GPUs'
architectures, asked of one GPU node at start-up, so a compile node's entry is a cache hit on the GPU node
when their toolchains agree (otherwise the GPU node simply compiles again).

Faults. Every task runs with Ray's own retries off; this executor retries instead, so it can tell the two
kinds of failure apart. A kernel that hangs, faults or corrupts memory is caught by the sandbox inside the
task and comes back as a `fail` verdict like anywhere else. A Ray error (the worker process or its node
died, an object was lost, the task raised because the node is misconfigured) is the machinery's fault: the
evaluation is run again, up to `retries` more times, wherever Ray schedules it (a dead node has left the
cluster by then), and after that the outcome carries `infra_error`, which the loop records as an
`infrastructure_failure` event, not a verdict, and which a resumed session evaluates again.

Import this module only where Ray is installed (`pip install 'kbench[ray]'`); `make_evaluator` says so
plainly when it is not.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from engine.candidates import Candidate
from engine.evolve.outcome import PROFILE_STAGE, EvalOutcome, StageCallback, Submission
from engine.evolve.worker_fns import compile_verdict
from engine.harness.build_result import BuildSummary
from engine.tasks.model import Task
from engine.tasks.portable import pack_task, unpack_task
from engine.verdict import Status, Verdict

try:
    import ray
    import ray.exceptions
except ImportError as exc:  # pragma: no cover - exercised where ray is missing
    raise ImportError("the Ray executor needs Ray: pip install 'kbench[ray]' (or pip install ray)") from exc


# ------------------------------------------------------------------------------- on the workers


def _worker_cache(cache_root: str | None) -> Path:
    from engine.pipeline.evaluate import default_cache_root
    return Path(cache_root) if cache_root else default_cache_root()


def _where() -> dict[str, Any]:
    ctx = ray.get_runtime_context()
    return {"node": ctx.get_node_id(), "host": os.uname().nodename, "pid": os.getpid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def probe_job() -> dict[str, Any]:
    """On a GPU node: the architectures builds should target, and what the node is."""
    from engine.harness.toolchain import ToolchainError, detect
    out: dict[str, Any] = {"where": _where()}
    try:
        tc = detect()
        out.update(archs=";".join(tc.archs), toolchain_key=tc.key())
    except ToolchainError as exc:
        out["error"] = str(exc)
    return out


def build_job(candidate_json: dict[str, Any], cache_root: str | None, timeout_s: float, archs: str | None,
              build_fn: Callable[..., dict[str, Any]] | None) -> dict[str, Any]:
    """Compile (or find in this node's cache) and pack the entry for the GPU node. Never raises for a bad
    candidate: the compile verdict says what went wrong."""
    from engine.harness.build import build_candidate, entry_dir
    from engine.harness.build_archive import pack_entry
    from engine.harness.toolchain import ToolchainError, detect

    t0 = time.time()
    cand = Candidate.from_json(candidate_json)
    if build_fn is not None:            # tests: a stand-in compiler
        res = build_fn(candidate_json, str(_worker_cache(cache_root)), timeout_s)
        return {"build": res, "archive": None, "toolchain_key": "", "where": _where(), "start": t0, "end": time.time()}
    cache = _worker_cache(cache_root)
    try:
        tc = detect(archs=archs or None)
    except ToolchainError as exc:
        return {"build": BuildSummary(ok=False, error=str(exc), seconds=time.time() - t0).to_json(),
                "archive": None, "toolchain_key": "", "where": _where(), "start": t0, "end": time.time()}
    r = build_candidate(cand, cache, tc, timeout_s=timeout_s)
    archive = None
    if r.ok and cand.format != "kernelbench":
        archive = pack_entry(entry_dir(cache, tc, cand))
    return {"build": BuildSummary.of(r).to_json(),
            "archive": archive, "toolchain_key": tc.key(), "source_hash": cand.source_hash,
            "where": _where(), "start": t0, "end": time.time()}


def _worker_inputs(packed_task: dict[str, Any], candidate_json: dict[str, Any],
                   options_json: dict[str, Any]) -> tuple[Any, Task, Candidate]:
    """(EvalOptions, task, candidate) on a worker, from what the driver shipped."""
    import tempfile

    from engine.pipeline.evaluate import EvalOptions

    known = {f.name for f in fields(EvalOptions)}
    opts = EvalOptions(**{k: v for k, v in options_json.items() if k in known},
                       cache_root=_worker_cache(options_json.get("cache_root")))
    task = unpack_task(packed_task, Path(tempfile.gettempdir()) / "kbench-ray-tasks")
    return opts, task, Candidate.from_json(candidate_json)


def gpu_job(packed_task: dict[str, Any], candidate_json: dict[str, Any], direction: str,
            options_json: dict[str, Any], built: dict[str, Any] | None,
            gpu_fn: Callable[..., Any] | None) -> dict[str, Any]:
    """Install the shipped build, then check and time the candidate on this task's GPU. The outcome as JSON,
    with where it ran and when."""
    from engine.evolve.worker_fns import default_gpu

    t0 = time.time()
    opts, task, cand = _worker_inputs(packed_task, candidate_json, options_json)
    note = ""
    if built and built.get("archive"):
        from engine.harness.build_archive import unpack_entry
        from engine.harness.toolchain import detect
        key = detect(archs=options_json.get("archs") or None).key()
        if key == built.get("toolchain_key"):
            unpack_entry(built["archive"], opts.cache_root, key, cand.source_hash)
        else:
            note = "the compile node's toolchain differs from this GPU node's: compiled again here"
    out = (gpu_fn or default_gpu)(task, cand, direction, opts)
    if note:
        out.data["ray_note"] = note
    return {"outcome": out.to_json(), "where": _where(), "start": t0, "end": time.time()}


def profile_job(packed_task: dict[str, Any], candidate_json: dict[str, Any], direction: str,
                options_json: dict[str, Any], device: dict[str, Any] | None,
                profile_fn: Callable[..., Any] | None) -> dict[str, Any]:
    """The profile stage alone for a candidate evaluated before (a new best), on this task's GPU: the build
    comes from this node's cache, or is compiled here. The verdict as JSON, with where it ran and when."""
    from engine.evolve.worker_fns import default_profile

    t0 = time.time()
    opts, task, cand = _worker_inputs(packed_task, candidate_json, options_json)
    v = (profile_fn or default_profile)(task, cand, direction, opts, device)
    return {"verdict": v.to_json(), "where": _where(), "start": t0, "end": time.time()}


# ---------------------------------------------------------------------------------- the driver


@dataclass
class _Job(Submission):
    phase: str = "build"                 # build -> gpu; or profile (alone: its future's result is a Verdict)
    built: dict[str, Any] | None = None
    ref: Any = None
    attempts: list[dict[str, Any]] = field(default_factory=list)   # failed attempts: where and why
    build_s: float | None = None
    cancelled: bool = False
    settled: bool = False                # counted out of RayExecutor._outstanding
    device: dict[str, Any] | None = None     # profile: the evaluation's device (its GPU model's peaks)


_OPTION_FIELDS_NOT_SHIPPED = ("cache_root", "gpu")


class RayExecutor:
    """Evaluate candidates on a Ray cluster: compile tasks on CPUs, one GPU per check-and-time task."""

    def __init__(self, task: Task, direction: str, options: Any = None, *, address: str | None = None,
                 retries: int = 2, compile_on_cluster: bool = True, build_cpus: float = 1.0,
                 gpu_resources: dict[str, Any] | None = None, ship_code: bool | None = None,
                 build_fn: Callable[..., dict[str, Any]] | None = None, gpu_fn: Callable[..., Any] | None = None,
                 init_kwargs: dict[str, Any] | None = None, poll_s: float = 0.1,
                 profile_fn: Callable[..., Any] | None = None):
        from engine.pipeline.evaluate import EvalOptions

        self.task, self.direction = task, direction
        self.options = options or EvalOptions()
        self.retries = max(0, int(retries))
        self.compile_on_cluster = compile_on_cluster
        self.build_fn, self.gpu_fn, self.profile_fn = build_fn, gpu_fn, profile_fn
        self.gpu_resources = dict(gpu_resources or {"num_gpus": 1})
        self.poll_s = poll_s
        self._owns_ray = False
        if not ray.is_initialized():
            kw: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False, **(init_kwargs or {})}
            if ship_code if ship_code is not None else bool(address):
                kw.setdefault("runtime_env", {"py_modules": [str(Path(__file__).resolve().parents[1])]})
            try:
                _check_reachable(address)
                ray.init(**kw)
            except Exception as exc:  # noqa: BLE001 - say which cluster and why, in one paragraph
                from engine.errors import KbenchError
                where = address or "a new local Ray instance"
                raise KbenchError(f"cannot connect to the Ray cluster ({where}): {type(exc).__name__}: {exc}") from None
            self._owns_ray = True
        self._packed_task = pack_task(task)
        self._options_json = {f.name: getattr(self.options, f.name) for f in fields(self.options)
                              if f.name not in _OPTION_FIELDS_NOT_SHIPPED}
        self._options_json["timing_configs"] = list(self.options.timing_configs or []) or None
        self._options_json["configs"] = list(self.options.configs or []) or None
        self._options_json["baselines"] = list(self.options.baselines)
        resources = ray.cluster_resources()
        gpu_key = next(iter(self.gpu_resources.get("resources", {}) or {}), None)
        self.gpus = int(resources.get(gpu_key, 0) if gpu_key else resources.get("GPU", 0))
        self.cpus = int(resources.get("CPU", 0))
        if self.gpus < 1:
            from engine.errors import KbenchError
            self.close()
            raise KbenchError(f"the Ray cluster has no GPU to evaluate on (its resources: {dict(resources)}); "
                              "start its GPU nodes with `ray start --num-gpus N`")
        self.archs = ""
        self._remote_build = ray.remote(build_job).options(num_cpus=build_cpus, max_retries=0)
        self._remote_gpu = ray.remote(gpu_job).options(max_retries=0, **self.gpu_resources)
        self._remote_profile = ray.remote(profile_job).options(max_retries=0, **self.gpu_resources)
        if self.build_fn is None and self.gpu_fn is None:
            self._probe()
        self._options_json["archs"] = self.archs or None
        self._lock = threading.Lock()
        self._jobs: dict[Any, _Job] = {}          # ObjectRef -> job
        self._waiting: list[_Job] = []            # submitted, not yet sent to Ray (capacity)
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

    def _probe(self) -> None:
        probe = ray.remote(probe_job).options(max_retries=1, **self.gpu_resources)
        try:
            info = ray.get(probe.remote(), timeout=300)
        except Exception as exc:  # noqa: BLE001
            from engine.errors import KbenchError
            self.close()
            raise KbenchError(f"no GPU node of the Ray cluster answered: {type(exc).__name__}: {exc}") from None
        if info.get("error"):
            from engine.errors import KbenchError
            self.close()
            raise KbenchError(f"the Ray GPU node {info['where'].get('host')} cannot compile: {info['error']}")
        self.archs = str(info.get("archs") or "")

    @property
    def capacity(self) -> int:
        return 2 * self.gpus + max(1, self.cpus - self.gpus)

    # -- Evaluator --------------------------------------------------------------------------------------

    def submit(self, candidate: Candidate, on_stage: StageCallback | None = None) -> Future[EvalOutcome]:
        if self._closed:
            raise RuntimeError("executor is closed")
        job = _Job(candidate, on_stage, Future(), time.time())
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
        job = _Job(candidate, None, Future(), time.time(), phase="profile", device=dict(device or {}))
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

    def _drop(self, jobs: list[tuple[Any, _Job]]) -> int:
        """Cancel these Ray tasks and end their futures cancelled (the loop re-queues them on resume)."""
        for ref, j in jobs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or gone: nothing to cancel
                pass
            j.cancelled = True
            self._settle(j)
            _cancel(j.future)
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

    def _launch(self, job: _Job) -> None:
        cj = job.candidate.to_json()
        if job.phase == "profile":
            ref = self._remote_profile.remote(self._packed_task, cj, self.direction, self._options_json, job.device,
                                              self.profile_fn)
        elif job.phase == "build" and self.compile_on_cluster:
            ref = self._remote_build.remote(cj, None, float(getattr(self.options, "build_timeout_s", 600.0)),
                                            self.archs or None, self.build_fn)
        else:
            job.phase = "gpu"
            ref = self._remote_gpu.remote(self._packed_task, cj, self.direction, self._options_json, job.built,
                                          self.gpu_fn)
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

    def _landed(self, job: _Job, result: dict[str, Any]) -> None:
        if job.phase == "profile":
            where = result["where"]
            with self._lock:
                self._busy.setdefault(f"{where.get('host')}:{where.get('cuda_visible_devices')}", []).append(
                    (float(result["start"]), float(result["end"])))
            self._finish_profile(job, Verdict.from_json(result["verdict"]))
            return
        if job.phase == "build":
            with self._lock:
                self._build_busy.append((float(result["start"]), float(result["end"])))
            build = BuildSummary.from_json(result["build"])
            job.build_s = build.seconds
            v = compile_verdict(build)
            job.notify(v)
            if v.status != Status.PASS:
                self._finish(job, EvalOutcome([v], build_s=job.build_s, data={"ray": {"build": result["where"]}}))
                return
            job.built = {"archive": result.get("archive"), "toolchain_key": result.get("toolchain_key"),
                         "build": build.to_json()}
            job.phase = "gpu"
            self._launch(job)
            return
        where = result["where"]
        gpu_id = f"{where.get('host')}:{where.get('cuda_visible_devices')}"
        with self._lock:
            self._busy.setdefault(gpu_id, []).append((float(result["start"]), float(result["end"])))
        out = EvalOutcome.from_json(result["outcome"])
        verdicts = out.verdicts
        if job.built is not None:
            cv = compile_verdict(BuildSummary.from_json(job.built["build"]))
            rest = [x for x in verdicts if not (x.stage == "compile" and x.status == Status.PASS)]
            verdicts = rest if any(x.stage == "compile" for x in rest) else [cv] + rest
        for x in verdicts:
            if x.stage != "compile" or job.built is None:
                job.notify(x)
        out.verdicts = verdicts
        out.build_s = job.build_s
        out.gpu_s = float(result["end"]) - float(result["start"])
        out.attempts = len(job.attempts) + 1
        out.data["ray"] = {"gpu": where, "failed_attempts": job.attempts} if job.attempts else {"gpu": where}
        self._finish(job, out)

    def _attempt_failed(self, job: _Job, exc: BaseException) -> None:
        reason = _describe(exc)
        job.attempts.append({"phase": job.phase, "error": reason, "at": time.time()})
        if len(job.attempts) <= self.retries and not self._abandon:
            with self._lock:
                self._retried += 1
            _notify_log(job, reason)
            if job.phase == "gpu" and job.built is None and self.compile_on_cluster:
                job.phase = "build"
            self._launch(job)
            return
        if job.phase == "profile":      # feedback, not a judgement: a skipped verdict says what happened
            self._finish_profile(job, Verdict(PROFILE_STAGE, Status.SKIPPED, (
                f"the profile task was lost on all {len(job.attempts)} attempt(s); last: {reason}")))
            return
        with self._lock:
            self._infra += 1
        why = (f"{job.phase} task lost on all {len(job.attempts)} attempt(s); last: {reason}")
        self._finish(job, EvalOutcome([], build_s=job.build_s, infra_error=why, attempts=len(job.attempts),
                                      data={"ray": {"failed_attempts": job.attempts}}))

    def _abandon_all(self, reason: str) -> None:
        """No Ray any more: every outstanding evaluation ends as an infrastructure failure (re-run on resume)."""
        with self._lock:
            jobs = list(self._jobs.values())
            self._jobs.clear()
            self._infra += sum(1 for j in jobs if j.phase != "profile")
        for job in jobs:
            if job.phase == "profile":
                self._finish_profile(job, Verdict(PROFILE_STAGE, Status.SKIPPED, reason))
                continue
            self._finish(job, EvalOutcome([], build_s=job.build_s, infra_error=reason, attempts=len(job.attempts) + 1))

    def _settle(self, job: _Job) -> None:
        with self._lock:
            if not job.settled:
                job.settled = True
                self._outstanding -= 1

    def _finish_profile(self, job: _Job, verdict: Verdict) -> None:
        with self._lock:
            self._profiled += 1
        self._settle(job)
        if not job.future.done():
            job.future.set_result(verdict)

    def _finish(self, job: _Job, out: EvalOutcome) -> None:
        out.seconds = out.seconds or (time.time() - job.submitted)
        with self._lock:
            self._done += 1
            self._last = time.time()
        self._settle(job)
        if not job.future.done():
            job.future.set_result(out)


def _check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """Ray keeps retrying an address nobody answers for minutes; a plain TCP connect says it at once."""
    import socket

    if not address or address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return                     # a form we do not parse: let Ray judge it
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {host}:{port} ({exc.strerror or exc})") from None


def _notify_log(job: _Job, reason: str) -> None:
    """Retries are not verdicts; they show up in the outcome's data and in the log of the CLI/TUI."""
    import logging
    logging.getLogger("kbench.ray").warning("%s: %s task lost (%s); retrying (attempt %d)",
                                            job.candidate.name, job.phase, reason, len(job.attempts) + 1)


def _cancel(f: Future) -> None:
    f.cancel()     # still pending (never set running): the loop sees a cancelled evaluation


def _describe(exc: BaseException) -> str:
    """One line for a Ray failure: the kind, and the first line of its message."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        kind = type(cause).__name__ if cause is not None else "RayTaskError"
        first = str(cause or exc).strip().splitlines()
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return f"{kind} in the task: {first[-1] if first else tb}"[:400]
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}"[:400]

