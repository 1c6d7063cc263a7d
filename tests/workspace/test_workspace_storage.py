"""A workspace on a full or read-only disk: every command ends in one `kbench: error:` line naming what could not
be written and why (exit 2: never 1, "stopped for a reason", nor 3, "waiting for a GPU"), loses nothing, and
the same command finishes the work once there is room; a read-only workspace still answers every read,
`kbench fsck --dry-run` included. The disks are real: a small tmpfs and a read-only bind mount (root only; the
tests skip elsewhere), so git and gitdb meet ENOSPC and EROFS themselves. And a session whose branch an
interrupted run left missing or behind gets it back from its own resume, without `kbench fsck`. CPU, the fake
evaluator, `python -m engine.cli` as the other workspace tests run it."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.kbench_procs import ENV, evolve_args, kbench, kbench_fsck_clean, run, shape
from tests.user_kbench import one_error_line

GENS, POP, SEED = 3, 4, 11


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here (root with CAP_SYS_ADMIN needed): {proc.stderr.strip()}")


@pytest.fixture
def mounts():
    """Mount points to take down after the test, last mounted first."""
    done: list[str] = []
    yield done
    for point in reversed(done):
        subprocess.run(["umount", "-l", point], capture_output=True)


def small_disk(path, mounts, size: str) -> None:
    path.mkdir()
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    mounts.append(str(path))


def fill(path) -> None:
    """Take every free byte of the file system holding `path`."""
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (65536, 512):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def branch(ws, session: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(ws), "rev-parse", "-q", "--verify", f"refs/heads/sessions/{session}"],
                          capture_output=True, text=True, env=ENV)
    return proc.stdout.strip() or None


def best_commit(ws, session: str) -> str:
    from engine.workspace import Workspace
    with Workspace.open(ws) as w:
        return w.best(session).record.commit


def test_a_full_disk_mid_session_is_one_line_and_the_same_command_finishes_after(tmp_path, mounts):
    ref = tmp_path / "ref"
    assert run(evolve_args(ref, "s", generations=GENS, population=POP, seed=SEED)).returncode == 0
    disk = tmp_path / "disk"
    small_disk(disk, mounts, "300k")
    ws = disk / "ws"
    args = evolve_args(ws, "s", generations=GENS, population=POP, seed=SEED)
    full = run(args)
    assert full.returncode == 2, full.stdout + full.stderr
    line = one_error_line(full)
    assert "No space left on device" in line and "free space and run the same command again" in line, line
    _mount("-o", "remount,size=64m", str(disk))
    done = run(args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert shape(ws, "s") == shape(ref, "s")
    assert branch(ws, "s") == best_commit(ws, "s")
    kbench_fsck_clean(ws)


def test_an_override_on_a_full_disk_is_one_line_and_works_once_there_is_room(tmp_path, mounts):
    disk = tmp_path / "disk"
    small_disk(disk, mounts, "8m")
    ws = disk / "ws"
    assert run(evolve_args(ws, "s", generations=1, population=2)).returncode == 0
    notes = subprocess.run(["git", "-C", str(ws), "rev-parse", "refs/notes/kbench"], capture_output=True,
                           text=True, env=ENV).stdout
    fill(disk)
    out = kbench(ws, "override", "s-g1-1", "correctness", "fail", "--reason", "checked by hand")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "No space left on device" in one_error_line(out)
    assert subprocess.run(["git", "-C", str(ws), "rev-parse", "refs/notes/kbench"], capture_output=True,
                          text=True, env=ENV).stdout == notes          # nothing half-written
    os.unlink(disk / "filler")
    again = kbench(ws, "override", "s-g1-1", "correctness", "fail", "--reason", "checked by hand")
    assert again.returncode == 0, again.stdout + again.stderr
    kbench_fsck_clean(ws)


def test_a_read_only_workspace_answers_reads_and_refuses_writes_in_one_line(tmp_path, mounts):
    ws = tmp_path / "ws"
    assert run(evolve_args(ws, "s", generations=1, population=2)).returncode == 0
    _mount("--bind", str(ws), str(ws))
    mounts.append(str(ws))
    _mount("-o", "remount,bind,ro", str(ws))
    for args in (("fsck", "--dry-run"), ("fsck",), ("sessions",), ("log", "s"), ("show-candidate", "s-g1-1")):
        out = kbench(ws, *args)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (args, out.stdout + out.stderr)
    assert "clean" in kbench(ws, "fsck", "--dry-run").stdout
    for args in (("override", "s-g1-1", "compile", "fail", "--reason", "x"),):
        out = kbench(ws, *args)
        assert out.returncode == 2 and "Read-only file system" in one_error_line(out), out.stderr
    resumed = run(evolve_args(ws, "s", generations=2, population=2))
    assert resumed.returncode == 2 and "Read-only file system" in one_error_line(resumed), resumed.stderr


@pytest.mark.parametrize("how", ["missing", "behind"])
def test_a_resume_puts_back_the_branch_an_interrupted_run_left(tmp_path, how):
    ws = tmp_path / "ws"
    args = evolve_args(ws, "s", generations=GENS, population=POP, seed=SEED)
    killed = run(args, env={"KBENCH_CRASHPOINT": "before-commit-object:6"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    root = subprocess.run(["git", "-C", str(ws), "rev-parse", "refs/kbench/s/root"], capture_output=True, text=True,
                          env=ENV).stdout.strip()
    cmd = ["update-ref", "-d", "refs/heads/sessions/s"] if how == "missing" else \
        ["update-ref", "refs/heads/sessions/s", root]
    subprocess.run(["git", "-C", str(ws), *cmd], check=True, env=ENV)
    done = run(args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "re-pointed to the session's best" in done.stdout
    assert branch(ws, "s") == best_commit(ws, "s")
    kbench_fsck_clean(ws)
