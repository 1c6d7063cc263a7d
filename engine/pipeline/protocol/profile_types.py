"""The profile child's request and result, typed (engine/pipeline/profiling.py writes the one and reads the other,
engine/pipeline/runner/profile_child.py the reverse).

The child runs jailed, where pydantic is out of reach: it reads its request and writes its result with plain
dataclasses and json. The parent reads the result strictly (engine.jsonable): the child ran the candidate's code,
which may have overwritten the file, so a file that does not parse is a failure with the reason, never an
exception.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import jsonable
from engine.errors import DataError

MAX_RESULT_BYTES = 1 << 20   # the child writes a few KiB; a larger file is forged
MAX_OPS = 64                 # the child keeps its top 8 rows
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class ProfileRequest:
    """The request file: what to run, on which config, how."""
    task: dict[str, Any]                  # Task.to_json()
    direction: str
    config: str
    mode: str                             # "ncu": run the candidate `launches` times; "torch": top device ops
    result_path: str
    candidate: dict[str, Any] | None = None   # the `load` message (runner_process.stage_candidate)
    launches: int = 1

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "ProfileRequest":
        return jsonable.load_trusted(cls, obj)   # read in the jail, without pydantic; the parent wrote it


@dataclass(frozen=True)
class OpRow:
    """One op (kernel or copy) with its own device time, per run."""
    name: str
    device_us: float
    calls: int


@dataclass
class ProfileResult:
    """The result file. `finished` is written last: without it the child died on the way."""
    finished: bool = False
    ok: bool = False
    error: str | None = None
    candidate_ops: list[OpRow] = field(default_factory=list)
    reference_ops: list[OpRow] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)   # not jsonable.dump: the child writes it, jailed without pydantic

    @classmethod
    def from_json(cls, obj: Any, what: str = "the profiler's result file") -> "ProfileResult":
        res = jsonable.load(cls, obj, what)
        if len(res.candidate_ops) > MAX_OPS or len(res.reference_ops) > MAX_OPS:
            raise DataError(f"{what}: more than {MAX_OPS} ops")
        if res.error is not None:
            res.error = res.error[:MAX_ERROR_CHARS]
        return res


def read_result(path: Path) -> tuple[ProfileResult, str]:
    """(the result, why it could not be read or ""). No file is an unfinished result (the child died before
    writing it); a file that is too large, not JSON or not a ProfileResult is the reason."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_RESULT_BYTES + 1)
    except FileNotFoundError:
        return ProfileResult(), ""
    except OSError as exc:
        return ProfileResult(), f"the profiler's result file could not be read: {exc}"
    if len(raw) > MAX_RESULT_BYTES:
        return ProfileResult(), f"the profiler's result file is over {MAX_RESULT_BYTES} bytes"
    try:
        return ProfileResult.from_json(json.loads(raw.decode())), ""
    except DataError as exc:    # before ValueError, which it is
        return ProfileResult(), str(exc)[:MAX_ERROR_CHARS]
    except ValueError as exc:   # json's and the decode's errors
        return ProfileResult(), f"the profiler's result file is not JSON: {str(exc)[:200]}"
