"""One writer per session, across processes and machines that share the workspace.

A process that drives a session (`kbench evolve`, `kbench reevaluate`, the app's loop) *claims* it for as
long as it runs: an exclusive `flock` (a `filelock.FileLock`) on `<git-dir>/kbench-sessions/<session>.flock`,
plus a holder record beside it (`<session>.holder.json`: pid, host, the process's start time, when, which
command, a random token) that a refused writer can name. One-shot writes (an override, a hand edit) claim
the session only for the instant of the write, under the workspace's writer lock. Readers never claim
anything.

Why both a lock and a record: the kernel drops a flock when its holder dies, so a killed writer never wedges
a session; the record says who holds it (a flock does not), and covers filesystems that do not carry locks
between machines: a record from another host whose heartbeat (the file's mtime, touched every
HEARTBEAT_S) is fresh means a live writer there, whatever the lock says. A record whose process is provably
gone (same host, pid dead or re-used: its start time differs) is stale and is replaced without asking.

`--take-over` (take_over=True) is for a holder the user knows is gone (a crashed machine): the lock file is
replaced, so whoever held the old one keeps a lock on a file nobody uses, and the record gets a new token.
A writer checks its token before every write (`SessionClaim.check`), so a process that was taken over stops
at its next write with a clear error instead of writing beside the new one.

This module keeps the process's claims (one per session, counted: `claim`, `write_guard`, `claims_in`);
the lock and its heartbeat are `claim_lock`'s, the holder record and its liveness `claim_holders`'s.
"""

from __future__ import annotations

import atexit
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from engine.workspace.claim_holders import Holder, busy_message, claim_dir, read_holder, writing_elsewhere
from engine.workspace.claim_lock import WAIT_S, FlockFile, SessionClaim, held_by_someone
from engine.workspace.errors import SessionBusyError

_claims: dict[tuple[str, str], SessionClaim] = {}
_registry = threading.Lock()


@atexit.register
def _release_all() -> None:
    """At a normal exit, claims still held are released (their records removed); a kill leaves the record,
    which the next writer recognises as a dead process's."""
    with _registry:
        held = list(_claims.values())
        _claims.clear()
    for c in held:
        try:
            c.release()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def _key(git_dir: Path, session: str) -> tuple[str, str]:
    return os.path.realpath(git_dir), session


class Claim:
    """A handle on this process's claim of a session; `release()` once (or use it as a context manager)."""

    def __init__(self, claim: SessionClaim):
        self._claim: SessionClaim | None = claim

    @property
    def holder(self) -> Holder | None:
        return self._claim.holder if self._claim else None

    def release(self) -> None:
        claim, self._claim = self._claim, None
        if claim is None:
            return
        with _registry:
            claim.users -= 1
            if claim.users > 0:
                return
            _claims.pop(_key(claim.git_dir, claim.session), None)
        claim.release()

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def claim(git_dir: Path, session: str, command: str, take_over: bool = False, wait_s: float = WAIT_S) -> Claim:
    """Claim `session` for this process (re-entrant within it). Raises SessionBusyError naming the holder."""
    key = _key(git_dir, session)
    with _registry:
        held = _claims.get(key)
        if held is not None:
            held.users += 1
            return Claim(held)
        c = SessionClaim(Path(key[0]), session, command)
        c.acquire(take_over=take_over, wait_s=wait_s)
        c.users = 1
        _claims[key] = c
        return Claim(c)


def held_claim(git_dir: Path, session: str) -> SessionClaim | None:
    with _registry:
        return _claims.get(_key(git_dir, session))


@contextmanager
def write_guard(git_dir: Path, session: str) -> Iterator[None]:
    """Around one write to `session` (under the workspace writer lock): where this process claims the
    session, check the claim is still its own; otherwise claim it for the instant of the write, refusing
    (SessionBusyError) while another process is its writer."""
    held = held_claim(git_dir, session)
    if held is not None:
        held.check()
        yield
        return
    git_dir = Path(os.path.realpath(git_dir))
    lock = FlockFile(claim_dir(git_dir) / f"{session}.flock")     # the very file a SessionClaim locks
    if not lock.try_lock():
        holder, age = read_holder(git_dir, session)
        raise SessionBusyError(busy_message(session, holder, age, one_shot=True))
    try:
        holder, age = read_holder(git_dir, session)
        if writing_elsewhere(holder, age):
            raise SessionBusyError(busy_message(session, holder, age, one_shot=True))
        yield
    finally:
        lock.unlock()


def claims_in(git_dir: Path) -> list[tuple[str, Holder | None, float | None, bool]]:
    """(session, holder record, heartbeat age, lock held by someone) for every session with a claim file."""
    d = claim_dir(git_dir)
    out = []
    if not d.is_dir():
        return out
    names = set()
    for p in d.iterdir():
        for suffix in (".flock", ".holder.json"):
            if p.name.endswith(suffix) and not p.name.startswith("."):
                names.add(p.name[:-len(suffix)])
    names = sorted(names)
    for session in names:
        holder, age = read_holder(git_dir, session)
        locked = held_claim(git_dir, session) is not None or held_by_someone(d / f"{session}.flock")
        out.append((session, holder, age, locked))
    return out
