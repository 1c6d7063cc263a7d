"""A candidate's files: read back as an engine `Candidate`, written out into a folder (checkout), or
compared with another candidate's (diff). Reads only; every function takes a resolved record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.candidates import Candidate, detect_format
from engine.errors import CandidateError
from engine.workspace import commits, gitobjects, gitread
from engine.workspace.errors import WorkspaceError
from engine.workspace.reader import CandidateReader
from engine.workspace.records import CandidateRecord
from engine.workspace.repo import WorkspaceRepo


def candidate_files(reader: CandidateReader, rec: CandidateRecord) -> Candidate:
    """The candidate's own files (not the task's), as an engine Candidate ready to evaluate."""
    names, meta = reader.candidate_file_names(rec)
    files = {}
    for name in names:
        data = reader.repo.read_blob(f"{rec.commit}:{name}")
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


def prompt(repo: WorkspaceRepo, rec: CandidateRecord) -> str:
    """What the proposer was asked and answered (`.kbench/prompt.md`); empty where none was kept."""
    data = repo.read_blob(f"{rec.commit}:{commits.PROMPT_MD}")
    return data.decode("utf-8", "replace") if data is not None else ""


def search_state(reader: CandidateReader, rec: CandidateRecord) -> dict[str, Any] | None:
    """The evolution loop's state saved with this candidate (commit_candidate's `search_state`)."""
    state = reader.candidate_file_names(rec)[1].get("search")
    return state if isinstance(state, dict) else None


def checkout(reader: CandidateReader, rec: CandidateRecord, directory: str | Path, with_task: bool = False,
             force: bool = False) -> list[Path]:
    """Write the candidate's files (with `with_task`, the whole commit tree) into `directory`. Refuses
    to overwrite existing files unless `force`; nothing is written when it refuses."""
    names = None if with_task else reader.candidate_file_names(rec)[0]
    return write_out(reader.repo, rec.commit, names, directory, force=force, label=f"candidate {rec.id}")


def write_out(repo: WorkspaceRepo, commit: str, names: list[str] | None, directory: str | Path, *,
              force: bool = False, label: str = "") -> list[Path]:
    """Write the files `names` of `commit` (None: its whole tree) into `directory`; nothing is written when a
    file exists (unless `force`) or a path is unsafe."""
    tree = {e.path: (e.mode, e.sha) for e in gitread.ls_tree(repo.git_dir, commit) if e.type == "blob"}
    wanted = sorted(tree) if names is None else names
    for p in wanted:
        if p not in tree:
            raise WorkspaceError(f"{label}: file {p} is listed but missing from its commit")
        if p.startswith("/") or any(part in ("", ".", "..", ".git") for part in p.split("/")):
            raise WorkspaceError(f"{label}: refusing to write the unsafe path {p!r}")
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise WorkspaceError(f"{target}: exists and is not a folder")
    clashes = [p for p in wanted if (target / p).exists() or (target / p).is_symlink()]
    if clashes and not force:
        raise WorkspaceError(f"{target}: would overwrite {', '.join(clashes[:5])}"
                             f"{' …' if len(clashes) > 5 else ''}; nothing written (use --force)")
    objs = repo.read_batch([tree[p][1] for p in wanted])
    written = []
    for p, obj in zip(wanted, objs):
        if obj is None:
            raise WorkspaceError(f"{label}: object of {p} is missing")
        dest = target / p
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink():
            dest.unlink()
        dest.write_bytes(obj.data)
        if tree[p][0] == gitobjects.MODE_EXEC:
            dest.chmod(0o755)
        written.append(dest)
    return written


def diff(repo: WorkspaceRepo, a: CandidateRecord, b: CandidateRecord, meta: bool = False,
         stat: bool = False) -> str:
    """Unified diff from candidate `a` to `b` (their files; with `meta`, `.kbench/` too)."""
    args = ["diff", "--no-color", "--no-ext-diff", "--no-textconv"]
    if stat:
        args.append("--stat")
    args += [a.commit, b.commit, "--"]
    if not meta:
        args += [".", f":(exclude){commits.META_DIR}"]
    return repo.git(*args).decode("utf-8", "replace")
