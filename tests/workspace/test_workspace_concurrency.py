"""Several writers at once (threads and processes), and writers killed mid-commit."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.verdict import Stage, Status, Verdict
from engine.workspace import Measurement, Workspace
from tests.paths import REPO
from tests.workspace.conftest import plain_cand
from tests.workspace.git_helpers import fsck_clean, git

ENV = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "KBENCH_CRASHPOINT"}
ENV["PYTHONPATH"] = str(REPO) + os.pathsep + ENV.get("PYTHONPATH", "")

CHILD = r"""
import os, sys, time
from engine.candidates import Candidate
from engine.verdict import Verdict, Status
from engine.workspace import Workspace
path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
crash = os.environ.pop("CHILD_CRASH_AFTER_FIRST", None)
ws = Workspace.open(path)
for i in range(n):
    if i == 1 and crash:
        os.environ["KBENCH_CRASHPOINT"] = crash
    c = Candidate("native", {"kernel.cu": f"// {tag} {i}\n" + "x" * (i * 97 % 5000), "binding.cpp": "// glue\n"},
                  f"{tag}-{i}")
    rec = ws.commit_candidate("ln", c)
    print("C", rec.id, rec.commit, flush=True)
    ws.record_verdict(rec.id, Verdict("compile", Status.PASS, f"{tag}-{i}"))
    print("N", rec.id, flush=True)
"""


def wait_for_git_children(path: Path, timeout: float = 10.0) -> None:
    """A killed writer's git child (update-ref) finishes on its own; wait until no .lock file is left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not list((path / ".git").rglob("*.lock")):
            return
        time.sleep(0.05)
    raise AssertionError(f"stale lock files: {list((path / '.git').rglob('*.lock'))}")


@pytest.fixture
def ws(tmp_path, layernorm_task):
    w = Workspace.create(tmp_path / "ws")
    w.start_session("ln", layernorm_task, proposer="anthropic")
    yield w
    w.close()


def child(ws: Workspace, tag: str, n: int, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(ws.path), tag, str(n)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**ENV, **env}, cwd=REPO)


@pytest.mark.parametrize("shared", [True, False], ids=["one-workspace", "workspace-per-thread"])
def test_threads_commit_at_once(ws, shared):
    n_threads, per_thread = 4, 6
    errors, made = [], []
    lock = threading.Lock()
    start = threading.Barrier(n_threads)

    def work(t: int) -> None:
        w = ws if shared else Workspace.open(ws.path)
        try:
            start.wait()
            prev = None
            for i in range(per_thread):
                rec = w.commit_candidate("ln", plain_cand(f"t{t}-{i}"), parents=[prev] if prev else [])
                # one append: compile and correctness passed (engine.verdict.judge needs both to be eligible)
                w.record_verdicts(rec.id, [Verdict(Stage.COMPILE, Status.PASS, f"t{t}-{i}"),
                                           Verdict(Stage.CORRECTNESS, Status.PASS)])
                w.record_measurement(rec.id, Measurement(1.0 + t + i / 10))
                prev = rec.id
                with lock:
                    made.append(rec)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            if not shared:
                w.close()

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    ids = [r.id for r in made]
    assert len(ids) == len(set(ids)) == n_threads * per_thread
    views = {v.id: v for v in ws.candidates("ln")}
    assert set(views) == set(ids)
    for r in made:
        v = views[r.id]
        assert v.status.status_of("compile") == Status.PASS and v.status.stages["compile"].verdicts == 1
        assert v.status.speedup is not None
        assert v.status.stages["compile"].verdict.verdict.reason == v.record.subject.split(" · ")[-1]
    # the best is the fastest, and the branch is there
    best = max(made, key=lambda r: views[r.id].status.speedup)
    assert ws.session("ln").best == best.id
    assert git(ws.path, "rev-parse", "sessions/ln").strip() == best.commit
    # one notes commit per append, on the empty one a new workspace starts the ref with
    assert int(git(ws.path, "rev-list", "--count", "refs/notes/kbench")) == 2 * n_threads * per_thread + 1
    fsck_clean(ws.path)


