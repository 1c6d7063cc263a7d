"""Damage is named, never read as "nothing there": a missing, garbage or truncated note, an unparsable
session.json or candidate.json, a git lock file another tool left. Each gives one `kbench: error:
workspace damaged: ...` line (no traceback), writes nothing over the damage, and `kbench fsck` names it."""

from __future__ import annotations

import os
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from tests.kbench_procs import (ENV, evaluated_counts, evolve_args, git_fsck_clean, kbench, kbench_fsck_clean,
                                run, start, wait_until)


def git(ws: Path, *args: str, input: bytes | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=ws, capture_output=True, env=ENV, input=input)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode().strip()


def object_file(ws: Path, sha: str) -> Path:
    path = ws / ".git" / "objects" / sha[:2] / sha[2:]
    assert path.exists(), f"{sha} is not a loose object"
    return path


def rewrite_object(ws: Path, sha: str, kind: str, data: bytes) -> None:
    """Put other content under an object's name (what a disk or a careless tool does; git does not check)."""
    path = object_file(ws, sha)
    path.chmod(0o644)
    path.write_bytes(zlib.compress(f"{kind} {len(data)}\0".encode() + data))


@pytest.fixture
def session(tmp_path):
    ws = tmp_path / "ws"
    out = run(evolve_args(ws, "s", generations=1, population=2))
    assert out.returncode == 0, out.stderr
    return ws


def note_blob(ws: Path, cid: str) -> str:
    commit = git(ws, "rev-parse", f"refs/kbench/s/{cid}")
    return git(ws, "notes", "--ref", "kbench", "list", commit)


def one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kbench: error: workspace damaged: "), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def resume_refused_and_nothing_written(ws: Path, *needles: str) -> None:
    notes_before = git(ws, "rev-parse", "refs/notes/kbench")
    refs_before = git(ws, "for-each-ref")
    one_error_line(run(evolve_args(ws, "s", generations=2, population=2)), *needles)
    assert git(ws, "rev-parse", "refs/notes/kbench") == notes_before
    assert git(ws, "for-each-ref") == refs_before


def fsck_names(ws: Path, *needles: str) -> str:
    out = kbench(ws, "fsck")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    for n in needles:
        assert n in out.stdout, out.stdout
    return out.stdout


