"""The git workspace: write through the API, read back with plain git, and the other way round."""

from __future__ import annotations

import json

import pytest

from engine.candidates import Candidate
from engine.verdict import Stage, Status, Verdict
from engine.workspace import (ConfigTiming, CorruptNoteError, Measurement, UnknownCandidateError,
                              UnknownSessionError, Workspace, WorkspaceError)
from tests.conftest import cand
from tests.workspace.git_helpers import fsck_clean, git


@pytest.fixture
def ws(tmp_path, task):
    w = Workspace.create(tmp_path / "ws")
    w.start_session("ln", task, proposer="anthropic", model="claude-test")
    yield w
    w.close()


def measure(speedup: float, compile_: float | None = None, gpu: str = "NVIDIA H100") -> Measurement:
    ms = 1.0
    return Measurement(speedup, compile_, (ConfigTiming("odd-37x1000", ms, 0.01, ms * speedup,
                                                        ms * (compile_ or 1.0)),),
                       gpu=gpu, driver="550.54", torch="2.5.1", cuda="12.4")


def passed(ws, cid: str) -> None:
    """The verdicts a measured candidate has (engine.verdict.judge requires them before it is eligible)."""
    ws.record_verdicts(cid, [Verdict(Stage.COMPILE, Status.PASS), Verdict(Stage.CORRECTNESS, Status.PASS)])


# ------------------------------------------------------------------------------------------ layout


def test_session_root_holds_task_and_session_json(ws, tmp_path):
    path = ws.path
    assert git(path, "config", "kbench.workspace").strip() == "1"
    files = git(path, "ls-tree", "-r", "--name-only", "refs/kbench/ln/root").split()
    assert set(files) == {"task.toml", "reference.py", ".kbench/session.json"}
    info = json.loads(git(path, "show", "refs/kbench/ln/root:.kbench/session.json"))
    assert (info["name"], info["task"], info["direction"], info["proposer"], info["model"]) == \
        ("ln", "layernorm_lastdim", "forward", "anthropic", "claude-test")
    assert git(path, "rev-parse", "sessions/ln") == git(path, "rev-parse", "refs/kbench/ln/root")
    assert git(path, "rev-list", "--count", "refs/kbench/ln/root").strip() == "1"  # a root commit
    s = ws.session("ln")
    assert s.task == "layernorm_lastdim" and s.candidates == 0 and s.best is None
    with pytest.raises(WorkspaceError, match="already exists"):
        ws.start_session("ln", tmp_path / "task-layernorm")


def test_candidate_commit_tree_message_and_trailers(ws):
    rec = ws.commit_candidate("ln", cand("a", rationale="one warp per row\n\nfloat4 loads"),
                              prompt="Translate layernorm.")
    assert rec.id == "ln-g0-1" and rec.generation == 0 and rec.operator == "translate" and rec.parents == ()
    path = ws.path
    ref = "refs/kbench/ln/ln-g0-1"
    files = set(git(path, "ls-tree", "-r", "--name-only", ref).split())
    assert files == {"kernel.cu", "binding.cpp", "reference.py", "task.toml", ".kbench/prompt.md",
                     ".kbench/candidate.json"}
    assert git(path, "show", f"{ref}:.kbench/prompt.md") == "Translate layernorm.\n"
    assert git(path, "show", f"{ref}:task.toml") == git(path, "show", "refs/kbench/ln/root:task.toml")
    body = git(path, "log", "-1", "--format=%B", ref)
    assert body.splitlines()[0] == "gen 0 · translate · try a"
    assert "one warp per row\n\nfloat4 loads" in body
    trailers = dict(line.split(": ", 1) for line in
                    git(path, "interpret-trailers", "--parse", input=body).strip().splitlines())
    assert trailers["Kbench-Session"] == "ln" and trailers["Kbench-Candidate"] == "ln-g0-1"
    assert trailers["Kbench-Generation"] == "0" and trailers["Kbench-Operator"] == "translate"
    assert trailers["Kbench-Proposer"] == "anthropic" and trailers["Kbench-Model"] == "claude-test"
    assert trailers["Co-authored-by"].startswith("claude-test <")
    # a translation's parent is the session root
    assert git(path, "rev-parse", f"{ref}^") == git(path, "rev-parse", "refs/kbench/ln/root")
    # no index, no work tree were used
    assert not (path / ".git" / "index").exists()
    assert sorted(p.name for p in path.iterdir()) == [".git"]
    fsck_clean(path)


