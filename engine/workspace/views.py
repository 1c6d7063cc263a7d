"""The read side: fold a candidate's note lines into what it stands at now, and rank candidates.

Folding goes line by line, oldest first. For each stage, the last `verdict` or `override` line for that
stage decides its effective status: an override after a verdict wins; a re-evaluation after an override
wins again (and the override stays in the history). The latest `measurement` is the one views rank by;
every earlier one stays visible in `measurements`.

Whether a candidate passed, and whether it is *eligible* to be a session's best, is `engine.verdict.judge`'s
rule over the effective statuses (CandidateStatus.judgement): in short, no stage `fail` or `suspicious`,
`compile` and `correctness` passed by checks that ran, and (eligible) a measured speedup. The best is the
eligible candidate with the highest geomean speedup over eager PyTorch (ties: the earlier generation, then
the earlier candidate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Sequence

from engine.verdict import (
    Judgement,
    Stage,
    Status,
    in_pipeline_order,
    judge,
    outcome_of,
)
from engine.workspace.note_entries import (Comment, Event, Measurement, NoteEntry, Override, UnknownEntry, VerdictNote,
                                           status_of)
from engine.workspace.note_parsing import event_from_obj, override_from_obj, verdict_from_obj
from engine.workspace.records import CandidateRecord, make


@dataclass(frozen=True)
class StageState:
    stage: str
    status: Status                     # effective: the last verdict or override for the stage
    verdict: VerdictNote | None        # the latest verdict (None where only an override exists)
    override: Override | None          # set where the effective status comes from an override
    verdicts: int = 1                  # how many verdicts the stage has had

    @property
    def overridden(self) -> bool:
        return self.override is not None

    @property
    def reason(self) -> str:
        if self.override is not None:
            return f"overridden by {self.override.by}: {self.override.reason}"
        return self.verdict.verdict.reason if self.verdict else ""

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "status": self.status.value, "reason": self.reason,
                "verdict": self.verdict.to_obj() if self.verdict else None,
                "override": self.override.to_obj() if self.override else None, "verdicts": self.verdicts}


@dataclass(frozen=True)
class CandidateStatus:
    stages: dict[str, StageState] = field(default_factory=dict)   # pipeline order, unknown stages last
    measurement: Measurement | None = None                          # the latest
    measurements: tuple[Measurement, ...] = ()
    overrides: tuple[Override, ...] = ()
    events: tuple[Event, ...] = ()
    comments: tuple[Comment, ...] = ()

    @property
    def speedup(self) -> float | None:
        return self.measurement.speedup_eager if self.measurement else None

    @property
    def speedup_compile(self) -> float | None:
        return self.measurement.speedup_compile if self.measurement else None

    @cached_property
    def judgement(self) -> Judgement:
        """engine.verdict.judge over the effective statuses and the latest measurement."""
        return judge({s: outcome_of(st.verdict.verdict if st.verdict else None,
                                    st.override.to_status if st.override else None)
                      for s, st in self.stages.items()}, self.speedup)

    @property
    def blocked(self) -> bool:
        """Some stage's effective status is fail or suspicious."""
        return self.judgement.blocked

    @property
    def passed(self) -> bool:
        return self.judgement.passed

    @property
    def eligible(self) -> bool:
        return self.judgement.eligible

    def status_of(self, stage: str) -> Status | None:
        s = self.stages.get(stage)
        return s.status if s else None

    def never_measured(self) -> str:
        """Why the candidate's correctness was never measured, or "" where a check ran (pass or fail).

        An override may change a verdict, never invent a measurement: a correctness `pass` that only an
        override gives, over a check that never ran (none, or skipped: no GPU), is a person's claim, not a
        measurement, and what relies on a measured kernel (export) still refuses it."""
        corr = self.stages.get(Stage.CORRECTNESS)
        ran = corr is not None and corr.verdict is not None and corr.verdict.verdict.status is not Status.SKIPPED
        if ran:
            return ""
        if corr is None or corr.verdict is None:
            what = "it has no correctness check"
        else:
            what = f"its correctness check never ran ({corr.verdict.verdict.reason})"
        if corr is not None and corr.override is not None:
            o = corr.override
            what += (f"; the `{o.to_status.value}` is an override by {o.by} ({o.reason!r}), and an override may "
                     "change a verdict, never invent a measurement")
        return what

    def to_json(self) -> dict[str, Any]:
        return {"stages": {k: v.to_json() for k, v in self.stages.items()},
                "speedup_eager": self.speedup, "speedup_compile": self.speedup_compile,
                "passed": self.passed, "eligible": self.eligible, "why_not": self.judgement.why_not,
                "measurement": self.measurement.to_obj() if self.measurement else None,
                "measurements": [m.to_obj() for m in self.measurements],
                "overrides": [o.to_obj() for o in self.overrides],
                "events": [e.to_obj() for e in self.events],
                "comments": [c.text for c in self.comments]}


EMPTY_STATUS = CandidateStatus()


