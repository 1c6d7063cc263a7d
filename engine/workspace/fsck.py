"""`kbench fsck`: check every session's refs, notes and records against each other and against git's own
fsck; repair what is derived and safe to rebuild; name the rest and leave it alone.

Repaired (unless dry_run): the listing cache (`.git/kbench-listing.pickle`, derived from objects: deleted
and written afresh), a session branch that does not point at the session's best candidate (moved with a
compare-and-swap; its old position stays in the reflog), a writer record left by a process that is
provably gone. Never touched: objects, candidate refs, notes (a damaged note is history: only a copy from a
clone restores it), git's own `*.lock` files (another git command may be running; the user removes them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.workspace import claim_holders, gitio, listing_cache, session_branch, writers
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
    for ln in bad[:40]:
        report.add(DAMAGED, "git fsck", f"{ln} (not touched: copy the object back from a clone of this workspace, "
                                        "e.g. `git fetch` from it or copy its file under .git/objects/)")
    if len(bad) > 40:
        report.add(DAMAGED, "git fsck", f"... and {len(bad) - 40} more lines of git fsck")
    if not bad:
        report.add(DAMAGED, "git fsck", f"git fsck exited {proc.returncode} without saying why")


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
    except WorkspaceError as exc:
        report.add(DAMAGED, subject, f"its candidates cannot be listed: {exc} (not touched)")
        return
    damaged = 0
    for v in views:
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
    listed = {v.id for v in views}
    for ref in ws._repo.refs(f"{CANDIDATE_NS}{name}/"):
        parts = split_ref(ref)
        if parts and parts[1] != ROOT_LEAF and parts[1] not in listed:
            report.add(WARNING, ref, "points at a commit that is not the candidate it names; kbench ignores it "
                                     "(not touched)")
    _branch(ws, name, views, damaged, report, dry_run)
    if not damaged:
        report.add(OK, subject, f"{len(views)} candidate(s): commits, records and notes readable")


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
