"""Git plumbing without an index or a work tree: run git, read objects in batches, write objects and
trees in-process (gitdb's loose object store: temp file + rename, so a killed writer leaves no torn
object), and update refs in one atomic `git update-ref --stdin` transaction with old-value checks."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Iterable, Sequence

from gitdb import IStream, LooseObjectDB

from engine.workspace.errors import DamagedObjectError, StaleGitLockError, WorkspaceError

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


# ----------------------------------------------------------------------------------------------- trees

MODE_BLOB, MODE_EXEC, MODE_TREE = "100644", "100755", "40000"


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    name: str
    sha: str  # hex

    @property
    def is_tree(self) -> bool:
        return self.mode in ("40000", "040000")


def parse_tree(data: bytes) -> list[TreeEntry]:
    entries, pos, n = [], 0, len(data)
    while pos < n:
        sp = data.index(b" ", pos)
        nul = data.index(b"\0", sp)
        entries.append(TreeEntry(data[pos:sp].decode(), data[sp + 1:nul].decode("utf-8", "surrogateescape"),
                                 data[nul + 1:nul + 21].hex()))
        pos = nul + 21
    return entries


def _tree_sort_key(e: TreeEntry) -> bytes:
    name = e.name.encode("utf-8", "surrogateescape")
    return name + b"/" if e.is_tree else name


def serialize_tree(entries: Iterable[TreeEntry]) -> bytes:
    out = bytearray()
    seen = set()
    for e in sorted(entries, key=_tree_sort_key):
        if e.name in seen:
            raise WorkspaceError(f"two tree entries named {e.name!r}")
        seen.add(e.name)
        mode = "40000" if e.is_tree else e.mode
        out += mode.encode() + b" " + e.name.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(e.sha)
    return bytes(out)


class ObjectWriter:
    """Writes loose objects in-process. gitdb writes each to a temp file and renames it into place, so an
    object either exists whole or not at all; concurrent writers of the same object are harmless."""

    def __init__(self, git_dir: Path):
        self._db = LooseObjectDB(str(git_dir / "objects"))

    def write(self, type_: str, data: bytes) -> str:
        istream = self._db.store(IStream(type_.encode(), len(data), BytesIO(data)))
        return istream.hexsha.decode() if isinstance(istream.hexsha, bytes) else istream.hexsha

    def blob(self, data: bytes | str) -> str:
        return self.write("blob", data.encode() if isinstance(data, str) else data)

    def tree(self, entries: Iterable[TreeEntry]) -> str:
        return self.write("tree", serialize_tree(entries))

    def tree_from_files(self, files: dict[str, str | TreeEntry]) -> str:
        """Build nested trees from {path: blob sha or TreeEntry}. Paths use '/'."""
        top: dict[str, TreeEntry] = {}
        sub: dict[str, dict[str, str | TreeEntry]] = {}
        for path, item in files.items():
            head, sep, rest = path.partition("/")
            if sep:
                sub.setdefault(head, {})[rest] = item
            elif isinstance(item, TreeEntry):
                top[head] = TreeEntry(item.mode, head, item.sha)
            else:
                top[head] = TreeEntry(MODE_BLOB, head, item)
        for head, children in sub.items():
            if head in top:
                raise WorkspaceError(f"{head!r} is both a file and a folder")
            top[head] = TreeEntry(MODE_TREE, head, self.tree_from_files(children))
        return self.tree(top.values())


# --------------------------------------------------------------------------------------------- commits


@dataclass(frozen=True)
class Ident:
    name: str
    email: str
    when: int
    tz: str = "+0000"

    def format(self) -> str:
        clean = lambda s: s.replace("<", "").replace(">", "").replace("\n", " ").strip() or "unknown"
        return f"{clean(self.name)} <{clean(self.email)}> {self.when} {self.tz}"

    @classmethod
    def now(cls, name: str, email: str) -> "Ident":
        now = time.time()
        off = time.localtime(now).tm_gmtoff // 60
        sign = "-" if off < 0 else "+"
        return cls(name, email, int(now), f"{sign}{abs(off) // 60:02d}{abs(off) % 60:02d}")

    @classmethod
    def parse(cls, text: str) -> "Ident":
        lt, gt = text.find("<"), text.rfind(">")
        if lt < 0 or gt < lt:
            return cls(text.strip(), "", 0)
        name, email = text[:lt].strip(), text[lt + 1:gt]
        rest = text[gt + 1:].split()
        when = int(rest[0]) if rest and rest[0].lstrip("-").isdigit() else 0
        return cls(name, email, when, rest[1] if len(rest) > 1 else "+0000")


@dataclass(frozen=True)
class RawCommit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author: Ident
    committer_line: str
    message: str

    @property
    def committer(self) -> Ident:
        return Ident.parse(self.committer_line) if self.committer_line else self.author


def parse_commit(sha: str, data: bytes) -> RawCommit:
    head, _, message = data.partition(b"\n\n")
    tree, parents, author, committer = "", [], None, ""
    for line in head.split(b"\n"):
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = value.decode()
        elif key == b"parent":
            parents.append(value.decode())
        elif key == b"author":
            author = Ident.parse(value.decode("utf-8", "replace"))
        elif key == b"committer":
            committer = value.decode("utf-8", "replace")
    return RawCommit(sha, tree, tuple(parents), author or Ident("", "", 0), committer,
                     message.decode("utf-8", "replace"))


def format_commit(tree: str, parents: Sequence[str], author: Ident, committer: Ident, message: str) -> bytes:
    lines = [f"tree {tree}"] + [f"parent {p}" for p in parents]
    lines += [f"author {author.format()}", f"committer {committer.format()}"]
    if not message.endswith("\n"):
        message += "\n"
    return ("\n".join(lines) + "\n\n" + message).encode()


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
GIT_LOCK_WAIT_MS = int(os.environ.get("KBENCH_GIT_LOCK_WAIT_MS", "3000"))
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
