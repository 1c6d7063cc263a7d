"""The session's controls: pause, resume, step and stop (thread-safe, for a UI on another thread), the inbox the
evaluator's threads and the pool hand results back through, how the run is to end, and the small daemon pool
proposals and LLM reviews run on.

All workspace writes happen on the loop's own thread; other threads only put into the inbox, and the loop takes
from it (engine.evolve.loop). A control puts a WAKE item, so a loop waiting on the inbox looks at once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

InboxItem = tuple[str, str, Any]                         # (kind, candidate id or proposal token, payload)
WAKE = "wake"                                            # an inbox item that only wakes the loop (a control)


@dataclass
class Flags:
    """The loop's controls as thread-safe flags: what a UI's thread sets and the loop's thread reads."""

    stop: threading.Event = field(default_factory=threading.Event)
    abandon: threading.Event = field(default_factory=threading.Event)   # stop without waiting for evaluations
    paused: bool = False
    steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class DaemonPool:
    """A few daemon worker threads for proposals and reviews: a process that quits (Ctrl-C twice) does not wait
    for an LLM call still in flight, as it would for concurrent.futures' workers, which are joined at exit."""

    def __init__(self, workers: int, name: str):
        self._jobs: queue.Queue[tuple[Future, Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        self._jobs.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, fn, args = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
                fut.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel what has not started; running jobs finish on their own (their threads are daemons)."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)


class Pool:
    """The session's DaemonPool, opened with the run where more than one proposal may be in flight; None
    otherwise (proposals and reviews then run on the loop's thread). Shared by proposing and the gate."""

    def __init__(self, workers: int, name: str):
        self._workers, self._name = workers, name
        self.pool: DaemonPool | None = None

    def open(self) -> None:
        if self._workers > 1 and self.pool is None:
            self.pool = DaemonPool(self._workers, self._name)

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


class Controls:
    """What other threads tell the loop, and how its run is to end.

    The flags are a UI's controls (thread-safe); the inbox takes what the evaluator's threads, the pool and
    `notice` hand back; `end` records the first reason the run must stop (a proposer's stop, an outage, the
    executor's failures) and raises the stop flag, which the loop reads at its next turn."""

    def __init__(self, poll_s: float):
        self.flags = Flags()
        self.poll_s = poll_s
        self._inbox: queue.Queue[InboxItem] = queue.Queue()
        self.pause_reason = ""
        self.stop_reason = ""
        self.stop_paused = False     # the run ends as a pause (API unavailable), not a stop
        self.usd_out = ""            # why an LLM call was refused by the dollar budget ("" if none)

    # -- a UI's controls (any thread) -------------------------------------------------------------

    def pause(self, reason: str = "") -> None:
        with self.flags.lock:
            self.flags.paused = True
            self.pause_reason = reason
        self.put(WAKE, "", None)

    def resume(self) -> None:
        with self.flags.lock:
            self.flags.paused = False
            self.flags.steps = 0
            self.pause_reason = ""
        self.put(WAKE, "", None)

    def step(self, n: int = 1) -> None:
        with self.flags.lock:
            self.flags.paused = True
            self.flags.steps += n
        self.put(WAKE, "", None)

    def stop(self, wait_for_evaluations: bool = True) -> None:
        if not wait_for_evaluations:
            self.flags.abandon.set()
        self.flags.stop.set()
        self.put(WAKE, "", None)

    @property
    def stopping(self) -> bool:
        return self.flags.stop.is_set()

    @property
    def abandoned(self) -> bool:
        return self.flags.abandon.is_set()

    def end(self, reason: str, paused: bool = False) -> None:
        """Stop the run for `reason`, unless it is already stopping (the first reason stands)."""
        if not self.flags.stop.is_set():
            self.stop_reason, self.stop_paused = reason, paused
            self.flags.stop.set()

    # -- the inbox --------------------------------------------------------------------------------

    def put(self, kind: str, key: str, payload: Any) -> None:
        self._inbox.put((kind, key, payload))

    def when_done(self, kind: str, key: str) -> Callable[[Future], None]:
        """A future's done-callback that puts the future into the inbox as (kind, key)."""
        return lambda fut: self.put(kind, key, fut)

    def take(self, block: bool) -> Iterator[InboxItem]:
        """What the inbox holds; with `block`, after waiting up to poll_s for the first item (or a control)."""
        if block:
            try:
                yield self._inbox.get(timeout=self.poll_s)
            except queue.Empty:
                return
        while True:
            try:
                yield self._inbox.get_nowait()
            except queue.Empty:
                return
