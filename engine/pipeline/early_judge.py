"""A judge started as `kbench eval` begins, before its task is loaded or its candidate built.

A cold judge spends about 3 s starting (torch, the CUDA context, the jailed runner up to the timing helper's
signed hello) and `kbench eval` spent about 3 s of its own before it asked for one (imports, the task, the build
cache): in series. `start_early` starts a standby judge (engine/pipeline/judge/main.py --standby, the warm pool's
kind of spare) as soon as the command line is read, so the two overlap; evaluate() hands it the request when it
is ready (`take`). It needs only what is on disk already: the toolchain an earlier run detected
(engine/harness/toolchain_cache.py) and the timing helper that toolchain built. Where either is missing (the
first run) or no GPU can be visible (engine.harness.device_info.no_gpu_visible), none is started and the
evaluation starts its judge as before.

The judge is the same trusted process either way: it never runs candidate code, its runner is jailed before the
candidate is even chosen, and it serves this one request. It dies with kbench: `close` ends a judge that was
not handed a request (a build that failed, bad input, a Ctrl-C), and if kbench itself is killed, the judge's
supervisor (engine/jail/supervise.py) gets its parent-death signal and ends the judge's tree.

Times are given in seconds since this process started (the kernel's start time), so the report's `start.*`
phases say when the judge was started, when it was up, and when the request reached it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.harness.build.cache import _read_entry, entry_dir
from engine.harness.device_info import no_gpu_visible
from engine.harness.toolchain_cache import cached_toolchain
from engine.pipeline import timer as timers
from engine.pipeline.kept_judge import KeptJudge, claim, warming
from engine.pipeline.protocol.result import STANDBY_STATE, StandbyState
from engine.pipeline.protocol.types import TimerSpec
from engine.procs import StandbyChild, process_age

JUDGE = "engine.pipeline.judge"
CLOSE_GRACE_S = 2.0    # a judge not needed exits on EOF once warm (removing its run folder); then it is killed


def process_start() -> float:
    """time.monotonic() when this process started."""
    return time.monotonic() - process_age()


@dataclass
class EarlyJudge:
    """A standby judge for one evaluation (started now, or kept from an earlier `kbench eval`: `kept`), or the
    reason there is none (`why_not`)."""
    child: StandbyChild | KeptJudge | None
    timer: TimerSpec | None
    origin: float                      # time.monotonic() at this process's start
    spawned_at: float | None = None    # time.monotonic() when the judge was started
    why_not: str = ""
    kept: bool = False                 # claimed from an earlier command's keeper (engine/pipeline/kept_judge.py)
    # an earlier command's keeper was still starting its judge for `gpu`: claimed when the request is ready (`take`)
    pending: bool = False
    gpu: int | None = None
    handed: bool = False               # the request went to it
    interrupted: bool = False          # the command was interrupted: close at once
    phases: dict[str, float] = field(default_factory=dict)

    def since_start(self, t: float) -> float:
        return round(t - self.origin, 3)

    def take(self, timer: TimerSpec) -> StandbyChild | KeptJudge | None:
        """The judge, for a request timed with `timer`; None (and it is let go) where it runs another helper,
        has died, or said it did not come up (its trouble is not the candidate's: the caller starts one cold).
        A judge still warming up is taken: it reads the request once up, sooner than a cold one would be."""
        child, self.child = self.child, None
        if child is None and self.pending and timer == self.timer:
            child = claim(timer, self.gpu)       # up by now, or within a few seconds more
            self.pending, self.kept = False, child is not None
            if child is not None:
                self.phases["start.judge_claimed"] = self.since_start(time.monotonic())
        if child is None:
            return None
        state = StandbyState.read(child.state(STANDBY_STATE))
        if timer != self.timer or not child.alive() or (state is not None and not state.ok):
            self.why_not = "another timing helper" if timer != self.timer else \
                (state.why if state is not None and not state.ok else "it ended") or "it did not come up"
            _let_go(child, CLOSE_GRACE_S)
            return None
        self.handed = True
        self.phases["start.judge_requested"] = self.since_start(time.monotonic())
        return child

    def judged(self, seconds: dict[str, float]) -> None:
        """Note when the judge was up, from its result's `standby_up` (its own age then); a kept judge was up
        before this command began."""
        if self.kept:
            self.phases["judge.kept"] = 1.0 if self.handed else 0.0
            return
        if self.handed and self.spawned_at is not None and "standby_up" in seconds:
            self.phases["start.judge_ready"] = self.since_start(self.spawned_at + float(seconds["standby_up"]))

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """End a judge that was never handed its request (`grace_s` 0 after a Ctrl-C: at once)."""
        child, self.child = self.child, None
        if child is not None:
            _let_go(child, grace_s)


def _let_go(child: StandbyChild | KeptJudge, grace_s: float) -> None:
    """A judge that is up gets `grace_s` to exit by itself (removing its runner's folder; a kept one goes back to
    its keeper); one still warming up is stopped at once: a typo in a task name is not kept waiting for a judge's
    start."""
    child.let_go(grace_s if child.state(STANDBY_STATE) is not None else 0.0)


def start_early(gpu: int | None, cache_root: Path, origin: float | None = None) -> EarlyJudge:
    """A standby judge for an evaluation on `gpu`, started now, with the timing helper in `cache_root`; an
    EarlyJudge without one (and why) where no GPU can be visible or the helper has not been built yet."""
    origin = process_start() if origin is None else origin
    if (why := no_gpu_visible(gpu)) is not None:
        return EarlyJudge(None, None, origin, why_not=f"no GPU: {why}")
    if (timer := helper_timer(cache_root)) is None:
        return EarlyJudge(None, None, origin, why_not="the timing helper is not built yet")
    if (kept := claim(timer, gpu, wait_s=0)) is not None:
        early = EarlyJudge(kept, timer, origin, kept=True)
        early.phases["start.judge_claimed"] = early.since_start(time.monotonic())
        return early
    if warming(timer, gpu):    # the last command's kept judge is coming up: no second one meanwhile
        return EarlyJudge(None, timer, origin, pending=True, gpu=gpu)
    child = StandbyChild(JUDGE, [timer.so_path, timer.module_name], gpu=gpu)
    early = EarlyJudge(child, timer, origin, spawned_at=time.monotonic())
    early.phases["start.judge_spawned"] = early.since_start(early.spawned_at)
    return early


def helper_timer(cache_root: Path) -> TimerSpec | None:
    """The timing helper an earlier run built with the toolchain it detected; None before the first build."""
    built = _read_entry(entry_dir(cache_root, cached_toolchain(cache_root), timers.timer_candidate()))
    if built is None or not built.ok or built.so_path is None or not built.module_name:
        return None
    return TimerSpec(str(built.so_path), str(built.module_name))
