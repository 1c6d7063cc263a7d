"""A candidate ref that no longer names its candidate's commit (garbage in its file, a sha of a missing object, of
a blob or of another candidate), and a candidate commit that is corrupt on disk. Before: the candidate vanished
from `kbench log` without a word, `kbench fsck` called the session ok (or advised copying an intact object back
from a clone), a resumed `evolve` went on without it, and `show-candidate`, `diff` and `export` called a corrupt
commit "not a kbench candidate". Now each is named as damage, fsck points a ref back at the commit that names
itself that candidate, and the session reads whole again. The installed `kbench`, a HOME of the test's own."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.installed import kbench

EVOLVE = ("evolve", "gelu_bias", "--proposer", "tuner", "--session", "s", "--seed", "3",
          "--population", "2")


def git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    """A session of 5 candidates over 2 generations; tests damage copies of it."""
    root = tmp_path_factory.mktemp("damage")
    out = kbench(root / "home", "--workspace", str(root / "ws"), *EVOLVE, "--generations", "2", fake_evaluator=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return root / "ws"


def copy(session: Path, tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(session, ws)
    return ws


def ref_file(ws: Path, cid: str) -> Path:
    return ws / ".git" / "refs" / "kbench" / "s" / cid


def listed(home: Path, ws: Path) -> list[str]:
    out = kbench(home, "--workspace", str(ws), "log", "s")
    assert out.returncode == 0, out.stderr
    return [w for line in out.stdout.splitlines() for w in line.split() if w.startswith("s-g")]


def damage(ws: Path, how: str) -> str:
    """Damage s-g1-1's ref; returns its commit."""
    commit = git(ws, "rev-parse", "refs/kbench/s/s-g1-1")
    content = {"garbage": "garbage",
               "missing object": "0123456789abcdef0123456789abcdef01234567",
               "a blob": git(ws, "rev-parse", "refs/kbench/s/root:.kbench/session.json"),
               "another candidate": git(ws, "rev-parse", "refs/kbench/s/s-g0-1")}[how]
    ref_file(ws, "s-g1-1").write_text(content + "\n")
    return commit


@pytest.mark.parametrize("how", ["garbage", "missing object", "a blob", "another candidate"])
def test_a_damaged_candidate_ref_is_named_and_fsck_points_it_back(session, tmp_path, how):
    home, ws = tmp_path / "home", copy(session, tmp_path)
    everyone = listed(home, ws)
    commit = damage(ws, how)

    out = kbench(home, "--workspace", str(ws), "log", "s")
    assert out.returncode == 2, out.stdout + out.stderr             # not a listing without it
    err = out.stderr.strip()
    assert err.startswith("kbench: error: workspace damaged: candidate s-g1-1: its ref refs/kbench/s/s-g1-1 "), err
    assert f"its commit {commit[:12]} is intact" in err and "`kbench fsck` points the ref back at it" in err, err

    resumed = kbench(home, "--workspace", str(ws), *EVOLVE, "--generations", "3", fake_evaluator=True)
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr  # never proposes it again as if it were not there
    assert "s-g1-1" in resumed.stderr and "commit s-g" not in resumed.stdout

    dry = kbench(home, "--workspace", str(ws), "fsck", "--dry-run")
    assert dry.returncode == 1 and "would be pointed back at s-g1-1's commit" in dry.stdout, dry.stdout
    assert "copy the object back from a clone" not in dry.stdout      # the object is intact: the ref is not
    assert "ok        session s:" not in dry.stdout

    fixed = kbench(home, "--workspace", str(ws), "fsck")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert f"repaired  refs/kbench/s/s-g1-1: " in fixed.stdout and f"pointed back at s-g1-1's commit {commit[:12]}" \
        in fixed.stdout, fixed.stdout
    assert git(ws, "rev-parse", "refs/kbench/s/s-g1-1") == commit
    assert listed(home, ws) == everyone
    again = kbench(home, "--workspace", str(ws), "fsck")
    assert again.returncode == 0 and again.stdout.rstrip().endswith("clean"), again.stdout
    assert "git fsck --full finds every object whole and every ref valid" in again.stdout


def test_show_diff_and_export_name_a_corrupt_commit_as_damage(session, tmp_path):
    home, ws = tmp_path / "home", copy(session, tmp_path)
    commit = git(ws, "rev-parse", "refs/kbench/s/s-g1-1")
    obj = ws / ".git" / "objects" / commit[:2] / commit[2:]
    obj.chmod(0o644)
    obj.write_bytes(obj.read_bytes()[:20])                # truncated on disk
    for args in (("show-candidate", "s-g1-1"), ("diff", "s-g0-1", "s-g1-1"),
                 ("export", "s-g1-1", "--out", str(tmp_path / "pkg"))):
        out = kbench(home, "--workspace", str(ws), *args)
        assert out.returncode == 2, (args, out.stdout + out.stderr)
        err = out.stderr.strip()
        assert err.startswith(f"kbench: error: workspace damaged: candidate s-g1-1's commit (object {commit}, "
                              "named by refs/kbench/s/s-g1-1) is missing or corrupt"), (args, err)
        assert "not a kbench candidate" not in err and "`kbench fsck`" in err, (args, err)
    out = kbench(home, "--workspace", str(ws), "fsck")
    assert out.returncode == 1
    line = next(x for x in out.stdout.splitlines() if x.startswith("  DAMAGED   refs/kbench/s/s-g1-1"))
    assert "is missing or corrupt, and no other copy of it is in the repository: copy it back from a clone" in line
    assert ref_file(ws, "s-g1-1").read_text().strip() == commit     # nothing touched


def test_a_ref_in_the_namespace_with_no_candidate_name_is_still_someone_elses(session, tmp_path):
    home, ws = tmp_path / "home", copy(session, tmp_path)
    everyone = listed(home, ws)
    ref_file(ws, "notes-of-mine").write_text("garbage\n")
    assert listed(home, ws) == everyone
