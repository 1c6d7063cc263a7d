"""Crash points, a test hook: `KBENCH_CRASHPOINT=<name>` kills this process (SIGKILL, no cleanup) at a named
point of a write, so the tests can check that a writer killed anywhere leaves the workspace readable and a
rerun completes the write. Unset, every check here is a dictionary lookup and nothing more."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Sequence

from engine.config.env import env_raw
from engine.workspace import gitrefs

_crash_hits: dict[str, int] = {}


def crash_due(name: str) -> bool:
    """Test hook: `KBENCH_CRASHPOINT=<name>` (or `<name>:<n>`, the n-th time this process gets there, or
    `any:<n>`, the n-th crash point of any name) says this process dies here."""
    spec = env_raw("KBENCH_CRASHPOINT") or None
    if not spec:
        return False
    point, _, nth = spec.partition(":")
    if point not in (name, "any"):
        return False
    _crash_hits[point] = _crash_hits.get(point, 0) + 1
    return _crash_hits[point] == (int(nth) if nth else 1)


def crashpoint(name: str) -> None:
    """Test hook: die right here (SIGKILL, no cleanup) where `crash_due(name)`."""
    if crash_due(name):
        os.kill(os.getpid(), signal.SIGKILL)


def die_during_refs(git_dir: Path, updates: Sequence[gitrefs.RefUpdate], message: str, fds: Sequence[int]) -> None:
    """`KBENCH_CRASHPOINT=during-refs`: start the ref update as a git child, then die (SIGKILL) while it
    runs, as a kill at the wrong moment would."""
    os.environ["KBENCH_CRASHED_DURING_REFS"] = "1"    # the git child sees it (a test's hook may slow it down)
    threading.Thread(target=gitrefs.update_refs, args=(git_dir, updates, message, fds), daemon=True).start()
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)
