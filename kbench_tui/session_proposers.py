"""The proposers the app can run a session with besides anthropic and the tuner: replay (a folder of
candidates, or a session of this workspace) and human (each proposal opens $VISUAL / $EDITOR; the app
suspends itself around the editor). What the new-session form offers, and why an option is unavailable. The
proposers are imported when one is built, not when the app starts."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from engine.errors import KbenchError
from engine.proposers.human import HumanProposer
from engine.proposers.replay import ReplayProposer

if TYPE_CHECKING:
    from engine.proposers.base import Proposer
    from kbench_tui.backend import Backend

REPLAY_HINT = "replay: re-plays a folder of candidates, or a session of this workspace (the 'replay from' field)"


def human_proposer(backend: Backend) -> HumanProposer:
    return HumanProposer(env=backend.env, run=editor_runner(backend))


def editor_runner(backend: Backend) -> Callable[..., subprocess.CompletedProcess]:
    """How the editor is run: a test's stand-in, else the app's (which suspends the screen), else plainly."""
    return getattr(backend, "_editor_run", None) or getattr(backend, "editor_runner", None) or subprocess.run


def offline_proposer(name: str, backend: Backend, replay_from: str | None) -> Proposer:
    """A replay or human proposer for a new session, or KbenchError saying what is missing."""
    if name == "replay":
        if not replay_from:
            raise KbenchError("replay needs something to re-play: a folder of candidates or a session of this "
                              "workspace, in the 'replay from' field")
        if replay_from in {s.name for s in backend.ws.sessions()}:
            return ReplayProposer.from_workspace(backend.ws, replay_from)
        path = Path(replay_from).expanduser()
        if not path.is_dir():
            raise KbenchError(f"replay from {replay_from!r}: neither a folder of candidates nor a session of this "
                              "workspace")
        return ReplayProposer.from_directory(path)
    if name == "human":
        prop = human_proposer(backend)
        if not prop.available():
            raise KbenchError(prop.unavailable_reason())
        return prop
    raise KbenchError(f"the {name} proposer cannot drive a session from the app")


def choices(backend: Backend) -> list[tuple[str, bool, str]]:
    """(name, available, note): anthropic with a key, the tuner, replay, human with an editor."""
    llm = backend.service.llm_proposer() if hasattr(backend, "service") else "anthropic"   # or openai
    out = [(llm, backend.llm_available(), backend.llm_notice()), ("tuner", True, "")]
    out.append(("replay", True, REPLAY_HINT))
    human = human_proposer(backend)
    out.append(("human", human.available(), human.unavailable_reason() or
                "human: each proposal opens $VISUAL / $EDITOR on a parent's files (the app steps aside meanwhile)"))
    return out
