"""No process outlives kbench: kill -9 during a real build (a build worker and its compilers were left running
for ever), and Ctrl-C twice during `kbench evolve` (it quits within a second, without a traceback). The installed
`kbench` with a HOME of the test's own, under tests/reaper.py, a subreaper that counts every process kbench left
(wherever it was re-parented). CPU, real nvcc and g++ (the first build of a session also builds the precompiled
header: minutes on two busy cores)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import HAS_NVCC
from tests.paths import REPO
from tests.user_kbench import KBENCH, user_env

pytestmark = pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc (set CUDA_HOME)")
COMPILERS = ("nvcc", "cicc", "ptxas", "cc1plus", "g++", "gcc")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One build cache for the module (the precompiled header is built once)."""
    return tmp_path_factory.mktemp("kbench-cache") / "cache"


def under_reaper(home: Path, cache: Path, *args: str) -> subprocess.Popen:
    home.mkdir(parents=True, exist_ok=True)
    env = user_env(home, {"KBENCH_CACHE": str(cache), "PYTHONPATH": str(REPO)})
    return subprocess.Popen([sys.executable, "-m", "tests.reaper", "10", "--", *KBENCH, *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kbench_pid(proc: subprocess.Popen) -> int:
    line = proc.stdout.readline()
    assert line.startswith("pid "), line
    return int(line.split()[1])


def left_behind(proc: subprocess.Popen) -> tuple[list, str, str]:
    out, err = proc.communicate(timeout=120)
    lines = [ln for ln in out.splitlines() if ln.startswith("left ")]
    assert lines, out + err
    return json.loads(lines[-1][5:]), out, err


def tree(pid: int) -> list[str]:
    """The command lines of `pid`'s descendants."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], list(kids.get(pid, ()))
    while todo:
        p = todo.pop()
        todo += kids.get(p, ())
        try:
            out.append(Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return out


def wait_for_a_compiler(pid: int, timeout: float = 600) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for cmd in tree(pid):
            prog = os.path.basename(cmd.split(" ", 1)[0])
            if any(prog.startswith(c) or prog.endswith(c) for c in COMPILERS):
                return cmd
        time.sleep(0.2)
    raise AssertionError("no compiler started")


def evolve_args(tmp_path: Path) -> list[str]:
    return ["--workspace", str(tmp_path / "ws"), "evolve", "gelu_bias", "--proposer", "tuner", "--generations", "1",
            "--population", "2", "--session", "s", "--build-workers", "2"]


def test_kill_9_during_a_build_leaves_no_process(tmp_path, cache):
    proc = under_reaper(tmp_path / "home", cache, *evolve_args(tmp_path))
    pid = kbench_pid(proc)
    compiler = wait_for_a_compiler(pid)
    os.kill(pid, signal.SIGKILL)
    left, out, err = left_behind(proc)
    assert proc.returncode == 128 + signal.SIGKILL, out + err
    assert left == [], f"killed while {compiler[:120]} ran; left: {left}"


def test_ctrl_c_twice_quits_within_a_second_without_a_traceback_or_a_process(tmp_path, cache):
    proc = under_reaper(tmp_path / "home", cache, *evolve_args(tmp_path))
    pid = kbench_pid(proc)
    wait_for_a_compiler(pid)
    os.kill(pid, signal.SIGINT)
    time.sleep(0.5)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGINT)
    while Path(f"/proc/{pid}").exists() and time.monotonic() - t0 < 60:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.01)
    took = time.monotonic() - t0
    left, out, err = left_behind(proc)
    assert took < 1.0, f"quit {took:.2f} s after the second Ctrl-C"
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "Exception in thread" not in err, err
    assert "Ctrl-C again to quit at once" in err and "kbench: quit" in err, err
    assert left == [], left
