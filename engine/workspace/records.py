"""What the workspace reads back from its commits: `SessionInfo` (a session's root commit and refs) and
`CandidateRecord` (a candidate commit's trailers, parents and times), typed and frozen; and the helpers
every record type is built with: `make` (the listing's fast constructor) and the timestamps they carry."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from engine.workspace.naming import candidate_ref


def make(cls, **fields):
    """Build a (frozen, non-slots) dataclass without its generated __init__: the listing path builds
    tens of thousands of these, and a frozen __init__ costs ~2 us each. Every field must be given."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_from_epoch(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True)
class SessionInfo:
    name: str
    task: str
    direction: str
    proposer: str
    model: str | None
    created: str                    # ISO 8601 UTC
    root: str                       # root commit sha
    head: str                       # where sessions/<name> points now
    best: str | None                # candidate id at the branch head, None while it is the root
    candidates: int
    description: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    task_format: str = "native"
    problem: str | None = None      # its record is damaged (listings only; `Workspace.session` raises)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "task": self.task, "direction": self.direction, "proposer": self.proposer,
                "model": self.model, "created": self.created, "root": self.root, "head": self.head,
                "best": self.best, "candidates": self.candidates, "description": self.description,
                "config": self.config, "task_format": self.task_format, "problem": self.problem}


@dataclass(frozen=True)
class CandidateRecord:
    """A candidate commit as the workspace reads it back (trailers, parents, times)."""

    id: str
    session: str
    generation: int
    n: int
    operator: str
    proposer: str
    model: str | None
    parents: tuple[str, ...]        # candidate ids of its evolutionary parents (none: a translation)
    commit: str
    parent_commits: tuple[str, ...]
    subject: str
    rationale: str
    created: str                    # ISO 8601 UTC, the commit's author time
    format: str = ""
    source_hash: str = ""
    author: str = ""

    @property
    def ref(self) -> str:
        return candidate_ref(self.session, self.id)

    @property
    def sort_key(self) -> tuple[int, int, str]:
        return (self.generation, self.n, self.id)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "session": self.session, "generation": self.generation, "n": self.n,
                "operator": self.operator, "proposer": self.proposer, "model": self.model,
                "parents": list(self.parents), "commit": self.commit, "parent_commits": list(self.parent_commits),
                "subject": self.subject, "rationale": self.rationale, "created": self.created,
                "format": self.format, "source_hash": self.source_hash, "author": self.author}
