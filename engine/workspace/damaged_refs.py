"""A candidate ref that no longer names its candidate's commit: a ref file holding garbage, or a sha of a missing
object, of a blob, or of another commit. git lists such a ref with a warning on stderr (or not at all), so the
candidate used to vanish from every listing in silence, `kbench fsck` called the session ok, and a resumed
session proposed it again.

A candidate commit names itself (its `Kbench-Session` and `Kbench-Candidate` trailers), so where the commit is
still in the repository it is found without the ref: first among the parents of the session's other
candidates and the commits the notes annotate (cheap: a few objects), then, only where those fail, among every
commit object. Such a ref is damage that `kbench fsck` repairs (the ref is pointed back at the commit, the bad
ref file kept aside); one whose commit is nowhere is named, and left alone.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from engine.workspace import commits, gitio, gitobjects
from engine.workspace.gitrefs import RefUpdate
from engine.workspace.naming import parse_candidate_id

_BROKEN = re.compile(r"ignoring broken ref (\S+)")
KEPT_DIR = "kbench-damaged-refs"      # under the git dir: the ref files fsck replaced, kept for a person to read


@dataclass(frozen=True)
class DamagedRef:
    session: str
    candidate: str
    ref: str
    points_at: str | None      # what the ref names now (None: its file holds no object id)
    what: str                  # what is wrong with it, e.g. "holds no object id"
    found: str | None = None   # the candidate's own commit, found without the ref
    unreadable: bool = False   # the ref names an object git cannot read (missing, or corrupt on disk)

    @property
    def message(self) -> str:
        if self.found:
            return (f"candidate {self.candidate}: its ref {self.ref} {self.what}; its commit {self.found[:12]} is "
                    f"intact (it names itself {self.candidate}), so `kbench fsck` points the ref back at it")
        drop = f"or drop the candidate with `git update-ref -d {self.ref}`"
        if self.unreadable:   # the ref is right, the object is what is lost: a clone has it
            return (f"candidate {self.candidate}: its commit {self.points_at} (named by {self.ref}) is missing or "
                    "corrupt, and no other copy of it is in the repository: copy it back from a clone of this "
                    f"workspace (`git fetch` from the clone, or copy its file under .git/objects/), {drop}")
        return (f"candidate {self.candidate}: its ref {self.ref} {self.what}, and no commit naming itself "
                f"{self.candidate} is left in the repository: copy it back from a clone of this workspace, {drop}")


def is_candidate_leaf(session: str, leaf: str) -> bool:
    """A ref name that a kbench candidate of `session` would have (`<session>-g<gen>-<n>`); other names in the
    namespace are someone else's and are skipped, not damage."""
    parsed = parse_candidate_id(leaf)
    return parsed is not None and parsed[0] == session


def broken_refs(stderr: str) -> list[str]:
    """The refs `git for-each-ref` ignored as broken (their file holds no object id), from its stderr."""
    return _BROKEN.findall(stderr)


def _self_named(obj) -> tuple[str, str] | None:
    """(session, candidate) a commit object names itself, or None."""
    if obj is None or getattr(obj, "type", None) != "commit":
        return None
    t = commits.parse_message(gitobjects.parse_commit(obj.sha, obj.data).message).trailers
    cid, session = t.get(commits.T_CANDIDATE), t.get(commits.T_SESSION)
    return (session, cid) if cid and session else None


def _all_commits(git_dir: Path) -> list[str]:
    proc = gitio.run_git(git_dir, ["cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)"],
                         check=False)
    out = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        sha, _, kind = line.partition(" ")
        if kind == "commit":
            out.append(sha)
    return out


def find_commits(repo, session: str, wanted: set[str], hints: Iterable[Iterable[str]]) -> dict[str, str]:
    """{candidate id: its commit} for the `wanted` ids of `session`, looked for among each group of `hints` in
    turn (shas), then among every commit of the repository."""
    found: dict[str, str] = {}
    groups = [list(dict.fromkeys(g)) for g in hints]
    for i in range(len(groups) + 1):
        if not wanted - found.keys():
            break
        shas = groups[i] if i < len(groups) else _all_commits(repo.git_dir)
        try:
            objs = repo.read_batch(shas)
        except Exception:  # noqa: BLE001 - a damaged object among the hints: look one by one
            objs = []
            for sha in shas:
                try:
                    objs += repo.read_batch([sha])
                except Exception:  # noqa: BLE001 - that one is damage of its own, named elsewhere
                    objs.append(None)
        for obj in objs:
            named = _self_named(obj)
            if named and named[0] == session and named[1] in wanted:
                found.setdefault(named[1], obj.sha)
    return found


def restore(git_dir: Path, repo, damaged: DamagedRef) -> str:
    """Point the ref back at the commit found (the caller holds the workspace's writer lock and the session's
    write guard). A ref file that git cannot read (garbage) is moved aside first, as git refuses to update or
    delete it; where it went is returned ("" where nothing was moved)."""
    kept = ""
    loose = Path(git_dir) / damaged.ref
    if damaged.points_at is None and loose.is_file():
        dest = Path(git_dir) / KEPT_DIR / f"{damaged.ref.replace('/', '__')}.{int(time.time())}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(loose, dest)
        kept = str(dest)
    update = (RefUpdate(damaged.ref, damaged.found, damaged.points_at) if damaged.points_at
              else RefUpdate(damaged.ref, damaged.found))
    repo.update_refs([update], f"kbench fsck: {damaged.candidate}'s ref restored")
    return kept