@pytest.mark.parametrize("how", ["missing", "garbage", "truncated"])
def test_a_damaged_note_is_named_and_resume_refuses_to_guess(session, how):
    ws = session
    blob = note_blob(ws, "s-g1-1")
    if how == "missing":
        object_file(ws, blob).unlink()
        why = "is missing from the repository"
    elif how == "garbage":
        garbage = git(ws, "hash-object", "-w", "--stdin", input=b"\x00\xff\xfe binary junk \x00")
        git(ws, "notes", "--ref", "kbench", "add", "-f", "-C", garbage, git(ws, "rev-parse", "refs/kbench/s/s-g1-1"))
        blob = garbage
        why = "is not text"
    else:
        path = object_file(ws, blob)
        data = path.read_bytes()
        path.chmod(0o644)
        path.write_bytes(data[: len(data) // 2])
        why = "cannot be read (git:"
    old_notes = git(ws, "rev-parse", "refs/notes/kbench")
    for cmd in (["log", "s"], ["show-candidate", "s-g1-1"]):
        one_error_line(kbench(ws, *cmd), f"candidate s-g1-1's note (object {blob}) {why}", "kbench fsck")
    # the listing that tolerates damage names it too, and shows the rest
    listing = kbench(ws, "log", "s", "--json")
    assert listing.returncode == 2 and "Traceback" not in listing.stderr
    resume_refused_and_nothing_written(ws, f"candidate s-g1-1's note (object {blob})", "--reevaluate-damaged")
    fsck_names(ws, "DAMAGED", f"candidate s-g1-1: workspace damaged: candidate s-g1-1's note (object {blob})")

    # the user says so: the candidate is evaluated again, its note goes on from a line naming the lost one
    before = evaluated_counts_tolerant(ws)
    out = run(evolve_args(ws, "s", generations=1, population=2, extra=("--reevaluate-damaged",)))
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stdout + out.stderr
    text = git(ws, "notes", "--ref", "kbench", "show", git(ws, "rev-parse", "refs/kbench/s/s-g1-1"))
    first = text.splitlines()[0]
    assert '"event":"history_unreadable"' in first and blob in first
    assert sum('"event":"evaluated"' in line for line in text.splitlines()) == 1
    # nothing else was evaluated again, and the old note is still in the notes history
    after = evaluated_counts(ws, "s")
    assert {k: v for k, v in after.items() if k != "s-g1-1"} == {k: v for k, v in before.items() if k != "s-g1-1"}
    assert blob in git(ws, "ls-tree", "-r", old_notes)


def evaluated_counts_tolerant(ws: Path) -> dict[str, int]:
    from engine.workspace import Workspace
    with Workspace.open(ws) as w:
        return {v.id: sum(1 for e in v.status.events if e.event == "evaluated")
                for v in w.candidates("s", strict=False)}


def test_a_corrupt_line_in_a_note_is_kept_when_the_user_goes_on(session):
    ws = session
    commit = git(ws, "rev-parse", "refs/kbench/s/s-g1-1")
    git(ws, "notes", "--ref", "kbench", "append", "-m", '{"kind": "verdict", "stage": "tim', commit)
    one_error_line(kbench(ws, "show-candidate", "s-g1-1"), "candidate s-g1-1", "line")
    resume_refused_and_nothing_written(ws, "candidate s-g1-1")
    out = run(evolve_args(ws, "s", generations=1, population=2, extra=("--reevaluate-damaged",)))
    assert out.returncode == 0, out.stderr
    lines = git(ws, "notes", "--ref", "kbench", "show", commit).splitlines()
    assert any(l.startswith('{"kind": "verdict", "stage": "tim') for l in lines)   # appended after, not replaced
    assert sum('"event":"evaluated"' in l for l in lines) == 2                     # the old one and the new one


def test_an_unparsable_session_record_is_named(session):
    ws = session
    root = git(ws, "rev-parse", "refs/kbench/s/root")
    blob = git(ws, "rev-parse", f"{root}:.kbench/session.json")
    text = git(ws, "cat-file", "blob", blob).encode()
    rewrite_object(ws, blob, "blob", text[: len(text) // 3])
    for cmd in (["log", "s"], ["reevaluate", "s"]):
        one_error_line(kbench(ws, *cmd, fake_evaluator=True), f"session s's record (.kbench/session.json, object {blob}) is not valid JSON")
    resume_refused_and_nothing_written(ws, f"session s's record (.kbench/session.json, object {blob})")
    listed = kbench(ws, "sessions")
    assert listed.returncode == 0 and f"object {blob}" in listed.stdout, listed.stdout + listed.stderr
    fsck_names(ws, "session s: workspace damaged: session s's record")


def test_an_unparsable_candidate_record_is_named(session):
    ws = session
    commit = git(ws, "rev-parse", "refs/kbench/s/s-g1-2")
    blob = git(ws, "rev-parse", f"{commit}:.kbench/candidate.json")
    rewrite_object(ws, blob, "blob", b'{"id": "s-g1-2", "files": ["kern')
    one_error_line(kbench(ws, "show-candidate", "s-g1-2"),
                   f"candidate s-g1-2's record (.kbench/candidate.json, object {blob}) is not valid JSON")
    # resuming reads the newest candidate's record (the search state): named, nothing written over
    resume_refused_and_nothing_written(ws, f"candidate s-g1-2's record (.kbench/candidate.json, object {blob})")
    fsck_names(ws, "candidate s-g1-2: workspace damaged")


def test_a_git_lock_file_left_by_another_tool_is_named_mid_session(tmp_path):
    ws = tmp_path / "ws"
    args = evolve_args(ws, "s", generations=3, population=3)
    env = {"KBENCH_FAKE_EVAL_DELAY": "0.2", "KBENCH_GIT_LOCK_WAIT_MS": "300"}
    proc = start(args, env=env)
    lock = ws / ".git" / "refs" / "notes" / "kbench.lock"
    try:
        wait_until(lambda: len([l for l in (proc.stdout.readline(),) if "evaluated" in l]) > 0, what="an evaluation")
        lock.write_text("left by another tool\n")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, out + err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"git's lock file {lock} exists" in lines[0] and "remove that file" in lines[0], err
    old = time.time() - 3600
    os.utime(lock, (old, old))
    out = kbench(ws, "fsck")
    assert out.returncode == 1 and f"rm {lock}" in out.stdout, out.stdout
    lock.unlink()
    done = run(args)
    assert done.returncode == 0, done.stderr
    counts = evaluated_counts(ws, "s")
    assert len(counts) == 1 + 3 * 3 and set(counts.values()) == {1}, counts
    git_fsck_clean(ws)
    kbench_fsck_clean(ws)


def test_fsck_repairs_a_misplaced_branch_and_a_broken_listing_cache(session):
    ws = session
    best = git(ws, "rev-parse", "sessions/s")
    git(ws, "update-ref", "refs/heads/sessions/s", git(ws, "rev-parse", "refs/kbench/s/root"))
    (ws / ".git" / "kbench-listing.pickle").write_bytes(b"not a pickle")
    dry = kbench(ws, "fsck", "--dry-run")
    assert dry.returncode == 1 and "would be re-pointed" in dry.stdout and "would be rebuilt" in dry.stdout, dry.stdout
    out = kbench(ws, "fsck")
    assert out.returncode == 0, out.stdout
    assert "repaired  refs/heads/sessions/s: points at the session root; re-pointed to the session's best" in out.stdout
    assert "repaired  listing cache" in out.stdout
    assert git(ws, "rev-parse", "sessions/s") == best
    kbench_fsck_clean(ws)
