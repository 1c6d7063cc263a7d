"""One writer per session across processes: a second writer is refused naming the holder, take-over is
explicit, a killed writer's git child finishes before anyone reads, and workspace creation races are
harmless. CPU only: kbench evolve with the fake evaluator in child processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kbench_procs import (ENV, REPO, evaluated_counts, evolve_args, git_fsck_clean, kbench, kbench_fsck_clean,
                                run, shape, start, wait_until)

from engine.workspace import Workspace
from engine.workspace import claim_holders
from engine.workspace.errors import SessionTakenOverError

HOST = socket.gethostname()
SLOW = {"KBENCH_FAKE_EVAL_DELAY": "0.3"}


def holder_file(ws: Path, session: str) -> Path:
    return ws / ".git" / claim_holders.CLAIM_DIR / f"{session}.holder.json"


def test_a_second_evolve_on_the_session_is_refused_and_the_first_is_unaffected(tmp_path):
    ws, ref = tmp_path / "ws", tmp_path / "ref"
    first = start(evolve_args(ws, "s"), env=SLOW)
    try:
        wait_until(lambda: holder_file(ws, "s").exists(), what="the first writer's record")
        second = run(evolve_args(ws, "s"), env=SLOW)
    finally:
        out, err = first.communicate(timeout=180)
    assert second.returncode == 2, second.stdout + second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
    assert lines[0].startswith(f"kbench: error: session 's' is being written by kbench evolve (pid {first.pid} "
                               f"on {HOST}, since "), lines[0]
    assert "--take-over" in lines[0]
    assert "[s]" not in second.stdout          # it started nothing: no event line
    assert first.returncode == 0, err
    # the first ran exactly as it would have alone
    assert run(evolve_args(ref, "s")).returncode == 0
    assert shape(ws, "s") == shape(ref, "s")
    assert set(evaluated_counts(ws, "s").values()) == {1}
    assert not holder_file(ws, "s").exists()   # released at the end
    git_fsck_clean(ws)
    kbench_fsck_clean(ws)


def test_a_one_shot_write_is_refused_while_a_session_runs_and_allowed_after(tmp_path):
    ws = tmp_path / "ws"
    first = start(evolve_args(ws, "s"), env=SLOW)
    try:
        wait_until(lambda: holder_file(ws, "s").exists() and any(
            True for _ in (ws / ".git" / "refs" / "kbench" / "s").glob("s-g0-1")), what="the baseline commit")
        override = kbench(ws, "override", "s-g0-1", "timing", "fail", "--reason", "looks off")
    finally:
        first.communicate(timeout=180)
    assert override.returncode == 2 and "Traceback" not in override.stderr, override.stderr
    assert f"being written by kbench evolve (pid {first.pid}" in override.stderr
    after = kbench(ws, "override", "s-g0-1", "timing", "fail", "--reason", "looks off")
    assert after.returncode == 0, after.stderr


def test_take_over_stops_the_old_writer_at_its_next_write(tmp_path):
    ws = tmp_path / "ws"
    first = start(evolve_args(ws, "s", generations=4), env={"KBENCH_FAKE_EVAL_DELAY": "0.3"})
    try:
        wait_until(lambda: holder_file(ws, "s").exists(), what="the first writer's record")
        time.sleep(0.5)
        second = run(evolve_args(ws, "s", generations=4, extra=("--take-over",)))
        out, err = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 0, second.stderr
    assert first.returncode == 2, out + err
    assert "taken over by kbench evolve" in err and "Traceback" not in err, err
    counts = evaluated_counts(ws, "s")
    assert len(counts) == 1 + 4 * 3 and set(counts.values()) == {1}, counts
    git_fsck_clean(ws)
    kbench_fsck_clean(ws)


def test_a_dead_writers_record_is_replaced_without_asking(tmp_path):
    ws = tmp_path / "ws"
    Workspace.create(ws).close()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    claim_dir = ws / ".git" / claim_holders.CLAIM_DIR
    claim_dir.mkdir()
    (claim_dir / "s.holder.json").write_text(json.dumps(
        {"pid": gone.pid, "host": HOST, "started": None, "since": "2026-01-01T00:00:00Z",
         "command": "kbench evolve", "token": "old"}))
    fsck = kbench(ws, "fsck", "--dry-run")
    assert "which is gone: would be removed" in fsck.stdout
    done = run(evolve_args(ws, "s", generations=1))
    assert done.returncode == 0, done.stderr


def workspace_with_a_writer_on_another_host(tmp_path: Path) -> Path:
    """A workspace whose session "s" has a fresh holder record from host gpu-node-7 (no lock: not carried here)."""
    ws = tmp_path / "ws"
    Workspace.create(ws).close()
    claim_dir = ws / ".git" / claim_holders.CLAIM_DIR
    claim_dir.mkdir()
    (claim_dir / "s.holder.json").write_text(json.dumps(
        {"pid": 4242, "host": "gpu-node-7", "started": 1, "since": "2026-01-01T00:00:00Z",
         "command": "kbench evolve", "token": "theirs"}))
    return ws


def test_a_live_writer_on_another_host_is_respected_until_taken_over(tmp_path):
    ws = workspace_with_a_writer_on_another_host(tmp_path)
    refused = run(evolve_args(ws, "s", generations=1), env={"KBENCH_CLAIM_WAIT_S": "0.3"})
    assert refused.returncode == 2
    assert "being written by kbench evolve (pid 4242 on gpu-node-7" in refused.stderr, refused.stderr
    taken = run(evolve_args(ws, "s", generations=1, extra=("--take-over",)))
    assert taken.returncode == 0, taken.stderr


def test_fsck_keeps_the_record_of_a_live_writer_on_another_host_that_the_claim_respects(tmp_path):
    """One rule for fsck and the claim: a fresh record from another host (whose lock this filesystem may not carry)
    is a writer there. fsck used to call it gone and remove it, and a second writer was then accepted."""
    ws = workspace_with_a_writer_on_another_host(tmp_path)
    for args in (("fsck", "--dry-run"), ("fsck",)):
        out = kbench(ws, *args)
        assert "being written by kbench evolve (pid 4242 on gpu-node-7" in out.stdout, out.stdout + out.stderr
        assert "gone" not in out.stdout and holder_file(ws, "s").is_file()
    refused = run(evolve_args(ws, "s", generations=1), env={"KBENCH_CLAIM_WAIT_S": "0.3"})
    assert refused.returncode == 2 and "pid 4242 on gpu-node-7" in refused.stderr, refused.stderr
    # once its heartbeat is older than the claim's limit, both call it gone: fsck removes it, a writer claims
    old = time.time() - claim_holders.REMOTE_STALE_S - 5
    os.utime(holder_file(ws, "s"), (old, old))
    assert "removed the writer record of kbench evolve (pid 4242" in kbench(ws, "fsck").stdout
    assert run(evolve_args(ws, "s", generations=1)).returncode == 0


def test_claims_in_one_process_are_reentrant_and_guard_writes(tmp_path, layernorm_task):
    ws = Workspace.create(tmp_path / "ws")
    ws.start_session("ln", layernorm_task)
    with ws.claim("ln", "test") as c1, ws.claim("ln", "test") as c2:
        assert c1.holder == c2.holder and c1.holder.pid == os.getpid()
        # another process cannot claim it, nor write to it
        code = ("import sys\nfrom engine.workspace import Workspace\nw = Workspace.open(sys.argv[1])\n"
                "try:\n    w.claim('ln', 'other')\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
        out = subprocess.run([sys.executable, "-c", code, str(ws.path)], capture_output=True, text=True, env={
            **ENV, "KBENCH_CLAIM_WAIT_S": "0.2"}, cwd=REPO).stdout
        assert out.startswith("SessionBusyError session 'ln' is being written by test (pid"), out
        # a take-over elsewhere: this process's next write stops
        holder = json.loads(holder_file(ws.path, "ln").read_text())
        holder_file(ws.path, "ln").write_text(json.dumps({**holder, "token": "someone-else", "command": "x"}))
        from engine.candidates import Candidate
        with pytest.raises(SessionTakenOverError, match="taken over by x"):
            ws.commit_candidate("ln", Candidate("native", {"kernel.cu": "//\n", "binding.cpp": "//\n"}, "a"))
    ws.close()


HOOK = """#!/bin/sh
# slows down the one ref update a test kills kbench in the middle of
if [ -n "$KBENCH_CRASHED_DURING_REFS" ] && [ "$1" = prepared ]; then sleep 2; fi
exit 0
"""


@pytest.mark.parametrize("nth", [2, 4, 5, 6, 9, 13])
def test_a_kill_while_git_writes_never_evaluates_twice(tmp_path, nth):
    ws = tmp_path / "ws"
    Workspace.create(ws).close()
    hook = ws / ".git" / "hooks" / "reference-transaction"
    hook.write_text(HOOK)
    hook.chmod(0o755)
    args = evolve_args(ws, "s", generations=2, population=3)
    killed = run(args, env={"KBENCH_CRASHPOINT": f"during-refs:{nth}"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    t0 = time.monotonic()
    resumed = run(args)          # at once: the killed kbench's git child is still in its hook
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert time.monotonic() - t0 > 1.0          # it waited for that child
    counts = evaluated_counts(ws, "s")
    assert len(counts) == 1 + 2 * 3 and set(counts.values()) == {1}, counts
    assert not list((ws / ".git").rglob("*.lock"))
    git_fsck_clean(ws)
    kbench_fsck_clean(ws)


GO = """
import sys, time
from pathlib import Path
from tests.doubles.kbench import main
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.001)
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("round_", range(3))
def test_two_processes_create_the_workspace_at_once(tmp_path, round_):
    ws, go = tmp_path / "ws", tmp_path / "go"
    if round_ == 2:
        ws.mkdir()   # an existing empty folder
    # GO runs tests.doubles.kbench's main (kbench on the fake evaluator) once the go file exists
    procs = [subprocess.Popen([sys.executable, "-c", GO, str(go), *evolve_args(ws, name, generations=1)[3:]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=REPO)
             for name in ("a", "b")]
    time.sleep(0.6)   # both are waiting on the go file
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
        assert "Traceback" not in err
    assert sorted(x.name for x in ws.iterdir()) == [".git"]
    assert not list(tmp_path.glob(".ws.kbench-init-*"))   # scratch folders cleaned up
    for name in ("a", "b"):
        assert set(evaluated_counts(ws, name).values()) == {1} and len(evaluated_counts(ws, name)) == 1 + 3
    git_fsck_clean(ws)
    kbench_fsck_clean(ws)


def test_creating_an_existing_workspace_is_a_no_op(tmp_path):
    ws = tmp_path / "ws"
    for _ in range(2):
        out = kbench(ws, "init-workspace")
        assert out.returncode == 0 and "workspace ready" in out.stdout, out.stderr
    assert sorted(x.name for x in ws.iterdir()) == [".git"]


HOLD = """
import sys, time
from engine.workspace import Workspace
ws = Workspace.open(sys.argv[1])
claim = ws.claim(sys.argv[2], "kbench evolve")
print("claimed", flush=True)
time.sleep(600)
"""


def test_the_app_refuses_a_session_another_process_writes(tmp_path):
    from tests.doubles.evaluator import FakeEvaluator
    from engine.errors import KbenchError
    from kbench_tui.backend import Backend

    ws = tmp_path / "ws"
    Workspace.create(ws).close()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(ws), "gelu_bias-fwd-tuner"], stdout=subprocess.PIPE,
                              text=True, env=ENV, cwd=REPO)
    made = []
    backend = Backend(ws, evaluator_factory=lambda t, d: made.append(FakeEvaluator(t)) or made[-1], gpus=[], env={})
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with pytest.raises(KbenchError, match=rf"being written by kbench evolve \(pid {holder.pid} on {HOST}"):
            backend.start_evolution(task="gelu_bias", direction="forward", proposer="tuner", generations=1,
                                    population=2, session="gelu_bias-fwd-tuner")
        assert "gelu_bias-fwd-tuner" not in backend.runners
        holder.kill()
        holder.wait(30)
        es = backend.start_evolution(task="gelu_bias", direction="forward", proposer="tuner", generations=1,
                                     population=2, session="gelu_bias-fwd-tuner")
        es.join(60)
        assert es.result is not None and es.result.completed, es.result
    finally:
        if holder.poll() is None:
            holder.kill()
        backend.close()
