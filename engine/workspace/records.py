"""What the workspace stores and returns: typed, frozen dataclasses, the ref names and candidate ids, and
the JSON-lines schema of `refs/notes/kbench`.

A note is one JSON object per line, appended, never rewritten. Every line has `kind` and `at` (UTC, ISO
8601) and `v` (schema version). Kinds: `verdict`, `measurement`, `override`, `event`. A line that does
not start with `{` (someone ran `git notes --ref kbench append -m "looks fine"`) is a `comment`; a line
that starts with `{` and does not parse, or lacks a field its kind needs, is a corrupt note and reading it
raises `CorruptNoteError`. Unknown kinds (written by a later kbench) are kept as `UnknownEntry`.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Union

from engine.verdict import Status, Verdict
from engine.workspace.errors import CorruptNoteError, WorkspaceError

NOTE_SCHEMA = 1

# ------------------------------------------------------------------------------------------- naming

NOTES_REF = "refs/notes/kbench"
CANDIDATE_NS = "refs/kbench/"
BRANCH_NS = "refs/heads/sessions/"
ROOT_LEAF = "root"

_SESSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
CANDIDATE_ID_RE = re.compile(r"^(?P<session>.+)-g(?P<gen>\d+)-(?P<n>\d+)$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+/@-]{0,79}$")


def check_session_name(name: str) -> str:
    if (not isinstance(name, str) or not _SESSION_RE.match(name) or ".." in name or name.endswith(".lock")
            or name.endswith(".") or name == ROOT_LEAF):
        raise WorkspaceError(
            f"{name!r} is not a usable session name: use 1-63 letters, digits, '_', '.' or '-', starting with a "
            "letter or digit (it becomes part of git ref names and candidate ids).")
    return name


def check_token(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _TOKEN_RE.match(value):
        raise WorkspaceError(f"{kind} {value!r} is not a single word (letters, digits, '_.:+/@-').")
    return value


def root_ref(session: str) -> str:
    return f"{CANDIDATE_NS}{session}/{ROOT_LEAF}"


def candidate_ref(session: str, cid: str) -> str:
    return f"{CANDIDATE_NS}{session}/{cid}"


def branch_ref(session: str) -> str:
    return f"{BRANCH_NS}{session}"


def candidate_id(session: str, generation: int, n: int) -> str:
    return f"{session}-g{generation}-{n}"


def parse_candidate_id(cid: str) -> tuple[str, int, int] | None:
    m = CANDIDATE_ID_RE.match(cid)
    if not m:
        return None
    return m["session"], int(m["gen"]), int(m["n"])


def split_ref(ref: str) -> tuple[str, str] | None:
    """`refs/kbench/<session>/<leaf>` -> (session, leaf); None for anything else."""
    if not ref.startswith(CANDIDATE_NS):
        return None
    session, sep, leaf = ref[len(CANDIDATE_NS):].partition("/")
    if not sep or not leaf or "/" in leaf:
        return None
    return session, leaf


def make(cls, **fields):
    """Build a (frozen, non-slots) dataclass without its generated __init__: the listing path builds
    tens of thousands of these, and a frozen __init__ costs ~2 us each. Every field must be given."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


_STATUS = {s.value: s for s in Status}


