"""Long engine calls run in Textual thread workers; their results come back as messages.

`ThreadedMixin.background(name, fn, *args)` starts `fn` with `run_worker(thread=True)`. When it ends, the
worker's StateChanged message (delivered on the UI thread) is routed to `done_<name>(result)` or, on an
exception, to `failed_<name>(error)` (default: an error notification). No widget is touched from a thread.

Evolution events arrive on the loop's thread; `EngineEvent` carries them to the UI thread through
`post_message`, which Textual makes thread-safe.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from textual.message import Message
from textual.worker import Worker, WorkerState

from kbench_tui.wording import for_the_app

if TYPE_CHECKING:
    from engine.evolve.events import EvolveEvent
    from engine.verdict import Verdict


class EngineEvent(Message):
    """An engine.evolve event for the UI thread."""

    def __init__(self, event: EvolveEvent) -> None:
        super().__init__()
        self.event = event


class StageProgress(Message):
    """A re-evaluation stage finished (posted from the evaluator's thread)."""

    def __init__(self, candidate: str, verdict: Verdict) -> None:
        super().__init__()
        self.candidate = candidate
        self.verdict = verdict


class ThreadedMixin:
    """For screens and the app: start engine calls off the UI thread and route their results."""

    def background(self, name: str, fn: Callable[..., Any], *args: Any, group: str | None = None,
                   exclusive: bool = False, **kw: Any) -> Worker:
        return self.run_worker(partial(fn, *args, **kw), name=name, group=group or name,  # type: ignore[attr-defined]
                               thread=True, exclusive=exclusive, exit_on_error=False)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        w = event.worker
        name = (w.name or "").split(":")[0]
        if event.state == WorkerState.SUCCESS:
            handler = getattr(self, f"done_{name}", None)
            if handler is not None:
                handler(w.result)
        elif event.state == WorkerState.ERROR:
            handler = getattr(self, f"failed_{name}", None)
            if handler is not None:
                handler(w.error)
            else:
                self.app.notify(f"{name}: {for_the_app(str(w.error))}", severity="error",  # type: ignore[attr-defined]
                                timeout=8, markup=False)
