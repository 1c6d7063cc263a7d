"""Bad input: folders and repositories that are not workspaces, foreign refs, corrupt notes, unknown ids.
Each is a clear error, and nothing of the user's is changed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.verdict import Status, Verdict
from engine.workspace import NotAWorkspaceError, UnknownCandidateError, Workspace, WorkspaceError
from tests.workspace.conftest import plain_cand
from tests.workspace.git_helpers import git


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` (the .git folder included) with its content hash."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def foreign(tmp_path):
    """A user's own repository: commits, branches, a tag, notes, an index and uncommitted work."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "model.py").write_text("print('hello')\n")
    git(repo, "add", "model.py")
    git(repo, "commit", "-q", "-m", "first")
    git(repo, "branch", "feature")
    git(repo, "tag", "v1")
    git(repo, "notes", "add", "-m", "my note", "HEAD")
    (repo / "model.py").write_text("print('work in progress')\n")
    (repo / "scratch.txt").write_text("untracked\n")
    return repo


def test_non_empty_plain_folder_is_refused_untouched(tmp_path, capsys):
    folder = tmp_path / "stuff"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    before = snapshot(folder)
    for attempt in (Workspace.open, Workspace.create):
        with pytest.raises(NotAWorkspaceError, match="not a kbench workspace|not empty"):
            attempt(folder)
    assert main(["--workspace", str(folder), "sessions"]) == 2
    assert main(["--workspace", str(folder), "init-workspace"]) == 2
    err = capsys.readouterr().err
    assert "--adopt" in err
    assert snapshot(folder) == before and not (folder / ".git").exists()
    # adopting adds .git and leaves the user's file alone
    with Workspace.create(folder, adopt=True) as ws:
        assert ws.sessions() == []
    assert (folder / "notes.txt").read_text() == "mine\n"


def test_foreign_repository_is_refused_untouched(foreign, capsys):
    before = snapshot(foreign)
    with pytest.raises(NotAWorkspaceError, match=r"not a kbench workspace.*refs/heads/main"):
        Workspace.open(foreign)
    with pytest.raises(NotAWorkspaceError, match="--adopt"):
        Workspace.create(foreign)
    assert main(["--workspace", str(foreign), "log", "x"]) == 2
    assert main(["--workspace", str(foreign), "init-workspace"]) == 2
    assert "not a kbench workspace" in capsys.readouterr().err
    assert snapshot(foreign) == before


def test_adopted_repository_keeps_its_refs_index_and_work_tree(foreign, task):
    refs_before = git(foreign, "for-each-ref")
    status_before = git(foreign, "status", "--porcelain")
    index_before = (foreign / ".git" / "index").read_bytes()
    head_before = (foreign / ".git" / "HEAD").read_text()
    notes_before = git(foreign, "notes", "show", "HEAD")
    with Workspace.create(foreign, adopt=True) as ws:
        ws.start_session("s", task)
        a = ws.commit_candidate("s", plain_cand("a"))
        ws.record_verdict(a.id, Verdict("compile", Status.PASS))
        ws.record(a.id, [])
        ws.override(a.id, "compile", "fail", "no")
    refs_after = git(foreign, "for-each-ref")
    ours = ("refs/kbench/", "refs/notes/kbench", "refs/heads/sessions/")
    kept = "\n".join(l for l in refs_after.splitlines() if not any(o in l for o in ours))
    assert kept == refs_before.strip()
    assert git(foreign, "status", "--porcelain") == status_before
    assert (foreign / ".git" / "index").read_bytes() == index_before
    assert (foreign / ".git" / "HEAD").read_text() == head_before
    assert git(foreign, "notes", "show", "HEAD") == notes_before
    assert (foreign / "model.py").read_text() == "print('work in progress')\n"
    # reopening needs no flag now
    Workspace.open(foreign).close()


def test_users_branch_named_like_a_session_is_never_moved(foreign, task):
    git(foreign, "branch", "sessions/s")
    before = git(foreign, "rev-parse", "sessions/s")
    with Workspace.create(foreign, adopt=True) as ws:
        with pytest.raises(WorkspaceError, match="already exists"):
            ws.start_session("s", task)
        assert ws.sessions() == []
    assert git(foreign, "rev-parse", "sessions/s") == before
    assert "refs/kbench" not in git(foreign, "for-each-ref")


