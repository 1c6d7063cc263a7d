"""Long engine calls run in Textual thread workers; their results come back as typed messages.

`ThreadedMixin.background(fn, *args, done=SomeResult, what="...")` runs `fn` with `run_worker(thread=True)` and
posts `SomeResult(value)` (a `Done` subclass naming what it carries) to the node that asked, which handles it
in `on_some_result`. A call that raises posts its `failed=` message, or `Failed`, whose default handler here
notifies the user. A worker superseded in an exclusive group posts nothing. No widget is touched from a thread.

Evolution events arrive on the loop's thread; `EngineEvent` carries them to the app through `post_message`,
which Textual makes thread-safe, and the app hands each screen a `SessionEvent` (a re-evaluation's stages:
`StageProgress` to the app, `CandidateStage` to the screens), handled by the screens that care.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

from textual.message import Message
from textual.worker import Worker, get_current_worker

from kbench_tui.wording import for_the_app

if TYPE_CHECKING:
    from engine.evolve.events import EvolveEvent
    from engine.verdict import Verdict

T = TypeVar("T")


class Done(Message, Generic[T]):
    """A background call's value, for the node that asked; a subclass per call says what it is."""

    bubble = False

    def __init__(self, value: T) -> None:
        super().__init__()
        self.value = value


class Failed(Message):
    """A background call raised: what it was (for the notification) and the error."""

    bubble = False

    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__()
        self.what = what
        self.error = error


class EngineEvent(Message):
    """An engine.evolve event for the UI thread (to the app, from the loop's thread)."""

    def __init__(self, event: EvolveEvent) -> None:
        super().__init__()
        self.event = event


class SessionEvent(Message):
    """An engine.evolve event, as the app hands it to each open screen, with its place in the app's log of the
    session (a screen that showed the log up to there when it opened does not show it twice)."""

    bubble = False

    def __init__(self, event: EvolveEvent, index: int) -> None:
        super().__init__()
        self.event = event
        self.index = index


class StageProgress(Message):
    """A re-evaluation stage finished (to the app, from the evaluator's thread)."""

    def __init__(self, candidate: str, verdict: Verdict) -> None:
        super().__init__()
        self.candidate = candidate
        self.verdict = verdict


class CandidateStage(StageProgress):
    """A re-evaluation stage, as the app hands it to each open screen."""

    bubble = False


class CandidateChanged(Message):
    """A person's action changed a candidate (an override, an edit, a re-evaluation, an export): every open
    screen that lists it reloads."""

    bubble = False

    def __init__(self, candidate: str) -> None:
        super().__init__()
        self.candidate = candidate


class ThreadedMixin:
    """For screens and the app: start engine calls off the UI thread; their results come back as messages."""

    def background(self, fn: Callable[..., Any], *args: Any, done: type[Done] | None, what: str,
                   failed: type[Failed] = Failed, group: str | None = None, exclusive: bool = False,
                   **kw: Any) -> Worker:
        """Run `fn(*args, **kw)` in a thread; post `done(value)` or `failed(what, error)` to this node."""
        post = self.post_message  # type: ignore[attr-defined]

        def call() -> None:
            try:
                value = fn(*args, **kw)
            except Exception as exc:  # noqa: BLE001 - the asker's failure message says what it was
                if not get_current_worker().is_cancelled:
                    post(failed(what, exc))
                return
            if done is not None and not get_current_worker().is_cancelled:
                post(done(value))
        return self.run_worker(call, name=what, group=group or what,  # type: ignore[attr-defined]
                               thread=True, exclusive=exclusive, exit_on_error=False)

    def on_failed(self, message: Failed) -> None:
        """The default for a call whose asker names no failure message of its own."""
        self.app.notify(f"{message.what}: {for_the_app(str(message.error))}", severity="error",  # type: ignore
                        timeout=8, markup=False)
