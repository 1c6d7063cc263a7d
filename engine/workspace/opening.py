"""Find, recognise and create the workspace repository at a path (the one place that decides whether a folder
is a workspace, and says clearly what it is instead when it is not).

A workspace is a git repository whose own config carries `kbench.workspace = 1`. kbench creates one in
a missing or empty folder (or a folder holding only the README the project ships), and refuses to adopt
anything else unless asked to (`adopt=True`, `kbench init-workspace --adopt`); adopting only runs
`git init` where there was no repository and sets that config key: no file, ref or index is touched.
Everything here goes through git itself (`gitio`): the repository at exactly the path, never a parent's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from engine.workspace import gitio, gitrefs
from engine.workspace.errors import NotAWorkspaceError, WorkspaceError
from engine.workspace.head import give_head

MARKER_KEY = "kbench.workspace"
MARKER_VERSION = "1"
_ADOPTABLE = {"README.md"}  # the one file the kbench project ships in its default workspace/ folder


def open_git_dir(path: str | Path) -> tuple[Path, Path]:
    """(the workspace folder, its git directory), both resolved, for an existing workspace at `path`;
    NotAWorkspaceError, saying what is there instead and what to run, for anything else."""
    p = Path(path).expanduser()
    if not p.exists():
        raise NotAWorkspaceError(
            f"{p}: no workspace here. Starting a session creates one, or run `kbench "
            f"{'' if str(path) == 'workspace' else '--workspace ' + str(path) + ' '}init-workspace`.")
    if not p.is_dir():
        raise NotAWorkspaceError(f"{p}: is a file, not a workspace folder.")
    git_dir = _git_dir_at(p)
    if git_dir is None:
        raise NotAWorkspaceError(
            f"{p}: not a kbench workspace (no git repository here). `kbench init-workspace` creates one"
            + ("" if _adoptable(p) else "; the folder is not empty, so it needs --adopt (kbench adds "
               ".git/ and never touches your files)") + ".")
    if not _is_marked(git_dir):
        raise NotAWorkspaceError(_foreign_repo_message(p, git_dir))
    return p.resolve(), git_dir


def create_git_dir(path: str | Path, adopt: bool = False) -> tuple[Path, Path]:
    """Like `open_git_dir`, creating the workspace where that is safe (or where `adopt` says so)."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise NotAWorkspaceError(f"{p}: is a file, not a workspace folder.")
    git_dir = _git_dir_at(p) if p.exists() else None
    if git_dir is not None:
        if _is_marked(git_dir):
            return p.resolve(), git_dir
        if not adopt:
            raise NotAWorkspaceError(_foreign_repo_message(p, git_dir))
        _set_marker(git_dir)
        return p.resolve(), git_dir
    if p.exists() and not _adoptable(p) and not adopt:
        if (p / ".git").exists() and _git_dir_at(p) is not None:
            return create_git_dir(p, adopt=adopt)   # another process created it a moment ago
        raise NotAWorkspaceError(
            f"{p}: exists and is not empty, and is not a kbench workspace. Choose another --workspace, or "
            "adopt it with `kbench init-workspace --adopt` (kbench adds .git/ and never touches your files).")
    p.mkdir(parents=True, exist_ok=True)
    _init_atomically(p)
    git_dir = _git_dir_at(p)
    if git_dir is None or not _is_marked(git_dir):
        raise WorkspaceError(f"{p}: the workspace was created but cannot be opened; run the command again")
    return p.resolve(), git_dir


def _init_atomically(p: Path) -> None:
    """Create `p/.git` whole or not at all: `git init` in a scratch folder beside `p`, mark it, then rename
    its .git into place. Two processes creating the same workspace at once both succeed: the rename of the
    second fails because the first's .git is there, and it opens that one."""
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f".{p.name}.kbench-init-", dir=p.parent))
    except OSError:
        scratch = Path(tempfile.mkdtemp(prefix="kbench-init-"))   # a read-only parent: rename may cross devices
    try:
        proc = gitio.run_git(None, ["init", "-q", str(scratch)], check=False)
        if proc.returncode != 0:
            raise WorkspaceError(f"{p}: `git init` failed: {proc.stderr.decode(errors='replace').strip()}")
        git_dir = scratch / ".git"
        _set_marker(git_dir)
        # Plain `git log` (and tig) then show kbench's verdicts and measurements with each commit.
        gitio.run_git(git_dir, ["config", "notes.displayRef", "refs/notes/kbench"])
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


def _git_dir_at(p: Path) -> Path | None:
    """The git directory of the repository whose work tree (or bare directory) is exactly `p`; never a parent's.
    Where git cannot open what is there (a dubious owner, a broken config or .git file), git's own words say
    why: more use than "no repository here", and no reason to go on and create one beside it."""
    try:
        return gitio.find_git_dir(p)
    except gitio.GitCommandError as exc:
        raise NotAWorkspaceError(f"{p}: git cannot open the repository there: {exc.stderr.strip()}") from None


def _is_marked(git_dir: Path) -> bool:
    """The repository's own config (not the user's or the system's) names it a kbench workspace."""
    return bool(gitio.read_config(git_dir, r"^kbench\.workspace$", local=True).get(MARKER_KEY))


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


def _foreign_repo_message(p: Path, git_dir: Path) -> str:
    try:
        refs = sorted(gitrefs.for_each_ref(git_dir, ["refs/"]))
    except WorkspaceError:
        refs = []
    shown = ", ".join(refs[:5]) + (f" and {len(refs) - 5} more" if len(refs) > 5 else "")
    have = f" It has {len(refs)} ref(s) of its own: {shown}." if refs else ""
    return (f"{p}: a git repository that is not a kbench workspace.{have} kbench will not write into it unless "
            "you adopt it with `kbench init-workspace --adopt` (it then adds only refs/kbench/*, "
            "refs/notes/kbench and sessions/* branches, and never changes existing refs).")
