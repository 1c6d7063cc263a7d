"""Every jailed step is bounded and leaves nothing: the KernelBench import child (it runs the candidate's Python at
its compile stage) as the attacker. It reads root's files (none), holds memory past its limit (MemoryError), forks
past its task limit, writes a file past its size limit and its folder past its quota (stopped), leaves a daemon
(killed when the step ends), prints gigabytes (kept in a capped file, never in kbench's memory). Each hostile
ModelNew raises with what it achieved (tests/hostile_python.py), so `kbench eval` quotes it. The installed
`kbench` with a HOME of the test's own and tight limits (KBENCH_JAIL_LIMITS); CPU, no nvcc needed."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests import hostile_python as attack
from tests.paths import FIXTURES
from tests.prebuilt_pch import seed_pch
from tests.user_kbench import start

PROBLEM = FIXTURES / "kernelbench" / "scaled_swish.py"
LIMITS = "memory=5G,processes=48,file=64M,scratch=256M,output=256K"
HEAD = "# load_inline is named so that kbench runs the import at its compile stage\nimport os, sys, time\n"
TAIL = "\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n"


@pytest.fixture(autouse=True)
def _pch(prebuilt_pch):
    return prebuilt_pch


def hostile(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(HEAD + body + TAIL)
    return path


def peak_rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def evaluate(tmp_path: Path, cand: Path, timeout: float = 600) -> tuple[str, int]:
    """`kbench eval PROBLEM CAND`: (its output, kbench's own peak memory in KiB). The cache holds the run's
    precompiled header (the `prebuilt_pch` fixture, autouse here): the import child runs after it is built."""
    proc = start(tmp_path / "home", "eval", str(PROBLEM), str(cand), "--no-timing",
                 env={"KBENCH_JAIL_LIMITS": LIMITS, "KBENCH_CACHE": str(seed_pch(tmp_path / "cache"))})
    peak, deadline = 0, time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        peak = max(peak, peak_rss_kb(proc.pid))
        time.sleep(0.05)
    out, err = proc.communicate(timeout=30)
    return out + err, peak


def compile_line(text: str) -> str:
    return next((ln for ln in text.splitlines() if ln.strip().startswith("compile")), text)


def sleepers(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if f"sleep {marker}" in ln]


def test_the_import_child_reads_no_root_only_file_and_holds_no_capability(tmp_path):
    text, _ = evaluate(tmp_path, hostile(tmp_path, "reader", attack.READ_ROOT_FILE))
    line = compile_line(text)
    assert "caps 0000000000000000" in line and "shadow: refused (Permission denied)" in line, text
    if os.geteuid() == 0:
        assert Path("/etc/shadow").read_text().splitlines()[0][:12] not in text


def test_memory_past_the_limit_is_refused(tmp_path):
    text, _ = evaluate(tmp_path, hostile(tmp_path, "hog", attack.hold_memory(24, 256)))   # 6 GiB
    assert "MemoryError" in compile_line(text) and "held" not in text, text


def test_processes_past_the_limit_are_refused_and_killed_after(tmp_path):
    text, _ = evaluate(tmp_path, hostile(tmp_path, "forker", attack.fork_storm(200)))
    assert attack.forked(compile_line(text)) < 48, text
    assert not sleepers("600")


def test_a_file_past_the_size_limit_and_a_folder_past_its_quota_stop(tmp_path):
    text, _ = evaluate(tmp_path, hostile(tmp_path, "bigfile", attack.one_big_file(256)))
    assert "File too large" in compile_line(text) and "wrote" not in text, text
    text, _ = evaluate(tmp_path, hostile(tmp_path, "manyfiles", attack.many_files(24, 32)))
    assert "scratch quota" in compile_line(text) and "wrote" not in text, text


def test_a_daemon_is_killed_when_the_step_ends(tmp_path):
    marker = f"{600 + (os.getpid() % 1000) / 1000}"
    text, _ = evaluate(tmp_path, hostile(tmp_path, "daemon", attack.daemon(marker) +
                                         'raise RuntimeError("daemon started")\n'))
    assert "daemon started" in compile_line(text), text
    time.sleep(1)
    assert not sleepers(marker), "the daemon outlived the step"


def test_output_goes_to_a_capped_file_not_into_kbenchs_memory(tmp_path):
    text, peak = evaluate(tmp_path, hostile(tmp_path, "printer", attack.output_flood(1536) +
                                            'raise RuntimeError("printed 1.5 GiB")\n'))
    assert "printed 1.5 GiB" in compile_line(text), text
    assert peak < 1_000_000, f"kbench's own memory reached {peak / 1024:.0f} MiB"