def test_ids_count_per_generation(ws):
    a = ws.commit_candidate("ln", cand("a"))
    b = ws.commit_candidate("ln", cand("b"))
    c = ws.commit_candidate("ln", cand("c"), parents=[a.id])
    d = ws.commit_candidate("ln", cand("d"), parents=[b.id], generation=5, operator="tune")
    assert [a.id, b.id, c.id, d.id] == ["ln-g0-1", "ln-g0-2", "ln-g1-1", "ln-g5-1"]
    assert (c.operator, d.operator) == ("mutate", "tune")


def test_crossover_is_a_merge_and_lineage_is_the_dag(ws):
    a = ws.commit_candidate("ln", cand("a"))
    b = ws.commit_candidate("ln", cand("b"))
    m = ws.commit_candidate("ln", cand("m"), parents=[a.id])
    x = ws.commit_candidate("ln", cand("x"), parents=[m.id, b.id])
    assert x.operator == "crossover" and x.parents == (m.id, b.id) and x.generation == 2
    parents = git(ws.path, "rev-list", "--parents", "-n1", f"refs/kbench/ln/{x.id}").split()[1:]
    assert parents == [m.commit, b.commit]
    assert [r.id for r in ws.lineage(x.id)] == [x.id, m.id, b.id, a.id]
    # git sees the same ancestry (plus the session root)
    ancestry = git(ws.path, "rev-list", f"refs/kbench/ln/{x.id}").split()
    assert set(ancestry) == {x.commit, m.commit, b.commit, a.commit, ws.session("ln").root}
    gens = ws.generations("ln")
    assert {g: [v.id for v in vs] for g, vs in gens.items()} == {0: [a.id, b.id], 1: [m.id], 2: [x.id]}


def test_notes_are_json_lines_git_can_show(ws):
    rec = ws.commit_candidate("ln", cand("a"))
    ws.record_verdicts(rec.id, [Verdict("compile", Status.PASS, "7.1 s"),
                                Verdict("correctness", Status.PASS, "4 configs")])
    ws.record_measurement(rec.id, measure(1.7, 1.1))
    shown = git(ws.path, "notes", "--ref", "kbench", "show", rec.commit)
    lines = [json.loads(line) for line in shown.splitlines()]
    assert [l["kind"] for l in lines] == ["verdict", "verdict", "measurement"]
    assert lines[0]["stage"] == "compile" and lines[0]["status"] == "pass"
    m = lines[2]
    assert (m["gpu"], m["driver"], m["torch"], m["cuda"]) == ("NVIDIA H100", "550.54", "2.5.1", "12.4")
    assert m["at"].endswith("Z") and m["speedup_eager"] == 1.7 and m["configs"][0]["config"] == "odd-37x1000"
    # plain `git log --notes=kbench` tells the same story
    log = git(ws.path, "log", "-1", "--notes=kbench", f"refs/kbench/ln/{rec.id}")
    assert "Notes (kbench):" in log and '"stage":"correctness"' in log
    # each append is one notes commit on top of the previous one (the first is the empty start of the ref)
    assert git(ws.path, "rev-list", "--count", "refs/notes/kbench").strip() == "3"
    fsck_clean(ws.path)


def test_notes_written_with_git_are_read_back(ws):
    rec = ws.commit_candidate("ln", cand("a"))
    ws.record_verdict(rec.id, Verdict("static", Status.PASS))
    line = json.dumps({"kind": "verdict", "stage": "compile", "status": "fail", "reason": "nvcc: error",
                       "at": "2025-01-01T00:00:00Z"})
    git(ws.path, "notes", "--ref", "kbench", "append", "-m", line, rec.commit)
    git(ws.path, "notes", "--ref", "kbench", "append", "-m", "looked at it by hand, fine", rec.commit)
    st = ws.status(rec.id)
    assert st.status_of("static") == Status.PASS and st.status_of("compile") == Status.FAIL
    assert st.stages["compile"].verdict.verdict.reason == "nvcc: error"
    assert [c.text for c in st.comments] == ["looked at it by hand, fine"]
    # and the API appends on top of what git wrote (git rewrote the notes tree in its own layout)
    ws.record_verdict(rec.id, Verdict("compile", Status.PASS, "fixed toolchain"))
    assert ws.status(rec.id).status_of("compile") == Status.PASS
    shown = git(ws.path, "notes", "--ref", "kbench", "show", rec.commit)
    assert "looked at it by hand" in shown and shown.rstrip().endswith('"reason":"fixed toolchain","data":{}}')
    fsck_clean(ws.path)


