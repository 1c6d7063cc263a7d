"""Typed verdicts: what every pipeline stage returns and what the workspace stores as notes."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from engine import jsonable

STAGES = ("static", "llm_verify", "compile", "correctness", "timing", "integrity", "profile")


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIPPED = "skipped"
    SUSPICIOUS = "suspicious"


@dataclass(frozen=True)
class Verdict:
    stage: str
    status: Status
    reason: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in (Status.PASS, Status.SKIPPED)

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any], what: str = "") -> "Verdict":
        return jsonable.load(cls, obj, what)
