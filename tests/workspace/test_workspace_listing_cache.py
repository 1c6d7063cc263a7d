"""The on-disk listing cache: a new process lists from it without parsing again, sees everything written
since, and ignores files it cannot trust (another code version, damage)."""

from __future__ import annotations


import pytest

from engine.candidates import Candidate
from engine.verdict import Status, Verdict
from engine.workspace import Workspace, listing_cache
from engine.workspace import commits as commits_mod
from engine.workspace import listing as listing_mod



@pytest.fixture
def built(tmp_path, monkeypatch, layernorm_task):
    """A session of 6 candidates with verdicts, listed once and closed (which writes the cache)."""
    monkeypatch.setattr(listing_cache, "MIN_NEW_TO_SAVE", 1)
    ws = Workspace.create(tmp_path / "ws")
    ws.start_session("s", layernorm_task, proposer="tuner")
    for i in range(6):
        rec = ws.commit_candidate("s", Candidate("native", {"kernel.cu": f"// k{i}\n", "binding.cpp": "// g\n"},
                                                 f"c{i}"), generation=1, operator="tune", title=f"c{i}")
        ws.record_verdict(rec.id, Verdict("compile", Status.PASS if i % 2 else Status.FAIL, f"r{i}"))
    before = ws.candidates("s")
    ws.close()
    assert (tmp_path / "ws" / ".git" / listing_cache.FILENAME).is_file()
    return tmp_path / "ws", before


def snapshot(views):
    return [(v.record, v.status) for v in views]


def test_a_new_process_lists_from_the_cache_without_parsing(built, monkeypatch):
    path, before = built

    def must_not_parse(*a, **k):
        raise AssertionError("parsed again although the cache holds it")
    monkeypatch.setattr(listing_mod, "fold_objs", must_not_parse)
    monkeypatch.setattr(commits_mod, "record_from_parts", must_not_parse)
    with Workspace.open(path) as ws:
        assert snapshot(ws.candidates("s")) == snapshot(before)


def test_what_was_written_since_is_listed(built):
    path, _ = built
    with Workspace.open(path) as other:           # another process writes after the cache was saved
        other.record_verdict("s-g1-1", Verdict("compile", Status.PASS, "overridden by a rebuild"))
        new = other.commit_candidate("s", Candidate("native", {"kernel.cu": "// new\n", "binding.cpp": "// g\n"},
                                                    "new"), generation=2, operator="tune", title="new")
    with Workspace.open(path) as ws:
        views = {v.record.id: v for v in ws.candidates("s")}
        assert views["s-g1-1"].status.stages["compile"].reason == "overridden by a rebuild"
        assert new.id in views and len(views) == 7


@pytest.mark.parametrize("damage", ["garbage", "other-version"])
def test_untrusted_files_are_ignored_and_replaced(built, damage, monkeypatch):
    path, before = built
    cache = path / ".git" / listing_cache.FILENAME
    if damage == "garbage":
        cache.write_bytes(b"not a pickle at all")
    else:
        monkeypatch.setattr(listing_cache, "_digest_cache", ["0000000000000000"])
        listing_cache.save(path / ".git", {"x": "stale"}, {})
        monkeypatch.setattr(listing_cache, "_digest_cache", [])
    with Workspace.open(path) as ws:
        assert snapshot(ws.candidates("s")) == snapshot(before)
    records, statuses = listing_cache.load(path / ".git")          # rewritten by this version at close
    assert "x" not in records and len(statuses) == 6