def fold(entries: Sequence[NoteEntry]) -> CandidateStatus:
    states: dict[str, StageState] = {}
    measurements: list[Measurement] = []
    overrides: list[Override] = []
    events: list[Event] = []
    comments: list[Comment] = []
    for e in entries:
        if isinstance(e, VerdictNote):
            stage = e.verdict.stage
            prev = states.get(stage)
            states[stage] = make(StageState, stage=stage, status=e.verdict.status, verdict=e, override=None,
                                 verdicts=(prev.verdicts + 1) if prev else 1)
        elif isinstance(e, Override):
            prev = states.get(e.stage)
            states[e.stage] = make(StageState, stage=e.stage, status=e.to_status,
                                   verdict=prev.verdict if prev else None, override=e,
                                   verdicts=prev.verdicts if prev else 0)
            overrides.append(e)
        elif isinstance(e, Measurement):
            measurements.append(e)
        elif isinstance(e, Event):
            events.append(e)
        elif isinstance(e, Comment):
            comments.append(e)
        elif isinstance(e, UnknownEntry):
            pass
    states = _in_pipeline_order(states)
    return make(CandidateStatus, stages=states, measurement=measurements[-1] if measurements else None,
                measurements=tuple(measurements), overrides=tuple(overrides), events=tuple(events),
                comments=tuple(comments))


def fold_objs(objs: Sequence[dict[str, Any]]) -> CandidateStatus:
    """`fold` straight from decoded note lines (the listing path): the same result as
    `fold([entry for each line])`, building objects only for what the status keeps. Raises ValueError,
    KeyError or TypeError on a line `parse_note` would reject."""
    latest: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    overridden: dict[str, Override] = {}
    seen: dict[str, None] = {}
    measurements, overrides, events = [], [], []
    for o in objs:
        kind = o["kind"]
        if kind == "verdict":
            stage = o["stage"]
            if type(stage) is not str:
                raise ValueError("stage is not a string")
            status_of(o["status"])
            latest[stage] = o
            counts[stage] = counts.get(stage, 0) + 1
            overridden.pop(stage, None)
            seen[stage] = None
        elif kind == "override":
            ov = override_from_obj(o)
            overrides.append(ov)
            overridden[ov.stage] = ov
            seen[ov.stage] = None
        elif kind == "measurement":
            measurements.append(Measurement.from_obj(o))
        elif kind == "event":
            events.append(event_from_obj(o))
        elif type(kind) is not str or not kind:
            raise ValueError("no 'kind'")
    states: dict[str, StageState] = {}
    for stage in seen:
        v = latest.get(stage)
        note = verdict_from_obj(v) if v is not None else None
        ov = overridden.get(stage)
        states[stage] = make(StageState, stage=stage, status=ov.to_status if ov else note.verdict.status,
                             verdict=note, override=ov, verdicts=counts.get(stage, 0))
    states = _in_pipeline_order(states)
    return make(CandidateStatus, stages=states, measurement=measurements[-1] if measurements else None,
                measurements=tuple(measurements), overrides=tuple(overrides), events=tuple(events), comments=())



@dataclass(frozen=True)
class CandidateView:
    """A candidate and where it stands: what `kbench log` prints a row of."""

    record: CandidateRecord
    status: CandidateStatus
    problem: str | None = None         # a corrupt note, when listed with strict=False

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def generation(self) -> int:
        return self.record.generation

    @property
    def speedup(self) -> float | None:
        return self.status.speedup

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {"generation": r.generation, "id": r.id, "operator": r.operator, "proposer": r.proposer,
                "model": r.model, "parents": list(r.parents), "commit": r.commit, "subject": r.subject,
                "created": r.created,
                "verdicts": {k: v.status.value for k, v in self.status.stages.items()},
                "overridden": [k for k, v in self.status.stages.items() if v.overridden],
                "speedup_eager": self.status.speedup, "speedup_compile": self.status.speedup_compile,
                "measurements": len(self.status.measurements), "eligible": self.status.eligible,
                "problem": self.problem}


def rank_key(view: CandidateView) -> tuple:
    """Sort key, best first: highest speedup, then earlier generation, then earlier candidate."""
    return (-(view.status.speedup or 0.0), view.record.generation, view.record.n, view.record.id)


def best_of(views: Iterable[CandidateView]) -> CandidateView | None:
    eligible = [v for v in views if v.status.eligible]
    return min(eligible, key=rank_key) if eligible else None


def better(a: CandidateView, b: CandidateView | None) -> bool:
    """Is `a` (eligible) ranked above `b` (None or ineligible counts as nothing)?"""
    if not a.status.eligible:
        return False
    if b is None or not b.status.eligible:
        return True
    return rank_key(a) < rank_key(b)


def by_generation(views: Sequence[CandidateView]) -> dict[int, list[CandidateView]]:
    out: dict[int, list[CandidateView]] = {}
    for v in sorted(views, key=lambda v: v.record.sort_key):
        out.setdefault(v.record.generation, []).append(v)
    return out


def _in_pipeline_order(states: dict[str, StageState]) -> dict[str, StageState]:
    """Stages in pipeline order (engine.verdict.in_pipeline_order), then any others alphabetically."""
    if len(states) < 2:
        return states
    return {s: states[s] for s in in_pipeline_order(states)}
