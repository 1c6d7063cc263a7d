"""A process's claim on one session: an exclusive, non-blocking flock on `<session>.flock` (`FlockFile`)
plus the holder record that names it (`claim_holders`), kept fresh by one heartbeat thread per process.
`writers` hands these out, one per session and process.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from filelock import FileLock, Timeout

from engine.config.env import env_float
from engine.errors import storage_error
from engine.workspace.claim_holders import (HEARTBEAT_S, Holder, busy_message, claim_dir, claim_stamp,
                                            process_start, read_holder, read_taker, this_host, write_holder,
                                            writing_elsewhere)
from engine.workspace.errors import SessionBusyError, SessionTakenOverError, WorkspaceError, WorkspaceStorageError

WAIT_S = env_float("KBENCH_CLAIM_WAIT_S")  # a busy session is retried this long before refusing


class _LockedFileReplaced(Exception):
    """Raised from filelock's on_acquired hook: the file locked is no longer the one at the path."""


def held_by_someone(path: Path) -> bool:
    """Whether a process holds the flock on `path`, asked without creating or writing anything (a read-only
    descriptor takes a flock too), so `kbench fsck --dry-run` works on a read-only workspace. No file: nobody."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)     # closing the descriptor drops the probe's own lock
    return False


class FlockFile:
    """An exclusive, non-blocking flock (a `filelock.FileLock`) on one path, re-checked against the path's
    inode: a take-over replaces the file (break_lock), and a lock on the replaced one guards nothing."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None
        self._lock: FileLock | None = None

    def try_lock(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            lock = FileLock(self.path, thread_local=False, on_acquired=self._check_same_file)
            try:
                lock.acquire(blocking=False)
            except Timeout:
                return False
            except _LockedFileReplaced:
                continue          # locked a file a take-over just replaced (filelock let it go): lock the new one
            self._lock = lock
            return True

    def _check_same_file(self, fd: int) -> None:
        try:
            same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            raise _LockedFileReplaced(str(self.path))
        self.fd = fd

    def unlock(self) -> None:
        lock, self._lock, self.fd = self._lock, None, None
        if lock is not None:
            lock.release()

    def break_lock(self) -> None:
        """Move the lock file aside (whoever holds it keeps a lock on a file nobody uses any more)."""
        try:
            aside = self.path.with_name(f".{self.path.name}.taken-over.{uuid.uuid4().hex[:8]}")
            os.replace(self.path, aside)
            os.unlink(aside)
        except FileNotFoundError:
            pass


# The claim stays kbench's own, over filelock's plain lock: it records who holds the session (pid, host, start
# time, command), judges a stale holder (a dead or re-used pid here, a silent heartbeat on another host), and
# lets a take-over stop the displaced writer at its next write. filelock's owner-recording locks (its soft and
# strict claims) are existence locks that a killed holder leaves behind, where a flock dies with its holder.
class SessionClaim:
    """A process's claim on one session (the design: `writers`). Re-entrant: `writers.claim` counts its users."""

    def __init__(self, git_dir: Path, session: str, command: str):
        self.git_dir = Path(git_dir)
        self.session = session
        self.command = command
        self.users = 0
        self.holder: Holder | None = None
        self._lock = FlockFile(claim_dir(self.git_dir) / f"{session}.flock")

    @property
    def fd(self) -> int | None:
        return self._lock.fd

    def acquire(self, take_over: bool = False, wait_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            if self._lock.try_lock():
                holder, age = read_holder(self.git_dir, self.session)
                if not take_over and writing_elsewhere(holder, age):
                    # The lock was free, yet a writer on another host touched its record moments ago: this
                    # filesystem does not carry locks between machines. Its record decides.
                    self._lock.unlock()
                    if time.monotonic() < deadline:
                        time.sleep(0.2)
                        continue
                    raise SessionBusyError(busy_message(self.session, holder, age))
                break
            if take_over:
                self._lock.break_lock()
                continue
            holder, age = read_holder(self.git_dir, self.session)
            waiting = holder is None or holder.state(age) == "dead"
            if waiting and time.monotonic() < deadline:
                time.sleep(0.05)   # a one-shot writer (no record), or a killed writer's git child finishing
                continue
            raise SessionBusyError(busy_message(self.session, holder, age))
        self.holder = Holder(os.getpid(), this_host(), process_start(os.getpid()), claim_stamp(), self.command,
                             uuid.uuid4().hex)
        try:
            write_holder(self.git_dir, self.session, self.holder)
            if take_over:  # outlives this claim's record: the writer it displaced can still name who did it
                (claim_dir(self.git_dir) / f"{self.session}.taken-over.json").write_text(
                    json.dumps(asdict(self.holder)) + "\n")
        except OSError as exc:
            self._lock.unlock()
            failure = storage_error(exc)
            if failure is not None:
                raise WorkspaceStorageError(str(failure)) from None
            raise WorkspaceError(f"cannot record the writer of session {self.session!r} in "
                                 f"{claim_dir(self.git_dir)}: {exc}") from None
        _Heartbeat.add(self)

    def release(self) -> None:
        _Heartbeat.discard(self)
        mine = self.still_mine()
        if mine:
            try:
                (claim_dir(self.git_dir) / f"{self.session}.holder.json").unlink()
            except OSError:
                pass
        self._lock.unlock()
        self.holder = None

    def still_mine(self) -> bool:
        if self.holder is None:
            return False
        now, _ = read_holder(self.git_dir, self.session)
        return now is not None and now.token == self.holder.token

    def check(self) -> None:
        """Before a write: raise SessionTakenOverError where another process took the session over."""
        if self.still_mine():
            return
        now, _ = read_holder(self.git_dir, self.session)
        if now is None:  # the one who took over may have finished already: its marker stays
            now = read_taker(self.git_dir, self.session)
        who = now.describe() if now is not None else "another process"
        raise SessionTakenOverError(f"session {self.session!r} was taken over by {who}; this process stopped "
                                    "writing to it (nothing more was written)")

    def touch(self) -> None:
        try:
            os.utime(claim_dir(self.git_dir) / f"{self.session}.holder.json")
        except OSError:
            pass


class _Heartbeat:
    """One daemon thread per process touches the record of every claim it holds."""

    _claims: set[SessionClaim] = set()
    _guard = threading.Lock()
    _thread: threading.Thread | None = None

    @classmethod
    def add(cls, claim: SessionClaim) -> None:
        with cls._guard:
            cls._claims.add(claim)
            if cls._thread is None or not cls._thread.is_alive():
                cls._thread = threading.Thread(target=cls._run, name="kbench-claim-heartbeat", daemon=True)
                cls._thread.start()

    @classmethod
    def discard(cls, claim: SessionClaim) -> None:
        with cls._guard:
            cls._claims.discard(claim)

    @classmethod
    def _run(cls) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            with cls._guard:
                claims = list(cls._claims)
            for c in claims:
                c.touch()