def test_processes_commit_at_once(ws):
    procs = [child(ws, f"p{i}", 8) for i in range(3)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    ids = [line.split()[1] for out, _ in outs for line in out.splitlines() if line.startswith("C")]
    assert sorted(ids) == sorted(f"ln-g0-{i}" for i in range(1, 25))
    assert len(ws.candidates("ln")) == 24
    assert all(v.status.status_of("compile") == Status.PASS for v in ws.candidates("ln"))
    fsck_clean(ws.path)


@pytest.mark.parametrize("round_", range(4))
def test_child_killed_mid_commit_leaves_a_clean_repository(ws, round_):
    rng = random.Random(round_)
    proc = child(ws, f"k{round_}", 100_000)
    committed, noted = {}, set()
    target = rng.randint(2, 8)
    while len(noted) < target:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        kind, cid, *rest = line.split()
        if kind == "C":
            committed[cid] = rest[0]
        else:
            noted.add(cid)
    time.sleep(rng.uniform(0.0, 0.02))   # land somewhere inside the next commit or append
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    for line in out.splitlines(keepends=True):   # whatever it reported before dying counts as done
        if not line.endswith("\n"):     # a report the kill cut mid-write (seen in CI: one word of it) is none
            continue
        kind, cid, *rest = line.split()
        if kind == "C":
            committed[cid] = rest[0]
        else:
            noted.add(cid)
    assert proc.returncode == -signal.SIGKILL
    wait_for_git_children(ws.path)
    fsck_clean(ws.path)
    with Workspace.open(ws.path) as again:
        views = {v.id: v for v in again.candidates("ln")}
        for cid, sha in committed.items():
            assert cid in views and views[cid].record.commit == sha       # no completed candidate lost
        for cid in noted:
            assert views[cid].status.status_of("compile") == Status.PASS  # no completed note lost
        # and the workspace carries on
        rec = again.commit_candidate("ln", plain_cand("after"))
        again.record_verdict(rec.id, Verdict("compile", Status.PASS))
        assert rec.id not in committed
    fsck_clean(ws.path)


@pytest.mark.parametrize("point,second_present", [("before-commit-object", False), ("before-refs", False),
                                                  ("after-refs", True), ("notes-objects", True)])
def test_crash_at_each_step(ws, point, second_present):
    proc = child(ws, "c", 3, CHILD_CRASH_AFTER_FIRST=point)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err
    wait_for_git_children(ws.path)
    fsck_clean(ws.path)
    ids = {v.id: v for v in ws.candidates("ln")}
    assert "ln-g0-1" in ids and ids["ln-g0-1"].status.status_of("compile") == Status.PASS
    assert ("ln-g0-2" in ids) == second_present
    if second_present:
        assert ids["ln-g0-2"].status.status_of("compile") is None  # died before (or right at) its note
    rec = ws.commit_candidate("ln", plain_cand("next"))
    assert rec.id == ("ln-g0-3" if second_present else "ln-g0-2")
    fsck_clean(ws.path)


LOCK_HOLDER = r"""
import sys, time
from engine.workspace import Workspace
ws = Workspace.open(sys.argv[1])
with ws._repo.lock:
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
print("released", flush=True)
"""


def test_writer_lock_serialises_processes_and_dies_with_its_holder(ws):
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(ws.path), "1.0"], stdout=subprocess.PIPE,
                              text=True, env=ENV, cwd=REPO)
    assert holder.stdout.readline().strip() == "locked"
    t0 = time.monotonic()
    ws.commit_candidate("ln", plain_cand("waits"))
    assert time.monotonic() - t0 > 0.5        # had to wait for the other process
    holder.wait(30)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(ws.path), "600"], stdout=subprocess.PIPE,
                              text=True, env=ENV, cwd=REPO)
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait(30)
    t0 = time.monotonic()
    ws.commit_candidate("ln", plain_cand("after-kill"))
    assert time.monotonic() - t0 < 5          # the kernel dropped the dead holder's lock
