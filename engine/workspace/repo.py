"""Open or create the workspace repository, recognise it, and serialise its writers.

A workspace is a git repository whose own config carries `kbench.workspace = 1`. kbench creates one in
a missing or empty folder (or a folder holding only the README the project ships), and refuses to adopt
anything else unless asked to (`adopt=True`, `kbench init-workspace --adopt`); adopting only runs
`git init` where there was no repository and sets that config key: no file, ref or index is touched.

Every write goes through `WorkspaceRepo.writing()`: a re-entrant lock that is a `threading.RLock`
inside the process and a `filelock.FileLock` (an flock) on `<git-dir>/kbench-writer.flock` across
processes. The kernel drops the flock when its holder dies, so a killed writer never wedges the workspace.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import git
from filelock import FileLock, Timeout

from engine.config import env_int, env_raw
from engine.workspace import gitio, gitobjects
from engine.workspace.errors import LockTimeoutError, NotAWorkspaceError, WorkspaceError

MARKER_KEY = "kbench.workspace"
MARKER_VERSION = "1"
LOCK_FILE = "kbench-writer.flock"  # not *.lock: that suffix is git's own lock files
AUTO_GC_EVERY = env_int("KBENCH_WORKSPACE_GC_EVERY")  # 0: never run `git gc --auto`
DEFAULT_COMMITTER = ("kbench", "kbench@kbench.invalid")
_ADOPTABLE = {"README.md"}  # the one file the kbench project ships in its default workspace/ folder


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


class WorkspaceRepo:
    """The repository and the shared machinery every workspace module uses: reader, writer, refs, lock."""

    def __init__(self, path: Path, repo: git.Repo):
        self.path = path
        self.repo = repo
        self.git_dir = Path(repo.git_dir).resolve()
        self.reader = gitio.ObjectReader(self.git_dir)
        self.objects = gitobjects.ObjectWriter(self.git_dir)
        self.lock = WriterLock.for_git_dir(self.git_dir)
        self._identity: tuple[str, str] | None = None
        self.auto_gc_every = AUTO_GC_EVERY
        self._writes = self._writes_at_gc = 0
        self._gc_guard = threading.Lock()

    # ------------------------------------------------------------------------------------ open/create

    @classmethod
    def open(cls, path: str | Path) -> "WorkspaceRepo":
        p = Path(path).expanduser()
        if not p.exists():
            raise NotAWorkspaceError(
                f"{p}: no workspace here. Starting a session creates one, or run `kbench "
                f"{'' if str(path) == 'workspace' else '--workspace ' + str(path) + ' '}init-workspace`.")
        if not p.is_dir():
            raise NotAWorkspaceError(f"{p}: is a file, not a workspace folder.")
        repo = _repo_at(p)
        if repo is None:
            raise NotAWorkspaceError(
                f"{p}: not a kbench workspace (no git repository here). `kbench init-workspace` creates one"
                + ("" if _adoptable(p) else "; the folder is not empty, so it needs --adopt (kbench adds "
                   ".git/ and never touches your files)") + ".")
        if not _is_marked(repo):
            repo.close()
            raise NotAWorkspaceError(_foreign_repo_message(p))
        return cls(p.resolve(), repo)

    @classmethod
    def create(cls, path: str | Path, adopt: bool = False) -> "WorkspaceRepo":
        """Open the workspace at `path`, creating it where that is safe (or where `adopt` says so)."""
        p = Path(path).expanduser()
        if p.exists() and not p.is_dir():
            raise NotAWorkspaceError(f"{p}: is a file, not a workspace folder.")
        repo = _repo_at(p) if p.exists() else None
        if repo is not None:
            if _is_marked(repo):
                return cls(p.resolve(), repo)
            if not adopt:
                repo.close()
                raise NotAWorkspaceError(_foreign_repo_message(p))
            _set_marker(Path(repo.git_dir))
            return cls(p.resolve(), repo)
        if p.exists() and not _adoptable(p) and not adopt:
            if (p / ".git").exists() and _repo_at(p) is not None:
                return cls.create(p, adopt=adopt)   # another process created it a moment ago
            raise NotAWorkspaceError(
                f"{p}: exists and is not empty, and is not a kbench workspace. Choose another --workspace, or "
                "adopt it with `kbench init-workspace --adopt` (kbench adds .git/ and never touches your files).")
        p.mkdir(parents=True, exist_ok=True)
        _init_atomically(p)
        repo = _repo_at(p)
        if repo is None or not _is_marked(repo):
            raise WorkspaceError(f"{p}: the workspace was created but cannot be opened; run the command again")
        return cls(p.resolve(), repo)

    def close(self) -> None:
        self.reader.close()
        self.repo.close()

    # ---------------------------------------------------------------------------------------- helpers

    def git(self, *args: str, input: bytes | None = None) -> bytes:
        return gitio.run_git(self.git_dir, args, input=input).stdout

    def refs(self, *patterns: str) -> dict[str, str]:
        return gitio.for_each_ref(self.git_dir, patterns)

    def ref(self, name: str) -> str | None:
        """The commit a ref points to, or None (no process spawned: the persistent cat-file answers)."""
        obj = self.reader.read(name)
        return obj.sha if obj is not None and obj.type == "commit" else None

    def read_commit(self, rev: str) -> gitobjects.RawCommit | None:
        obj = self.reader.read(rev)
        if obj is None or obj.type != "commit":
            return None
        return gitobjects.parse_commit(obj.sha, obj.data)

    def read_tree(self, sha: str) -> list[gitobjects.TreeEntry]:
        obj = self.reader.read(sha)
        if obj is None or obj.type != "tree":
            raise WorkspaceError(f"tree {sha} is missing from the workspace ({self.path})")
        return gitobjects.parse_tree(obj.data)

    def read_blob(self, rev: str) -> bytes | None:
        obj = self.reader.read(rev)
        return obj.data if obj is not None and obj.type == "blob" else None

    def read_batch(self, revs: Sequence[str]) -> list[gitio.GitObject | None]:
        return gitio.read_batch(self.git_dir, revs)

    def start_batch(self, revs: Sequence[str]) -> gitio.PendingBatch:
        return gitio.PendingBatch(self.git_dir, revs)

    def update_refs(self, updates: Sequence[gitio.RefUpdate], message: str) -> None:
        if not self.lock.held:
            raise WorkspaceError("internal error: ref update outside the workspace writer lock")
        crashpoint("before-refs")
        # git inherits the locked descriptor: were kbench killed while update-ref runs, the lock stays held
        # until git has finished, so the next writer (a resume) never reads the refs before this write lands.
        fds = (self.lock.fd,) if self.lock.fd is not None else ()
        if crash_due("during-refs"):
            _die_during(self.git_dir, updates, message, fds)
        gitio.update_refs(self.git_dir, updates, message, pass_fds=fds)
        self._writes += 1
        crashpoint("after-refs")

    @contextmanager
    def writing(self) -> Iterator["WorkspaceRepo"]:
        with self.lock:
            yield self
        if not self.lock.held:
            self._maybe_gc()

    def _maybe_gc(self) -> None:
        """Every `AUTO_GC_EVERY` ref updates, let `git gc --auto` decide whether to pack (it does so past
        ~6,700 loose objects, in the background). Packed objects and refs keep the batched reads fast:
        listing 10,000 candidates reads ~20,000 objects. gc is safe beside concurrent writers."""
        with self._gc_guard:
            if not self.auto_gc_every or self._writes - self._writes_at_gc < self.auto_gc_every:
                return
            self._writes_at_gc = self._writes
        self.gc(wait=False)

    def gc(self, wait: bool = True) -> None:
        """`git gc --auto`: pack loose objects and refs when git thinks it is time (wait: in the foreground)."""
        gitio.run_git(self.git_dir, ["-c", f"gc.autoDetach={'false' if wait else 'true'}", "gc", "--auto",
                                     "--quiet"], check=False)

    def identity(self) -> tuple[str, str]:
        """The person at the keyboard: git's user.name/user.email, else $USER@host."""
        if self._identity is None:
            name = email = None
            try:
                reader = self.repo.config_reader()
                name = reader.get_value("user", "name", default=None)
                email = reader.get_value("user", "email", default=None)
            except Exception:
                pass
            user = os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown"
            host = os.uname().nodename if hasattr(os, "uname") else "localhost"
            self._identity = (str(name or user), str(email or f"{user}@{host}"))
        return self._identity

    def committer(self) -> gitobjects.Ident:
        return gitobjects.Ident.now(*DEFAULT_COMMITTER)


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
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def _init_atomically(p: Path) -> None:
    """Create `p/.git` whole or not at all: `git init` in a scratch folder beside `p`, mark it, then rename
    its .git into place. Two processes creating the same workspace at once both succeed: the rename of the
    second fails because the first's .git is there, and it opens that one."""
    import shutil
    import tempfile

    try:
        scratch = Path(tempfile.mkdtemp(prefix=f".{p.name}.kbench-init-", dir=p.parent))
    except OSError:
        scratch = Path(tempfile.mkdtemp(prefix="kbench-init-"))   # a read-only parent: rename may cross devices
    try:
        proc = subprocess.run(["git", "init", "-q", str(scratch)], capture_output=True, env=gitio.git_env())
        if proc.returncode != 0:
            raise WorkspaceError(f"{p}: `git init` failed: {proc.stderr.decode(errors='replace').strip()}")
        git_dir = scratch / ".git"
        _set_marker(git_dir)
        # Plain `git log` (and tig) then show kbench's verdicts and measurements with each commit.
        gitio.run_git(git_dir, ["config", "notes.displayRef", "refs/notes/kbench"])
        from engine.workspace.head import give_head
        give_head(git_dir)          # plain `git log` and tig open it (engine/workspace/head.py)
        try:
            os.rename(git_dir, p / ".git")
        except OSError:
            if not (p / ".git").exists():
                try:
                    shutil.move(str(git_dir), str(p / ".git"))   # another filesystem: not atomic, but alone
                except OSError as exc:
                    raise WorkspaceError(f"{p}: cannot create the workspace repository: {exc}") from None
            # else another process created it first: use theirs
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _die_during(git_dir: Path, updates, message: str, fds) -> None:
    """Test hook `KBENCH_CRASHPOINT=during-refs`: start the ref update as a git child, then die (SIGKILL)
    while it runs, as a kill at the wrong moment would."""
    import signal
    import threading as _t
    os.environ["KBENCH_CRASHED_DURING_REFS"] = "1"    # the git child sees it (a test's hook may slow it down)
    _t.Thread(target=gitio.update_refs, args=(git_dir, updates, message, fds), daemon=True).start()
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)


