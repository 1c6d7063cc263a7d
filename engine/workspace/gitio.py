"""Git plumbing without an index or a work tree: run git, read objects in batches, update refs in one
atomic `git update-ref --stdin` transaction with old-value checks, and parse the text plumbing commands
print (`ls-tree -z`, `for-each-ref --format`, `rev-parse`). The object formats and the in-process object
writer are in `gitobjects`."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from engine.config import env_int
from engine.workspace.errors import (
    DamagedObjectError,
    StaleGitLockError,
    WorkspaceError,
)

# Environment variables that would point git at another repository, index or object store.
_SCRUB = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_NAMESPACE",
          "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NOTES_REF", "GIT_CEILING_DIRECTORIES",
          "GIT_REPLACE_REF_BASE", "GIT_NO_REPLACE_OBJECTS", "GIT_QUARANTINE_PATH")


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(LC_ALL="C", LANG="C", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    return env


class GitCommandError(WorkspaceError):
    def __init__(self, args: Sequence[str], returncode: int, stderr: str):
        self.git_args = list(args)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"`git {' '.join(args[:3])}` failed (exit {returncode}): {stderr.strip() or 'no message'}")


def run_git(git_dir: Path, args: Sequence[str], input: bytes | None = None, check: bool = True,
            cwd: Path | None = None, pass_fds: Sequence[int] = ()) -> subprocess.CompletedProcess:
    """Run git to completion. `pass_fds`: descriptors the child inherits (a writer hands git its lock, so
    the lock stays held until git is done even if kbench is killed meanwhile)."""
    cmd = ["git", f"--git-dir={git_dir}", *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, env=git_env(), cwd=cwd, pass_fds=tuple(pass_fds))
    if check and proc.returncode != 0:
        raise GitCommandError(args, proc.returncode, proc.stderr.decode(errors="replace"))
    return proc


# ---------------------------------------------------------------------------------------------- reads


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


class PendingGit:
    """A git command started now and collected later, its output in an anonymous temp file."""

    def __init__(self, git_dir: Path, args: Sequence[str], input: bytes | None = None):
        self.args = list(args)
        self._in = tempfile.TemporaryFile()
        if input:
            self._in.write(input)
            self._in.seek(0)
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(["git", f"--git-dir={git_dir}", *self.args], stdin=self._in,
                                      stdout=self._out, stderr=self._err, env=git_env())

    def finish(self) -> tuple[int, bytes, str]:
        """(exit status, stdout, stderr), whatever the status."""
        try:
            rc = self._proc.wait()
            self._out.seek(0)
            self._err.seek(0)
            return rc, self._out.read(), self._err.read().decode(errors="replace")
        finally:
            for f in (self._in, self._out, self._err):
                f.close()

    def result(self) -> bytes:
        rc, out, err = self.finish()
        if rc != 0:
            raise GitCommandError(self.args, rc, err)
        return out


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


# ------------------------------------------------------------------------------------------------ refs

ZERO = "0" * 40


@dataclass(frozen=True)
class RefUpdate:
    """Set `ref` to `new`. `old` None: must not exist yet; a sha: must still be that (compare-and-swap);
    `any_old` True: no check."""

    ref: str
    new: str
    old: str | None = None
    any_old: bool = False

    def line(self) -> str:
        if self.any_old:
            return f"update {self.ref} {self.new}\n"
        if self.old is None:
            return f"create {self.ref} {self.new}\n"
        return f"update {self.ref} {self.new} {self.old}\n"


class RefConflictError(WorkspaceError):
    """A compare-and-swap ref update found the ref moved, or a ref to create already existed."""


# git's own lock files are waited on this long (ms) before a write gives up: another git command (a user's
# `git gc`, a fetch) may hold one for a moment; one that stays is stale.
GIT_LOCK_WAIT_MS = env_int("KBENCH_GIT_LOCK_WAIT_MS")
_LOCK_FILE_RE = re.compile(r"Unable to create '([^']+\.lock)': File exists")


def update_refs(git_dir: Path, updates: Sequence[RefUpdate], message: str, pass_fds: Sequence[int] = ()) -> None:
    """All updates or none: one `git update-ref --stdin` transaction (git takes each ref's .lock).
    `pass_fds`: the writer's lock descriptors, so the child holds the lock for as long as it runs."""
    if not updates:
        return
    body = "".join(u.line() for u in updates).encode()
    proc = run_git(git_dir, ["-c", f"core.filesRefLockTimeout={GIT_LOCK_WAIT_MS}",
                             "-c", f"core.packedRefsTimeout={GIT_LOCK_WAIT_MS}",
                             "update-ref", "-m", message, "--stdin"], input=body, check=False, pass_fds=pass_fds)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        stale = _LOCK_FILE_RE.search(err)
        if stale:
            raise StaleGitLockError(
                f"cannot write to the workspace: git's lock file {stale.group(1)} exists and has for "
                f"{GIT_LOCK_WAIT_MS / 1000:.0f} s. kbench does not hold it: another git command in {git_dir} holds "
                "it, or one was killed and left it behind. If no git command is running there, remove that file "
                "and run the same command again (nothing was written).")
        if "already exists" in err or "but expected" in err or "is at" in err:
            raise RefConflictError(f"a ref moved under kbench's feet: {err}")
        raise WorkspaceError(f"updating refs in {git_dir} failed: {err}")


def for_each_ref(git_dir: Path, patterns: Sequence[str]) -> dict[str, str]:
    """{refname: sha} for refs under the given prefixes, in one git process."""
    proc = run_git(git_dir, ["for-each-ref", "--format=%(objectname) %(refname)", *patterns])
    refs = {}
    for line in proc.stdout.decode("utf-8", "surrogateescape").splitlines():
        sha, _, name = line.partition(" ")
        refs[name] = sha
    return refs


def rev_parse_commit(git_dir: Path, rev: str) -> str | None:
    """The commit `rev` names, or None where it names none (`rev-parse --verify`, never an option)."""
    proc = run_git(git_dir, ["rev-parse", "--verify", "-q", "--end-of-options", f"{rev}^{{commit}}"], check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


# One `git for-each-ref` reads every candidate's commit metadata (git formats them in C).
REF_RECORD_FORMAT = "%(objectname)%00%(refname)%00%(parent)%00%(authordate:unix)%00%(authorname) %(authoremail)%00%(contents)%00"


# The cheap listing: which commit each ref names (git need not open the commits).
REF_LIST_FORMAT = "%(objectname) %(refname)"


def parse_ref_list(out: bytes) -> list[tuple[str, str]]:
    """(sha, refname) per line of REF_LIST_FORMAT output."""
    rows = []
    for line in out.splitlines():
        sha, _, ref = line.partition(b" ")
        if ref:
            rows.append((sha.decode(), ref.decode("utf-8", "surrogateescape")))
    return rows


def parse_ref_records(out: bytes) -> list[tuple[str, str, tuple[str, ...], int, str, str]]:
    """(sha, refname, parent shas, author time, author, message) per ref, from REF_RECORD_FORMAT output."""
    fields = out.split(b"\0")
    rows = []
    for i in range(0, len(fields) - 5, 6):
        sha, ref, parents, when, author, contents = fields[i:i + 6]
        when_s = when.decode()
        rows.append((sha.lstrip(b"\n").decode(), ref.decode("utf-8", "surrogateescape"),
                     tuple(parents.decode().split()), int(when_s) if when_s.isdigit() else 0,
                     author.decode("utf-8", "replace"), contents.decode("utf-8", "replace")))
    return rows


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
