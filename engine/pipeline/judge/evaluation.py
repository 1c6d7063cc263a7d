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
from typing import TYPE_CHECKING, Any, Callable, NoReturn

from engine import procs
from engine.gpu_wait import NO_GPU
from engine.harness import numerics
from engine.harness.device_info import gpu_info
from engine.harness.runtimes import runtime_for
from engine.pipeline.judge import analysis
from engine.pipeline.judge.analysis import tolerance
from engine.pipeline.judge.configs import (Prepared, composer, footprint, plan_message, prepare, reference_outputs,
                                           upstream_trial_seeds)
from engine.pipeline.judge.digest import Hasher, digest_call, host_hash
from engine.pipeline.judge.fresh import Fresh, FreshReferences, choose
from engine.pipeline.judge.memory import CANDIDATE_SLACK, config_share, memory_blame, runner_memory_excuse
from engine.pipeline.judge.parking import moved
from engine.pipeline.judge.runner_link import RunnerLink
from engine.pipeline.judge.timer import LocalTimer
from engine.pipeline.judge.timing_phase import TimingPhase
from engine.pipeline.protocol import messages as msg
from engine.pipeline.protocol import wire
from engine.pipeline.protocol.arena import PIN_UP_FRONT
from engine.pipeline.protocol.result import ConfigMemory, DeviceInfo, Stop
from engine.pipeline.protocol.types import CorrectnessResult, IntegrityResult, JudgeRequest, TimerSpec
from engine.tasks.model import Cost, Task, TaskConfig

if TYPE_CHECKING:
    from engine.harness.runtimes.base import TaskRuntime
    from engine.pipeline.judge.main import ResultFile

SETTLE_MS = 20.0        # the pause before the async-completeness comparison of a checked call
STANDBY_START_S = 180.0  # how long a standby judge's runner may take to come up before any request
# Configs to time stay prepared on both sides from their check to their timing while their shares
# (memory.config_share) add up to at most this fraction of the GPU's memory; larger ones are freed after
# their check and prepared again for their timing, so one problem's judge and runner hold one large config at a
# time (KernelBench level 1 problem 23 held three 12 GiB configs on each side before). Nor more than
# KEEP_MAX_BYTES whatever the GPU: keeping saves a preparation that matters for small configs (milliseconds of
# work beside fixed costs), while a large one's preparation is dwarfed by its timing and keeping it would make
# the runner hold several problems' worth (a 1 GiB softmax's runner held 3 GiB of other configs).
KEEP_FOR_TIMING = 0.125
KEEP_MAX_BYTES = 1 << 30


