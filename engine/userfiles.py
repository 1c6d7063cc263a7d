"""Reading a file someone handed kbench (a candidate's sources, a task's files) without trusting it.

kbench itself runs unjailed, so a candidate folder must not make it read what the folder only points at: a
link to a file in $HOME would be read, quoted in an error and committed; a FIFO hangs the reader for ever; a
link to /dev/zero grows its memory without bound. So a file is opened without following a link in its last
component, without blocking (a FIFO opens at once), checked to be a regular file on the descriptor itself,
read up to a cap, and decoded as UTF-8. Each refusal is one line naming the file and the cause, raised as
the caller's error class (a CandidateError for a candidate, a TaskError for a task).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from engine.errors import KbenchError

MAX_SOURCE_BYTES = 4 << 20     # one source file; the largest built-in candidate file is about 30 KB

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def kind(mode: int) -> str:
    """What a file of this mode is, in words ("a FIFO (named pipe)"); "a regular file" for one."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file")


def is_regular(path: Path) -> bool:
    """A regular file itself, not a link to one (lstat): what a candidate folder's listing may pick up."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def refusal(path: Path, *, follow_links: bool = False) -> str:
    """Why `path` is not read (a link, a special file), or "" for a regular file or a missing one."""
    try:
        st = os.stat(path) if follow_links else os.lstat(path)
    except OSError:
        return ""
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return (f"{path}: a symbolic link (to {target}); kbench follows no link in a candidate or task folder: "
                "copy the file in instead.")
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: {kind(st.st_mode)}, not a regular file; kbench reads only regular files."
    return ""


def read_bytes(path: str | Path, *, error: type[KbenchError] = KbenchError, limit: int = MAX_SOURCE_BYTES,
               follow_links: bool = False) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; `error` (one line naming the file) otherwise."""
    path = Path(path)
    why = refusal(path, follow_links=follow_links)
    if why:
        raise error(why)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise error(refusal(path, follow_links=follow_links)
                    or f"{path}: cannot read the file ({exc.strerror or exc}).") from None
    try:
        st = os.fstat(fd)      # the file opened, whatever was swapped in after the check above
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: {kind(st.st_mode)}, not a regular file; kbench reads only regular files.")
        if st.st_size > limit:
            raise error(f"{path}: {_size(st.st_size)}, over the {_size(limit)} a source file may have.")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise error(f"{path}: over the {_size(limit)} a source file may have (it grew while read).")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{path}: cannot read the file ({exc.strerror or exc}).") from None
    finally:
        os.close(fd)


def read_text(path: str | Path, *, error: type[KbenchError] = KbenchError, limit: int = MAX_SOURCE_BYTES,
              follow_links: bool = False) -> str:
    """`read_bytes`, decoded as UTF-8; a file that is not UTF-8 text is `error` naming the first bad byte."""
    data = read_bytes(path, error=error, limit=limit, follow_links=follow_links)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): a binary "
                    "file?") from None


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"
