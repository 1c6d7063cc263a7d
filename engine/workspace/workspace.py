"""`Workspace`: the public face of the git store. It holds no state of its own beyond caches of immutable
objects; commits are built by `commits`, notes by `notes`, folding and ranking by `views`, and every write
runs under the repository's writer lock (`repo.WriterLock`), so any number of threads (and processes,
each with its own Workspace) may call it at once."""

from __future__ import annotations

import gc
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from engine.candidates import Candidate, detect_format
from engine.errors import CandidateError
from engine.verdict import STAGES, Status, Verdict
from engine.workspace import commits, gitio, writers
from engine.workspace.errors import (CorruptNoteError, DamagedObjectError, UnknownCandidateError,
                                     UnknownSessionError, WorkspaceDamagedError, WorkspaceError)
from engine.workspace.listing_cache import ListingCache
from engine.workspace.notes import NotesStore, note_text, parse_listing
from engine.workspace.records import (CANDIDATE_NS, ROOT_LEAF, CandidateRecord, Event, Measurement, NoteEntry,
                                      Override, SessionInfo, VerdictNote, branch_ref, candidate_id,
                                      candidate_ref, check_session_name, check_token, entry_line, now_iso,
                                      make, parse_candidate_id, parse_note, parse_notes_bulk, root_ref,
                                      split_ref)
from engine.workspace.repo import WorkspaceRepo
from engine.workspace.views import (EMPTY_STATUS, CandidateStatus, CandidateView, best_of, better,
                                    by_generation, fold, fold_objs)

DEFAULT_DIR = "workspace"
FSCK_HINT = ("`kbench fsck` lists all damage and repairs what is safe; a lost object can be copied back from a "
             "clone of this workspace")
NOTE_HINT = ("Nothing was written over it. " + FSCK_HINT + "; `kbench evolve` and `kbench reevaluate` take "
             "--reevaluate-damaged to evaluate the candidate again (its note then goes on from a line naming the "
             "damaged object)")
_CACHE_CAP = 400_000
_NAMED_REFS_MAX = 256      # up to this many unknown candidates are read by name, more by the session's prefix


EXPORTS_DIR = "exports"


def default_export_dir(workspace: Path, name: str) -> Path:
    """Where `kbench export` writes package `name` when no --out is given: `<workspace>/exports/<name>`, beside
    the candidates it comes from and out of the kbench checkout and the current directory. The workspace
    repository ignores the folder (info/exclude), so its `git status` stays clean."""
    exclude = workspace / ".git" / "info" / "exclude"
    try:
        text = exclude.read_text() if exclude.is_file() else ""
        if f"/{EXPORTS_DIR}/" not in text.splitlines() and (workspace / ".git").is_dir():
            exclude.parent.mkdir(parents=True, exist_ok=True)
            exclude.write_text(text + ("" if not text or text.endswith("\n") else "\n") + f"/{EXPORTS_DIR}/\n")
    except OSError:
        pass   # a read-only repository: the export is still written, git status just lists it
    return workspace / EXPORTS_DIR / name


def default_path() -> Path:
    """$KBENCH_WORKSPACE, else ./workspace (the folder the kbench checkout ships with a README)."""
    env = os.environ.get("KBENCH_WORKSPACE")
    return Path(env).expanduser() if env else Path.cwd() / DEFAULT_DIR


