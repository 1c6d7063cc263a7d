"""Where a session's branch `sessions/<session>` is and where it must be (the session's best readable candidate,
else its root), and moving it there: what `kbench fsck` repairs, and what a resumed session does itself, so a
branch that a killed or interrupted writer (a full disk) left missing or behind is back before anything else
is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.workspace import gitrefs, writers
from engine.workspace.commits import candidate_trailer
from engine.workspace.errors import CorruptNoteError, UnknownSessionError
from engine.workspace.naming import branch_ref
from engine.workspace.records import CandidateRecord
from engine.workspace.views import CandidateStatus, CandidateView, best_of, better, fold


@dataclass(frozen=True)
class BranchState:
    ref: str
    head: str | None          # where it points (None: missing)
    want: str                 # the best readable candidate's commit, else the session root
    want_name: str
    at: str                   # "is missing" / "points at <candidate> (<sha>)", for messages

    @property
    def in_place(self) -> bool:
        return self.head == self.want


def branch_state(ws, name: str, views=None) -> BranchState:
    """The branch of session `name` and where it belongs (`views`: its candidates, when already listed)."""
    wr = ws._repo
    ref = branch_ref(name)
    root = ws._root(name)[0]
    head = wr.ref(ref)
    views = ws.candidates(name, strict=False) if views is None else views
    best = best_of(v for v in views if not v.problem)
    want, want_name = (best.record.commit, best.id) if best else (root, "the session root (no eligible candidate)")
    at = "is missing" if head is None else f"points at {describe_commit(ws, head, root)}"
    return BranchState(ref, head, want, want_name, at)


def repoint(ws, name: str, state: BranchState, message: str) -> None:
    """Move the branch to `state.want` (a compare-and-swap on where it was; its old position stays in the
    reflog), as the session's writer for the instant of the write. Raises the workspace's errors."""
    wr = ws._repo
    with wr.writing(), writers.write_guard(ws.git_dir, name):
        update = gitrefs.RefUpdate(state.ref, state.want, state.head) if state.head \
            else gitrefs.RefUpdate(state.ref, state.want)
        wr.update_refs([update], message)


def describe_commit(ws, sha: str, root: str) -> str:
    if sha == root:
        return "the session root"
    raw = ws._repo.read_commit(sha)
    cid = candidate_trailer(raw) if raw else None
    return f"{cid} ({sha[:12]})" if cid else sha[:12]


def best_move(ws, rec: CandidateRecord, old: CandidateStatus, new: CandidateStatus) -> gitrefs.RefUpdate | None:
    """Where `sessions/<session>` must go after `rec` changed from `old` to `new` (None: stays): a new best
    takes it; the best losing its place hands it to the next best (or the root)."""
    wr = ws._repo
    session = rec.session
    if not session:
        return None
    try:
        root = ws._root(session)[0]
    except UnknownSessionError:
        return None
    branch = branch_ref(session)
    head = wr.ref(branch)
    head_rec = ws._reader.record_at(head) if head and head != root else None
    if head_rec is not None and head_rec.session != session:
        head_rec = None
    mine = CandidateView(rec, new)
    if head_rec is not None and head_rec.commit == rec.commit:
        if new.eligible and old.speedup is not None and (new.speedup or 0.0) >= old.speedup:
            return None
        best = best_of(ws._listing.views(session, strict=False, replace={rec.commit: new}))
        target = best.record.commit if best else root
    else:
        if not new.eligible:
            return None
        head_view = None
        if head_rec is not None:
            try:
                head_view = CandidateView(head_rec, fold(ws._reader.current_entries(head_rec)))
            except CorruptNoteError:
                head_view = None
        if not better(mine, head_view):
            return None
        target = rec.commit
    if target == head:
        return None
    return gitrefs.RefUpdate(branch, target, head) if head else gitrefs.RefUpdate(branch, target)