def test_many_notes_fanout_and_git_interleaved(ws):
    recs = [ws.commit_candidate("ln", cand(str(i))) for i in range(40)]
    for r in recs:
        ws.record_verdict(r.id, Verdict("static", Status.PASS))
    git(ws.path, "notes", "--ref", "kbench", "append", "-m", "{\"kind\":\"event\",\"event\":\"poked\"}",
        recs[3].commit)
    for r in recs[:10]:
        ws.record_verdict(r.id, Verdict("compile", Status.FAIL))
    listed = git(ws.path, "notes", "--ref", "kbench", "list").split("\n")
    annotated = [l.split()[1] for l in listed if l]
    assert sorted(annotated) == sorted(r.commit for r in recs)  # one note per commit, no duplicates
    views = {v.id: v for v in ws.candidates("ln")}
    assert views[recs[3].id].status.events[0].event == "poked"
    assert views[recs[3].id].status.status_of("compile") == Status.FAIL
    assert views[recs[20].id].status.status_of("compile") is None
    fsck_clean(ws.path)


def test_candidate_made_with_plain_git_is_listed(ws):
    root = ws.session("ln").root
    path = ws.path
    blob = git(path, "hash-object", "-w", "--stdin", input="// hand-written\n").strip()
    glue = git(path, "hash-object", "-w", "--stdin", input="// glue\n").strip()
    tree = git(path, "mktree", input=f"100644 blob {blob}\tkernel.cu\n100644 blob {glue}\tbinding.cpp\n").strip()
    msg = ("gen 1 · human · hand tuned\n\nI unrolled it.\n\nKbench-Session: ln\nKbench-Candidate: ln-g1-7\n"
           "Kbench-Generation: 1\nKbench-Operator: human\nKbench-Proposer: human\n")
    sha = git(path, "commit-tree", tree, "-p", root, input=msg).strip()
    git(path, "update-ref", "refs/kbench/ln/ln-g1-7", sha)
    git(path, "notes", "--ref", "kbench", "add", "-m",
        '{"kind":"measurement","speedup_eager":2.5,"gpu":"NVIDIA H200"}', sha)
    views = ws.candidates("ln")
    assert [v.id for v in views] == ["ln-g1-7"]
    v = views[0]
    assert v.record.operator == "human" and v.record.rationale == "I unrolled it." and v.status.speedup == 2.5
    assert ws.files("ln-g1-7").files == {"kernel.cu": "// hand-written\n", "binding.cpp": "// glue\n"}
    # the next API commit in that generation does not collide with it
    nxt = ws.commit_candidate("ln", cand("z"), parents=["ln-g1-7"], generation=1)
    assert nxt.id == "ln-g1-8"


# ----------------------------------------------------------------------------------------- judgements


def test_remeasure_appends_latest_wins_all_visible(ws):
    rec = ws.commit_candidate("ln", cand("a"))
    ws.record_measurement(rec.id, measure(1.4, gpu="NVIDIA H100"))
    ws.record_measurement(rec.id, measure(1.9, gpu="NVIDIA H200"))
    st = ws.status(rec.id)
    assert st.speedup == 1.9 and st.measurement.gpu == "NVIDIA H200"
    assert [m.speedup_eager for m in st.measurements] == [1.4, 1.9]
    assert ws.candidates("ln")[0].status.speedup == 1.9


