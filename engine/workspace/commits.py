"""Session roots and candidate commits, built from objects without an index or a work tree.

A session's root commit (no parents) holds the task's files and `.kbench/session.json`. A candidate
commit holds the candidate's files, the same task files (shared blobs) and `.kbench/prompt.md` plus
`.kbench/candidate.json`; its parents are its evolutionary parents (the root for a translation, two for
a crossover). The message is a subject, the proposer's rationale, then `Kbench-*` trailers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from engine.candidates import Candidate
from engine.workspace import gitobjects
from engine.workspace.crashpoints import crashpoint
from engine.workspace.errors import WorkspaceError
from engine.workspace.naming import parse_candidate_id
from engine.workspace.records import CandidateRecord, iso_from_epoch, make
from engine.workspace.repo import WorkspaceRepo

META_DIR = ".kbench"
SESSION_JSON = f"{META_DIR}/session.json"
PROMPT_MD = f"{META_DIR}/prompt.md"
CANDIDATE_JSON = f"{META_DIR}/candidate.json"

T_SESSION = "Kbench-Session"
T_CANDIDATE = "Kbench-Candidate"
T_GENERATION = "Kbench-Generation"
T_OPERATOR = "Kbench-Operator"
T_PROPOSER = "Kbench-Proposer"
T_MODEL = "Kbench-Model"
T_FORMAT = "Kbench-Format"
T_SOURCE = "Kbench-Source-Hash"
T_TASK = "Kbench-Task"
T_DIRECTION = "Kbench-Direction"
T_ROOT = "Kbench-Root"

_TRAILER_LINES = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*):(.*)$", re.MULTILINE)



# ------------------------------------------------------------------------------------------- messages


def one_line(text: str, limit: int = 120) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def format_message(subject: str, body: str, trailers: Sequence[tuple[str, str]]) -> str:
    parts = [one_line(subject) or "(no subject)"]
    body = (body or "").strip("\n")
    if body.strip():
        parts.append(body.rstrip())
    parts.append("\n".join(f"{k}: {one_line(v, 200)}" for k, v in trailers))
    return "\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class ParsedMessage:
    subject: str
    body: str
    trailers: dict[str, str]


def parse_message(message: str) -> ParsedMessage:
    """Subject, body and the trailers of the last paragraph (where every line of it is `Key: value`)."""
    text = message.strip("\n")
    subject, _, rest = text.partition("\n")
    rest = rest.strip("\n")
    if not rest:
        return ParsedMessage(subject.strip(), "", {})
    cut = rest.rfind("\n\n")
    body, last = (rest[:cut], rest[cut + 2:]) if cut >= 0 else ("", rest)
    found = _TRAILER_LINES.findall(last)
    if len(found) != last.count("\n") + 1:
        return ParsedMessage(subject.strip(), rest.strip(), {})
    trailers: dict[str, str] = {}
    for key, value in found:
        if key not in trailers:
            trailers[key] = value.strip()
    return ParsedMessage(subject.strip(), body.strip(), trailers)


def candidate_subject(generation: int, operator: str, title: str) -> str:
    return f"gen {generation} · {operator} · {one_line(title, 90)}"


# ---------------------------------------------------------------------------------------------- build


def check_rel_path(path: str) -> str:
    parts = path.split("/")
    if (not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts)
            or parts[0] in (META_DIR, ".git") or "\0" in path or "\n" in path):
        raise WorkspaceError(f"{path!r} cannot be a file of a candidate or task: use a relative path inside "
                             f"the candidate, not under {META_DIR}/ or .git/.")
    return path


def write_session_root(wr: WorkspaceRepo, session: str, task_files: Mapping[str, bytes],
                       session_json: dict[str, Any], task: str, direction: str, proposer: str,
                       description: str) -> str:
    files: dict[str, Any] = {check_rel_path(p): wr.objects.blob(data) for p, data in task_files.items()}
    files[SESSION_JSON] = wr.objects.blob(json.dumps(session_json, indent=2, ensure_ascii=False, default=str) + "\n")
    tree = wr.objects.tree_from_files(files)
    message = format_message(f"session {session} · {task} · {direction}", description,
                             [(T_SESSION, session), (T_TASK, task), (T_DIRECTION, direction),
                              (T_PROPOSER, proposer), (T_ROOT, "yes")])
    committer = wr.committer()
    return wr.objects.write("commit", gitobjects.format_commit(tree, [], committer, committer, message))


def task_entries_of_root(wr: WorkspaceRepo, root_tree: str) -> list[gitobjects.TreeEntry]:
    """The root tree's entries minus `.kbench/`: the task files every candidate commit carries."""
    return [e for e in wr.read_tree(root_tree) if e.name != META_DIR]


