"""One evaluation in the judge process: warm up (torch, the CUDA context, the runner), load the candidate,
check every config against the judge's references, then time the candidate and, with its runner stopped,
the null loop and the baselines. Every step lands in the result file as it happens.

Lazy imports: torch, inside the methods on purpose: the runner is spawned first, so the two processes import
torch and start CUDA at the same time.
"""

from __future__ import annotations

import os
import time
import traceback
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from engine import procs
from engine.harness import numerics
from engine.harness.device_info import gpu_info
from engine.harness.runtimes import runtime_for
from engine.pipeline import analysis, wire
from engine.pipeline import messages as msg
from engine.pipeline.judge_configs import Prepared, composer, footprint, plan_message, prepare, reference_outputs
from engine.pipeline.judge_memory import CANDIDATE_SLACK, config_share, memory_blame, runner_memory_excuse
from engine.pipeline.judge_result import DeviceInfo
from engine.pipeline.judge_runner import RunnerLink
from engine.pipeline.judge_timer import LocalTimer
from engine.pipeline.judge_timing import TimingJudge
from engine.pipeline.types import NO_GPU, CorrectnessResult, IntegrityResult, JudgeRequest, TimerSpec
from engine.tasks.model import Task, TaskConfig

if TYPE_CHECKING:
    from engine.harness.runtimes.base import TaskRuntime
    from engine.pipeline.judge import ResultFile

SETTLE_MS = 20.0        # the pause before the async-completeness comparison of a checked call
STANDBY_START_S = 180.0  # how long a standby judge's runner may take to come up before any request


