"""The listing engine: every session, and every candidate of a session with its folded status, read in a
fixed handful of git processes whatever their number. Commits and note blobs are immutable, so parsed
records (by commit sha) and folded statuses (by note blob sha) are cached, in memory and on disk
(`ListingCache`), and a second listing only reads what changed."""

from __future__ import annotations

import dataclasses
import gc
import json
import re
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from engine.workspace import commits, damaged_refs, gitio, gitobjects, gitread, gitrefs
from engine.workspace.damaged_refs import DamagedRef
from engine.workspace.errors import (CorruptNoteError, DamagedObjectError, WorkspaceDamagedError,
                                     WorkspaceError)
from engine.workspace.listing_cache import ListingCache
from engine.workspace.notes import note_text
from engine.workspace.reader import FSCK_HINT, CandidateReader
from engine.workspace.naming import CANDIDATE_NS, ROOT_LEAF, branch_ref, candidate_ref, split_ref
from engine.workspace.note_parsing import parse_note, parse_notes_bulk
from engine.workspace.records import CandidateRecord, SessionInfo, make
from engine.workspace.views import (EMPTY_STATUS, CandidateStatus, CandidateView, best_of, by_generation, fold,
                                    fold_objs)

_CACHE_CAP = 400_000
_NAMED_REFS_MAX = 256      # up to this many unknown candidates are read by name, more by the session's prefix


