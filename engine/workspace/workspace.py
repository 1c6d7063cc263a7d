"""`Workspace`: the public face of the git store, and its write path. It holds no state of its own beyond
caches of immutable objects; commits are built by `commits`, notes by `notes`, folding and ranking by
`views`; reads go through `reader.CandidateReader`, listings through `listing.Listing`, a candidate's files
through `files`; every write runs under the repository's writer lock (`writer_lock.WriterLock`), so any
number of threads (and processes, each with its own Workspace) may call it at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from engine.candidates import Candidate
from engine.verdict import STAGES, Status, Verdict
from engine.workspace import commits, files, gitobjects, gitrefs, session_branch, sessions, writers
from engine.workspace.damaged_refs import DamagedRef
from engine.workspace.failed import FailedProposals
from engine.workspace.errors import CorruptNoteError, WorkspaceError
from engine.workspace.listing import Listing
from engine.workspace.notes import NotesStore
from engine.workspace.paths import default_export_dir, default_path
from engine.workspace.reader import CandidateReader
from engine.workspace.naming import (CANDIDATE_NS, candidate_id, candidate_ref, check_token,
                                     parse_candidate_id, split_ref)
from engine.workspace.note_entries import Event, Measurement, NoteEntry, Override, VerdictNote, entry_line
from engine.workspace.note_parsing import parse_note
from engine.workspace.records import CandidateRecord, SessionInfo, now_iso
from engine.workspace.repo import WorkspaceRepo
from engine.workspace.views import CandidateStatus, CandidateView, fold

if TYPE_CHECKING:
    from engine.tasks.model import Task

__all__ = ["Workspace", "default_path", "default_export_dir"]


class Workspace:
    """Sessions, candidates and their judgements in one git repository. Methods return dataclasses."""

    def __init__(self, repo: WorkspaceRepo):
        self._repo = repo
        self._notes = NotesStore(repo)
        self._reader = CandidateReader(repo, self._notes)
        self._listing = Listing(self._reader)
        self._counters: dict[str, dict[int, int]] = {}      # session -> generation -> highest n seen

    @property
    def accept_damage(self) -> bool:
        """The user said to go on over damaged notes (`--reevaluate-damaged`): appends then start a fresh
        note that names the unreadable one, and resume evaluates such candidates again."""
        return self._reader.accept_damage

    @accept_damage.setter
    def accept_damage(self, value: bool) -> None:
        self._reader.accept_damage = value

    # ------------------------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, path: str | Path | None = None) -> "Workspace":
        """Open an existing workspace; raises NotAWorkspaceError for anything else."""
        return cls(WorkspaceRepo.open(path or default_path()))

    @classmethod
    def create(cls, path: str | Path | None = None, adopt: bool = False) -> "Workspace":
        """Open the workspace at `path`, creating it in a missing or empty folder. A non-empty folder or a
        foreign git repository is refused unless `adopt` is set (which never changes existing files or refs)."""
        return cls(WorkspaceRepo.create(path or default_path(), adopt=adopt))

    @property
    def path(self) -> Path:
        return self._repo.path

    @property
    def git_dir(self) -> Path:
        return self._repo.git_dir

    def claim(self, session: str, command: str, take_over: bool = False) -> writers.Claim:
        """Become the one writer of `session` until the returned claim is released (see engine.workspace.
        writers). Raises SessionBusyError, naming the holder, while another process writes it."""
        claim = writers.claim(self.git_dir, session, command, take_over=take_over)
        # A killed writer's git child may still be finishing its write: it holds the writer lock, so
        # taking that lock once waits for it, and what the caller reads next includes that write.
        with self._repo.lock:
            pass
        return claim

    def close(self) -> None:
        try:
            self._listing.save()
        finally:
            self._repo.close()

    def maintain(self, wait: bool = True) -> None:
        """`git gc --auto`: pack loose objects and refs when git judges it worthwhile (writers also do this
        every few hundred writes, in the background)."""
        self._repo.gc(wait=wait)

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------- sessions

    def start_session(self, name: str, task: Task | str | Path, direction: str = "forward", proposer: str = "anthropic",
                      model: str | None = None, config: dict[str, Any] | None = None,
                      description: str | None = None) -> SessionInfo:
        """Create session `name`: a root commit holding the task's files and `.kbench/session.json`, the
        ref `refs/kbench/<name>/root` and the branch `sessions/<name>` (at the root until a best exists)."""
        sessions.create(self._repo, name, task, direction, proposer, model, config, description)
        return self.session(name)

    def discard_empty_session(self, name: str) -> bool:
        """Remove a session that holds no candidate (a start that failed before its first commit), so a failed
        start leaves nothing behind. Its root commit stays in the object store until git gc; nothing is
        removed where any candidate exists. True where it was removed."""
        if not sessions.discard_empty(self._repo, name):
            return False
        self._reader.forget(name)
        self._counters.pop(name, None)
        return True

    def restore_branch(self, name: str) -> str | None:
        """Put `sessions/<name>` back on the session's best (a writer killed or stopped by a full disk may have
        left it missing or behind): what a resume does before it writes. Returns what was done, None where it
        was in place or the session has damaged candidates (then the true best is unknown: `kbench fsck`)."""
        views = self.candidates(name, strict=False)
        state = session_branch.branch_state(self, name, views)
        if state.in_place or any(v.problem for v in views):
            return None
        session_branch.repoint(self, name, state, f"kbench: {name} resumed, its best is {state.want_name}")
        return f"the branch {state.ref} {state.at}: re-pointed to the session's best, {state.want_name}"

    def sessions(self) -> list[SessionInfo]:
        """Every session, oldest first, with its candidate count and current best."""
        return self._listing.sessions()

    def session(self, name: str) -> SessionInfo:
        return self._listing.session(name)

    # ----------------------------------------------------------------------------------- candidates

    def commit_candidate(self, session: str, candidate: Candidate, *, parents: Sequence[str] = (),
                         operator: str | None = None, proposer: str | None = None, model: str | None = None,
                         generation: int | None = None, title: str | None = None,
                         rationale: str | None = None, prompt: str | None = None,
                         author: tuple[str, str] | None = None,
                         search_state: dict[str, Any] | None = None) -> CandidateRecord:
        """Commit `candidate` into `session`. `parents` (ids, prefixes or revisions) become the commit's
        parents: none for a translation (the session root), one for a mutation, two for a crossover.
        `search_state`: the evolution loop's state after choosing this candidate (random state and
        counters), kept in `.kbench/candidate.json` so a resumed session goes on from exactly here.
        Returns the record, whose `id` (`<session>-g<gen>-<n>`) names it from now on."""
        meta = candidate.meta or {}
        info = self._session_json(session)
        proposer = check_token("proposer", proposer or meta.get("proposer") or info.get("proposer") or "unknown")
        model = model or meta.get("model") or info.get("model")
        wr = self._repo
        with wr.writing(), writers.write_guard(self.git_dir, session):
            root, _ = self._root(session)
            parent_recs = [self.resolve(p) for p in parents]
            for p in parent_recs:
                if p.session != session:
                    raise WorkspaceError(f"parent {p.id} belongs to session {p.session!r}, not {session!r}")
            if len({p.id for p in parent_recs}) != len(parent_recs):
                raise WorkspaceError("the same parent is given twice")
            gen = generation if generation is not None else (
                max(p.generation for p in parent_recs) + 1 if parent_recs else 0)
            if not isinstance(gen, int) or gen < 0:
                raise WorkspaceError(f"generation must be a non-negative integer, not {gen!r}")
            op = check_token("operator", operator or meta.get("operator") or
                             ("translate" if not parent_recs else "mutate" if len(parent_recs) == 1 else "crossover"))
            heading = title or meta.get("title") or candidate.name
            why = rationale if rationale is not None else str(meta.get("rationale") or "")
            asked = prompt if prompt is not None else str(meta.get("prompt") or "(no prompt recorded)\n")
            who = author or ((wr.identity()) if proposer == "human" else (f"kbench {proposer}",
                                                                          f"{proposer}@kbench.invalid"))
            parent_shas = [p.commit for p in parent_recs] or [root]
            task_entries = self._reader.task_entries_of(session)
            for _ in range(8):
                n = self._next_n(session, gen)
                cid = candidate_id(session, gen, n)
                sha = commits.write_candidate_commit(
                    wr, task_entries=task_entries, candidate=candidate, cid=cid, session=session,
                    generation=gen, operator=op, proposer=proposer, model=model,
                    subject=commits.candidate_subject(gen, op, heading), rationale=why, prompt=asked,
                    parents=parent_shas, author=gitobjects.Ident.now(*who), search_state=search_state)
                try:
                    wr.update_refs([gitrefs.RefUpdate(candidate_ref(session, cid), sha)], f"kbench: commit {cid}")
                except gitrefs.RefConflictError:
                    self._counters.pop(session, None)  # someone else took that id: rescan
                    continue
                self._counters.setdefault(session, {})[gen] = n
                break
            else:
                raise WorkspaceError(f"could not allocate a candidate id in session {session!r}")
        raw = wr.read_commit(sha)
        return commits.record_from_commit(raw, self._reader.id_of_commit)

    @property
    def failed(self) -> FailedProposals:
        """The LLM answers that gave no candidate (engine.workspace.failed): record, list, get, prompt, checkout."""
        return FailedProposals(self._repo, self._reader)

    def resolve(self, query: str) -> CandidateRecord:
        """A candidate from its full id, a unique id prefix, its ref, or any revision naming its commit."""
        return self._reader.resolve(query)

    candidate = resolve

    def lineage(self, query: str) -> list[CandidateRecord]:
        """The candidate and all its evolutionary ancestors, nearest first (breadth-first over parents)."""
        return self._reader.lineage(query)

    # -------------------------------------------------------------------------------- files (files.py)

    def files(self, query: str) -> Candidate:
        """The candidate's own files (not the task's), as an engine Candidate ready to evaluate."""
        return files.candidate_files(self._reader, self.resolve(query))

    def prompt(self, query: str) -> str:
        return files.prompt(self._repo, self.resolve(query))

    def search_state(self, query: str) -> dict[str, Any] | None:
        """The evolution loop's state saved with this candidate (commit_candidate's `search_state`)."""
        return files.search_state(self._reader, self.resolve(query))

    def checkout(self, query: str, directory: str | Path, with_task: bool = False,
                 force: bool = False) -> list[Path]:
        """Write the candidate's files (with `with_task`, the whole commit tree) into `directory`. Refuses
        to overwrite existing files unless `force`; nothing is written when it refuses."""
        return files.checkout(self._reader, self.resolve(query), directory, with_task=with_task, force=force)

    def diff(self, a: str, b: str, meta: bool = False, stat: bool = False) -> str:
        """Unified diff from candidate `a` to `b` (their files; with `meta`, `.kbench/` too)."""
        ra, rb = self.resolve(a), self.resolve(b)
        return files.diff(self._repo, ra, rb, meta=meta, stat=stat)

    # --------------------------------------------------------------------------------- judgements

    def record(self, query: str, entries: Sequence[NoteEntry]) -> CandidateStatus:
        """Append verdicts, measurements, overrides or events to the candidate's note, in one notes commit.
        Moves `sessions/<session>` when the session's best changes. Returns the candidate's new status."""
        lines = [entry_line(e) for e in entries]
        if not lines:
            return self.status(query)
        with self._repo.writing():
            rec = self.resolve(query)
            with writers.write_guard(self.git_dir, rec.session):
                return self._append(rec, lines, self._reader.entries_for_append(rec))

    def record_verdict(self, query: str, verdict: Verdict, by: str = "") -> CandidateStatus:
        return self.record(query, [VerdictNote(verdict, now_iso(), by)])

    def record_verdicts(self, query: str, verdicts: Iterable[Verdict], by: str = "") -> CandidateStatus:
        return self.record(query, [VerdictNote(v, now_iso(), by) for v in verdicts])

    def record_measurement(self, query: str, measurement: Measurement) -> CandidateStatus:
        return self.record(query, [measurement])

    def record_event(self, query: str, event: str, data: dict[str, Any] | None = None,
                     by: str = "") -> CandidateStatus:
        return self.record(query, [Event(check_token("event", event), dict(data or {}), now_iso(), by)])

    def record_session_event(self, session: str, event: str, data: dict[str, Any] | None = None,
                             by: str = "") -> Event:
        """Append an event to the session's own note, on its root commit: what happened to the session
        rather than to one candidate (a paid proposal that produced nothing, an API outage)."""
        root = self._root(session)[0]
        entry = Event(check_token("event", event), dict(data or {}), now_iso(), by)
        message = f"kbench: {event} on session {session}\n"
        with self._repo.writing():
            prepared = self._notes.prepare_append({root: [entry_line(entry)]}, message)
            self._repo.update_refs([prepared.update], message.strip())
        return entry

    def session_events(self, session: str) -> list[Event]:
        """The events of the session's own note, oldest first."""
        root = self._root(session)[0]
        text = self._notes.read(root)
        return [e for e in parse_note(text or "", f"session {session}", root) if isinstance(e, Event)]

    def override(self, query: str, stage: str, to: Status | str, reason: str,
                 by: str | None = None) -> Override:
        """Record a person's judgement that `stage` is `to`: who, why, and the status it overrides.
        Appends a line; the verdict it overrides stays in the history."""
        try:
            to_status = Status(to)
        except ValueError:
            raise WorkspaceError(f"{to!r} is not a status (use {', '.join(s.value for s in Status)})") from None
        reason = " ".join((reason or "").split())
        if not reason:
            raise WorkspaceError("an override needs a reason (--reason TEXT)")
        with self._repo.writing():
            rec = self.resolve(query)
            with writers.write_guard(self.git_dir, rec.session):
                current = self._reader.entries_for_append(rec)
                status = fold(current)
                if stage not in STAGES and stage not in status.stages:
                    raise WorkspaceError(f"{stage!r} is not a stage ({', '.join(STAGES)})")
                before = status.status_of(stage)
                if before == to_status:
                    raise WorkspaceError(f"{rec.id}: {stage} is already {to_status.value}; nothing to override")
                who = by or "{} <{}>".format(*self._repo.identity())
                entry = Override(stage, before.value if before else None, to_status, who, reason, now_iso())
                self._append(rec, [entry_line(entry)], current)
                return entry

    def notes(self, query: str) -> list[NoteEntry]:
        """The candidate's note entries. A damaged note raises CorruptNoteError, unless `accept_damage`:
        then its readable lines (none where the blob is lost)."""
        rec = self.resolve(query)
        return self._reader.entries_for_append(rec)

    def status(self, query: str) -> CandidateStatus:
        return fold(self.notes(query))

    def view(self, query: str) -> CandidateView:
        rec = self.resolve(query)
        return CandidateView(rec, fold(self._reader.entries_for_append(rec)))

    # --------------------------------------------------------------------------------------- lists

    def candidates(self, session: str, strict: bool = True) -> list[CandidateView]:
        """Every candidate of the session with its latest verdicts, by generation. Three git processes in
        all, whatever the number of candidates. With `strict` False a corrupt note does not raise: that
        candidate's view carries an empty status and the error in `problem`."""
        return self._listing.candidates(session, strict)

    def damaged_refs(self, session: str, fresh: bool = True) -> list[DamagedRef]:
        """The session's candidate refs that do not name their candidate's commit (engine.workspace.damaged_refs),
        each with the commit that names itself that candidate where one is left. `fresh` False: what the last
        listing of the session found (none, where it was not listed), without listing it again."""
        if fresh:
            self._listing.views(session, strict=False)
        return list(self._listing.damaged.get(session, ()))

    def generations(self, session: str) -> dict[int, list[CandidateView]]:
        return self._listing.generations(session)

    def best(self, session: str) -> CandidateView | None:
        return self._listing.best(session)

    # ------------------------------------------------------------------------------------ internals

    # Read by fsck, the session service and export (the session's record of its task).
    def _root(self, session: str) -> tuple[str, str]:
        return self._reader.root(session)

    def _session_json(self, session: str) -> dict[str, Any]:
        return self._reader.session_json(session)

    def _candidate_file_names(self, rec: CandidateRecord) -> tuple[list[str], dict[str, Any]]:
        return self._reader.candidate_file_names(rec)

    def _next_n(self, session: str, gen: int) -> int:
        """Next free n for `<session>-g<gen>-<n>` (under the writer lock)."""
        for rescan in (False, True):
            if rescan or session not in self._counters:
                seen: dict[int, int] = {}
                for ref in self._repo.refs(f"{CANDIDATE_NS}{session}/"):
                    parts = split_ref(ref)
                    parsed = parse_candidate_id(parts[1]) if parts else None
                    if parsed and parsed[0] == session:
                        seen[parsed[1]] = max(seen.get(parsed[1], 0), parsed[2])
                self._counters[session] = seen
            n = self._counters[session].get(gen, 0) + 1
            if not self._repo.ref(candidate_ref(session, candidate_id(session, gen, n))):
                return n
        return n

    def _append(self, rec: CandidateRecord, lines: list[str], current: list[NoteEntry]) -> CandidateStatus:
        """Under the writer lock: one notes commit, and the session branch moved if the best changed."""
        wr = self._repo
        new_entries = current + parse_note("\n".join(lines), self._reader.where(rec), rec.commit)
        new_status = fold(new_entries)
        kinds = sorted({json.loads(l)["kind"] for l in lines})
        message = f"kbench: {'+'.join(kinds)} on {rec.id}\n"
        prepared = self._notes.prepare_append({rec.commit: lines}, message,
                                              over_damage=frozenset({rec.commit}) if self.accept_damage else
                                              frozenset())
        updates = [prepared.update]
        move = session_branch.best_move(self, rec, fold(current), new_status)
        if move is not None:
            updates.append(move)
        wr.update_refs(updates, message.strip())
        return new_status
