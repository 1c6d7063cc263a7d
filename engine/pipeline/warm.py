"""Warm judges: one spare per GPU, started while the current evaluation works.

A spare is a judge process (engine/pipeline/judge/main.py --standby) that has imported torch, created its CUDA
context and started its jailed runner up to the timing helper's signed hello. The next evaluation on that
GPU hands it its request instead of paying those seconds. Each spare serves exactly one request: every
candidate still gets a fresh judge and a fresh runner, jailed before the candidate is even chosen.

Spares are started by the pool's own thread, so they outlive the (possibly short-lived) thread that asked
for an evaluation: a judge dies with the thread that started it (its parent-death signal). A spare left
unused for IDLE_S is let go (its CUDA contexts hold GPU memory a person may want back), so do all spares
when the process exits. A request goes only to a spare that reported itself up (`standby.json`); one still
warming up stays for the next request while this one starts cold, one that failed to come up is let go,
and a warm evaluation that died before any config was judged is run again cold.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from typing import Any

from engine.pipeline.protocol.result import STANDBY_STATE, JudgeOutcome, StandbyState
from engine.pipeline.protocol.types import TimerSpec
from engine.procs import StandbyChild, run_child

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
        self._exit_hook = False

    @staticmethod
    def _key(timer: TimerSpec, gpu: int | None) -> tuple[Any, ...]:
        return (gpu, timer.so_path, timer.module_name)

    def run(self, request: dict[str, Any], timer: TimerSpec, gpu: int | None, timeout_s: float) -> JudgeOutcome:
        """Evaluate `request` on a spare if one is up (else cold), asking for the next spare meanwhile."""
        key = self._key(timer, gpu)
        spare, drop = None, None
        with self._lock:
            held = self._spares.get(key)
            if held is not None:
                state = StandbyState.read(held[0].state(STANDBY_STATE))
                if not held[0].alive() or (state is not None and not state.ok):
                    drop = self._spares.pop(key)[0]
                elif state is not None:
                    spare = self._spares.pop(key)[0]
                    self.used += 1
            self._ensure_thread()
        if drop is not None:
            drop.discard()
        self._wanted.put((key, timer, gpu))
        if spare is not None:
            outcome = JudgeOutcome.of(spare.run(request, timeout_s))
            if not (outcome.crashed and not outcome.result.correctness):
                return outcome
        return JudgeOutcome.of(run_child(JUDGE, request, timeout_s=timeout_s, gpu=gpu))

    def _ensure_thread(self) -> None:
        if not self._exit_hook:
            # Registered on first use, not at import: every process that imports evaluate builds the pool.
            atexit.register(self.close)
            self._exit_hook = True
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name="kbench-spare-judges", daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        """Start the spares asked for; let go of the ones unused for idle_s. Never dies of an error: the spares
        it started die with it (their parent-death signal), the one serving a request included."""
        while True:
            try:
                if not self._serve_one():
                    return
            except Exception:  # noqa: BLE001 - e.g. no process or file could be created: no spare this time
                time.sleep(1.0)

    def _serve_one(self) -> bool:
        """One request for a spare (or none in 30 s), then the idle sweep; False once closed."""
        try:
            item = self._wanted.get(timeout=min(self.idle_s, 30.0))
        except queue.Empty:
            item = ()
        if item is None:
            return False
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
        return True

    def close(self) -> None:
        """Let every spare go, then stop starting new ones. Spares first: they exit on EOF and clean up their
        run folders, which they cannot do once killed by their parent thread's end."""
        with self._lock:
            spares, self._spares = [s for s, _ in self._spares.values()], {}
        for s in spares:
            s.discard()
        if self._thread is not None and self._thread.is_alive():
            self._wanted.put(None)
            self._thread.join(timeout=10)
        self._thread = None
        with self._lock:
            late, self._spares = [s for s, _ in self._spares.values()], {}
        for s in late:
            s.discard()


POOL = JudgePool()
