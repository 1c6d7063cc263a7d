"""Reading objects out of the workspace through git: one at a time from a persistent `git cat-file --batch`
(`ObjectReader`), many at once from a short-lived one (`read_batch`, `PendingBatch`), and whole trees through
`git ls-tree -z`. An object git cannot read ends in DamagedObjectError naming it. Part of the one git access
path (`gitio`)."""

from __future__ import annotations

import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from engine.workspace.errors import DamagedObjectError
from engine.workspace.gitio import PendingGit, git_env, run_git


@dataclass(frozen=True)
class GitObject:
    sha: str
    type: str
    data: bytes


class ObjectReader:
    """One persistent `git cat-file --batch` process, shared by threads under a lock.

    `read` takes anything cat-file accepts (a sha, a ref, `rev:path`) and returns None where it names
    nothing. The process re-reads refs on every request, so refs moved by other processes are seen."""

    def __init__(self, git_dir: Path):
        self._git_dir = git_dir
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._err = None     # the process's stderr (a temp file): why it died, when it does

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            if self._err is not None:
                self._err.close()
            self._err = tempfile.TemporaryFile()
            self._proc = subprocess.Popen(
                ["git", f"--git-dir={self._git_dir}", "cat-file", "--batch"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, env=git_env())
        return self._proc

    def _stderr(self) -> str:
        try:
            self._err.seek(0)
            return self._err.read().decode(errors="replace").strip()
        except Exception:  # noqa: BLE001 - only used to word an error
            return ""

    def read(self, rev: str) -> GitObject | None:
        if not rev or "\n" in rev:
            return None
        with self._lock:
            for attempt in (0, 1):
                proc = self._start()
                try:
                    proc.stdin.write(rev.encode() + b"\n")
                    proc.stdin.flush()
                    header = proc.stdout.readline()
                    if not header:
                        raise BrokenPipeError("cat-file exited")
                    parts = header.split()
                    if len(parts) != 3:  # "<rev> missing" / "<rev> ambiguous"
                        return None
                    size = int(parts[2])
                    data = _read_exact(proc.stdout, size + 1)[:-1]
                    return GitObject(parts[0].decode(), parts[1].decode(), data)
                except (BrokenPipeError, OSError, ValueError):
                    self._kill()
                    if attempt:   # twice in a row on the same object: git cannot read it
                        raise damaged_object(rev, self._stderr(), self._git_dir) from None
        return None

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.kill()
                proc.wait(timeout=5)
            except Exception:
                pass
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except Exception:
                    pass

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            err, self._err = self._err, None
        if err is not None:
            err.close()
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                proc.kill()
            try:
                proc.stdout.close()
            except Exception:
                pass


def _read_exact(stream, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise BrokenPipeError("short read from cat-file")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)

class PendingBatch:
    """A `git cat-file --batch` started now and collected later. Input and output go through anonymous
    temp files, not pipes, so git runs at full speed while this process does other work (a pipe would
    stall git whenever the reader waits for the GIL)."""

    def __init__(self, git_dir: Path, revs: Sequence[str]):
        self.revs = list(revs)
        self._pending = PendingGit(git_dir, ["cat-file", "--batch"],
                                   ("\n".join(self.revs) + "\n").encode()) if self.revs else None

    def result(self) -> list[GitObject | None]:
        """One entry per rev (None: git has no such object). An object git cannot read (truncated or corrupt
        on disk) ends the batch: DamagedObjectError names it (its `obj`)."""
        if self._pending is None:
            return []
        rc, out, err = self._pending.finish()
        if rc == 0:
            return _parse_batch(out, len(self.revs))
        done = _complete_records(out, len(self.revs))
        bad = self.revs[done] if done < len(self.revs) else "?"
        raise damaged_object(bad, err, None)


def damaged_object(rev: str, stderr: str, git_dir: Path | None) -> DamagedObjectError:
    why = " ".join(stderr.split())[:300] or "git exited while reading it"
    reason = f"cannot be read (git: {why})"
    return DamagedObjectError(f"object {rev}{f' in {git_dir}' if git_dir else ''} {reason}", obj=rev, reason=reason)


def _complete_records(out: bytes, count: int) -> int:
    """How many whole records a `cat-file --batch` wrote before it died."""
    pos = done = 0
    while done < count:
        nl = out.find(b"\n", pos)
        if nl < 0:
            break
        parts = out[pos:nl].split()
        if len(parts) == 3:
            end = nl + 1 + int(parts[2]) + 1
            if end > len(out):
                break
            pos = end
        else:
            pos = nl + 1
        done += 1
    return done


def _parse_batch(out: bytes, count: int) -> list[GitObject | None]:
    pos, result = 0, []
    view = memoryview(out)
    for _ in range(count):
        nl = out.index(b"\n", pos)
        parts = out[pos:nl].split()
        pos = nl + 1
        if len(parts) != 3:
            result.append(None)
            continue
        size = int(parts[2])
        result.append(GitObject(parts[0].decode(), parts[1].decode(), bytes(view[pos:pos + size])))
        pos += size + 1
    return result


def read_batch(git_dir: Path, revs: Sequence[str]) -> list[GitObject | None]:
    """Read many objects with one short-lived `git cat-file --batch`."""
    return PendingBatch(git_dir, revs).result()


# --------------------------------------------------------------------------------------------- ls-tree


@dataclass(frozen=True)
class LsTreeEntry:
    """One line of `git ls-tree -z`: a path in a commit's tree and the object it names."""

    mode: str
    type: str      # "blob", "tree" or "commit" (a submodule)
    sha: str
    path: str


def parse_ls_tree(out: bytes) -> list[LsTreeEntry]:
    """`git ls-tree -z` output -> its entries (paths decoded as UTF-8, other bytes kept as surrogates)."""
    entries = []
    for item in out.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        entries.append(LsTreeEntry(mode, kind, sha, path.decode("utf-8", "surrogateescape")))
    return entries


def ls_tree(git_dir: Path, rev: str) -> list[LsTreeEntry]:
    """Every file of `rev`'s whole tree, recursively."""
    return parse_ls_tree(run_git(git_dir, ["ls-tree", "-r", "-z", "--full-tree", rev]).stdout)


def ls_tree_names(git_dir: Path, rev: str) -> list[str]:
    """The paths of every file of `rev`'s whole tree, recursively."""
    out = run_git(git_dir, ["ls-tree", "-r", "-z", "--name-only", "--full-tree", rev]).stdout
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def parse_notes_listing(out: bytes) -> dict[str, str]:
    """`git ls-tree -r -z` of a notes tree -> {annotated commit: note blob}, whatever the fanout. Its own loop,
    not parse_ls_tree: it reads every note of a workspace (tens of thousands) on each listing."""
    notes: dict[str, str] = {}
    for rec in out.split(b"\0"):
        if not rec:
            continue
        meta, _, path = rec.partition(b"\t")
        parts = meta.split()
        if len(parts) != 3 or parts[1] != b"blob":
            continue
        name = path.replace(b"/", b"").decode("ascii", "replace")
        if len(name) == 40:
            notes[name] = parts[2].decode()
    return notes
