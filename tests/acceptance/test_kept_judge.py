"""`kbench eval` leaves a judge up for the next `kbench eval` on the same GPU (engine/pipeline/kept_judge.py), as a
user meets it: the installed console script, the setting in ~/.config/kbench/config.toml, a HOME of the test's own.

On this machine (no GPU) the stand-in NVML of tests/fixtures/nvml_claims_gpu makes kbench start its judge as on a
GPU machine; the judge imports torch, starts its jailed runner and then finds no GPU itself (exit 3), which is all
the kept judge's path needs: who starts it, who claims it, and that nothing of it outlives its time or the command
that claimed it. With a GPU the same path measures for real (tests/cli/test_gpu_eval_cache.py)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from engine.procs import running, start_ticks
from tests.acceptance.test_eval_early_judge import BASELINE, claimed, start, variant  # noqa: F401 - fixture
from tests.conftest import HAS_GPU

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(HAS_GPU, reason="a real GPU: the judge measures; tests/cli/test_gpu_eval_cache.py")]


def kept_states(user) -> list[dict]:
    """The keepers of this user's kept judges (~/.local/state/kbench/kept: no XDG_RUNTIME_DIR in this
    environment), each with its folder."""
    root = user.home / ".local" / "state" / "kbench" / "kept"
    out = []
    for state in root.glob("*/keeper.json"):
        try:
            out.append({**json.loads(state.read_text()), "folder": state.parent})
        except (OSError, ValueError):
            pass      # being rewritten
    return out


def wait_for(cond, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(0.1)
    return cond()


def alive(state: dict) -> bool:
    return running(int(state["pid"]), state["ticks"])


def up(pids: list[int]) -> list[int]:
    """Those of `pids` still running (a zombie is not: the suite's worker may be a subreaper that never waits)."""
    return [p for p in pids if running(p, start_ticks(p))]


def children(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(k) for k in kids] + [g for k in kids for g in children(int(k))]


@pytest.fixture
def keeping(claimed):  # noqa: F811 - the fixture imported above
    """The user of `claimed`, who asked in their config file for a judge kept 60 s; their keepers are ended after."""
    claimed.env.update(KBENCH_KEEP_JUDGE_S="")        # unset: the config file decides
    claimed.config("[eval]\nkeep_judge_s = 60\n")
    yield claimed
    for state in kept_states(claimed):
        if alive(state):
            os.kill(int(state["pid"]), signal.SIGKILL)     # its judge's supervisor goes with it (parent-death)


def ready(user) -> dict | None:
    return next((s for s in kept_states(user) if s.get("state") == "ready" and alive(s)), None)


def test_the_next_eval_claims_the_judge_the_last_one_left(keeping):
    first = keeping.run("eval", "gelu_bias", str(BASELINE), timeout=300)
    assert first.returncode == 3, first.stderr[-3000:]
    assert "a judge stays up 60 s for the next `kbench eval`" in first.stderr, first.stderr[-2000:]
    kept = wait_for(lambda: ready(keeping), 120)
    assert kept, kept_states(keeping)
    judge_tree = children(int(kept["pid"]))
    assert judge_tree, "the keeper holds no judge"

    second = keeping.run("eval", "gelu_bias", str(BASELINE), "--json", timeout=300)
    assert second.returncode == 3, second.stdout[-2000:] + second.stderr[-3000:]
    report = json.loads(second.stdout)
    phases = report["phases"]
    assert phases["judge.kept"] == 1.0 and phases["judge.early"] == 1.0, phases
    assert "start.judge_spawned" not in phases, phases                # no judge of its own was started
    assert phases["start.judge_claimed"] < phases["start.judge_requested"], phases
    # the same verdict a judge of its own gives: no GPU found by the judge itself
    assert any("GPU" in v["reason"] for v in report["verdicts"] if v["status"] == "skipped"), report["verdicts"]
    # the kept judge served one request and is gone; a fresh one is kept for the command after
    assert wait_for(lambda: not alive(kept) and not up(judge_tree), 30), up(judge_tree)
    again = wait_for(lambda: ready(keeping), 120)
    assert again and again["pid"] != kept["pid"], kept_states(keeping)


def test_an_unclaimed_judge_goes_after_its_idle_time(keeping):
    keeping.config("[eval]\nkeep_judge_s = 3\n")
    out = keeping.run("eval", "gelu_bias", str(BASELINE), timeout=300)
    assert out.returncode == 3 and "a judge stays up 3 s" in out.stderr, out.stderr[-3000:]
    kept = wait_for(lambda: ready(keeping), 120)
    assert kept, kept_states(keeping)
    tree = [int(kept["pid"]), *children(int(kept["pid"]))]
    assert len(tree) >= 3, tree             # the keeper, the judge's supervisor, the judge (and its runner)
    assert wait_for(lambda: not up(tree), 30), up(tree)
    assert not Path(kept["folder"]).exists()


def test_keep_judge_s_0_keeps_none(keeping):
    keeping.config("[eval]\nkeep_judge_s = 0\n")
    out = keeping.run("eval", "gelu_bias", str(BASELINE), timeout=300)
    assert out.returncode == 3 and "stays up" not in out.stderr, out.stderr[-3000:]
    time.sleep(1.0)
    assert not kept_states(keeping)


def test_a_kbench_killed_before_its_request_puts_the_judge_back(keeping):
    """Claimed at the command's start, then the command is killed during its build: the keeper takes its judge back
    on offer (it was never handed a request), and the next command claims it."""
    keeping.run("eval", "gelu_bias", str(BASELINE), timeout=300)
    kept = wait_for(lambda: ready(keeping), 120)
    assert kept, kept_states(keeping)
    proc = start(keeping, "eval", "gelu_bias", str(variant(keeping)), "--json")    # nvcc runs: tens of seconds
    claimed_now = wait_for(lambda: next((s for s in kept_states(keeping) if s.get("state") == "claimed"), None), 60)
    assert claimed_now and claimed_now["pid"] == kept["pid"], kept_states(keeping)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    back = wait_for(lambda: ready(keeping), 10)
    assert back and back["pid"] == kept["pid"], kept_states(keeping)       # the same keeper, its judge unused
    nxt = keeping.run("eval", "gelu_bias", str(BASELINE), "--json", timeout=300)
    assert json.loads(nxt.stdout)["phases"]["judge.kept"] == 1.0, nxt.stdout[-2000:]


def test_kbench_judges_lists_the_kept_judge_and_stop_ends_it(keeping):
    keeping.run("eval", "gelu_bias", str(BASELINE), timeout=300)
    kept = wait_for(lambda: ready(keeping), 120)
    assert kept, kept_states(keeping)
    tree = [int(kept["pid"]), *children(int(kept["pid"]))]
    listed = keeping.run("judges", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["pid"] == kept["pid"] and row["state"] == "ready" and 0 < row["left_s"] <= 60, row
    stop = keeping.run("judges", "--stop")
    assert stop.returncode == 0 and "stopped 1 kept judge" in stop.stdout, stop.stdout + stop.stderr
    assert wait_for(lambda: not up(tree), 10), up(tree)
    assert not Path(kept["folder"]).exists()
    assert "no judge is kept" in keeping.run("judges").stdout


def test_a_judge_still_coming_up_is_claimed_once_the_build_is_done_and_no_second_is_started(keeping):
    """The next command begins while the last one's kept judge is still starting: it starts no judge of its own
    (two would compete for the GPU) and claims the kept one when its candidate is built."""
    first = keeping.run("eval", "gelu_bias", str(BASELINE), timeout=300)
    assert first.returncode == 3, first.stderr[-3000:]
    assert any(s.get("state") == "warming" for s in kept_states(keeping)), kept_states(keeping)   # not up yet
    nxt = keeping.run("eval", "gelu_bias", str(variant(keeping)), "--json", timeout=600)     # nvcc runs
    assert nxt.returncode == 3, nxt.stdout[-2000:] + nxt.stderr[-3000:]
    phases = json.loads(nxt.stdout)["phases"]
    assert "start.judge_spawned" not in phases, phases
    assert phases["judge.kept"] == 1.0 and phases["start.judge_claimed"] >= phases["start.build_done"], phases