class Workspace:
    """Sessions, candidates and their judgements in one git repository. Methods return dataclasses."""

    def __init__(self, repo: WorkspaceRepo):
        self._repo = repo
        self._notes = NotesStore(repo)
        self._roots: dict[str, tuple[str, str]] = {}        # session -> (root commit, root tree)
        self._task_entries: dict[str, list[gitio.TreeEntry]] = {}
        self._counters: dict[str, dict[int, int]] = {}      # session -> generation -> highest n seen
        self._records: dict[str, CandidateRecord | None] = {}  # commit sha -> record (commits are immutable)
        self._statuses: dict[str, CandidateStatus] = {}        # note blob sha -> folded status (same)
        self._cache_guard = threading.Lock()
        self._listing_cache = ListingCache(repo.git_dir)      # the two above, kept on disk between processes
        # The user said to go on over damaged notes (`--reevaluate-damaged`): appends then start a fresh note
        # that names the unreadable one, and resume evaluates such candidates again.
        self.accept_damage = False

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
            with _no_gc():
                self._listing_cache.save_if_worthwhile(self._records, self._statuses)
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

    def start_session(self, name: str, task: Any, direction: str = "forward", proposer: str = "anthropic",
                      model: str | None = None, config: dict[str, Any] | None = None,
                      description: str | None = None) -> SessionInfo:
        """Create session `name`: a root commit holding the task's files and `.kbench/session.json`, the
        ref `refs/kbench/<name>/root` and the branch `sessions/<name>` (at the root until a best exists)."""
        from engine.tasks.loader import load_task
        from engine.tasks.model import Task

        check_session_name(name)
        check_token("proposer", proposer)
        if not isinstance(task, Task):
            task = load_task(task)
        if direction not in task.directions:
            raise WorkspaceError(f"task {task.name!r} has no {direction} direction "
                                 f"(it has: {', '.join(task.directions) or 'none'})")
        files = _task_files(task)
        created = now_iso()
        session_json = {"schema": 1, "name": name, "task": task.name, "task_format": task.format,
                        "direction": direction, "proposer": proposer, "model": model, "created": created,
                        "description": description if description is not None else task.description,
                        "config": config or {}, "task_files": sorted(files), "task_json": task.to_json()}
        wr = self._repo
        with wr.writing(), writers.write_guard(self.git_dir, name):
            taken = [r for r in (root_ref(name), branch_ref(name)) if wr.ref(r)]
            if not taken and wr.refs(f"{CANDIDATE_NS}{name}/"):
                taken = [f"{CANDIDATE_NS}{name}/*"]
            if taken:
                raise WorkspaceError(f"session {name!r} already exists in {self.path} ({', '.join(taken)}); "
                                     "choose another name")
            root = commits.write_session_root(wr, name, files, session_json, task.name, direction, proposer,
                                              session_json["description"])
            wr.update_refs([gitio.RefUpdate(root_ref(name), root), gitio.RefUpdate(branch_ref(name), root)],
                           f"kbench: start session {name}")
        return self.session(name)

    def discard_empty_session(self, name: str) -> bool:
        """Remove a session that holds no candidate (a start that failed before its first commit), so a failed
        start leaves nothing behind. Its root commit stays in the object store until git gc; nothing is
        removed where any candidate exists. True where it was removed."""
        wr = self._repo
        with wr.writing(), writers.write_guard(self.git_dir, name):
            if set(wr.refs(f"{CANDIDATE_NS}{name}/")) - {root_ref(name)}:
                return False
            refs = {r: wr.ref(r) for r in (root_ref(name), branch_ref(name))}
            body = "".join(f"delete {r} {sha}\n" for r, sha in refs.items() if sha)
            if not body:
                return False
            gitio.run_git(wr.git_dir, ["update-ref", "-m", f"kbench: discard empty session {name}", "--stdin"],
                          input=body.encode())
        for cache in (self._roots, self._task_entries, self._counters):
            cache.pop(name, None)
        return True

    def sessions(self) -> list[SessionInfo]:
        """Every session, oldest first, with its candidate count and current best."""
        refs = self._repo.refs(CANDIDATE_NS, "refs/heads/sessions/")
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
            objs = self._repo.read_batch(revs)
        except DamagedObjectError:   # one by one, so each damaged session is named and the rest listed
            objs = [self._read_or_damage(r) for r in revs]
        out = []
        for i, n in enumerate(names):
            blob, head = objs[i], objs[len(names) + i]
            best = None
            if isinstance(head, gitio.GitObject) and head.type == "commit" and head.sha != roots[n]:
                best = commits.candidate_trailer(gitio.parse_commit(head.sha, head.data))
            data, problem = {}, None
            if isinstance(blob, gitio.GitObject):
                try:
                    data = json.loads(blob.data)
                except ValueError:
                    data = None
            if not isinstance(data, dict) or not isinstance(blob, gitio.GitObject) or isinstance(head, Exception):
                try:                 # say what exactly is wrong (or find a hand-made root without a record)
                    data = self._session_json(n)
                    self.session(n)
                except WorkspaceError as exc:
                    data, problem = data if isinstance(data, dict) else {}, str(exc)
            out.append(_session_info(n, roots[n], heads[n], best, counts.get(n, 0), data, problem))
        return sorted(out, key=lambda s: (s.created, s.name))

    def session(self, name: str) -> SessionInfo:
        root = self._root(name)[0]
        wr = self._repo
        head = wr.ref(branch_ref(name)) or root
        best = None
        if head != root:
            raw = wr.read_commit(head)
            best = commits.candidate_trailer(raw) if raw else None
        count = sum(1 for ref in wr.refs(f"{CANDIDATE_NS}{name}/") if not ref.endswith("/" + ROOT_LEAF))
        return _session_info(name, root, head, best, count, self._session_json(name))

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
            task_entries = self._task_entries_of(session)
            for _ in range(8):
                n = self._next_n(session, gen)
                cid = candidate_id(session, gen, n)
                sha = commits.write_candidate_commit(
                    wr, task_entries=task_entries, candidate=candidate, cid=cid, session=session,
                    generation=gen, operator=op, proposer=proposer, model=model,
                    subject=commits.candidate_subject(gen, op, heading), rationale=why, prompt=asked,
                    parents=parent_shas, author=gitio.Ident.now(*who), search_state=search_state)
                try:
                    wr.update_refs([gitio.RefUpdate(candidate_ref(session, cid), sha)], f"kbench: commit {cid}")
                except gitio.RefConflictError:
                    self._counters.pop(session, None)  # someone else took that id: rescan
                    continue
                self._counters.setdefault(session, {})[gen] = n
                break
            else:
                raise WorkspaceError(f"could not allocate a candidate id in session {session!r}")
        raw = wr.read_commit(sha)
        return commits.record_from_commit(raw, self._id_of_commit)

    def resolve(self, query: str) -> CandidateRecord:
        """A candidate from its full id, a unique id prefix, its ref, or any revision naming its commit."""
        q = (query or "").strip()
        if not q:
            raise UnknownCandidateError("no candidate given")
        wr = self._repo
        parsed = parse_candidate_id(q)
        if parsed and "/" not in q:
            sha = wr.ref(candidate_ref(parsed[0], q))
            if sha:
                rec = self._record_at(sha)
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
                return self._must_record(by_id[parts[1]], q)
        if q in by_id:
            return self._must_record(by_id[q], q)
        matches = sorted(i for i in by_id if i.startswith(q))
        if len(matches) == 1:
            return self._must_record(by_id[matches[0]], q)
        if len(matches) > 1:
            shown = ", ".join(matches[:8]) + (f" and {len(matches) - 8} more" if len(matches) > 8 else "")
            raise UnknownCandidateError(f"{q!r} is ambiguous: it starts {len(matches)} candidate ids ({shown})")
        sha = self._rev_parse(q)
        if sha:
            ids = {s: i for i, s in by_id.items()}
            if sha in ids:
                return self._must_record(sha, q)
            raw = wr.read_commit(sha)
            if raw is not None and commits.parse_message(raw.message).trailers.get(commits.T_ROOT):
                raise UnknownCandidateError(f"{q!r} is the root commit of a session, not a candidate")
        raise UnknownCandidateError(
            f"no candidate {q!r} in {self.path}: not a candidate id, a unique id prefix, a refs/kbench/ ref or a "
            "revision of a candidate commit (`kbench sessions` and `kbench log SESSION` list them)")

    candidate = resolve

    def lineage(self, query: str) -> list[CandidateRecord]:
        """The candidate and all its evolutionary ancestors, nearest first (breadth-first over parents)."""
        start = self.resolve(query)
        out, seen, queue = [start], {start.commit}, list(start.parent_commits)
        while queue:
            sha = queue.pop(0)
            if sha in seen:
                continue
            seen.add(sha)
            rec = self._record_at(sha)
            if rec is None:
                continue  # the session root
            out.append(rec)
            queue.extend(rec.parent_commits)
        return out

    def files(self, query: str) -> Candidate:
        """The candidate's own files (not the task's), as an engine Candidate ready to evaluate."""
        rec = self.resolve(query)
        names, meta = self._candidate_file_names(rec)
        files = {}
        for name in names:
            data = self._repo.read_blob(f"{rec.commit}:{name}")
            if data is None:
                raise WorkspaceError(f"candidate {rec.id}: file {name} is listed but missing from its commit")
            files[name] = data.decode("utf-8", "replace")
        fmt = meta.get("format")
        if fmt not in ("native", "robust-kbench", "kernelbench"):
            try:
                fmt = detect_format(files)
            except CandidateError:
                fmt = "native"
        provenance = {**dict(meta.get("meta") or {}), "id": rec.id, "commit": rec.commit, "session": rec.session,
                      "generation": rec.generation, "operator": rec.operator, "parents": list(rec.parents)}
        return Candidate(fmt, files, str(meta.get("name") or rec.id), provenance)

    def prompt(self, query: str) -> str:
        rec = self.resolve(query)
        data = self._repo.read_blob(f"{rec.commit}:{commits.PROMPT_MD}")
        return data.decode("utf-8", "replace") if data is not None else ""

    def checkout(self, query: str, directory: str | Path, with_task: bool = False,
                 force: bool = False) -> list[Path]:
        """Write the candidate's files (with `with_task`, the whole commit tree) into `directory`. Refuses
        to overwrite existing files unless `force`; nothing is written when it refuses."""
        rec = self.resolve(query)
        out = self._repo.git("ls-tree", "-r", "-z", "--full-tree", rec.commit)
        tree = {}
        for item in out.split(b"\0"):
            if not item:
                continue
            meta, _, path = item.partition(b"\t")
            mode, kind, sha = meta.decode().split()
            if kind == "blob":
                tree[path.decode("utf-8", "surrogateescape")] = (mode, sha)
        wanted = sorted(tree) if with_task else self._candidate_file_names(rec)[0]
        for p in wanted:
            if p not in tree:
                raise WorkspaceError(f"candidate {rec.id}: file {p} is listed but missing from its commit")
            if p.startswith("/") or any(part in ("", ".", "..", ".git") for part in p.split("/")):
                raise WorkspaceError(f"candidate {rec.id}: refusing to write the unsafe path {p!r}")
        target = Path(directory)
        if target.exists() and not target.is_dir():
            raise WorkspaceError(f"{target}: exists and is not a folder")
        clashes = [p for p in wanted if (target / p).exists() or (target / p).is_symlink()]
        if clashes and not force:
            raise WorkspaceError(f"{target}: would overwrite {', '.join(clashes[:5])}"
                                 f"{' …' if len(clashes) > 5 else ''}; nothing written (use --force)")
        objs = self._repo.read_batch([tree[p][1] for p in wanted])
        written = []
        for p, obj in zip(wanted, objs):
            if obj is None:
                raise WorkspaceError(f"candidate {rec.id}: object of {p} is missing")
            dest = target / p
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.is_symlink():
                dest.unlink()
            dest.write_bytes(obj.data)
            if tree[p][0] == gitio.MODE_EXEC:
                dest.chmod(0o755)
            written.append(dest)
        return written

    def diff(self, a: str, b: str, meta: bool = False, stat: bool = False) -> str:
        """Unified diff from candidate `a` to `b` (their files; with `meta`, `.kbench/` too)."""
        ra, rb = self.resolve(a), self.resolve(b)
        args = ["diff", "--no-color", "--no-ext-diff", "--no-textconv"]
        if stat:
            args.append("--stat")
        args += [ra.commit, rb.commit, "--"]
        if not meta:
            args += [".", f":(exclude){commits.META_DIR}"]
        return self._repo.git(*args).decode("utf-8", "replace")

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
                return self._append(rec, lines, self._entries_for_append(rec))

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
                current = self._entries_for_append(rec)
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
        return self._entries_for_append(rec)

    def status(self, query: str) -> CandidateStatus:
        return fold(self.notes(query))

    def view(self, query: str) -> CandidateView:
        rec = self.resolve(query)
        return CandidateView(rec, fold(self._entries_for_append(rec)))

    # --------------------------------------------------------------------------------------- lists

    def candidates(self, session: str, strict: bool = True) -> list[CandidateView]:
        """Every candidate of the session with its latest verdicts, by generation. Three git processes in
        all, whatever the number of candidates. With `strict` False a corrupt note does not raise: that
        candidate's view carries an empty status and the error in `problem`."""
        return self._views(session, strict, ordered=True)

    def generations(self, session: str) -> dict[int, list[CandidateView]]:
        return by_generation(self.candidates(session))

    def best(self, session: str) -> CandidateView | None:
        return best_of(self.candidates(session, strict=False))

    # ------------------------------------------------------------------------------------ internals

    def _root(self, session: str) -> tuple[str, str]:
        hit = self._roots.get(session)
        if hit:
            return hit
        check_session_name(session)
        raw = self._repo.read_commit(root_ref(session))
        if raw is None:
            known = sorted({p[0] for p in (split_ref(r) for r in self._repo.refs(CANDIDATE_NS)) if p})
            raise UnknownSessionError(f"no session {session!r} in {self.path} "
                                      f"(sessions: {', '.join(known) or 'none yet'})")
        with self._cache_guard:
            self._roots[session] = (raw.sha, raw.tree)
        return raw.sha, raw.tree

    def _session_json(self, session: str) -> dict[str, Any]:
        tree = self._root(session)[1]
        return self._record_json(tree, "session.json", f"session {session}'s record", session=session) or {}

    def _task_entries_of(self, session: str) -> list[gitio.TreeEntry]:
        hit = self._task_entries.get(session)
        if hit is None:
            hit = commits.task_entries_of_root(self._repo, self._root(session)[1])
            with self._cache_guard:
                self._task_entries[session] = hit
        return hit

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

    def _read_or_damage(self, rev: str) -> gitio.GitObject | None | WorkspaceDamagedError:
        try:
            return self._repo.reader.read(rev)
        except WorkspaceDamagedError as exc:
            return exc

    def _rev_parse(self, q: str) -> str | None:
        proc = gitio.run_git(self.git_dir, ["rev-parse", "--verify", "-q", "--end-of-options", f"{q}^{{commit}}"],
                             check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def _id_of_commit(self, sha: str) -> str | None:
        raw = self._repo.read_commit(sha)
        return commits.candidate_trailer(raw) if raw else None

    def _record_at(self, sha: str) -> CandidateRecord | None:
        raw = self._repo.read_commit(sha)
        return commits.record_from_commit(raw, self._id_of_commit) if raw else None

    def _must_record(self, sha: str, q: str) -> CandidateRecord:
        rec = self._record_at(sha)
        if rec is None:
            raise UnknownCandidateError(f"{q!r} points at commit {sha[:12]}, which carries no Kbench-Candidate "
                                        "trailer (not a kbench candidate)")
        return rec

    def _candidate_file_names(self, rec: CandidateRecord) -> tuple[list[str], dict[str, Any]]:
        raw = self._repo.read_commit(rec.commit)
        if raw is None:
            raise WorkspaceDamagedError(f"candidate {rec.id}'s commit (object {rec.commit}) is missing. {FSCK_HINT}.",
                                        obj=rec.commit, candidate=rec.id)
        meta = self._record_json(raw.tree, "candidate.json", f"candidate {rec.id}'s record", candidate=rec.id) or {}
        names = meta.get("files")
        if not isinstance(names, list) or not names:
            # A commit made by hand: everything but the task's files and .kbench/.
            task = {e.name for e in self._task_entries_of(rec.session)} if rec.session else set()
            out = self._repo.git("ls-tree", "-r", "-z", "--name-only", "--full-tree", rec.commit)
            names = [p for p in out.decode("utf-8", "surrogateescape").split("\0")
                     if p and p.split("/")[0] not in task and not p.startswith(commits.META_DIR + "/")]
        return [str(n) for n in names], meta

    def _where(self, rec: CandidateRecord) -> str:
        return f"candidate {rec.id} (commit {rec.commit[:12]})"

    def _current_entries(self, rec: CandidateRecord) -> list[NoteEntry]:
        try:
            text = self._notes.read(rec.commit)
        except WorkspaceDamagedError as exc:
            raise self._note_damage(rec, exc) from None
        return parse_note(text or "", self._where(rec), rec.commit)

    def _note_damage(self, rec: CandidateRecord, exc: WorkspaceDamagedError) -> CorruptNoteError:
        return CorruptNoteError(f"candidate {rec.id}'s note (object {exc.obj}) {exc.reason}. {NOTE_HINT}.",
                                obj=exc.obj, candidate=rec.id, session=rec.session, reason=exc.reason)

    def _entries_for_append(self, rec: CandidateRecord) -> list[NoteEntry]:
        """The entries a new note line is folded with. A damaged note raises, unless `accept_damage`: then
        its readable lines count (none, where the blob itself is lost) and the append goes ahead."""
        try:
            return self._current_entries(rec)
        except CorruptNoteError:
            if not self.accept_damage:
                raise
            try:
                text = self._notes.read(rec.commit)
            except WorkspaceDamagedError:
                return []
            return parse_note(text or "", self._where(rec), rec.commit, skip_bad=True)

    def _record_json(self, tree: str, name: str, label: str, **who: str) -> dict[str, Any] | None:
        """`.kbench/<name>` of a commit tree, parsed; None where the tree has none. Damage raises, named."""
        meta = next((e for e in self._repo.read_tree(tree) if e.name == commits.META_DIR and e.is_tree), None)
        entry = next((e for e in self._repo.read_tree(meta.sha) if e.name == name), None) if meta else None
        if entry is None:
            return None
        sha = entry.sha

        def bad(reason: str) -> WorkspaceDamagedError:
            return WorkspaceDamagedError(f"{label} (.kbench/{name}, object {sha}) {reason}. {FSCK_HINT}.",
                                         obj=sha, reason=reason, **who)

        try:
            obj = self._repo.reader.read(sha)
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

    def search_state(self, query: str) -> dict[str, Any] | None:
        """The evolution loop's state saved with this candidate (commit_candidate's `search_state`)."""
        rec = self.resolve(query)
        state = self._candidate_file_names(rec)[1].get("search")
        return state if isinstance(state, dict) else None

    def _append(self, rec: CandidateRecord, lines: list[str], current: list[NoteEntry]) -> CandidateStatus:
        """Under the writer lock: one notes commit, and the session branch moved if the best changed."""
        wr = self._repo
        new_entries = current + parse_note("\n".join(lines), self._where(rec), rec.commit)
        new_status = fold(new_entries)
        kinds = sorted({json.loads(l)["kind"] for l in lines})
        message = f"kbench: {'+'.join(kinds)} on {rec.id}\n"
        prepared = self._notes.prepare_append({rec.commit: lines}, message,
                                              over_damage=frozenset({rec.commit}) if self.accept_damage else
                                              frozenset())
        updates = [prepared.update]
        move = self._best_move(rec, fold(current), new_status)
        if move is not None:
            updates.append(move)
        wr.update_refs(updates, message.strip())
        return new_status

    def _best_move(self, rec: CandidateRecord, old: CandidateStatus,
                   new: CandidateStatus) -> gitio.RefUpdate | None:
        """Where `sessions/<session>` must go after `rec` changed from `old` to `new` (None: stays)."""
        wr = self._repo
        session = rec.session
        if not session:
            return None
        try:
            root = self._root(session)[0]
        except UnknownSessionError:
            return None
        branch = branch_ref(session)
        head = wr.ref(branch)
        head_rec = self._record_at(head) if head and head != root else None
        if head_rec is not None and head_rec.session != session:
            head_rec = None
        mine = CandidateView(rec, new)
        if head_rec is not None and head_rec.commit == rec.commit:
            if new.eligible and old.speedup is not None and (new.speedup or 0.0) >= old.speedup:
                return None
            best = best_of(self._views(session, strict=False, replace={rec.commit: new}))
            target = best.record.commit if best else root
        else:
            if not new.eligible:
                return None
            head_view = None
            if head_rec is not None:
                try:
                    head_view = CandidateView(head_rec, fold(self._current_entries(head_rec)))
                except CorruptNoteError:
                    head_view = None
            if not better(mine, head_view):
                return None
            target = rec.commit
        if target == head:
            return None
        return gitio.RefUpdate(branch, target, head) if head else gitio.RefUpdate(branch, target)

    def _views(self, session: str, strict: bool = True,
               replace: dict[str, CandidateStatus] | None = None, ordered: bool = False) -> list[CandidateView]:
        """All candidate views of a session in four git processes, two of them overlapped with the Python
        parsing. Commits and note blobs are immutable, so parsed records (by commit sha) and folded
        statuses (by note blob sha) are cached, in memory and on disk (ListingCache): a second listing
        only reads what changed. `ordered`: by generation, then number."""
        self._root(session)
        with _no_gc():  # tens of thousands of acyclic objects: the cyclic GC would double the time
            views = self._views_nogc(session, strict, replace)
            if ordered:   # inside: sorting allocates a key per view, which would wake the GC over all of them
                views.sort(key=lambda v: v.record.sort_key)
            return views

    def _views_nogc(self, session: str, strict: bool,
                    replace: dict[str, CandidateStatus] | None) -> list[CandidateView]:
        wr = self._repo
        prefix = f"{CANDIDATE_NS}{session}/"
        # git processes, overlapped: the notes tree listing and the candidate refs (sha + name only: cheap),
        # then the commit metadata (formatted by git) of the commits not parsed before, and the note blobs
        # not seen before.
        notes_listing = self._notes.start_listing()
        ref_list = gitio.PendingGit(wr.git_dir, ["for-each-ref", f"--format={commits.REF_LIST_FORMAT}", prefix])
        disk = self._listing_cache.load_once()        # first listing of this Workspace: what earlier ones parsed
        if disk is not None:                          # (read while the git processes run)
            with self._cache_guard:
                for have, add in ((self._records, disk[0]), (self._statuses, disk[1])):
                    for k, v in add.items():
                        have.setdefault(k, v)
        records, statuses = self._records, self._statuses  # this call's view of the caches
        known = len(records) + len(statuses)
        leaves: dict[str, str] = {}
        for sha, ref in commits.parse_ref_list(ref_list.result()):
            parts = split_ref(ref)
            if parts and parts[0] == session and parts[1] != ROOT_LEAF:
                leaves[parts[1]] = sha
        unknown = [leaf for leaf, sha in leaves.items() if sha not in records]
        ref_rows = None
        if unknown:   # a few: name them; many: the whole prefix
            patterns = [prefix] if len(unknown) > _NAMED_REFS_MAX else [candidate_ref(session, x) for x in unknown]
            ref_rows = gitio.PendingGit(wr.git_dir, ["for-each-ref", f"--format={commits.REF_RECORD_FORMAT}",
                                                     *patterns])
        try:
            blobs = parse_listing(notes_listing.result()) if notes_listing else {}
        except gitio.GitCommandError as exc:
            raise _named_damage(exc, {}, "the notes tree of refs/notes/kbench") from None
        new_blobs = list({blobs[sha] for sha in leaves.values() if sha in blobs} - statuses.keys())
        blob_batch = wr.start_batch(new_blobs)   # runs while the commit metadata is parsed
        if ref_rows is not None:
            id_of = {sha: leaf for leaf, sha in leaves.items()}
            try:
                rows = ref_rows.result()
            except gitio.GitCommandError as exc:
                raise _named_damage(exc, {sha: f"candidate {leaf}'s commit" for leaf, sha in leaves.items()}) \
                    from None
            for sha, ref, parents, when, author, message in commits.parse_ref_records(rows):
                if sha not in records and sha in id_of:
                    records[sha] = commits.record_from_parts(sha, parents, when, author, message, id_of.get)
        try:
            blob_objs = blob_batch.result()
        except DamagedObjectError:   # one by one, so each damaged note is named and the rest read
            blob_objs = [self._read_or_damage(b) for b in new_blobs]
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
                        status = fold(parse_note(texts[blob], self._where(rec), sha))
                        statuses[blob] = status
                    else:
                        status = fold(self._current_entries(rec))
                    problem = None
                except CorruptNoteError as exc:
                    if strict:
                        raise
                    status, problem = EMPTY_STATUS, str(exc)
            views.append(make(CandidateView, record=rec, status=status, problem=problem))
        self._listing_cache.parsed(len(records) + len(statuses) - known)
        if len(records) > _CACHE_CAP or len(statuses) > _CACHE_CAP:
            self._records, self._statuses = {}, {}  # start afresh; running listings keep their own
        return views


def _named_damage(exc: gitio.GitCommandError, labels: dict[str, str], fallback: str = "") -> WorkspaceError:
    """A git command that failed on an object: name the object (and what it is, where `labels` knows)."""
    import re

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


def _task_files(task: Any) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    root = Path(task.root)
    toml = root / "task.toml" if root.is_dir() else None
    if toml is not None and toml.is_file():
        files["task.toml"] = toml.read_bytes()
    for spec in task.directions.values():
        ref = Path(spec.reference_path)
        if ref.is_file() and ref.name not in files:
            files[ref.name] = ref.read_bytes()
    if not files:
        raise WorkspaceError(f"task {task.name!r}: none of its files could be read (root {root})")
    return files


def _session_info(name: str, root: str, head: str, best: str | None, count: int,
                  data: dict[str, Any], problem: str | None = None) -> SessionInfo:
    return SessionInfo(name=name, task=str(data.get("task", "?")), direction=str(data.get("direction", "?")),
                       proposer=str(data.get("proposer", "?")), model=data.get("model"),
                       created=str(data.get("created", "")), root=root, head=head, best=best, candidates=count,
                       description=str(data.get("description") or ""), config=dict(data.get("config") or {}),
                       task_format=str(data.get("task_format") or "native"), problem=problem)