def test_foreign_refs_inside_our_namespace_are_skipped(tmp_path, task):
    with Workspace.create(tmp_path / "ws") as ws:
        ws.start_session("s", task)
        a = ws.commit_candidate("s", plain_cand("a"))
        tree = git(ws.path, "mktree", input="")
        stray = git(ws.path, "commit-tree", tree.strip(), "-m", "not kbench's").strip()
        git(ws.path, "update-ref", "refs/kbench/s/junk", stray)
        assert [v.id for v in ws.candidates("s")] == [a.id]
        with pytest.raises(UnknownCandidateError, match="no Kbench-Candidate trailer"):
            ws.resolve("refs/kbench/s/junk")
        assert ws.session("s").candidates == 2  # the count is of refs; the listing is of candidates
        assert git(ws.path, "rev-parse", "refs/kbench/s/junk").strip() == stray


def test_the_shipped_default_folder_is_adopted_and_its_readme_kept(tmp_path):
    folder = tmp_path / "workspace"
    folder.mkdir()
    readme = "# kbench workspace\n\nThis folder is the default kbench workspace.\n"
    (folder / "README.md").write_text(readme)
    with Workspace.create(folder) as ws:
        assert ws.sessions() == []
    assert (folder / "README.md").read_text() == readme
    other = tmp_path / "other"
    other.mkdir()
    (other / "README.md").write_text("# my project\n")
    with pytest.raises(NotAWorkspaceError):
        Workspace.create(other)


def test_a_file_and_a_missing_path(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for attempt in (Workspace.open, Workspace.create):
        with pytest.raises(NotAWorkspaceError, match="is a file"):
            attempt(f)
    with pytest.raises(NotAWorkspaceError, match="no workspace here"):
        Workspace.open(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_corrupt_note_and_unknown_ids_through_the_cli(tmp_path, task, capsys):
    path = tmp_path / "ws"
    with Workspace.create(path) as ws:
        ws.start_session("s", task)
        a = ws.commit_candidate("s", plain_cand("a"))
        b = ws.commit_candidate("s", plain_cand("b"))
        ws.record_verdict(b.id, Verdict("compile", Status.PASS))
    git(path, "notes", "--ref", "kbench", "add", "-m", '{"kind":"verdict","stage":"compile",', a.commit)
    before = snapshot(path / ".git")
    capsys.readouterr()
    for argv in (["log", "s"], ["show-candidate", a.id], ["override", a.id, "compile", "pass", "--reason", "x"]):
        assert main(["--workspace", str(path), *argv]) == 2
        err = capsys.readouterr().err
        assert "s-g0-1" in err and "line 1" in err and "git notes --ref kbench edit" in err, err
    for argv in (["show-candidate", "s-g9-9"], ["diff", "s-g0-1", "nope"], ["checkout", "zz", str(tmp_path / "o")],
                 ["override", "nope", "compile", "pass", "--reason", "x"], ["log", "nosuch"]):
        assert main(["--workspace", str(path), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("kbench: error:") and ("no candidate" in err or "no session" in err), err
    # a prefix matching several candidates names them
    assert main(["--workspace", str(path), "show-candidate", "s-g0"]) == 2
    assert "ambiguous" in capsys.readouterr().err
    assert snapshot(path / ".git") == before
    assert not (tmp_path / "o").exists()
    # the good candidate is still readable, and `log --json` shows nothing half-written
    assert main(["--workspace", str(path), "show-candidate", b.id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"]["stages"]["compile"]["status"] == "pass"


def test_default_folder_inside_another_checkout_gets_its_own_repository(tmp_path):
    """Like kbench's own checkout: workspace/README.md tracked by the outer repo, the workspace nested."""
    outer = tmp_path / "checkout"
    (outer / "workspace").mkdir(parents=True)
    (outer / "workspace" / "README.md").write_text("# kbench workspace\n")
    git(outer, "init", "-q", "-b", "main")
    git(outer, "add", ".")
    git(outer, "commit", "-q", "-m", "checkout")
    outer_before = snapshot(outer / ".git")
    with pytest.raises(NotAWorkspaceError, match="no git repository here"):
        Workspace.open(outer / "workspace")          # the outer repository is not mistaken for one
    with Workspace.create(outer / "workspace") as ws:
        assert ws.git_dir == (outer / "workspace" / ".git").resolve()
    assert snapshot(outer / ".git") == outer_before
