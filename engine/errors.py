"""Errors the engine raises for bad input. Each carries a message meant for a person."""

from __future__ import annotations

import errno
import os


class KbenchError(Exception):
    """Base class: a clear, one-paragraph message that names the file and the cause."""


class ConfigError(KbenchError):
    """A config file or flag has an unknown key or a value of the wrong type (engine.config.load raises it)."""


class DataError(KbenchError, ValueError):
    """JSON a reader was given (a result file, a message between processes, a stored record) does not hold the
    dataclass it should (engine.jsonable). Still a ValueError for callers that catch what json.loads raises."""


class TaskError(KbenchError):
    """A task folder or file is malformed."""


class TaskWarning(UserWarning):
    """A task loads but breaks a documented rule (fewer than 3 configs, say); the CLI prints it as
    `kbench: warning: ...`."""


class CandidateError(KbenchError):
    """A candidate's files are missing or not in a recognised format."""


class MissingDirectionError(TaskError, KeyError):
    """A task asked for a direction it does not have (`--backward` on a forward-only task). Still a KeyError
    for callers that look the direction up like a mapping key."""

    def __str__(self) -> str:       # KeyError's own str() would quote the message
        return str(self.args[0]) if self.args else ""


class StorageError(KbenchError):
    """A write kbench needed failed for the machine's reasons, not the input's: a full disk, a read-only file
    system, a quota, a file too large. One line naming the file and what to do (`storage_error`)."""


_STORAGE_HINTS = {
    errno.ENOSPC: "the disk is full: free space and run the same command again (what was written before is "
                  "intact; this write was not kept)",
    errno.EDQUOT: "the disk quota is used up: free space and run the same command again (what was written before "
                  "is intact; this write was not kept)",
    errno.EROFS: "the file system is read-only (commands that only read work there: sessions, log, "
                 "show-candidate, diff, fsck --dry-run)",
    errno.EFBIG: "the file would exceed the largest file allowed here",
}
STORAGE_ERRNOS = frozenset(_STORAGE_HINTS)


def storage_message(code: int, where: str, detail: str = "") -> str:
    """One line: what could not be written, why, and what to do (`detail`: what the failing tool said)."""
    return (f"cannot write {where}: {os.strerror(code)}; {_STORAGE_HINTS[code]}."
            + (f" ({detail})" if detail else ""))


def storage_error(exc: OSError, what: str = "") -> StorageError | None:
    """The StorageError for an OSError of a full or read-only file system (None for any other OSError).
    `what`: the file or folder, where the OSError does not name it."""
    if exc.errno not in STORAGE_ERRNOS:
        return None
    return StorageError(storage_message(exc.errno, str(exc.filename or what or "a file")))


def storage_state(path: str | os.PathLike) -> int | None:
    """ENOSPC where the file system holding `path` has no block left for kbench, EROFS where it is mounted
    read-only, else None: why a git child that only said "couldn't write" failed."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return errno.EROFS
    if st.f_bavail * st.f_frsize < 64 * 1024 or (st.f_files and st.f_favail == 0):
        return errno.ENOSPC
    return None
