"""The acceptance suite starts kbench the way its README tells a user to: the installed `kbench` console script,
in a subprocess, with a HOME of its own, a key in the environment (a fake value), the config where a user puts
it (~/.config/kbench/config.toml), and the LLM behind a loopback stand-in that enforces the provider's
documented rules (tests/standins). Nothing is built by hand: what these tests see is what a user sees.

Every test gets a `User`: its home, its environment (PATH, the CUDA toolkit, a locale, and nothing of the
machine running the tests: no GIT_*, KBENCH_*, ANTHROPIC_* or OPENAI_* variable leaks in), and `run` / `start`
for the console script. The build cache (~/.cache/kbench, through XDG_CACHE_HOME) is shared by the suite, as
a user's is by their sessions, so torch's precompiled header is built once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.standins.messages_api import StubMessagesAPI
from tests.standins.openai_api import StubOpenAIAPI

KBENCH = Path(sys.executable).parent / "kbench"      # what `pip install -e .` put beside the interpreter
ANTHROPIC_KEY = "sk-ant-api03-acceptance-fake-key-0000"
OPENAI_KEY = "sk-proj-acceptance-fake-key-0000"
_KEPT = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "CUDA_HOME", "CUDA_PATH")


@dataclass
class User:
    """A person at a shell: a home, an environment, and the `kbench` they installed."""

    home: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def cwd(self) -> Path:
        return self.home / "work"

    @property
    def workspace(self) -> Path:
        return self.cwd / "workspace"       # the default: ./workspace

    def config(self, text: str) -> Path:
        """~/.config/kbench/config.toml, where the README says a user's settings go."""
        path = self.home / ".config" / "kbench" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def run(self, *args: str, timeout: float = 300, env: dict[str, str] | None = None,
            input: str | None = None, fake_evaluator: bool = False) -> subprocess.CompletedProcess:
        """`kbench ARGS` as this user; `fake_evaluator`: kbench on the tests' fake evaluator
        (tests/doubles/kbench.py) in this user's environment, where only the LLM side is under test."""
        argv, child_env = [str(KBENCH)], {**self.env, **(env or {})}
        if fake_evaluator:
            from tests.doubles import kbench as fake
            argv, child_env = fake.ARGV, fake.child_env(child_env)
        return subprocess.run([*argv, *args], cwd=self.cwd, env=child_env, text=True,
                              capture_output=True, timeout=timeout, input=input)

    def start(self, *args: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
        return subprocess.Popen([str(KBENCH), *args], cwd=self.cwd, env={**self.env, **(env or {})}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


@pytest.fixture(scope="session")
def _shared_cache(tmp_path_factory, prebuilt_pch) -> Path:
    """The users' XDG_CACHE_HOME, one for the run: kbench's cache (its `kbench` folder) starts with the run's
    precompiled header (tests/prebuilt_pch.py), as on a machine kbench has built on before. The tests of the
    header's first build give kbench a fresh KBENCH_CACHE of their own."""
    from tests.prebuilt_pch import seed_pch

    root = tmp_path_factory.mktemp("user-cache")
    seed_pch(root / "kbench")
    return root


@pytest.fixture
def user(tmp_path, _shared_cache) -> User:
    if not KBENCH.is_file():
        pytest.fail(f"no installed kbench at {KBENCH}: install the project as the README says (pip install -e .)")
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    env = {k: os.environ[k] for k in _KEPT if k in os.environ}
    env.setdefault("CUDA_HOME", "/usr/local/cuda")
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(_shared_cache),
               TERM="xterm-256color", PYTHONUNBUFFERED="1",
               KBENCH_KEEP_JUDGE_S="0")   # no kept judge between commands unless a test asks (test_kept_judge.py)
    if shutil.which("git", path=env.get("PATH")) is None:
        pytest.fail("git is not on PATH")
    return User(home, env)


@pytest.fixture
def claude(user) -> StubMessagesAPI:
    """The Messages API stand-in, holding the user's key; the user's environment has the key and points
    ANTHROPIC_BASE_URL at the stand-in (as a user behind a gateway does)."""
    with StubMessagesAPI(key=ANTHROPIC_KEY) as api:
        user.env.update(ANTHROPIC_API_KEY=ANTHROPIC_KEY, ANTHROPIC_BASE_URL=api.url)
        yield api


@pytest.fixture
def vllm(user) -> StubOpenAIAPI:
    """An OpenAI-compatible stand-in (vLLM's behaviour, started with `--api-key`), holding the user's key."""
    with StubOpenAIAPI(key=OPENAI_KEY) as api:
        user.env.update(OPENAI_API_KEY=OPENAI_KEY)
        yield api
