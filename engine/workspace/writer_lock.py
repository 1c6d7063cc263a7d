"""The workspace's writer lock: every write to the repository runs under it (`WorkspaceRepo.writing()`).

A re-entrant lock that is a `threading.RLock` inside the process and a `filelock.FileLock` (an flock) on
`<git-dir>/kbench-writer.flock` across processes. The kernel drops the flock when its holder dies, so a
killed writer never wedges the workspace; while held, its descriptor is handed to git children, so a git
command still writing when kbench is killed keeps the lock until it is done.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from filelock import FileLock, Timeout

from engine.workspace.errors import LockTimeoutError

LOCK_FILE = "kbench-writer.flock"  # not *.lock: that suffix is git's own lock files


class WriterLock:
    """Threads of one process queue on an RLock; processes queue on a flock of one file. Re-entrant."""

    _registry: dict[str, "WriterLock"] = {}
    _registry_guard = threading.Lock()

    def __init__(self, path: Path):
        self.path = path
        self._rlock = threading.RLock()
        self._depth = 0
        self._owner: int | None = None
        self._file: FileLock | None = None     # held across processes while _depth > 0
        self._fd: int | None = None            # its descriptor (filelock's, lent to us while held)

    @classmethod
    def for_git_dir(cls, git_dir: Path) -> "WriterLock":
        key = os.path.realpath(git_dir)
        with cls._registry_guard:
            lock = cls._registry.get(key)
            if lock is None:
                lock = cls._registry[key] = cls(Path(key) / LOCK_FILE)
            return lock

    def acquire(self, timeout: float = 300.0) -> None:
        if not self._rlock.acquire(timeout=timeout):
            raise LockTimeoutError(f"timed out after {timeout:.0f} s waiting for another thread writing to "
                                   f"the workspace ({self.path.parent})")
        try:
            if self._depth == 0:
                self._flock(timeout)
                self._owner = threading.get_ident()
            self._depth += 1
        except BaseException:
            self._rlock.release()
            raise

    def _flock(self, timeout: float) -> None:
        # A fresh FileLock per physical acquisition: a FileLock refuses use in a forked child, and this
        # WriterLock is process-wide (`for_git_dir`), so a child would otherwise inherit one it cannot take.
        lock = FileLock(self.path, thread_local=False, poll_interval=0.005, on_acquired=self._on_locked)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise LockTimeoutError(
                f"timed out after {timeout:.0f} s: another kbench process{self._holder()} is writing to the "
                f"workspace ({self.path.parent}). The lock is released when it exits.") from None
        self._file = lock

    def _on_locked(self, fd: int) -> None:
        """The lock file's descriptor, lent by filelock while held: kept to hand to git children, and the
        holder's pid written into the file so a writer that times out can name it."""
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass

    def _holder(self) -> str:
        try:
            pid = self.path.read_text()[:32].strip()
            return f" (pid {pid})" if pid else ""
        except OSError:
            return ""

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._file is not None:
            self._owner = None
            lock, self._file, self._fd = self._file, None, None
            lock.release()
        self._rlock.release()

    @property
    def fd(self) -> int | None:
        """The locked descriptor while held (handed to git children: see WorkspaceRepo.update_refs)."""
        return self._fd

    @property
    def held(self) -> bool:
        """True where the calling thread holds the lock."""
        return self._depth > 0 and self._owner == threading.get_ident()

    def __enter__(self) -> "WriterLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
