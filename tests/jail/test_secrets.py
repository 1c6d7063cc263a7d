"""API keys: after kbench starts, no process can read them from /proc, and no child inherits them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO


# A stand-in for kbench's entry point: protect() first, then report what it holds, then wait to be inspected.
PROGRAM = """
import os, sys, time
from engine.secrets import protect, get
protect()
from engine.jail.privileges import is_dumpable
from engine.procs import scrubbed_env
print(get("ANTHROPIC_API_KEY"), "ANTHROPIC_API_KEY" in os.environ, "ANTHROPIC_API_KEY" in scrubbed_env(),
      is_dumpable(), flush=True)
time.sleep(60)
"""


def test_the_key_leaves_the_environment_and_proc_after_the_re_exec():
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = proc.stdout.readline().split()
        assert line == ["sk-ant-test-not-a-real-key", "False", "False", "False"], line
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert b"sk-ant-test" not in environ and b"ANTHROPIC_API_KEY" not in environ
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"sk-ant-test" not in cmdline
    finally:
        proc.kill()
        proc.wait()


def test_without_a_key_nothing_is_re_executed():
    env = {k: v for k, v in os.environ.items() if not k.endswith(("API_KEY", "_TOKEN"))}
    code = "import os; from engine.secrets import protect; pid = os.getpid(); protect(); print(pid == os.getpid())"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def test_key_like_names():
    from engine.secrets import is_secret_name
    assert all(is_secret_name(n) for n in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "GITHUB_TOKEN"))
    assert not any(is_secret_name(n) for n in ("PATH", "CUDA_HOME", "KBENCH_CACHE", "TOKENIZERS_PARALLELISM"))
