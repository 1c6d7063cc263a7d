"""What a build returns: BuildResult (also what a cache entry's result.json holds), the failure kinds, and
BuildSummary, the part of a build that crosses a process boundary to an executor.
Standard library and engine.jsonable (which imports pydantic only when a result is written or read). Split from
engine/harness/build/stage.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from engine.jsonable import dump, load

FailureKind = Literal["compile", "link", "timeout", "internal", "invalid"]


# ---------------------------------------------------------------------------- results
@dataclass
class BuildResult:
    ok: bool
    format: str
    source_hash: str
    module_name: str | None
    so_path: Path | None
    seconds: float                                          # wall time of this call (lookup time on a hit)
    cache_hit: bool = False
    log: str = ""                                           # compiler output, trimmed and de-noised
    error: str | None = None                                # one paragraph: file:line and cause
    failure: FailureKind | None = None
    note: str | None = None
    steps: dict[str, float] = field(default_factory=dict)   # seconds per step of the build that made it;
                                                            # "nvcc/cxx (cached object)": 0.0 for a reused object
    pch_used: bool | None = None                            # native only: did g++ accept the PCH (None: no
                                                            # PCH, or binding.o came from the object cache)
    toolchain_key: str = ""
    entry_dir: Path | None = None                           # the cache entry (src/, build.log), if stored

    def to_json(self) -> dict[str, Any]:
        return dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "BuildResult":
        if isinstance(obj, dict):   # a path written as "" (or left out) reads as None, as it always did
            obj = {**obj, **{k: None for k in ("so_path", "entry_dir") if not obj.get(k)}}
        return load(cls, obj, "a build result")


@dataclass
class BuildSummary:
    """What an executor gets back from a build worker (a process of the pool, a Ray task): the part of a
    BuildResult the compile verdict is made from, without the paths, which name files on the worker's machine.
    A build_fn returns its to_json(); from_json also reads a stand-in's partial dict (the tests' fake builds),
    taking the defaults for what it leaves out."""
    ok: bool
    error: str | None = None
    log: str = ""                                           # the tail of BuildResult.log
    seconds: float | None = None                            # None: the worker never said (it died)
    cache_hit: bool = False
    steps: dict[str, float] = field(default_factory=dict)   # as BuildResult.steps

    LOG_TAIL: ClassVar[int] = 8000

    @classmethod
    def of(cls, result: BuildResult) -> "BuildSummary":
        return cls(ok=result.ok, error=result.error, log=(result.log or "")[-cls.LOG_TAIL:], seconds=result.seconds,
                   cache_hit=result.cache_hit, steps=dict(result.steps or {}))

    def to_json(self) -> dict[str, Any]:
        return dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "BuildSummary":
        if isinstance(obj, dict):   # a partial dict: a missing `ok` is False, a null anything its default
            obj = {"ok": False, **{k: v for k, v in obj.items() if v is not None}}
        return load(cls, obj, "a build summary")