class Listing:
    """Lists sessions and candidates of one workspace; holds the record and status caches."""

    def __init__(self, reader: CandidateReader):
        self.reader = reader
        self.repo = reader.repo
        self.records: dict[str, CandidateRecord | None] = {}  # commit sha -> record (commits are immutable)
        self.statuses: dict[str, CandidateStatus] = {}        # note blob sha -> folded status (same)
        self.disk_cache = ListingCache(self.repo.git_dir)     # the two above, kept on disk between processes
        self.damaged: dict[str, list[DamagedRef]] = {}        # session -> its damaged candidate refs (last listing)
        self._lost: dict[tuple[str, str, str | None], str | None] = {}   # where a damaged ref's commit was found

    def save(self) -> None:
        """Keep what this process parsed for the next one (where enough is new to be worth the write)."""
        with _no_gc():
            self.disk_cache.save_if_worthwhile(self.records, self.statuses)

    def sessions(self) -> list[SessionInfo]:
        """Every session, oldest first, with its candidate count and current best."""
        refs = self.repo.refs(CANDIDATE_NS, "refs/heads/sessions/")
        roots: dict[str, str] = {}
        counts: dict[str, int] = {}
        for ref, sha in refs.items():
            parts = split_ref(ref)
            if parts is None:
                continue
            session, leaf = parts
            if leaf == ROOT_LEAF:
                roots[session] = sha
            else:
                counts[session] = counts.get(session, 0) + 1
        names = sorted(roots)
        heads = {n: refs.get(branch_ref(n), roots[n]) for n in names}
        revs = [f"{roots[n]}:{commits.SESSION_JSON}" for n in names] + [heads[n] for n in names]
        try:
            objs = self.repo.read_batch(revs)
        except DamagedObjectError:   # one by one, so each damaged session is named and the rest listed
            objs = [self.reader.read_or_damage(r) for r in revs]
        out = []
        for i, n in enumerate(names):
            blob, head = objs[i], objs[len(names) + i]
            best = None
            if isinstance(head, gitread.GitObject) and head.type == "commit" and head.sha != roots[n]:
                best = commits.candidate_trailer(gitobjects.parse_commit(head.sha, head.data))
            data, problem = {}, None
            if isinstance(blob, gitread.GitObject):
                try:
                    data = json.loads(blob.data)
                except ValueError:
                    data = None
            if not isinstance(data, dict) or not isinstance(blob, gitread.GitObject) or isinstance(head, Exception):
                try:                 # say what exactly is wrong (or find a hand-made root without a record)
                    data = self.reader.session_json(n)
                    self.session(n)
                except WorkspaceError as exc:
                    data, problem = data if isinstance(data, dict) else {}, str(exc)
            out.append(_session_info(n, roots[n], heads[n], best, counts.get(n, 0), data, problem))
        return sorted(out, key=lambda s: (s.created, s.name))

    def session(self, name: str) -> SessionInfo:
        root = self.reader.root(name)[0]
        wr = self.repo
        head = wr.ref(branch_ref(name)) or root
        best = None
        if head != root:
            raw = wr.read_commit(head)
            best = commits.candidate_trailer(raw) if raw else None
        count = sum(1 for ref in wr.refs(f"{CANDIDATE_NS}{name}/") if not ref.endswith("/" + ROOT_LEAF))
        return _session_info(name, root, head, best, count, self.reader.session_json(name))

    def candidates(self, session: str, strict: bool = True) -> list[CandidateView]:
        """Every candidate of the session with its latest verdicts, by generation. Three git processes in
        all, whatever the number of candidates. With `strict` False a corrupt note does not raise: that
        candidate's view carries an empty status and the error in `problem`."""
        return self.views(session, strict, ordered=True)

    def generations(self, session: str) -> dict[int, list[CandidateView]]:
        return by_generation(self.candidates(session))

    def best(self, session: str) -> CandidateView | None:
        return best_of(self.candidates(session, strict=False))

    def views(self, session: str, strict: bool = True,
              replace: dict[str, CandidateStatus] | None = None, ordered: bool = False) -> list[CandidateView]:
        """All candidate views of a session in four git processes, two of them overlapped with the Python
        parsing. Commits and note blobs are immutable, so parsed records (by commit sha) and folded
        statuses (by note blob sha) are cached, in memory and on disk (ListingCache): a second listing
        only reads what changed. `ordered`: by generation, then number."""
        self.reader.root(session)
        with _no_gc():  # tens of thousands of acyclic objects: the cyclic GC would double the time
            views = self._views_nogc(session, strict, replace)
            if ordered:   # inside: sorting allocates a key per view, which would wake the GC over all of them
                views.sort(key=lambda v: v.record.sort_key)
            return views

    def _views_nogc(self, session: str, strict: bool,
                    replace: dict[str, CandidateStatus] | None) -> list[CandidateView]:
        wr = self.repo
        prefix = f"{CANDIDATE_NS}{session}/"
        # git processes, overlapped: the notes tree listing and the candidate refs (sha + name only: cheap),
        # then the commit metadata (formatted by git) of the commits not parsed before, and the note blobs
        # not seen before.
        notes_listing = self.reader.notes.start_listing()
        ref_list = gitio.PendingGit(wr.git_dir, ["for-each-ref", f"--format={gitrefs.REF_LIST_FORMAT}", prefix])
        disk = self.disk_cache.load_once()        # first listing of this Workspace: what earlier ones parsed
        if disk is not None:                          # (read while the git processes run)
            with self.reader.cache_guard:
                for have, add in ((self.records, disk[0]), (self.statuses, disk[1])):
                    for k, v in add.items():
                        have.setdefault(k, v)
        records, statuses = self.records, self.statuses  # this call's view of the caches
        known = len(records) + len(statuses)
        leaves: dict[str, str] = {}
        rc, listed, err = ref_list.finish()
        if rc != 0:
            raise gitio.GitCommandError(ref_list.args, rc, err)
        for sha, ref in gitrefs.parse_ref_list(listed):
            parts = split_ref(ref)
            if parts and parts[0] == session and parts[1] != ROOT_LEAF:
                leaves[parts[1]] = sha
        damage: list[DamagedRef] = [   # a ref file git cannot read: the candidate is not listed by git at all
            DamagedRef(session, leaf, ref, None, "holds no object id (git ignores it as broken)")
            for ref in damaged_refs.broken_refs(err) for (s, leaf) in [split_ref(ref) or ("", "")]
            if s == session and damaged_refs.is_candidate_leaf(session, leaf)]
        unknown = [leaf for leaf, sha in leaves.items() if sha not in records]
        ref_rows = None
        if unknown:   # a few: name them; many: the whole prefix
            patterns = [prefix] if len(unknown) > _NAMED_REFS_MAX else [candidate_ref(session, x) for x in unknown]
            ref_rows = gitio.PendingGit(wr.git_dir, ["for-each-ref", f"--format={gitrefs.REF_RECORD_FORMAT}",
                                                     *patterns])
        try:
            blobs = gitread.parse_notes_listing(notes_listing.result()) if notes_listing else {}
        except gitio.GitCommandError as exc:
            raise _named_damage(exc, {}, "the notes tree of refs/notes/kbench") from None
        new_blobs = list({blobs[sha] for sha in leaves.values() if sha in blobs} - statuses.keys())
        blob_batch = wr.start_batch(new_blobs)   # runs while the commit metadata is parsed
        if ref_rows is not None:
            id_of = {sha: leaf for leaf, sha in leaves.items()}
            try:
                rows = ref_rows.result()
            except gitio.GitCommandError as exc:
                rows = self._rows_without_missing(session, leaves, unknown, damage, exc)
            for sha, ref, parents, when, author, message in gitrefs.parse_ref_records(rows):
                if sha not in records and sha in id_of:
                    records[sha] = commits.record_from_parts(sha, parents, when, author, message, id_of.get)
        try:
            blob_objs = blob_batch.result()
        except DamagedObjectError:   # one by one, so each damaged note is named and the rest read
            blob_objs = [self.reader.read_or_damage(b) for b in new_blobs]
        texts: dict[str, str] = {}
        damaged: set[str] = set()
        for b, o in zip(new_blobs, blob_objs):
            try:
                if isinstance(o, Exception):
                    raise o
                texts[b] = note_text(o, b)
            except WorkspaceDamagedError:
                damaged.add(b)
        parsed, slow = parse_notes_bulk(texts)
        for blob, objs in parsed.items():
            try:
                statuses[blob] = fold_objs(objs)
            except (ValueError, KeyError, TypeError):
                slow.append(blob)  # parse_note names the bad line
        slow_set = set(slow)
        views = []
        for leaf, sha in leaves.items():
            rec = records.get(sha)
            if rec is None or rec.id != leaf:
                if damaged_refs.is_candidate_leaf(session, leaf):   # a candidate's ref, not someone else's
                    damage.append(DamagedRef(session, leaf, candidate_ref(session, leaf), sha, (
                        f"points at the commit of {rec.id} ({sha[:12]})" if rec is not None else
                        f"points at {sha[:12]}, which is not a kbench candidate commit")))
                continue  # not a kbench candidate commit (someone else's ref in our namespace): skip it
            blob = blobs.get(sha)
            if replace and sha in replace:
                status, problem = replace[sha], None
            elif blob is None:
                status, problem = EMPTY_STATUS, None
            elif blob in statuses:
                status, problem = statuses[blob], None
            else:
                # a line that does not parse, or a blob that could not be read: read it alone (a concurrent
                # append may have replaced it since the listing), and name the damage if it is still there
                try:
                    if blob in slow_set:
                        status = fold(parse_note(texts[blob], self.reader.where(rec), sha))
                        statuses[blob] = status
                    else:
                        status = fold(self.reader.current_entries(rec))
                    problem = None
                except CorruptNoteError as exc:
                    if strict:
                        raise
                    status, problem = EMPTY_STATUS, str(exc)
            views.append(make(CandidateView, record=rec, status=status, problem=problem))
        if damage:
            views += self._damaged_views(session, damage, leaves, records, blobs)
        self.damaged[session] = damage
        if damage and strict:
            more = f" ({len(damage) - 1} more damaged ref(s) in session {session})" if len(damage) > 1 else ""
            raise WorkspaceDamagedError(damage[0].message + more, obj=damage[0].ref, candidate=damage[0].candidate,
                                        session=session, reason=damage[0].what)
        self.disk_cache.parsed(len(records) + len(statuses) - known)
        if len(records) > _CACHE_CAP or len(statuses) > _CACHE_CAP:
            self.records, self.statuses = {}, {}  # start afresh; running listings keep their own
        return views


    def _rows_without_missing(self, session: str, leaves: dict[str, str], unknown: list[str],
                              damage: list[DamagedRef], exc: gitio.GitCommandError) -> bytes:
        """The record rows of the unknown leaves whose objects git has: a ref naming a missing (or unreadable)
        object fails the whole `for-each-ref`, so those are set aside as damaged refs and the rest read again."""
        shas = [leaves[x] for x in unknown]
        try:
            objs = self.repo.read_batch(shas)
        except DamagedObjectError:
            objs = [self.reader.read_or_damage(x) for x in shas]
        gone = [leaf for leaf, o in zip(unknown, objs) if not isinstance(o, gitread.GitObject)]
        if not gone:
            raise _named_damage(exc, {sha: f"candidate {leaf}'s commit" for leaf, sha in leaves.items()}) from None
        for leaf in gone:
            sha = leaves.pop(leaf)
            if damaged_refs.is_candidate_leaf(session, leaf):
                damage.append(DamagedRef(session, leaf, candidate_ref(session, leaf), sha,
                                         f"points at {sha[:12]}, which git cannot read (missing or corrupt)",
                                         unreadable=True))
        rest = [x for x in unknown if x not in gone]
        if not rest:
            return b""
        try:
            return gitio.run_git(self.repo.git_dir, ["for-each-ref", f"--format={gitrefs.REF_RECORD_FORMAT}",
                                                     *[candidate_ref(session, x) for x in rest]]).stdout
        except gitio.GitCommandError as again:
            raise _named_damage(again, {sha: f"candidate {leaf}'s commit" for leaf, sha in leaves.items()}) from None

    def _damaged_views(self, session: str, damage: list[DamagedRef], leaves: dict[str, str],
                       records: dict[str, CandidateRecord | None], blobs: dict[str, str]) -> list[CandidateView]:
        """Find each damaged ref's candidate by the commit that names itself so (damaged_refs.find_commits), and
        list the ones found, their `problem` saying what is wrong. `damage` gets the commits found."""
        mine = {sha for sha in leaves.values()}
        key = lambda d: (session, d.candidate, d.points_at)  # noqa: E731
        todo = {d.candidate for d in damage if key(d) not in self._lost}
        if todo:
            parents = [p for sha in leaves.values() if (r := records.get(sha)) is not None
                       for p in r.parent_commits if p not in mine]
            annotated = [sha for sha in blobs if sha not in mine]
            found = damaged_refs.find_commits(self.repo, session, todo, [parents, annotated])
            for d in damage:
                self._lost.setdefault(key(d), found.get(d.candidate))
        views = []
        for i, d in enumerate(damage):
            sha = self._lost.get(key(d))
            damage[i] = d = dataclasses.replace(d, found=sha)
            rec = self.reader.record_at(sha) if sha else None
            if rec is None:
                continue
            try:
                status = fold(self.reader.current_entries(rec))
            except CorruptNoteError:
                status = EMPTY_STATUS
            views.append(make(CandidateView, record=rec, status=status, problem=f"workspace damaged: {d.message}"))
        return views


