"""Warm judges (engine/pipeline/warm.py) on a machine without a GPU: a spare judge jails its runner before any
request exists, serves exactly one request, is replaced while it works, and never outlives the process
that started it. (On a GPU the same path is what `kbench evolve` uses; BENCHMARKS.md has its figures.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.candidates import load_candidate
from engine.pipeline.types import NO_GPU, CandidateSpec, JudgeRequest, TimerSpec
from engine.pipeline.warm import JudgePool
from engine.procs import process_tree
from engine.tasks.loader import load_task

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def _request(tmp_path: Path) -> tuple[dict, TimerSpec]:
    timer = tmp_path / "timer.so"
    timer.write_bytes(b"\x7fELF not loaded without a GPU")
    spec = TimerSpec(str(timer), "kbench_timer_none")
    task = load_task("gelu_bias")
    cand = load_candidate(task.baseline_dir("forward"))
    req = JudgeRequest(task=task.to_json(), direction="forward",
                       candidate=CandidateSpec(cand.format, "kb_none", so_path=str(timer)), timer=spec,
                       result_path="", deadline_s=120)
    return req.to_json(), spec


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def _jailed_children(pid: int) -> list[int]:
    out = []
    for kid in process_tree().get(pid, []):
        try:
            if "Seccomp:\t2" in Path(f"/proc/{kid}/status").read_text():
                out.append(kid)
        except OSError:
            pass
    return out


def test_a_spare_is_jailed_before_its_request_and_serves_exactly_one(tmp_path, no_gpu):
    request, timer = _request(tmp_path)
    pool = JudgePool()
    try:
        cold = pool.run(request, timer, None, 200)
        assert not cold.crashed, cold.describe_crash()
        assert cold.result["error"] == NO_GPU and not cold.result["warm"]
        assert "judge_start" in cold.result["seconds"]
        spare = next(iter(pool._spares.values()))
        # the spare gets ready on its own: its runner runs under seccomp before any request exists
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _jailed_children(spare.proc.pid):
            time.sleep(0.2)
        assert spare.alive() and _jailed_children(spare.proc.pid)
        warm = pool.run(request, timer, None, 200)
        assert not warm.crashed, warm.describe_crash()
        assert warm.result["warm"] and warm.result["error"] == NO_GPU
        assert warm.result["jail"] and warm.result["jail"]["missing"] == cold.result["jail"]["missing"]
        assert "judge_start" not in warm.result["seconds"]
        assert not spare.alive()                      # one request per spare: it exited after serving it
        assert (pool.started, pool.used) == (2, 1)
        nxt = next(iter(pool._spares.values()))
        assert nxt is not spare and nxt.alive()       # its replacement started while it worked
    finally:
        pool.close()
    assert not pool._spares
    assert not _alive(nxt.proc.pid)


def test_a_dead_spare_is_replaced_by_a_cold_start(tmp_path, no_gpu):
    request, timer = _request(tmp_path)
    pool = JudgePool()
    try:
        pool.run(request, timer, None, 200)
        spare = next(iter(pool._spares.values()))
        spare.proc.kill()
        spare.proc.wait()
        out = pool.run(request, timer, None, 200)
        assert out.result["error"] == NO_GPU and not out.result["warm"] and pool.used == 0
    finally:
        pool.close()


def test_a_judge_dies_with_the_process_that_started_it(tmp_path, no_gpu):
    """A killed kbench leaves no judge behind (one would hold the GPU's memory): the judge's parent-death
    signal, for a standby judge and its runner as for a cold one."""
    _, timer = _request(tmp_path)
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from engine.procs import StandbyChild
        c = StandbyChild("engine.pipeline.judge", [{timer.so_path!r}, {timer.module_name!r}])
        print(c.proc.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    judge_pid = int(parent.stdout.readline())
    time.sleep(3)   # let it start its runner
    kids = process_tree().get(judge_pid, [])
    assert _alive(judge_pid) and kids
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (_alive(judge_pid) or any(_alive(k) for k in kids)):
        time.sleep(0.2)
    assert not _alive(judge_pid), "the judge outlived the process that started it"
    assert not any(_alive(k) for k in kids), "the judge's runner outlived it"
