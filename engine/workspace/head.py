"""The workspace's HEAD: a branch `index` with one commit whose message says how to browse the workspace.

Candidates live on `refs/kbench/*` and the `sessions/*` branches, so a fresh `git init` leaves HEAD on an
unborn `master`, and plain `git log` (or tig) in the workspace fails with "your current branch does not
have any commits yet". The index commit has an empty tree: the work tree stays clean (`git status` shows
only what the user put there) and no candidate file is ever checked out by accident.
"""

from __future__ import annotations

from pathlib import Path

from engine.workspace import gitio
from engine.workspace.naming import BRANCH_NS, NOTES_REF

INDEX_BRANCH = "refs/heads/index"
INDEX_MESSAGE = f"""kbench workspace

Every candidate kernel is a commit, kept by a ref refs/kbench/<session>/<candidate>; its parents are
its evolutionary parents. The branch {BRANCH_NS.removeprefix('refs/heads/')}<session> follows each session's best
candidate. Verdicts, measurements and overrides are git notes in refs/notes/kbench (git log shows them).

  git branch --list 'sessions/*'                      the sessions
  git log sessions/<session>                          the best kernel's ancestry, with its verdicts
  git log --oneline --graph --glob='refs/kbench/*'    every candidate of every session
  tig --glob='refs/kbench/*'                          the same, to browse
  kbench log <session>                                candidates by generation, verdict per stage
"""


def give_head(git_dir: Path) -> None:
    """Point HEAD at the index branch, creating its commit, and start the notes ref empty (a `notes.displayRef`
    naming a ref that does not exist yet makes `git log` on a terminal warn "notes ref ... is invalid").
    For a repository kbench has just created, before anyone else can see it."""
    _index(git_dir)
    gitio.run_git(git_dir, ["update-ref", NOTES_REF, _empty_commit(git_dir, "kbench notes: verdicts, measurements, "
                                                                           "overrides"), ""])


def ensure_head(git_dir: Path) -> bool:
    """For a workspace made before it had a HEAD (`kbench init-workspace` on an existing one): where HEAD names
    no commit, create the index branch and point HEAD at it. Touches no existing ref. True where it did."""
    if gitio.run_git(git_dir, ["rev-parse", "--verify", "-q", "HEAD"], check=False).returncode == 0:
        return False
    if gitio.run_git(git_dir, ["rev-parse", "--verify", "-q", INDEX_BRANCH], check=False).returncode == 0:
        gitio.run_git(git_dir, ["symbolic-ref", "HEAD", INDEX_BRANCH])
        return True
    _index(git_dir)
    return True


def _empty_commit(git_dir: Path, message: str) -> str:
    tree = gitio.run_git(git_dir, ["mktree"], input=b"").stdout.decode().strip()
    return gitio.run_git(git_dir, ["-c", "user.name=kbench", "-c", "user.email=kbench@kbench.invalid",
                                   "commit-tree", tree, "-m", message]).stdout.decode().strip()


def _index(git_dir: Path) -> None:
    gitio.run_git(git_dir, ["update-ref", INDEX_BRANCH, _empty_commit(git_dir, INDEX_MESSAGE), ""])
    gitio.run_git(git_dir, ["symbolic-ref", "HEAD", INDEX_BRANCH])
