"""Refs through git: all-or-nothing `git update-ref --stdin` transactions with old-value checks (the only way
kbench moves a ref), listing refs with `for-each-ref` (and parsing its formatted output), and resolving a
revision to a commit. Part of the one git access path (`gitio`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from engine.config.env import env_int
from engine.workspace.errors import StaleGitLockError, WorkspaceError, WorkspaceStorageError
from engine.workspace.gitio import git_failure, run_git


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
        failure = git_failure(git_dir, ["update-ref"], proc.returncode, err)
        if isinstance(failure, WorkspaceStorageError):
            raise failure
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