def test_override_is_an_appended_line_never_a_rewrite(ws):
    rec = ws.commit_candidate("ln", cand("a"))
    ws.record_verdict(rec.id, Verdict("llm_verify", Status.FAIL, "verifier thinks it races"))
    before = git(ws.path, "rev-parse", "refs/notes/kbench").strip()
    o = ws.override(rec.id, "llm_verify", "pass", "checked by hand: no race", by="Ada <ada@example.com>")
    assert (o.from_status, o.to_status, o.by, o.reason) == ("fail", Status.PASS, "Ada <ada@example.com>",
                                                             "checked by hand: no race")
    after = git(ws.path, "rev-parse", "refs/notes/kbench").strip()
    git(ws.path, "merge-base", "--is-ancestor", before, after)  # history kept
    lines = git(ws.path, "notes", "--ref", "kbench", "show", rec.commit).splitlines()
    assert json.loads(lines[0])["status"] == "fail"
    last = json.loads(lines[1])
    assert (last["kind"], last["from"], last["to"], last["by"]) == ("override", "fail", "pass", "Ada <ada@example.com>")
    st = ws.status(rec.id).stages["llm_verify"]
    assert st.status == Status.PASS and st.overridden and st.verdict.verdict.status == Status.FAIL
    # a later re-evaluation is the newest word; the override stays in the history
    ws.record_verdict(rec.id, Verdict("llm_verify", Status.FAIL, "still thinks so"))
    st2 = ws.status(rec.id)
    assert st2.status_of("llm_verify") == Status.FAIL and not st2.stages["llm_verify"].overridden
    assert len(st2.overrides) == 1 and st2.stages["llm_verify"].verdicts == 2
    with pytest.raises(WorkspaceError, match="reason"):
        ws.override(rec.id, "llm_verify", "pass", "  ")
    with pytest.raises(WorkspaceError, match="not a stage"):
        ws.override(rec.id, "vibes", "pass", "x")
    with pytest.raises(WorkspaceError, match="already fail"):
        ws.override(rec.id, "llm_verify", "fail", "x")


def test_session_branch_follows_the_best(ws):
    path = ws.path
    root = ws.session("ln").root
    a = ws.commit_candidate("ln", cand("a"))
    b = ws.commit_candidate("ln", cand("b"), parents=[a.id])
    head = lambda: git(path, "rev-parse", "sessions/ln").strip()
    assert head() == root
    passed(ws, a.id)
    ws.record_measurement(a.id, measure(1.2))
    assert head() == a.commit and ws.session("ln").best == a.id
    passed(ws, b.id)
    ws.record_measurement(b.id, measure(1.5))
    assert head() == b.commit
    # `git log sessions/ln` is the best kernel's ancestry
    assert git(path, "log", "--format=%H", "sessions/ln").split() == [b.commit, a.commit, root]
    ws.override(b.id, "correctness", "fail", "wrong on odd shapes")
    assert head() == a.commit
    ws.record_measurement(a.id, measure(0.9))      # re-measured slower: still the only eligible one
    assert head() == a.commit
    ws.record_verdict(a.id, Verdict("integrity", Status.SUSPICIOUS, "faster than the floor"))
    assert head() == root                           # nothing eligible left
    ws.override(b.id, "correctness", "pass", "false alarm")
    assert head() == b.commit and ws.best("ln").id == b.id
    reflog = git(path, "reflog", "show", "--format=%H", "refs/heads/sessions/ln").split()
    assert len(reflog) >= 5                         # every move is in the reflog too


def test_resolve_ids_prefixes_refs_and_revisions(ws):
    a = ws.commit_candidate("ln", cand("a"))
    b = ws.commit_candidate("ln", cand("b"), parents=[a.id])
    c = ws.commit_candidate("ln", cand("c"), parents=[a.id])
    assert ws.resolve("ln-g0-1").id == a.id
    assert ws.resolve("ln-g0").id == a.id                       # unique prefix
    assert ws.resolve("refs/kbench/ln/ln-g1-2").id == c.id
    assert ws.resolve("kbench/ln/ln-g1-1").id == b.id           # what git itself accepts
    assert ws.resolve(b.commit).id == b.id
    assert ws.resolve(b.commit[:10]).id == b.id
    with pytest.raises(UnknownCandidateError, match="ambiguous"):
        ws.resolve("ln-g1")
    with pytest.raises(UnknownCandidateError, match="no candidate"):
        ws.resolve("nope-g9-9")
    with pytest.raises(UnknownCandidateError, match="root commit"):
        ws.resolve("refs/kbench/ln/root")
    with pytest.raises(UnknownCandidateError):
        ws.resolve("--output=/tmp/x")
    with pytest.raises(UnknownSessionError, match="no session"):
        ws.commit_candidate("other", cand("x"))


