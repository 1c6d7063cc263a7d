"""Failed proposals: what an LLM was paid to answer and gave no candidate for, kept so that a person can read
the whole answer and salvage a nearly complete kernel.

Each one is a commit under `refs/kbench-failed/<session>/<id>`, outside `refs/kbench/`: it is no candidate,
so nothing that lists, ranks, evaluates or resumes candidates sees it. Its tree holds `.kbench/prompt.md`
(the prompt and the full raw answer: text, thinking summary, tool input), `.kbench/proposal.json` (why it
failed, the model, tokens and dollars) and the files the answer carried, as far as they got (a tool input cut
at max_tokens keeps its files up to the cut). Its parents are the candidates the proposal worked from, or
the session's root for a translation, so `git log` shows it where it belongs. Ids read
`<session>-g<generation>-f<n>`; `kbench log` lists them, `kbench show-candidate` prints one, `kbench
checkout` writes its files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from engine import jsonable
from engine.workspace import commits, files, gitobjects, gitrefs, writers
from engine.workspace.errors import WorkspaceError
from engine.workspace.reader import CandidateReader
from engine.workspace.records import now_iso
from engine.workspace.repo import WorkspaceRepo

FAILED_NS = "refs/kbench-failed/"
PROPOSAL_JSON = f"{commits.META_DIR}/proposal.json"
FAILED_ID_RE = re.compile(r"^(?P<session>.+)-g(?P<gen>\d+)-f(?P<n>\d+)$")


@dataclass(frozen=True)
class FailedProposal:
    id: str
    session: str
    generation: int
    operator: str
    proposer: str
    reason: str
    model: str | None = None
    error: str | None = None                 # the failure's kind: answer, too_long, invalid_request, ...
    parents: tuple[str, ...] = ()            # the candidates it worked from
    cost_usd: float = 0.0
    usage: dict[str, int] | None = None
    files: tuple[str, ...] = ()              # what the answer carried, as far as it got
    at: str = ""
    commit: str = ""

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)


def failed_ref(session: str, fid: str) -> str:
    return f"{FAILED_NS}{session}/{fid}"


def is_failed_id(query: str) -> bool:
    return bool(FAILED_ID_RE.match(query))


class FailedProposals:
    """The failed proposals of a workspace's sessions (Workspace.failed)."""

    def __init__(self, repo: WorkspaceRepo, reader: CandidateReader):
        self._repo = repo
        self._reader = reader

    def record(self, session: str, generation: int, *, operator: str, proposer: str, reason: str,
               prompt_md: str, drafts: Mapping[str, str], parents: Sequence[str] = (), model: str | None = None,
               error: str | None = None, cost_usd: float = 0.0, usage: dict[str, int] | None = None) -> FailedProposal:
        """Keep one failed proposal: its answer whole, its prompt, why it failed, and its drafts."""
        with self._repo.writing(), writers.write_guard(self._repo.git_dir, session):
            wr = self._repo
            root, _ = self._reader.root(session)
            parent_commits = [self._reader.resolve(p).commit for p in parents] or [root]
            tree_files: dict[str, Any] = {commits.check_rel_path(rel): wr.objects.blob(text)
                                          for rel, text in drafts.items()}
            tree_files[commits.PROMPT_MD] = wr.objects.blob(prompt_md.rstrip("\n") + "\n")
            taken = self._taken(session, generation)
            for n in range(max(taken, default=0) + 1, max(taken, default=0) + 9):
                fp = FailedProposal(f"{session}-g{generation}-f{n}", session, generation, operator, proposer,
                                    reason, model, error, tuple(parents), cost_usd, usage, tuple(sorted(drafts)),
                                    now_iso())
                tree_files[PROPOSAL_JSON] = wr.objects.blob(json.dumps(fp.to_json(), indent=2, default=str) + "\n")
                message = commits.format_message(
                    f"failed proposal · gen {generation} · {operator} · {commits.one_line(reason, 80)}",
                    reason,
                    [(commits.T_SESSION, session), (commits.T_GENERATION, str(generation)),
                     (commits.T_OPERATOR, operator), (commits.T_PROPOSER, proposer),
                     (commits.T_MODEL, model or "none"), ("Kbench-Failed-Proposal", fp.id)])
                who = gitobjects.Ident.now(f"kbench {proposer}", f"{proposer}@kbench.invalid")
                sha = wr.objects.write("commit", gitobjects.format_commit(
                    wr.objects.tree_from_files(tree_files), parent_commits, who, wr.committer(), message))
                try:
                    wr.update_refs([gitrefs.RefUpdate(failed_ref(session, fp.id), sha)], f"kbench: keep {fp.id}")
                except gitrefs.RefConflictError:
                    continue          # another writer took that n
                return replace(fp, commit=sha)
            raise WorkspaceError(f"could not allocate an id for a failed proposal in session {session!r}")

    def list(self, session: str) -> list[FailedProposal]:
        """The session's failed proposals, oldest first (by generation, then n)."""
        refs = self._repo.refs(f"{FAILED_NS}{session}/")
        found = [self._read(sha) for ref, sha in refs.items()]
        return sorted((f for f in found if f is not None), key=lambda f: (f.generation, _n(f.id)))

    def get(self, fid: str) -> FailedProposal:
        m = FAILED_ID_RE.match(fid)
        sha = self._repo.ref(failed_ref(m["session"], fid)) if m else None
        found = self._read(sha) if sha else None
        if found is None:
            raise WorkspaceError(f"no failed proposal {fid!r} in this workspace (`kbench log SESSION` lists them)")
        return found

    def prompt(self, fid: str) -> str:
        data = self._repo.read_blob(f"{self.get(fid).commit}:{commits.PROMPT_MD}")
        return data.decode("utf-8", "replace") if data is not None else ""

    def drafts(self, fid: str) -> dict[str, str]:
        """The files the answer carried, as far as they got."""
        fp = self.get(fid)
        out = {}
        for name in fp.files:
            data = self._repo.read_blob(f"{fp.commit}:{name}")
            if data is not None:
                out[name] = data.decode("utf-8", "replace")
        return out

    def checkout(self, fid: str, directory: str | Path, force: bool = False) -> list[Path]:
        """Write the files the answer carried into `directory` (files.write_out's rules: nothing is overwritten
        without `force`)."""
        fp = self.get(fid)
        return files.write_out(self._repo, fp.commit, list(fp.files), directory, force=force, label=fp.id)

    def _taken(self, session: str, generation: int) -> list[int]:
        prefix = f"{FAILED_NS}{session}/{session}-g{generation}-f"
        return [_n(ref) for ref in self._repo.refs(f"{FAILED_NS}{session}/") if ref.startswith(prefix)]

    def _read(self, sha: str) -> FailedProposal | None:
        data = self._repo.read_blob(f"{sha}:{PROPOSAL_JSON}")
        if data is None:
            return None
        try:
            obj = json.loads(data)
            return FailedProposal(**{**obj, "parents": tuple(obj.get("parents") or ()),
                                     "files": tuple(obj.get("files") or ()), "commit": sha})
        except (ValueError, TypeError):
            return None


def _n(ref_or_id: str) -> int:
    m = re.search(r"-f(\d+)$", ref_or_id)
    return int(m.group(1)) if m else 0
