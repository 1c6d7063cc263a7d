"""`refs/notes/kbench`: one note per candidate commit, a JSON line per judgement, appended with plumbing.

An append reads the note's current blob, adds lines, writes the new blob, the changed trees and a notes
commit whose parent is the previous notes commit, and hands back a ref update (compare-and-swap on the
old notes commit) for the caller to apply in its transaction, under the writer lock. The notes tree may
be flat (as `git notes` writes small ones) or fanned out as `ab/cdef…` (as kbench writes new ones, so an
append rewrites two small trees, not one with every note): both are read and both are kept as found.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from engine.workspace import gitio, gitobjects, gitread, gitrefs
from engine.workspace.crashpoints import crashpoint
from engine.workspace.errors import CorruptNoteError, WorkspaceDamagedError, WorkspaceError
from engine.workspace.naming import NOTES_REF
from engine.workspace.records import now_iso
from engine.workspace.repo import WorkspaceRepo


@dataclass(frozen=True)
class NotesHead:
    commit: str
    tree: str


@dataclass(frozen=True)
class PreparedAppend:
    update: gitrefs.RefUpdate        # the notes ref move, to apply in the caller's transaction
    texts: dict[str, str]            # annotated commit -> its full new note text


class NotesStore:
    def __init__(self, wr: WorkspaceRepo):
        self.wr = wr
        self._trees: OrderedDict[str, list[gitobjects.TreeEntry]] = OrderedDict()  # sha -> entries (immutable)
        self._guard = threading.Lock()

    # ------------------------------------------------------------------------------------------- read

    def head(self) -> NotesHead | None:
        raw = self.wr.read_commit(NOTES_REF)
        return NotesHead(raw.sha, raw.tree) if raw else None

    def read(self, commit: str, head: NotesHead | None = None) -> str | None:
        """The note text on `commit` (a full sha), or None where it has no note. A note whose blob is
        missing, unreadable or not text raises CorruptNoteError (its `obj` is the blob)."""
        head = head or self.head()
        if head is None:
            return None
        loc = self._locate(head.tree, commit)
        if loc is None:
            return None
        return note_text(self.wr.reader.read(loc[-1].sha), loc[-1].sha)

    def blob_of(self, commit: str) -> str | None:
        """The note blob sha on `commit` in the current notes tree (without reading the blob)."""
        head = self.head()
        loc = self._locate(head.tree, commit) if head else None
        return loc[-1].sha if loc else None

    def listing(self) -> dict[str, str]:
        """{annotated commit sha: note blob sha} for every note, from one `git ls-tree -r`."""
        pending = self.start_listing()
        return gitread.parse_notes_listing(pending.result()) if pending else {}

    def start_listing(self) -> gitio.PendingGit | None:
        head = self.head()
        if head is None:
            return None
        return gitio.PendingGit(self.wr.git_dir, ["ls-tree", "-r", "-z", "--full-tree", head.tree])

    def read_many(self, commits: Iterable[str]) -> dict[str, str]:
        """Note texts for many commits: one ls-tree and one batched cat-file, whatever their number."""
        blobs = self.listing()
        wanted = [(c, blobs[c]) for c in dict.fromkeys(commits) if c in blobs]
        objs = self.wr.read_batch([b for _, b in wanted])
        return {c: o.data.decode("utf-8", "replace") for (c, _), o in zip(wanted, objs) if o is not None}

    # ------------------------------------------------------------------------------------------ write

    def prepare_append(self, lines: Mapping[str, Sequence[str]], message: str,
                       over_damage: frozenset[str] = frozenset()) -> PreparedAppend:
        """Write the objects of a notes commit adding `lines` to the notes of the given commits. A damaged
        note raises, unless its commit is in `over_damage`: then the new note is a line naming the damaged
        object followed by `lines` (nothing of the old history is rewritten; it stays in the notes log).

        Needs the writer lock (the caller applies `update` before releasing it)."""
        if not self.wr.lock.held:
            raise WorkspaceError("internal error: notes written outside the workspace writer lock")
        head = self.head()
        tree = head.tree if head else None
        texts: dict[str, str] = {}
        for commit, new_lines in lines.items():
            if len(commit) != 40:
                raise WorkspaceError(f"internal error: notes need a full commit sha, not {commit!r}")
            try:
                old = self.read(commit, head) if head else None
            except WorkspaceDamagedError as exc:
                if commit not in over_damage:
                    raise
                # The user chose to go on: the new note starts by naming the object that held the history
                # (still in refs/notes/kbench's log, so a copy of it from a clone brings it back).
                old = _damage_line(exc)
            text = old or ""
            if text and not text.endswith("\n"):
                text += "\n"
            text += "".join(line + "\n" for line in new_lines)
            texts[commit] = text
            blob = self.wr.objects.blob(text.encode())
            tree = self._put(tree, commit, blob, root=True)
        crashpoint("notes-objects")
        committer = self.wr.committer()
        commit_sha = self.wr.objects.write(
            "commit", gitobjects.format_commit(tree, [head.commit] if head else [], committer, committer, message))
        update = gitrefs.RefUpdate(NOTES_REF, commit_sha, head.commit if head else None)
        return PreparedAppend(update, texts)

    # -------------------------------------------------------------------------------------- internals

    def _entries(self, tree: str) -> list[gitobjects.TreeEntry]:
        with self._guard:
            hit = self._trees.get(tree)
            if hit is not None:
                self._trees.move_to_end(tree)
                return hit
        entries = self.wr.read_tree(tree)
        self._remember(tree, entries)
        return entries

    def _remember(self, tree: str, entries: list[gitobjects.TreeEntry]) -> None:
        with self._guard:
            self._trees[tree] = entries
            while len(self._trees) > 512:
                self._trees.popitem(last=False)

    def _locate(self, tree: str, commit: str) -> list[gitobjects.TreeEntry] | None:
        """Path of entries from the notes root to the note blob of `commit` (flat or any fanout)."""
        path: list[gitobjects.TreeEntry] = []
        rest = commit
        while True:
            entries = self._entries(tree)
            by_name = {e.name: e for e in entries}
            hit = by_name.get(rest)
            if hit is not None and not hit.is_tree:
                return path + [hit]
            sub = by_name.get(rest[:2]) if len(rest) > 2 else None
            if sub is None or not sub.is_tree:
                return None
            path.append(sub)
            tree, rest = sub.sha, rest[2:]

    def _put(self, tree: str | None, rest: str, blob: str, root: bool = False) -> str:
        entries = self._entries(tree) if tree else []
        by_name = {e.name: e for e in entries}
        hit = by_name.get(rest)
        if hit is not None and not hit.is_tree:
            by_name[rest] = gitobjects.TreeEntry(gitobjects.MODE_BLOB, rest, blob)
        else:
            sub = by_name.get(rest[:2]) if len(rest) > 2 else None
            if sub is not None and sub.is_tree:
                by_name[sub.name] = gitobjects.TreeEntry(gitobjects.MODE_TREE, sub.name, self._put(sub.sha, rest[2:], blob))
            elif root and (not entries or any(e.is_tree and len(e.name) == 2 for e in entries)):
                # Fan out new notes as `ab/cdef…`: an append then rewrites two small trees.
                by_name[rest[:2]] = gitobjects.TreeEntry(gitobjects.MODE_TREE, rest[:2], self._put(None, rest[2:], blob))
            else:
                by_name[rest] = gitobjects.TreeEntry(gitobjects.MODE_BLOB, rest, blob)
        new_entries = list(by_name.values())
        sha = self.wr.objects.tree(new_entries)
        self._remember(sha, new_entries)
        return sha


def note_text(obj: gitread.GitObject | None, blob: str) -> str:
    """A note blob's text; CorruptNoteError where the object is missing, not a blob, or not text."""
    def bad(reason: str) -> CorruptNoteError:
        return CorruptNoteError(f"note (object {blob}) {reason}", obj=blob, reason=reason)

    if obj is None:
        raise bad("is missing from the repository")
    if obj.type != "blob":
        raise bad(f"is a {obj.type}, not a blob")
    try:
        text = obj.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad(f"is not text (invalid UTF-8 at byte {exc.start})") from None
    if "\0" in text:
        raise bad("is not text (it holds NUL bytes)")
    return text


def _damage_line(exc: WorkspaceDamagedError) -> str:
    obj = {"v": 1, "kind": "event", "at": now_iso(), "by": "kbench", "event": "history_unreadable",
           "data": {"object": exc.obj, "reason": str(exc)}}
    return json.dumps(obj, separators=(",", ":")) + "\n"
