"""Warm judges: one spare per GPU, started while the current evaluation works.

A spare is a judge process (engine/pipeline/judge.py --standby) that has imported torch, created its CUDA
context and started its jailed runner up to the timing helper's signed hello. The next evaluation on that
GPU hands it its request instead of paying those seconds. Each spare serves exactly one request: every
candidate still gets a fresh judge and a fresh runner, jailed before the candidate is even chosen.

Spares die with the thread that started them (the judge's parent-death signal), so only long-lived
evaluating threads (an executor's GPU worker) ask for them; a spare found dead is replaced by a cold start.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from engine.pipeline.types import TimerSpec
from engine.procs import ChildOutcome, StandbyChild, run_child

JUDGE = "engine.pipeline.judge"


class JudgePool:
    def __init__(self) -> None:
        self._spares: dict[tuple[Any, ...], StandbyChild] = {}
        self._lock = threading.Lock()
        self.started = self.used = 0           # spares started, spares that served a request
        atexit.register(self.close)

    @staticmethod
    def _key(timer: TimerSpec, gpu: int | None) -> tuple[Any, ...]:
        return (gpu, timer.so_path, timer.module_name)

    def run(self, request: dict[str, Any], timer: TimerSpec, gpu: int | None, timeout_s: float) -> ChildOutcome:
        """Evaluate `request` on a spare if one is up (else cold), starting the next spare meanwhile."""
        key = self._key(timer, gpu)
        with self._lock:
            spare = self._spares.pop(key, None)
            if spare is not None and not spare.alive():
                spare.discard()
                spare = None
            self._spares[key] = StandbyChild(JUDGE, [timer.so_path, timer.module_name], gpu=gpu)
            self.started += 1
            if spare is not None:
                self.used += 1
        if spare is None:
            return run_child(JUDGE, request, timeout_s=timeout_s, gpu=gpu)
        return spare.run(request, timeout_s)

    def close(self) -> None:
        """Let every spare go (they exit on EOF); a session's end or the process's."""
        with self._lock:
            spares, self._spares = list(self._spares.values()), {}
        for s in spares:
            s.discard()


POOL = JudgePool()