def _named_damage(exc: gitio.GitCommandError, labels: dict[str, str], fallback: str = "") -> WorkspaceError:
    """A git command that failed on an object: name the object (and what it is, where `labels` knows)."""
    shas = re.findall(r"\b[0-9a-f]{40}\b", exc.stderr)
    if not shas and not fallback:
        return exc
    sha = next((x for x in shas if x in labels), shas[0] if shas else "")
    what = labels.get(sha) or fallback or "an object"
    why = " ".join(exc.stderr.split())[:300]
    return WorkspaceDamagedError(f"{what} (object {sha or '?'}) cannot be read (git: {why}). {FSCK_HINT}.",
                                 obj=sha or None, reason=f"cannot be read (git: {why})")


_gc_guard = threading.Lock()
_gc_state = {"depth": 0, "was_enabled": False}


_FREEZE_AFTER = 20_000     # objects allocated inside the pause beyond which they are frozen at its end


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (process-wide, nesting across threads). A pause that built a
    big listing ends with gc.freeze(): its objects are long-lived and acyclic, and the first collection
    after the pause would otherwise walk every one of them (0.16 s for 10,000 candidates)."""
    with _gc_guard:
        if _gc_state["depth"] == 0:
            _gc_state["was_enabled"] = gc.isenabled()
            gc.disable()
        _gc_state["depth"] += 1
    try:
        yield
    finally:
        with _gc_guard:
            _gc_state["depth"] -= 1
            if _gc_state["depth"] == 0 and _gc_state["was_enabled"]:
                if gc.get_count()[0] > _FREEZE_AFTER:
                    gc.freeze()
                gc.enable()


def _session_info(name: str, root: str, head: str, best: str | None, count: int,
                  data: dict[str, Any], problem: str | None = None) -> SessionInfo:
    return SessionInfo(name=name, task=str(data.get("task", "?")), direction=str(data.get("direction", "?")),
                       proposer=str(data.get("proposer", "?")), model=data.get("model"),
                       created=str(data.get("created", "")), root=root, head=head, best=best, candidates=count,
                       description=str(data.get("description") or ""), config=dict(data.get("config") or {}),
                       task_format=str(data.get("task_format") or "native"), problem=problem)
