"""`WorkspaceRepo`: one open workspace repository and the machinery every workspace module shares: its
object reader and writer, refs, and the writer lock every write runs under.

Finding and creating the repository is `opening`'s job, the lock's `writer_lock`'s; every git access goes
through `gitio` and its siblings (the git CLI; gitdb only to write loose objects), which says why git
itself and not a git library. Writes: `writing()` holds the writer lock, `update_refs` moves refs in one
transaction under it, and every `KBENCH_WORKSPACE_GC_EVERY` ref updates `git gc --auto` may pack the repository.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from engine.config.env import env_int
from engine.workspace import crashpoints, gitio, gitobjects, gitread, gitrefs, gitwrite, opening
from engine.workspace.errors import WorkspaceError
from engine.workspace.writer_lock import WriterLock

AUTO_GC_EVERY = env_int("KBENCH_WORKSPACE_GC_EVERY")  # 0: never run `git gc --auto`
DEFAULT_COMMITTER = ("kbench", "kbench@kbench.invalid")


class WorkspaceRepo:
    """The repository and the shared machinery every workspace module uses: reader, writer, refs, lock."""

    def __init__(self, path: Path, git_dir: Path):
        self.path = path
        self.git_dir = git_dir
        self.reader = gitread.ObjectReader(self.git_dir)
        self.objects = gitwrite.ObjectWriter(self.git_dir)
        self.lock = WriterLock.for_git_dir(self.git_dir)
        self._identity: tuple[str, str] | None = None
        self.auto_gc_every = AUTO_GC_EVERY
        self._writes = self._writes_at_gc = 0
        self._gc_guard = threading.Lock()

    # ------------------------------------------------------------------------------------ open/create

    @classmethod
    def open(cls, path: str | Path) -> "WorkspaceRepo":
        """The existing workspace at `path`; NotAWorkspaceError, saying what is there instead, otherwise."""
        return cls(*opening.open_git_dir(path))

    @classmethod
    def create(cls, path: str | Path, adopt: bool = False) -> "WorkspaceRepo":
        """Open the workspace at `path`, creating it where that is safe (or where `adopt` says so)."""
        return cls(*opening.create_git_dir(path, adopt=adopt))

    def close(self) -> None:
        self.reader.close()

    # ---------------------------------------------------------------------------------------- helpers

    def git(self, *args: str, input: bytes | None = None) -> bytes:
        return gitio.run_git(self.git_dir, args, input=input).stdout

    def refs(self, *patterns: str) -> dict[str, str]:
        return gitrefs.for_each_ref(self.git_dir, patterns)

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

    def read_batch(self, revs: Sequence[str]) -> list[gitread.GitObject | None]:
        return gitread.read_batch(self.git_dir, revs)

    def start_batch(self, revs: Sequence[str]) -> gitread.PendingBatch:
        return gitread.PendingBatch(self.git_dir, revs)

    def update_refs(self, updates: Sequence[gitrefs.RefUpdate], message: str) -> None:
        if not self.lock.held:
            raise WorkspaceError("internal error: ref update outside the workspace writer lock")
        crashpoints.crashpoint("before-refs")
        # git inherits the locked descriptor: were kbench killed while update-ref runs, the lock stays held
        # until git has finished, so the next writer (a resume) never reads the refs before this write lands.
        fds = (self.lock.fd,) if self.lock.fd is not None else ()
        if crashpoints.crash_due("during-refs"):
            crashpoints.die_during_refs(self.git_dir, updates, message, fds)
        gitrefs.update_refs(self.git_dir, updates, message, pass_fds=fds)
        self._writes += 1
        crashpoints.crashpoint("after-refs")

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
            # git's own answer (system, global and repository config, includes): what `git commit` would use.
            config = gitio.read_config(self.git_dir, r"^user\.(name|email)$")
            name, email = config.get("user.name"), config.get("user.email")
            user = os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown"
            host = os.uname().nodename if hasattr(os, "uname") else "localhost"
            self._identity = (str(name or user), str(email or f"{user}@{host}"))
        return self._identity

    def committer(self) -> gitobjects.Ident:
        return gitobjects.Ident.now(*DEFAULT_COMMITTER)
