"""One direction's kernel as an export takes it: the candidate, its entry point, where it came from and its verdict
(engine/export/plan.py gathers them; the writers render them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.candidates import Candidate
from engine.export.schema import CppEntry


@dataclass(frozen=True)
class KernelSource:
    """One direction's kernel and where it came from."""

    direction: str
    candidate: Candidate
    entry: CppEntry
    origin: str                          # one line for the README: "workspace candidate ln-g3-2 (commit …)"
    candidate_id: str | None = None
    commit: str | None = None
    session: str | None = None
    passing: bool = False
    why_not_passing: str = ""            # set when passing is False
    status: dict[str, Any] | None = None  # CandidateStatus.to_json() for workspace candidates

    @property
    def binding_file(self) -> str:
        """The file whose PYBIND11_MODULE exports the entry point (and which the op shim includes)."""
        return "binding.cpp" if self.candidate.format == "native" else self.candidate.main_file
