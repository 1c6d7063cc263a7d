"""What the app's screens display, built from engine records: the rows of the home screen's tables, a
session's listing with its per-generation statistics, one-line candidate states and re-evaluation summaries.

Plain dataclasses and formatting with no workspace or session of their own: kbench_tui.backend (the adapter
over the engine's session service) and kbench_tui.reevaluations build them, screens and widgets read them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.evolve.resume import INFRA_FAILURE
from engine.gpu_wait import WAITING_FOR_GPU, waiting_for_gpu
from engine.verdict import STAGES, Stage, effective

if TYPE_CHECKING:
    from engine.evolve.outcome import EvalOutcome
    from engine.workspace import CandidateStatus, CandidateView, Measurement


@dataclass(frozen=True)
class TaskRow:
    name: str
    directions: tuple[str, ...]
    configs: int
    tags: str
    error: str = ""
    ref: str = ""                    # what to start a session with: the name, or the folder of a $KBENCH_TASKS task
    folder: str = ""                 # set for the user's own tasks ($KBENCH_TASKS), shown beside the name

    @property
    def key(self) -> str:
        return self.ref or self.name


@dataclass(frozen=True)
class SessionRow:
    name: str
    task: str
    direction: str
    proposer: str
    candidates: int
    generation: int | None
    best: str | None
    best_speedup: float | None
    status: str                      # running / paused / waiting for a GPU (n) / idle / damaged (kbench fsck)
    damage: str = ""                 # what cannot be read, where the workspace is damaged (status: damaged)


@dataclass(frozen=True)
class GenerationStat:
    generation: int
    count: int
    best: float | None
    median: float | None


@dataclass
class SessionData:
    """What the session screen shows, built off the UI thread."""

    name: str
    views: list[CandidateView]                        # by generation
    index: dict[str, int] = field(default_factory=dict)   # id -> row
    gen_first: dict[int, int] = field(default_factory=dict)  # generation -> first row
    stats: list[GenerationStat] = field(default_factory=list)
    failed: int = 0                                   # failed proposals: LLM answers that gave no candidate


def summarize(name: str, views: list[CandidateView]) -> SessionData:
    data = SessionData(name, views)
    per: dict[int, list[float]] = {}
    counts: dict[int, int] = {}
    for i, v in enumerate(views):
        data.index[v.record.id] = i
        g = v.record.generation
        data.gen_first.setdefault(g, i)
        counts[g] = counts.get(g, 0) + 1
        if v.status.eligible:
            per.setdefault(g, []).append(v.status.speedup)
    data.stats = [GenerationStat(g, counts[g], max(per[g]) if g in per else None,
                                 statistics.median(per[g]) if g in per else None) for g in sorted(counts)]
    return data


COMPILING = "compiling"


def status_text(view: CandidateView, long_wait: str | None = None) -> str:
    """One word or two for a candidate's state in lists. `long_wait`: what its build said it waits on (a LongWait
    event: torch's precompiled header, a load_inline build); until its compile verdict it then reads
    "compiling", not "pending" or the static check's "static pass"."""
    st = view.status
    if view.problem:
        return "damaged (kbench fsck)"     # a note or a ref that cannot be read: the view's `problem` says which
    mark = "*" if st.overrides else ""
    j = st.judgement
    if j.blocked_by:
        s = st.stages[j.blocked_by[0]]
        return f"{s.status.value} {s.stage}{mark}"
    if long_wait and "compile" not in st.stages:
        return COMPILING
    if j.eligible:
        return f"ok{mark}"
    if st.speedup is not None:
        return f"not passed{mark}"      # measured, but a required stage has no pass from a check that ran
    if waiting_for_gpu(st):
        return WAITING_FOR_GPU        # compiled without a GPU; measured by a run on a GPU machine
    if st.events and st.events[-1].event == INFRA_FAILURE:
        return "infrastructure failure"   # the executor lost it; not judged (evaluated again on resume)
    if not st.stages:
        return "pending"
    last = list(st.stages.values())[-1]
    return f"{last.stage} {last.status.value}{mark}"


def waiting_count(views: list[CandidateView]) -> int:
    """How many of these candidates are compiled and waiting for a GPU (engine.gpu_wait)."""
    return sum(1 for v in views if not v.problem and waiting_for_gpu(v.status))


@dataclass(frozen=True)
class Reevaluation:
    status: CandidateStatus   # the candidate's status after the new notes
    summary: str         # what this evaluation found, in one line


def _reevaluation_summary(out: EvalOutcome, meas: Measurement | None) -> str:
    if meas is not None:
        return f"{meas.speedup_eager:.3f}x on {meas.gpu or 'the GPU'}"
    if out.failed_stage:
        return f"failed at {out.failed_stage}: {out.reason}"
    timing = effective(out.verdicts, Stage.TIMING)
    return "not measured" + (f": {timing.reason}" if timing is not None and timing.reason else "")


def stage_names() -> tuple[str, ...]:
    return STAGES
