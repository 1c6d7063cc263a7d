"""`kbench eval` starts its judge as the command begins, while it builds the candidate, and no judge outlives it:
not after a build that fails, not after a Ctrl-C.

On a machine without a GPU kbench starts no judge at all, so these tests put a stand-in NVML first on the user's
PYTHONPATH (tests/fixtures/nvml_claims_gpu: one GPU that CUDA does not find, as in a container whose driver
libraries do not match). kbench cannot rule a GPU out and starts its judge as on a GPU machine; the judge, which
imports torch, the CUDA context and the jailed runner as always, then finds no GPU itself (exit 3). With a GPU
the same path runs for real: tests/cli/test_gpu_eval_cache.py reads the same phases."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from engine.procs import descendants, start_ticks
from tests.acceptance.conftest import KBENCH
from tests.conftest import HAS_GPU
from tests.paths import REPO

pytestmark = [pytest.mark.slow,   # builds the timing helper and candidates (nvcc) into the suite's shared cache
              pytest.mark.skipif(HAS_GPU, reason="a real GPU: the judge measures; tests/cli/test_gpu_eval_cache.py")]

BASELINE = REPO / "tasks" / "gelu_bias" / "baselines" / "forward"
CLAIMS_GPU = str(REPO / "tests" / "fixtures" / "nvml_claims_gpu")


@pytest.fixture
def claimed(user):
    """The user, on a machine whose NVML claims a GPU; their cache holds the timing helper (one evaluation)."""
    user.env["PYTHONPATH"] = CLAIMS_GPU
    first = user.run("eval", "gelu_bias", str(BASELINE), "--json", timeout=900)
    assert first.returncode == 3, first.stdout[-2000:] + first.stderr[-3000:]
    assert "judge" in json.loads(first.stdout)["phases"], first.stdout   # a judge ran (and found no GPU)
    return user


def variant(user, *, broken: bool = False) -> Path:
    """The baseline with a comment of its own (a new source hash: nvcc runs), or with a syntax error."""
    folder = user.cwd / f"cand-{uuid.uuid4().hex[:8]}"
    shutil.copytree(BASELINE, folder)
    kernel = folder / "kernel.cu"
    kernel.write_text(kernel.read_text() + f"\n// variant {folder.name}\n" + ("int broken(\n" if broken else ""))
    return folder


class Watch:
    """Every process kbench (pid) started, seen by polling its process tree, by (pid, start time)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.seen: dict[tuple[int, int], str] = {}

    def poll(self) -> None:
        for pid in descendants(self.proc.pid):
            ticks = start_ticks(pid)
            if ticks is not None and (pid, ticks) not in self.seen:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                self.seen[(pid, ticks)] = cmd

    def standby_judges(self) -> list[str]:
        return [c for c in self.seen.values() if "engine.pipeline.judge --standby" in c]

    def alive(self) -> list[str]:
        return [cmd for (pid, ticks), cmd in self.seen.items() if start_ticks(pid) == ticks]

    def until(self, cond, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.poll()
            if cond():
                return True
            time.sleep(0.05)
        return cond()


def none_left(watch: Watch, within: float = 10.0) -> list[str]:
    """What is still alive of the processes kbench started, once given `within` seconds to go."""
    deadline = time.monotonic() + within
    while (left := watch.alive()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def busy() -> float:
    """How much other work on the machine stretches a process's exit: the load per CPU, at least 1. The bounds
    below are about not waiting for a judge's start (seconds); a loaded machine slows the exit itself too."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def start(user, *args: str) -> subprocess.Popen:
    """kbench in a process group of its own, as a shell runs a foreground job (a Ctrl-C goes to the group), with
    SIGINT at its default as a terminal gives it, even in a background test run (tests/conftest.py)."""
    return subprocess.Popen([str(KBENCH), *args], cwd=user.cwd, env=user.env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def test_the_judge_is_started_before_the_build_is_done_and_is_handed_the_request(claimed):
    cand = variant(claimed)
    proc = start(claimed, "eval", "gelu_bias", str(cand), "--json")
    watch = Watch(proc)
    watch.until(lambda: False, timeout=600)        # follow the tree to the end
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, out[-2000:] + err[-3000:]
    assert watch.standby_judges(), list(watch.seen.values())      # a real standby judge, kbench's child
    phases = json.loads(out)["phases"]
    assert phases["build.cache_hit"] == 0.0 and phases["build"] > 0.5, phases       # nvcc ran
    # all in seconds since kbench started: the judge before the build was done, the request once it was
    assert phases["start.judge_spawned"] < phases["start.build_done"] - 0.3, phases
    assert phases["start.build_done"] <= phases["start.judge_requested"], phases
    assert phases["judge.early"] == 1.0 and phases["judge.warm"] == 1.0, phases
    assert phases["start.judge_ready"] > phases["start.judge_spawned"], phases
    # where its start went, in seconds since the judge started: its runner spawned before torch was imported
    # here (the two import torch at once), the runner's hello last, all before the judge was up
    steps = [phases[f"judge.warm.{k}"] for k in ("runner_spawned", "torch", "device", "runner_up")]
    assert steps == sorted(steps) and steps[-1] <= phases["judge.standby_up"] + 0.01, phases
    assert not none_left(watch, within=5.0)


def test_a_failing_build_leaves_no_judge_behind(claimed):
    cand = variant(claimed, broken=True)
    proc = start(claimed, "eval", "gelu_bias", str(cand), "--json")
    watch = Watch(proc)
    assert watch.until(lambda: bool(watch.standby_judges()), timeout=120), list(watch.seen.values())
    watch.until(lambda: False, timeout=600)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out[-2000:] + err[-3000:]
    report = json.loads(out)
    assert any(v["stage"] == "compile" and v["status"] == "fail" for v in report["verdicts"]), report["verdicts"]
    assert "start.judge_spawned" in report["phases"] and "judge" not in report["phases"], report["phases"]
    assert not none_left(watch), "still running after kbench exited: " + "; ".join(watch.alive())


def test_ctrl_c_during_the_build_leaves_no_judge_behind(claimed):
    for _ in range(3):
        cand = variant(claimed)
        proc = start(claimed, "eval", "gelu_bias", str(cand))
        watch = Watch(proc)
        assert watch.until(lambda: bool(watch.standby_judges()), timeout=120), list(watch.seen.values())
        os.killpg(proc.pid, signal.SIGINT)              # what a terminal's Ctrl-C does to the foreground job
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
        # a small kernel on an idle core builds in a second or two: where the verdict was out before the Ctrl-C
        # landed (a loaded machine noticed the judge late), the build was not interrupted; try a new variant
        if "=> COMPILED, NOT CHECKED" not in out:
            break
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    took = time.monotonic() - t0
    assert took < 2.0 * busy(), f"{took:.1f} s"      # not kept waiting for the judge to finish starting
    assert "kbench: interrupted" in err and "Traceback" not in err, err[-3000:]
    assert not none_left(watch), "still running after kbench exited: " + "; ".join(watch.alive())


def test_no_judge_is_started_where_no_gpu_can_be_visible(claimed):
    out = claimed.run("eval", "gelu_bias", str(BASELINE), "--json", env={"CUDA_VISIBLE_DEVICES": ""}, timeout=300)
    assert out.returncode == 3, out.stderr[-3000:]
    phases = json.loads(out.stdout)["phases"]
    assert "start.judge_spawned" not in phases and "judge" not in phases, phases


def test_bad_input_is_reported_without_waiting_for_the_judge_and_leaves_none(claimed):
    proc = start(claimed, "eval", "gelu_bias", str(BASELINE), "--config", "no-such-config")
    watch = Watch(proc)
    t0 = time.monotonic()
    watch.until(lambda: False, timeout=120)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 2 and "kbench: error: --config no-such-config" in err, err[-3000:]
    assert watch.standby_judges(), list(watch.seen.values())       # one was started as the command began...
    assert took < 3.0 * busy(), f"{took:.1f} s"                    # ...and not waited for
    assert not none_left(watch), "still running after kbench exited: " + "; ".join(watch.alive())