def _repo_at(p: Path) -> git.Repo | None:
    """The repository whose work tree (or bare directory) is exactly `p`; never a parent's."""
    try:
        repo = git.Repo(p, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    return repo


def _is_marked(repo: git.Repo) -> bool:
    try:
        value = repo.config_reader("repository").get_value("kbench", "workspace", default=None)
    except Exception:
        return False
    return value is not None and str(value) != ""


def _set_marker(git_dir: Path) -> None:
    gitio.run_git(git_dir, ["config", MARKER_KEY, MARKER_VERSION])


def _adoptable(p: Path) -> bool:
    """Empty, or holding only the README.md the kbench project ships in its default workspace folder."""
    names = {c.name for c in p.iterdir()}
    if not names:
        return True
    if names <= _ADOPTABLE:
        try:
            return "kbench" in (p / "README.md").read_text(errors="replace")[:2000]
        except OSError:
            return False
    return False


def _foreign_repo_message(p: Path) -> str:
    repo = _repo_at(p)
    refs: list[str] = []
    if repo is not None:
        try:
            refs = sorted(gitio.for_each_ref(Path(repo.git_dir), ["refs/"]))
        except WorkspaceError:
            refs = []
        repo.close()
    shown = ", ".join(refs[:5]) + (f" and {len(refs) - 5} more" if len(refs) > 5 else "")
    have = f" It has {len(refs)} ref(s) of its own: {shown}." if refs else ""
    return (f"{p}: a git repository that is not a kbench workspace.{have} kbench will not write into it unless "
            "you adopt it with `kbench init-workspace --adopt` (it then adds only refs/kbench/*, "
            "refs/notes/kbench and sessions/* branches, and never changes existing refs).")