def status_of(value: Any) -> Status:
    try:
        return _STATUS[value]
    except (KeyError, TypeError):
        raise ValueError(f"{value!r} is not a status ({', '.join(_STATUS)})") from None


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_from_epoch(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


# --------------------------------------------------------------------------------------- git objects


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


# --------------------------------------------------------------------------------------------- notes


@dataclass(frozen=True)
class VerdictNote:
    verdict: Verdict
    at: str = ""
    by: str = ""

    kind = "verdict"

    @property
    def stage(self) -> str:
        return self.verdict.stage

    def to_obj(self) -> dict[str, Any]:
        return {"v": NOTE_SCHEMA, "kind": "verdict", "at": self.at or now_iso(), "by": self.by,
                **self.verdict.to_json()}


@dataclass(frozen=True)
class ConfigTiming:
    """One config's timing: medians in milliseconds, candidate and baselines measured the same way."""

    config: str
    ms: float
    iqr_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None

    @property
    def speedup_eager(self) -> float | None:
        return self.eager_ms / self.ms if self.eager_ms and self.ms else None

    @property
    def speedup_compile(self) -> float | None:
        return self.compile_ms / self.ms if self.compile_ms and self.ms else None

    def to_obj(self) -> dict[str, Any]:
        return {"config": self.config, "ms": self.ms, "iqr_ms": self.iqr_ms, "eager_ms": self.eager_ms,
                "compile_ms": self.compile_ms}

    @classmethod
    def from_obj(cls, o: dict[str, Any]) -> "ConfigTiming":
        return make(cls, config=str(o["config"]), ms=float(o["ms"]), iqr_ms=_opt_float(o.get("iqr_ms")),
                    eager_ms=_opt_float(o.get("eager_ms")), compile_ms=_opt_float(o.get("compile_ms")))


@dataclass(frozen=True)
class Measurement:
    """A timing run: geometric-mean speedups over configs, per-config timings, and where it ran."""

    speedup_eager: float | None
    speedup_compile: float | None = None
    configs: tuple[ConfigTiming, ...] = ()
    gpu: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str = ""
    at: str = ""
    by: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    kind = "measurement"

    @property
    def speedup(self) -> float | None:
        """The fitness kbench ranks by: geomean speedup over eager PyTorch."""
        return self.speedup_eager

    def to_obj(self) -> dict[str, Any]:
        return {"v": NOTE_SCHEMA, "kind": "measurement", "at": self.at or now_iso(), "by": self.by,
                "speedup_eager": self.speedup_eager, "speedup_compile": self.speedup_compile,
                "configs": [c.to_obj() for c in self.configs], "gpu": self.gpu, "driver": self.driver,
                "torch": self.torch, "cuda": self.cuda, "data": self.data}

    @classmethod
    def from_obj(cls, o: dict[str, Any]) -> "Measurement":
        return make(cls, speedup_eager=_opt_float(o.get("speedup_eager")),
                    speedup_compile=_opt_float(o.get("speedup_compile")),
                    configs=tuple(ConfigTiming.from_obj(c) for c in o.get("configs") or ()),
                    gpu=str(o.get("gpu", "")), driver=str(o.get("driver", "")), torch=str(o.get("torch", "")),
                    cuda=str(o.get("cuda", "")), at=str(o.get("at", "")), by=str(o.get("by", "")),
                    data=dict(o.get("data") or {}))


@dataclass(frozen=True)
class Override:
    """A person's judgement over a stage's verdict: who, why, from what, to what. Appended, never a rewrite."""

    stage: str
    from_status: str | None       # the effective status when overridden; None where the stage had none
    to_status: Status
    by: str
    reason: str
    at: str = ""

    kind = "override"

    def to_obj(self) -> dict[str, Any]:
        return {"v": NOTE_SCHEMA, "kind": "override", "at": self.at or now_iso(), "by": self.by,
                "stage": self.stage, "from": self.from_status, "to": self.to_status.value, "reason": self.reason}


@dataclass(frozen=True)
class Event:
    """Anything else worth keeping on a candidate: exported, re-queued, annotated by a tool."""

    event: str
    data: dict[str, Any] = field(default_factory=dict)
    at: str = ""
    by: str = ""

    kind = "event"

    def to_obj(self) -> dict[str, Any]:
        return {"v": NOTE_SCHEMA, "kind": "event", "at": self.at or now_iso(), "by": self.by,
                "event": self.event, "data": self.data}


@dataclass(frozen=True)
class Comment:
    """A plain-text line a person added with `git notes append`; shown, never interpreted."""

    text: str
    kind = "comment"

    def to_obj(self) -> dict[str, Any]:
        return {"kind": "comment", "text": self.text}


@dataclass(frozen=True)
class UnknownEntry:
    """A JSON line of a kind this version does not know (kept, shown raw)."""

    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    def to_obj(self) -> dict[str, Any]:
        return dict(self.obj)


NoteEntry = Union[VerdictNote, Measurement, Override, Event, Comment, UnknownEntry]
WRITABLE = (VerdictNote, Measurement, Override, Event)


def entry_line(entry: NoteEntry) -> str:
    if not isinstance(entry, WRITABLE):
        raise WorkspaceError(f"cannot write a {type(entry).__name__} note; write verdicts, measurements, "
                             "overrides or events")
    return json.dumps(entry.to_obj(), ensure_ascii=False, separators=(",", ":"), default=str)


def parse_note(text: str, where: str = "", commit: str = "", skip_bad: bool = False) -> list[NoteEntry]:
    """Parse one note blob. `where` names the candidate and `commit` the annotated commit in errors.
    `skip_bad`: leave out lines that do not parse instead of raising (they stay in the note itself)."""
    entries: list[NoteEntry] = []
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue  # `git notes append` separates paragraphs with a blank line
        if not line.startswith("{"):
            entries.append(Comment(line))
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            entries.append(_entry_from_obj(obj))
        except (ValueError, KeyError, TypeError) as exc:
            if skip_bad:
                continue
            shown = line if len(line) <= 90 else line[:87] + "..."
            raise CorruptNoteError(
                f"{where or 'a candidate'}: line {i} of its refs/notes/kbench note cannot be read "
                f"({type(exc).__name__}: {exc}): {shown}  -- nothing was changed; fix or delete the line with "
                f"`git notes --ref kbench edit {commit or '<commit>'}`.") from None
    return entries


def parse_notes_bulk(texts: dict[str, str]) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Decode many notes at once, for listings: {key: [line objects]} for the notes whose every line is
    a JSON object (one C-level `json.loads` for all of them; `views.fold_objs` folds them), and the keys
    left for `parse_note` (comment lines, or anything the fast path cannot vouch for)."""
    fast: list[tuple[str, int]] = []
    parts: list[str] = []
    slow: list[str] = []
    for commit, text in texts.items():
        body = text.strip()
        if not body:
            fast.append((commit, 0))
            parts.append("[]")
            continue
        n = body.count("\n") + 1
        # Cheap C-level checks that every line is `{...}` (no blank, indented or comment lines).
        if (body[0] == "{" and body[-1] == "}" and body.count("\n{") == n - 1 and body.count("}\n") == n - 1
                and "\r" not in body):
            fast.append((commit, n))
            parts.append("[" + body.replace("\n", ",") + "]")
        else:
            slow.append(commit)
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        arrays = json.loads("[" + ",".join(parts) + "]")
    except ValueError:
        return out, slow + [c for c, _ in fast]
    if len(arrays) != len(fast):
        return out, slow + [c for c, _ in fast]
    for (commit, count), arr in zip(fast, arrays):
        if len(arr) == count and all(type(o) is dict for o in arr):
            out[commit] = arr
        else:
            slow.append(commit)  # parse_note will name the line
    return out, slow


def verdict_from_obj(obj: dict[str, Any]) -> VerdictNote:
    stage = obj["stage"]
    if type(stage) is not str:
        raise ValueError("stage is not a string")
    verdict = make(Verdict, stage=stage, status=status_of(obj["status"]), reason=str(obj.get("reason", "")),
                   data=dict(obj.get("data") or {}))
    return make(VerdictNote, verdict=verdict, at=str(obj.get("at", "")), by=str(obj.get("by", "")))


def override_from_obj(obj: dict[str, Any]) -> Override:
    frm = obj.get("from")
    return make(Override, stage=str(obj["stage"]), from_status=None if frm is None else str(frm),
                to_status=status_of(obj["to"]), by=str(obj.get("by", "")), reason=str(obj.get("reason", "")),
                at=str(obj.get("at", "")))


def event_from_obj(obj: dict[str, Any]) -> Event:
    return make(Event, event=str(obj["event"]), data=dict(obj.get("data") or {}), at=str(obj.get("at", "")),
                by=str(obj.get("by", "")))


def _entry_from_obj(obj: dict[str, Any]) -> NoteEntry:
    kind = obj.get("kind")
    if kind == "verdict":
        return verdict_from_obj(obj)
    if kind == "measurement":
        return Measurement.from_obj(obj)
    if kind == "override":
        return override_from_obj(obj)
    if kind == "event":
        return event_from_obj(obj)
    if not isinstance(kind, str) or not kind:
        raise ValueError("no 'kind'")
    return UnknownEntry(obj)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)
