"""The entries of a candidate's note in `refs/notes/kbench`, one JSON object per line, appended, never
rewritten: typed, frozen dataclasses and the line each writes.

Every line has `kind` and `at` (UTC, ISO 8601) and `v` (schema version). Kinds: `verdict`, `measurement`,
`override`, `event`. A plain-text line a person appended is a `Comment`; a JSON line of a kind a later
kbench wrote is kept as an `UnknownEntry`. Reading notes back is `note_parsing`'s job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Union

from engine.verdict import Status, Verdict
from engine.workspace.errors import WorkspaceError
from engine.workspace.records import make, now_iso

NOTE_SCHEMA = 1

_STATUS = {s.value: s for s in Status}


def status_of(value: Any) -> Status:
    try:
        return _STATUS[value]
    except (KeyError, TypeError):
        raise ValueError(f"{value!r} is not a status ({', '.join(_STATUS)})") from None


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


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)