def test_diff_checkout_files_prompt(ws, tmp_path):
    a = ws.commit_candidate("ln", cand("a"), prompt="first prompt")
    b = ws.commit_candidate("ln", cand("b"), parents=[a.id], prompt="second prompt")
    d = ws.diff(a.id, b.id)
    assert "-// kernel a" in d and "+// kernel b" in d and "prompt" not in d
    assert "+second prompt" in ws.diff(a.id, b.id, meta=True)
    assert "kernel.cu | 2 +-" in ws.diff(a.id, b.id, stat=True)
    assert ws.prompt(b.id) == "second prompt\n"
    c = ws.files(b.id)
    assert c.format == "native" and c.files["kernel.cu"].startswith("// kernel b")
    assert c.meta["id"] == b.id and c.meta["parents"] == [a.id]
    out = tmp_path / "out"
    written = ws.checkout(b.id, out)
    assert sorted(p.name for p in written) == ["binding.cpp", "kernel.cu"]
    (out / "kernel.cu").write_text("// my edit\n")
    with pytest.raises(WorkspaceError, match="would overwrite"):
        ws.checkout(a.id, out)
    assert (out / "kernel.cu").read_text() == "// my edit\n"   # nothing of the user's changed
    ws.checkout(a.id, out, force=True)
    assert (out / "kernel.cu").read_text().startswith("// kernel a")
    full = tmp_path / "full"
    names = {str(p.relative_to(full)) for p in ws.checkout(a.id, full, with_task=True)}
    assert {"reference.py", "task.toml", ".kbench/prompt.md", "kernel.cu"} <= names


def test_sessions_listing(ws, task):
    ws.start_session("ln2", task, direction="backward", proposer="tuner")
    a = ws.commit_candidate("ln", cand("a"))
    passed(ws, a.id)
    ws.record(a.id, [measure(1.3)])
    sessions = {s.name: s for s in ws.sessions()}
    assert set(sessions) == {"ln", "ln2"}
    assert sessions["ln"].candidates == 1 and sessions["ln"].best == a.id
    assert sessions["ln2"].direction == "backward" and sessions["ln2"].proposer == "tuner"
    assert sessions["ln2"].best is None
    with pytest.raises(WorkspaceError, match="not a usable session name"):
        ws.start_session("bad name", task)
    with pytest.raises(WorkspaceError, match="no sideways direction"):
        ws.start_session("ln3", task, direction="sideways")


def test_bad_candidates_are_refused_without_a_trace(ws, task):
    before = git(ws.path, "for-each-ref")
    with pytest.raises(WorkspaceError, match="shadow"):
        ws.commit_candidate("ln", Candidate("native", {"kernel.cu": "x", "binding.cpp": "y", "task.toml": "z"}))
    with pytest.raises(WorkspaceError, match="relative path"):
        ws.commit_candidate("ln", Candidate("native", {"../kernel.cu": "x", "binding.cpp": "y"}))
    ws.start_session("other", task)
    o = ws.commit_candidate("other", cand("o"))
    with pytest.raises(WorkspaceError, match="belongs to session"):
        ws.commit_candidate("ln", cand("x"), parents=[o.id])
    after = {l for l in git(ws.path, "for-each-ref").splitlines()} - set(before.splitlines())
    assert all("refs/kbench/other/" in l or "sessions/other" in l for l in after)


