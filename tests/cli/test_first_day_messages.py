"""Small things a newcomer notices on the command line: advice a command cannot follow, an exit code unlike its
siblings', times and sizes that do not add up or read badly, a syntax error called a reward hack, a mistyped
task name, an export refusal that does not say what counts. The installed `kbench`, a HOME of the test's own,
the fake evaluator where a session is needed; no GPU, no compiler."""

from __future__ import annotations

import re
import shutil
import signal
import time
from pathlib import Path

from engine.candidates import load_candidate
from engine.gpu_wait import NO_GPU, WAITING_EVENT
from engine.tasks.loader import load_task
from engine.verdict import Stage, Status, Verdict
from engine.workspace import Event, VerdictNote, Workspace
from engine.workspace.claim_holders import CLAIM_DIR
from tests.installed import kbench, start
from tests.paths import FIXTURES, REPO

EVOLVE = ("evolve", "gelu_bias", "--proposer", "tuner", "--fake-evaluator", "--session", "s")


def test_override_on_a_busy_session_is_not_told_to_take_over(tmp_path):
    """`kbench override` has no --take-over: the refusal says to wait and try again."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    writer = start(home, "--workspace", str(ws), *EVOLVE, "--generations", "3", "--population", "2",
                   env={"KBENCH_FAKE_EVAL_HOLD_AFTER": "1"})      # holds the session: its second evaluation waits
    try:
        deadline = time.monotonic() + 120
        while not (ws / ".git" / CLAIM_DIR / "s.holder.json").exists() or \
                "s-g0-1" not in kbench(home, "--workspace", str(ws), "log", "s").stdout:
            assert writer.poll() is None and time.monotonic() < deadline, writer.communicate()
            time.sleep(0.2)
        out = kbench(home, "--workspace", str(ws), "override", "s-g0-1", "timing", "fail", "--reason", "checked")
    finally:
        writer.send_signal(signal.SIGINT)
        writer.communicate(timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("kbench: error: session 's' is being written by kbench "
                                                         "evolve (pid "), err
    assert "--take-over" not in err and "try again" in err and "nothing was written" in err, err
    help_text = kbench(home, "override", "--help").stdout
    assert "--take-over" not in help_text             # the advice it had was for a flag it does not have


def test_reevaluate_without_a_gpu_exits_3_like_eval_and_evolve(tmp_path):
    home, ws = tmp_path / "home", tmp_path / "ws"
    assert kbench(home, "--workspace", str(ws), *EVOLVE, "--generations", "0", "--population", "1").returncode == 0
    before = kbench(home, "--workspace", str(ws), "log", "s", "--json").stdout
    out = kbench(home, "--workspace", str(ws), "reevaluate", "s-g0-1", "--fake-evaluator",
                 env={"KBENCH_FAKE_NO_GPU": "1"})
    assert out.returncode == 3, out.stdout + out.stderr
    assert f"s-g0-1: not re-measured: {NO_GPU}; its notes are unchanged" in out.stdout
    assert "still waiting" not in out.stdout          # it had a measurement: nothing about it is "still" waiting
    assert kbench(home, "--workspace", str(ws), "log", "s", "--json").stdout == before