class Judge(TimingPhase):
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
        self.hasher: Hasher = host_hash   # how outputs are hashed once freed (the helper's kernel, from `run`)
        # output records to tensors: a check job's at once, a timing job's held on the host (RunnerLink.decoder)
        self.decode: Callable[[wire.Record, int], Any] | None = None
        self.held_decode: Callable[[wire.Record, int], Any] | None = None
        self.seeds: tuple[int, ...] | None = None   # the variants' seeds where the request fixes them (upstream)
        # when each step of the warm-up was done, in seconds since this process started (the result's `warm.*`):
        # where a judge's start goes, on the machine it runs on
        self.warm_marks: dict[str, float] = {}

    def mark(self, step: str) -> None:
        self.warm_marks[step] = round(procs.process_age(), 3)

    def warm_seconds(self) -> dict[str, float]:
        """The warm-up's marks as the result's `seconds` name them."""
        return {f"warm.{k}": v for k, v in self.warm_marks.items()}

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
        self.mark("torch")
        numerics.apply(numerics.JUDGE)   # the runner applies the same before the candidate is imported
        self.numerics = numerics.current()
        self.device = DeviceInfo(**gpu_info())
        self.has_gpu = torch.cuda.is_available()
        self.mark("device")
        if self.has_gpu:
            torch.zeros(1, device="cuda")   # the context, now rather than inside the first measurement
            self.mark("cuda")
            self.local = LocalTimer(self.timer.so_path, self.timer.module_name)
            self.mark("helper")
            arena = self.runner.process.arena if self.runner.process is not None else None
            if arena is not None:
                arena.pinner = self.local.mod
                if pin_arena:
                    arena.slot(min(arena.capacity, PIN_UP_FRONT))
                    self.mark("arena")
        self.not_up = self.runner.up(self.deadline)
        self.mark("runner_up")

    def note_forgery(self) -> None:
        """A record the helper did not sign arrived at any point (even between jobs): the stream is void."""
        forged = self.runner.forged
        if forged and self.req.integrity:
            self.out.data.integrity["@result-channel"] = analysis.fail(analysis.FORGERY, forged)
            self.out.data.error = self.out.data.error or f"the result channel was forged: {forged}"

    def run(self) -> None:
        """The evaluation of the attached request, on a warmed-up judge."""
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
        self.out.progress("load")
        if self.req.numerics is not None:   # the request's settings (the upstream mode's), here and in the runner
            numerics.apply(numerics.Numerics.from_json(self.req.numerics))
            self.numerics = self.out.data.numerics = numerics.current()
        runtime = runtime_for(self.task, self.req.direction)
        # the upstream mode: upstream's trial seeds, drawn as upstream draws them; else kbench's
        runtime.upstream_draws = self.req.upstream_draws
        self.seeds = upstream_trial_seeds(max(self.req.trials, 2)) if self.req.upstream_draws else None
        t = self.spent("task_setup", self.t0)
        why = self.runner.load(self.req.candidate, self.req.direction, self.deadline, self.req.numerics)
        self.spent("candidate_load", t)
        if why:
            self.out.data.error = why
            return
        wanted = self.req.configs
        configs = [c for c in self.task.configs if not wanted or c.name in wanted]
        tol = analysis.Tolerance(runtime.spec.tolerance.atol, runtime.spec.tolerance.rtol,
                                 runtime.spec.max_mismatch_fraction)
        assert self.local is not None
        self.hasher = self.local.hasher()
        self.decode = self.runner.decoder(self.local)
        self.held_decode = self.runner.decoder(self.local, hold=True)
        try:
            to_time = self._check_all(configs, runtime, tol)
            if to_time is not None:
                self._time(configs, to_time, runtime, tol)
        except Stop:
            return

    def _check_all(self, configs: list[TaskConfig], runtime: TaskRuntime,
                   tol: analysis.Tolerance) -> dict[str, Prepared | None] | None:
        """Check every config; the configs to time (None: nothing is timed). A config to time stays prepared on
        both sides while the configs kept add up to at most `_keep_bytes()`; a larger one is freed now and
        prepared again for its timing (None in the map)."""
        import torch
        to_time: dict[str, Prepared | None] = {}
        all_ok = True
        for cfg in configs:
            prep, ok = self._check(cfg, runtime, tol)
            all_ok &= ok
            if self.req.timing and all_ok and self._timed(cfg.name) and prep is not None:
                kept = [n for n, p in to_time.items() if p is not None] + [cfg.name]
                if sum(self.held.get(n, 0) for n in kept) <= self._keep_bytes():
                    to_time[cfg.name] = prep
                else:
                    to_time[cfg.name] = None
                    self._release(cfg.name)
            else:  # nothing more runs on this config (nor, once one failed, on any kept for timing): free both sides
                for name in [cfg.name] if all_ok else [*to_time, cfg.name]:
                    self._release(name)
                if not all_ok:
                    to_time.clear()
            del prep
            torch.cuda.empty_cache()   # what it held back to the GPU: it may be shared with other work
        return to_time if self.req.timing and all_ok else None

    def _check(self, cfg: TaskConfig, runtime: TaskRuntime, tol: analysis.Tolerance) -> tuple[Prepared | None, bool]:
        """One config's check job, its correctness and integrity recorded: (its preparation, whether it passed).
        Raises Stop where the evaluation ends here (the result says why)."""
        import torch
        self.out.progress("correctness", cfg.name)
        t0 = time.monotonic()
        torch.cuda.reset_peak_memory_stats()
        prep, reply = self._prepare(cfg, runtime)
        t = time.monotonic()
        if prep is None:   # an error, or a reply forged or garbled (msg.Garbled)
            if isinstance(reply, msg.Error):
                self._maybe_unmeasured(reply.message or "", cfg.name, "while the runner took the inputs of")
            self.out.data.correctness[cfg.name] = CorrectnessResult(
                False, f"the candidate could not be set up: {msg.explain(reply)}")
            self.out.write()
            return None, False
        refs, compose = self._references(runtime, prep), composer(runtime, prep)
        check = msg.Job(job=0, cid=cfg.name, mode="check", schedule=tuple(range(len(prep.variants))) * 2,
                        probe_inputs=True, settle_ms=SETTLE_MS)
        job, done = self.runner.run_job(check, self.decode, self.deadline,
                                        self._digester(refs, compose, tol, chained=True))
        corr, integ = compared(cfg.name, partial(analysis.judge_check, job, refs, compose, tol,
                                                 [v.seed for v in prep.variants], self.hasher), self.out.data.traces)
        self._note_memory(cfg.name, done)
        self.spent("check", t)
        if self._call_left_unmeasured(job, cfg.name, "while the candidate ran", integ.ok):
            raise Stop
        corr.seconds = round(time.monotonic() - t0, 3)
        self.out.data.correctness[cfg.name] = corr
        if self.req.integrity:
            self.out.data.integrity[cfg.name] = integ
        self.out.write()
        if job.forged:
            self._stop(f"the result channel was forged during config {cfg.name}: {job.forged}")
        if (fatal := msg.fatal_reason(done)) is not None:
            self._stop(f"CUDA error after config {cfg.name}: {fatal}")
        return prep, corr.ok and (integ.ok or not self.req.integrity)

    def _prepare(self, cfg: TaskConfig, runtime: TaskRuntime) -> tuple[Prepared | None, msg.Answer | None]:
        """A config's variants and references built here, then handed to the runner: (the preparation, None), or
        (None, the runner's answer) where it could not take them."""
        import torch
        t0 = time.monotonic()
        try:
            # variants stay on the GPU while what the judge holds stays within its share of it (req.gpu_keep)
            room = int(self.req.gpu_keep * self._gpu_bytes()) - torch.cuda.memory_allocated()
            prep = prepare(runtime, cfg, self.req.trials, torch.device("cuda"), self.seeds, park_above=max(room, 0))
            prep.fresh = self._fresh(runtime, prep)
            self.out.data.fresh[cfg.name] = prep.fresh.summary()
            if prep.mutated:   # the candidate must change these as the reference does (engine/pipeline/judge/digest.py)
                self.out.data.mutated[cfg.name] = list(prep.mutated)
            # what the reference left cached (cuDNN's workspaces can take most of the GPU) goes back before the
            # candidate runs beside this process: only its inputs and reference outputs stay held
            torch.cuda.empty_cache()
        except torch.OutOfMemoryError:
            raise   # the judge's own memory, not the task's code: judge.py weighs whose lack it was
        except Exception as exc:  # noqa: BLE001 - the task's own code: a task problem, named as such
            self._stop(f"the task's reference failed on config {cfg.name}: {type(exc).__name__}: "
                       f"{str(exc).strip()[:600]}")
        t = self.spent("reference", t0)
        header, tensors = plan_message(prep)
        size = footprint(prep)
        self.out.data.cost[cfg.name] = Cost(prep.flops, float(size))
        self.held[cfg.name] = config_share(size, len(prep.variants))
        self.out.data.memory.setdefault(cfg.name, ConfigMemory(size, len(prep.variants)))
        self.runner.expected_outputs = reference_outputs(prep)
        reply = self.runner.configure(header, tensors, self.deadline)
        self.spent("send_inputs", t)
        if isinstance(reply, msg.Configured):
            return prep, None
        self.held.pop(cfg.name, None)
        return None, reply

    def _fresh(self, runtime: TaskRuntime, prep: Prepared) -> Fresh:
        """How the config's calls get fresh inputs (engine/pipeline/judge/fresh.py). A reference that fails on fresh
        values (a factorisation that needs what scaling breaks) leaves the calls rotating among the variants."""
        import torch
        assert self.local is not None
        try:
            return choose(runtime, prep, tolerance(runtime), self.local.rebuild)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - the task's reference on other values: recorded, not a verdict
            return Fresh(why=f"the reference fails on fresh values ({type(exc).__name__}: {str(exc)[:200]}); "
                             "the calls rotate among the variants")

    def _references(self, runtime: TaskRuntime, prep: Prepared) -> FreshReferences:
        """Each checked call's reference, for exactly the inputs it was given (engine/pipeline/judge/fresh.py)."""
        assert self.local is not None
        return FreshReferences(runtime, prep, self.local.rebuild, float64=self.req.float64_opinion)

    def _digester(self, refs: FreshReferences, compose: Callable[[int, list[Any]], tuple], tol: analysis.Tolerance,
                  chained: bool = False) -> Callable[[analysis.Call], None]:
        """What a job does with each checked call once its outputs are in: compare them with the reference for its
        inputs and free them (engine/pipeline/judge/digest.py); `chained`: every call is checked (a check job), so a
        wrong output is also held against the previous call's reference, kept in host memory meanwhile. A failure
        is kept on the call and raised where the call is judged."""
        previous: list[tuple] = []

        def digest(call: analysis.Call) -> None:
            try:
                ref, after = refs.expected(call)
                digest_call(call, ref, previous[0] if previous else None, compose, tol, self.hasher, after,
                            refs.mutated, refs.opinion(call))
                if chained:   # on the GPU beside variants that are (no copy each way), else in host memory
                    previous[:] = [ref if not refs.prep.variants[0].parked else moved(ref, "cpu", {})]
            except Exception as exc:  # noqa: BLE001 - raised again by the judgement, inside `compared`
                call.deferred, call.outputs, call.inputs_after = exc, None, None
        return digest

    def _note_memory(self, name: str, done: msg.Answer | None) -> None:
        """The judge's peaks since the config was prepared, and the runner's word on its own, for the result."""
        import torch
        figures = self.out.data.memory.get(name)
        if figures is not None:
            done = done if isinstance(done, msg.JobDone) else None
            figures.note(int(torch.cuda.max_memory_allocated()), int(torch.cuda.max_memory_reserved()),
                         done.peak_bytes if done else None, done.kept_bytes if done else None)

    def _release(self, name: str) -> None:
        """Free a config on the runner's side (a config can take GBs); the judge's copy goes with its last
        reference."""
        if self.held.pop(name, None) is not None:
            self.runner.drop(name, self.deadline)

    def _keep_bytes(self) -> int:
        """How much the configs kept prepared for their timing may hold on each side, in all."""
        return min(int(KEEP_FOR_TIMING * self._gpu_bytes()), KEEP_MAX_BYTES)

    def _gpu_bytes(self) -> int:
        import torch
        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)

    def _stop(self, error: str) -> NoReturn:
        self.out.data.error = error
        raise Stop

    def _maybe_unmeasured(self, error: str, config: str, when: str) -> None:
        """Stop, unmeasured, where the runner's out-of-memory is excused (_left_unmeasured)."""
        if self._left_unmeasured(error, config, when):
            raise Stop

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
    propagates: judge.py decides whose fault that is (engine/pipeline/judge/memory.py)."""
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
