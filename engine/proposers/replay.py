"""The replay proposer: re-plays recorded proposals, one per call, in their recorded order.

Two sources:
- a directory of candidates (`DirectorySource`): the directory itself when it is one candidate, else its
  entries in natural name order: native folders (kernel.cu + binding.cpp, optional `.kbench/prompt.md`),
  single `.cu` / `.py` candidate files, and `*.json` files holding `Candidate.to_json()` (meta kept);
- a recorded session, through the small `SessionReader` protocol below; `WorkspaceReader` adapts
  engine.workspace.Workspace to it (candidates in generation order, their files and prompt.md).

Replay ignores the request's operator unless `match_operator` is set; it skips recordings whose source is
already in the session (`request.known_hashes`), and says EMPTY when the recording is spent. An entry that
looked like a candidate but cannot be read becomes a failed proposal naming the file; so does a link or a special
file among the entries (engine.userfiles: nothing is read through a link or from a FIFO or device).
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol

from engine import userfiles
from engine.candidates import NATIVE_FILES, Candidate, load_candidate
from engine.errors import CandidateError, KbenchError
from engine.proposers.base import Proposal, ProposalRequest, ProposalStatus, failed, parent_id, with_provenance

if TYPE_CHECKING:
    from engine.workspace import Workspace


@dataclass(frozen=True)
class RecordedProposal:
    candidate: Candidate | None  # None: the entry could not be read (see error)
    operator: str = "replay"
    parents: tuple[str, ...] = ()  # the parent ids in the recording
    rationale: str = ""
    prompt: str = ""  # the recorded .kbench/prompt.md, if any
    model: str | None = None
    origin: str = ""  # where it came from: a path, or a session's candidate id
    error: str = ""


class SessionReader(Protocol):
    """What replay needs from a recorded session; engine.workspace provides it through an adapter."""

    def recorded_proposals(self, session: str) -> Iterable[RecordedProposal]:
        """The session's candidates in the order they were proposed (generation, then number)."""


def recorded_from(record: Any, candidate: Candidate, prompt: str = "") -> RecordedProposal:
    """A RecordedProposal from a workspace record (duck-typed: id, operator, parents, rationale, model)."""
    return RecordedProposal(candidate=candidate, operator=getattr(record, "operator", "") or "replay",
                            parents=tuple(getattr(record, "parents", ()) or ()),
                            rationale=getattr(record, "rationale", "") or "", prompt=prompt,
                            model=getattr(record, "model", None), origin=str(getattr(record, "id", "")))


class WorkspaceReader:
    """SessionReader over engine.workspace.Workspace (duck-typed: candidates, files, prompt)."""

    def __init__(self, workspace: Workspace):
        self.workspace = workspace

    def recorded_proposals(self, session: str) -> Iterator[RecordedProposal]:
        for view in self.workspace.candidates(session, strict=False):
            rec = view.record
            try:
                cand = self.workspace.files(rec.id)
                prompt = self.workspace.prompt(rec.id)
            except KbenchError as exc:
                yield RecordedProposal(None, origin=rec.id, error=str(exc))
                continue
            yield recorded_from(rec, cand, prompt)


class DirectorySource:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __iter__(self) -> Iterator[RecordedProposal]:
        root = self.path
        if not root.is_dir():
            if root.is_file():
                yield _load_entry(root)
                return
            yield RecordedProposal(None, origin=str(root), error=f"{root}: no such file or folder")
            return
        if all(os.path.lexists(root / f) for f in NATIVE_FILES):
            yield _load_entry(root)
            return
        for entry in sorted(root.iterdir(), key=lambda p: _natural(p.name)):
            if entry.name.startswith(".") or not _looks_like_candidate(entry):
                continue
            why = "" if entry.is_dir() and not entry.is_symlink() else userfiles.refusal(entry)
            if why:      # a link or a FIFO among the recorded candidates is named, never followed or opened
                yield RecordedProposal(None, origin=str(entry), error=why)
                continue
            yield _load_entry(entry)


