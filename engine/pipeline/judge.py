"""The judge: `python -m engine.pipeline.judge REQUEST.json`. Trusted; never runs candidate code.

Or warm: `python -m engine.pipeline.judge --standby TIMER_SO TIMER_MODULE` starts everything that needs no
request (torch, the CUDA context, its jailed runner up to the helper's signed hello), then reads one request
path from stdin and goes on as above (engine/pipeline/warm.py keeps one such spare per GPU).

This module is the process's entry point: it reads the request, starts the judge cold or as a spare, and
turns whatever ends the evaluation into the result file. The evaluation itself is engine/pipeline/judge_eval.py,
the runner's control judge_runner.py, the helper's records judge_timer.py, a config's inputs and references
judge_configs.py, the timing verdict and the baselines judge_timing.py.

It builds each config's inputs from seeds with the task's own code, computes the references, starts one
jailed runner for the candidate, sends it the arguments, and decides from the timing helper's signed records
alone: outputs are compared with the judge's references, timed iterations it never announced are checked,
the runner's event times are checked against the judge's own clock, and the baselines (eager, torch.compile)
are timed here with the same compiled loop. The result file is rewritten after every step, so a judge
killed at its deadline still says which config was running.

Transport (docs/formats.md, "Evaluation"): the judge ships the candidate's exact arguments (the `fn` arguments
the task's Model passes, the backward's arguments, or a KernelBench model's inputs and weights) and the helper
ships checked outputs back through a sealed shared-memory slot (engine/pipeline/arena.py), or as bytes over
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

from engine.jail.privileges import die_with_parent
from engine.pipeline.judge_eval import Judge
from engine.pipeline.runner_process import RunnerGone
from engine.pipeline.types import NO_GPU, JudgeRequest, JudgeResult, TimerSpec

STANDBY_STATE = "standby.json"   # written by a standby judge in its folder once warm: {"ok", "why"}


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
        self.data.progress = {"stage": stage, "config": config, "t": time.time()}
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
    except RunnerGone as exc:
        judge.note_forgery()
        where = out.data.progress or {}
        at = f" during {where.get('stage')}" + (f" of config {where['config']}" if where.get("config") else "")
        cause = str(exc)
        if cause == "timed out":
            cause = f"timed out after {req.deadline_s:.0f} s{at}; the runner was killed"
        else:
            cause = f"{cause}{at}"
        out.data.error = cause
        if where.get("stage") == "correctness" and where.get("config"):
            out.data.correctness[where["config"]] = {"ok": False, "reason": cause}
    except Exception as exc:  # noqa: BLE001
        out.data.traces["judge"] = traceback.format_exc(limit=12)[-6000:]
        blame = memory_blame(judge.runner.process.proc.pid if judge.runner.process else None) \
            if out_of_memory(exc) else None
        if blame is not None and blame[0]:
            out.data.unmeasured = judge_out_of_memory(out.data.progress) + blame[1]
        elif blame is not None:
            out.data.error = f"the judge ran out of GPU memory{blame[1]}: the candidate's process held it"
        else:
            out.data.error = f"judge error: {type(exc).__name__}: {str(exc).strip()[:600]} (traceback in the " \
                             "result's traces)"
    finally:
        judge.close()
        out.data.finished = True
        out.data.progress = None
        out.write()
    return 0


def out_of_memory(exc: BaseException) -> bool:
    """The judge's own CUDA allocation failed (torch's OutOfMemoryError, or the same from the helper's kernel or
    the arena's copy, which surface as RuntimeErrors naming it)."""
    return type(exc).__name__ == "OutOfMemoryError" or (isinstance(exc, RuntimeError) and "out of memory" in str(exc))


def memory_blame(runner_pid: int | None) -> tuple[bool, str] | None:
    """Whose memory the judge could not allocate past: (True: other processes on this GPU hold more than the
    candidate's runner, so the GPU is contended; False: the runner holds more, the candidate's doing) and the
    figures. None where NVML cannot list this GPU's processes as this process sees them (then nothing is
    excused: a candidate must not turn its own hoarding into "unmeasured")."""
    try:
        import torch

        from engine.harness.nvml import memory_by_process
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
        held = memory_by_process(bus)
    except Exception:  # noqa: BLE001 - no attribution possible
        return None
    return blame_from(held, os.getpid(), runner_pid)


def blame_from(held: dict[int, int] | None, judge_pid: int, runner_pid: int | None) -> tuple[bool, str] | None:
    if not held or judge_pid not in held:     # another pid namespace's view: pids cannot be matched
        return None
    runner = held.get(runner_pid, 0) if runner_pid is not None else 0
    others = sum(b for pid, b in held.items() if pid not in (judge_pid, runner_pid))
    figures = (f" (the candidate's runner held {runner >> 20} MiB, other processes {others >> 20} MiB, the "
               f"judge {held[judge_pid] >> 20} MiB)")
    return others > runner, figures


def judge_out_of_memory(progress: dict | None) -> str:
    """Why the judge stopped, when its own GPU memory ran out: where, and what the GPU holds now."""
    where = progress or {}
    at = f" during {where.get('stage')}" + (f" of config {where['config']}" if where.get("config") else "")
    held = ""
    try:
        import torch
        free, total = torch.cuda.mem_get_info()
        held = f" ({free >> 20} MiB free of {total >> 20} MiB)"
    except Exception:  # noqa: BLE001 - the figure is a courtesy; the reason stands without it
        pass
    return (f"the judge ran out of GPU memory{at}{held}: the GPU is shared with other work or too small for "
            "this task's configs; not a verdict on the kernel")


def _cold(request: Path) -> Started:
    """The request first, then the judge and its runner are started for it."""
    req = JudgeRequest.from_json(json.loads(request.read_text()))
    out = ResultFile(Path(req.result_path))
    out.progress("start")
    judge = Judge(req.timer)
    judge.attach(req, out)
    warm_error = _warm(judge)
    judge.spent("judge_start", judge.t0)
    return judge, req, out, warm_error


def _standby(timer: TimerSpec) -> Started | None:
    """Warm up before any request, say so, then wait for one request path on stdin (None: EOF, not needed)."""
    judge = Judge(timer)
    warm_error = _warm(judge, spare=True)
    # tell the pool whether this spare came up (cwd is its request folder): a spare that did not is never
    # handed a request, so its trouble cannot become the next candidate's verdict
    not_up = judge.not_up if judge.not_up != NO_GPU else None
    why = f"{type(warm_error).__name__}: {warm_error}" if warm_error else not_up
    Path(STANDBY_STATE).write_text(json.dumps({"ok": why is None, "why": why}))
    line = sys.stdin.readline().strip()   # the request, when one comes; EOF: we were not needed
    if not line:
        judge.close()
        return None
    req = JudgeRequest.from_json(json.loads(Path(line).read_text()))
    out = ResultFile(Path(req.result_path))
    out.progress("start")
    judge.attach(req, out)
    out.data.warm = True
    return judge, req, out, warm_error


def _warm(judge: Judge, spare: bool = False) -> BaseException | None:
    """Start the runner and warm up; an exception is kept for the request's result, not raised here. A spare
    also page-locks the arena's slot on both sides now (a second or two nobody waits for)."""
    try:
        judge.runner.start(pin_arena=spare)
        judge.warm_up(pin_arena=spare)
        return None
    except BaseException as exc:  # noqa: BLE001 - reported in the result of the request that follows
        return exc


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # the result file is final and the runner gone; the caller waits for this process's exit: skip tearing
    # down torch and the CUDA context in Python (about a second), the kernel releases them
    os._exit(code)
