"""The workspace's one way into git: run the user's own `git` (a scrubbed environment, `--git-dir`, never a
work tree or an index), find the repository at exactly a path, and read its config.

Every access to the repository goes through this module and its siblings: `gitread` (objects, one by one
through a persistent `cat-file --batch` or many at once, and `ls-tree`), `gitrefs` (atomic `update-ref
--stdin` transactions and ref listings) and `gitwrite` (new loose objects, written in-process through gitdb).
`gitobjects` holds git's object formats and does no I/O.

Why the git CLI, and not GitPython or pygit2: one implementation of refs, notes and commit-without-index,
the very one whose crash safety the workspace tests exercise (a writer killed at any point, `KBENCH_CRASHPOINT`),
and the one the user's own git and tig read the workspace with. GitPython runs this same CLI but only adds to
the environment, so a GIT_OBJECT_DIRECTORY left in the user's shell would send objects elsewhere (`git_env`
removes it). pygit2's libgit2 has no fsck and no gc, so the CLI would stay beside it as a second path.
gitdb stays for one job, in `gitwrite`: a loose object written in-process (temp file + rename) costs no
process per blob.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from engine.errors import storage_message, storage_state
from engine.workspace.errors import WorkspaceError, WorkspaceStorageError

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


def git_failure(git_dir: Path | None, args: Sequence[str], returncode: int, stderr: str) -> WorkspaceError:
    """What a failed git command raises: a WorkspaceStorageError where the workspace's file system is full or
    read-only (git itself only says it "couldn't write" or was "unable to create" a file), else GitCommandError
    with git's own words."""
    code = storage_state(git_dir) if git_dir is not None else None
    if code is not None:
        said = next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "")
        return WorkspaceStorageError(storage_message(code, f"the workspace {Path(git_dir).parent}", f"git: {said}"))
    return GitCommandError(args, returncode, stderr)


def run_git(git_dir: Path | None, args: Sequence[str], input: bytes | None = None, check: bool = True,
            cwd: Path | None = None, pass_fds: Sequence[int] = ()) -> subprocess.CompletedProcess:
    """Run git to completion on the repository `git_dir` (None: no repository, for `git init`). `pass_fds`:
    descriptors the child inherits (a writer hands git its lock, so the lock stays held until git is done
    even if kbench is killed meanwhile)."""
    cmd = ["git", *([f"--git-dir={git_dir}"] if git_dir is not None else []), *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, env=git_env(), cwd=cwd, pass_fds=tuple(pass_fds))
    if check and proc.returncode != 0:
        raise git_failure(git_dir, args, proc.returncode, proc.stderr.decode(errors="replace"))
    return proc


class PendingGit:
    """A git command started now and collected later, its output in an anonymous temp file."""

    def __init__(self, git_dir: Path, args: Sequence[str], input: bytes | None = None):
        self.args = list(args)
        self._git_dir = git_dir
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
            raise git_failure(self._git_dir, self.args, rc, err)
        return out


# ------------------------------------------------------------------------------------- the repository


def find_git_dir(path: Path) -> Path | None:
    """The git directory of the repository whose work tree (or bare directory) is exactly `path`, resolved;
    None where there is none. Never a parent's: git is handed the folder as `--git-dir`, and does not search
    upwards from an explicit one. Other failures (a dubious owner, a broken config or gitfile) raise
    GitCommandError with git's own words, which say more than "no repository"."""
    # A work tree's .git (a folder, or a gitfile naming one), else `path` itself as a bare repository.
    git_dir = path / ".git" if (path / ".git").exists() else path
    proc = run_git(git_dir, ["rev-parse", "--absolute-git-dir"], check=False)
    if proc.returncode == 0:
        return Path(proc.stdout.decode("utf-8", "surrogateescape").strip()).resolve()
    err = proc.stderr.decode(errors="replace")
    if "not a git repository" in err:
        return None
    raise GitCommandError(["rev-parse", "--absolute-git-dir"], proc.returncode, err)


def read_config(git_dir: Path, key_regex: str, local: bool = False) -> dict[str, str]:
    """{key: value} for the config keys matching `key_regex` (git lowercases section and key names; the last
    value of a key wins, as in git). `local`: the repository's own config only. Empty where git reads none."""
    proc = run_git(git_dir, ["config", *(["--local"] if local else []), "-z", "--get-regexp", key_regex],
                   check=False)
    values: dict[str, str] = {}
    if proc.returncode == 0:
        for item in proc.stdout.split(b"\0"):
            key, _, value = item.partition(b"\n")
            if key:
                values[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return values
