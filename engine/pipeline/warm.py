"""Warm judges: one spare per GPU, started while the current evaluation works.

A spare is a judge process (engine/pipeline/judge.py --standby) that has imported torch, created its CUDA
context and started its jailed runner up to the timing helper's signed hello. The next evaluation on that
GPU hands it its request instead of paying those seconds. Each spare serves exactly one request: every
candidate still gets a fresh judge and a fresh runner, jailed before the candidate is even chosen.

Spares are started by the pool's own thread, so they outlive the (possibly short-lived) thread that asked
for an evaluation: a judge dies with the thread that started it (its parent-death signal). A spare left
unused for IDLE_S is let go (its CUDA contexts hold GPU memory a person may want back), so do all spares
when the process exits; a spare found dead or not yet up is replaced by a cold start.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from typing import Any

from engine.pipeline.types import TimerSpec
from engine.procs import ChildOutcome, StandbyChild, run_child

JUDGE = "engine.pipeline.judge"
IDLE_S = 300.0


class JudgePool:
    def __init__(self, idle_s: float = IDLE_S) -> None:
        self.idle_s = idle_s
        self._spares: dict[tuple[Any, ...], tuple[StandbyChild, float]] = {}
        self._lock = threading.Lock()
        self._wanted: queue.Queue[tuple[tuple[Any, ...], TimerSpec, int | None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.started = self.used = 0           # spares started, spares that served a request
        atexit.register(self.close)

    @staticmethod
    def _key(timer: TimerSpec, gpu: int | None) -> tuple[Any, ...]:
        return (gpu, timer.so_path, timer.module_name)

    def run(self, request: dict[str, Any], timer: TimerSpec, gpu: int | None, timeout_s: float) -> ChildOutcome:
        """Evaluate `request` on a spare if one is up (else cold), asking for the next spare meanwhile."""
        key = self._key(timer, gpu)
        with self._lock:
            spare = self._spares.pop(key, (None, 0.0))[0]
            if spare is not None and not spare.alive():
                spare.discard()
                spare = None
            if spare is not None:
                self.used += 1
            self._ensure_thread()
        self._wanted.put((key, timer, gpu))
        if spare is None:
            return run_child(JUDGE, request, timeout_s=timeout_s, gpu=gpu)
        return spare.run(request, timeout_s)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name="kbench-spare-judges", daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        """Start the spares asked for; let go of the ones unused for idle_s."""
        while True:
            try:
                item = self._wanted.get(timeout=min(self.idle_s, 30.0))
            except queue.Empty:
                item = ()
            if item is None:
                return
            if item:
                key, timer, gpu = item
                with self._lock:
                    have = key in self._spares
                if not have:
                    child = StandbyChild(JUDGE, [timer.so_path, timer.module_name], gpu=gpu)
                    with self._lock:
                        old = self._spares.get(key)
                        self._spares[key] = (child, time.monotonic())
                        self.started += 1
                    if old is not None:
                        old[0].discard()
            now = time.monotonic()
            with self._lock:
                stale = [k for k, (_, t) in self._spares.items() if now - t > self.idle_s]
                gone = [self._spares.pop(k)[0] for k in stale]
            for s in gone:
                s.discard()

    def close(self) -> None:
        """Let every spare go (they exit on EOF) and stop starting new ones."""
        if self._thread is not None and self._thread.is_alive():
            self._wanted.put(None)
            self._thread.join(timeout=10)
        self._thread = None
        with self._lock:
            spares, self._spares = [s for s, _ in self._spares.values()], {}
        for s in spares:
            s.discard()


POOL = JudgePool()
