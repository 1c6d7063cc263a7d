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
from engine.gpu_wait import NO_GPU
from engine.pipeline.protocol.types import CandidateSpec, JudgeRequest, TimerSpec
from engine.pipeline import warm
from engine.pipeline.warm import JudgePool
from engine.procs import descendants, process_tree
from engine.tasks.loader import load_task
from tests.paths import REPO


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


def _spare(pool: JudgePool, timeout: float = 30.0):
    """The pool's one spare, once its thread has started it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with pool._lock:
            if pool._spares:
                return next(iter(pool._spares.values()))[0]
        time.sleep(0.05)
    raise AssertionError("no spare was started")


def _wait_up(spare, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (state := spare.state("standby.json")) is not None:
            return state
        time.sleep(0.1)
    raise AssertionError("the spare never said whether it came up")


def _jailed_children(pid: int) -> list[int]:
    """Jailed processes under `pid` (the spare's supervisor: its judge, and the judge's runner)."""
    out = []
    for kid in descendants(pid):
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
        assert cold.result.error == NO_GPU and not cold.result.warm
        assert "judge_start" in cold.result.seconds
        spare = _spare(pool)
        # the spare gets ready on its own: its runner runs under seccomp before any request exists
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _jailed_children(spare.proc.pid):
            time.sleep(0.2)
        assert spare.alive() and _jailed_children(spare.proc.pid)
        _wait_up(spare)
        warm = pool.run(request, timer, None, 200)
        assert not warm.crashed, warm.describe_crash()
        assert warm.result.warm and warm.result.error == NO_GPU
        assert warm.result.jail and warm.result.jail.missing == cold.result.jail.missing
        assert "judge_start" not in warm.result.seconds
        assert not spare.alive()                      # one request per spare: it exited after serving it
        assert (pool.started, pool.used) == (2, 1)
        nxt = _spare(pool)
        assert nxt is not spare and nxt.alive()       # its replacement started while it worked
    finally:
        pool.close()
    assert not pool._spares
    assert not _alive(nxt.proc.pid)


def test_a_spare_outlives_the_thread_that_asked_and_goes_when_idle(tmp_path, no_gpu):
    """The app evaluates from short-lived worker threads: the spare is the pool's, not the thread's, and one
    left unused is let go after the idle limit (its CUDA contexts hold GPU memory)."""
    import threading
    request, timer = _request(tmp_path)
    # the idle clock starts when the spare is spawned: 15 s leaves room for a loaded 2-core CI box (at 4 s a
    # starved test thread once found the spare already let go)
    pool = JudgePool(idle_s=15.0)
    try:
        t = threading.Thread(target=pool.run, args=(request, timer, None, 200))
        t.start()
        t.join()
        spare = _spare(pool)
        _wait_up(spare)
        assert spare.alive(), "the spare died with the thread that asked for it"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and spare.alive():
            time.sleep(0.2)
        assert not spare.alive() and not pool._spares
    finally:
        pool.close()


def test_a_spare_that_failed_to_come_up_never_judges_a_candidate(tmp_path, no_gpu):
    """A spare that warmed up during a fault (here: the timing helper's file was missing) says so, and the
    next request starts cold instead of inheriting the fault as a verdict."""
    request, timer = _request(tmp_path)
    helper = Path(timer.so_path)
    content = helper.read_bytes()
    helper.unlink()
    pool = JudgePool()
    try:
        first = pool.run(request, timer, None, 200)
        assert first.result.error and "FileNotFoundError" in first.result.error
        state = _wait_up(_spare(pool))
        assert state["ok"] is False and "FileNotFoundError" in state["why"]
        helper.write_bytes(content)            # the fault is over
        second = pool.run(request, timer, None, 200)
        assert second.result.error == NO_GPU and not second.result.warm and pool.used == 0
    finally:
        pool.close()


def test_a_dead_spare_is_replaced_by_a_cold_start(tmp_path, no_gpu):
    request, timer = _request(tmp_path)
    pool = JudgePool()
    try:
        pool.run(request, timer, None, 200)
        spare = _spare(pool)
        spare.proc.kill()
        spare.proc.wait()
        out = pool.run(request, timer, None, 200)
        assert out.result.error == NO_GPU and not out.result.warm and pool.used == 0
    finally:
        pool.close()


def test_a_judge_dies_with_the_process_that_started_it(tmp_path, no_gpu):
    """A killed kbench leaves no judge behind (one would hold the GPU's memory): the judge's parent-death
    signal, for a standby judge and its runner as for a cold one."""
    _, timer = _request(tmp_path)
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
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


def test_the_pool_registers_its_exit_hook_on_first_use_not_at_import(tmp_path, no_gpu, monkeypatch):
    """Every process that imports evaluate builds the pool; only one that asks for a judge owns spares to let
    go of at exit."""
    hooks = []
    monkeypatch.setattr(warm.atexit, "register", hooks.append)
    request, timer = _request(tmp_path)
    pool = JudgePool()
    assert hooks == []
    try:
        pool.run(request, timer, None, 200)
        pool.run(request, timer, None, 200)
        assert hooks == [pool.close]
    finally:
        pool.close()