class Judge:
    """One evaluation. Started cold (request first) or warm (`warm_up` before the request is `attach`ed)."""

    def __init__(self, timer: TimerSpec):
        self.timer = timer
        self.req: JudgeRequest = None  # type: ignore[assignment]  # set by attach
        self.out: ResultFile = None    # type: ignore[assignment]
        self.task: Task | None = None
        self.deadline = time.monotonic() + STANDBY_START_S
        self.runner = RunnerLink(timer)
        self.local: LocalTimer | None = None
        self.t0 = time.monotonic()
        self.device: DeviceInfo | None = None
        self.numerics: numerics.Numerics | None = None   # as the judge runs (and its runner starts)
        self.has_gpu = False
        self.not_up: str | None = None     # why the runner did not come up, if it did not
        self.timing_since_us = 0           # wall clock (us) when the timing phase began: NVML's window for it
        self.candidate_seen: set[int] = set()   # every pid of the runner's tree seen while it was timed
        self.held: dict[str, int] = {}   # per config the runner holds: the GPU memory that is its due (config_share)

    def attach(self, req: JudgeRequest, out: ResultFile) -> None:
        if req.timer != self.timer:
            raise RuntimeError(f"this judge runs timer {self.timer}, the request names {req.timer}")
        self.req, self.out = req, out
        self.task = Task.from_json(req.task)
        self.deadline = time.monotonic() + req.deadline_s
        self.t0 = time.monotonic()

    @property
    def candidate_share(self) -> int:
        """What the candidate's side may hold on the GPU now without that being its doing (judge_memory)."""
        return sum(self.held.values()) + CANDIDATE_SLACK

    def spent(self, phase: str, since: float) -> float:
        """Add the time since `since` to a phase of the result's `seconds` (where an evaluation's time goes)."""
        now = time.monotonic()
        sec = self.out.data.seconds
        sec[phase] = round(sec.get(phase, 0.0) + now - since, 3)
        return now

    def warm_up(self, pin_arena: bool = False) -> None:
        """Everything that needs no request: torch and its CUDA context here, the runner up to its hello;
        `pin_arena`: the arena's whole slot page-locked on this side too."""
        import torch
        numerics.apply(numerics.JUDGE)   # the runner applies the same before the candidate is imported
        self.numerics = numerics.current()
        self.device = DeviceInfo(**gpu_info())
        self.has_gpu = torch.cuda.is_available()
        if self.has_gpu:
            torch.zeros(1, device="cuda")   # the context, now rather than inside the first measurement
            self.local = LocalTimer(self.timer.so_path, self.timer.module_name)
            arena = self.runner.process.arena if self.runner.process is not None else None
            if arena is not None:
                arena.pinner = self.local.mod
                if pin_arena:
                    arena.slot(arena.capacity)
        self.not_up = self.runner.up(self.deadline)

    def note_forgery(self) -> None:
        """A record the helper did not sign arrived at any point (even between jobs): the stream is void."""
        forged = self.runner.forged
        if forged and self.req.integrity:
            self.out.data.integrity["@result-channel"] = analysis.fail(analysis.FORGERY, forged)
            self.out.data.error = self.out.data.error or f"the result channel was forged: {forged}"

    def run(self) -> None:
        """The evaluation of the attached request, on a warmed-up judge."""
        import torch
        assert self.task is not None
        self.out.data.device = self.device
        self.out.data.numerics = self.numerics
        self.out.data.jail = self.runner.jail_report
        if not self.has_gpu:
            self.out.data.error = NO_GPU
            return
        if self.not_up:
            self.out.data.error = self.not_up
            return
        device = torch.device("cuda")
        self.out.progress("load")
        runtime = runtime_for(self.task, self.req.direction)
        t = self.spent("task_setup", self.t0)
        why = self.runner.load(self.req.candidate, self.req.direction, self.deadline)
        self.spent("candidate_load", t)
        if why:
            self.out.data.error = why
            return
        wanted = self.req.configs
        configs = [c for c in self.task.configs if not wanted or c.name in wanted]
        tol = analysis.Tolerance(runtime.spec.tolerance.atol, runtime.spec.tolerance.rtol,
                                 runtime.spec.max_mismatch_fraction)
        prepared: dict[str, Prepared] = {}
        all_ok = True
        assert self.local is not None
        decode = self.runner.decoder(self.local)
        for cfg in configs:
            self.out.progress("correctness", cfg.name)
            t0 = time.monotonic()
            try:
                prep = prepare(runtime, cfg, self.req.trials, device)
                # what the reference left cached (cuDNN's workspaces can take most of the GPU) goes back before
                # the candidate runs beside this process: only its inputs and reference outputs stay held
                torch.cuda.empty_cache()
                t = self.spent("reference", t0)
            except torch.OutOfMemoryError:
                raise   # the judge's own memory, not the task's code: judge.py reports it as unmeasured
            except Exception as exc:  # noqa: BLE001 - the task's own code: a task problem, named as such
                self.out.data.error = (f"the task's reference failed on config {cfg.name}: {type(exc).__name__}: "
                                       f"{str(exc).strip()[:600]}")
                return
            header, tensors = plan_message(prep)
            self.held[cfg.name] = config_share(footprint(prep), len(prep.variants))
            self.runner.expected_outputs = reference_outputs(prep)
            reply = self.runner.configure(header, tensors, self.deadline)
            t = self.spent("send_inputs", t)
            if not isinstance(reply, msg.Configured):   # an error, or a reply forged or garbled (msg.Garbled)
                if isinstance(reply, msg.Error) and self._left_unmeasured(reply.message or "", cfg.name,
                                                                          "while the runner took the inputs of"):
                    return
                self.held.pop(cfg.name, None)
                self.out.data.correctness[cfg.name] = CorrectnessResult(
                    False, f"the candidate could not be set up: {msg.explain(reply)}")
                all_ok = False
                self.out.write()
                continue
            k = len(prep.variants)
            job, done = self.runner.run_job(cfg.name, {"mode": "check", "schedule": list(range(k)) * 2,
                                                       "flush": True, "probe_inputs": True, "settle_ms": SETTLE_MS},
                                            decode, self.deadline)
            compose = composer(runtime, prep)
            corr, integ = compared(cfg.name, partial(analysis.judge_check, job, [v.ref for v in prep.variants],
                                                     compose, tol, [v.seed for v in prep.variants]),
                                   self.out.data.traces)
            self.spent("check", t)
            if self._call_left_unmeasured(job, cfg.name, "while the candidate ran", integ.ok):
                return
            corr.seconds = round(time.monotonic() - t0, 3)
            self.out.data.correctness[cfg.name] = corr
            if self.req.integrity:
                self.out.data.integrity[cfg.name] = integ
            all_ok &= corr.ok and (integ.ok or not self.req.integrity)
            self.out.write()
            if job.forged:
                self.out.data.error = f"the result channel was forged during config {cfg.name}: {job.forged}"
                return
            if (fatal := msg.fatal_reason(done)) is not None:
                self.out.data.error = f"CUDA error after config {cfg.name}: {fatal}"
                return
            if self.req.timing and all_ok and self._timed(cfg.name):
                prepared[cfg.name] = prep
            else:  # nothing more runs on this config (nor, once one failed, on any kept for timing): free
                # their tensors on both sides, a config can take GBs
                for name in [cfg.name] if all_ok else [*prepared, cfg.name]:
                    self.runner.drop(name, self.deadline)
                    self.held.pop(name, None)
                if not all_ok:
                    prepared.clear()
            del job, prep, compose, header, tensors
            if cfg.name not in prepared:   # give what it held back to the GPU: it may be shared with other work
                torch.cuda.empty_cache()
        if not (self.req.timing and all_ok):
            return
        self._time(configs, prepared, runtime, tol, decode)

    def _time(self, configs: list[TaskConfig], prepared: dict[str, Prepared], runtime: TaskRuntime,
              tol: analysis.Tolerance, decode: Callable[[wire.Record, int], Any]) -> None:
        """The timing phase, on the configs that passed the checks."""
        # The candidate first, on every timed config; then its runner is stopped (with anything it left
        # running) before the judge times the null loop and the baselines, so no candidate code shares the
        # GPU with a baseline (and none can slow one down for this or, through the session, later candidates).
        jobs: dict[str, tuple[analysis.Job, msg.Answer | None]] = {}
        self.timing_since_us = time.time_ns() // 1000
        for cfg in configs:
            if not self._timed(cfg.name):
                continue
            self._note_candidate_side()
            self.out.progress("timing", cfg.name)
            t = time.monotonic()
            p = self.req.timing_params
            jobs[cfg.name] = self.runner.run_job(cfg.name, {"mode": "time", "warmup": p.warmup,
                                                            "min_iters": p.min_iters, "max_iters": p.max_iters,
                                                            "budget_s": p.budget_s, "checks": p.checks,
                                                            "flush": p.flush_l2}, decode, self.deadline)
            self.spent("timing", t)
            job, done = jobs[cfg.name]
            if self._call_left_unmeasured(job, cfg.name, "while the candidate was timed on"):
                return   # no timing is kept: judge.py closes the runner
            if job.forged:
                self.out.data.error = f"the result channel was forged while timing {cfg.name}: {job.forged}"
            elif (fatal := msg.fatal_reason(done)) is not None:
                self.out.data.error = f"CUDA error while timing {cfg.name}: {fatal}"
            if self.out.data.error:
                break
        self._note_candidate_side()
        self.close()
        t = time.monotonic()
        assert self.local is not None
        timing = TimingJudge(self.req, self.local, self.out.data)
        for name, (job, _) in jobs.items():
            self.out.progress("baselines", name)
            self.out.data.timing[name] = timing.verdict(runtime, prepared[name], tol, job)
            self.out.write()
        self.spent("baselines", t)

    def _left_unmeasured(self, error: str, config: str, when: str) -> bool:
        """Whether a config that failed for want of GPU memory while the GPU's other users held more of it than the
        candidate's side leaves the candidate unmeasured (evaluate() judges it once more) instead of failed."""
        blame = runner_memory_excuse(error, self.out.data.failed_already(), memory_blame)
        if blame is None:
            return False
        self.out.data.unmeasured = (f"the GPU's memory ran out {when} config {config}, while other processes held "
                                    f"more of it than the candidate{blame.figures}; not a verdict on the kernel")
        return True

    def _call_left_unmeasured(self, job: analysis.Job, config: str, when: str, integrity_ok: bool = True) -> bool:
        """_left_unmeasured for a job whose candidate call raised, where memory alone could excuse it
        (`excusable_call_error`)."""
        error = excusable_call_error(job, integrity_ok)
        return bool(error) and self._left_unmeasured(error, config, when)

    def _note_candidate_side(self) -> None:
        # NVML's samples name processes after they end; these are the candidate's, never "another user"
        self.candidate_seen.update(procs.descendants(os.getpid()))

    def _timed(self, name: str) -> bool:
        return not self.req.timing_configs or name in self.req.timing_configs

    def close(self) -> None:
        """Stop the runner (once): after the candidate's last job, and whatever happens."""
        arena = self.runner.process.arena if self.runner.process is not None else None
        if arena is not None and self.out is not None:  # copies through the shared arena, within their phases
            self.out.data.seconds.update({f"arena_{k}": round(v, 3) for k, v in arena.seconds.items()})
        self.runner.close()


