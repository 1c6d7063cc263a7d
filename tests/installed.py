"""The installed `kbench` console script, run as a user runs it: the venv's bin/kbench (pyproject's
[project.scripts]) in a child process, with a HOME of the test's own (no config, cache or key of the developer's)
and no KBENCH_*, GIT_* or API-key variable of the shell the tests run in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

KBENCH = Path(sys.executable).parent / "kbench"


def user_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a user whose home is `home` (created): PATH, CUDA_HOME and the like kept."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_", "KBENCH_", "XDG_")) and not k.endswith(("_API_KEY", "_TOKEN"))}
    # no judge kept between commands (engine/pipeline/kept_judge.py) unless the test asks for one in `extra`
    env.update(HOME=str(home), CUDA_HOME=os.environ.get("CUDA_HOME", "/usr/local/cuda"), KBENCH_KEEP_JUDGE_S="0",
               **(extra or {}))
    return env


def _command(home: Path, env: dict[str, str] | None, fake_evaluator: bool) -> tuple[list[str], dict[str, str]]:
    """The installed script and the user's environment; with `fake_evaluator`, kbench on the tests' fake
    evaluator (tests/doubles/kbench.py) in that same environment instead."""
    if fake_evaluator:
        from tests.doubles import kbench as fake
        return fake.ARGV, fake.child_env(user_env(home, env))
    assert KBENCH.is_file(), f"{KBENCH} is missing: install kbench (pip install -e .) into this interpreter's venv"
    return [str(KBENCH)], user_env(home, env)


def kbench(home: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           timeout: float = 180, fake_evaluator: bool = False) -> subprocess.CompletedProcess:
    """`kbench ARGS` through the installed script, in `cwd` (default: the home folder); text output."""
    argv, child_env = _command(home, env, fake_evaluator)
    return subprocess.run([*argv, *args], capture_output=True, text=True, cwd=cwd or home, env=child_env,
                          timeout=timeout)


def start(home: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
          fake_evaluator: bool = False) -> subprocess.Popen:
    """`kbench ARGS` started in the background (the caller waits for it or ends it)."""
    argv, child_env = _command(home, env, fake_evaluator)
    return subprocess.Popen([*argv, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd or home, env=child_env)