def write_candidate_commit(wr: WorkspaceRepo, *, task_entries: Sequence[gitobjects.TreeEntry], candidate: Candidate,
                           cid: str, session: str, generation: int, operator: str, proposer: str,
                           model: str | None, subject: str, rationale: str, prompt: str,
                           parents: Sequence[str], author: gitobjects.Ident,
                           search_state: dict[str, Any] | None = None) -> str:
    task_names = {e.name for e in task_entries}
    files: dict[str, Any] = {e.name: e for e in task_entries}
    for rel, text in candidate.files.items():
        check_rel_path(rel)
        if rel.split("/")[0] in task_names:
            raise WorkspaceError(f"candidate file {rel!r} would shadow the task's own {rel.split('/')[0]!r}; "
                                 "rename it")
        files[rel] = wr.objects.blob(text)
    files[PROMPT_MD] = wr.objects.blob(prompt if prompt.endswith("\n") else prompt + "\n")
    meta = {"id": cid, "format": candidate.format, "name": candidate.name, "files": sorted(candidate.files),
            "source_hash": candidate.source_hash, "meta": candidate.meta}
    if search_state is not None:
        meta["search"] = search_state
    files[CANDIDATE_JSON] = wr.objects.blob(json.dumps(meta, indent=2, ensure_ascii=False, default=str) + "\n")
    tree = wr.objects.tree_from_files(files)
    trailers = [(T_SESSION, session), (T_CANDIDATE, cid), (T_GENERATION, str(generation)),
                (T_OPERATOR, operator), (T_PROPOSER, proposer), (T_MODEL, model or "none"),
                (T_FORMAT, candidate.format), (T_SOURCE, candidate.source_hash)]
    if model:
        slug = re.sub(r"[^A-Za-z0-9.-]+", "-", model).strip("-") or "model"
        trailers.append(("Co-authored-by", f"{model} <{slug}@models.kbench.invalid>"))
    message = format_message(subject, rationale, trailers)
    crashpoint("before-commit-object")
    return wr.objects.write("commit", gitobjects.format_commit(tree, parents, author, wr.committer(), message))


# ----------------------------------------------------------------------------------------------- read


def record_from_commit(raw: gitobjects.RawCommit, id_of_commit: Callable[[str], str | None]) -> CandidateRecord | None:
    """A CandidateRecord from a commit carrying kbench trailers; None for any other commit."""
    return record_from_parts(raw.sha, raw.parents, raw.author.when, f"{raw.author.name} <{raw.author.email}>",
                             raw.message, id_of_commit)


def record_from_parts(sha: str, parent_commits: tuple[str, ...], when: int, author: str, message: str,
                      id_of_commit: Callable[[str], str | None]) -> CandidateRecord | None:
    msg = parse_message(message)
    t = msg.trailers
    cid = t.get(T_CANDIDATE)
    if not cid:
        return None
    parsed = parse_candidate_id(cid)
    session = t.get(T_SESSION) or (parsed[0] if parsed else "")
    try:
        generation = int(t.get(T_GENERATION, parsed[1] if parsed else 0))
    except ValueError:
        generation = parsed[1] if parsed else 0
    parents = tuple(p for p in (id_of_commit(p) for p in parent_commits) if p)
    model = t.get(T_MODEL)
    return make(
        CandidateRecord, id=cid, session=session, generation=generation, n=parsed[2] if parsed else 0,
        operator=t.get(T_OPERATOR, ""), proposer=t.get(T_PROPOSER, ""),
        model=None if model in (None, "", "none") else model, parents=parents, commit=sha,
        parent_commits=parent_commits, subject=msg.subject, rationale=msg.body,
        created=iso_from_epoch(when), format=t.get(T_FORMAT, ""), source_hash=t.get(T_SOURCE, ""),
        author=author)


def candidate_trailer(raw: gitobjects.RawCommit) -> str | None:
    return parse_message(raw.message).trailers.get(T_CANDIDATE)
