"""A candidate folder kbench reads itself, outside any jail: a link in it is never followed, a FIFO or a device
never opened, a file over the size cap never read whole, a binary task file never a traceback. Each is one line
naming the file (exit 2), wherever the folder comes in: `kbench eval`, `kbench export --from-dir`, `kbench evolve
--replay-from DIR`, and the hand-edit proposer's folder (the app's editor path). The installed `kbench` with a
HOME of the test's own, whose dotfile holds a secret that must appear nowhere. CPU; nothing is compiled."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from tests.paths import REPO
from tests.user_kbench import kbench, one_error_line

SECRET = "kbench-test-secret-7f3a9c"
BASELINE = REPO / "tasks" / "gelu_bias" / "baselines" / "forward"


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine example.com login me password {SECRET}\n")
    return home


def candidate(tmp_path, name: str = "cand"):
    folder = tmp_path / name
    shutil.copytree(BASELINE, folder)
    return folder


def plant(folder, how: str, home):
    """Put a hostile entry into a candidate folder; (its path, the words the error must use)."""
    if how == "link-to-home":
        target = folder / "binding.cpp"
        target.unlink()
        target.symlink_to(home / ".netrc")
        return target, "symbolic link"
    if how == "fifo":
        target = folder / "helpers.cuh"
        os.mkfifo(target)
        return target, "FIFO"
    if how == "dev-zero":
        target = folder / "kernel.cu"
        target.unlink()
        target.symlink_to("/dev/zero")
        return target, "symbolic link"
    if how == "char-device":
        target = folder / "extra.h"
        os.mknod(target, 0o644 | stat.S_IFCHR, os.makedev(1, 5))   # /dev/zero's numbers, made in the folder
        return target, "character device"
    if how == "oversized":
        target = folder / "big.cuh"
        target.write_text("// x\n" * (2 << 20))
        return target, "over the"
    raise AssertionError(how)


HOSTILE = ["link-to-home", "fifo", "dev-zero", "oversized"] + (["char-device"] if os.geteuid() == 0 else [])


@pytest.mark.parametrize("how", HOSTILE)
def test_eval_names_a_link_or_special_file_and_reads_nothing_through_it(tmp_path, home, how):
    folder = candidate(tmp_path)
    target, words = plant(folder, how, home)
    out = kbench(home, "eval", "gelu_bias", str(folder), "--no-timing", timeout=60)
    line = one_error_line(out)
    assert out.returncode == 2, out.stdout + out.stderr
    assert str(target) in line and words in line, line
    assert SECRET not in out.stdout + out.stderr


def test_export_from_a_folder_with_a_link_is_one_line(tmp_path, home):
    folder = candidate(tmp_path)
    target, _ = plant(folder, "link-to-home", home)
    out = kbench(home, "--workspace", str(tmp_path / "ws"), "export", "--from-dir", str(folder), "--task", "gelu_bias",
                 "--force", "--out", str(tmp_path / "pkg"), timeout=60)
    line = one_error_line(out)
    assert out.returncode == 2 and str(target) in line and "symbolic link" in line
    assert not (tmp_path / "pkg").exists()
    assert SECRET not in out.stdout + out.stderr


def _workspace_text(ws) -> str:
    """Everything the workspace holds, every object's content included."""
    objs = subprocess.run(["git", "-C", str(ws), "cat-file", "--batch-all-objects", "--batch"], capture_output=True)
    return objs.stdout.decode(errors="replace")


def test_replay_from_a_folder_with_links_names_them_and_commits_nothing_of_theirs(tmp_path, home):
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    good = candidate(recorded, "01-good")
    (good / "kernel.cu").write_text((good / "kernel.cu").read_text() + "\n// replayed one\n")
    bad = candidate(recorded, "02-linked")
    target, _ = plant(bad, "link-to-home", home)
    (recorded / "03-stolen.cu").symlink_to(home / ".netrc")
    os.mkfifo(recorded / "04-waiting.cu")
    ws = tmp_path / "ws"
    out = kbench(home, "--workspace", str(ws), "evolve", "gelu_bias", "--proposer", "replay", "--replay-from",
                 str(recorded), "--generations", "1", "--population", "4", "--session", "r",
                 timeout=120, fake_evaluator=True)
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    assert f"{target}: a symbolic link" in text
    assert f"{recorded / '03-stolen.cu'}: a symbolic link" in text
    assert f"{recorded / '04-waiting.cu'}: a FIFO" in text
    assert SECRET not in text and SECRET not in _workspace_text(ws)
    assert "replayed one" in _workspace_text(ws)       # the readable entry was replayed


EDITOR = """#!/bin/sh
# the hand edit: kernel.cu becomes a link to the user's dotfile
for f in "$@"; do case "$f" in */kernel.cu) rm -f "$f"; ln -s "$KB_TARGET" "$f";; esac; done
"""


def test_a_hand_edit_that_leaves_a_link_is_refused_and_reads_nothing(tmp_path, home):
    editor = tmp_path / "editor.sh"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    ws = tmp_path / "ws"
    out = kbench(home, "--workspace", str(ws), "evolve", "gelu_bias", "--proposer", "human",
                 "--generations", "1", "--population", "1", "--session", "h",
                 env={"EDITOR": str(editor), "VISUAL": str(editor), "KB_TARGET": str(home / ".netrc")}, timeout=120,
                 fake_evaluator=True)
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    assert "kernel.cu: a symbolic link" in text and "Nothing was taken" in text
    assert SECRET not in text and SECRET not in _workspace_text(ws)


@pytest.mark.parametrize("name, data", [("task.toml", b'name = "x"\x00\xff\xfe\n'),
                                        ("reference.py", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")])
def test_a_binary_task_file_is_one_line(tmp_path, home, name, data):
    task = tmp_path / "task"
    shutil.copytree(REPO / "tasks" / "gelu_bias", task, ignore=shutil.ignore_patterns("baselines"))
    (task / name).write_bytes(data)
    for args in (("show", str(task)), ("eval", str(task), str(BASELINE), "--no-timing")):
        out = kbench(home, *args, timeout=60)
        line = one_error_line(out)
        assert out.returncode == 2 and str(task / name) in line and "not UTF-8" in line, line