def excusable_call_error(job: analysis.Job, integrity_ok: bool) -> str:
    """The error of a job whose candidate call raised, when nothing else in the job stands against the candidate;
    else "". A forged record stream, an integrity check this config already failed, or an output the harness
    could not copy (the error's place "output", or the helper's: its size is the candidate's doing) is never
    excused, whatever the error says."""
    if job.forged or not integrity_ok or job.error_where != "call":
        return ""
    return job.error


def compared(name: str, check: Callable[[], tuple[CorrectnessResult, IntegrityResult]],
             traces: dict[str, str]) -> tuple[CorrectnessResult, IntegrityResult]:
    """A config's comparison. Where it fails it is kbench's own failure, named as such with its trace kept, not
    a verdict on the kernel; but the judge's own GPU memory running out (seen with five evaluations on one H100)
    propagates: judge.py decides whose fault that is (engine/pipeline/judge_memory.py)."""
    import torch
    try:
        return check()
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - kbench's own failure: say so, keep the trace, go on
        traces[name] = traceback.format_exc(limit=12)[-6000:]
        return CorrectnessResult(False, f"the judge could not compare config {name} ({type(exc).__name__}: "
                                        f"{str(exc).strip()[:400]}); a kbench failure, not a verdict on the "
                                        "kernel"), IntegrityResult(True)
