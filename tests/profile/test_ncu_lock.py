"""One ncu at a time on a machine (engine.pipeline.profiling.run_ncu): a profile that cannot get the lock within
its time limit is skipped with the reason, and never starts ncu."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.pipeline import profiling
from engine.profile.runner import ProfileOptions


def test_a_profile_waits_for_the_machines_ncu_lock_and_gives_up_with_the_reason(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    lock = tmp_path / "kbench-ncu.lock"
    monkeypatch.setattr(profiling, "NCU_LOCK", str(lock))
    started = tmp_path / "ncu-started"
    fake_ncu = tmp_path / "ncu"
    fake_ncu.write_text(f"#!/bin/sh\ntouch {started}\n")
    fake_ncu.chmod(0o755)
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time; from filelock import FileLock\n"
                               f"with FileLock({str(lock)!r}):\n print('held', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        kernels, reason = profiling.run_ncu(profiling.ProfileJob(task={}, direction="forward", config="small"),
                                           ProfileOptions(ncu=str(fake_ncu), ncu_timeout_s=1.5))
        waited = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    assert kernels == [] and reason.startswith("another ncu profile held this machine's lock"), reason
    assert 1.4 < waited < 10 and not started.exists()
