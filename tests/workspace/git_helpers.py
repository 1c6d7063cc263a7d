"""Plain git on a workspace (or a user's own repository), as the workspace tests read and write it behind kbench's
back. Not conftest.py: these are functions the tests call, not fixtures."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# No GIT_* from the caller's environment (a GIT_DIR or GIT_INDEX_FILE would point git elsewhere), no crash point
# left set for kbench, and an identity of its own so commits work where no git identity is configured.
GIT_ENV = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "KBENCH_CRASHPOINT"}
GIT_ENV.update(GIT_AUTHOR_NAME="Tester", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="Tester",
               GIT_COMMITTER_EMAIL="t@example.com")


def git(cwd: Path, *args: str, input: str | None = None, check: bool = True) -> str:
    """`git ARGS` in `cwd`; its stdout. A failure raises (unless check=False) with git's own message."""
    proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, text=True, env=GIT_ENV)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def fsck_clean(path: Path) -> None:
    """`git fsck --full --strict` finds nothing wrong in the repository at `path`."""
    proc = subprocess.run(["git", "fsck", "--full", "--strict", "--no-dangling"], cwd=path, capture_output=True,
                          text=True, env=GIT_ENV)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "error" not in proc.stderr.lower() and "missing" not in proc.stdout.lower(), proc.stdout + proc.stderr
