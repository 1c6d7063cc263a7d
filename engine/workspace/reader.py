"""`CandidateReader`: what every part of the workspace reads back one candidate or session at a time:
resolving a query to a candidate record, a session's root commit, a commit's `.kbench/` records and a
candidate's note entries. It caches only immutable objects (root commits, the task's tree entries), so
one reader serves any number of threads."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from engine.workspace import commits, gitobjects, gitread, gitrefs
from engine.workspace.errors import (CorruptNoteError, DamagedObjectError, UnknownCandidateError,
                                     UnknownSessionError, WorkspaceDamagedError)
from engine.workspace.notes import NotesStore
from engine.workspace.naming import (CANDIDATE_NS, ROOT_LEAF, candidate_ref, check_session_name, parse_candidate_id,
                                     root_ref, split_ref)
from engine.workspace.note_entries import NoteEntry
from engine.workspace.note_parsing import parse_note
from engine.workspace.records import CandidateRecord
from engine.workspace.repo import WorkspaceRepo

FSCK_HINT = ("`kbench fsck` lists all damage and repairs what is safe; a lost object can be copied back from a "
             "clone of this workspace")
NOTE_HINT = ("Nothing was written over it. " + FSCK_HINT + "; `kbench evolve` and `kbench reevaluate` take "
             "--reevaluate-damaged to evaluate the candidate again (its note then goes on from a line naming the "
             "damaged object)")


class CandidateReader:
    """Reads candidates, sessions and notes back from one workspace repository."""

    def __init__(self, repo: WorkspaceRepo, notes: NotesStore):
        self.repo = repo
        self.notes = notes
        self.roots: dict[str, tuple[str, str]] = {}        # session -> (root commit, root tree)
        self.task_entries: dict[str, list[gitobjects.TreeEntry]] = {}
        self.cache_guard = threading.Lock()
        # The user said to go on over damaged notes (`--reevaluate-damaged`): appends then start a fresh note
        # that names the unreadable one, and resume evaluates such candidates again.
        self.accept_damage = False

    @property
    def path(self) -> Path:
        return self.repo.path

    # ------------------------------------------------------------------------------------- sessions

    def root(self, session: str) -> tuple[str, str]:
        """(root commit, root tree) of `session`; UnknownSessionError, listing the sessions, where none."""
        hit = self.roots.get(session)
        if hit:
            return hit
        check_session_name(session)
        raw = self.repo.read_commit(root_ref(session))
        if raw is None:
            known = sorted({p[0] for p in (split_ref(r) for r in self.repo.refs(CANDIDATE_NS)) if p})
            raise UnknownSessionError(f"no session {session!r} in {self.path} "
                                      f"(sessions: {', '.join(known) or 'none yet'})")
        with self.cache_guard:
            self.roots[session] = (raw.sha, raw.tree)
        return raw.sha, raw.tree

    def session_json(self, session: str) -> dict[str, Any]:
        tree = self.root(session)[1]
        return self.record_json(tree, "session.json", f"session {session}'s record", session=session) or {}

    def task_entries_of(self, session: str) -> list[gitobjects.TreeEntry]:
        hit = self.task_entries.get(session)
        if hit is None:
            hit = commits.task_entries_of_root(self.repo, self.root(session)[1])
            with self.cache_guard:
                self.task_entries[session] = hit
        return hit

    def forget(self, session: str) -> None:
        """Drop what is cached of a session that was removed."""
        for cache in (self.roots, self.task_entries):
            cache.pop(session, None)

    # ----------------------------------------------------------------------------------- candidates

    def resolve(self, query: str) -> CandidateRecord:
        """A candidate from its full id, a unique id prefix, its ref, or any revision naming its commit."""
        q = (query or "").strip()
        if not q:
            raise UnknownCandidateError("no candidate given")
        wr = self.repo
        parsed = parse_candidate_id(q)
        if parsed and "/" not in q:
            sha = wr.ref(candidate_ref(parsed[0], q))
            if sha:
                rec = self.record_at(sha)
                if rec is not None and rec.id == q:
                    return rec
        by_id: dict[str, str] = {}
        for ref, sha in wr.refs(CANDIDATE_NS).items():
            parts = split_ref(ref)
            if parts and parts[1] != ROOT_LEAF:
                by_id[parts[1]] = sha
        if q.startswith(CANDIDATE_NS):
            parts = split_ref(q)
            if parts and parts[1] in by_id:
                return self.must_record(by_id[parts[1]], q, parts[1])
        if q in by_id:
            return self.must_record(by_id[q], q, q)
        matches = sorted(i for i in by_id if i.startswith(q))
        if len(matches) == 1:
            return self.must_record(by_id[matches[0]], q, matches[0])
        if len(matches) > 1:
            shown = ", ".join(matches[:8]) + (f" and {len(matches) - 8} more" if len(matches) > 8 else "")
            raise UnknownCandidateError(f"{q!r} is ambiguous: it starts {len(matches)} candidate ids ({shown})")
        sha = gitrefs.rev_parse_commit(wr.git_dir, q)
        if sha:
            ids = {s: i for i, s in by_id.items()}
            if sha in ids:
                return self.must_record(sha, q)
            raw = wr.read_commit(sha)
            if raw is not None and commits.parse_message(raw.message).trailers.get(commits.T_ROOT):
                raise UnknownCandidateError(f"{q!r} is the root commit of a session, not a candidate")
        leaf = split_ref(q)[1] if q.startswith(CANDIDATE_NS) and split_ref(q) else q
        named = parse_candidate_id(leaf)
        if named and (Path(wr.git_dir) / candidate_ref(named[0], leaf)).is_file():
            # the ref's file is there, yet git lists no such ref: it holds no object id
            raise WorkspaceDamagedError(
                f"candidate {leaf}: its ref {candidate_ref(named[0], leaf)} holds no object id (git ignores it as "
                f"broken). `kbench fsck` finds the commit that names itself {leaf} and points the ref back at it.",
                obj=candidate_ref(named[0], leaf), candidate=leaf, session=named[0], reason="holds no object id")
        raise UnknownCandidateError(
            f"no candidate {q!r} in {self.path}: not a candidate id, a unique id prefix, a refs/kbench/ ref or a "
            "revision of a candidate commit (`kbench sessions` and `kbench log SESSION` list them)")

    def lineage(self, query: str) -> list[CandidateRecord]:
        """The candidate and all its evolutionary ancestors, nearest first (breadth-first over parents)."""
        start = self.resolve(query)
        out, seen, queue = [start], {start.commit}, list(start.parent_commits)
        while queue:
            sha = queue.pop(0)
            if sha in seen:
                continue
            seen.add(sha)
            rec = self.record_at(sha)
            if rec is None:
                continue  # the session root
            out.append(rec)
            queue.extend(rec.parent_commits)
        return out

    def read_or_damage(self, rev: str) -> gitread.GitObject | None | WorkspaceDamagedError:
        try:
            return self.repo.reader.read(rev)
        except WorkspaceDamagedError as exc:
            return exc

    def id_of_commit(self, sha: str) -> str | None:
        raw = self.repo.read_commit(sha)
        return commits.candidate_trailer(raw) if raw else None

    def record_at(self, sha: str) -> CandidateRecord | None:
        raw = self.repo.read_commit(sha)
        return commits.record_from_commit(raw, self.id_of_commit) if raw else None

    def must_record(self, sha: str, q: str, leaf: str | None = None) -> CandidateRecord:
        """The record of the commit `sha` that the candidate ref `leaf` (of query `q`) names. Where that ref has
        a candidate's name, anything but its candidate's commit is damage, and is named as such."""
        obj = self.read_or_damage(sha)
        rec = self.record_at(sha) if isinstance(obj, gitread.GitObject) and obj.type == "commit" else None
        named = parse_candidate_id(leaf) if leaf else None
        if named and (rec is None or rec.id != leaf):
            ref = candidate_ref(named[0], leaf)
            if not isinstance(obj, gitread.GitObject):
                why = (obj.reason if isinstance(obj, WorkspaceDamagedError)
                       else "is missing or corrupt (git cannot read it)")
                raise WorkspaceDamagedError(
                    f"candidate {leaf}'s commit (object {sha}, named by {ref}) {why}. {FSCK_HINT}.",
                    obj=sha, candidate=leaf, session=named[0], reason=why)
            what = (f"the commit of {rec.id}" if rec is not None else f"a {obj.type}, not a commit"
                    if obj.type != "commit" else "a commit that is not a kbench candidate")
            raise WorkspaceDamagedError(
                f"candidate {leaf}: its ref {ref} points at {what} ({sha[:12]}). `kbench fsck` finds the commit that "
                f"names itself {leaf} and points the ref back at it.", obj=ref, candidate=leaf, session=named[0],
                reason=f"points at {what}")
        if rec is None:
            raise UnknownCandidateError(f"{q!r} points at commit {sha[:12]}, which carries no Kbench-Candidate "
                                        "trailer (not a kbench candidate)")
        return rec

    def candidate_file_names(self, rec: CandidateRecord) -> tuple[list[str], dict[str, Any]]:
        """(the candidate's own file paths, its `.kbench/candidate.json`)."""
        raw = self.repo.read_commit(rec.commit)
        if raw is None:
            raise WorkspaceDamagedError(f"candidate {rec.id}'s commit (object {rec.commit}) is missing. {FSCK_HINT}.",
                                        obj=rec.commit, candidate=rec.id)
        meta = self.record_json(raw.tree, "candidate.json", f"candidate {rec.id}'s record", candidate=rec.id) or {}
        names = meta.get("files")
        if not isinstance(names, list) or not names:
            # A commit made by hand: everything but the task's files and .kbench/.
            task = {e.name for e in self.task_entries_of(rec.session)} if rec.session else set()
            names = [p for p in gitread.ls_tree_names(self.repo.git_dir, rec.commit)
                     if p.split("/")[0] not in task and not p.startswith(commits.META_DIR + "/")]
        return [str(n) for n in names], meta

    def record_json(self, tree: str, name: str, label: str, **who: str) -> dict[str, Any] | None:
        """`.kbench/<name>` of a commit tree, parsed; None where the tree has none. Damage raises, named."""
        meta = next((e for e in self.repo.read_tree(tree) if e.name == commits.META_DIR and e.is_tree), None)
        entry = next((e for e in self.repo.read_tree(meta.sha) if e.name == name), None) if meta else None
        if entry is None:
            return None
        sha = entry.sha

        def bad(reason: str) -> WorkspaceDamagedError:
            return WorkspaceDamagedError(f"{label} (.kbench/{name}, object {sha}) {reason}. {FSCK_HINT}.",
                                         obj=sha, reason=reason, **who)

        try:
            obj = self.repo.reader.read(sha)
        except DamagedObjectError as exc:
            raise bad(exc.reason) from None
        if obj is None:
            raise bad("is missing from the repository")
        try:
            data = json.loads(obj.data)
        except ValueError as exc:
            raise bad(f"is not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise bad("is not a JSON object")
        return data

    # ---------------------------------------------------------------------------------------- notes

    @staticmethod
    def where(rec: CandidateRecord) -> str:
        return f"candidate {rec.id} (commit {rec.commit[:12]})"

    def current_entries(self, rec: CandidateRecord) -> list[NoteEntry]:
        try:
            text = self.notes.read(rec.commit)
        except WorkspaceDamagedError as exc:
            raise self.note_damage(rec, exc) from None
        return parse_note(text or "", self.where(rec), rec.commit)

    @staticmethod
    def note_damage(rec: CandidateRecord, exc: WorkspaceDamagedError) -> CorruptNoteError:
        return CorruptNoteError(f"candidate {rec.id}'s note (object {exc.obj}) {exc.reason}. {NOTE_HINT}.",
                                obj=exc.obj, candidate=rec.id, session=rec.session, reason=exc.reason)

    def entries_for_append(self, rec: CandidateRecord) -> list[NoteEntry]:
        """The entries a new note line is folded with. A damaged note raises, unless `accept_damage`: then
        its readable lines count (none, where the blob itself is lost) and the append goes ahead."""
        try:
            return self.current_entries(rec)
        except CorruptNoteError:
            if not self.accept_damage:
                raise
            try:
                text = self.notes.read(rec.commit)
            except WorkspaceDamagedError:
                return []
            return parse_note(text or "", self.where(rec), rec.commit, skip_bad=True)
