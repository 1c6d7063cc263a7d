"""What a person does to a candidate from the shell, recorded as the app records it: `kbench export ID` notes an
`exported` event on the candidate (the app's export always did; the CLI's did not), and `kbench edit ID` commits a
hand edit as the app's `E` key does: a `human` candidate, ID's child one generation down. The installed console
script, a HOME of the test's own, $EDITOR a script that edits the way a person would."""

from __future__ import annotations

import json
import os
import stat

from engine.candidates import load_candidate
from engine.tasks.loader import load_task
from engine.verdict import Status, Verdict
from engine.workspace import Workspace
from tests.paths import REPO

LN_FWD = REPO / "tasks" / "layernorm_lastdim" / "baselines" / "forward"


def _workspace_with_a_candidate(user) -> str:
    """The user's default workspace (./workspace) with session `ln` and one candidate whose correctness passed on
    a GPU (what an evolution's evaluation leaves)."""
    ws = Workspace.create(user.workspace)
    try:
        ws.start_session("ln", load_task("layernorm_lastdim"), "forward", proposer="tuner")
        cid = ws.commit_candidate("ln", load_candidate(LN_FWD)).id
        ws.record_verdicts(cid, [Verdict("compile", Status.PASS, "compiled"),
                                 Verdict("correctness", Status.PASS, "9 configs x 2 trials")])
        return cid
    finally:
        ws.close()


def _events(user, cid: str) -> list[dict]:
    shown = user.run("show-candidate", cid, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["status"]["events"]


def _editor(user, body: str) -> str:
    path = user.home / "editor.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_kbench_export_notes_the_exported_event_as_the_app_does(user):
    cid = _workspace_with_a_candidate(user)
    out = user.home / "pkg"
    done = user.run("export", cid, "--out", str(out), "--no-backward")
    assert done.returncode == 0, done.stderr
    assert (out / "pyproject.toml").is_file()
    (ev,) = [e for e in _events(user, cid) if e["event"] == "exported"]
    assert ev["by"] == "cli" and ev["data"]["out"] == str(out.resolve()) and ev["data"]["forced"] is False
    # a refused export writes nothing and notes nothing
    ws = Workspace.open(user.workspace)
    try:
        other = ws.commit_candidate("ln", load_candidate(LN_FWD), title="never judged",
                                    parents=[cid], generation=1, proposer="human").id
    finally:
        ws.close()
    refused = user.run("export", other, "--out", str(user.home / "pkg2"), "--no-backward")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert not (user.home / "pkg2").exists()
    assert not [e for e in _events(user, other) if e["event"] == "exported"]


def test_kbench_edit_commits_a_human_child_as_the_app_does(user):
    cid = _workspace_with_a_candidate(user)
    # the person changes the kernel's block size and says why in RATIONALE.md
    editor = _editor(user, "sed -i 's/^#define BLOCK_SIZE 256/#define BLOCK_SIZE 128/' kernel.cu\n"   # cwd: the copy
                           "echo 'smaller blocks for narrow rows' >> RATIONALE.md\n")
    done = user.run("edit", cid, "--no-eval", env={"EDITOR": editor})
    assert done.returncode == 0, done.stdout + done.stderr
    new = done.stdout.split()[1]
    assert f"committed {new} (hand edit of {cid})" in done.stdout and f"kbench reevaluate {new}" in done.stdout
    shown = json.loads(user.run("show-candidate", new, "--json").stdout)
    rec = shown["candidate"]
    assert rec["proposer"] == "human" and rec["generation"] == 1 and rec["parents"] == [cid], rec
    assert "smaller blocks for narrow rows" in rec["rationale"]
    ws = Workspace.open(user.workspace)
    try:
        assert "#define BLOCK_SIZE 128" in ws.files(new).files["kernel.cu"]
    finally:
        ws.close()
    log = json.loads(user.run("log", "ln", "--json").stdout)["candidates"]
    assert [c["id"] for c in log if c["proposer"] == "human"] == [new]


def test_kbench_edit_of_unchanged_files_commits_nothing_and_says_why(user):
    cid = _workspace_with_a_candidate(user)
    before = json.loads(user.run("log", "ln", "--json").stdout)["candidates"]
    done = user.run("edit", cid, "--no-eval", env={"EDITOR": _editor(user, "exit 0\n")})
    assert done.returncode == 1 and "no candidate from the edit" in done.stderr, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert json.loads(user.run("log", "ln", "--json").stdout)["candidates"] == before
    nothing = user.run("edit", cid, "--no-eval", env={"EDITOR": "", "VISUAL": ""})
    assert nothing.returncode == 1 and "$VISUAL or $EDITOR" in nothing.stderr
    assert os.path.isdir(user.workspace)


def test_kbench_edit_then_evaluates_the_new_candidate_as_reevaluate_does(user):
    """Without --no-eval the edit is judged at once (kbench run on the tests' fake evaluator, tests/doubles: no
    compiler, no GPU), and its verdicts land on the new candidate's notes."""
    cid = _workspace_with_a_candidate(user)
    editor = _editor(user, "sed -i 's/^#define BLOCK_SIZE 256/#define BLOCK_SIZE 512/' kernel.cu\n")
    done = user.run("edit", cid, env={"EDITOR": editor}, fake_evaluator=True)
    assert done.returncode == 0, done.stdout + done.stderr
    new = done.stdout.split()[1]
    assert f"{new}: - -> " in done.stdout and "session ln: best" in done.stdout, done.stdout
    status = json.loads(user.run("show-candidate", new, "--json").stdout)["status"]
    assert status["stages"]["correctness"]["status"] == "pass" and status["measurement"], status