def test_corrupt_note_is_a_clear_error_and_nothing_changes(ws):
    a = ws.commit_candidate("ln", cand("a"))
    b = ws.commit_candidate("ln", cand("b"))
    ws.record_verdict(b.id, Verdict("compile", Status.PASS))
    git(ws.path, "notes", "--ref", "kbench", "add", "-m", '{"kind": "verdict", "stage": "compile", "sta', a.commit)
    notes_before = git(ws.path, "rev-parse", "refs/notes/kbench")
    with pytest.raises(CorruptNoteError, match=r"candidate ln-g0-1 .*line 1.*git notes --ref kbench edit"):
        ws.status(a.id)
    with pytest.raises(CorruptNoteError):
        ws.candidates("ln")
    with pytest.raises(CorruptNoteError):
        ws.record_verdict(a.id, Verdict("compile", Status.PASS))
    assert git(ws.path, "rev-parse", "refs/notes/kbench") == notes_before
    views = {v.id: v for v in ws.candidates("ln", strict=False)}
    assert "line 1" in views[a.id].problem and views[b.id].problem is None
    assert views[b.id].status.status_of("compile") == Status.PASS
    # a known kind missing a field, or a bad status, is corrupt too
    git(ws.path, "notes", "--ref", "kbench", "add", "-f", "-m", '{"kind": "verdict", "stage": "x", "status": "great"}',
        a.commit)
    with pytest.raises(CorruptNoteError, match="great"):
        ws.status(a.id)


def test_workspace_reopens_and_reads_everything(ws, tmp_path):
    a = ws.commit_candidate("ln", cand("a"))
    passed(ws, a.id)
    ws.record(a.id, [measure(1.1)])
    path = ws.path
    ws.close()
    with Workspace.open(path) as again:
        assert again.candidates("ln")[0].status.speedup == 1.1
        assert again.session("ln").best == a.id


def test_fast_listing_fold_matches_the_reference_fold():
    """`fold_objs` (listing path, from decoded JSON) and `fold` (from parsed entries) agree."""
    import random

    from engine.workspace import parse_note
    from engine.workspace.note_entries import Event, Override, VerdictNote, entry_line
    from engine.workspace.views import fold, fold_objs

    rng = random.Random(7)
    stages = ["static", "compile", "correctness", "timing", "custom_stage"]
    for _ in range(300):
        entries = []
        for _ in range(rng.randint(0, 9)):
            k = rng.random()
            st = rng.choice(stages)
            if k < 0.45:
                entries.append(VerdictNote(Verdict(st, rng.choice(list(Status)), "r", {"x": 1}), "t", "b"))
            elif k < 0.65:
                entries.append(Override(st, rng.choice([None, "pass", "fail"]), rng.choice(list(Status)), "who",
                                        "why", "t"))
            elif k < 0.9:
                entries.append(measure(rng.uniform(0.5, 3), rng.choice([None, 1.2])))
            else:
                entries.append(Event("exported", {"to": "x"}, "t", "b"))
        text = "".join(entry_line(e) + "\n" for e in entries)
        objs = [json.loads(line) for line in text.splitlines()]
        assert fold_objs(objs) == fold(parse_note(text))


def test_git_variables_in_the_environment_cannot_point_the_workspace_elsewhere(tmp_path, task, monkeypatch):
    """The one git path runs git in a scrubbed environment: a GIT_DIR, GIT_OBJECT_DIRECTORY, GIT_INDEX_FILE,
    GIT_NAMESPACE or GIT_NOTES_REF left in the user's shell (a hook, a script) neither redirects kbench's objects,
    refs or notes nor hides the workspace's own from it. (A library that only adds to os.environ, as GitPython's
    command runner does, writes such a process's objects into GIT_OBJECT_DIRECTORY.)"""
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", str(other))
    stray = tmp_path / "stray-objects"
    stray.mkdir()
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(stray))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "stray-index"))
    monkeypatch.setenv("GIT_NAMESPACE", "elsewhere")
    monkeypatch.setenv("GIT_NOTES_REF", "refs/notes/elsewhere")
    w = Workspace.create(tmp_path / "ws")
    try:
        w.start_session("ln", task)
        rec = w.commit_candidate("ln", cand("a"))
        passed(w, rec.id)
        w.record_measurement(rec.id, measure(2.0))
        [view] = w.candidates("ln")
        assert view.record.id == rec.id and view.status.speedup == 2.0
    finally:
        w.close()
    assert list(stray.iterdir()) == [] and not (tmp_path / "stray-index").exists()
    assert git(other, "for-each-ref") == "" and git(other, "count-objects").startswith("0 objects")
    path = tmp_path / "ws"     # plain git (no GIT_* of the caller) sees all of it in the workspace
    assert git(path, "rev-parse", f"refs/kbench/ln/{rec.id}").strip() == rec.commit
    assert git(path, "notes", "--ref", "refs/notes/kbench", "show", rec.commit).strip()
    fsck_clean(path)
