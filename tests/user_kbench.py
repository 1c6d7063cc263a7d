"""kbench as a user starts it: the installed console script (beside this interpreter; `python -m engine.cli` where
none is installed), in a subprocess, with a HOME of the test's own (config, cache and dotfiles there) and none
of the test runner's KBENCH_* or GIT_* variables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

_SCRIPT = Path(sys.executable).with_name("kbench")
KBENCH = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "engine.cli"]


def user_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "KBENCH_", "XDG_"))}
    env.update({"HOME": str(home), "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda")})
    if not _SCRIPT.is_file():
        env["PYTHONPATH"] = str(REPO)
    env.update(extra or {})
    return env


def kbench(home: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
           timeout: float = 300, fake_evaluator: bool = False) -> subprocess.CompletedProcess:
    """`kbench ARGS` run to its end: its exit code, stdout and stderr (text). `fake_evaluator`: kbench on the
    tests' fake evaluator (tests/doubles/kbench.py), in the same environment."""
    home.mkdir(parents=True, exist_ok=True)
    argv, child_env = KBENCH, user_env(home, env)
    if fake_evaluator:
        from tests.doubles import kbench as fake
        argv, child_env = fake.ARGV, fake.child_env(child_env)
    return subprocess.run([*argv, *args], capture_output=True, text=True, env=child_env,
                          cwd=cwd or home, timeout=timeout, stdin=subprocess.DEVNULL)


def start(home: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """`kbench ARGS` started (stdout and stderr piped, text)."""
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([*KBENCH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=user_env(home, env), cwd=cwd or home, stdin=subprocess.DEVNULL)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The command's stderr, checked to be a single `kbench: error:` line without a traceback."""
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("…", "kbench: warning:"))]
    assert len(lines) == 1 and lines[0].startswith("kbench: error: "), err
    return lines[0]