class SessionSource:
    def __init__(self, reader: SessionReader, session: str):
        self.reader, self.session = reader, session

    def __iter__(self) -> Iterator[RecordedProposal]:
        return iter(self.reader.recorded_proposals(self.session))


class ReplayProposer:
    name = "replay"
    operators = frozenset({"translate", "mutate", "crossover", "repair", "tune", "replay"})

    def __init__(self, source: Iterable[RecordedProposal], *, match_operator: bool = False):
        self.source = source
        self.match_operator = match_operator
        self._it: Iterator[RecordedProposal] | None = None
        self._done = 0
        self._lock = threading.Lock()

    @classmethod
    def from_directory(cls, path: str | Path, **kw: Any) -> "ReplayProposer":
        return cls(DirectorySource(path), **kw)

    @classmethod
    def from_session(cls, reader: SessionReader, session: str, **kw: Any) -> "ReplayProposer":
        return cls(SessionSource(reader, session), **kw)

    @classmethod
    def from_workspace(cls, workspace: Workspace, session: str, **kw: Any) -> "ReplayProposer":
        return cls(SessionSource(WorkspaceReader(workspace), session), **kw)

    def available(self) -> bool:
        return True

    def unavailable_reason(self) -> str:
        return ""

    def propose(self, request: ProposalRequest) -> Proposal:
        with self._lock:
            if self._it is None:
                self._it = iter(self.source)
            for rec in self._it:
                self._done += 1
                if rec.candidate is None:
                    return failed(self.name, request, f"cannot replay {rec.origin}: {rec.error}",
                                  data={"replay_of": rec.origin})
                if self.match_operator and rec.operator != request.operator:
                    continue
                if rec.candidate.source_hash in request.known_hashes:
                    continue
                return self._proposal(request, rec)
        return failed(self.name, request, f"the recording is spent ({self._done} entries replayed)",
                      status=ProposalStatus.EMPTY)

    def _proposal(self, request: ProposalRequest, rec: RecordedProposal) -> Proposal:
        assert rec.candidate is not None
        parents = tuple(parent_id(p) for p in request.parents) or rec.parents
        operator = rec.operator if rec.operator in self.operators else request.operator
        proposal = Proposal(status=ProposalStatus.OK, proposer=self.name, operator=operator, parents=parents,
                            rationale=rec.rationale or f"replayed from {rec.origin}",
                            prompt=rec.prompt or f"Replay of {rec.origin}.", model=rec.model,
                            data={"replay_of": rec.origin, "recorded_parents": list(rec.parents)})
        cand = replace(rec.candidate, meta={})
        return replace(proposal, candidate=with_provenance(cand, proposal, replay_of=rec.origin))


def _looks_like_candidate(p: Path) -> bool:
    if p.is_dir():
        return any((p / f).exists() for f in NATIVE_FILES)
    return p.suffix in (".cu", ".py", ".json")


def _load_entry(p: Path) -> RecordedProposal:
    try:
        if p.suffix == ".json" and p.is_file():
            obj = json.loads(userfiles.read_text(p, error=CandidateError))
            cand = Candidate.from_json(obj)
            meta = cand.meta
            return RecordedProposal(cand, operator=str(meta.get("operator") or "replay"),
                                    parents=tuple(meta.get("parents") or ()), rationale=str(meta.get("rationale") or ""),
                                    model=meta.get("model"), origin=str(p))
        cand = load_candidate(p)
        prompt_file = (p if p.is_dir() else p.parent) / ".kbench" / "prompt.md"
        prompt = userfiles.read_text(prompt_file, error=CandidateError) \
            if p.is_dir() and os.path.lexists(prompt_file) else ""
        return RecordedProposal(cand, prompt=prompt, origin=str(p))
    except (KbenchError, OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        return RecordedProposal(None, origin=str(p), error=str(exc))


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]
