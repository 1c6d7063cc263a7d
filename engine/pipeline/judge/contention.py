"""The clock checks on a GPU that is not the candidate's alone.

The judge compares the runner's event times with its own clock and the device's; another process running work
on the same GPU (or a host starving its CPUs) can make an honest kernel fail those checks as a forger would.
`evaluate()` therefore measures a contention-sensitive failure twice (a forger fails every time). Where it fails
twice and NVML saw processes *other* than the candidate's side and kbench's own (engine.pipeline.judge.memory's
sides) running on the GPU while it was timed, both times, the candidate is left unmeasured, not called a forger
or suspected of hidden work: that is not a verdict on the kernel, no speedup is kept, and an evolution evaluates
it again later. Work of the candidate's own does not count: the judge notes every process of the runner's
tree while it times, and NVML's samples of those (ended or not) are the candidate's side. The excuse never
keeps a speedup, so a candidate that could buy it (a child that forks, works and ends between two looks)
gains nothing but "unmeasured".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.harness.nvml import memory_by_process, sm_use_by_process
from engine.pipeline.judge.analysis import CLOCK
from engine.pipeline.judge.memory import gpu_sides

if TYPE_CHECKING:
    from engine.pipeline.protocol.result import JudgeResult

BUSY_SM_PERCENT = 5   # a process NVML sampled at or above this SM utilisation ran work on the GPU


def contention_sensitive(result: JudgeResult) -> str:
    """What in a judge's result a busy host or a shared GPU can cause as well as a hack: a failed clock check
    (the only integrity failure) or work seen after the stream's end event. Empty when there is none."""
    bad = [(n, r) for n, r in result.integrity.items() if not r.ok]
    if bad and all(r.hack == CLOCK for _, r in bad):
        return f"the clock check failed on {', '.join(n for n, _ in bad)}"
    hidden = [n for n, t in result.timing.items() if t.hidden_work]
    if hidden and not bad:
        return f"work continued after the stream's end event on {', '.join(hidden)}"
    return ""


def busy_from(sm_use: dict[int, int] | None, on_gpu_now: dict[int, int] | None, judge_pid: int,
              candidate: set[int], kbench: set[int]) -> str:
    """The processes outside the judge, the candidate's side and kbench's own that ran work on the GPU
    ("pid 4242 at up to 97 % SM, ..."), or "" (none, or NVML could not say).

    `sm_use`: NVML's SM samples over the window, which also name processes that have ended since (another
    user's short job as well as the candidate's runner); `candidate`: every pid of the runner's tree the judge
    saw while the candidate was timed, and what is in it now; `on_gpu_now`: the GPU's processes with a context
    when asked. The judge must be among those, or NVML sees another pid namespace and no pid can be matched.
    A child the candidate forks and ends between two looks counts as another process: that buys it
    "unmeasured", never a speedup (INTEGRITY.md, residual risks)."""
    if not sm_use or not on_gpu_now or judge_pid not in on_gpu_now:
        return ""
    others = sorted((pid, use) for pid, use in sm_use.items()
                    if use >= BUSY_SM_PERCENT and pid != judge_pid and pid not in candidate and pid not in kbench)
    return ", ".join(f"pid {pid} at up to {use} % SM" for pid, use in others)


def others_busy_since(since_us: int, candidate_seen: set[int]) -> str:
    """busy_from for this judge's GPU over NVML's samples since `since_us` (microseconds since the epoch);
    `candidate_seen`: the pids of the candidate's side the judge saw while it timed."""
    try:
        sides = gpu_sides()
        use = sm_use_by_process(sides.bus, since_us)
        now = memory_by_process(sides.bus)
    except Exception:  # noqa: BLE001 - no attribution possible: nothing is excused
        return ""
    return busy_from(use, now, sides.judge, sides.candidate | candidate_seen, sides.kbench)


def shared_gpu_reason(first: str, again: str) -> str:
    """Why a candidate whose clock checks failed twice, with other work on its GPU both times, is unmeasured."""
    return (f"the timing checks (the judge's clock, the stream's end event) failed on two measurements while "
            f"other processes ran work on this GPU ({first}; then {again}): their work cannot be told from a "
            "forged timer or hidden work, so this is not a verdict on the kernel; measure it again on a GPU of "
            "its own")
