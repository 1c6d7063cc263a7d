"""`kbench fsck`: check every session's refs, notes and records against each other and against git's own
fsck; repair what is derived and safe to rebuild; name the rest and leave it alone.

Repaired (unless dry_run): the listing cache (`.git/kbench-listing.pickle`, derived from objects: deleted
and written afresh), a session branch that does not point at the session's best candidate (moved with a
compare-and-swap; its old position stays in the reflog), a writer record left by a process that is
provably gone, a candidate ref that does not name its candidate's commit while that commit is still in the
repository (it names itself: engine.workspace.damaged_refs; the ref is pointed back at it, a ref file git
cannot read is kept aside under .git/kbench-damaged-refs/). Never touched: objects, other refs, notes (a
damaged note is history: only a copy from a clone restores it), git's own `*.lock` files (another git
command may be running; the user removes them).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.workspace import claim_holders, damaged_refs, gitio, listing_cache, session_branch, writers
from engine.workspace.commits import candidate_trailer
from engine.workspace.errors import SessionBusyError, WorkspaceDamagedError, WorkspaceError
from engine.workspace.naming import CANDIDATE_NS, ROOT_LEAF, split_ref

OK, REPAIRED, DAMAGED, WARNING, NOTE = "ok", "repaired", "damaged", "warning", "note"
STALE_GIT_LOCK_S = 60.0      # a git lock file older than this is not a running command's


@dataclass(frozen=True)
class Finding:
    level: str           # ok | repaired | damaged | warning | note
    subject: str         # what it is about: "session ln", "candidate ln-g0-3", "git fsck", a file
    text: str


@dataclass
class FsckReport:
    workspace: Path
    findings: list[Finding] = field(default_factory=list)

    def add(self, level: str, subject: str, text: str) -> None:
        self.findings.append(Finding(level, subject, text))

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.level in (DAMAGED, WARNING)]

    @property
    def repaired(self) -> list[Finding]:
        return [f for f in self.findings if f.level == REPAIRED]

    @property
    def clean(self) -> bool:
        return not self.problems


def fsck(ws, dry_run: bool = False, progress: Callable[[str], None] | None = None) -> FsckReport:
    """Check the workspace `ws` (an engine.workspace.Workspace); repair what is safe unless `dry_run`."""
    report = FsckReport(ws.path)
    say = progress or (lambda _msg: None)
    say("git fsck --full")
    _git_fsck(ws, report)
    _git_locks(ws, report)
    _claims(ws, report, dry_run)
    sessions = sorted({p[0] for p in (split_ref(r) for r in ws._repo.refs(CANDIDATE_NS)) if p and p[1] == ROOT_LEAF})
    if not sessions:
        report.add(NOTE, "workspace", "no sessions yet")
    for name in sessions:
        say(f"session {name}")
        _session(ws, name, report, dry_run)
    _listing_cache(ws, report, dry_run)
    return report


# ------------------------------------------------------------------------------------------- checks


def _git_fsck(ws, report: FsckReport) -> None:
    proc = gitio.run_git(ws.git_dir, ["fsck", "--full", "--no-dangling", "--no-progress"], check=False)
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).decode(errors="replace").splitlines() if ln.strip()]
    bad = [ln for ln in lines if not ln.startswith(("notice:", "Checking", "dangling"))]
    if proc.returncode == 0 and not bad:
        report.add(OK, "git fsck", "git fsck --full finds every object whole and every ref valid")
        return
    refs = [ln for ln in bad if _candidate_ref_line(ln)]
    bad = [ln for ln in bad if ln not in refs]
    if refs and not bad:
        report.add(NOTE, "git fsck", f"{len(refs)} candidate ref(s) damaged; each is named under its session below")
        return
    for ln in bad[:40]:
        if _REF_LINE.match(ln):     # a ref naming no valid object: the ref is what is wrong, not an object
            report.add(DAMAGED, "git fsck", f"{ln} (not touched: point the ref at the right commit with "
                                            "`git update-ref`, or remove it if it is not wanted)")
            continue
        report.add(DAMAGED, "git fsck", f"{ln} (not touched: copy the object back from a clone of this workspace, "
                                        "e.g. `git fetch` from it or copy its file under .git/objects/)")
    if len(bad) > 40:
        report.add(DAMAGED, "git fsck", f"... and {len(bad) - 40} more lines of git fsck")
    if not bad:
        report.add(DAMAGED, "git fsck", f"git fsck exited {proc.returncode} without saying why")


_REF_LINE = re.compile(r"^error: (refs/\S+): ")


def _candidate_ref_line(line: str) -> bool:
    """A git fsck line about a kbench candidate ref (the session check below names it and its commit)."""
    m = _REF_LINE.match(line)
    parts = split_ref(m.group(1)) if m else None
    return bool(parts and damaged_refs.is_candidate_leaf(parts[0], parts[1]))


def _git_locks(ws, report: FsckReport) -> None:
    now = time.time()
    for path in sorted(Path(ws.git_dir).rglob("*.lock")):
        try:
            age = now - path.stat().st_mtime
        except OSError:
            continue
        rel = path.relative_to(Path(ws.git_dir).parent) if Path(ws.git_dir).name == ".git" else path
        if age < STALE_GIT_LOCK_S:
            report.add(NOTE, str(rel), f"git lock file {age:.0f} s old: a git command is probably writing now")
        else:
            report.add(WARNING, str(rel), f"git lock file left for {_age(age)}: no kbench writer holds it and it blocks "
                                          "writes to that ref. Not touched: if no git command is running in the "
                                          f"workspace, remove it (rm {path})")


def _claims(ws, report: FsckReport, dry_run: bool) -> None:
    for session, holder, age, locked in writers.claims_in(ws.git_dir):
        if holder is None:
            continue
        state = holder.state(age)
        if locked and state != "dead":
            report.add(NOTE, f"session {session}", f"being written by {holder.describe()}")
        elif locked:
            report.add(WARNING, f"session {session}", claim_holders.busy_message(session, holder, age))
        elif state == "alive":
            report.add(NOTE, f"session {session}", f"claimed by {holder.describe()} (its lock is free)")
        elif claim_holders.writing_elsewhere(holder, age):   # the claim's own rule: a writer there, not removed
            report.add(NOTE, f"session {session}", f"being written by {holder.describe()}, last seen {age:.0f} s "
                                                   "ago (another host: its record is kept while its heartbeat "
                                                   "is fresh)")
        elif dry_run:
            report.add(NOTE, f"session {session}", f"writer record of {holder.describe()}, which is gone: "
                                                   "would be removed")
        else:
            try:
                (claim_holders.claim_dir(ws.git_dir) / f"{session}.holder.json").unlink()
                report.add(REPAIRED, f"session {session}", f"removed the writer record of {holder.describe()}, "
                                                           "which is gone")
            except OSError:
                pass


def _session(ws, name: str, report: FsckReport, dry_run: bool) -> None:
    subject = f"session {name}"
    try:
        ws._session_json(name)
    except WorkspaceDamagedError as exc:
        report.add(DAMAGED, subject, f"{exc} (not touched)")
    try:
        views = ws.candidates(name, strict=False)
        refs = ws.damaged_refs(name)
    except WorkspaceError as exc:
        report.add(DAMAGED, subject, f"its candidates cannot be listed: {exc} (not touched)")
        return
    damaged = _damaged_refs(ws, name, refs, report, dry_run)
    if refs and not damaged:
        views = ws.candidates(name, strict=False)      # the refs restored: list the session again
    by_ref = {d.candidate for d in refs}
    for v in views:
        if v.id in by_ref:
            continue                                   # named with its ref above
        if v.problem:
            damaged += 1
            report.add(DAMAGED, f"candidate {v.id}", f"{v.problem} (not touched)")
            continue
        try:
            ws._candidate_file_names(v.record)
        except WorkspaceDamagedError as exc:
            damaged += 1
            report.add(DAMAGED, f"candidate {v.id}", f"{exc} (not touched)")
    # refs in the session's namespace that are not candidates: kbench ignores them; say so
    listed = {v.id for v in views} | by_ref
    for ref in ws._repo.refs(f"{CANDIDATE_NS}{name}/"):
        parts = split_ref(ref)
        if parts and parts[1] != ROOT_LEAF and parts[1] not in listed:
            report.add(WARNING, ref, "points at a commit that is not the candidate it names; kbench ignores it "
                                     "(not touched)")
    _branch(ws, name, views, damaged, report, dry_run)
    if not damaged:
        report.add(OK, subject, f"{len(views)} candidate(s): commits, records and notes readable")


def _damaged_refs(ws, name: str, refs, report: FsckReport, dry_run: bool) -> int:
    """Point each damaged candidate ref whose commit was found back at it; name the others. Returns how many
    are left damaged (a dry run leaves them all)."""
    left = 0
    for d in refs:
        if d.found is None:
            left += 1
            report.add(DAMAGED, d.ref, f"{d.message} (not touched)")
        elif dry_run:
            left += 1
            report.add(WARNING, d.ref, f"{d.what}; would be pointed back at {d.candidate}'s commit {d.found[:12]}, "
                                       "which names itself so")
        else:
            try:
                with ws._repo.writing(), writers.write_guard(ws.git_dir, name):
                    kept = damaged_refs.restore(ws.git_dir, ws._repo, d)
            except WorkspaceError as exc:
                left += 1
                report.add(WARNING, d.ref, f"{d.what}; pointing it back at {d.found[:12]} failed: {exc}")
                continue
            kept = f" (the damaged ref file is kept as {kept})" if kept else ""
            report.add(REPAIRED, d.ref, f"{d.what}; pointed back at {d.candidate}'s commit {d.found[:12]}, which "
                                        f"names itself so{kept}")
    return left


def _branch(ws, name: str, views, damaged: int, report: FsckReport, dry_run: bool) -> None:
    state = session_branch.branch_state(ws, name, views)
    if state.in_place:
        return
    ref, at, want_name = state.ref, state.at, state.want_name
    if damaged:
        report.add(WARNING, ref, f"{at}, not the best readable candidate ({want_name}); not re-pointed while "
                                 "the session has damaged candidates (the true best is unknown)")
        return
    if dry_run:
        report.add(WARNING, ref, f"{at}, not the session's best, {want_name}: would be re-pointed")
        return
    try:
        session_branch.repoint(ws, name, state, f"kbench fsck: {name} best is {want_name}")
    except SessionBusyError as exc:
        report.add(WARNING, ref, f"{at}, not the session's best, {want_name}; not re-pointed: {exc}")
        return
    except WorkspaceError as exc:
        report.add(WARNING, ref, f"{at}, not the session's best, {want_name}; re-pointing failed: {exc}")
        return
    report.add(REPAIRED, ref, f"{at}; re-pointed to the session's best, {want_name} (the old position stays in "
                              f"its reflog: git reflog {ref})")


def _listing_cache(ws, report: FsckReport, dry_run: bool) -> None:
    path = Path(ws.git_dir) / listing_cache.FILENAME
    if not path.exists():
        return
    problem = listing_cache.problem(ws.git_dir)
    if problem is None:
        report.add(OK, "listing cache", f"{path.name} loads")
        return
    if dry_run:
        report.add(WARNING, "listing cache", f"{path.name}: {problem}; would be rebuilt")
        return
    try:
        path.unlink()
        listing_cache.save(ws.git_dir, dict(ws._listing.records), dict(ws._listing.statuses))
    except OSError as exc:
        report.add(WARNING, "listing cache", f"{path.name}: {problem}; cannot rebuild it: {exc}")
        return
    report.add(REPAIRED, "listing cache", f"{path.name}: {problem}; rebuilt from the objects")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
