"""Where a session's branch `sessions/<session>` is and where it must be (the session's best readable candidate,
else its root), and moving it there: what `kbench fsck` repairs, and what a resumed session does itself, so a
branch that a killed or interrupted writer (a full disk) left missing or behind is back before anything else
is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.workspace import gitrefs, writers
from engine.workspace.commits import candidate_trailer
from engine.workspace.naming import branch_ref
from engine.workspace.views import best_of


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
