"""The kept judge's two ends, without a judge: the keeper's lifeline (a claimer that goes takes the judge with it)
and the client's refusals (a folder of another user's making, a socket not held by the keeper its state names)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from engine.pipeline import kept_judge
from engine.pipeline.keeper import main as keeper
from engine.pipeline.protocol.types import TimerSpec
from engine.procs import ChildOutcome, start_ticks

TIMER = TimerSpec("/nowhere/timer.so", "kbench_timer_x")


class SlowJudge:
    """A standby judge's stand-in whose evaluation lasts until it is stopped."""

    def __init__(self):
        self.stopped = threading.Event()

    def run(self, request, timeout_s):
        self.stopped.wait(timeout_s)
        return ChildOutcome({"finished": True}, 0, False, 0.0, "")

    def stop(self):
        self.stopped.set()


def test_a_claimer_that_goes_mid_evaluation_stops_the_judge():
    ours, theirs = socket.socketpair()
    judge = SlowJudge()
    served = []
    t = threading.Thread(target=lambda: served.append(keeper._serve(ours, judge)))
    t.start()
    theirs.sendall(json.dumps({"request": {"task": "x"}, "timeout_s": 60}).encode() + b"\n")
    time.sleep(0.5)
    assert not judge.stopped.is_set()           # working while its claimer waits
    theirs.close()                              # the claiming kbench exits, or is killed
    t.join(timeout=10)
    ours.close()
    assert judge.stopped.is_set() and served == [True]


def test_the_answer_goes_back_to_a_claimer_that_waits():
    ours, theirs = socket.socketpair()
    judge = SlowJudge()
    judge.stopped.set()                         # answers at once
    t = threading.Thread(target=keeper._serve, args=(ours, judge))
    t.start()
    theirs.sendall(json.dumps({"request": {}, "timeout_s": 5}).encode() + b"\n")
    line = keeper.read_line(theirs, 10)
    t.join(timeout=10)
    ours.close()
    theirs.close()
    assert json.loads(line)["outcome"]["result"] == {"finished": True}


def test_a_claimer_that_lets_go_before_its_request_leaves_the_judge_on_offer():
    ours, theirs = socket.socketpair()
    judge = SlowJudge()
    theirs.close()
    assert keeper._serve(ours, judge) is False and not judge.stopped.is_set()
    ours.close()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The kept judge's folder for TIMER on the default GPU, in a HOME of the test's own (not yet made)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return kept_judge.kept_root() / kept_judge.key_for(TIMER, None)


def test_a_kept_folder_open_to_others_or_a_stranger_on_its_socket_is_not_claimed(folder, monkeypatch):
    folder.mkdir(parents=True, mode=0o755)
    os.chmod(folder, 0o755)
    pid = os.getpid()
    (folder / keeper.STATE).write_text(json.dumps({"pid": pid, "ticks": start_ticks(pid), "state": "ready"}))
    assert kept_judge.claim(TIMER, None, wait_s=0) is None                   # readable by others: not ours
    os.chmod(folder, 0o700)
    # a listener that is not the keeper the state names (its pid is this test's, the state says another's)
    (folder / keeper.STATE).write_text(json.dumps({"pid": 1, "ticks": start_ticks(1), "state": "ready"}))
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    monkeypatch.chdir(folder)                  # a relative name: a test's path is past the 108-byte limit
    stranger.bind(keeper.SOCK)
    stranger.listen(1)
    got = []
    t = threading.Thread(target=lambda: got.append(stranger.accept()), daemon=True)
    t.start()
    assert kept_judge.claim(TIMER, None, wait_s=0) is None
    t.join(timeout=5)
    for conn, _ in got:
        conn.close()
    stranger.close()


def test_a_dead_keepers_state_is_cleared(folder):
    folder.mkdir(parents=True, mode=0o700)
    (folder / keeper.STATE).write_text(json.dumps({"pid": 999999999, "ticks": 5, "state": "ready"}))
    assert kept_judge.claim(TIMER, None, wait_s=0) is None
    assert not (folder / keeper.STATE).exists()


def test_the_environment_variable_overrides_the_config(monkeypatch):
    monkeypatch.setenv("KBENCH_KEEP_JUDGE_S", "7")
    assert kept_judge.keep_seconds(300.0) == 7.0
    monkeypatch.setenv("KBENCH_KEEP_JUDGE_S", "")
    assert kept_judge.keep_seconds(300.0) == 300.0


class Idle:
    def alive(self):
        return True


def test_the_keeper_answers_only_a_claim_with_its_token(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(keeper.SOCK)
    listener.listen(4)
    got = []
    t = threading.Thread(target=lambda: got.append(keeper._claim(listener, time.monotonic() + 20, Idle(), "s3cret")))
    t.start()
    wrong = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    wrong.connect(keeper.SOCK)
    wrong.sendall(b"claim guessed\n")
    assert keeper.read_line(wrong, 5) is None           # closed without an answer
    wrong.close()
    assert (tmp_path / keeper.SOCK).exists()             # still on offer
    right = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    right.connect(keeper.SOCK)
    right.sendall(b"claim s3cret\n")
    assert keeper.read_line(right, 5) == b"claimed"
    t.join(timeout=10)
    assert got and got[0] is not None and not (tmp_path / keeper.SOCK).exists()   # no one else can find it
    got[0].close()
    right.close()
    listener.close()


def test_a_keeper_that_ended_unreaped_is_not_running():
    """A keeper's parent after its command exits may be a subreaper that never waits: its zombie is not a keeper."""
    import subprocess
    import sys

    from engine.procs import running
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = start_ticks(child.pid)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert start_ticks(child.pid) == ticks and not running(child.pid, ticks)     # still listed, not running
    child.wait()
    assert not running(child.pid, ticks)
    assert running(os.getpid(), start_ticks(os.getpid())) and not running(os.getpid(), 0)
