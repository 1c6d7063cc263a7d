"""Errors of the workspace store. Each message names the workspace, the object and what to do."""

from __future__ import annotations

from engine.errors import KbenchError, StorageError


class WorkspaceError(KbenchError):
    """Anything wrong with the workspace repository or a request against it."""


class WorkspaceStorageError(WorkspaceError, StorageError):
    """A write to the workspace failed because its file system is full or read-only (what git only calls
    "couldn't write"); one line saying so, never a traceback. Nothing half-written is left: every write is an
    object, then one ref transaction."""


class NotAWorkspaceError(WorkspaceError):
    """The path is missing, or holds something that is not a kbench workspace."""


class UnknownCandidateError(WorkspaceError):
    """An id, prefix or revision that names no candidate (or names several)."""


class UnknownSessionError(WorkspaceError):
    """A session name with no root ref in the workspace."""


class WorkspaceDamagedError(WorkspaceError):
    """Something the workspace stored cannot be read back: a missing or corrupt object, or a record that does
    not parse. The message starts with `workspace damaged:`, names the candidate or session and the object,
    and says what `kbench fsck` can do about it. Nothing is written over damage."""

    def __init__(self, message: str, *, obj: str | None = None, candidate: str | None = None,
                 session: str | None = None, reason: str | None = None):
        self.obj, self.candidate, self.session = obj, candidate, session
        self.reason = reason or message     # what is wrong with `obj`, without naming it
        super().__init__(message if message.startswith("workspace damaged:") else f"workspace damaged: {message}")


class CorruptNoteError(WorkspaceDamagedError):
    """A `refs/notes/kbench` note that cannot be read back: a line that does not parse, or a blob that is
    missing, corrupt or not text."""


class DamagedObjectError(WorkspaceDamagedError):
    """git cannot read an object (truncated or corrupt on disk). `obj` is what was asked for (a sha or rev)."""


class LockTimeoutError(WorkspaceError):
    """Another writer held the workspace lock for too long."""


class SessionBusyError(WorkspaceError):
    """Another process is the session's writer. The message names it and how to take over."""


class SessionTakenOverError(WorkspaceError):
    """This process was the session's writer until another one took the session over (`--take-over`)."""


class StaleGitLockError(WorkspaceError):
    """A git `*.lock` file that no kbench writer holds blocks a write (left by a killed git command or
    held by another tool). The message names the file to remove."""
