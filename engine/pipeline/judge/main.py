"""The judge: `python -m engine.pipeline.judge REQUEST.json`. Trusted; never runs candidate code.

Or warm: `python -m engine.pipeline.judge --standby TIMER_SO TIMER_MODULE` starts everything that needs no
request (torch, the CUDA context, its jailed runner up to the helper's signed hello), then reads one request
path from stdin and goes on as above (engine/pipeline/warm.py keeps one such spare per GPU).

This module is the process's entry point: it reads the request, starts the judge cold or as a spare, and
turns whatever ends the evaluation into the result file. The evaluation itself is engine/pipeline/judge/evaluation.py,
the runner's control runner_link.py, the helper's records timer.py, a config's inputs and references
configs.py, the timing verdict and the baselines timing.py.

It builds each config's inputs from seeds with the task's own code, computes the references, starts one
jailed runner for the candidate, sends it the arguments, and decides from the timing helper's signed records
alone: outputs are compared with the judge's references, timed iterations it never announced are checked,
the runner's event times are checked against the judge's own clock, and the baselines (eager, torch.compile)
are timed here with the same compiled loop. The result file is rewritten after every step, so a judge
killed at its deadline still says which config was running.

Transport (docs/formats.md, "Evaluation"): the judge ships the candidate's exact arguments (the `fn` arguments
the task's Model passes, the backward's arguments, or a KernelBench model's inputs and weights) and the helper
ships checked outputs back through a sealed shared-memory slot (engine/pipeline/protocol/arena.py), or as bytes over
the socket and the record pipe when they do not fit. Nothing in the slot is trusted: outputs are copied out,
then checked against the fingerprint the helper signed.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from engine import jsonable
from engine.gpu_wait import NO_GPU
from engine.jail.privileges import die_with_parent, exit_without_teardown
from engine.pipeline.judge.contention import contention_sensitive, others_busy_since
from engine.pipeline.judge.evaluation import Judge
from engine.pipeline.judge.memory import judge_memory_outcome, judge_out_of_memory, memory_blame, out_of_memory
from engine.pipeline.judge.runner_link import OutputsTooLarge
from engine.pipeline.judge.runner_process import RunnerGone
from engine.pipeline.protocol.result import STANDBY_STATE, JudgeResult, Progress, StandbyState
from engine.pipeline.protocol.types import CorrectnessResult, JudgeRequest, TimerSpec
from engine.procs import process_age


class ResultFile:
    """The request's result file, rewritten whole (atomically) at every step: a judge killed at its deadline
    still says which stage and config it was in."""

    def __init__(self, path: Path):
        self.path = path
        self.data = JudgeResult()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data.to_json(), default=str))
        os.replace(tmp, self.path)

    def progress(self, stage: str, config: str | None = None) -> None:
        self.data.progress = Progress(stage, config, time.time())
        self.write()


# a started judge, its request, its result file, and what went wrong while it warmed up (raised in main)
Started = tuple[Judge, JudgeRequest, ResultFile, BaseException | None]


def main(argv: list[str]) -> int:
    # killed with the process that asked (a Ctrl-C'd or killed kbench), so no judge holds the GPU's memory
    # afterwards; the runner already dies with the judge
    die_with_parent()
    started = _standby(TimerSpec(argv[1], argv[2])) if argv and argv[0] == "--standby" else _cold(Path(argv[0]))
    if started is None:
        return 0
    judge, req, out, warm_error = started
    try:
        if warm_error:
            raise warm_error
        judge.run()
        judge.note_forgery()
        if judge.timing_since_us and contention_sensitive(out.data):   # who else ran while it timed
            out.data.gpu_shared = others_busy_since(judge.timing_since_us, judge.candidate_seen) or None
    except OutputsTooLarge as exc:   # outputs unlike the reference's exhausted the judge's memory: its own doing
        out.data.error = str(exc)
    except RunnerGone as exc:
        judge.note_forgery()
        where = out.data.progress
        at = where.where() if where else ""
        cause = str(exc)
        if cause == "timed out":
            cause = f"timed out after {req.deadline_s:.0f} s{at}; the runner was killed"
        else:
            cause = f"{cause}{at}"
        out.data.error = cause
        if where and where.stage == "correctness" and where.config:
            out.data.correctness[where.config] = CorrectnessResult(False, cause)
    except Exception as exc:  # noqa: BLE001
        out.data.traces["judge"] = traceback.format_exc(limit=12)[-6000:]
        blame = memory_blame() if out_of_memory(exc) and not out.data.failed_already() else None
        unmeasured, error = judge_memory_outcome(blame, judge.candidate_share, judge_out_of_memory(out.data.progress))
        if unmeasured or error:
            out.data.unmeasured, out.data.error = unmeasured, error
        else:
            out.data.error = f"judge error: {type(exc).__name__}: {str(exc).strip()[:600]} (traceback in the " \
                             "result's traces)"
    finally:
        judge.close()
        out.data.finished = True
        out.data.progress = None
        out.write()
    return 0


def _cold(request: Path) -> Started:
    """The request first, then the judge and its runner are started for it."""
    req = JudgeRequest.from_json(json.loads(request.read_text()))
    out = ResultFile(Path(req.result_path))
    out.progress("start")
    judge = Judge(req.timer)
    judge.attach(req, out)
    warm_error = _warm(judge)
    # the task's setup is timed from here, not from the start again (both phases read the start's 3 s)
    judge.t0 = judge.spent("judge_start", judge.t0)
    out.data.seconds.update(judge.warm_seconds())
    return judge, req, out, warm_error


def _standby(timer: TimerSpec) -> Started | None:
    """Warm up before any request, say so, then wait for one request path on stdin (None: EOF, not needed)."""
    judge = Judge(timer)
    warm_error = _warm(judge, spare=True)
    # tell the pool whether this spare came up (cwd is its request folder): a spare that did not is never
    # handed a request, so its trouble cannot become the next candidate's verdict
    not_up = judge.not_up if judge.not_up != NO_GPU else None
    why = f"{type(warm_error).__name__}: {warm_error}" if warm_error else not_up
    Path(STANDBY_STATE).write_text(json.dumps(jsonable.dump(StandbyState(why is None, why))))
    up, ready = process_age(), time.monotonic()
    line = sys.stdin.readline().strip()   # the request, when one comes; EOF: we were not needed
    if not line:
        judge.close()
        return None
    req = JudgeRequest.from_json(json.loads(Path(line).read_text()))
    out = ResultFile(Path(req.result_path))
    # how long it took to come up (from its own start) and then waited for the request: did the caller wait on it?
    out.data.seconds.update(standby_up=round(up, 3), standby_idle=round(time.monotonic() - ready, 3),
                            **judge.warm_seconds())
    out.progress("start")
    judge.attach(req, out)
    out.data.warm = True
    return judge, req, out, warm_error


def _warm(judge: Judge, spare: bool = False) -> BaseException | None:
    """Start the runner and warm up; an exception is kept for the request's result, not raised here. A spare
    also page-locks the arena's slot on both sides now (time nobody waits for)."""
    try:
        judge.runner.start(pin_arena=spare)
        judge.mark("runner_spawned")
        judge.warm_up(pin_arena=spare)
        return None
    except BaseException as exc:  # noqa: BLE001 - reported in the result of the request that follows
        return exc

